#!/usr/bin/env bash
# WMT'14 English->German, Luong et al. (2015) Tables 1 and 4. See README.md here.
#
# usage: recipes/wmt14_en_de/run.sh prepare  --out DIR [--raw-dir RAW] [--vocab N] [--max-len N]
#        recipes/wmt14_en_de/run.sh train    --data DIR [--arch A] [--world-size N] [--plain] [-- FAIRSEQ-ARGS]
#        recipes/wmt14_en_de/run.sh evaluate --data DIR --checkpoint C [--unk-replace] [-- FAIRSEQ-ARGS]
#        recipes/wmt14_en_de/run.sh score    --data DIR --hyp TOKENIZED-FILE
#   env PYTHON   interpreter with fairseq and this package (default .venv/bin/python)
# Runs luong_plugin/corpora/wmt.py as a script (python -m would import fairseq, ~5 s).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
[ $# -ge 1 ] || { sed -n '4,8p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
exec "${PYTHON:-$REPO/.venv/bin/python}" "$REPO/luong_plugin/corpora/wmt.py" "$1" \
  --recipe "$(basename "$(dirname "${BASH_SOURCE[0]}")")" "${@:2}"
