#!/usr/bin/env bash
# Creates or updates the project's virtual environment; safe to run again.
#   PYTHON=python3.12 scripts/install.sh    another interpreter (3.11 and 3.12 are supported)
#   TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu" scripts/install.sh
#                                           where pip has no CPU torch 2.13 wheel at hand
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip --disable-pip-version-check)

# A torch that is already there (CPU or CUDA) is kept: the later steps never ask for another.
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  echo "== installing torch 2.13.0"
  "${pip[@]}" install ${TORCH_PIP_ARGS:-} "torch==2.13.0"
fi
# ve-fairseq's metadata asks for torchaudio, which would pull a multi-GB CUDA torch: its real
# runtime needs are declared by setup.py instead.
echo "== installing fairseq (ve-fairseq 0.12.3, without its torchaudio requirement)"
"${pip[@]}" install --no-deps -c constraints.txt "ve-fairseq==0.12.3"
echo "== installing phm-fairseq (editable) and its dependencies"
"${pip[@]}" install -c constraints.txt -e ".[test]"
"$VENV/bin/python" - <<'PY'
import fairseq, torch, phm_fairseq
print(f"ready: torch {torch.__version__}, fairseq {fairseq.__version__}, phm-fairseq {phm_fairseq.__version__}")
PY
