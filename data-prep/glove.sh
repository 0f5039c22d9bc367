#!/usr/bin/env bash
# GloVe word vectors (Pennington et al., 2014) for --glove -> data-bin/glove/glove.NAME.txt
#   bash data-prep/glove.sh [--name 840B.300d] [--src-dir DIR] [--out DIR]
# NAME: 840B.300d (default; the paper's fixed 300-d vectors, 2 GB download), 42B.300d, or
# 6B.50d / 6B.100d / 6B.200d / 6B.300d. --src-dir: a folder holding glove.NAME.txt, .txt.gz or
# the official zip. The output folder holds one file per NAME: preparing another NAME keeps
# those prepared before (hard links, no copy), and prep.json lists them with their sources.
# (The models read plain or gzipped GloVe text of any dimension from any path.)
USES_WORKERS=0
source "$(dirname "$0")/common.sh"
NAME=glove DEFAULT_OUT=data-bin/glove DEFAULT_DOWNLOAD_DIR=work/downloads/glove
SYNOPSIS="[--name NAME]"
VECTORS=840B.300d
option() { case $1 in --name) value "$@"; VECTORS=$VALUE TAKEN=2 ;; *) return 1 ;; esac; }
usage() {
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"
  printf '\nOptions:\n  --name NAME          the vectors (default: 840B.300d)\n'
  common_usage
}
parse_options "$@"
case $VECTORS in
  840B.300d | 42B.300d) archive=glove.$VECTORS.zip ;;
  6B.50d | 6B.100d | 6B.200d | 6B.300d) archive=glove.6B.zip ;;
  *) die "--name $VECTORS: choose 840B.300d, 42B.300d, 6B.50d, 6B.100d, 6B.200d or 6B.300d" ;;
esac
OUT=${OUT:-$DEFAULT_OUT}
DOWNLOAD_DIR=${DOWNLOAD_DIR:-$DEFAULT_DOWNLOAD_DIR}
file=glove.$VECTORS.txt

# vectors OLD_PREP_JSON [STAGE NAME FILE SOURCE WORDS DIM]: prep.json's "vectors" ({NAME: {file, source,
# words, dim}}) of the vector files that this script put in OUT before and that STAGE holds, plus NAME's
vectors() {
  "$PYTHON" - "$@" << 'EOF'
import json, os, sys
old, *new = sys.argv[1:]
try:
    manifest = json.load(open(old, encoding="utf-8"))
except (OSError, ValueError):
    manifest = {}
found = manifest.get("vectors", {}) if manifest.get("script") == "data-prep/glove.sh" else {}
if new:
    stage, name, file, source, words, dim = new
    found = {n: v for n, v in found.items() if os.path.isfile(os.path.join(stage, v["file"]))}
    found[name] = {"file": file, "source": source, "words": int(words), "dim": int(dim)}
print(json.dumps(found))
EOF
}

kept=$(vectors "$OUT/prep.json")
names=$("$PYTHON" -c 'import json, sys; print(json.dumps(sorted(set(json.loads(sys.argv[1])) | {sys.argv[2]})))' "$kept" "$VECTORS")
CONFIG=("config.vectors=$names")
begin_output
for other in $("$PYTHON" -c 'import json, sys; print(" ".join(json.loads(sys.argv[1])))' "$kept"); do
  [ "$other" != "$VECTORS" ] && [ -f "$OUT/glove.$other.txt" ] || continue
  ln "$OUT/glove.$other.txt" "$STAGE/" 2> /dev/null || cp "$OUT/glove.$other.txt" "$STAGE/" # the same disk: a link
done

found() { [ -n "$SRC_DIR" ] && find "$SRC_DIR" -name "$1" -type f -print -quit | grep .; } # the first, recursively
if source=$(found "$file"); then
  cp "$source" "$STAGE/$file"
elif source=$(found "$file.gz"); then
  gzip -dc "$source" > "$STAGE/$file" || die "$source is not a complete gzip file: get a fresh copy"
else
  if [ -n "$SRC_DIR" ]; then
    zip=$(found "$archive") || die "$SRC_DIR holds none of $file, $file.gz, $archive"
  else
    zip=$DOWNLOAD_DIR/$archive
    OFFLINE_FILES="$file or $file.gz" download "https://nlp.stanford.edu/data/$archive" "$zip"
  fi
  source=$zip:$file
  "$PYTHON" -c 'import shutil, sys, zipfile; shutil.copyfileobj(zipfile.ZipFile(sys.argv[1]).open(sys.argv[2]), sys.stdout.buffer)' \
    "$zip" "$file" > "$STAGE/$file" 2> "$TMP/unzip.log" || die "$zip: no complete $file in it ($(tail -n 1 "$TMP/unzip.log"))"
fi
# a quick look, not a full check: the file is not empty and its first line is "word v1 ... vD"
[ -s "$STAGE/$file" ] || die "$source is empty"
dim=${VECTORS##*.}
dim=${dim%d}
read -r -a first < <(head -n 1 "$STAGE/$file")
[ $((${#first[@]} - 1)) = "$dim" ] ||
  die "$source: line 1 has $((${#first[@]} - 1)) values after its word, not $dim: not GloVe $VECTORS text"
words=$(count "$STAGE/$file")
commit_output "vectors=$(vectors "$OUT/prep.json" "$STAGE" "$VECTORS" "$file" "$source" "$words" "$dim")"
say "$NAME: $OUT/$file ($words words, $dim values each)" >&2
