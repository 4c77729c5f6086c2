"""The WMT corpora of the papers, from the raw WMT files to fairseq's binary format.

    python -m luong_plugin.corpora.wmt prepare --recipe wmt14_en_de --out data/wmt14_en_de
    python -m luong_plugin.corpora.wmt prepare --recipe wmt14_en_de --out DIR --raw-dir RAW
    python -m luong_plugin.corpora.wmt train --recipe wmt14_en_de --data DIR [--arch A]
    python -m luong_plugin.corpora.wmt evaluate --recipe wmt14_en_de --data DIR --checkpoint C
    python -m luong_plugin.corpora.wmt score --recipe wmt14_en_de --data DIR --hyp FILE

``recipes/<recipe>/run.sh`` runs this file as a script (``python .../wmt.py``, the
same commands): importing the package would import fairseq, ~5 s per call, and the
data steps need only sacremoses. Training and evaluation live in ``wmt_run.py``.
Recipes (``RECIPES``):

- ``wmt14_en_de``: Luong et al. (2015) §4.1, Tables 1 and 4. WMT'14 training data
  (Europarl v7, Common Crawl, News Commentary v9; 4.5M pairs), pairs longer than 50
  words dropped, top 50K words per language, newstest2013 dev, newstest2014 test.
- ``wmt15_de_en``: Luong et al. Table 3, German→English. §4.1: "All our models are
  trained on the WMT'14 training data", so the same training data; newstest2015 test.
- ``wmt14_en_fr``: Bahdanau et al. (2015) §4.1: WMT'14 English-French, 30K words per
  language, pairs of at most 50 words (RNNsearch-50; ``--max-len 30`` for -30),
  newstest2012+2013 dev, newstest2014 test.

The paper's tokenized BLEU (Luong footnote 12: "All texts are tokenized with
tokenizer.perl and BLEU scores are computed with multi-bleu.perl"; Bahdanau footnote
6) is reproduced with sacremoses' port of tokenizer.perl. Preparation:

1. read: plain parallel files (``.gz`` too) and WMT's SGML test sets (one
   ``<seg id=N>`` per segment, read as sacrebleu reads them: no entity unescaping);
2. clean: Unicode control/format characters become spaces (Moses
   remove-non-printing-char.perl), whitespace collapsed;
3. tokenize: ``tokenizer.perl -a`` (aggressive hyphen splitting, ``@-@``) without
   its XML escaping: the escapes map tokens one to one, so tokenized BLEU is the same,
   and unescaped text detokenizes without a lossy round trip;
4. filter the training pairs: both sides 1 to ``max_len`` tokens (dev and test are
   never filtered);
5. vocabulary: the ``vocab`` most frequent training tokens per language (ties by
   code point), every other word becomes ``<unk>``;
6. binarise with ``fairseq-preprocess --srcdict --tgtdict``; the test set is also
   kept as text (``bin-raw/``, ``--dataset-impl raw``) for ``--replace-unk``.
"""

import argparse
import collections
import gzip
import itertools
import json
import os
import re
import subprocess
import sys
import tarfile
import time
import urllib.request

if __package__:
    from luong_plugin.corpora import wmt_run
    from luong_plugin.corpora.wmt_recipes import (  # noqa: F401  (wmt.RECIPES etc.)
        ARCHIVES,
        EUROPARL,
        RECIPES,
        Parallel,
        Recipe,
        get_recipe,
    )
else:  # run as a script (the recipes do): keeps fairseq's import out of this process
    import wmt_run
    from wmt_recipes import ARCHIVES, EUROPARL, RECIPES, Parallel, Recipe, get_recipe  # noqa: F401

# ----------------------------------------------------------------- raw files, fetch


def missing_files(recipe, raw_dir):
    """``{archive: [relative paths missing under raw_dir]}``."""
    missing = collections.defaultdict(list)
    for part, _, path in recipe.raw_files():
        if not os.path.isfile(os.path.join(raw_dir, path)):
            missing[part.archive].append(path)
    return dict(missing)


def missing_message(missing, raw_dir):
    lines = [
        f"--raw-dir {raw_dir} lacks the raw WMT files below. Extract these archives "
        "there (paths as in the archives), or leave out --raw-dir to download them:"
    ]
    for name, paths in missing.items():
        lines.append(f"  {ARCHIVES[name].url}: {', '.join(paths)}")
    return "\n".join(lines)


