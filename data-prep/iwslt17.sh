#!/usr/bin/env bash
# IWSLT'17 TED talks (WIT3; Cettolo et al. 2012), the bilingual English-Indonesian track.
DATASET=iwslt17
PAIRS="en-id"
BPE_SIZE=32000
CLEAN_MAX_LEN=175 CLEAN_RATIO=1.5
ABOUT="IWSLT'17 English-Indonesian (WIT3 release 2017-01-more; Cettolo et al. 2012). The archive
  en-id.tgz holds en-id/train.tags.en-id.{en,id}, IWSLT17.TED.dev2010.en-id.{en,id}.xml (valid)
  and IWSLT17.TED.tst2017plus.en-id.{en,id}.xml (test). WIT3's site may now send you to a
  download page: then fetch the archive by hand and pass --src-dir."
source "$(dirname "$0")/lib.sh"

sources() { echo "https://wit3.fbk.eu/archive/2017-01-more/texts/$L1/$L2/$PAIR.tgz"; }

extract() {
  add_pair train tags "train.tags.$PAIR.$SRC" "train.tags.$PAIR.$TGT"
  add_pair valid segs "IWSLT17.TED.dev2010.$PAIR.$SRC.xml" "IWSLT17.TED.dev2010.$PAIR.$TGT.xml"
  add_pair test segs "IWSLT17.TED.tst2017plus.$PAIR.$SRC.xml" "IWSLT17.TED.tst2017plus.$PAIR.$TGT.xml"
}

prepare "$@"
