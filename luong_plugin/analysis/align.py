"""Word alignments by forced decoding (Luong et al. 2015, §5.4).

    luong-align --path ckpt.pt --data data-bin --source test.es --target test.en \\
        --spm-model spm.model --out test.align --soft test.attn.jsonl
    luong-align --path ckpt.pt --data data-bin --gen-subset test > test.align

Forces the model to read each reference (teacher forcing), merges the attention
over subword pieces into words (pieces of a source word summed, of a target word
averaged: see ``words.py``), and writes for every sentence pair one line of hard
links in Pharaoh format, ``i-j`` = 0-based source word i, target word j: the
source word with the highest weight for each target word (the target EOS gets
no link, the source EOS is never chosen). ``--soft`` also writes each pair's
word-level attention matrix (and local-p's p_t) as one JSON object per line.
"""

import json
import sys

from .forced import add_forced_args, force_decode, load_inputs, word_indices
from .inputs import tool_parser
from .words import format_pharaoh, hard_alignment, merge_attention, merge_positions, with_eos
from .words import words as join_words


def word_alignments(forced, scheme):
    """-> (source words, target words, J x I word attention, p_t per target word)."""
    src_index, tgt_index = word_indices(forced.pair, scheme)
    matrix = merge_attention(forced.attention, src_index, tgt_index)
    centers = None
    if forced.centers is not None:
        centers = merge_positions(forced.centers, src_index, tgt_index)
    return (
        join_words(forced.pair.source, scheme),
        join_words(forced.pair.target, scheme),
        matrix,
        centers,
    )


def main(argv=None):
    parser = tool_parser(__doc__)
    add_forced_args(parser)
    parser.add_argument("--out", default="-", help="Pharaoh alignments, one line a pair (- stdout)")
    parser.add_argument("--soft", help="also write word-level attention here (JSON lines)")
    args = parser.parse_args(argv)
    try:
        models, task, pairs, scheme = load_inputs(args)
        write_alignments(models, task, pairs, scheme, args)
    except (OSError, ValueError) as e:
        parser.error(str(e))


def write_alignments(models, task, pairs, scheme, args):
    out = sys.stdout if args.out == "-" else open(args.out, "w", encoding="utf-8")
    soft = open(args.soft, "w", encoding="utf-8") if args.soft else None
    for n, forced in enumerate(force_decode(models, task, pairs, args.batch_size, args.cpu)):
        source, target, matrix, centers = word_alignments(forced, scheme)
        out.write(format_pharaoh(hard_alignment(matrix)) + "\n")
        if soft:
            record = {
                "id": n,
                "source": with_eos(source),
                "target": with_eos(target),
                "attention": [[round(float(p), 6) for p in row] for row in matrix],
                "p_t": None if centers is None else [round(float(c), 4) for c in centers],
            }
            soft.write(json.dumps(record, ensure_ascii=False) + "\n")
    if out is not sys.stdout:
        out.close()
    if soft:
        soft.close()


if __name__ == "__main__":
    main()
