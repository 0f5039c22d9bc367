#!/usr/bin/env bash
# Multi30k task 1 (Elliott et al., 2016): image captions, raw (untokenized, cased).
DATASET=multi30k
PAIRS="en-de en-fr en-cs"
BPE_SIZE=10000
BASE=https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw
ABOUT="Multi30k task 1 (Elliott et al. 2016), github.com/multi30k/dataset data/task1/raw:
  train.L.gz (29,000), val.L.gz (1,014 -> valid), test_2016_flickr.L.gz (1,000 -> test).
The project bundles the English-German files: --src-dir data/multi30k works offline."
source "$(dirname "$0")/lib.sh"

SPLIT_FILES="train=train valid=val test=test_2016_flickr"
sources() { split_file_urls "$BASE" .gz; }
extract() { add_split_files plain; }

prepare "$@"
