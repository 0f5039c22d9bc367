#!/usr/bin/env bash
# SETimes English-Macedonian (Tyers & Alperen 2010): news of the Southeast European Times.
DATASET=setimes
PAIRS="en-mk"
BPE_SIZE=32000
CLEAN_MAX_LEN=250 CLEAN_RATIO=1.5
ABOUT="SETimes English-Macedonian (Tyers & Alperen 2010; nlp.ffzg.hr/resources/corpora/setimes):
  setimes.en-mk.txt.tgz holds setimes.en-mk.{en,mk}.txt. The corpus has no official
  valid/test split: 1 in 100 pairs goes to valid and 1 in 100 of the rest to test (fixed
  line numbers, the same on every run)."
source "$(dirname "$0")/lib.sh"

sources() { echo "http://nlp.ffzg.hr/data/corpora/setimes/setimes.$PAIR.txt.tgz"; }

extract() {
  add_pair train plain "setimes.$PAIR.$SRC.txt" "setimes.$PAIR.$TGT.txt"
  holdout valid 100 0
  holdout test 100 50
}

prepare "$@"
