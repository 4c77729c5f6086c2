#!/usr/bin/env bash
# `make demo`: Luong et al.'s best configuration (local-p attention, general score,
# input feeding, dropout; the source read forward, see below) trained on the
# Spanish->English Bible on the CPU, in bf16 where the CPU has it, then beam search
# on the held-out test chapters with fairseq's length penalty chosen on the valid
# chapters, sacreBLEU and chrF with their signatures, sample translations and an
# attention heatmap.
#
# usage: recipes/bible_es_en/demo.sh
#        (env DATA, RUN, MINUTES, THREADS, SEED, PRECISION, WINDOW, SIGMA, FORGET_GATE_BIAS,
#        LENPEN, EXPLORE, PYTHON to override;
#        DRY_RUN=1 prints the training, length-penalty and decoding commands and stops)
#        LENPEN=auto (default): fairseq-generate's --lenpen chosen on the valid chapters
#        among 0.6, 1, 1.4, 1.8 and 2.2 (luong_plugin/analysis/lenpen.py: a decoding of
#        the valid chapters per value);
#        LENPEN=1 decodes with fairseq's default and skips the search, LENPEN=1,1.4
#        chooses among those values
#        PEER=global recipes/bible_es_en/demo.sh   our model with global attention,
#        otherwise the demo (runs/demo_global): the comparison local-p must win
#        PEER=lstm recipes/bible_es_en/demo.sh   fairseq's own `lstm` (global general
#        attention, input feeding, same sizes), trained and decoded the same way, in
#        fp32 (fairseq cannot train in bf16 on a CPU), into runs/demo_lstm: the peer
#        the demo is measured against
#        experiments/budget.py runs these one after the other, two seeds each
# Every step is skipped when its outputs are newer than its inputs, so a second run
# only reads the valid decodings of the length penalty's search and prints the report again. Each step is also a command you can run alone:
#   1. recipes/bible_es_en/prepare.sh --out data/bible_es_en
#   2. recipes/with_tcmalloc fairseq-train ...   (the TRAIN_ARGS below)
#   3. python -m luong_plugin.analysis.lenpen ... -- fairseq-generate ... --gen-subset valid
#      recipes/with_tcmalloc fairseq-generate ... --beam 5 --lenpen L --print-alignment soft
#   4. python -m luong_plugin.analysis.report ...
#   5. luong-bleu-by-length ... and luong-curves ...  (BLEU by source length, learning curve)
set -euo pipefail
{  # read whole before it runs: editing this file cannot change a run in progress

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO"
PYTHON=${PYTHON:-$REPO/.venv/bin/python}
BIN_DIR=$(dirname "$PYTHON")
DATA=${DATA:-data/bible_es_en}
PEER=${PEER:-}
case "$PEER" in
  "") RUN=${RUN:-runs/demo} ;;
  global) RUN=${RUN:-runs/demo_global} ;;
  lstm) RUN=${RUN:-runs/demo_lstm} ;;
  *) echo "PEER must be empty (our local-p model), 'global' (ours, global attention) or 'lstm' (fairseq's --arch lstm), got '$PEER'" >&2; exit 2 ;;
esac
MINUTES=${MINUTES:-15}
THREADS=${THREADS:-$(nproc)}
SEED=${SEED:-1}
WINDOW=${WINDOW:-14}  # local-p's D, in pieces (14: the paper's 10 words, counted in pieces)
case "$WINDOW" in
  ''|*[!0-9]*|0*) echo "WINDOW must be a positive whole number of source pieces (local-p's D), got '$WINDOW'" >&2; exit 2 ;;
esac
SIGMA=${SIGMA:-5}  # local-p's Gaussian sigma, in pieces (0: D/2, the paper's)
if ! [[ "$SIGMA" =~ ^[0-9]+(\.[0-9]+)?$ ]]; then
  echo "SIGMA must be a decimal number >= 0 such as 10 or 7.5 (local-p's Gaussian sigma in pieces; 0: D/2, the paper's), got '$SIGMA'" >&2; exit 2
fi
FORGET_GATE_BIAS=${FORGET_GATE_BIAS:-1}  # added to our LSTMs' forget-gate biases at init
if ! [[ "$FORGET_GATE_BIAS" =~ ^-?[0-9]+(\.[0-9]+)?$ ]]; then
  echo "FORGET_GATE_BIAS must be a decimal number such as 1 or 0.5 (0: the paper's init), got '$FORGET_GATE_BIAS'" >&2; exit 2
fi
LENPEN=${LENPEN:-auto}
if [ "$LENPEN" != auto ] && ! [[ "$LENPEN" =~ ^[0-9]+(\.[0-9]+)?(,[0-9]+(\.[0-9]+)?)*$ ]]; then
  echo "LENPEN must be auto (choose on the valid chapters), a decimal number >= 0 such as 1 (fairseq's default), or such numbers separated by commas to choose among, got '$LENPEN'" >&2; exit 2
fi
# each value once, compared as the search names their files (%g: 1 and 1.0000001 are one)
if ! awk -F, '{for (i = 1; i <= NF; i++) {k = sprintf("%g", $i); if (k in seen) exit 1; seen[k]}}' <<< "$LENPEN"; then
  echo "LENPEN must give each value once, got '$LENPEN'" >&2; exit 2
