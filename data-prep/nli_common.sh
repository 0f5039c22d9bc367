# Shared by the classification data-prep scripts (sourced, not run): options, downloads, logging
# and fairseq-preprocess for all of them (sva.sh too); the rest is the NLI scripts'. Each NLI script:
#   1. finds its release files in --src-dir (searched recursively) or downloads the official archive;
#   2. converts every split to TSV "label<TAB>premise<TAB>hypothesis" (nli_to_tsv.py: clear errors
#      with line numbers, rule-based skips counted and printed);
#   3. binarizes with fairseq-preprocess: one dictionary built from the training premises and
#      hypotheses, shared by both; labels stay text, with labels.txt giving their fixed order.
# Output (DEST, default data-bin/NAME):
#   premise/{dict.txt,SPLIT.bin,SPLIT.idx}  hypothesis/{...same dictionary...}
#   SPLIT.label  labels.txt  prepare.log
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HERE=$REPO/data-prep
# The project's environment (make install) when there is one: fairseq-preprocess, sacremoses.
if [ -x "$REPO/.venv/bin/python" ]; then export PATH="$REPO/.venv/bin:$PATH"; fi
PYTHON=${PYTHON:-python3}

die() { echo "error: $*" >&2; exit 1; }

# parse_args NAME USAGE_EXTRA "$@": sets SRC_DIR, DEST, WORK, WORKERS and EXTRA_ARGS (the rest)
parse_args() {
  local name=$1 extra_usage=$2; shift 2
  COMMAND="bash data-prep/$(basename "$0") $*"
  SRC_DIR="" DEST="$REPO/data-bin/$name" WORK="" WORKERS=$(nproc 2>/dev/null || echo 1) EXTRA_ARGS=()
  while [ $# -gt 0 ]; do
    case $1 in
      --src-dir) SRC_DIR=$(cd "${2:?--src-dir needs a folder}" 2>/dev/null && pwd) || die "--src-dir $2: no such folder"; shift 2 ;;
      --dest) DEST=${2:?--dest needs a folder}; shift 2 ;;
      --work) WORK=${2:?--work needs a folder}; shift 2 ;;
      --workers) WORKERS=${2:?}; shift 2 ;;
      -h|--help)
        echo "usage: bash data-prep/$(basename "$0") [--src-dir DIR] [--dest DIR] [--work DIR] [--workers N] $extra_usage"
        echo "  --src-dir DIR  a local copy of the release (searched recursively); without it the official archive is downloaded"
        echo "  --dest DIR     the fairseq data directory to create (default: data-bin/$name)"
        echo "  --work DIR     intermediate files (default: work/data-prep/$name)"
        exit 0 ;;
      *) EXTRA_ARGS+=("$1"); shift ;;
    esac
  done
  WORK=${WORK:-$REPO/work/data-prep/$name}
  mkdir -p "$WORK"
  : > "$WORK/prepare.log"
}

log() { echo "$*" | tee -a "$WORK/prepare.log" >&2; }

# fetch URL FILE: download once (resumable), with a clear message when the network is not there
fetch() {
  local url=$1 out=$2
  [ -s "$out" ] && return 0
  log "downloading $url"
  if command -v curl >/dev/null; then
    curl -fL --retry 2 --connect-timeout 20 -o "$out.part" "$url" || { rm -f "$out.part"; return 1; }
  elif command -v wget >/dev/null; then
    wget -q -O "$out.part" "$url" || { rm -f "$out.part"; return 1; }
  else
    return 1
  fi
  mv "$out.part" "$out"
}

# release_dir URL ARCHIVE FILE...: the folder to search for FILEs: --src-dir, or the unzipped download
release_dir() {
  local url=$1 archive=$2; shift 2
  if [ -n "$SRC_DIR" ]; then echo "$SRC_DIR"; return; fi
  fetch "$url" "$WORK/$archive" || die "could not download $url (offline?). Download it elsewhere, unpack it, and run
  bash data-prep/$(basename "$0") --src-dir DIR    (DIR holding: $*)"
  if [ ! -d "$WORK/release" ]; then
    "$PYTHON" -m zipfile -e "$WORK/$archive" "$WORK/release.part" && mv "$WORK/release.part" "$WORK/release"
  fi
  echo "$WORK/release"
}

