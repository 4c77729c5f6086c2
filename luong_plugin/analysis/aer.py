"""Alignment error rate against gold alignments with sure and possible links.

    luong-aer GOLD HYPOTHESIS [--reverse-gold] [--gold-base 1]

    AER = 1 - (|A ∩ S| + |A ∩ P|) / (|A| + |S|)        (Och & Ney 2003), S ⊆ P

summed over all sentences (links are counted over the corpus, not averaged per
sentence). Also prints precision |A ∩ P| / |A| and recall |A ∩ S| / |S|.

HYPOTHESIS: Pharaoh ``i-j`` links, 0-based source word i, target word j, one
line per sentence pair (what ``luong-align`` and fast_align write).

GOLD, either format (``--gold-format auto`` tells them apart by a ``SENT:`` line):
    pharaoh  one line per sentence pair, ``i-j`` a sure link, ``ipj`` or ``i?j``
             a possible one (the RWTH German-English set's ``alignmentDeEn.talp``)
    rwth     a ``SENT: n`` line opens each sentence pair, then one link per line,
             ``S i j`` (sure) or ``P i j`` (possible) (its ``alignmentDeEn``)
Gold positions are 1-based unless ``--gold-base 0``; a gold file holding
position 0 under ``--gold-base 1`` is refused. Sure links count as possible too.
``--reverse-gold`` swaps a gold file written target-first (``alignmentDeEn`` is
German-first: reverse it to score an English->German model).
"""

import re
from typing import List, Set, Tuple

from .inputs import tool_parser

Links = Set[Tuple[int, int]]
FORMATS = ("auto", "pharaoh", "rwth")
PHARAOH_LINK = re.compile(r"^(\d+)([-p?])(\d+)$")


def parse_pharaoh_line(line: str, where: str) -> Tuple[Links, Links]:
    """-> (sure, possible) of one line; possible includes sure."""
    sure, possible = set(), set()
    for item in line.split():
        match = PHARAOH_LINK.match(item)
        if not match:
            raise ValueError(f"{where}: {item!r} is not a link i-j (sure) or ipj / i?j (possible)")
        link = (int(match.group(1)), int(match.group(3)))
        possible.add(link)
        if match.group(2) == "-":
            sure.add(link)
    return sure, possible


def read_pharaoh(path: str) -> List[Tuple[Links, Links]]:
    with open(path, encoding="utf-8") as f:
        return [parse_pharaoh_line(line, f"{path}:{n}") for n, line in enumerate(f, 1)]


def read_rwth(path: str) -> List[Tuple[Links, Links]]:
    sentences: List[Tuple[Links, Links]] = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                continue
            if fields[0] == "SENT:":
                sentences.append((set(), set()))
            elif fields[0] in ("S", "P") and len(fields) == 3 and sentences:
                link = (int(fields[1]), int(fields[2]))
                sentences[-1][1].add(link)
                if fields[0] == "S":
                    sentences[-1][0].add(link)
            else:
                raise ValueError(
                    f"{path}:{n}: expected 'SENT: n', 'S i j' or 'P i j', got {line!r}"
                )
    return sentences


def read_gold(path: str, fmt: str = "auto", base: int = 1, reverse: bool = False):
    if fmt not in FORMATS:
        raise ValueError(f"--gold-format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if base not in (0, 1):
        raise ValueError(f"--gold-base {base}: expected 0 or 1")
    if fmt == "auto":
        with open(path, encoding="utf-8", errors="replace") as f:
            first = next((line for line in f if line.strip()), "")
        fmt = "rwth" if first.startswith("SENT:") else "pharaoh"
    gold = read_rwth(path) if fmt == "rwth" else read_pharaoh(path)
    if base == 1 and any(0 in link for _, possible in gold for link in possible):
        raise ValueError(f"{path} has position 0: it is 0-based, pass --gold-base 0")

    def convert(links: Links) -> Links:
        shifted = {(i - base, j - base) for i, j in links}
        return {(j, i) for i, j in shifted} if reverse else shifted

    return [(convert(sure), convert(possible)) for sure, possible in gold]


def score(hypotheses: List[Links], gold: List[Tuple[Links, Links]]) -> dict:
    """Corpus-level AER, precision and recall."""
    if len(hypotheses) != len(gold):
        raise ValueError(f"{len(hypotheses)} hypothesis sentences but {len(gold)} gold sentences")
    a = s = a_and_s = a_and_p = 0
    for hyp, (sure, possible) in zip(hypotheses, gold):
        possible = possible | sure
        a += len(hyp)
        s += len(sure)
        a_and_s += len(hyp & sure)
        a_and_p += len(hyp & possible)
    return {
        "aer": 1.0 - (a_and_s + a_and_p) / (a + s) if a + s else 0.0,
        "precision": a_and_p / a if a else 0.0,
        "recall": a_and_s / s if s else 0.0,
        "sentences": len(gold),
        "hypothesis_links": a,
        "sure_links": s,
    }


def main(argv=None):
    parser = tool_parser(__doc__)
    parser.add_argument("gold", help="gold alignments (sure and possible links)")
    parser.add_argument("hypothesis", help="Pharaoh i-j links, 0-based, one line a sentence")
    parser.add_argument("--gold-format", choices=FORMATS, default="auto")
    parser.add_argument(
        "--gold-base",
        type=int,
        choices=(0, 1),
        default=1,
        help="first position in the gold file (default 1)",
    )
    parser.add_argument(
        "--reverse-gold",
        action="store_true",
        help="the gold file lists target-source pairs: swap them",
    )
    args = parser.parse_args(argv)
    try:
        gold = read_gold(args.gold, args.gold_format, args.gold_base, args.reverse_gold)
        hypotheses = []
        for sure, possible in read_pharaoh(args.hypothesis):
            if sure != possible:
                raise ValueError(f"{args.hypothesis}: hypothesis links must all be sure (i-j)")
            hypotheses.append(sure)
        result = score(hypotheses, gold)
    except (OSError, ValueError) as e:
        parser.error(str(e))
    print(
        "AER {aer:.4f}  precision {precision:.4f}  recall {recall:.4f}  "
        "({sentences} sentences, {hypothesis_links} links, {sure_links} sure gold links)".format(
            **result
        )
    )


if __name__ == "__main__":
    main()
