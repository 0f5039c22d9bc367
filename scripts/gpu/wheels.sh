#!/usr/bin/env bash
# Downloads the wheels of scripts/gpu/wheels.txt into scripts/gpu/wheels/ (git-ignored), for the GPU
# machine's Python (CPython 3.12 on manylinux x86_64), which has no network: scripts/gpu/run.sh installs
# them there. Run it here, where pip reaches the package index, before a GPU session (docs/gpu.md).
#   scripts/gpu/wheels.sh                                   # cp312, into scripts/gpu/wheels
#   scripts/gpu/wheels.sh --python-version 3.11 --dest DIR  # another CPython (a rehearsal on this machine)
# Checks at the end that the wheels and the tracked files, what a GPU command carries, stay under 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY_VERSION=3.12
DEST=scripts/gpu/wheels
LIMIT_MIB=64
while (($#)); do
  case $1 in
    --python-version) PY_VERSION=${2:?--python-version needs a value, e.g. 3.12}; shift 2 ;;
    --dest) DEST=${2:?--dest needs a folder}; shift 2 ;;
    -h | --help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "wheels.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $PY_VERSION =~ ^3\.[0-9]+$ ]] || { echo "wheels.sh: --python-version is MAJOR.MINOR, e.g. 3.12, not '$PY_VERSION'" >&2; exit 2; }
PYTHON=${PYTHON:-.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=python3
pip=("$PYTHON" -m pip --disable-pip-version-check)

# requirement lines of wheels.txt by how they are got: a published wheel, or built here from source
requirements() { awk -v how="$1" '!/^#/ && NF == 3 && $3 == how {print $1}' scripts/gpu/wheels.txt; }
mapfile -t BINARY < <(requirements binary)
mapfile -t BUILD < <(requirements build)
mkdir -p "$DEST"
rm -f "$DEST"/*.whl  # a generated folder: wheels of earlier lists would travel too

echo "== downloading ${#BINARY[@]} wheels for CPython $PY_VERSION (manylinux x86_64) into $DEST"
"${pip[@]}" download --no-deps --only-binary=:all: --python-version "$PY_VERSION" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$DEST" "${BINARY[@]}"
if ((${#BUILD[@]})); then
  echo "== building ${#BUILD[@]} pure-Python wheels from their source archives: ${BUILD[*]}"
  "${pip[@]}" wheel --no-deps -w "$DEST" "${BUILD[@]}"
  for requirement in "${BUILD[@]}"; do
    name=${requirement%%==*} version=${requirement#*==}
    compgen -G "$DEST/${name//-/_}-$version-py3-none-any.whl" > /dev/null ||
      { echo "wheels.sh: $requirement did not build into a pure-Python wheel (py3-none-any)" >&2; exit 1; }
  done
fi

wheels=$(du -cb "$DEST"/*.whl | tail -1 | cut -f1)
tracked=$(git ls-files -z | xargs -0 du -cb 2> /dev/null | awk '/\ttotal$/ {sum += $1} END {print sum + 0}')
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
echo "== $(ls "$DEST"/*.whl | wc -l) wheels: $(mib "$wheels"); tracked files: $(mib "$tracked"); together $(mib $((wheels + tracked))) of the $LIMIT_MIB MiB a GPU command carries"
if ((wheels + tracked > LIMIT_MIB * 1048576)); then
  echo "wheels.sh: over $LIMIT_MIB MiB: the GPU command could not carry them (remove what the machine has from wheels.txt)" >&2
  exit 1
fi
