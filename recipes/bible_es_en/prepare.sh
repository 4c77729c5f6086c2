#!/usr/bin/env bash
# Prepare the Spanish→English Bible corpus (RV1909 → WEB) for fairseq.
#
# usage: recipes/bible_es_en/prepare.sh [--out DIR] [--vocab N] [--max-train N]
#                                       [--valid N] [--test N] [--seed N] [--sword-dir DIR]
#   --out DIR        output directory            (env OUT,       default data/bible_es_en)
#   --vocab N        joint SentencePiece size    (env VOCAB,     default 8000)
#   --max-train N    keep N training pairs       (env MAX_TRAIN, default all)
#   --valid N        held-out valid verses       (env VALID,     default 1000)
#   --test N         held-out test verses        (env TEST,      default 1000)
#   --seed N         chapter split / sample seed (env SPLIT_SEED, default 1; not SEED,
#                    which the training recipes read as the training seed)
#   --sword-dir DIR  SWORD library root          (env SWORD_DIR, default /usr/share/sword)
#   env PYTHON       interpreter with sentencepiece, pysword, fairseq
#                    (default .venv/bin/python)
#
# Writes DIR/raw (text + verse refs), DIR/spm (joint.model, dict.txt, pieces) and
# DIR/bin (fairseq-preprocess output: train with --task translation -s es -t en).
# A step is skipped when its outputs exist and are newer than its inputs and its
# parameters are unchanged, so a second run rebuilds nothing.
# Needs the Debian packages sword-text-sparv and sword-text-web (`make sword`).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-data/bible_es_en}
VOCAB=${VOCAB:-8000}
MAX_TRAIN=${MAX_TRAIN:-}
VALID=${VALID:-1000}
TEST=${TEST:-1000}
SEED=${SPLIT_SEED:-1}
SWORD_DIR=${SWORD_DIR:-/usr/share/sword}
PYTHON=${PYTHON:-$REPO/.venv/bin/python}

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit "${1:-2}"; }
while [ $# -gt 0 ]; do
  case $1 in
    --out) OUT=$2; shift 2 ;;
    --vocab) VOCAB=$2; shift 2 ;;
    --max-train) MAX_TRAIN=$2; shift 2 ;;
    --valid) VALID=$2; shift 2 ;;
    --test) TEST=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --sword-dir) SWORD_DIR=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$REPO"
PREPROCESS=$(dirname "$PYTHON")/fairseq-preprocess
[ -x "$PREPROCESS" ] || PREPROCESS=$(command -v fairseq-preprocess)
# The helpers run as scripts, not `-m luong_plugin...`: importing the package
# imports fairseq (~5 s per call) and these steps need only pysword/sentencepiece.
CORPORA=luong_plugin/corpora

# stale, record, skip and corpus_pieces (the SentencePiece, binary and profile steps)
# shellcheck source=recipes/corpus_steps.sh
source "$REPO/recipes/corpus_steps.sh"

# 1. Extract, clean, align and split the verses.
RAW=$OUT/raw
mkdir -p "$RAW"
record "$RAW/.params" "seed=$SEED max_train=$MAX_TRAIN valid=$VALID test=$TEST sword_dir=$SWORD_DIR"
raw_outputs=()
for s in "${SPLITS[@]}"; do raw_outputs+=("$RAW/$s.es" "$RAW/$s.en" "$RAW/refs.$s"); done
modules=("$SWORD_DIR"/modules/texts/ztext/{spaRV1909eb,engWEB2015eb}/*)
[ -e "${modules[0]}" ] || modules=()  # the CLI reports the missing packages
if stale "${raw_outputs[@]}" -- "$CORPORA/bible.py" "$RAW/.params" "${modules[@]}"; then
  echo "[extract] $RAW"
  rm -rf "$RAW.tmp"
  "$PYTHON" "$CORPORA/bible.py" --out "$RAW.tmp" --sword-dir "$SWORD_DIR" \
    --seed "$SEED" --valid "$VALID" --test "$TEST" ${MAX_TRAIN:+--max-train "$MAX_TRAIN"}
  mv "$RAW.tmp"/* "$RAW/"
  rmdir "$RAW.tmp"
else
  skip extract
fi

# One joint SentencePiece model on train.es + train.en, every split in pieces, the
# binary data with one dictionary for both sides, the length profile.
corpus_pieces "$OUT" es en "$VOCAB"

echo "done: $OUT"
wc -l "$RAW"/{train,valid,test}.es | sed '$d'