fi
# after every check above, which need no Python: a bad value is refused at once
PRECISION=${PRECISION:-}
if [ -z "$PRECISION" ]; then  # by measurement: bf16 on a CPU with native bf16, else fp32 (docs/SPEED.md)
  PRECISION=$("$PYTHON" -c "
from luong_plugin.modules.precision import default_precision
print(default_precision())" \
    2>/dev/null) || { echo "[demo] cannot import luong_plugin with $PYTHON: run make setup" >&2; exit 1; }
  [ "$PRECISION" = bf16 ] || echo "[demo] training in fp32 on this machine (a GPU, or a CPU without native bf16)" >&2
fi
EXPLORE=${EXPLORE:-1}

# The paper's best system (Table 1, last trained row: local-p, general, input
# feeding, dropout) scaled to 2 CPU cores: 1 x 256 LSTMs instead of 4 x 1000, 8K
# joint SentencePiece vocabulary, D = 14 pieces, Adam instead of plain SGD (a
# 15-minute budget cannot afford 10 epochs of SGD), batches of 2000 tokens and
# Adam's beta2 = 0.98. Where this departs from the paper (docs/DEMO.md: why each, and
# which page holds the evidence):
# - the source is read forward, not reversed;
# - --renormalize-window: eq. (10)'s Gaussian times the softmax, renormalised;
# - --position-logit-bound 4 keeps eq. (9)'s sigmoid out of saturation under Adam;
# - D = 14 pieces (the paper's 10 words, counted in pieces) with eq. (10)'s sigma kept
#   at 5, the paper's D/2 for 10 (--position-sigma 5); WINDOW=10 SIGMA=0 trains the
#   paper's D = 10, sigma = 5;
# - bf16 products where the CPU has them natively (default_precision; PRECISION=fp32
#   or PRECISION=bf16 to choose);
# - --forget-gate-bias 1 (FORGET_GATE_BIAS=0 for the paper's init): the forget
#   gates start at sigma(1) = 0.73 instead of 0.5.
# Luong's conventions otherwise: </s> not attended, his dropout placement.
# All of it is one arch, luong_recommended (luong_recommended_global for PEER=global),
# the model a user trains on their own text (recipes/own_text).
MODEL_ARGS=(
  --arch luong_recommended --window-size "$WINDOW" --position-sigma "$SIGMA"
  --precision "$PRECISION" --forget-gate-bias "$FORGET_GATE_BIAS"
)
[ "$PEER" = global ] && MODEL_ARGS=(
  --arch luong_recommended_global --precision "$PRECISION" --forget-gate-bias "$FORGET_GATE_BIAS"
)
if [ "$PEER" = lstm ]; then
  # fairseq's lstm at the same sizes; dropout 0.2 in and out of both LSTMs
  MODEL_ARGS=(
    --arch lstm --decoder-attention True --encoder-layers 1 --decoder-layers 1
    --encoder-embed-dim 256 --encoder-hidden-size 256
    --decoder-embed-dim 256 --decoder-hidden-size 256 --decoder-out-embed-dim 256
    --share-decoder-input-output-embed --dropout 0.2
  )
fi
TRAIN_ARGS=(
  "$DATA/bin" --source-lang es --target-lang en --user-dir "$REPO/luong_plugin"
  "${MODEL_ARGS[@]}"
  --optimizer adam --adam-betas "(0.9, 0.98)" --lr 0.003 --clip-norm 1.0
  --criterion label_smoothed_cross_entropy --label-smoothing 0.1
  --max-tokens 2000 --max-epoch 30 --stop-time-hours "$(awk "BEGIN{print $MINUTES/60}")"
  --save-dir "$RUN" --no-epoch-checkpoints --keep-best-checkpoints 0
  --seed "$SEED" --num-workers 0 --no-progress-bar --log-format simple --log-interval 50
)
DECODE_ARGS=(
  "$DATA/bin" --source-lang es --target-lang en --user-dir "$REPO/luong_plugin"
  --path "$RUN/checkpoint_best.pt" --beam 5 --batch-size 64
  --required-batch-size-multiple 1  # fairseq would drop the last partial batch
)
# The length penalty: one value, or the best valid sacreBLEU among several (lenpen.py: each
# valid decoding in $RUN/valid, the scores in $RUN/valid/lenpen.json)
SEARCH_ARGS=(
  -m luong_plugin.analysis.lenpen --reference "$DATA/raw/valid.en" --out-dir "$RUN/valid"
  --lenpens "$LENPEN" -- recipes/with_tcmalloc "$BIN_DIR/fairseq-generate" "${DECODE_ARGS[@]}"
  --gen-subset valid
)
case "$LENPEN" in *,*|auto) SEARCH=1 ;; *) SEARCH=0 ;; esac
GEN_ARGS=("${DECODE_ARGS[@]}" --gen-subset test --print-alignment soft)

