"""Which of native/emulated torch.sqrt is correctly rounded? Saves result; compares with float64 sqrt rounded to f32."""
import sys, torch
torch.set_num_threads(1)
g = torch.Generator().manual_seed(7)
x = torch.randn(256, 128, generator=g).abs()
s = torch.sqrt(x); ref = torch.sqrt(x.double()).float()
print("sqrt: elements != correctly-rounded:", int((s != ref).sum()), "of", s.numel())
s2 = x.sqrt_() if False else torch.sqrt(x[:3, :5].contiguous()); print("small 15-elem sqrt != ref:", int((s2 != torch.sqrt(x[:3,:5].double()).float()).sum()))
torch.save(s, sys.argv[1])
