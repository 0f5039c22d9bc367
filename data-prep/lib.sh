# The steps that the translation data-prep scripts share: fetching and checking the official
# files, extraction helpers, sacremoses tokenization, cleaning, joint BPE (subword-nmt or
# sentencepiece) and fairseq-preprocess; the options and the output contract that every
# data-prep script follows are common.sh's (docs/data-prep.md).
#
# A dataset script sets the variables below, defines two functions and ends with
# `prepare "$@"`:
#   DATASET       first part of the output name (multi30k -> data-bin/multi30k.en-de)
#   PAIRS         supported language pairs in the corpus's own order ("de-en ro-en"); each
#                 works in both directions; the first one is the default
#   BPE_SIZE      default BPE merges (subword-nmt) or vocabulary size (sentencepiece)
#   LOWERCASE     1 to lowercase by default (--lowercase / --cased override it)
#   PRETOKENIZED  1 for a corpus that comes tokenized: no sacremoses, no --tokenizer later
#   CLEAN_MAX_LEN, CLEAN_RATIO   the training-pair filter (see clean_train)
#   ABOUT         the corpus, its official files and their layout, for --help
#   sources()     prints the official URLs of the chosen pair, one a line
#   extract()     fills the train/valid/test splits with add_pair and the helpers around it
# Inside both functions SRC/TGT are the chosen direction and L1/L2, PAIR=L1-L2 the corpus's
# own order (the one its file names use).

# shellcheck disable=SC2153 # DATASET, PAIRS, ABOUT, sources and extract come from the dataset script
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# defaults for what a dataset script leaves unset
: "${BPE_SIZE:=10000}" "${LOWERCASE:=0}" "${PRETOKENIZED:=0}" "${CLEAN_MAX_LEN:=250}" "${CLEAN_RATIO:=}"
SPLITS=(train valid test)
INPUTS=() # inputs.SPLIT[]=FILE for prep.json
step() { STEP=$1; printf '\n==> %s [%s] %s\n' "$NAME" "$1" "$2"; }

SYNOPSIS="[-s L] [-t L] [--bpe subword_nmt|sentencepiece] [--bpe-size N] [--lowercase|--cased]"

usage() {
  resolve_pair
  DEFAULT_OUT=data-bin/$DATASET.$SRC-$TGT DEFAULT_DOWNLOAD_DIR=work/downloads/$DATASET
  cat << EOF
Usage: $SCRIPT [options]

$ABOUT

Official files for $SRC-$TGT:
$(sources | sed 's/^/  /')

Output: OUT/ with fairseq-preprocess's files for train/valid/test (--joined-dictionary),
bpe.codes or spm.model, raw/{valid,test}.{SRC,TGT} (the untokenized references) and
prep.json (written last: a folder without it is not finished). See docs/data-prep.md.

Options:
  -s, --source-lang L  source language; supported pairs: $PAIRS (either way)
  -t, --target-lang L  target language (default: the first pair, as written)
  --bpe KIND           subword_nmt (default) or sentencepiece
  --bpe-size N         BPE merges (subword_nmt) or vocabulary size (sentencepiece);
                       default $BPE_SIZE
  --lowercase, --cased lowercase all text, references included (default: $( ((LOWERCASE)) && echo lowercase || echo cased))
$(common_usage)
EOF
}

option() {
  case $1 in
    -s | --source-lang) value "$@"; SRC=$VALUE TAKEN=2 ;;
    -t | --target-lang) value "$@"; TGT=$VALUE TAKEN=2 ;;
    --bpe) value "$@"; BPE=$VALUE TAKEN=2 ;;
    --bpe-size) value "$@"; BPE_SIZE=$VALUE TAKEN=2 ;;
    --lowercase) LOWERCASE=1 TAKEN=1 ;;
    --cased) LOWERCASE=0 TAKEN=1 ;;
    *) return 1 ;;
  esac
}

