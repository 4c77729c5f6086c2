#!/usr/bin/env bash
# Train and evaluate the recommended model (luong_recommended) on your own parallel text,
# as `make demo` does on the Bible. See README.md here.
#
# usage: recipes/own_text/run.sh --src FILE.xx --tgt FILE.yy --out DIR
#          [--valid-src F --valid-tgt F] [--test-src F --test-tgt F] [--valid N] [--test N]
#          [--split-seed S] [--vocab 8000] [--model local-p|global|local-m] [--minutes M | --epochs E]
#          [--seed S] [--beam 5] [--lenpen auto|L|L,L,...] [--src-lang xx --tgt-lang yy]
#          [--dry-run]
#          [-- extra fairseq-train flags]
#   env PYTHON     interpreter with fairseq and this package (default .venv/bin/python)
#   env THREADS    CPU threads (default: all)
#   env PRECISION  bf16 or fp32 (default: default_precision(), bf16 on a CPU with native bf16)
# Steps, each skipped when it is done (README.md, "Running again"):
#   1. check every option and input, hold out valid/test lines   DIR/raw, DIR/run.json
#   2. one joint SentencePiece model, every split in pieces      DIR/spm
#   3. fairseq-preprocess                                         DIR/bin
#   4. fairseq-train luong_recommended(_global)                  DIR/checkpoints, DIR/train.log
#   5. --lenpen chosen on the valid split, then fairseq-generate  DIR/valid, DIR/test.gen.txt
#      on the test split (beam search)
#   6. sacreBLEU and chrF with signatures, samples, a heatmap    DIR/report.json, DIR/test.hyp
#   7. the attention explorer page (luong-explore)               DIR/explore.html
set -euo pipefail
{  # read whole before it runs: editing this file cannot change a run in progress

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PYTHON=${PYTHON:-$REPO/.venv/bin/python}
BIN_DIR=$(dirname "$PYTHON")
THREADS=${THREADS:-$(nproc)}
CORPORA=$REPO/luong_plugin/corpora

case "${PRECISION:-}" in
  ""|bf16|fp32) ;;
  *) echo "error: PRECISION '$PRECISION': expected bf16 or fp32 (or unset: default_precision())" >&2; exit 2 ;;
esac
OPTS=()
EXTRA=()
while [ $# -gt 0 ]; do
  case $1 in
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) exec "$PYTHON" "$REPO/recipes/own_text/prepare.py" --help ;;
    *) OPTS+=("$1"); shift ;;
  esac
done

# 1. Every option and input file is checked before anything is written (exit status 2,
# one line naming the option and the file); then DIR/raw and DIR/run.json. Sets OUT
# (absolute), SRC_LANG, TGT_LANG, VOCAB, MODEL, ARCH, SEED, BEAM, LENPEN, MINUTES,
# STOP_TIME_HOURS, EPOCHS, DRY_RUN and N_TRAIN, N_VALID, N_TEST.
echo "== 1/7 check the inputs, hold out valid and test lines"
PLAN=$("$PYTHON" "$REPO/recipes/own_text/prepare.py" "${OPTS[@]}" -- "${EXTRA[@]}")
eval "$PLAN"

