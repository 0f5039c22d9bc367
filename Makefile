# The two commands of the README: `make demo` (the main job) and `make test`.
# Each sets up .venv on first use (scripts/install.sh) and is safe to run again.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test bench bench-lstm bench-nli install clean

# Multi30k en-de (bundled): prepare, train PHM-Transformer n=4 and its dense twin, translate
# the test set (beam 5, lenpen 0.6), score with sacrebleu, then the table and plot.
demo: install
	$(VENV)/bin/phm-run configs/demo
	$(VENV)/bin/phm-collect work/runs/demo --out work/reports/demo

test: install
	$(PY) -m pytest

bench: install
	$(PY) benchmarks/bench_linear.py
	$(PY) benchmarks/bench_translation.py

bench-lstm: install
	$(PY) benchmarks/bench_lstm.py

bench-nli: install
	$(PY) benchmarks/bench_nli.py

install: $(VENV)/.installed

$(VENV)/.installed: scripts/install.sh setup.py constraints.txt
	PYTHON=$(PYTHON) VENV=$(VENV) scripts/install.sh
	touch $@

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
