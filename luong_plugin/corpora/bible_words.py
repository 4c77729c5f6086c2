"""The Spanish→English Bible at word level, as the papers train: the ladder's data.

    python -m luong_plugin.corpora.bible_words prepare --raw-dir data/bible_es_en/raw \\
        --out data/bible_es_en/words [--vocab 5000] [--max-len 50]
    python -m luong_plugin.corpora.bible_words unk-rates --raw-dir data/bible_es_en/raw \\
        --vocab 4000 5000 8000 [--json FILE]

The verses that ``recipes/bible_es_en/prepare.sh`` extracts (``raw/{train,valid,test}.
{es,en}``) go through the WMT recipes' own preparation (``wmt.prepare``, the Bible as one
more recipe whose raw directory is ``raw/``): Moses tokenisation (sacremoses'
``tokenizer.perl -a``), training pairs with a side over 50 words dropped (Luong §4.1),
the top K words per language plus ``<unk>`` (§4.1: "top 50K most frequent words for both
languages"), ``fairseq-preprocess`` with those dictionaries, and the test set kept as
text in ``bin-raw/`` for ``--replace-unk``. Valid and test are never filtered.

K = 5000 (``VOCAB``): ``unk-rates`` measures, for each K, the share of test tokens that
become ``<unk>`` on each side (docs/RESULTS.md gives the rates at each K; the target side
is the one unk replacement repairs).

``prepare`` rebuilds nothing when ``OUT/prepare.json`` is newer than the raw files and
names the same raw directory, K and length limit, so the ladder calls it every time.
"""

import argparse
import collections
import json
import os
import sys

if __package__:
    from luong_plugin.corpora import wmt
    from luong_plugin.corpora.wmt_recipes import Parallel, Recipe
else:  # run as a script: no fairseq import
    import wmt
    from wmt_recipes import Parallel, Recipe

VOCAB = 5000
MAX_LEN = 50
SPLITS = ("train", "valid", "test")


def _part(split: str) -> Parallel:
    return Parallel(f"bible-{split}", archive="", pattern=split + ".{lang}")


RECIPE = Recipe(
    "bible_es_en_words",
    src="es",
    tgt="en",
    pair="es-en",
    train=(_part("train"),),
    valid=(_part("valid"),),
    test=_part("test"),
    vocab=VOCAB,
    max_len=MAX_LEN,
    arch="luong_wmt_en_de",
    paper="Luong et al. (2015) Tables 1 and 4, Bahdanau et al. (2015), at CPU scale",
)


def raw_files(raw_dir: str):
    return [os.path.join(raw_dir, f"{s}.{lang}") for s in SPLITS for lang in ("es", "en")]


def check_raw(raw_dir: str) -> None:
    missing = [f for f in raw_files(raw_dir) if not os.path.isfile(f)]
    if missing:
        raise FileNotFoundError(
            f"--raw-dir {raw_dir} lacks {', '.join(os.path.basename(f) for f in missing)}: "
            "run recipes/bible_es_en/prepare.sh (it writes data/bible_es_en/raw)"
        )


def unk_rate(lines, words) -> float:
    """The share of the whitespace tokens of ``lines`` that are not in ``words``."""
    tokens = [w for line in lines for w in line.split()]
    return sum(w not in words for w in tokens) / max(len(tokens), 1)


def read_dict(path: str) -> set:
    with open(path, encoding="utf-8") as f:
        return {line.split()[0] for line in f if line.strip()}


def test_unk_rates(out: str) -> dict:
    """{lang: share of the tokenised test set that is <unk>} of a prepared directory."""
    rates = {}
    for lang in (RECIPE.src, RECIPE.tgt):
        with open(os.path.join(out, "tok", f"test.{lang}"), encoding="utf-8") as f:
            lines = f.read().splitlines()
        rates[lang] = round(unk_rate(lines, read_dict(f"{out}/vocab/dict.{lang}.txt")), 5)
    return rates


def copyable_unks(out: str) -> dict:
    """The tokenised test source's tokens outside the source vocabulary of a prepared
    directory, and how many of them appear verbatim in their reference: the most that
    replacing ``<unk>`` by the aligned source word can repair."""
    words = read_dict(f"{out}/vocab/dict.{RECIPE.src}.txt")
    paths = [os.path.join(out, "tok", f"test.{lang}") for lang in (RECIPE.src, RECIPE.tgt)]
    unk = in_reference = 0
    with open(paths[0], encoding="utf-8") as src, open(paths[1], encoding="utf-8") as ref:
        for source, reference in zip(src, ref):
            reference = set(reference.split())
            for w in source.split():
                if w not in words:
                    unk, in_reference = unk + 1, in_reference + (w in reference)
    return {"test_source_unk": unk, "in_reference": in_reference}


