# The steps every corpus recipe shares, sourced by recipes/*/prepare.sh after it has set
# PYTHON, PREPROCESS (fairseq-preprocess) and CORPORA (luong_plugin/corpora) and written
# OUT/raw/{train,valid,test}.{SRC,TGT}: one joint SentencePiece model, every split in
# pieces, fairseq's binary data, and the length profile. Each step is skipped while its
# outputs are newer than its inputs and its parameters are unchanged; every output is
# written under a temporary name and moved into place.

SPLITS=(train valid test)

# stale OUTPUT... -- INPUT...: true when an output is missing or older than an input.
stale() {
  local outputs=() inputs=() f i
  while [ "$1" != -- ]; do outputs+=("$1"); shift; done
  shift
  inputs=("$@")
  for f in "${outputs[@]}"; do
    [ -e "$f" ] || return 0
    for i in "${inputs[@]}"; do [ "$i" -nt "$f" ] && return 0; done
  done
  return 1
}

# record FILE TEXT: rewrite FILE only when TEXT changed, so its mtime marks a change.
record() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ] || printf '%s\n' "$2" >"$1"; }

skip() { echo "[$1] up to date, skipped"; }

# corpus_pieces OUT SRC TGT VOCAB: OUT/spm (joint.model, dict.txt, the pieces), OUT/bin
# (train with --task translation -s SRC -t TGT), OUT/lengths.json.
corpus_pieces() {
  local out=$1 src=$2 tgt=$3 vocab=$4 raw=$1/raw spm=$1/spm bin=$1/bin s l
  mkdir -p "$spm"
  record "$spm/.params" "vocab=$vocab"
  if stale "$spm/joint.model" "$spm/dict.txt" -- \
    "$raw/train.$src" "$raw/train.$tgt" "$spm/.params" "$CORPORA/spm.py"; then
    echo "[spm-train] $spm/joint.model, $vocab pieces"
    "$PYTHON" "$CORPORA/spm.py" train --input "$raw/train.$src" "$raw/train.$tgt" \
      --model-prefix "$spm/joint.tmp" --vocab-size "$vocab"
    "$PYTHON" "$CORPORA/spm.py" fairseq-dict --model "$spm/joint.tmp.model" \
      --output "$spm/dict.txt.tmp"
    mv "$spm/joint.tmp.vocab" "$spm/joint.vocab"
    mv "$spm/joint.tmp.model" "$spm/joint.model"
    mv "$spm/dict.txt.tmp" "$spm/dict.txt"
  else
    skip spm-train
  fi

  local spm_outputs=() bin_outputs=("$bin/dict.$src.txt" "$bin/dict.$tgt.txt")
  for s in "${SPLITS[@]}"; do
    for l in "$src" "$tgt"; do
      if stale "$spm/$s.$l" -- "$raw/$s.$l" "$spm/joint.model"; then
        "$PYTHON" "$CORPORA/spm.py" encode --model "$spm/joint.model" \
          --input "$raw/$s.$l" --output "$spm/$s.$l.tmp"
        mv "$spm/$s.$l.tmp" "$spm/$s.$l"
      else
        skip "spm-encode $s.$l"
      fi
      spm_outputs+=("$spm/$s.$l")
      bin_outputs+=("$bin/$s.$src-$tgt.$l.bin" "$bin/$s.$src-$tgt.$l.idx")
    done
  done

  # one dictionary for both sides: the SentencePiece vocabulary
  if stale "${bin_outputs[@]}" -- "${spm_outputs[@]}" "$spm/dict.txt"; then
    echo "[fairseq-preprocess] $bin"
    rm -rf "$bin.tmp"  # fairseq-preprocess refuses to overwrite dictionaries
    "$PREPROCESS" --source-lang "$src" --target-lang "$tgt" \
      --joined-dictionary --srcdict "$spm/dict.txt" \
      --trainpref "$spm/train" --validpref "$spm/valid" --testpref "$spm/test" \
      --destdir "$bin.tmp" --workers 2
    rm -rf "$bin"
    mv "$bin.tmp" "$bin"
  else
    skip fairseq-preprocess
  fi

  if stale "$out/lengths.json" -- "${spm_outputs[@]}" "$CORPORA/lengths.py"; then
    echo "[profile] $out/lengths.json"
    "$PYTHON" "$CORPORA/lengths.py" --out "$out" --langs "$src" "$tgt"
  else
    skip profile
  fi
}
