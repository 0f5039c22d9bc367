# gdb python for qemu-user gdbstub: wait for SIGTRAP, set bp at base+vmsSqrt, single-step through it, map pcs to kernel symbols
import gdb, os, collections, subprocess
gdb.execute("set pagination off")
gdb.execute("target remote :" + os.environ["QPORT"])
gdb.execute("continue")            # stops at SIGTRAP
base = int(open(os.environ["BASEFILE"]).read(), 16)
lib = ".venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so"
syms = []
for line in subprocess.run(["nm", "-S", lib], capture_output=True, text=True).stdout.splitlines():
    p = line.split()
    if len(p) == 4 and ("vml_kernel_sSqrt" in p[3] or p[3] == "vmsSqrt"):
        syms.append((int(p[0], 16), int(p[1], 16), p[3]))
off = [s for s in syms if s[2] == "vmsSqrt"][0][0]
gdb.execute(f"break *{base + off:#x}")
gdb.execute("signal 0")   # continue without delivering SIGTRAP
arch = gdb.selected_frame().architecture()
sp0 = int(gdb.parse_and_eval("$sp")); cnt = collections.Counter(); hit = collections.Counter()
for i in range(300000):
    pc = int(gdb.parse_and_eval("$pc")); ins = arch.disassemble(pc)[0]["asm"]
    cnt[ins.split()[0]] += 1
    for a, s, n in syms:
        if a <= pc - base < a + s: hit[n] += 1
    if ins.startswith("ret") and int(gdb.parse_and_eval("$sp")) == sp0: break
    gdb.execute("stepi", to_string=True)
print("steps", i)
print("approx-instr:", {k: v for k, v in cnt.items() if "rcp" in k or "rsqrt" in k})
print("sqrt-instr:", {k: v for k, v in cnt.items() if "sqrt" in k})
print("kernels:", hit.most_common())
gdb.execute("continue")
