"""The GPU run's driver (scripts/gpu/run.py starts it): plain Python, no package beyond the standard
library, since it starts before the install part has made fairseq and the kit importable.

- modes.py: the parts in order, the GPU's and the CPU dry run's sizes and caps, the command line's over them
- cli.py: the command line, refused before anything runs where it cannot time a run
- clock.py: the run's budget, a part's deadline, a share of what is left
- processes.py: the processes the parts start, stopped at their deadline or when the command ends
- context.py: what every part takes (the mode, the folders, the environment, the report, the processes)
- report.py, markdown.py: report.json and report.md, rewritten after every step
- plan.py: the parts in order, each within its cap, its status reported whatever happens
- install.py, data.py, cuda_tests.py, training.py, benchmarks.py, quality.py: the parts; training and
  quality start the kit-side programs scripts/gpu/training.py and scripts/gpu/quality.py
"""
