#!/usr/bin/env bash
# "QNLI (Quora)" of Zhang et al. (2021): the Quora question-pair split of Wang et al. (2017, BiMPM),
# paraphrase or not (not GLUE's QNLI) -> data-bin/qnli: train, valid = dev, test
#   bash data-prep/qnli.sh [--src-dir DIR] [--out DIR]
# Release: Quora_question_pair_partition/{train,dev,test}.tsv (label, question 1, question 2, id;
# tokenized), published by the BiMPM authors on Google Drive (file 0B0PlTAo--BnaQWlsZl9FZ3l1c28).
source "$(dirname "$0")/nli_common.sh"
nli_script qnli
parse_options "$@"
nli_begin
dir=$(release_dir "https://drive.google.com/uc?export=download&confirm=t&id=0B0PlTAo--BnaQWlsZl9FZ3l1c28" \
  Quora_question_pair_partition.zip train.tsv dev.tsv test.tsv)
to_tsv quora-tsv "$dir" train train.tsv
to_tsv quora-tsv "$dir" valid dev.tsv
to_tsv quora-tsv "$dir" test test.tsv
binarize quora-tsv train valid test
