# The two commands of the README: `make demo` (the main job) and `make test`.
# Each sets up .venv on first use (scripts/install.sh) and is safe to run again.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo results converged converged-report test test-fast test-gpu-plan lint bench bench-lstm gpu-wheels gpu-dry-run install clean

# Multi30k en-de (bundled): prepare, train PHM-Transformer n=4 and its dense twin, translate
# the test set (beam 5, lenpen 0.6), score with sacrebleu, then the table and plots.
demo: install
	$(VENV)/bin/phm-run configs/small/multi30k/transformer.yaml configs/small/multi30k/phm_n4.yaml
	$(VENV)/bin/phm-collect work/runs/small/multi30k --out work/reports/demo --title "Demo: Multi30k en-de"

# The README's Results: every model on the corpora this machine has, a small budget each
# (hours on 2 CPU cores); resumes what is done. Reports in results/.
results: install
	$(VENV)/bin/phm-run configs/small/multi30k configs/small/shakespeare
	$(VENV)/bin/phm-run configs/small/sick configs/small/sva --seeds 1 2
	$(VENV)/bin/phm-collect work/runs/small/multi30k --out results/multi30k --title "Multi30k en-de (small budget): BLEU on test2016"
	$(VENV)/bin/phm-collect work/runs/small/shakespeare --out results/shakespeare --title "Modern -> Shakespeare (small budget): BLEU on the valid split"
	$(VENV)/bin/phm-collect work/runs/small/sick --out results/sick --title "SICK (small budget): accuracy on SICK trial"
	$(VENV)/bin/phm-collect work/runs/small/sva --out results/sva --title "Subject-verb agreement, the shared 1,000-row sample (small budget)"

# The converged-quality runs (configs/converged): many CPU hours, one queue in the background that
# resumes where it stopped, each finished run's result.json kept in results/runs; converged-report
# makes results/converged_* from those records. The learning-rate check that chose their lr:
# `phm-run configs/converged/multi30k_lr_check` (results/converged_multi30k_lr_check).
converged: install
	scripts/converged.sh

converged-report: install
	scripts/converged.sh report

# pytest-xdist: the tests in TEST_WORKERS processes of one thread each, a test module to one process
# (its module-scoped fixtures are made once); `pytest -n 0` runs in this process alone
TEST_WORKERS ?= 2
XDIST = -n $(TEST_WORKERS) --dist loadfile

# The whole suite, then its 25 slowest tests (what to cut first when it grows): docs/testing.md
test: install
	$(PY) -m pytest $(XDIST) -m "not gpu_plan" --durations=25

# The GPU run's plan checked on the CPU before a GPU session spends its minutes (CI runs it too)
test-gpu-plan: install
	$(PY) -m pytest -m gpu_plan

# The day-to-day loop: everything but the end-to-end runs marked slow
test-fast: install
	$(PY) -m pytest $(XDIST) -m "not slow"

# ruff, pinned in constraints.txt and configured in pyproject.toml: lint and format
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: install
	$(PY) -m benchmarks.bench_linear
	$(PY) -m benchmarks.bench_factored
	$(PY) -m benchmarks.bench_translation
	$(PY) -m benchmarks.bench_decoding
	$(PY) -m benchmarks.bench_export

bench-lstm: install
	$(PY) -m benchmarks.bench_lstm

# The GPU run (docs/gpu.md): the wheels that a GPU machine without network lacks (scripts/gpu/wheels,
# git-ignored), and the run's CPU dry run, every part at tiny sizes (report in work/gpu-dry-run/out)
gpu-wheels: install
	scripts/gpu/wheels.sh

gpu-dry-run: install
	OUT=work/gpu-dry-run/out scripts/gpu/run.sh --cpu-dry-run

install: $(VENV)/.installed

$(VENV)/.installed: scripts/install.sh setup.py constraints.txt
	PYTHON=$(PYTHON) VENV=$(VENV) scripts/install.sh
	touch $@

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
