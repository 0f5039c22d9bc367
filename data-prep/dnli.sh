#!/usr/bin/env bash
# Dialogue NLI (Welleck et al., 2019) -> data-bin/dnli: train, valid = dev, test
#   bash data-prep/dnli.sh [--src-dir DIR] [--out DIR]
# Release (wellecks.github.io/dialogue_nli; Google Drive file 1WtbXCv3vPB5ql6w0FVDmAEMmWadbrCuG):
# dialogue_nli_{train,dev,test}.jsonl, each one JSON array; labels positive / neutral / negative
# become entailment / neutral / contradiction.
source "$(dirname "$0")/nli_common.sh"
nli_script dnli
parse_options "$@"
nli_begin
dir=$(release_dir "https://drive.google.com/uc?export=download&confirm=t&id=1WtbXCv3vPB5ql6w0FVDmAEMmWadbrCuG" \
  dialogue_nli.zip dialogue_nli_{train,dev,test}.jsonl)
to_tsv dnli-json "$dir" train dialogue_nli_train.jsonl
to_tsv dnli-json "$dir" valid dialogue_nli_dev.jsonl
to_tsv dnli-json "$dir" test dialogue_nli_test.jsonl
binarize dnli-json train valid test
