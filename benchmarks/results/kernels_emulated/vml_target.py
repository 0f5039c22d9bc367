import os, signal, sys, runpy, torch
os.kill(os.getpid(), signal.SIGTRAP)
sys.argv = ["hashes.py", "adam5"]; runpy.run_path("benchmarks/results/kernels_emulated/hashes.py", run_name="__main__")
