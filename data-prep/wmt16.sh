#!/usr/bin/env bash
# WMT'16 English-Romanian news translation (Bojar et al. 2016). The PHM paper's Table 2 calls
# this pair "WMT'18 En-Ro"; WMT has had no English-Romanian task since 2016, and these are the
# data of tensor2tensor's translate_enro_wmt32k that its experiments ran on.
DATASET=wmt16
PAIRS="en-ro"
BPE_SIZE=32000
# fairseq's WMT recipes filter training pairs like this (clean-corpus-n.perl -ratio 1.5 ... 1 250)
CLEAN_MAX_LEN=250 CLEAN_RATIO=1.5
STATMT=https://data.statmt.org/wmt16/translation-task
ABOUT="WMT'16 English-Romanian (the PHM paper's \"WMT'18 En-Ro\"; Bojar et al. 2016):
  train = Europarl v8 (training-parallel-ep-v8.tgz: europarl-v8.ro-en.{ro,en})
        + SETimes2 from OPUS (en-ro.txt.zip: SETIMES.en-ro.{en,ro});
  valid = newsdev2016 (dev.tgz: dev/newsdev2016-enro-{src.en,ref.ro}.sgm, roen for ro-en);
  test  = newstest2016 (test.tgz: test/newstest2016-enro-{src.en,ref.ro}.sgm, or roen)."
source "$(dirname "$0")/lib.sh"

sources() {
  echo "$STATMT/training-parallel-ep-v8.tgz"
  echo https://object.pouta.csc.fi/OPUS-SETIMES/v2/moses/en-ro.txt.zip
  echo "$STATMT/dev.tgz"
  echo "$STATMT/test.tgz"
}

extract() {
  add_pair train plain "europarl-v8.ro-en.$SRC" "europarl-v8.ro-en.$TGT"
  add_pair train plain "SETIMES.en-ro.$SRC" "SETIMES.en-ro.$TGT"
  add_wmt valid newsdev2016
  add_wmt test newstest2016
}

prepare "$@"
