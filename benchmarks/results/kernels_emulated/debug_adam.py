"""Localize where adam5 diverges (native vs qemu): hash intermediates of step 1 and isolated elementwise ops."""
import os, time, hashlib
import torch
torch.set_num_threads(1)
def h(*ts):
    m = hashlib.sha256()
    for t in ts: m.update(t.detach().contiguous().numpy().tobytes())
    return m.hexdigest()[:12]
g = torch.Generator().manual_seed(7)
x = torch.randn(256, 128, generator=g)
p = lambda k, *t: print(f"{k:24s} {h(*t)}", flush=True)
p("exp", torch.exp(x)); p("log(abs+1)", torch.log(x.abs() + 1)); p("sqrt(abs)", torch.sqrt(x.abs()))
p("rsqrt(abs+1)", torch.rsqrt(x.abs() + 1)); p("reciprocal", torch.reciprocal(x)); p("div", x / (x.abs() + 0.5))
p("relu", torch.relu(x)); p("sum(dim1)", x.sum(1)); p("mean(dim1)", x.mean(1)); p("var(dim1)", x.var(1))
p("softmax", torch.softmax(x, 1)); p("log_softmax", torch.log_softmax(x, 1))
p("layer_norm", torch.nn.functional.layer_norm(x, (128,)))
p("addcmul", torch.addcmul(x, x, x, value=0.1)); p("lerp", torch.lerp(x, x * 2, 0.1))
p("pow2", x.pow(2)); p("mul_scalar", x * 0.999)
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(128, 512), torch.nn.ReLU(), torch.nn.Linear(512, 128),
    torch.nn.LayerNorm(128), torch.nn.Linear(128, 100))
p("init_params", *model.parameters())
gx = torch.Generator().manual_seed(99)
xb = torch.randn(256, 128, generator=gx); y = torch.randint(0, 100, (256,), generator=gx)
h1 = model[0](xb); p("lin1", h1); a = model[1](h1); h2 = model[2](a); p("lin2", h2)
ln = model[3](h2); p("ln", ln); out = model[4](ln); p("logits", out)
loss = torch.nn.functional.cross_entropy(out, y); p("loss", loss)
loss.backward()
for i, prm in enumerate(model.parameters()): p(f"grad{i}{tuple(prm.shape)}", prm.grad)
for impl in ("foreach", "forloop"):
    m2 = [prm.detach().clone().requires_grad_() for prm in model.parameters()]
    for a_, b_ in zip(m2, model.parameters()): a_.grad = b_.grad.clone()
    opt = torch.optim.Adam(m2, lr=1e-3, foreach=(impl == "foreach"))
    opt.step(); p(f"adam1_{impl}", *m2)
    opt.step(); p(f"adam2_{impl}", *m2)