parse_args() {
  SRC='' TGT='' BPE=subword_nmt
  parse_options "$@"
  case $BPE in
    subword_nmt | subword-nmt) BPE=subword_nmt ;;
    sentencepiece) ;;
    *) die "unknown --bpe '$BPE': use subword_nmt or sentencepiece" ;;
  esac
  [[ $BPE_SIZE =~ ^[1-9][0-9]*$ ]] || die "--bpe-size must be a positive integer, not '$BPE_SIZE'"
}

# Picks the pair from -s/-t: either may be left out when the other one settles it.
resolve_pair() {
  local pair a b all=
  for pair in $PAIRS; do
    a=${pair%-*} b=${pair#*-}
    if [[ ${SRC:-$a} == "$a" && ${TGT:-$b} == "$b" ]]; then SRC=$a TGT=$b; break; fi
    if [[ ${SRC:-$b} == "$b" && ${TGT:-$a} == "$a" ]]; then SRC=$b TGT=$a; break; fi
    all+="$a-$b, $b-$a, "
    pair=
  done
  [ -n "$pair" ] || die "unsupported language pair ${SRC:-?}-${TGT:-?} for $DATASET: supported pairs are ${all%, }"
  # shellcheck disable=SC2034 # for the dataset script's sources() and extract()
  L1=$a L2=$b PAIR=$pair
}

# --- 1. the official files ------------------------------------------------------------------
# Downloads (common.sh) land in DOWNLOAD_DIR; with --src-dir the files there are checked
# instead. Each archive is unpacked into TMP/orig/ARCHIVE_NAME/, so that messages can name the
# archive a file came from.
declare -A ARCHIVES=() # archive name -> its path

unpack() { # FILE NAME: an archive's files go to TMP/orig/NAME/; other files are read in place
  local dir=$ORIG/$2
  is_archive "$2" || return 0
  ARCHIVES[$2]=$1
  mkdir -p "$dir"
  case $2 in
    *.tgz | *.tar.gz) tar -xzf "$1" -C "$dir" ;;
    *.gz) gzip -dc "$1" > "$dir/${2%.gz}" ;;
    *.zip) textops unzip "$1" "$dir" ;;
  esac
}

