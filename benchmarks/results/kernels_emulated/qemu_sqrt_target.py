# Runs under qemu-x86_64 -g PORT: writes libtorch_cpu.so load base, traps to gdb, then calls torch.sqrt (-> MKL vmsSqrt)
import os, signal, torch
torch.set_num_threads(1)
x = torch.rand(64)
base = min(int(l.split('-')[0], 16) for l in open('/proc/self/maps') if l.rstrip().endswith('libtorch_cpu.so'))
open(os.environ['BASEFILE'], 'w').write(hex(base))
os.kill(os.getpid(), signal.SIGTRAP)
y = torch.sqrt(x)
print('sqrt done', flush=True)
