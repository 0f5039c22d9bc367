#!/usr/bin/env bash
# MultiNLI 1.0 (Williams et al., 2018) -> data-bin/mnli
#   bash data-prep/mnli.sh [--src-dir DIR] [--out DIR]
# splits: train; valid = dev_matched; test = dev_matched ("matched"); test_mismatched =
# dev_mismatched. The labelled test sets are not public: like the paper's two MultiNLI
# columns, results are reported on the matched and mismatched development sets.
# Release: multinli_1.0_{train,dev_matched,dev_mismatched}.jsonl. Gold label '-' is left out, counted.
source "$(dirname "$0")/nli_common.sh"
nli_script mnli
parse_options "$@"
nli_begin
dir=$(release_dir https://cims.nyu.edu/~sbowman/multinli/multinli_1.0.zip multinli_1.0.zip \
  multinli_1.0_{train,dev_matched,dev_mismatched}.jsonl)
to_tsv snli-jsonl "$dir" train multinli_1.0_train.jsonl
to_tsv snli-jsonl "$dir" valid multinli_1.0_dev_matched.jsonl
cp "$TMP/valid.tsv" "$TMP/test.tsv"
INPUTS+=("inputs.test=the valid split (dev_matched)")
to_tsv snli-jsonl "$dir" test_mismatched multinli_1.0_dev_mismatched.jsonl
binarize snli-jsonl train valid test test_mismatched