describe() { # PATH: an input file as the user knows it, ARCHIVE:MEMBER for an unpacked one
  local member=${1#"$ORIG/"}
  if [ "$member" = "$1" ]; then printf '%s' "$1"; else printf '%s' "${ARCHIVES[${member%%/*}]}:${member#*/}"; fi
}

fetch_sources() {
  local urls url name file error
  urls=$(sources)
  for url in $urls; do
    name=${url##*/}
    if [ -z "$SRC_DIR" ]; then
      file=$DOWNLOAD_DIR/$name
      download "$url" "$file"
    else
      file=$(find "$SRC_DIR" -name "$name" -type f -print -quit)
      if [ -z "$file" ]; then
        say "    $name: not in $SRC_DIR$(is_archive "$name" && echo ", looking for its extracted files there")"
        continue
      fi
      error=$(archive_error "$file" "$name") ||
        die "$file is truncated or corrupt ($error): get a fresh copy from $url"
      say "    $file"
    fi
    unpack "$file" "$name"
  done
}

# --- 2. extraction: the official files -> TMP/raw.SPLIT.LANG (untokenized, aligned) --------

# find_input NAME[|ALTERNATIVE...]: the path of an official file, unpacked or as given.
find_input() {
  local names name path
  IFS='|' read -ra names <<< "$1"
  for name in "${names[@]}"; do
    path=$(find "$ORIG" "$INPUT_DIR" -name "$name" -type f -print -quit 2> /dev/null) || true
    [ -z "$path" ] || { printf '%s\n' "$path"; return 0; }
  done
  return 1
}

input_path() {
  find_input "$1" ||
    die "missing input file ${1//|/ or }: not in $INPUT_DIR nor in an archive there. The official files: $(sources | tr '\n' ' ')"
}

# Every input enters through textops read (textlines.py): lines end at "\n" only, the last one
# with or without it, "\r\n" reads as "\n", another "\r" becomes a space (the Python tools
# would end a line there), and a byte that is not UTF-8 stops the run with file and line.
read_plain() { textops read "$1" --name "$(describe "$1")"; }
# IWSLT .xml and WMT .sgm: one <seg> a line, read the way sacrebleu reads them.
read_segs() { read_plain "$1" | sed -n -E 's#^\s*<seg[^>]*>\s*(.*\S)?\s*</seg>\s*$#\1#p'; }
# IWSLT train.tags: the talks' text between tag lines of metadata. Titles and descriptions are
# aligned text too (fairseq's prepare-iwslt14.sh keeps them); every other tag line goes.
read_tags() { read_plain "$1" | sed -E -e 's#^\s*<(title|description)>(.*)</\1>\s*$#\2#' -e '/^\s*</d'; }
# A corpus distributed tokenized and XML-escaped (Stanford's IWSLT'15 en-vi) is detokenized,
# so that it takes the same steps as the others and its references are plain text.
read_moses() { read_plain "$1" | sacremoses -q -l "$2" -j "$WORKERS" detokenize; }

# add_pair SPLIT FORMAT SRC_FILE TGT_FILE: appends an aligned pair of official files to SPLIT.
# FORMAT: plain, segs, tags or moses (the read_* above); a FILE may list alternatives (a|b).
add_pair() {
  local split=$1 format=$2 src_file tgt_file n_src n_tgt
  src_file=$(input_path "$3")
  tgt_file=$(input_path "$4")
  "read_$format" "$src_file" "$SRC" > "$TMP/part.$SRC"
  "read_$format" "$tgt_file" "$TGT" > "$TMP/part.$TGT"
  n_src=$(count "$TMP/part.$SRC") n_tgt=$(count "$TMP/part.$TGT")
  no_sentences "$src_file" "$n_src" "$format"
  no_sentences "$tgt_file" "$n_tgt" "$format"
  [ "$n_src" = "$n_tgt" ] ||
    die "misaligned $split data: $(describe "$src_file") has $n_src lines but $(describe "$tgt_file") has $n_tgt ($format format); both sides need one line per sentence pair"
  say "    $split += ${src_file##*/} / ${tgt_file##*/}: $n_src lines"
  INPUTS+=("inputs.$split[]=$(describe "$src_file")" "inputs.$split[]=$(describe "$tgt_file")")
  cat "$TMP/part.$SRC" >> "$TMP/raw.$split.$SRC"
  cat "$TMP/part.$TGT" >> "$TMP/raw.$split.$TGT"
  rm "$TMP/part.$SRC" "$TMP/part.$TGT"
}

no_sentences() { # FILE N FORMAT: an input file that gives no sentence is an error, named
  local what="is empty"
  (($2)) && return
  if [ -s "$1" ]; then
    case $3 in
      segs) what="holds no <seg> lines" ;;
      tags) what="holds tag lines only, no text" ;;
      *) what="holds no text" ;;
    esac
  fi
  die "$(describe "$1") $what: each split needs sentences; get a complete copy of the file"
}

# holdout SPLIT EVERY [OFFSET]: moves the training pairs whose line number is OFFSET modulo
# EVERY into SPLIT, for corpora without an official one (the way prepare-iwslt14.sh does).
holdout() {
  local lang
  for lang in "$SRC" "$TGT"; do
    awk -v n="$2" -v k="${3:-0}" -v out="$TMP/raw.$1.$lang" \
      'NR % n == k { print > out; next } { print }' "$TMP/raw.train.$lang" > "$TMP/rest.$lang"
    mv "$TMP/rest.$lang" "$TMP/raw.train.$lang"
  done
  [ -s "$TMP/raw.$1.$SRC" ] ||
    die "the $1 split (1 in $2 training pairs) would be empty: the training files hold $(count "$TMP/raw.train.$SRC") pairs"
  INPUTS+=("inputs.$1[]=1 in $2 training pairs")
  say "    $1 = 1 in $2 training pairs: $(count "$TMP/raw.$1.$SRC") lines"
}

