"""The plugin's benchmarks: run each as a module from the repository root, e.g.
``python -m benchmarks.bench_linear`` (``make bench``); reports go to benchmarks/results."""