def _download(url, dest):
    part = dest + ".part"
    print(f"[download] {url}", flush=True)
    with urllib.request.urlopen(url) as response, open(part, "wb") as f:
        while chunk := response.read(1 << 20):
            f.write(chunk)
    os.replace(part, dest)


def fetch(recipe, raw_dir):
    """Download and extract the archives whose files are missing from ``raw_dir``."""
    for name, paths in missing_files(recipe, raw_dir).items():
        archive = os.path.join(raw_dir, "downloads", name)
        os.makedirs(os.path.dirname(archive), exist_ok=True)
        if not os.path.isfile(archive):
            _download(ARCHIVES[name].url, archive)
        print(f"[extract] {', '.join(paths)} from {name}", flush=True)
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                if member.name.removeprefix("./") in paths:
                    member.name = member.name.removeprefix("./")
                    tar.extract(member, raw_dir, filter="data")
    still = missing_files(recipe, raw_dir)
    if still:
        raise FileNotFoundError(missing_message(still, raw_dir))


# -------------------------------------------------------------------------- readers

_SEG = re.compile(r"<seg[^>]*>(.*?)</seg>", re.DOTALL)


def read_sgm(path):
    """The segments of a WMT SGML file (``<doc>``s of ``<seg id=N>…</seg>``) in
    file order, whitespace collapsed, entities left as written (sacrebleu's reading)."""
    with open(path, encoding="utf-8") as f:
        segments = [" ".join(s.split()) for s in _SEG.findall(f.read())]
    if not segments:
        raise ValueError(f"{path}: no <seg id=...>...</seg> segments (not a WMT SGML file?)")
    return segments


def read_lines(path):
    """A plain (or gzipped) text file, one sentence a line."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", newline="\n") as f:
        for line in f:
            yield line.rstrip("\n")


def read_parallel(part, recipe, raw_dir):
    """Pairs ``(source, target)`` of one corpus, checking both sides have as many lines."""
    (_, _, src_rel), (_, _, tgt_rel) = recipe.files((part,))
    src_path, tgt_path = (os.path.join(raw_dir, p) for p in (src_rel, tgt_rel))
    if part.sgml:
        src, tgt = read_sgm(src_path), read_sgm(tgt_path)
        if len(src) != len(tgt):
            raise ValueError(f"{src_path} has {len(src)} segments, {tgt_path} {len(tgt)}")
        yield from zip(src, tgt)
        return
    sentinel = object()
    for n, (s, t) in enumerate(
        itertools.zip_longest(read_lines(src_path), read_lines(tgt_path), fillvalue=sentinel)
    ):
        if s is sentinel or t is sentinel:
            raise ValueError(f"{src_path} and {tgt_path} differ in length (line {n + 1})")
        yield s, t


# --------------------------------------------------------------- clean and tokenize

_TOKENIZERS = {}


def clean(text):
    """Moses remove-non-printing-char.perl (``\\p{C}`` → space), whitespace collapsed."""
    import regex

    return " ".join(regex.sub(r"\p{C}", " ", text).split())


def tokenize(text, lang):
    """``tokenizer.perl -a -no-escape -l LANG`` (sacremoses) of the cleaned text."""
    if lang not in _TOKENIZERS:
        from sacremoses import MosesTokenizer

        _TOKENIZERS[lang] = MosesTokenizer(lang=lang)
    return _TOKENIZERS[lang].tokenize(
        clean(text), aggressive_dash_splits=True, escape=False, return_str=True
    )


def _tokenize_chunk(job):
    src_lang, tgt_lang, pairs = job
    return [(tokenize(s, src_lang), tokenize(t, tgt_lang)) for s, t in pairs]


def tokenize_pairs(pairs, src_lang, tgt_lang, workers=1, chunk=10000):
    """Tokenized ``(source, target)`` pairs in input order, ``workers`` processes."""
    pairs = iter(pairs)
    jobs = iter(lambda: (src_lang, tgt_lang, list(itertools.islice(pairs, chunk))), None)
    jobs = itertools.takewhile(lambda job: job[2], jobs)
    if workers <= 1:
        for job in jobs:
            yield from _tokenize_chunk(job)
        return
    import multiprocessing

    with multiprocessing.Pool(workers) as pool:
        for done in pool.imap(_tokenize_chunk, jobs):
            yield from done


def keep_pair(src_tokens, tgt_tokens, max_len):
    """Luong §4.1 "filter out sentence pairs whose lengths exceed 50 words"; an
    empty side is dropped too."""
    return 0 < src_tokens <= max_len and 0 < tgt_tokens <= max_len


# ------------------------------------------------------------------------ vocabulary

FAIRSEQ_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")


def top_words(counts, size):
    """The ``size`` most frequent words, most frequent first, ties by code point;
    fairseq's own special symbols are never words."""
    words = [(w, c) for w, c in counts.items() if w not in FAIRSEQ_SPECIALS]
    return sorted(words, key=lambda wc: (-wc[1], wc[0]))[:size]