# find_release_file DIR NAME...: the first of the NAMEs found under DIR (empty if none)
find_release_file() {
  local dir=$1 name found; shift
  for name in "$@"; do
    found=$(find -L "$dir" -type f -name "$name" 2>/dev/null | sort | head -n 1)
    if [ -n "$found" ]; then echo "$found"; return; fi
  done
}

# to_tsv FORMAT DIR SPLIT NAME... [-- nli_to_tsv options]: converts the first NAME found to $WORK/SPLIT.tsv
to_tsv() {
  local format=$1 dir=$2 split=$3; shift 3
  local names=() file
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do names+=("$1"); shift; done
  [ "${1:-}" = "--" ] && shift
  file=$(find_release_file "$dir" "${names[@]}")
  [ -n "$file" ] || die "$dir holds none of: ${names[*]} (the $split split)"
  "$PYTHON" "$HERE/nli_to_tsv.py" --format "$format" "$file" "$WORK/$split.tsv" "$@" 2>&1 | tee -a "$WORK/prepare.log" >&2
  [ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
}

# binarize LABEL_FORMAT SPLIT...: $WORK/SPLIT.tsv -> $DEST (first SPLIT is train, then valid, then tests)
binarize() {
  local labels=$1; shift
  local splits=("$@") split input tmp="$DEST.tmp"
  [ "${splits[0]}" = train ] && [ "${splits[1]}" = valid ] || die "binarize: splits must start with train valid"
  for split in "${splits[@]}"; do
    cut -f1 "$WORK/$split.tsv" > "$WORK/$split.label"
    cut -f2 "$WORK/$split.tsv" > "$WORK/$split.premise"
    cut -f3 "$WORK/$split.tsv" > "$WORK/$split.hypothesis"
  done
  # one dictionary for premises and hypotheses, from the training data only
  cat "$WORK/train.premise" "$WORK/train.hypothesis" > "$WORK/train.both"
  rm -rf "$WORK/dict" "$tmp"
  run_preprocess dict --only-source --dict-only --trainpref "$WORK/train.both" --destdir "$WORK/dict"
  local tests=("${splits[@]:2}")
  for input in premise hypothesis; do
    local testpref=""
    for split in "${tests[@]}"; do testpref+="${testpref:+,}$WORK/$split.$input"; done
    run_preprocess "$input" --only-source --srcdict "$WORK/dict/dict.txt" --destdir "$tmp/$input" \
      --trainpref "$WORK/train.$input" --validpref "$WORK/valid.$input" ${testpref:+--testpref "$testpref"}
    # fairseq names the test sets test, test1, test2, ...: give them their names (in two steps,
    # so that no name is overwritten)
    for i in "${!tests[@]}"; do
      local from=test$([ "$i" -gt 0 ] && echo "$i")
      for ext in bin idx; do mv "$tmp/$input/$from.$ext" "$tmp/$input/${tests[$i]}.$ext.renamed"; done
    done
    for f in "$tmp/$input"/*.renamed; do mv "$f" "${f%.renamed}"; done
  done
  for split in "${splits[@]}"; do cp "$WORK/$split.label" "$tmp/$split.label"; done
  "$PYTHON" "$HERE/nli_to_tsv.py" --labels "$labels" > "$tmp/labels.txt"
  {
    echo "# made by: $COMMAND  ($(date -u +%Y-%m-%dT%H:%M:%SZ))"
    cat "$WORK/prepare.log"
    for split in "${splits[@]}"; do echo "$split: $(wc -l < "$WORK/$split.label") examples"; done
  } > "$tmp/prepare.log"
  rm -rf "$DEST" && mkdir -p "$(dirname "$DEST")" && mv "$tmp" "$DEST"
  log "wrote $DEST: splits ${splits[*]}, labels $(paste -sd, "$DEST/labels.txt"), $(wc -l < "$DEST/premise/dict.txt") dictionary entries"
}

run_preprocess() {
  local name=$1; shift
  command -v fairseq-preprocess >/dev/null || die "fairseq-preprocess not found: run 'make install' (or put fairseq on PATH)"
  fairseq-preprocess --workers "$WORKERS" "$@" > "$WORK/preprocess-$name.log" 2>&1 || {
    tail -n 20 "$WORK/preprocess-$name.log" >&2; die "fairseq-preprocess failed ($name), log: $WORK/preprocess-$name.log"; }
}
