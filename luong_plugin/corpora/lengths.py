"""Length profiles of a prepared corpus: words and SentencePiece pieces per line.

    python luong_plugin/corpora/lengths.py --out DIR --langs en fr

writes ``DIR/lengths.json`` from ``DIR/raw/{train,valid,test}.LANG`` (words) and
``DIR/spm/...`` (pieces): the median, 90th and 99th percentile, mean and maximum per
split and side. Every corpus recipe writes one (recipes/docs_en_fr, recipes/bible_es_en).
"""

import argparse
import json
import os
import statistics

SPLITS = ("train", "valid", "test")


def length_profile(lengths):
    """Median, 90th and 99th percentile, mean and maximum of a list of lengths."""
    if not lengths:
        return {"lines": 0}
    ordered = sorted(lengths)

    def percentile(q):
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {
        "lines": len(ordered),
        "median": float(statistics.median(ordered)),
        "p90": percentile(0.9),
        "p99": percentile(0.99),
        "mean": round(statistics.fmean(ordered), 1),
        "max": ordered[-1],
    }


def file_profile(path):
    with open(path, encoding="utf-8") as f:
        return length_profile([len(line.split()) for line in f.read().splitlines()])


def write_profile(out, langs):
    """``OUT/lengths.json``: words (``OUT/raw``) and pieces (``OUT/spm``) per line,
    per split and side (``langs``)."""
    profile = {}
    for unit, folder in (("words", "raw"), ("pieces", "spm")):
        for split in SPLITS:
            for lang in langs:
                path = os.path.join(out, folder, f"{split}.{lang}")
                if os.path.exists(path):
                    profile.setdefault(unit, {}).setdefault(split, {})[lang] = file_profile(path)
    tmp = os.path.join(out, "lengths.json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(profile, f, indent=1)
        f.write("\n")
    os.replace(tmp, os.path.join(out, "lengths.json"))
    return profile


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="a prepared corpus: DIR/raw, DIR/spm")
    parser.add_argument("--langs", nargs=2, required=True, metavar=("SRC", "TGT"))
    args = parser.parse_args(argv)
    for unit, splits in write_profile(args.out, args.langs).items():
        for split, sides in splits.items():
            print(
                f"  {unit} per line, {split}: "
                + " | ".join(
                    f"{lang} median {p['median']} p90 {p['p90']} max {p['max']}"
                    for lang, p in sides.items()
                )
            )


if __name__ == "__main__":
    main()
