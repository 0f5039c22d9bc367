"""Bit-exactness probe: SHA-256 of float32 matmul/bmm results and of 5 Adam steps.
Run with OMP_NUM_THREADS=1 MKL_NUM_THREADS=1. Prints one line per item."""
import os, sys, time, hashlib
t0 = time.time()
import torch
torch.set_num_threads(1)
torch.set_num_interop_threads(1)

def h(*ts):
    m = hashlib.sha256()
    for t in ts:
        m.update(t.detach().contiguous().numpy().tobytes())
    return m.hexdigest()[:16]

print(f"# torch {torch.__version__} import {time.time()-t0:.1f}s cap={torch.backends.cpu.get_cpu_capability()} "
      f"MKL_CBWR={os.environ.get('MKL_CBWR','-')} ATEN={os.environ.get('ATEN_CPU_CAPABILITY','-')}", flush=True)

# MKL's own view of the CPU, via symbols exported from libtorch_cpu.so (MKL is static in it)
import ctypes
try:
    L = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
    buf = ctypes.create_string_buffer(512); L.MKL_Get_Version_String(buf, 512)
    BR = {1:"OFF",2:"AUTO",3:"COMPATIBLE",4:"SSE2",6:"SSSE3",7:"SSE4_1",8:"SSE4_2",9:"AVX",10:"AVX2",11:"AVX512_MIC",12:"AVX512",13:"AVX512_MIC_E1",14:"AVX512_E1"}
    def br(v): return (BR.get(v & 0xffff, str(v)) + (",STRICT" if v & 0x10000 else "")) if v >= 0 else str(v)
    print(f"# mkl_version: {buf.value.decode()}")
    print(f"# mkl: intel_cpu_true={L.mkl_serv_intel_cpu_true()} cpu_detect={L.mkl_serv_cpu_detect()} "
          f"cbwr_branch={br(L.mkl_serv_cbwr_get(1))} cbwr_all=0x{L.mkl_serv_cbwr_get(-1) & 0xffffffff:x} cbwr_auto_branch={br(L.mkl_serv_cbwr_get_auto_branch())} "
          f"iszen={L.mkl_serv_cpuiszen()} isskl={L.mkl_serv_cpuisskl()}", flush=True)
except Exception as e:
    print(f"# mkl ctypes probe failed: {e!r}")

g = torch.Generator().manual_seed(1234)
def r(*s): return torch.randn(*s, generator=g, dtype=torch.float32)

only = sys.argv[1:] or None
def want(k): return only is None or k in only

# (a) matmuls: shapes of a small Transformer's linears, fwd + bwd
A, B = r(1024, 128), r(128, 512)          # x @ W^T  (fwd, d=128 -> ffn 512)
C, D = r(1024, 512), r(512, 128)          # ffn out / grad_input
E, F = r(128, 1024), r(1024, 512)         # grad_weight = x^T @ grad_out
Q, K = r(16, 64, 32), r(16, 32, 64)       # attention bmm
W = r(512, 128)
S1, S2 = r(37, 200), r(200, 77)           # odd/small sizes
V = r(128)
items = {
 "mm_1024x128@128x512": lambda: A @ B,
 "mm_1024x512@512x128": lambda: C @ D,
 "mm_128x1024@1024x512": lambda: E @ F,
 "linear_fwd_1024x128@W^T": lambda: torch.nn.functional.linear(A, W),
 "bmm_16x64x32@16x32x64": lambda: torch.bmm(Q, K),
 "mm_odd_37x200@200x77": lambda: S1 @ S2,
 "gemv_512x128@128": lambda: W @ V,
}
for k, f in items.items():
    if want(k):
        t = time.time(); out = f()
        print(f"{k:28s} {h(out)}  ({time.time()-t:.2f}s)", flush=True)

# (b) 5 Adam steps: MLP + LayerNorm + softmax CE
if want("adam5"):
    t = time.time()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(128, 512), torch.nn.ReLU(), torch.nn.Linear(512, 128),
        torch.nn.LayerNorm(128), torch.nn.Linear(128, 100))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gx = torch.Generator().manual_seed(99)
    x = torch.randn(256, 128, generator=gx); y = torch.randint(0, 100, (256,), generator=gx)
    losses = []
    for _ in range(5):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward(); opt.step(); losses.append(loss.item())
    print(f"{'adam5_params':28s} {h(*model.parameters())}  loss={losses[-1]!r} ({time.time()-t:.2f}s)", flush=True)
print(f"# total {time.time()-t0:.1f}s", flush=True)