# Corpora of one file per split and language, NAME.LANG[SUFFIX] (Multi30k, Stanford's IWSLT'15,
# Shakespeare): SPLIT_FILES="train=NAME valid=NAME test=NAME" names them.
split_file_urls() { # BASE_URL [SUFFIX]
  local item lang
  for item in $SPLIT_FILES; do for lang in "$SRC" "$TGT"; do echo "$1/${item#*=}.$lang${2:-}"; done; done
}

add_split_files() { # FORMAT [SUFFIX]
  local item
  for item in $SPLIT_FILES; do add_pair "${item%%=*}" "$1" "${item#*=}.$SRC${2:-}" "${item#*=}.$TGT${2:-}"; done
}

# add_wmt SPLIT SET: a WMT news test set in its SGML files (newstest2016-enro-src.en.sgm, ...).
add_wmt() { add_pair "$1" segs "$2-$SRC$TGT-src.$SRC.sgm" "$2-$SRC$TGT-ref.$TGT.sgm"; }

copy_split() { # FROM TO
  cp "$TMP/raw.$1.$SRC" "$TMP/raw.$2.$SRC"
  cp "$TMP/raw.$1.$TGT" "$TMP/raw.$2.$TGT"
  INPUTS+=("inputs.$2[]=the $1 split")
}

# --- 3-6. tokenize, clean, BPE, binarize ------------------------------------------------------

each() { # COMMAND...: runs COMMAND SPLIT LANG for every split and language
  local split lang
  for split in "${SPLITS[@]}"; do for lang in "$SRC" "$TGT"; do "$@" "$split" "$lang"; done; done
}

show_counts() { # PREFIX
  local split
  for split in "${SPLITS[@]}"; do printf '    %-5s %8d lines\n' "$split" "$(count "$TMP/$1.$split.$SRC")"; done
}

lowercase() { textops lower < "$TMP/raw.$1.$2" > "$TMP/lower" && mv "$TMP/lower" "$TMP/raw.$1.$2"; }

tokenizer() { # what tokenize does, in words
  if ((PRETOKENIZED)); then echo "none: the corpus comes tokenized"
  elif [ "$BPE" = sentencepiece ]; then echo "none: sentencepiece reads the raw text"
  else echo "sacremoses -l LANG tokenize -a"
  fi
}

# sacremoses as fairseq's --tokenizer moses does it (aggressive dash splits, which the
# detokenizer undoes at generation); its CLI always XML-escapes, like Moses' tokenizer.perl,
# and fairseq's detokenizer unescapes. One call per language for all splits: on small
# corpora the tool's start-up costs more than the work.
tokenize() { # LANG
  local lang=$1 split n_train n_valid
  if ((PRETOKENIZED)) || [ "$BPE" = sentencepiece ]; then # U+2028 and the like as spaces, as sacremoses makes them
    for split in "${SPLITS[@]}"; do textops spaces < "$TMP/raw.$split.$lang" > "$TMP/tok.$split.$lang"; done
    return
  fi
  n_train=$(count "$TMP/raw.train.$lang") n_valid=$(count "$TMP/raw.valid.$lang")
  cat "$TMP/raw.train.$lang" "$TMP/raw.valid.$lang" "$TMP/raw.test.$lang" |
    sacremoses "${QUIET[@]}" -l "$lang" -j "$WORKERS" tokenize -a |
    awk -v a="$n_train" -v b="$((n_train + n_valid))" -v out="$TMP/tok" -v lang="$lang" '
      { print > (out "." (NR <= a ? "train" : NR <= b ? "valid" : "test") "." lang) }'
}

# Training pairs only: valid and test stay whole, aligned with their raw references.
clean_train() {
  textops clean "$TMP/tok.train.$SRC" "$TMP/tok.train.$TGT" "$TMP/clean.$SRC" "$TMP/clean.$TGT" \
    --max-len "$CLEAN_MAX_LEN" ${CLEAN_RATIO:+--ratio "$CLEAN_RATIO"}
  [ -s "$TMP/clean.$SRC" ] ||
    die "no training pair is left after cleaning (an empty side, over $CLEAN_MAX_LEN tokens${CLEAN_RATIO:+ or a length ratio over $CLEAN_RATIO}): see the training files"
  mv "$TMP/clean.$SRC" "$TMP/tok.train.$SRC"
  mv "$TMP/clean.$TGT" "$TMP/tok.train.$TGT"
}

