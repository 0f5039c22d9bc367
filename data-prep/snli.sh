#!/usr/bin/env bash
# SNLI 1.0 (Bowman et al., 2015) -> data-bin/snli: train, valid = dev, test
#   bash data-prep/snli.sh [--src-dir DIR] [--out DIR]
# Release: snli_1.0_{train,dev,test}.jsonl (tokens from the binary parses); a folder of the
# tokenized TSVs snli_1.0_{train,dev,test}.tok.tsv (gold_label, sentence1, sentence2) works too.
# Pairs whose gold label is '-' (no annotator majority) are left out and counted, as is usual.
source "$(dirname "$0")/nli_common.sh"
nli_script snli
parse_options "$@"
nli_begin
dir=$(release_dir https://nlp.stanford.edu/projects/snli/snli_1.0.zip snli_1.0.zip snli_1.0_{train,dev,test}.jsonl)
for pair in train:train valid:dev test:test; do
  split=${pair%%:*} name=${pair#*:}
  if [ -n "$(find_release_file "$dir" "snli_1.0_$name.jsonl")" ]; then
    to_tsv snli-jsonl "$dir" "$split" "snli_1.0_$name.jsonl"
  elif [ -n "$(find_release_file "$dir" "snli_1.0_$name.tok.tsv")" ]; then
    to_tsv snli-tok-tsv "$dir" "$split" "snli_1.0_$name.tok.tsv"
  else
    die "$dir holds neither snli_1.0_$name.jsonl nor snli_1.0_$name.tok.tsv (the $split split)"
  fi
done
binarize snli-jsonl train valid test