PRECISION=${PRECISION:-}
if [ -z "$PRECISION" ]; then  # bf16 on a CPU with native bf16, else fp32 (docs/SPEED.md)
  PRECISION=$("$PYTHON" -c "
from luong_plugin.modules.precision import default_precision
print(default_precision())" \
    2>/dev/null) || { echo "error: cannot import luong_plugin with $PYTHON: run make setup" >&2; exit 1; }
fi

SPM=$OUT/spm
DATA=$OUT/bin
CKPT=$OUT/checkpoints
if [ -n "$EPOCHS" ]; then
  BUDGET=(--max-epoch "$EPOCHS")
  BUDGET_TEXT="$EPOCHS epoch$([ "$EPOCHS" = 1 ] || echo s)"
else
  BUDGET=(--stop-time-hours "$STOP_TIME_HOURS")
  BUDGET_TEXT="about $MINUTES minutes"
fi
# The demo's model and optimisation (configs/luong_recommended.yaml, recipes/bible_es_en/demo.sh);
# a save (and a validation) every 2000 updates as well as at each epoch's end, so that a run
# stopped mid-epoch resumes from at most 2000 updates back. Flags after `--` come last and win.
TRAIN_ARGS=(
  "$DATA" --source-lang "$SRC_LANG" --target-lang "$TGT_LANG" --user-dir "$REPO/luong_plugin"
  --arch "$ARCH" --precision "$PRECISION"
  --optimizer adam --adam-betas "(0.9, 0.98)" --lr 0.003 --clip-norm 1.0
  --criterion label_smoothed_cross_entropy --label-smoothing 0.1 --max-tokens 2000
  "${BUDGET[@]}" --save-dir "$CKPT" --no-epoch-checkpoints --keep-best-checkpoints 0
  --save-interval-updates 2000 --keep-interval-updates 1
  --skip-invalid-size-inputs-valid-test  # a valid line too long for the model is left out
  --seed "$SEED" --num-workers 0 --no-progress-bar --log-format simple --log-interval 50
  "${EXTRA[@]}"
)
DECODE_ARGS=(
  "$DATA" --source-lang "$SRC_LANG" --target-lang "$TGT_LANG" --user-dir "$REPO/luong_plugin"
  --path "$CKPT/checkpoint_best.pt" --beam "$BEAM" --batch-size 64
  --required-batch-size-multiple 1  # fairseq would drop the last partial batch
  --max-len-a 2 --max-len-b 10  # fairseq's default stops every output at 200 pieces
)
# The length penalty: one value, or the best valid sacreBLEU among several
# (luong_plugin/analysis/lenpen.py: each valid decoding and lenpen.json in DIR/valid)
SEARCH_ARGS=(
  -m luong_plugin.analysis.lenpen --reference "$OUT/raw/valid.$TGT_LANG" --out-dir "$OUT/valid"
  --lenpens "$LENPEN" -- "$REPO/recipes/with_tcmalloc" "$BIN_DIR/fairseq-generate"
  "${DECODE_ARGS[@]}" --gen-subset valid
)
case "$LENPEN" in *,*|auto) SEARCH=1 ;; *) SEARCH=0 ;; esac
GEN_ARGS=(
  "${DECODE_ARGS[@]}" --gen-subset test
  --print-alignment soft  # the attention maps the explorer reads
)

if [ "$DRY_RUN" = 1 ]; then  # print the commands, shell-quoted, and stop
  printf '%q ' fairseq-train "${TRAIN_ARGS[@]}"; echo
  if [ "$SEARCH" = 1 ]; then  # the test's --lenpen is the value this prints: CHOSEN below
    printf '%q ' python "${SEARCH_ARGS[@]}"; echo
    printf '%q ' fairseq-generate "${GEN_ARGS[@]}" --lenpen CHOSEN; echo
  else
    printf '%q ' fairseq-generate "${GEN_ARGS[@]}" --lenpen "$LENPEN"; echo
  fi
  exit 0
fi

skip() { echo "[$1] done, skipped"; }
# fail LOG MESSAGE: the message and the end of LOG on stderr, exit status 1
fail() { echo "error: $2; the end of $1:" >&2; tail -n 20 "$1" >&2; exit 1; }

# 2. One joint SentencePiece model on both sides of the training split (as prepare.sh).
echo "== 2/7 SentencePiece: $VOCAB pieces on train.$SRC_LANG + train.$TGT_LANG -> $SPM"
if [ -d "$SPM" ]; then
  skip spm
