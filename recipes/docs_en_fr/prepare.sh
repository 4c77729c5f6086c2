#!/usr/bin/env bash
# Prepare the English→French technical documentation corpus (Debian's translated
# manuals and message catalogs) for fairseq.
#
# usage: recipes/docs_en_fr/prepare.sh [--out DIR] [--vocab N] [--max-train N]
#                                      [--valid N] [--test N] [--seed N] [--debs DIR]
#                                      [--min-words N] [--sources "NAME ..."]
#   --out DIR        output directory            (env OUT,       default data/docs_en_fr)
#   --vocab N        joint SentencePiece size    (env VOCAB,     default 8000)
#   --max-train N    keep N training pairs       (env MAX_TRAIN, default all)
#   --valid N        held-out valid pairs        (env VALID,     default 1000)
#   --test N         held-out test pairs         (env TEST,      default 1000)
#   --seed N         document split / sample seed (env SPLIT_SEED, default 1; not SEED,
#                    which the training recipes read as the training seed)
#   --min-words N    keep pairs whose English side has N words or more
#                    (env MIN_WORDS, default 0: all; e.g. 10 for longer segments)
#   --sources "N.."  read only these sources (env SOURCES, default all): libreoffice-help
#                    gimp-help debian-handbook gnome-help libreoffice-ui freeciv blender
#   --debs DIR       cache of the .deb files and their unpacked English and French
#                    files, shared by every output directory
#                    (env DEB_CACHE, default data/debs in the repository)
#   env PYTHON       interpreter with sentencepiece and fairseq
#                    (default .venv/bin/python)
#
# Fetches the Debian packages itself (`apt-get download`, no installation; one
# `apt-get update` when the package lists are missing, through sudo unless root),
# unpacks only their English and French files with dpkg-deb, then writes DIR/raw
# (text, document refs, stats.json), DIR/spm (joint.model, dict.txt, pieces), DIR/bin
# (fairseq-preprocess output: train with --task translation -s en -t fr) and
# DIR/lengths.json (words and pieces per line, per split and side).
# A step is skipped when its outputs exist and are newer than its inputs and its
# parameters are unchanged, so a second run rebuilds nothing.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-data/docs_en_fr}
VOCAB=${VOCAB:-8000}
MAX_TRAIN=${MAX_TRAIN:-}
MIN_WORDS=${MIN_WORDS:-0}
SOURCES=${SOURCES:-}
VALID=${VALID:-1000}
TEST=${TEST:-1000}
SEED=${SPLIT_SEED:-1}
DEBS=${DEB_CACHE:-$REPO/data/debs}
PYTHON=${PYTHON:-$REPO/.venv/bin/python}

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit "${1:-2}"; }
while [ $# -gt 0 ]; do
  case $1 in
    --out) OUT=$2; shift 2 ;;
    --vocab) VOCAB=$2; shift 2 ;;
    --max-train) MAX_TRAIN=$2; shift 2 ;;
    --min-words) MIN_WORDS=$2; shift 2 ;;
    --sources) SOURCES=$2; shift 2 ;;
    --valid) VALID=$2; shift 2 ;;
    --test) TEST=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --debs) DEBS=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done

mkdir -p "$OUT" "$DEBS"
OUT=$(cd "$OUT" && pwd)
DEBS=$(cd "$DEBS" && pwd)
cd "$REPO"
PREPROCESS=$(dirname "$PYTHON")/fairseq-preprocess
[ -x "$PREPROCESS" ] || PREPROCESS=$(command -v fairseq-preprocess)
# The helpers run as scripts, not `-m luong_plugin...`: importing the package
# imports fairseq (~5 s per call) and these steps need only the standard library
# and sentencepiece.
CORPORA=luong_plugin/corpora
for tool in apt-get dpkg-deb tar; do
  command -v "$tool" >/dev/null || { echo "error: $tool not found (a Debian system is needed)" >&2; exit 1; }
done

# stale, record, skip and corpus_pieces (the SentencePiece, binary and profile steps)
# shellcheck source=recipes/corpus_steps.sh
source "$REPO/recipes/corpus_steps.sh"

# 1. Fetch the packages (the .deb files only) and unpack their English and French files.
# `debian_docs.py packages` prints one line per package: NAME TAR-PATTERN...
# shellcheck disable=SC2086  # SOURCES is a list of words
PACKAGES=$("$PYTHON" "$CORPORA/debian_docs.py" packages ${SOURCES:+--sources $SOURCES})
SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo
UPDATED=

