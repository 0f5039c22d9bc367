#!/usr/bin/env bash
# IWSLT'15 English-Vietnamese TED talks, in the Stanford NLP group's release (Luong & Manning
# 2015) that the results on this pair are reported on.
DATASET=iwslt15
PAIRS="en-vi"
BPE_SIZE=32000
BASE=https://nlp.stanford.edu/projects/nmt/data/iwslt15.en-vi
ABOUT="IWSLT'15 English-Vietnamese, Stanford's release ($BASE):
  train.{en,vi} (133,317), tst2012.{en,vi} (1,553 -> valid), tst2013.{en,vi} (1,268 -> test).
  These files come Moses-tokenized and XML-escaped: they are detokenized first (sacremoses),
  so that the references in raw/ are plain text and all corpora take the same steps."
source "$(dirname "$0")/lib.sh"

SPLIT_FILES="train=train valid=tst2012 test=tst2013"
sources() { split_file_urls "$BASE"; }
extract() { add_split_files moses; }

prepare "$@"
