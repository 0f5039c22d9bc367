#!/usr/bin/env bash
# SICK (Marelli et al., 2014; SemEval 2014 task 1), 3-way entailment -> data-bin/sick
#   bash data-prep/sick.sh [--src-dir DIR]     train, valid = trial, test = test_annotated
#   bash data-prep/sick.sh --trial-as-test [--src-dir DIR]
#        -> data-bin/sick-trial: train = SICK_train less 500 held-out pairs (seed 1), valid = those
#           500, test = SICK_trial. Needs only the train and trial files (what ../shared/data has).
# Release: SICK_train.txt, SICK_trial.txt, SICK_test_annotated.txt (CC BY-NC-SA 3.0).
source "$(dirname "$0")/nli_common.sh"
BASE=http://alt.qcri.org/semeval2014/task1/data/uploads
trial_as_test=0
for arg in "$@"; do [ "$arg" = --trial-as-test ] && trial_as_test=1; done
if [ $trial_as_test = 1 ]; then
  parse_args sick-trial "[--trial-as-test]" "$@"
else
  parse_args sick "[--trial-as-test]" "$@"
fi

sick_dir() {  # the folder holding SICK_<split>.txt: --src-dir, or the official per-split archive
  local split=$1
  if [ -n "$SRC_DIR" ]; then echo "$SRC_DIR"; return; fi
  fetch "$BASE/sick_$split.zip" "$WORK/sick_$split.zip" || die "could not download $BASE/sick_$split.zip (offline?).
  Run: bash data-prep/sick.sh --src-dir DIR    (DIR holding SICK_train.txt, SICK_trial.txt, SICK_test_annotated.txt)"
  "$PYTHON" -m zipfile -e "$WORK/sick_$split.zip" "$WORK/release"
  echo "$WORK/release"
}

train_dir=$(sick_dir train)
trial_dir=$(sick_dir trial)
if [ $trial_as_test = 1 ]; then
  to_tsv sick "$train_dir" train SICK_train.txt -- --hold-out "500:$WORK/valid.tsv" --seed 1
  to_tsv sick "$trial_dir" test SICK_trial.txt
else
  test_dir=$(sick_dir test_annotated)
  to_tsv sick "$train_dir" train SICK_train.txt
  to_tsv sick "$trial_dir" valid SICK_trial.txt
  to_tsv sick "$test_dir" test SICK_test_annotated.txt
fi
binarize sick train valid test
