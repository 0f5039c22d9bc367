# Shared by the classification data-prep scripts (sourced, not run): the NLI corpora and sva.sh.
# The options and the output contract are common.sh's (docs/data-prep.md). Each NLI script:
#   1. finds its release files in --src-dir (searched recursively) or downloads the official archive;
#   2. converts every split to TSV "label<TAB>premise<TAB>hypothesis" (nli_to_tsv.py: clear errors
#      with file and line, rule-based skips counted and printed, an empty split refused);
#   3. binarizes with fairseq-preprocess: one dictionary built from the training premises and
#      hypotheses, shared by both; labels stay text, with labels.txt giving their fixed order.
# Output (--out, default data-bin/NAME):
#   premise/{dict.txt,SPLIT.bin,SPLIT.idx}  hypothesis/{...same dictionary...}
#   SPLIT.label  labels.txt  prepare.log  prep.json (written last)

# shellcheck disable=SC2034 # the variables set here are the sourcing scripts'
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
INPUTS=() # prep.json's inputs.SPLIT=...: where each split came from

usage() { # the script's header comment, then the options every script takes
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"
  printf '\nOptions:\n'
  common_usage
}

nli_script() { # NAME: before parse_options; the defaults that --help shows
  NAME=$1 DEFAULT_OUT=data-bin/$1 DEFAULT_DOWNLOAD_DIR=work/downloads/$1
}

# nli_begin [config.KEY=VALUE...]: after parse_options; the output is begun in $STAGE
nli_begin() {
  OUT=${OUT:-data-bin/$NAME}
  DOWNLOAD_DIR=${DOWNLOAD_DIR:-$DEFAULT_DOWNLOAD_DIR}
  CONFIG=("config.name=$NAME" "config.source=${SRC_DIR:-official URLs}" "$@")
  command -v fairseq-preprocess > /dev/null ||
    die "fairseq-preprocess not found: run 'make install' in the project (its .venv is used by these scripts), or put fairseq on PATH"
  begin_output
  echo "# $COMMAND  ($(date -u +%Y-%m-%dT%H:%M:%SZ))" > "$STAGE/prepare.log"
}

log() { echo "$*" | tee -a "$STAGE/prepare.log" >&2; }

# release_dir URL ARCHIVE FILE...: the folder to search for FILEs: --src-dir when it holds the
# first FILE (or has no ARCHIVE), else ARCHIVE unzipped, the one in --src-dir or the download
release_dir() {
  local url=$1 archive=$2 zip
  shift 2
  if [ -n "$SRC_DIR" ]; then
    zip=$(find_release_file "$SRC_DIR" "$archive")
    if [ -z "$zip" ] || [ -n "$(find_release_file "$SRC_DIR" "$1")" ]; then echo "$SRC_DIR"; return; fi
  else
    zip=$DOWNLOAD_DIR/$archive
    OFFLINE_FILES="$*" download "$url" "$zip" >&2
  fi
  unzip_into "$zip" "$TMP/release"
  echo "$TMP/release"
}

unzip_into() { # ZIP DIR
  local error
  error=$(textops unzip "$1" "$2" 2>&1) || die "$1: $error"
}

# find_release_file DIR NAME...: the first of the NAMEs found under DIR (empty if none)
find_release_file() {
  local dir=$1 name found
  shift
  for name in "$@"; do
    found=$(find -L "$dir" -type f -name "$name" 2> /dev/null | sort | head -n 1)
    if [ -n "$found" ]; then echo "$found"; return; fi
  done
}