def write_dict(words, path):
    """A fairseq dictionary: ``word count`` per line."""
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(f"{w} {c}\n" for w, c in words)


# --------------------------------------------------------------------------- prepare


def _write_split(pairs, out_prefix, recipe, workers, max_len=None, counts=None):
    """Tokenize and write ``out_prefix.{src,tgt}``; with ``max_len``, filter and
    count words. Returns ``(read, kept)``."""
    read = kept = 0
    with (
        open(f"{out_prefix}.{recipe.src}", "w", encoding="utf-8") as fs,
        open(f"{out_prefix}.{recipe.tgt}", "w", encoding="utf-8") as ft,
    ):
        for s, t in tokenize_pairs(pairs, recipe.src, recipe.tgt, workers):
            read += 1
            s_words, t_words = s.split(), t.split()
            if max_len is not None:
                if not keep_pair(len(s_words), len(t_words), max_len):
                    continue
                counts[0].update(s_words)
                counts[1].update(t_words)
            kept += 1
            fs.write(s + "\n")
            ft.write(t + "\n")
    return read, kept


def prepare(recipe, out, raw_dir=None, vocab=None, max_len=None, workers=1):
    """Build ``out/{tok,ref,vocab,bin,bin-raw}``; returns the statistics written
    to ``out/prepare.json``."""
    vocab = recipe.vocab if vocab is None else vocab
    max_len = recipe.max_len if max_len is None else max_len
    if vocab < 1 or max_len < 1:
        raise ValueError(f"--vocab ({vocab}) and --max-len ({max_len}) must be positive")
    if raw_dir is None:
        raw_dir = os.path.join(out, "raw")
        os.makedirs(raw_dir, exist_ok=True)
        fetch(recipe, raw_dir)
    else:  # a local copy: never download
        missing = missing_files(recipe, raw_dir)
        if missing:
            raise FileNotFoundError(missing_message(missing, raw_dir))
    started = time.perf_counter()
    src, tgt = recipe.src, recipe.tgt
    for d in ("tok", "ref", "vocab"):
        os.makedirs(os.path.join(out, d), exist_ok=True)
    stats = {"recipe": recipe.name, "raw_dir": os.path.abspath(raw_dir), "vocab": vocab,
             "max_len": max_len, "train": {}}  # fmt: skip

    counts = (collections.Counter(), collections.Counter())
    train_pairs = itertools.chain.from_iterable(
        _counted(read_parallel(part, recipe, raw_dir), part.name, stats["train"])
        for part in recipe.train
    )
    print(f"[tokenize] training data, {workers} worker(s)", flush=True)
    read, kept = _write_split(train_pairs, f"{out}/tok/train", recipe, workers, max_len, counts)
    stats["train_pairs"], stats["train_kept"] = read, kept
    for split, parts in (("valid", recipe.valid), ("test", (recipe.test,))):
        pairs = list(itertools.chain.from_iterable(
            read_parallel(part, recipe, raw_dir) for part in parts))  # fmt: skip
        for side, lang in enumerate((src, tgt)):  # untokenized, for sacreBLEU
            with open(f"{out}/ref/{split}.{lang}", "w", encoding="utf-8") as f:
                f.writelines(pair[side] + "\n" for pair in pairs)
        _write_split(pairs, f"{out}/tok/{split}", recipe, workers)
        stats[f"{split}_pairs"] = len(pairs)

    for lang, counter in zip((src, tgt), counts):
        words = top_words(counter, vocab)
        write_dict(words, f"{out}/vocab/dict.{lang}.txt")
        total = sum(counter.values())
        stats[f"vocab_{lang}"] = len(words)
        stats[f"train_unk_rate_{lang}"] = 1 - sum(c for _, c in words) / max(total, 1)
    _binarize(recipe, out, workers)
    stats["seconds"] = round(time.perf_counter() - started, 1)
    with open(os.path.join(out, "prepare.json"), "w") as f:
        json.dump(stats, f, indent=1)
    return stats


