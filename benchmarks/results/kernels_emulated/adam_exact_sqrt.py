"""adam5 as in hashes.py, but with Tensor.sqrt / _foreach_sqrt replaced by an MKL-VML-rsqrtps-free exact sqrt
(float32 -> float64 sqrt -> float32, which is correctly rounded). Tests whether everything except VML sqrt is cross-vendor exact."""
import hashlib, torch
torch.set_num_threads(1)
_sqrt = torch.Tensor.sqrt
def exact_sqrt(t): return _sqrt(t.double()).to(t.dtype) if t.dtype == torch.float32 else _sqrt(t)
g = torch.Generator().manual_seed(7); x = torch.randn(256, 128, generator=g).abs()
print("f64-sqrt mismatches vs correctly rounded:", int((exact_sqrt(x) != torch.sqrt(x.double()).float()).sum()))
torch.Tensor.sqrt = exact_sqrt
torch._foreach_sqrt = lambda ts: [exact_sqrt(t) for t in ts]
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.ReLU(), torch.nn.Linear(512, 128),
                            torch.nn.LayerNorm(128), torch.nn.Linear(128, 100))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
gx = torch.Generator().manual_seed(99)
xb = torch.randn(256, 128, generator=gx); y = torch.randint(0, 100, (256,), generator=gx)
for _ in range(5):
    opt.zero_grad(); loss = torch.nn.functional.cross_entropy(model(xb), y); loss.backward(); opt.step()
m = hashlib.sha256()
for p in model.parameters(): m.update(p.detach().numpy().tobytes())
print("adam5_exact_sqrt", m.hexdigest()[:16])