# One model for both languages, so that fairseq's joined dictionary covers both sides.
learn_bpe() {
  if [ "$BPE" = subword_nmt ]; then
    cat "$TMP/tok.train.$SRC" "$TMP/tok.train.$TGT" > "$TMP/tok.train.both"
    subword-nmt learn-bpe -s "$BPE_SIZE" -i "$TMP/tok.train.both" -o "$STAGE/bpe.codes"
    say "    bpe.codes: $(($(count "$STAGE/bpe.codes") - 1)) merges"
  else
    textops spm-train "$STAGE/spm" "$BPE_SIZE" "$TMP/tok.train.$SRC" "$TMP/tok.train.$TGT"
    say "    spm.model: $(count "$STAGE/spm.vocab") pieces"
  fi
}

apply_bpe() {
  if [ "$BPE" = subword_nmt ]; then
    subword-nmt apply-bpe -c "$STAGE/bpe.codes" --num-workers "$WORKERS" \
      -i "$TMP/tok.$1.$2" -o "$TMP/bpe.$1.$2"
  else
    textops spm-encode "$STAGE/spm.model" < "$TMP/tok.$1.$2" > "$TMP/bpe.$1.$2"
  fi
}

# Every step keeps one line per sentence pair: the sides of train agree, and valid and test
# still match their raw references line for line.
check_aligned() {
  local lang split n_bpe n_raw
  for lang in "$SRC" "$TGT"; do
    for split in valid test; do
      n_bpe=$(count "$TMP/bpe.$split.$lang") n_raw=$(count "$TMP/raw.$split.$lang")
      [ "$n_bpe" = "$n_raw" ] ||
        die "$split.$lang lost its alignment with its raw references: $n_raw raw lines ($TMP/raw.$split.$lang) but $n_bpe after tokenization and BPE ($TMP/bpe.$split.$lang); run with --keep-tmp to keep these files, and please report this"
    done
  done
  n_bpe=$(count "$TMP/bpe.train.$SRC") n_raw=$(count "$TMP/bpe.train.$TGT")
  [ "$n_bpe" = "$n_raw" ] ||
    die "the two sides of train lost their alignment: $TMP/bpe.train.$SRC has $n_bpe lines, $TMP/bpe.train.$TGT $n_raw; run with --keep-tmp to keep these files, and please report this"
}

binarize() {
  fairseq-preprocess --source-lang "$SRC" --target-lang "$TGT" --joined-dictionary \
    --trainpref "$TMP/bpe.train" --validpref "$TMP/bpe.valid" --testpref "$TMP/bpe.test" \
    --destdir "$STAGE" --workers "$WORKERS"
  cmp -s "$STAGE/dict.$SRC.txt" "$STAGE/dict.$TGT.txt" ||
    die "fairseq-preprocess wrote different dictionaries for $SRC and $TGT"
}

# --- 7. the output contract ------------------------------------------------------------------

# fairseq-generate's options for detokenized output. The languages are given because
# fairseq's moses tokenizer takes them from the task and fails on a null one.
generate_argv() { # fairseq-generate's options for detokenized output, one argument a line
  printf '%s\n' --source-lang "$SRC" --target-lang "$TGT"
  ((PRETOKENIZED)) || [ "$BPE" = sentencepiece ] || printf '%s\n' --tokenizer moses
  if [ "$BPE" = subword_nmt ]; then
    printf '%s\n' --bpe subword_nmt --bpe-codes "$OUT_ABS/bpe.codes"
  else
    printf '%s\n' --bpe sentencepiece --sentencepiece-model "$OUT_ABS/spm.model"
  fi
}

generate_args() { # the same on one line, quoted for a shell (a path with a space stays one argument)
  local argv
  mapfile -t argv < <(generate_argv)
  "$PYTHON" -c 'import shlex, sys; print(shlex.join(sys.argv[1:]), end="")' "${argv[@]}"
}