def _counted(pairs, name, table):
    table[name] = 0
    for pair in pairs:
        table[name] += 1
        yield pair


def _binarize(recipe, out, workers):
    src, tgt = recipe.src, recipe.tgt
    dicts = ["--srcdict", f"{out}/vocab/dict.{src}.txt",
             "--tgtdict", f"{out}/vocab/dict.{tgt}.txt"]  # fmt: skip
    tmp = f"{out}/bin.tmp"
    subprocess.run(["rm", "-rf", tmp], check=True)  # preprocess refuses to overwrite
    print(f"[fairseq-preprocess] {out}/bin", flush=True)
    proc = subprocess.run(
        [wmt_run.fairseq_tool("fairseq-preprocess"), "--source-lang", src, "--target-lang", tgt,
         "--trainpref", f"{out}/tok/train", "--validpref", f"{out}/tok/valid",
         "--testpref", f"{out}/tok/test", *dicts, "--destdir", tmp,
         "--workers", str(max(1, workers))],
        capture_output=True, text=True,
    )  # fmt: skip
    if proc.returncode:
        raise RuntimeError(f"fairseq-preprocess failed:\n{proc.stderr[-3000:]}")
    for line in proc.stderr.splitlines():  # "...: N sents, M tokens, x% replaced (by <unk>)"
        if "replaced" in line:
            print("  " + line.split("preprocess:", 1)[-1], flush=True)
    subprocess.run(["rm", "-rf", f"{out}/bin"], check=True)
    os.replace(tmp, f"{out}/bin")
    # --dataset-impl raw reads {split}.{src}-{tgt}.{lang} text files next to the
    # dictionaries: what `fairseq-preprocess --dataset-impl raw` copies there.
    raw = f"{out}/bin-raw"
    os.makedirs(raw, exist_ok=True)
    for lang in (src, tgt):
        _copy(f"{out}/vocab/dict.{lang}.txt", f"{raw}/dict.{lang}.txt")
        _copy(f"{out}/tok/test.{lang}", f"{raw}/test.{src}-{tgt}.{lang}")


def _copy(source, dest):
    with open(source, "rb") as f, open(dest, "wb") as g:
        g.write(f.read())


# ------------------------------------------------------------------------------ CLI


def main(argv=None):

    # fmt: off
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("prepare", help="raw WMT files -> tokenized, binarised data")
    p.add_argument("--recipe", required=True, help=f"one of {', '.join(RECIPES)}")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--raw-dir", help="the raw files, extracted from the WMT archives "
                   "(never downloads); default: download into OUT/raw")
    p.add_argument("--vocab", type=int, help="words per language (default: the recipe's)")
    p.add_argument("--max-len", type=int,
                   help="drop training pairs longer than this (default: the recipe's)")
    p.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1),
                   help="tokenizer processes (default: %(default)s)")
    wmt_run.add_commands(commands)
    # fmt: on
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = []
    if "--" in argv:  # everything after -- goes to fairseq-train / fairseq-generate
        argv, extra = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    args = parser.parse_args(argv)
    if extra and args.command not in ("train", "evaluate"):
        parser.error(f"{args.command} passes nothing to fairseq: {' '.join(extra)}")
    try:
        recipe = get_recipe(args.recipe)
        if args.command == "prepare":
            stats = prepare(recipe, args.out, args.raw_dir, args.vocab, args.max_len,
                            args.workers)  # fmt: skip
            print(json.dumps(stats, indent=1))
            print(f"done: {args.out}/bin")
        else:
            wmt_run.run(args, recipe, extra)
    except (ValueError, FileNotFoundError, RuntimeError) as error:
        sys.exit(f"error: {error}")
    except subprocess.CalledProcessError as error:
        sys.exit(error.returncode)


if __name__ == "__main__":
    main()
