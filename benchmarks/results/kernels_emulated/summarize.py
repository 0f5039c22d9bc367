"""Build markdown tables from run_matrix.sh output dir."""
import sys, glob, os, re
d = sys.argv[1] if len(sys.argv) > 1 else "work/kernels_emulated"
rows = {}; mkl = {}; verb = {}
order_cpu = ["native", "EPYC-Milan", "EPYC", "Haswell", "Skylake-Client"]
order_cb = ["default", "AVX2", "AVX2_STRICT", "COMPATIBLE"]
items = []
for f in glob.glob(f"{d}/*.txt"):
    cpu, cb = os.path.basename(f)[:-4].split("_", 1)
    for l in open(f):
        if l.startswith("# mkl:"): mkl[(cpu, cb)] = l[7:].strip()
        elif not l.startswith("#") and l.strip():
            k, hsh = l.split()[:2]; rows[(cpu, cb, k)] = hsh
            if k not in items: items.append(k)
    v = f[:-4] + ".verbose"
    if os.path.exists(v):
        for l in open(v):
            if l.startswith("MKL_VERBOSE oneMKL"): verb[(cpu, cb)] = l.split("architecture", 1)[1].split(", Lnx")[0].strip()
            m = re.search(r"(CNR:\S+)", l)
            if m and "SGEMM" in l: verb[(cpu, cb)] = verb.get((cpu, cb), "") + " | " + m.group(1)
keys = [(c, b) for b in order_cb for c in order_cpu if any((c, b, i) in rows for i in items)]
label = lambda c: {"native": "native AMD (Zen3)", "EPYC-Milan": "qemu EPYC-Milan (AMD)", "EPYC": "qemu EPYC (AMD Zen1)",
                   "Haswell": "qemu Haswell (Intel)", "Skylake-Client": "qemu Skylake-Client (Intel)"}[c]
print("| MKL_CBWR | machine identity | " + " | ".join(items) + " |")
print("|---|---|" + "---|" * len(items))
for c, b in keys:
    print(f"| {b.replace('_', ',')} | {label(c)} | " + " | ".join(rows.get((c, b, i), "-") for i in items) + " |")
print()
print("| MKL_CBWR | machine identity | MKL's own view (ctypes) | MKL_VERBOSE header ISA / CNR field |")
print("|---|---|---|---|")
for c, b in keys:
    print(f"| {b.replace('_', ',')} | {label(c)} | {mkl.get((c, b), '-')} | {verb.get((c, b), '-')} |")
