"""BLEU by source sentence length (Luong Fig. 6, after Bahdanau Fig. 2).

    luong-bleu-by-length --source test.es --reference test.en \\
        local-p=runs/demo/test.hyp global=runs/global/test.hyp \\
        --edges 10,20,30,40,50,60 --png bleu_by_length.png

Groups the test sentences by the length of their source (whitespace-separated
words of the raw text) and scores each system's detokenised hypotheses on each
group with sacreBLEU (corpus BLEU of the group, default 13a tokenisation). Edges
e1 < e2 < ... make the groups 1-e1, e1+1-e2, ..., >e_last; an empty group is
left out. Prints a table (``--format markdown`` or ``plain``) with the number of
sentences per group and the BLEU of every system, the sacreBLEU signature, and
writes a line plot with ``--png``.
"""

from typing import Dict, List, Sequence, Tuple

from .inputs import named, read_lines, tool_parser
from .plotting import pyplot, save

DEFAULT_EDGES = "10,20,30,40,50,60"
FORMATS = ("markdown", "plain")


def parse_edges(text: str) -> List[int]:
    try:
        edges = [int(e) for e in text.split(",") if e.strip()]
    except ValueError:
        edges = []
    if not edges or edges[0] < 1 or any(a >= b for a, b in zip(edges, edges[1:])):
        raise ValueError(f"--edges {text!r}: expected increasing positive integers, e.g. 10,20,30")
    return edges


def buckets(lengths: Sequence[int], edges: Sequence[int]) -> List[Tuple[str, List[int]]]:
    """(label, sentence indices) per non-empty group, shortest first."""
    bounds = [0] + list(edges)
    groups = [
        (f"{lo + 1}-{hi}", [i for i, n in enumerate(lengths) if lo < n <= hi])
        for lo, hi in zip(bounds, bounds[1:])
    ]
    groups.append((f">{edges[-1]}", [i for i, n in enumerate(lengths) if n > edges[-1]]))
    return [(label, members) for label, members in groups if members]


def bleu_by_length(source, reference, systems: Dict[str, List[str]], edges):
    """-> (groups, {system: [BLEU per group]}, {system: BLEU of all}, signature)."""
    from sacrebleu.metrics import BLEU

    bleu = BLEU()
    groups = buckets([len(line.split()) for line in source], edges)
    table, overall = {}, {}
    for name, hyps in systems.items():
        table[name] = [
            bleu.corpus_score([hyps[i] for i in members], [[reference[i] for i in members]]).score
            for _, members in groups
        ]
        overall[name] = bleu.corpus_score(hyps, [reference]).score
    return groups, table, overall, str(bleu.get_signature())


def format_table(groups, table, overall, fmt="markdown") -> str:
    if fmt not in FORMATS:
        raise ValueError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
    header = ["source words", "sentences"] + list(table)
    rows = [
        [label, str(len(members))] + [f"{table[name][k]:.2f}" for name in table]
        for k, (label, members) in enumerate(groups)
    ]
    rows.append(["all", str(sum(len(m) for _, m in groups))] + [f"{overall[n]:.2f}" for n in table])
    if fmt == "markdown":
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
    else:
        widths = [max(len(r[c]) for r in [header] + rows) for c in range(len(header))]
        lines = [
            "  ".join(cell.rjust(w) for cell, w in zip(row, widths)) for row in [header] + rows
        ]
    return "\n".join(lines)


def plot(groups, table, path, title="") -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    x = range(len(groups))
    for name, scores in table.items():
        ax.plot(x, scores, marker="o", label=name)
    ax.set_xticks(list(x))
    ax.set_xticklabels([f"{label}\n({len(m)})" for label, m in groups], fontsize=8)
    ax.set_xlabel("source sentence length in words (sentences)")
    ax.set_ylabel("BLEU")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    return save(fig, path)


def main(argv=None):
    parser = tool_parser(__doc__)
    parser.add_argument(
        "systems",
        nargs="+",
        metavar="[NAME=]HYPOTHESES",
        help="detokenised hypotheses, one line per source line",
    )
    parser.add_argument("--source", required=True, help="raw source text (lengths are its words)")
    parser.add_argument("--reference", required=True, help="raw reference text")
    parser.add_argument(
        "--edges",
        default=DEFAULT_EDGES,
        help=f"upper bounds of the length groups (default {DEFAULT_EDGES})",
    )
    parser.add_argument("--format", default="markdown", choices=FORMATS)
    parser.add_argument("--png", help="write a line plot here")
    parser.add_argument("--title", default="", help="plot title")
    args = parser.parse_args(argv)
    try:
        edges = parse_edges(args.edges)
        source = read_lines(args.source, "--source")
        reference = read_lines(args.reference, "--reference")
        if len(reference) != len(source):
            raise ValueError(f"--reference has {len(reference)} lines, --source {len(source)}")
        systems = {}
        for spec in args.systems:
            name, path = named(spec)
            systems[name] = read_lines(path, "hypotheses")
            if len(systems[name]) != len(source):
                raise ValueError(f"{path} has {len(systems[name])} lines, --source {len(source)}")
    except ValueError as e:
        parser.error(str(e))
    groups, table, overall, signature = bleu_by_length(source, reference, systems, edges)
    print(format_table(groups, table, overall, args.format))
    print(f"\nsacreBLEU signature: {signature}")
    if args.png:
        print(plot(groups, table, args.png, args.title))


if __name__ == "__main__":
    main()
