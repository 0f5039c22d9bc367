#!/usr/bin/env bash
# SICK (Marelli et al., 2014; SemEval 2014 task 1), 3-way entailment -> data-bin/sick
#   bash data-prep/sick.sh [--src-dir DIR] [--out DIR]    train, valid = trial, test = test_annotated
#   bash data-prep/sick.sh --trial-as-test [--src-dir DIR] [--out DIR]
#        -> data-bin/sick-trial: train = SICK_train less 500 held-out pairs (seed 1), valid = those
#           500, test = SICK_trial. Needs only the train and trial files (what ../shared/data has).
# Release: SICK_train.txt, SICK_trial.txt, SICK_test_annotated.txt (CC BY-NC-SA 3.0).
source "$(dirname "$0")/nli_common.sh"
BASE=http://alt.qcri.org/semeval2014/task1/data/uploads
nli_script sick
DEFAULT_OUT="data-bin/sick, or data-bin/sick-trial with --trial-as-test"
SYNOPSIS="[--trial-as-test]"
TRIAL_AS_TEST=0
option() { case $1 in --trial-as-test) TRIAL_AS_TEST=1 TAKEN=1 ;; *) return 1 ;; esac; }
parse_options "$@"
if ((TRIAL_AS_TEST)); then NAME=sick-trial; fi
nli_begin "config.trial_as_test=$( ((TRIAL_AS_TEST)) && echo true || echo false)"

sick_dir() { # the folder holding SICK_<split>.txt: --src-dir, or the official per-split archive
  OFFLINE_FILES="SICK_train.txt, SICK_trial.txt, SICK_test_annotated.txt" \
    release_dir "$BASE/sick_$1.zip" "sick_$1.zip" "SICK_$1.txt"
}

train_dir=$(sick_dir train)
trial_dir=$(sick_dir trial)
if ((TRIAL_AS_TEST)); then
  to_tsv sick "$train_dir" train SICK_train.txt -- --hold-out "500:$TMP/valid.tsv" --seed 1
  to_tsv sick "$trial_dir" test SICK_trial.txt
else
  test_dir=$(sick_dir test_annotated)
  to_tsv sick "$train_dir" train SICK_train.txt
  to_tsv sick "$trial_dir" valid SICK_trial.txt
  to_tsv sick "$test_dir" test SICK_test_annotated.txt
fi
binarize sick train valid test