# to_tsv FORMAT DIR SPLIT NAME... [-- nli_to_tsv options]: converts the first NAME found to $TMP/SPLIT.tsv
to_tsv() {
  local format=$1 dir=$2 split=$3
  shift 3
  local names=() file
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do names+=("$1"); shift; done
  [ "${1:-}" = "--" ] && shift
  file=$(find_release_file "$dir" "${names[@]}")
  [ -n "$file" ] || die "$dir holds none of: ${names[*]} (the $split split)"
  "$PYTHON" "$HERE/nli_to_tsv.py" --format "$format" --summary "$TMP/$split.json" "$file" "$TMP/$split.tsv" "$@" 2>&1 |
    tee -a "$STAGE/prepare.log" >&2
  [ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
  INPUTS+=("inputs.$split=$(cat "$TMP/$split.json")")
}

# binarize LABEL_FORMAT SPLIT...: $TMP/SPLIT.tsv -> the output (first SPLIT is train, then valid, then tests)
binarize() {
  local labels=$1
  shift
  local splits=("$@") split input label fields=()
  [ "${splits[0]}" = train ] && [ "${splits[1]}" = valid ] || die "binarize: splits must start with train valid"
  for split in "${splits[@]}"; do
    cut -f1 "$TMP/$split.tsv" > "$TMP/$split.label"
    cut -f2 "$TMP/$split.tsv" > "$TMP/$split.premise"
    cut -f3 "$TMP/$split.tsv" > "$TMP/$split.hypothesis"
  done
  # one dictionary for premises and hypotheses, from the training data only
  cat "$TMP/train.premise" "$TMP/train.hypothesis" > "$TMP/train.both"
  local tests=("${splits[@]:2}") jobs=(dict --workers "$WORKERS" --only-source --dict-only --trainpref "$TMP/train.both" --destdir "$TMP/dict")
  for input in premise hypothesis; do
    local testpref=""
    for split in "${tests[@]}"; do testpref+="${testpref:+,}$TMP/$split.$input"; done
    jobs+=(--- "$input" --workers "$WORKERS" --only-source --srcdict "$TMP/dict/dict.txt" --destdir "$STAGE/$input"
      --trainpref "$TMP/train.$input" --validpref "$TMP/valid.$input" ${testpref:+--testpref "$testpref"})
  done
  run_preprocess "${jobs[@]}" # the three binarizations in one process: one start of torch and fairseq, not three
  for input in premise hypothesis; do
    # fairseq names the test sets test, test1, test2, ...: give them their names (in two steps,
    # so that no name is overwritten)
    for i in "${!tests[@]}"; do
      local from=test$([ "$i" -gt 0 ] && echo "$i")
      for ext in bin idx; do mv "$STAGE/$input/$from.$ext" "$STAGE/$input/${tests[$i]}.$ext.renamed"; done
    done
    for f in "$STAGE/$input"/*.renamed; do mv "$f" "${f%.renamed}"; done
  done
  for split in "${splits[@]}"; do
    cp "$TMP/$split.label" "$STAGE/$split.label"
    fields+=("splits.$split=$(count "$TMP/$split.label")")
    echo "$split: $(count "$TMP/$split.label") examples" >> "$STAGE/prepare.log"
  done
  "$PYTHON" "$HERE/nli_to_tsv.py" --labels "$labels" > "$STAGE/labels.txt"
  while read -r label; do fields+=("labels[]=$label"); done < "$STAGE/labels.txt"
  log "$OUT: splits ${splits[*]}, labels $(paste -sd, "$STAGE/labels.txt"), $(count "$STAGE/premise/dict.txt") dictionary entries"
  commit_output "${fields[@]}" "dictionary_size=$(count "$STAGE/premise/dict.txt")" ${INPUTS[@]+"${INPUTS[@]}"}
  say "$NAME: wrote $OUT in ${SECONDS}s" >&2
}

# the Python that runs fairseq-preprocess (its script's #! line): the one that imports fairseq
fairseq_python() {
  local line
  line=$(head -n 1 "$(command -v fairseq-preprocess)")
  line=${line#\#!}
  if [ -x "$line" ]; then echo "$line"; else echo "$PYTHON"; fi
}

# run_preprocess NAME ARGS... [--- NAME ARGS...]: fairseq-preprocess ARGS for each job, all in one Python
# process (preprocess.py); the output in $TMP/preprocess-NAME.log, NAME the first job's
run_preprocess() {
  local log="$TMP/preprocess-$1.log"
  "$(fairseq_python)" "$HERE/preprocess.py" "$@" > "$log" 2>&1 || {
    tail -n 20 "$log" >&2
    die "$(tail -n 1 "$log"); its log: $log (kept with --keep-tmp)"
  }
}