def up_to_date(raw_dir: str, out: str, vocab: int, max_len: int):
    """The statistics of ``out`` when it was prepared from these raw files with these
    settings and is newer than them; else None."""
    path = os.path.join(out, "prepare.json")
    needed = [path, f"{out}/bin/dict.en.txt", f"{out}/bin-raw/test.es-en.es"]
    if not all(os.path.exists(p) for p in needed):
        return None
    with open(path) as f:
        stats = json.load(f)
    same = (stats.get("raw_dir"), stats.get("vocab"), stats.get("max_len")) == (
        os.path.abspath(raw_dir),
        vocab,
        max_len,
    )
    newer = all(os.path.getmtime(f) < os.path.getmtime(path) for f in raw_files(raw_dir))
    return stats if same and newer and "test_unk_rate" in stats else None


def prepare(raw_dir: str, out: str, vocab: int = VOCAB, max_len: int = MAX_LEN, workers=1):
    """Build ``out/{tok,ref,vocab,bin,bin-raw}`` (``wmt.prepare``) unless up to date;
    returns the statistics of ``out/prepare.json``, test unk rates included."""
    check_raw(raw_dir)
    stats = up_to_date(raw_dir, out, vocab, max_len)
    if stats is not None:
        print(f"[words] {out} up to date, skipped", flush=True)
        return stats
    stats = wmt.prepare(RECIPE, out, raw_dir, vocab, max_len, workers)
    stats["test_unk_rate"] = test_unk_rates(out)
    with open(os.path.join(out, "prepare.json"), "w") as f:
        json.dump(stats, f, indent=1)
    return stats


def unk_rates(raw_dir: str, vocabs, max_len: int = MAX_LEN, workers: int = 1):
    """For each K of ``vocabs``: the training and test ``<unk>`` rates per language
    (tokenised and filtered as ``prepare`` does, the top K training words kept)."""
    check_raw(raw_dir)
    tok = {}
    for split in ("train", "test"):
        src, tgt = (list(wmt.read_lines(f"{raw_dir}/{split}.{lang}")) for lang in ("es", "en"))
        tok[split] = list(wmt.tokenize_pairs(zip(src, tgt), "es", "en", workers))
    train = [
        p for p in tok["train"] if wmt.keep_pair(len(p[0].split()), len(p[1].split()), max_len)
    ]
    counts = [
        collections.Counter(w for pair in train for w in pair[side].split()) for side in (0, 1)
    ]
    rows = []
    for k in vocabs:
        row = {"vocab": k, "train_pairs_kept": len(train), "train_pairs": len(tok["train"]),
               "train_types_es": len(counts[0]), "train_types_en": len(counts[1])}  # fmt: skip
        test_tokens = test_unk = 0
        for side, lang in enumerate(("es", "en")):
            words = {w for w, _ in wmt.top_words(counts[side], k)}
            test = [p[side] for p in tok["test"]]
            row[f"train_{lang}"] = round(unk_rate([p[side] for p in train], words), 5)
            row[f"test_{lang}"] = round(unk_rate(test, words), 5)
            n = sum(len(line.split()) for line in test)
            test_tokens, test_unk = test_tokens + n, test_unk + row[f"test_{lang}"] * n
        row["test_both"] = round(test_unk / test_tokens, 5)
        rows.append(row)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("prepare", help="raw verses -> word-level fairseq data")
    p.add_argument("--raw-dir", default="data/bible_es_en/raw", help="prepare.sh's raw/")
    p.add_argument("--out", default="data/bible_es_en/words")
    p.add_argument("--vocab", type=int, default=VOCAB, help="words per language (K)")
    p.add_argument("--max-len", type=int, default=MAX_LEN)
    p.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    p = commands.add_parser("unk-rates", help="test-side <unk> rates for several K")
    p.add_argument("--raw-dir", default="data/bible_es_en/raw")
    p.add_argument("--vocab", type=int, nargs="+", default=[4000, 5000, 6000, 8000, 10000, 20000])
    p.add_argument("--max-len", type=int, default=MAX_LEN)
    p.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    if min(args.vocab if isinstance(args.vocab, list) else [args.vocab]) < 1 or args.max_len < 1:
        parser.error(f"--vocab ({args.vocab}) and --max-len ({args.max_len}) must be positive")
    try:
        if args.command == "prepare":
            stats = prepare(args.raw_dir, args.out, args.vocab, args.max_len, args.workers)
            print(json.dumps(stats, indent=1))
            return
        rows = unk_rates(args.raw_dir, args.vocab, args.max_len, args.workers)
    except (ValueError, FileNotFoundError, RuntimeError) as error:
        sys.exit(f"error: {error}")
    print("     K | unk in test: es    en  both | in training: es    en")
    for r in rows:
        print(f"{r['vocab']:6d} | {100 * r['test_es']:13.2f}% {100 * r['test_en']:5.2f}% "
              f"{100 * r['test_both']:5.2f}% | {100 * r['train_es']:13.2f}% "
              f"{100 * r['train_en']:5.2f}%")  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"max_len": args.max_len, "rows": rows}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
