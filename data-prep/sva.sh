#!/usr/bin/env bash
# Subject-verb agreement as number prediction (Linzen, Dupoux & Goldberg, TACL 2016) -> data-bin/sva
#   bash data-prep/sva.sh [--src-dir DIR]      the release: 9% train, 1% valid, 90% test (Linzen et al.'s)
#   bash data-prep/sva.sh --input ../shared/data/sva/wiki-dev.txt --proportions 70,10 --out data-bin/sva-sample
#                                              a small file in either layout: 70% / 10% / 20%
# Input: each sentence up to, not including, the verb; label: singular (VBZ) or plural (VBP).
# Its own options (the common ones follow):
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

nli_script sva
SYNOPSIS="[--input FILE] [--proportions TRAIN,VALID] [--seed N] [--t2t-test]"
INPUT="" PROPORTIONS=9,1 SEED=1 T2T_TEST=0
option() {
  case $1 in
    --input) value "$@"; INPUT=$VALUE TAKEN=2 ;;
    --proportions) value "$@"; PROPORTIONS=$VALUE TAKEN=2 ;;
    --seed) value "$@"; SEED=$VALUE TAKEN=2 ;;
    --t2t-test) T2T_TEST=1 TAKEN=1 ;;
    *) return 1 ;;
  esac
}
parse_options "$@"
[[ $SEED =~ ^[0-9]+$ ]] || die "--seed must be a whole number, not '$SEED'"
if [ -n "$INPUT" ]; then
  [ -z "$SRC_DIR" ] || die "give --src-dir or --input, not both"
  [ -f "$INPUT" ] || die "--input $INPUT: no such file"
  INPUT=$(cd "$(dirname "$INPUT")" && pwd)/${INPUT##*/}
fi
SPLIT_ARGS=(--proportions "$PROPORTIONS" --seed "$SEED")
if ((T2T_TEST)); then SPLIT_ARGS+=(--t2t-test); fi
nli_begin "config.input=${INPUT:-$RELEASE}" "config.proportions=$PROPORTIONS" "config.seed=$SEED" \
  "config.t2t_test=$( ((T2T_TEST)) && echo true || echo false)"

if [ -n "$INPUT" ]; then
  SOURCE=$INPUT
elif [ -n "$SRC_DIR" ]; then
  INPUT=$(find_release_file "$SRC_DIR" "$RELEASE.gz" "$RELEASE")
  [ -n "$INPUT" ] || die "$SRC_DIR holds neither $RELEASE.gz nor $RELEASE (Linzen et al.'s release);
  for another file in a layout that data-prep/sva_splits.py reads, use --input FILE"
  SOURCE=$INPUT
else
  INPUT=$DOWNLOAD_DIR/$RELEASE.gz
  for SOURCE in "${URLS[@]}"; do try_download "$SOURCE" "$INPUT" >&2 && break; done
  # the generic advice of try_download's error names neither the file nor --input: said here instead
  [ -s "$INPUT" ] || die "${DOWNLOAD_ERROR%%. Offline?*}.
  Offline? Fetch $RELEASE.gz (Linzen et al.'s release) from one of$(printf '\n    %s' "${URLS[@]}")
  and pass --src-dir DIR, the folder that holds it (or $RELEASE unpacked); or prepare another
  file in a layout that data-prep/sva_splits.py reads with --input FILE (e.g. a 1,000-row sample:
  --input wiki-dev.txt --proportions 70,10)"
fi

log "[1/3] $INPUT: checking every row, splitting"
mkdir -p "$TMP/splits"
"$PYTHON" "$HERE/sva_splits.py" "$INPUT" "$TMP/splits" "${SPLIT_ARGS[@]}" 2>&1 | tee -a "$STAGE/prepare.log" >&2
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 1

log "[2/3] binarizing (fairseq-preprocess; the dictionary holds the training prefixes' words)"
run_preprocess sva --workers "$WORKERS" --only-source --destdir "$STAGE" --trainpref "$TMP/splits/train.input" \
  --validpref "$TMP/splits/valid.input" --testpref "$TMP/splits/test.input"
# what the dictionary does not cover becomes <unk>: say how much, per split
sed -n 's/.*\] \(.*\.input: .* replaced (by <unk>)\)$/    \1/p' "$TMP/preprocess-sva.log" | tee -a "$STAGE/prepare.log" >&2

log "[3/3] labels and prep.json"
fields=()
for split in train valid test; do
  cp "$TMP/splits/$split.label" "$STAGE/"
  fields+=("splits.$split=$(count "$STAGE/$split.label")")
done
"$PYTHON" "$HERE/sva_splits.py" --labels > "$STAGE/labels.txt"
while read -r label; do fields+=("labels[]=$label"); done < "$STAGE/labels.txt"
commit_output "dataset=sva" "source=$SOURCE" "${fields[@]}" "examples=$(cat "$TMP/splits/summary.json")" \
  "dictionary_size=$(count "$STAGE/dict.txt")"
say "$NAME: wrote $OUT in ${SECONDS}s" >&2