if [ "${DRY_RUN:-0}" = 1 ]; then  # print the commands, shell-quoted, and stop
  printf '%q ' fairseq-train "${TRAIN_ARGS[@]}"; echo
  if [ "$SEARCH" = 1 ]; then  # the test's --lenpen is the value this prints: CHOSEN below
    printf '%q ' python "${SEARCH_ARGS[@]}"; echo
    printf '%q ' fairseq-generate "${GEN_ARGS[@]}" --lenpen CHOSEN; echo
  else
    printf '%q ' fairseq-generate "${GEN_ARGS[@]}" --lenpen "$LENPEN"; echo
  fi
  exit 0
fi

echo "== 1/5 data: $DATA"
bash recipes/bible_es_en/prepare.sh --out "$DATA"

echo "== 2/5 train: $RUN (about $MINUTES minutes; progress every 50 updates)"
mkdir -p "$RUN"
params="${TRAIN_ARGS[*]}"
if [ -f "$RUN/.trained" ] && [ "$(cat "$RUN/.trained")" = "$params" ] \
   && [ "$RUN/.trained" -nt "$DATA/bin/train.es-en.en.bin" ]; then
  echo "[train] up to date, skipped ($RUN/train.log)"
else
  rm -f "$RUN"/checkpoint*.pt "$RUN/.trained"
  OMP_NUM_THREADS=$THREADS recipes/with_tcmalloc "$BIN_DIR/fairseq-train" "${TRAIN_ARGS[@]}" 2>&1 \
    | tee "$RUN/train.log" | grep --line-buffered -E "train_inner|valid \||done training"
  printf '%s\n' "$params" > "$RUN/.trained"
fi

echo "== 3/5 decode the test chapters (beam 5)"
CHOSEN=$LENPEN
if [ "$SEARCH" = 1 ]; then  # valid decodings already whole for this checkpoint are read again
  echo "[lenpen] choosing fairseq-generate's --lenpen on the valid chapters ($LENPEN)"
  CHOSEN=$(OMP_NUM_THREADS=$THREADS "$PYTHON" "${SEARCH_ARGS[@]}")
fi
GEN_ARGS+=(--lenpen "$CHOSEN")
decoding="${GEN_ARGS[*]}"
if [ "$RUN/test.gen.txt" -nt "$RUN/.trained" ] && [ "$(cat "$RUN/.decoded" 2>/dev/null)" = "$decoding" ]; then
  echo "[generate] up to date, skipped (--lenpen $CHOSEN)"
else
  echo "[generate] --lenpen $CHOSEN"
  OMP_NUM_THREADS=$THREADS recipes/with_tcmalloc "$BIN_DIR/fairseq-generate" "${GEN_ARGS[@]}" \
    > "$RUN/test.gen.txt.tmp" 2> "$RUN/generate.log"
  mv "$RUN/test.gen.txt.tmp" "$RUN/test.gen.txt"
  printf '%s\n' "$decoding" > "$RUN/.decoded"
fi

echo "== 4/5 report"
"$PYTHON" -m luong_plugin.analysis.report "$RUN/test.gen.txt" --lenpen "$CHOSEN" \
  --reference "$DATA/raw/test.en" --out-dir "$RUN" --train-log "$RUN/train.log"

echo "== 5/5 analysis: BLEU by source length (Luong Fig. 6), learning curve (Fig. 5)"
"$PYTHON" -m luong_plugin.analysis.bleu_by_length --source "$DATA/raw/test.es" \
  --reference "$DATA/raw/test.en" "${PEER:-demo}=$RUN/test.hyp" --png "$RUN/bleu_by_length.png"
"$PYTHON" -m luong_plugin.analysis.curves "${PEER:-demo}=$RUN/train.log" --metric ppl \
  --png "$RUN/learning_curve.png"

[ "$EXPLORE" = 1 ] || exit 0
echo "== explorer: every test verse's attention in one page (luong-explore)"
# Our model's page, with fairseq's lstm beside it when its run (PEER=lstm) exists;
# each model's maps and p_t come from forced decoding of its own beam output.
if [ "$PEER" = lstm ]; then OURS=runs/demo; LSTM=$RUN; else OURS=$RUN; LSTM=runs/demo_lstm; fi
if [ -f "$OURS/test.gen.txt" ]; then
  EXPLORE_ARGS=("luong=$OURS/test.gen.txt" --path "luong=$OURS/checkpoint_best.pt")
  if [ -f "$LSTM/test.gen.txt" ] && [ -f "$LSTM/checkpoint_best.pt" ]; then
    EXPLORE_ARGS+=("lstm=$LSTM/test.gen.txt" --path "lstm=$LSTM/checkpoint_best.pt")
  fi
  OMP_NUM_THREADS=$THREADS "$PYTHON" -m luong_plugin.analysis.explore "${EXPLORE_ARGS[@]}" \
    --data "$DATA/bin" --reference "$DATA/raw/test.en" --out "$OURS/explore.html" \
    --title "luong_plugin demo: Spanish->English test verses" 2> "$OURS/explore.log" \
    || { tail -5 "$OURS/explore.log" >&2; exit 1; }
else
  echo "[explore] $OURS/test.gen.txt missing: run recipes/bible_es_en/demo.sh first"
fi
exit
}
