# Count calls to MKL VML entry points (vms*/vmd*/vs*/vd*) made by hashes.py adam5 (native run)
import gdb, collections, subprocess
gdb.execute("set pagination off")
gdb.execute("run")   # stops at SIGTRAP raised after import torch
lib = ".venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so"
names = [l.split()[2] for l in subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True).stdout.splitlines()
         if len(l.split()) == 3 and __import__("re").match(r"^v(m?)[sd][A-Z][A-Za-z0-9]*$", l.split()[2])]
hits = collections.Counter()
class B(gdb.Breakpoint):
    def stop(self):
        hits[self.location] += 1; return False
for n in names: B(n, internal=True)
gdb.execute("signal 0")
print("VML calls:", dict(hits))
