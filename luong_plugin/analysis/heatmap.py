"""Attention heatmaps as PNG (Luong Fig. 7, Bahdanau Fig. 3).

    luong-heatmap GENERATE_OUTPUT --id 3 --out attn.png
    luong-heatmap --path ckpt.pt --data data-bin --spm-model spm.model \\
        --source-sentence "En el principio" --target-sentence "In the beginning" --out attn.png
    luong-heatmap --path ckpt.pt --data data-bin --gen-subset test --id 3 --words --out attn.png

From a file of ``fairseq-generate --print-alignment soft`` output (without
``--post-process``, so rows and columns are the model's own tokens): the
attention of sentence ``--id`` over its hypothesis. With a checkpoint
(``--path``): forced decoding of a sentence pair (``--source-sentence`` and
``--target-sentence``, or line ``--id`` of ``--source``/``--target``, or of
``--gen-subset``); for local-p models a red dot marks p_t, the predicted window
centre, on every target row. ``--words`` merges subword pieces into words.
Rows are target tokens, columns source tokens, black = weight 1.
"""

import sys
from typing import List, Optional, Sequence

from .generate_output import parse_generate
from .inputs import tool_parser
from .plotting import pyplot, save


def plot_attention(
    matrix: Sequence[Sequence[float]],
    source: List[str],
    target: List[str],
    path: str,
    title: str = "",
    centers: Optional[Sequence[float]] = None,
) -> str:
    """Rows are target tokens, columns source tokens; ``centers`` marks local-p's p_t."""
    import numpy as np

    plt = pyplot()
    data = np.asarray(matrix, dtype=float)  # target x source
    height = max(3.0, 0.28 * len(target) + 1.5)
    width = max(4.0, 0.28 * len(source) + 2.0)
    fig, ax = plt.subplots(figsize=(width, height), dpi=100)
    ax.imshow(data, cmap="Greys", vmin=0.0, vmax=max(1e-9, float(data.max())), aspect="auto")
    ax.set_xticks(range(len(source)))
    ax.set_xticklabels(source, rotation=90, fontsize=8)
    ax.set_yticks(range(len(target)))
    ax.set_yticklabels(target, fontsize=8)
    ax.set_xlabel("source")
    ax.set_ylabel("target")
    if centers is not None:
        ax.plot(list(centers), range(len(centers)), "r.", markersize=5, label="p_t")
        ax.legend(loc="lower right", fontsize=7)
    if title:
        ax.set_title(title, fontsize=9)
    return save(fig, path)


def from_generate_output(args, parser):
    text = sys.stdin.read() if args.generate_output == "-" else open(args.generate_output).read()
    rows = parse_generate(text)
    if args.id not in rows or rows[args.id].attention is None:
        parser.error(
            f"--id {args.id}: no soft attention for that sentence; run fairseq-generate "
            "with --print-alignment soft"
        )
    row = rows[args.id]
    source, target, matrix = row.source.split(), row.hypothesis.split(), row.attention
    if args.words:
        from .words import detect_scheme, merge_attention, word_index, words

        scheme = detect_scheme([source, target])
        src_index, tgt_index = word_index(source, scheme), word_index(target, scheme)
        matrix = merge_attention(matrix, src_index, tgt_index)
        source, target = words(source, scheme), words(target, scheme)
    return matrix, source + ["</s>"], target + ["</s>"], None


def from_checkpoint(args, parser):
    from .align import word_alignments
    from .forced import force_decode, load_inputs

    one_pair = args.source_sentence is not None or args.target_sentence is not None
    if one_pair and (args.source_sentence is None or args.target_sentence is None):
        parser.error("--source-sentence and --target-sentence go together")
    if one_pair:
        models, task, pairs, scheme = load_inputs(
            args, [args.source_sentence], [args.target_sentence]
        )
    else:
        models, task, pairs, scheme = load_inputs(args)
    index = 0 if one_pair else args.id
    if not 0 <= index < len(pairs):
        parser.error(f"--id {args.id}: expected 0 .. {len(pairs) - 1}")
    pair = pairs[index]
    forced = next(force_decode(models, task, [pair], 1, args.cpu))
    if args.words:
        source, target, matrix, centers = word_alignments(forced, scheme)
    else:
        source, target = pair.source, pair.target
        matrix, centers = forced.attention, forced.centers
    return matrix, source + ["</s>"], target + ["</s>"], centers


def main(argv=None):
    from .forced import add_forced_args

    parser = tool_parser(__doc__)
    parser.add_argument(
        "generate_output",
        nargs="?",
        help="fairseq-generate output file ('-' for stdin); or give --path",
    )
    parser.add_argument(
        "--id",
        type=int,
        default=0,
        help="sentence id (the N of S-N), or line number (from 0) of the input",
    )
    parser.add_argument("--out", required=True, help="PNG to write")
    parser.add_argument("--words", action="store_true", help="merge subword pieces into words")
    parser.add_argument("--title", help="picture title (default: the sentence id)")
    group = add_forced_args(parser, required=False)
    group.add_argument("--source-sentence", help="one source sentence (instead of --source)")
    group.add_argument("--target-sentence", help="its target sentence")
    args = parser.parse_args(argv)
    if (args.generate_output is None) == (args.path is None):
        parser.error("give either GENERATE_OUTPUT or --path (and --data), not both")
    if args.path is not None and args.data is None:
        parser.error("--path needs --data (the directory with the model's dictionaries)")
    try:
        if args.path is None:
            matrix, source, target, centers = from_generate_output(args, parser)
        else:
            matrix, source, target, centers = from_checkpoint(args, parser)
    except (OSError, ValueError) as e:
        parser.error(str(e))
    title = args.title
    if title is None:
        title = "" if args.source_sentence is not None else f"sentence {args.id}"
    plot_attention(matrix, source, target, args.out, title=title, centers=centers)
    print(args.out)


if __name__ == "__main__":
    main()
