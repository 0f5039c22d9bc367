#!/usr/bin/env bash
# WMT'18 English-Estonian news translation (Bojar et al. 2018), with all of its parallel
# training data (as tensor2tensor's translate_enet_wmt32k, which the PHM paper ran on).
DATASET=wmt18
PAIRS="en-et"
BPE_SIZE=32000
# fairseq's WMT recipes filter training pairs like this (clean-corpus-n.perl -ratio 1.5 ... 1 250)
CLEAN_MAX_LEN=250 CLEAN_RATIO=1.5
STATMT=https://data.statmt.org/wmt18/translation-task
ABOUT="WMT'18 English-Estonian (Bojar et al. 2018):
  train = Europarl v8 (training-parallel-ep-v8.tgz: europarl-v8.et-en.{et,en})
        + ParaCrawl release 1 (paracrawl-release1.en-et.zipporah0-dedup-clean.{tgz,en,et})
        + Rapid 2016 (rapid2016.tgz: rapid2016.et-en.{et,en});
  valid = newsdev2018 (dev.tgz: dev/newsdev2018-enet-{src.en,ref.et}.sgm, eten for et-en);
  test  = newstest2018 (test.tgz: test/newstest2018-enet-{src.en,ref.et}.sgm, or eten)."
source "$(dirname "$0")/lib.sh"

PARACRAWL=paracrawl-release1.en-et.zipporah0-dedup-clean
sources() {
  echo "$STATMT/training-parallel-ep-v8.tgz"
  echo "https://s3.amazonaws.com/web-language-models/paracrawl/release1/$PARACRAWL.tgz"
  echo "$STATMT/rapid2016.tgz"
  echo "$STATMT/dev.tgz"
  echo "$STATMT/test.tgz"
}

extract() {
  add_pair train plain "europarl-v8.et-en.$SRC" "europarl-v8.et-en.$TGT"
  add_pair train plain "$PARACRAWL.$SRC" "$PARACRAWL.$TGT"
  # the archive's file names have been seen in both orders
  add_pair train plain "rapid2016.et-en.$SRC|rapid2016.en-et.$SRC" "rapid2016.et-en.$TGT|rapid2016.en-et.$TGT"
  add_wmt valid newsdev2018
  add_wmt test newstest2018
}

prepare "$@"
