#!/usr/bin/env bash
# Modern English -> Shakespeare (Xu et al. 2012; Jhamtani et al. 2017): the text style
# transfer corpus of the PHM paper. It comes NLTK-tokenized and stays so: no sacremoses, and
# fairseq-generate runs without --tokenizer (prep.json's generate_args).
DATASET=shakespeare
PAIRS="modern-original"
BPE_SIZE=10000
PRETOKENIZED=1
BASE=https://raw.githubusercontent.com/harsh19/Shakespearizing-Modern-English/master/data
ABOUT="Modern English <-> original Shakespeare (Xu et al. 2012; Jhamtani et al. 2017),
  $BASE:
  {train,valid,test}.{modern,original}.nltktok (18,395 / 1,218 / 1,462 pairs, NLTK-tokenized).
  A local folder without the test files (some copies have train and valid only) is accepted:
  the valid split then doubles as test, with a warning and a note in prep.json.
  --valid-as-test: the official valid split is the test split, and 1 in 18 training pairs
  (about 1,000) the valid split, so that model selection never sees the scored pairs (with
  --out, e.g. data-bin/shakespeare-heldout.modern-original)."
source "$(dirname "$0")/lib.sh"

VALID_AS_TEST=0
eval "lib_$(declare -f option)"
option() { case $1 in --valid-as-test) VALID_AS_TEST=1 TAKEN=1 ;; *) lib_option "$@" ;; esac; }

SPLIT_FILES="train=train valid=valid test=test"
sources() { split_file_urls "$BASE" .nltktok; }

extract() {
  if ((VALID_AS_TEST)); then
    local SPLIT_FILES="train=train test=valid"
    add_split_files plain .nltktok
    holdout valid 18
  elif find_input "test.$SRC.nltktok" > /dev/null || find_input "test.$TGT.nltktok" > /dev/null; then
    add_split_files plain .nltktok # (one test file without the other is an error there)
  else
    warn "no test split in $INPUT_DIR (test.$SRC.nltktok, test.$TGT.nltktok): the valid split doubles as test, so test scores are valid scores"
    local SPLIT_FILES="train=train valid=valid"
    add_split_files plain .nltktok
    copy_split valid test
  fi
}

prepare "$@"