finish() {
  mkdir -p "$STAGE/raw"
  local split lang url note fields=()
  for split in valid test; do
    for lang in "$SRC" "$TGT"; do cp "$TMP/raw.$split.$lang" "$STAGE/raw/$split.$lang"; done
  done
  for split in "${SPLITS[@]}"; do fields+=("splits.$split=$(count "$TMP/bpe.$split.$SRC")"); done
  if [ -n "$SRC_DIR" ]; then fields+=("source.dir=$SRC_DIR"); else
    for url in $(sources); do fields+=("source.urls[]=$url"); done
  fi
  for note in ${NOTES[@]+"${NOTES[@]}"}; do fields+=("notes[]=$note"); done
  local arg
  while IFS= read -r arg; do fields+=("generate_argv[]=$arg"); done < <(generate_argv)
  commit_output "dataset=$DATASET" "source_lang=$SRC" "target_lang=$TGT" "${fields[@]}" \
    "train_before_clean=$TRAIN_EXTRACTED" \
    "clean.max_len=$CLEAN_MAX_LEN" "clean.ratio=${CLEAN_RATIO:-null}" \
    "bpe.kind=$BPE" "bpe.size=$BPE_SIZE" \
    "bpe.file=$([ "$BPE" = subword_nmt ] && echo bpe.codes || echo spm.model)" \
    "lowercase=$( ((LOWERCASE)) && echo true || echo false)" "tokenizer=$(tokenizer)" \
    "raw_references=raw/{valid,test}.{$SRC,$TGT}" "generate_args=$(generate_args)" "${INPUTS[@]}"
}

prepare() {
  parse_args "$@"
  resolve_pair
  NAME=$DATASET.$SRC-$TGT
  OUT=${OUT:-data-bin/$NAME}
  DOWNLOAD_DIR=${DOWNLOAD_DIR:-work/downloads/$DATASET}
  INPUT_DIR=${SRC_DIR:-$DOWNLOAD_DIR}
  QUIET=() # the tools' progress bars only on a terminal
  [ -t 2 ] || QUIET=(-q)
  local tool
  for tool in sacremoses subword-nmt fairseq-preprocess "$PYTHON" $([ -n "$SRC_DIR" ] || echo curl); do
    command -v "$tool" > /dev/null ||
      die "$tool not found: run 'make install' in the project (its .venv is used by these scripts), or put the tools on PATH"
  done

  CONFIG=("config.dataset=$DATASET" "config.source_lang=$SRC" "config.target_lang=$TGT"
    "config.bpe=$BPE" "config.bpe_size=$BPE_SIZE" "config.lowercase=$LOWERCASE"
    "config.source=${SRC_DIR:-official URLs}")
  begin_output
  ORIG=$TMP/orig
  mkdir -p "$ORIG"
  say "$NAME: $SRC -> $TGT into $OUT ($BPE $BPE_SIZE, $( ((LOWERCASE)) && echo lowercased || echo cased), from ${SRC_DIR:-the official URLs})"

  step 1/7 "official files ($INPUT_DIR)"
  fetch_sources
  step 2/7 "extract train/valid/test"
  extract
  local split lang
  for split in "${SPLITS[@]}"; do for lang in "$SRC" "$TGT"; do
    [ -s "$TMP/raw.$split.$lang" ] || die "no $split data for $lang was extracted"
  done; done
  ((LOWERCASE)) && each lowercase
  show_counts raw
  TRAIN_EXTRACTED=$(count "$TMP/raw.train.$SRC")
  step 3/7 "tokenize: $(tokenizer)"
  tokenize "$SRC"
  tokenize "$TGT"
  step 4/7 "clean training pairs"
  clean_train
  step 5/7 "learn joint BPE ($BPE, size $BPE_SIZE)"
  learn_bpe
  step 6/7 "apply BPE and binarize (fairseq-preprocess --joined-dictionary)"
  each apply_bpe
  show_counts bpe
  check_aligned
  binarize
  step 7/7 "raw references and prep.json"
  finish
  say "$NAME: done in ${SECONDS}s: $OUT"
  say "    fairseq-generate $OUT $(generate_args)"
}
