"""A dictionary for ``fairseq-generate --replace-unk DICT`` from the model's own
alignments (the unknown-word replacement of Luong et al. 2015, §4.1).

    luong-unk-dict --path ckpt.pt --data data-bin --source train.es --target train.en \\
        --out unk.dict
    fairseq-generate data-bin --path ckpt.pt --dataset-impl raw --print-alignment \\
        --replace-unk unk.dict ...

Force-decodes the training pairs, aligns every target word to its source word
(as ``luong-align``), and maps each source word to the target word it was most
often aligned to (ties: the pair seen first). Words are the text's own,
whitespace-separated (subword pieces merged; with ``--source``/``--target`` a
rare word stays itself, not ``<unk>``), so the dictionary covers exactly the
words the model cannot spell. Writes one ``source target`` line per source word,
most-linked first: the format fairseq's ``utils.load_align_dict`` reads (first
column the key, second the value).
"""

import sys
from collections import Counter, defaultdict
from typing import Dict, Iterable, List, Sequence, Tuple

from .inputs import tool_parser

UNK = "<unk>"


def build_dictionary(
    aligned: Iterable[Tuple[Sequence[str], Sequence[str], Sequence[Tuple[int, int]]]],
    min_count: int = 1,
) -> List[Tuple[str, str, int]]:
    """(source words, target words, links) per pair -> [(source, target, count)],
    the most frequent target per source word, most-linked first."""
    counts: Dict[str, Counter] = defaultdict(Counter)
    for source, target, links in aligned:
        for i, j in links:
            if source[i] != UNK and target[j] != UNK:
                counts[source[i]][target[j]] += 1
    entries = []
    for word, targets in counts.items():
        best, n = targets.most_common(1)[0]  # ties: first inserted, i.e. first seen
        if n >= min_count:
            entries.append((word, best, n))
    entries.sort(key=lambda e: -e[2])  # stable: equal counts keep first-seen order
    return entries


def main(argv=None):
    from .align import word_alignments
    from .forced import add_forced_args, force_decode, load_inputs
    from .words import hard_alignment

    parser = tool_parser(__doc__)
    add_forced_args(parser)
    parser.add_argument("--out", required=True, help="dictionary file to write")
    parser.add_argument(
        "--min-count",
        type=int,
        default=1,
        help="keep a source word only if its best target was linked this often",
    )
    args = parser.parse_args(argv)
    if args.min_count < 1:
        parser.error(f"--min-count {args.min_count}: expected 1 or more")
    try:
        models, task, pairs, scheme = load_inputs(args)

        def aligned():
            for forced in force_decode(models, task, pairs, args.batch_size, args.cpu):
                source, target, matrix, _ = word_alignments(forced, scheme)
                yield source, target, hard_alignment(matrix)

        entries = build_dictionary(aligned(), args.min_count)
        with open(args.out, "w", encoding="utf-8") as f:
            for source, target, _ in entries:
                f.write(f"{source} {target}\n")
    except (OSError, ValueError) as e:
        parser.error(str(e))
    print(
        f"{args.out}: {len(entries)} source words from {len(pairs)} sentence pairs", file=sys.stderr
    )


if __name__ == "__main__":
    main()
