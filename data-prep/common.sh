# What every data-prep script shares (sourced by lib.sh, nli_common.sh and glove.sh): the tools,
# messages, downloads, the options every script takes and the output contract (docs/data-prep.md):
#   - the output folder is --out DIR (each script has its default below the current folder);
#   - it is built in DIR.partial and renamed to DIR once complete (outdir.py): a failed run
#     leaves no DIR, and an earlier DIR stays until its replacement is ready;
#   - an existing DIR is replaced only if this script made it (its prep.json says so) and it
#     holds nothing else; any other folder is refused and left as it is: no file that the
#     script did not write is ever deleted;
#   - the same settings again: nothing to do; --force prepares the folder again;
#   - prep.json, written last, records the script, the command, the settings, the inputs, the
#     counts and the files written;
#   - an unknown option is refused with the usage.
# A script sets NAME (for messages), OUT's default and CONFIG (config.KEY=VALUE: the settings
# that make the output), then calls begin_output, builds the output in $STAGE (scratch files in
# $TMP, removed unless --keep-tmp) and ends with commit_output KEY=VALUE... for prep.json.

# shellcheck disable=SC2034 # the variables set here are the sourcing scripts'
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# The scripts call the tools by name; a checkout's own environment (make install) is used
# when they are not on PATH, so that data-prep/*.sh work from a fresh clone.
if ! command -v fairseq-preprocess > /dev/null && [ -x "$HERE/../.venv/bin/fairseq-preprocess" ]; then
  PATH="$(cd "$HERE/.." && pwd)/.venv/bin:$PATH"
fi
export PYTHONUTF8=1
PYTHON=${PYTHON:-python3}
SCRIPT=data-prep/${0##*/}
textops() { "$PYTHON" "$HERE/textops.py" "$@"; }
outdir() { "$PYTHON" "$HERE/outdir.py" "$@"; }

say() { printf '%s\n' "$*"; }
die() { printf '%s: error: %s\n' "${NAME:-${0##*/}}" "$*" >&2; exit 1; }
warn() { printf '%s: warning: %s\n' "${NAME:-${0##*/}}" "$*" >&2; NOTES+=("$*"); }
# value "$@": an option's value in VALUE (not a $(...) subshell, whose exit would not stop the script)
value() { if [ $# -lt 2 ] || [ -z "$2" ]; then usage_error "option $1 needs a value"; fi; VALUE=$2; }
count() { wc -l < "$1" | tr -d ' '; }
NOTES=()

# --- options ----------------------------------------------------------------------------------
# parse_options "$@" takes the options below; a script's own options go to its function
# `option "$@"`, which sets TAKEN to the number of arguments it used, or returns 1 for an
# option it does not know. The script also defines `usage` (--help) and, when it has options
# of its own, SYNOPSIS (them, in one line, for the usage line of an error).
: "${USES_WORKERS:=1}" # 0 in a script that runs no tool in parallel (glove.sh sets it before sourcing)
option() { return 1; }

usage_error() {
  printf '%s: error: %s\nusage: %s %s[--src-dir DIR] [--out DIR] [--download-dir DIR]%s [--keep-tmp] [--force]\n' \
    "${NAME:-${0##*/}}" "$1" "$SCRIPT" "${SYNOPSIS:+$SYNOPSIS }" "$( ((USES_WORKERS)) && echo ' [--workers N]')" >&2
  exit 2
}

common_usage() {
  cat << EOF
  --out DIR            output folder (default: $DEFAULT_OUT): a new or empty folder,
                       or an earlier output of this script that holds nothing else
  --src-dir DIR        offline: the official files from DIR (searched recursively), as the
                       archives that would be downloaded or their extracted files
  --download-dir DIR   where downloads are kept for the next run (default: $DEFAULT_DOWNLOAD_DIR)
EOF
  if ((USES_WORKERS)); then echo "  --workers N          parallel processes for the tools (default: $(nproc))"; fi
  cat << EOF
  --keep-tmp           keep the intermediate files (OUT/tmp; on failure OUT.partial)
  --force              prepare again, although OUT is prepared with these settings
  -h, --help           this text
EOF
}

parse_options() {
  COMMAND=$(printf '%q ' "$SCRIPT" "$@")
  COMMAND=${COMMAND% }
  OUT='' SRC_DIR='' DOWNLOAD_DIR='' KEEP_TMP=0 FORCE=0 WORKERS=$(nproc)
  while (($#)); do
    TAKEN=0
    case $1 in
      --out) value "$@"; OUT=$VALUE TAKEN=2 ;;
      --src-dir) value "$@"; SRC_DIR=$VALUE TAKEN=2 ;;
      --download-dir) value "$@"; DOWNLOAD_DIR=$VALUE TAKEN=2 ;;
      --workers) ((USES_WORKERS)) || usage_error "unknown option '$1' (see --help)"; value "$@"; WORKERS=$VALUE TAKEN=2 ;;
      --keep-tmp) KEEP_TMP=1 TAKEN=1 ;;
      --force) FORCE=1 TAKEN=1 ;;
      -h | --help) usage; exit 0 ;;
      --dest) usage_error "unknown option '--dest': the output folder is --out DIR, in every data-prep script" ;;
      *) option "$@" || usage_error "unknown option '$1' (see --help)" ;;
    esac
    shift "$TAKEN"
  done
  [[ $WORKERS =~ ^[1-9][0-9]*$ ]] || die "--workers must be a positive integer, not '$WORKERS'"
  if [ -n "$SRC_DIR" ]; then
    [ -d "$SRC_DIR" ] || die "--src-dir $SRC_DIR: no such folder"
    SRC_DIR=$(cd "$SRC_DIR" && pwd)
  fi
}

