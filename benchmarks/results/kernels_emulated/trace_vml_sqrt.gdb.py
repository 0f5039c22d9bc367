# gdb python: single-step through vmsSqrt on a 64-element tensor, collect mnemonics executed
import gdb, collections
gdb.execute("set pagination off")
gdb.execute("set breakpoint pending on")
gdb.execute("break vmsSqrt")
gdb.execute("run")
frame = gdb.selected_frame(); arch = frame.architecture()
sp0 = int(gdb.parse_and_eval("$sp"))
cnt = collections.Counter(); funcs = collections.Counter()
for i in range(200000):
    pc = int(gdb.parse_and_eval("$pc"))
    ins = arch.disassemble(pc)[0]["asm"]
    cnt[ins.split()[0]] += 1
    f = gdb.selected_frame().name()
    if f: funcs[f] += 1
    if ins.startswith("ret") and int(gdb.parse_and_eval("$sp")) == sp0:
        break
    gdb.execute("stepi", to_string=True)
print("steps", i)
print("approx-instr:", {k: v for k, v in cnt.items() if "rcp" in k or "rsqrt" in k})
print("sqrt-instr:", {k: v for k, v in cnt.items() if "sqrt" in k})
print("top funcs:", funcs.most_common(8))
gdb.execute("kill")
