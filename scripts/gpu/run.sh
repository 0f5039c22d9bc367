#!/usr/bin/env bash
# The GPU run (issue 41; docs/gpu.md): in one command and at most 8 minutes, on a GPU machine without
# network, from the repository root with scripts/gpu/wheels carried along (scripts/gpu/wheels.sh makes it):
# install what its Python lacks, then the CUDA tests, training in every precision, the CUDA benchmarks and
# time-capped quality runs, each part with its own time cap (scripts/gpu/run.py). Writes report.json,
# report.md, the logs and artifacts.tar into $OUT, the report after every step.
#   OUT=DIR scripts/gpu/run.sh                  on the GPU machine (its Python: /opt/torch/.venv, or $PHM_GPU_PYTHON)
#   OUT=DIR scripts/gpu/run.sh --cpu-dry-run    every part at tiny sizes on this CPU with .venv (a test runs it)
#   ... --parts training benchmarks             only these parts (install, data, cuda_tests, training, benchmarks, quality)
#   ... --budget 510 --cap training=240 --quality multi30k_base/phm_n4 ...   the run's time, a part's cap, the quality runs
# Scratch (installed wheels, data, runs) goes to $PHM_GPU_WORK (default work/gpu, or work/gpu-dry-run, in the
# repository). A relative OUT or PHM_GPU_WORK is taken from the folder the command is typed in.
set -euo pipefail
STARTED=$(date +%s.%N)
COMMAND="scripts/gpu/run.sh${*:+ $*}"
CALLER=$PWD
cd "$(dirname "$0")/../.."
MODE=gpu
ARGS=()
while (($#)); do
  case $1 in
    --cpu-dry-run) MODE=cpu-dry-run; shift ;;
    -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
: "${OUT:?set OUT to the folder that receives the report and the logs}"
[[ $OUT = /* ]] || OUT=$CALLER/$OUT
[[ ${PHM_GPU_WORK:-/} = /* ]] || PHM_GPU_WORK=$CALLER/$PHM_GPU_WORK
if [ "$MODE" = gpu ]; then
  PYTHON=${PHM_GPU_PYTHON:-/opt/torch/.venv/bin/python}
  [ -x "$PYTHON" ] || PYTHON=$(command -v python3)
  WORK=${PHM_GPU_WORK:-work/gpu}
else
  PYTHON=${PHM_GPU_PYTHON:-.venv/bin/python}
  [ -x "$PYTHON" ] || { echo "run.sh: no $PYTHON: run \`make install\` first (the dry run uses the project's .venv)" >&2; exit 2; }
  WORK=${PHM_GPU_WORK:-work/gpu-dry-run}
fi
exec "$PYTHON" scripts/gpu/run.py --mode "$MODE" --out "$OUT" --work "$WORK" --python "$PYTHON" \
  --started "$STARTED" --command "$COMMAND" ${ARGS[@]+"${ARGS[@]}"}
