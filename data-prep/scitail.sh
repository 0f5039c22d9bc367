#!/usr/bin/env bash
# SciTail 1.1 (Khot et al., 2018), entails / neutral -> data-bin/scitail: train, valid = dev, test
#   bash data-prep/scitail.sh [--src-dir DIR] [--out DIR]
# Release: SciTailV1.1/tsv_format/scitail_1.0_{train,dev,test}.tsv (premise, hypothesis, label).
source "$(dirname "$0")/nli_common.sh"
nli_script scitail
parse_options "$@"
nli_begin
dir=$(release_dir http://data.allenai.org.s3.amazonaws.com/downloads/SciTailV1.1.zip SciTailV1.1.zip \
  scitail_1.0_{train,dev,test}.tsv)
to_tsv scitail-tsv "$dir" train scitail_1.0_train.tsv
to_tsv scitail-tsv "$dir" valid scitail_1.0_dev.tsv
to_tsv scitail-tsv "$dir" test scitail_1.0_test.tsv
binarize scitail-tsv train valid test
