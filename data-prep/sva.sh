#!/usr/bin/env bash
# Subject-verb agreement as number prediction (Linzen, Dupoux & Goldberg, TACL 2016) -> data-bin/sva
#   bash data-prep/sva.sh [--src-dir DIR]      the release: 9% train, 1% valid, 90% test (Linzen et al.'s)
#   bash data-prep/sva.sh --input ../shared/data/sva/wiki-dev.txt --proportions 70,10 --dest data-bin/sva-sample
#                                              a small file in either layout: 70% / 10% / 20%
# Input: each sentence up to, not including, the verb; label: singular (VBZ) or plural (VBP).
# Options besides the common ones below:
#   --input FILE          any TSV in one of the two layouts that data-prep/sva_splits.py reads
#   --proportions T,V     percent of the examples for train and valid; the rest is test (default 9,1)
#   --seed N              seed of the shuffle before the split (default 1)
#   --t2t-test            test only on the rows that tensor2tensor's sva_number_prediction keeps
# Release: agr_50_mostcommon_10K.tsv.gz, linked from github.com/TalLinzen/rnn_agreement; cite
# Linzen et al. (2016). Output: dict.txt and SPLIT.{bin,idx} (fairseq-preprocess, dictionary from
# the training prefixes), SPLIT.label, labels.txt, prepare.log and prep.json (written last).
source "$(dirname "$0")/nli_common.sh"
RELEASE=agr_50_mostcommon_10K.tsv
URLS=("http://tallinzen.net/media/rnn_agreement/$RELEASE.gz"                       # as in tensor2tensor
      "https://www.dropbox.com/s/5axdu3q9jkxzjy8/$RELEASE.gz?dl=1")                # the repository's README

for arg in "$@"; do case $arg in -h | --help) sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0" ;; esac; done
parse_args sva "[--input FILE] [--proportions TRAIN,VALID] [--seed N] [--t2t-test]" "$@"
INPUT="" SPLIT_ARGS=()
set -- "${EXTRA_ARGS[@]}"
while [ $# -gt 0 ]; do
  case $1 in
    --input) INPUT=${2:?--input needs a file}; shift 2 ;;
    --proportions | --seed) SPLIT_ARGS+=("$1" "${2:?$1 needs a value}"); shift 2 ;;
    --t2t-test) SPLIT_ARGS+=("$1"); shift ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done

if [ -n "$INPUT" ]; then
  [ -z "$SRC_DIR" ] || die "give --src-dir or --input, not both"
  [ -f "$INPUT" ] || die "--input $INPUT: no such file"
  SOURCE=$INPUT
elif [ -n "$SRC_DIR" ]; then
  INPUT=$(find_release_file "$SRC_DIR" "$RELEASE.gz" "$RELEASE")
  [ -n "$INPUT" ] || die "$SRC_DIR holds neither $RELEASE.gz nor $RELEASE (Linzen et al.'s release);
  for another file in a layout that data-prep/sva_splits.py reads, use --input FILE"
  SOURCE=$INPUT
else
  INPUT=$WORK/$RELEASE.gz
  for SOURCE in "${URLS[@]}"; do fetch "$SOURCE" "$INPUT" && break; done
  [ -s "$INPUT" ] || die "could not download $RELEASE.gz (offline?). Download it elsewhere and run
  bash data-prep/sva.sh --src-dir DIR    (DIR holding $RELEASE.gz or $RELEASE)"
  gzip -t "$INPUT" 2>/dev/null || { rm -f "$INPUT"; die "the download $INPUT was not a complete gzip file and was removed: run again, or use --src-dir"; }
fi

STAGE=$DEST.tmp
trap 'rm -rf "$STAGE"' EXIT  # a failed run leaves no half-made data directory
rm -rf "$STAGE" "$WORK/splits"
mkdir -p "$WORK/splits"
log "[1/3] $INPUT: checking every row, splitting"
"$PYTHON" "$HERE/sva_splits.py" "$INPUT" "$WORK/splits" ${SPLIT_ARGS[@]+"${SPLIT_ARGS[@]}"} 2>&1 | tee -a "$WORK/prepare.log" >&2
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 1

log "[2/3] binarizing (fairseq-preprocess; the dictionary holds the training prefixes' words)"
run_preprocess sva --only-source --destdir "$STAGE" --trainpref "$WORK/splits/train.input" \
  --validpref "$WORK/splits/valid.input" --testpref "$WORK/splits/test.input"
# what the dictionary does not cover becomes <unk>: say how much, per split
sed -n 's/.*\] \(.*\.input: .* replaced (by <unk>)\)$/    \1/p' "$WORK/preprocess-sva.log" | tee -a "$WORK/prepare.log" >&2

log "[3/3] labels and prep.json"
for split in train valid test; do cp "$WORK/splits/$split.label" "$STAGE/"; done
"$PYTHON" "$HERE/sva_splits.py" --labels > "$STAGE/labels.txt"
cp "$WORK/prepare.log" "$STAGE/prepare.log"
"$PYTHON" "$HERE/textops.py" manifest-write "$STAGE/prep.json" dataset=sva "source=$SOURCE" \
  "examples=$(cat "$WORK/splits/summary.json")" "dictionary_size=$(wc -l < "$STAGE/dict.txt")" \
  "labels=$(paste -sd, "$STAGE/labels.txt")" "command=$COMMAND" "seconds=$SECONDS" "created=$(date -u +%FT%TZ)"
rm -rf "$DEST" && mkdir -p "$(dirname "$DEST")" && mv "$STAGE" "$DEST"
log "wrote $DEST in ${SECONDS}s"
