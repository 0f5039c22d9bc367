#!/usr/bin/env bash
# IWSLT'14 TED talks (WIT3; Cettolo et al. 2012): German-English and Romanian-English.
DATASET=iwslt14
PAIRS="de-en ro-en"
BPE_SIZE=10000
# fairseq's prepare-iwslt14.sh, the recipe behind the usual de-en numbers, lowercases and
# filters training pairs like this (clean-corpus-n.perl -ratio 1.5 ... 1 175).
LOWERCASE=1 CLEAN_MAX_LEN=175 CLEAN_RATIO=1.5
ABOUT="IWSLT'14 (WIT3 release 2014-01; Cettolo et al. 2012). The archive L1-en.tgz holds
  L1-en/train.tags.L1-en.{L1,en} and L1-en/IWSLT14.TED{,X}.{dev,tst}20XX.L1-en.{L1,en}.xml.
  de-en: fairseq's copy of WIT3's archive, split as fairseq's prepare-iwslt14.sh does it:
         valid = 1 in 23 training pairs, test = dev2010 + TEDX dev2012 + tst2010-2012.
  ro-en: WIT3's archive (the site may now send you to a download page: then fetch
         ro-en.tgz by hand and pass --src-dir); valid = dev2010, test = tst2010-2012.
  Lowercased by default, as in fairseq's recipe (--cased keeps the case)."
source "$(dirname "$0")/lib.sh"

sources() {
  case $PAIR in
    de-en) echo https://dl.fbaipublicfiles.com/fairseq/data/iwslt14/de-en.tgz ;;
    *) echo "https://wit3.fbk.eu/archive/2014-01/texts/$L1/$L2/$PAIR.tgz" ;;
  esac
}

talks() { # SPLIT SET...: IWSLT's XML files of these sets
  local split=$1 set
  for set in "${@:2}"; do add_pair "$split" segs "IWSLT14.$set.$PAIR.$SRC.xml" "IWSLT14.$set.$PAIR.$TGT.xml"; done
}

extract() {
  add_pair train tags "train.tags.$PAIR.$SRC" "train.tags.$PAIR.$TGT"
  if [ "$PAIR" = de-en ]; then
    holdout valid 23
    talks test TED.dev2010 TEDX.dev2012 TED.tst2010 TED.tst2011 TED.tst2012
  else
    talks valid TED.dev2010
    talks test TED.tst2010 TED.tst2011 TED.tst2012
  fi
}

prepare "$@"
