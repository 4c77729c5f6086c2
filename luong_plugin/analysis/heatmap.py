"""Attention heatmaps as PNG (Luong Fig. 7, Bahdanau Fig. 3).

    python -m luong_plugin.analysis.heatmap GENERATE_OUTPUT --id 3 --out attn.png

GENERATE_OUTPUT is what ``fairseq-generate --print-alignment soft`` printed
(without ``--post-process``, so rows and columns are the model's own tokens).
"""

import argparse
import sys
from typing import List, Optional, Sequence

from .generate_output import parse_generate


def plot_attention(
    matrix: Sequence[Sequence[float]],
    source: List[str],
    target: List[str],
    path: str,
    title: str = "",
    centers: Optional[Sequence[float]] = None,
) -> str:
    """Rows are target tokens, columns source tokens; ``centers`` marks local-p's p_t."""
    import logging

    logging.getLogger("matplotlib").setLevel(logging.WARNING)  # fairseq logs at DEBUG
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    data = np.asarray(matrix, dtype=float)
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
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("generate_output", help="fairseq-generate output file ('-' for stdin)")
    parser.add_argument("--id", type=int, default=0, help="sentence id (the N of S-N)")
    parser.add_argument("--out", required=True, help="PNG to write")
    args = parser.parse_args(argv)
    text = sys.stdin.read() if args.generate_output == "-" else open(args.generate_output).read()
    rows = parse_generate(text)
    if args.id not in rows or rows[args.id].attention is None:
        parser.error(
            f"--id {args.id}: no soft attention for that sentence; run fairseq-generate "
            "with --print-alignment soft"
        )
    row = rows[args.id]
    source = row.source.split() + ["</s>"]
    target = row.hypothesis.split() + ["</s>"]
    plot_attention(row.attention, source, target, args.out, title=f"sentence {args.id}")
    print(args.out)


if __name__ == "__main__":
    main()
