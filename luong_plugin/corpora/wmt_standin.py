"""A tiny stand-in for a recipe's raw WMT directory, for offline smoke tests.

    python -m luong_plugin.corpora.wmt_standin --recipe wmt14_en_de --out DIR \\
        --english en.txt --foreign es.txt [--train 150 --valid 30 --test 30]

Takes ``train + valid + test`` aligned lines of English and of another language (the
tests use the Spanish->English Bible, Spanish standing in for German or French) and
writes every file the recipe reads, under the same relative paths and in the same
formats as the extracted WMT archives: plain parallel files for the training corpora
(the training lines dealt round-robin to them; ``.gz`` where WMT ships gzip) and dev
sets, and the test set as WMT SGML (``<srcset>``/``<refset>``, ``<doc>`` of ten
``<seg id=N>`` each, ``-src.LANG.sgm`` / ``-ref.LANG.sgm``).
"""

import argparse
import gzip
import os
import sys

if __package__:
    from luong_plugin.corpora.wmt import RECIPES, get_recipe
else:  # run as a script: no fairseq import
    from wmt import RECIPES, get_recipe

DOC_SIZE = 10


def sgml(segments, setid, lang, side):
    """WMT's SGML: src files are a ``srcset``, reference files a ``refset``."""
    tag = "srcset" if side == "src" else "refset"
    lines = [f'<{tag} setid="{setid}" srclang="any" trglang="{lang}">']
    for start in range(0, len(segments), DOC_SIZE):
        doc = start // DOC_SIZE + 1
        lines.append(f'<doc sysid="ref" docid="standin-{doc}" genre="news" origlang="en">')
        lines.append("<p>")
        for i, text in enumerate(segments[start : start + DOC_SIZE], 1):
            lines.append(f'<seg id="{i}">{text}</seg>')
        lines += ["</p>", "</doc>"]
    lines.append(f"</{tag}>")
    return "\n".join(lines) + "\n"


def write(path, text):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as f:
        f.write(text)


def build(recipe, out, english, foreign, n_train=150, n_valid=30, n_test=30):
    """Write the stand-in for ``recipe`` under ``out`` from aligned line lists."""
    needed = n_train + n_valid + n_test
    if len(english) != len(foreign) or len(english) < needed:
        raise ValueError(
            f"need {needed} aligned lines (--train + --valid + --test), "
            f"got {len(english)} English and {len(foreign)} foreign"
        )
    lines = {"en": english, recipe.src if recipe.src != "en" else recipe.tgt: foreign}
    splits = {
        "train": range(0, n_train),
        "valid": range(n_train, n_train + n_valid),
        "test": range(n_train + n_valid, needed),
    }
    groups = {"train": recipe.train, "valid": recipe.valid, "test": (recipe.test,)}
    for split, parts in groups.items():
        for k, (part, lang, path) in enumerate(recipe.files(parts)):
            rows = [lines[lang][i] for i in splits[split]][k // 2 :: len(parts)]
            if part.sgml:
                side = "src" if lang == recipe.src else "ref"
                write(os.path.join(out, path), sgml(rows, part.name, lang, side))
            else:
                write(os.path.join(out, path), "".join(r + "\n" for r in rows))
    return out


def main(argv=None):
    # fmt: off
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", required=True, help=f"one of {', '.join(RECIPES)}")
    parser.add_argument("--out", required=True)
    parser.add_argument("--english", required=True, help="English lines")
    parser.add_argument("--foreign", required=True, help="the aligned other-language lines")
    parser.add_argument("--train", type=int, default=150)
    parser.add_argument("--valid", type=int, default=30)
    parser.add_argument("--test", type=int, default=30)
    args = parser.parse_args(argv)
    # fmt: on
    try:
        recipe = get_recipe(args.recipe)
        with open(args.english, encoding="utf-8") as f:
            english = f.read().splitlines()
        with open(args.foreign, encoding="utf-8") as f:
            foreign = f.read().splitlines()
        build(recipe, args.out, english, foreign, args.train, args.valid, args.test)
    except ValueError as error:
        sys.exit(f"error: {error}")
    print(f"stand-in for {args.recipe}: {args.out}")


if __name__ == "__main__":
    main()