newest_deb() { find "$DEBS" -maxdepth 1 -name "$1_*.deb" | sort -V | tail -n 1; }

# download PACKAGE: apt-get download into a private folder, then move the .deb in,
# so the cache never holds a partial file.
download() {
  local tmp status
  tmp=$(mktemp -d "$DEBS/.download.XXXXXX")
  status=0
  (cd "$tmp" && apt-get download "$1") >"$tmp/log" 2>&1 || status=$?
  if [ "$status" != 0 ] && [ -z "$UPDATED" ]; then
    echo "[fetch] apt-get download $1 failed; updating the package lists once"
    UPDATED=1
    $SUDO apt-get update -qq >"$tmp/update.log" 2>&1 || cat "$tmp/update.log" >&2
    status=0
    (cd "$tmp" && apt-get download "$1") >"$tmp/log" 2>&1 || status=$?
  fi
  if [ "$status" != 0 ] || ! ls "$tmp"/*.deb >/dev/null 2>&1; then
    echo "error: cannot fetch Debian package $1 with 'apt-get download $1'" \
      "(is a package registry reachable?):" >&2
    sed 's/^/  /' "$tmp/log" >&2
    rm -rf "$tmp"
    exit 1
  fi
  mv "$tmp"/*.deb "$DEBS/"
  rm -rf "$tmp"
}

UNPACKED=$DEBS/unpacked
mkdir -p "$UNPACKED"
stamps=()
while read -r package patterns; do
  deb=$(newest_deb "$package")
  if [ -z "$deb" ]; then
    echo "[fetch] $package"
    download "$package"
    deb=$(newest_deb "$package")
  fi
  dest=$UNPACKED/$package
  stamp=$dest/.unpacked  # the .deb and the patterns it was unpacked with
  if ! [ -f "$stamp" ] || [ "$(cat "$stamp")" != "$(basename "$deb") $patterns" ] \
    || stale "$stamp" -- "$deb"; then
    echo "[unpack] $(basename "$deb")"
    rm -rf "$dest.tmp.$$"
    mkdir -p "$dest.tmp.$$"
    set -f  # the patterns are words for tar, not globs for the shell
    # shellcheck disable=SC2086
    if ! dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$dest.tmp.$$" --wildcards $patterns; then
      echo "error: cannot unpack $patterns from $deb (a damaged file or another layout:" \
        "delete it to fetch it again)" >&2
      rm -rf "$dest.tmp.$$"
      exit 1
    fi
    set +f
    printf '%s\n' "$(basename "$deb") $patterns" >"$dest.tmp.$$/.unpacked"
    rm -rf "$dest"
    mv "$dest.tmp.$$" "$dest"
  else
    skip "unpack $package"
  fi
  stamps+=("$stamp")
done <<<"$PACKAGES"

# 2. Extract, pair, clean, deduplicate and split.
RAW=$OUT/raw
mkdir -p "$RAW"
record "$RAW/.params" "seed=$SEED max_train=$MAX_TRAIN valid=$VALID test=$TEST min_words=$MIN_WORDS sources=$SOURCES"
raw_outputs=("$RAW/stats.json")
for s in "${SPLITS[@]}"; do raw_outputs+=("$RAW/$s.en" "$RAW/$s.fr" "$RAW/refs.$s"); done
if stale "${raw_outputs[@]}" -- "$CORPORA/debian_docs.py" "$CORPORA/help_pages.py" \
  "$CORPORA/mo.py" "$CORPORA/lengths.py" "$CORPORA/doc_splits.py" "$RAW/.params" \
  "${stamps[@]}"; then
  echo "[extract] $RAW"
  rm -rf "$RAW.tmp"
  "$PYTHON" "$CORPORA/debian_docs.py" extract --root "$UNPACKED" --out "$RAW.tmp" \
    --seed "$SEED" --valid "$VALID" --test "$TEST" --min-words "$MIN_WORDS" \
    ${SOURCES:+--sources $SOURCES} \
    ${MAX_TRAIN:+--max-train "$MAX_TRAIN"}
  mv "$RAW.tmp"/* "$RAW/"
  rmdir "$RAW.tmp"
else
  skip extract
fi

# One joint SentencePiece model on train.en + train.fr, every split in pieces, the
# binary data with one dictionary for both sides, the length profile.
corpus_pieces "$OUT" en fr "$VOCAB"

echo "done: $OUT"
wc -l "$RAW"/{train,valid,test}.en | sed '$d'
