# The two commands of the README: `make demo` (the main job) and `make test`.
# Each sets up .venv on first use (scripts/install.sh) and is safe to run again.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test bench bench-lstm bench-nli install clean

demo: install
	$(PY) benchmarks/bench_linear.py

test: install
	$(PY) -m pytest

bench: install
	$(PY) benchmarks/bench_linear.py

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