# --- downloads --------------------------------------------------------------------------------
# Downloads land under their own name only once complete and checked.
is_archive() { case $1 in *.gz | *.tgz | *.zip) return 0 ;; *) return 1 ;; esac; }

archive_error() { # FILE NAME: prints why FILE is not a complete file of NAME's kind
  case $2 in
    *.gz | *.tgz) gzip -t "$1" 2>&1 ;;
    *.zip) textops unzip "$1" 2>&1 ;;
    *) [ -s "$1" ] || { echo "empty file"; return 1; } ;;
  esac
}

# try_download URL FILE: returns 1 with the reason in DOWNLOAD_ERROR when FILE cannot be had.
try_download() {
  local url=$1 file=$2 error rc
  if [ -s "$file" ] && archive_error "$file" "$file" > /dev/null; then
    say "    $file (downloaded before)"
    return
  fi
  say "    downloading $url"
  mkdir -p "$(dirname "$file")"
  curl -fL --retry 2 --connect-timeout 30 "$([ -t 1 ] && echo --progress-bar || echo -sS)" \
    -o "$file.part" "$url" || {
    rc=$?
    rm -f "$file.part"
    DOWNLOAD_ERROR="could not download $url (curl exit code $rc). Offline? Fetch the file another way and pass --src-dir DIR, a folder that holds it${OFFLINE_FILES:+ or the files it contains ($OFFLINE_FILES)}"
    return 1
  }
  error=$(archive_error "$file.part" "$file") || {
    rm -f "$file.part"
    DOWNLOAD_ERROR="the download of $url is truncated or not the expected file ($error); it was removed: run again"
    return 1
  }
  mv "$file.part" "$file"
}

download() { try_download "$@" || die "$DOWNLOAD_ERROR"; } # URL FILE

# --- the output contract ----------------------------------------------------------------------

begin_output() {
  OUT=${OUT%/}
  case ${OUT##*/} in . | .. | '') die "--out must name the output folder itself, not '$OUT'" ;; esac
  if [ -L "$OUT" ] && [ -d "$OUT" ]; then # a link to a folder: the output goes into that folder, the link stays
    say "$NAME: --out $OUT is a link to $(readlink -f "$OUT"): writing there"
    OUT=$(readlink -f "$OUT")
  fi
  local plan force=()
  if ((FORCE)); then force=(--force); fi
  plan=$(outdir plan ${force[@]+"${force[@]}"} "$OUT" "$SCRIPT" "${CONFIG[@]}") || die "${plan:-outdir.py plan failed}"
  if [ "$plan" = prepared ]; then
    say "$NAME: $OUT is already prepared with these settings (see its prep.json); --force prepares it again"
    exit 0
  fi
  STAGE=$OUT.partial TMP=$OUT.partial/tmp
  plan=$(outdir stage "$STAGE" "$SCRIPT") || die "${plan:-outdir.py stage failed}"
  mkdir -p "$TMP"
  OUT_ABS=$(cd "$(dirname "$OUT")" && pwd)/${OUT##*/}
  trap on_exit EXIT
}

commit_output() { # KEY=VALUE...: prep.json's fields besides those of every script
  local error
  ((KEEP_TMP)) || rm -rf "$TMP"
  outdir manifest "$STAGE" "script=$SCRIPT" "name=$NAME" "${CONFIG[@]}" "$@" \
    "command=$COMMAND" "cwd=$PWD" "seconds=$SECONDS" "created=$(date -u +%FT%TZ)"
  error=$(outdir commit "$STAGE" "$OUT" "$SCRIPT") || die "${error:-outdir.py commit failed}"
}

on_exit() {
  local rc=$?
  ((rc)) && [ -d "${STAGE:-}" ] || return 0
  if ((KEEP_TMP)); then
    say "$NAME: failed${STEP:+ during [$STEP]}; the unfinished output is in $STAGE" >&2
  else
    rm -rf "$STAGE"
    say "$NAME: failed${STEP:+ during [$STEP]}; nothing was written to $OUT" >&2
  fi
}