else
  rm -rf "$SPM.tmp"
  mkdir "$SPM.tmp"
  "$PYTHON" "$CORPORA/spm.py" train --input "$OUT/raw/train.$SRC_LANG" "$OUT/raw/train.$TGT_LANG" \
    --model-prefix "$SPM.tmp/joint" --vocab-size "$VOCAB"
  "$PYTHON" "$CORPORA/spm.py" fairseq-dict --model "$SPM.tmp/joint.model" --output "$SPM.tmp/dict.txt"
  for split in train valid test; do
    for lang in "$SRC_LANG" "$TGT_LANG"; do
      "$PYTHON" "$CORPORA/spm.py" encode --model "$SPM.tmp/joint.model" \
        --input "$OUT/raw/$split.$lang" --output "$SPM.tmp/$split.$lang"
    done
  done
  mv "$SPM.tmp" "$SPM"
fi

# 3. Binarise with one dictionary for both sides: the SentencePiece vocabulary.
echo "== 3/7 fairseq-preprocess -> $DATA"
if [ -d "$DATA" ]; then
  skip fairseq-preprocess
else
  rm -rf "$DATA.tmp"
  "$BIN_DIR/fairseq-preprocess" --source-lang "$SRC_LANG" --target-lang "$TGT_LANG" \
    --joined-dictionary --srcdict "$SPM/dict.txt" \
    --trainpref "$SPM/train" --validpref "$SPM/valid" --testpref "$SPM/test" \
    --destdir "$DATA.tmp" --workers "$THREADS" > "$OUT/preprocess.log" 2>&1 \
    || fail "$OUT/preprocess.log" "fairseq-preprocess failed"
  mv "$DATA.tmp" "$DATA"
fi

# 4. Train. Done when .trained holds this budget; otherwise fairseq-train starts, or goes
# on from checkpoint_last.pt (a stopped run, or a larger budget: fairseq counts the epochs
# and the training time of the earlier runs).
echo "== 4/7 train $ARCH ($MODEL attention, $BUDGET_TEXT, --precision $PRECISION) -> $CKPT"
budget="${BUDGET[*]}"
if [ -f "$CKPT/.trained" ] && [ "$(cat "$CKPT/.trained")" = "$budget" ] \
   && [ -f "$CKPT/checkpoint_best.pt" ]; then
  skip train
else
  if [ -f "$CKPT/checkpoint_last.pt" ]; then
    echo "[train] going on from $CKPT/checkpoint_last.pt"
  fi
  mkdir -p "$CKPT"
  rm -f "$CKPT/.trained"
  echo "[train] $N_TRAIN sentence pairs; progress every 50 updates, the whole log in $OUT/train.log"
  OMP_NUM_THREADS=$THREADS "$REPO/recipes/with_tcmalloc" "$BIN_DIR/fairseq-train" "${TRAIN_ARGS[@]}" 2>&1 \
    | tee -a "$OUT/train.log" | { grep --line-buffered -E "train_inner|valid \||done training" || true; } \
    || fail "$OUT/train.log" "fairseq-train failed"
  [ -f "$CKPT/checkpoint_best.pt" ] || fail "$OUT/train.log" "fairseq-train wrote no checkpoint_best.pt"
  printf '%s\n' "$budget" > "$CKPT/.trained"
fi

# 5. The length penalty on the valid split, then beam search on the test split: pieces and
# soft attention maps, every sentence kept.
echo "== 5/7 decode the $N_TEST test lines (beam $BEAM) -> $OUT/test.gen.txt"
CHOSEN=$LENPEN
if [ "$SEARCH" = 1 ]; then
  search="${SEARCH_ARGS[*]}"
  if [ -f "$OUT/valid/lenpen.json" ] && [ "$OUT/valid/lenpen.json" -nt "$CKPT/checkpoint_best.pt" ] \
     && [ "$(cat "$OUT/valid/.searched" 2>/dev/null)" = "$search" ]; then
    CHOSEN=$("$PYTHON" -c "import json, sys; print('{:g}'.format(json.load(open(sys.argv[1]))['chosen']))" \
      "$OUT/valid/lenpen.json")
    skip "lenpen"
  else
    echo "[lenpen] choosing fairseq-generate's --lenpen on the $N_VALID valid lines ($LENPEN)"
    rm -f "$OUT/valid/.searched"
    CHOSEN=$(OMP_NUM_THREADS=$THREADS "$PYTHON" "${SEARCH_ARGS[@]}") \
      || { echo "error: choosing --lenpen failed (the logs in $OUT/valid)" >&2; exit 1; }
    printf '%s\n' "$search" > "$OUT/valid/.searched"
  fi
