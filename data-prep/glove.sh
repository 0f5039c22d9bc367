#!/usr/bin/env bash
# GloVe word vectors (Pennington et al., 2014) for --glove -> data-bin/glove/glove.NAME.txt
#   bash data-prep/glove.sh [--name 840B.300d] [--src-dir DIR]
# NAME: 840B.300d (default; the paper's fixed 300-d vectors, 2 GB download), 42B.300d, or
# 6B.50d / 6B.100d / 6B.200d / 6B.300d. --src-dir: a folder holding glove.NAME.txt, .txt.gz or
# the official zip. (The models read plain or gzipped GloVe text of any dimension from any path.)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
name=840B.300d src="" dest="$REPO/data-bin/glove"
while [ $# -gt 0 ]; do
  case $1 in
    --name) name=${2:?}; shift 2 ;;
    --src-dir) src=${2:?}; shift 2 ;;
    --dest) dest=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "error: unknown option $1 (see --help)" >&2; exit 1 ;;
  esac
done
case $name in
  840B.300d|42B.300d) archive=glove.$name.zip ;;
  6B.50d|6B.100d|6B.200d|6B.300d) archive=glove.6B.zip ;;
  *) echo "error: --name $name: choose 840B.300d, 42B.300d, 6B.50d, 6B.100d, 6B.200d or 6B.300d" >&2; exit 1 ;;
esac
out="$dest/glove.$name.txt"
mkdir -p "$dest"
if [ -s "$out" ]; then echo "$out is there already" >&2; exit 0; fi
if [ -n "$src" ]; then
  if [ -s "$src/glove.$name.txt" ]; then cp "$src/glove.$name.txt" "$out.part"; mv "$out.part" "$out"; echo "copied to $out" >&2; exit 0; fi
  if [ -s "$src/glove.$name.txt.gz" ]; then gzip -dc "$src/glove.$name.txt.gz" > "$out.part"; mv "$out.part" "$out"; echo "wrote $out" >&2; exit 0; fi
  zip="$src/$archive"
  [ -s "$zip" ] || { echo "error: $src holds none of glove.$name.txt, glove.$name.txt.gz, $archive" >&2; exit 1; }
else
  zip="$dest/$archive"
  url=https://nlp.stanford.edu/data/$archive
  if [ ! -s "$zip" ]; then
    echo "downloading $url" >&2
    curl -fL --retry 2 --connect-timeout 20 -o "$zip.part" "$url" || { rm -f "$zip.part"; echo "error: could not download $url (offline?). Download it elsewhere and run: bash data-prep/glove.sh --name $name --src-dir DIR" >&2; exit 1; }
    mv "$zip.part" "$zip"
  fi
fi
unzip -p "$zip" "glove.$name.txt" > "$out.part" 2>/dev/null \
  || python3 -c "import sys, zipfile, shutil; shutil.copyfileobj(zipfile.ZipFile(sys.argv[1]).open(sys.argv[2]), sys.stdout.buffer)" "$zip" "glove.$name.txt" > "$out.part"
mv "$out.part" "$out"
echo "wrote $out ($(wc -l < "$out") words)" >&2