fi
echo "[generate] --lenpen $CHOSEN"
GEN_ARGS+=(--lenpen "$CHOSEN")
decoding="${GEN_ARGS[*]}"
if [ -f "$OUT/test.gen.txt" ] && [ "$OUT/test.gen.txt" -nt "$CKPT/checkpoint_best.pt" ] \
   && [ "$(cat "$OUT/.decoded" 2>/dev/null)" = "$decoding" ]; then
  skip generate
else
  OMP_NUM_THREADS=$THREADS "$REPO/recipes/with_tcmalloc" "$BIN_DIR/fairseq-generate" "${GEN_ARGS[@]}" \
    > "$OUT/test.gen.txt.tmp" 2> "$OUT/generate.log" || fail "$OUT/generate.log" "fairseq-generate failed"
  mv "$OUT/test.gen.txt.tmp" "$OUT/test.gen.txt"
  printf '%s\n' "$decoding" > "$OUT/.decoded"
fi

# 6. Pieces back to text, sacreBLEU and chrF against the raw test references.
echo "== 6/7 report: sacreBLEU, chrF, samples"
if [ -f "$OUT/report.json" ] && [ "$OUT/report.json" -nt "$OUT/test.gen.txt" ]; then
  skip report
else
  "$PYTHON" -m luong_plugin.analysis.report "$OUT/test.gen.txt" --lenpen "$CHOSEN" \
    --reference "$OUT/raw/test.$TGT_LANG" --out-dir "$OUT" --train-log "$OUT/train.log"
fi

# 7. The explorer, as make demo builds it: the maps and p_t by forced decoding of the output.
echo "== 7/7 explorer: every test line's attention in one page"
if [ -f "$OUT/explore.html" ] && [ "$OUT/explore.html" -nt "$OUT/test.gen.txt" ]; then
  skip explore
else
  OMP_NUM_THREADS=$THREADS "$PYTHON" -m luong_plugin.analysis.explore \
    "$MODEL=$OUT/test.gen.txt" --path "$MODEL=$CKPT/checkpoint_best.pt" \
    --data "$DATA" --reference "$OUT/raw/test.$TGT_LANG" --out "$OUT/explore.html.tmp" \
    --title "luong_plugin: $SRC_LANG->$TGT_LANG test lines ($MODEL)" \
    > /dev/null 2> "$OUT/explore.log" || fail "$OUT/explore.log" "luong-explore failed"
  mv "$OUT/explore.html.tmp" "$OUT/explore.html"
fi

"$PYTHON" - "$OUT" "$CKPT" "$SEARCH" > "$OUT/summary.txt" <<'EOF'
import json, os, sys
out, ckpt, search = sys.argv[1:]
report = json.load(open(os.path.join(out, "report.json"), encoding="utf-8"))
training = report.get("training") or {}
print(f"done: {out}")
print(f"  checkpoint    {ckpt}/checkpoint_best.pt ({training.get('updates')} updates, "
      f"best valid perplexity {training.get('valid_ppl')})")
print(f"  scores        {out}/report.json, on {report['sentences']} test lines:")
print(f"                sacreBLEU {report['bleu']:.2f}  ({report['bleu_signature']})")
print(f"                chrF2     {report['chrf']:.2f}  ({report['chrf_signature']})")
print(f"  decoded with  --lenpen {report['lenpen']:g}"
      + (f", chosen on the valid lines ({out}/valid/lenpen.json)" if search == "1" else ""))
print(f"  translations  {out}/test.hyp (references: {out}/raw/)")
print(f"  explorer      {out}/explore.html")
print(f"  logs          {out}/train.log, {out}/generate.log, {out}/explore.log")
EOF
echo
cat "$OUT/summary.txt"
exit
}
