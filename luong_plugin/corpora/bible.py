"""Spanish→English Bible corpus: Reina-Valera 1909 → World English Bible, verse-aligned.

Sources (public domain, Debian packages ``sword-text-sparv`` and ``sword-text-web``):
SWORD modules ``spaRV1909eb`` (KJV versification) and ``engWEB2015eb`` (NRSVA), read
with pysword as raw OSIS XML and cleaned here:

1. Markup. ``<w>``, ``<seg>``, ``<name>`` … keep their content and leave no gap;
   ``<note>…</note>`` (WEB footnotes and cross references) becomes a space, so the
   words on either side stay apart (pysword's ``clean=True`` glues them); poetry,
   paragraph, list and milestone tags (``<l/>``, ``<lg/>``, ``<div/>``, ``<lb/>``,
   ``<q>``) become spaces; canonical titles (``<title canonical="true">``: Psalm
   superscriptions and the Ps 119 acrostic letters, which RV1909 has in its verses)
   are kept, every other title (section headings) is dropped, and so are WEB's
   ``<speaker>`` labels in the Song of Songs ("Beloved"), which RV1909 does not have.
   RV1909's ``<transChange>`` (words supplied by the translators) sits flush against
   its neighbours in the module ("allí<transChange>también</transChange>bdelio"), so
   it gets a space on each side, except an enclitic pronoun after a verb form
   ("sáca<transChange>lo</transChange>" → "sácalo"). XML entities are unescaped
   and whitespace collapsed; a space left before ``, . ; : ! ?`` is removed.
2. Appendices. Anything after a book's closing ``<div type="book" eID=…/>`` is not
   verse text: this drops the glossary WEB appends to Rev 22:21. The RV1909 epistle
   subscriptions ("Amén. La primera epístola á los Tesalonicenses fué escrita de
   Atenas.") are cut from the last verse of a book when the sentence after the final
   "Amén." says where the letter was written or sent (escrita/enviada): 14 epistles,
   Romans to Hebrews.
3. Normalisation. RV1909 sets the opening of a chapter in capitals ("EN el principio",
   "Y FUERON acabados", and after a Psalm superscription "Salmo de David. JEHOVÁ es
   mi pastor"). That capitalised run is recased: title case at the start of a
   sentence, otherwise the word's usual casing in the Spanish text itself ("Y fueron",
   "Y Jehová", "A ti"). Nothing else is changed: the old orthography and accents of
   1909 ("á", "fué", "crió", "Jehová") are kept as printed, and so is WEB's
   punctuation (curly quotes included). Both sides stay true-cased.
4. Alignment. Verses are joined on (book, chapter, verse); the chapters whose verse
   division differs between the two editions are dropped (``MISALIGNED_CHAPTERS``),
   then pairs with an empty side, the last shared verse of a chapter that ends at a
   different verse in each edition, and pairs whose character-length ratio es/en is
   outside [0.5, 2.0].
5. Splits. Whole chapters are held out (seeded), so valid and test verses do not sit
   between training verses of the same chapter.

``python -m luong_plugin.corpora.bible --out DIR`` writes ``{train,valid,test}.{es,en}``
and ``refs.{train,valid,test}``.
"""

import argparse
import collections
import contextlib
import os
import random
import sys
import time

if __package__:  # bible.clean_osis etc. stay importable
    from luong_plugin.corpora.osis import (  # noqa: F401
        HEBREW_LETTERS,
        casing_table,
        clean_osis,
        normalise_capitals,
        strip_subscription,
    )
else:  # run as a script (prepare.sh does): keeps the package's fairseq import out
    from osis import casing_table, clean_osis, normalise_capitals, strip_subscription

SWORD_DIR = "/usr/share/sword"
ES_MODULE = "spaRV1909eb"
EN_MODULE = "engWEB2015eb"
DEBIAN_PACKAGES = ("sword-text-sparv", "sword-text-web")

# Chapters whose verses RV1909 divides differently from WEB, so that verse n of one
# is not verse n of the other. The first 8 are DATA.md's; the others were found here
# by comparing verse lengths at offsets 0 and ±1, then read: Num 30 (RV1909 30:1 is
# WEB 29:40, the whole chapter shifts), Job 39-40 (RV1909's Job 39 starts at WEB
# 38:39 and ends with WEB 40:1-5), 2 Cor 13 (RV1909 13:12 = WEB 13:12-13), and two
# verse boundaries drawn a clause apart that leave a wrong pair inside the length
# ratio (Judg 14:18-20, 1 Chr 1:30-32). Shifts whose pairs all fail the filters are
# left to them (2 Sam 2:31-32; Rom 14:23, where WEB puts the doxology 16:25-27).
KNOWN_MISALIGNED = frozenset(  # listed in DATA.md
    {
        ("Num", 13),
        ("2Chr", 33),
        ("1Sam", 24),
        ("Hos", 12),
        ("1Kgs", 22),
        ("1Chr", 21),
        ("Jonah", 1),
        ("Jonah", 2),
    }
)
FOUND_MISALIGNED = frozenset(
    {("Num", 30), ("Judg", 14), ("1Chr", 1), ("Job", 39), ("Job", 40), ("2Cor", 13)}
)
MISALIGNED_CHAPTERS = KNOWN_MISALIGNED | FOUND_MISALIGNED
MIN_RATIO, MAX_RATIO = 0.5, 2.0  # len(es) / len(en), in characters
SPLITS = ("train", "valid", "test")

# --------------------------------------------------------------------------- reading


@contextlib.contextmanager
def cached_blocks(bible):
    """Memoise a pysword zText module's block decompression inside the ``with``.

    pysword 0.2.8's ``ZTextModule._text_for_index`` calls ``_decompressed_text``
    for every verse, which seeks, reads and zlib-decompresses the whole block
    (``BlockType=BOOK``: a book) again each time, so reading both Bibles takes
    minutes. Shadowing the bound method on this one instance with a cached version
    reads them in about a second, holding the
    decompressed books (15 + 29 MB of OSIS) until exit, when the instance attribute
    is removed, so the class and other module objects are untouched. Raw-text
    modules have no blocks.
    """
    decompress = getattr(bible, "_decompressed_text", None)
    if decompress is None:
        yield bible
        return
    cache = {}

    def cached(testament, buf_num):
        key = (testament, buf_num)
        if key not in cache:
            cache[key] = decompress(testament, buf_num)
        return cache[key]

    bible._decompressed_text = cached
    try:
        yield bible
    finally:
        del bible._decompressed_text


def read_module(modules, name):
    """All verses of one SWORD module as ``{(osis_book, chapter, verse): raw OSIS}``,
    in the module's canonical order."""
    bible = modules.get_bible_from_module(name)
    verses = {}
    with cached_blocks(bible):
        for books in bible.get_structure().get_books().values():
            for book in books:
                for chapter in range(1, book.num_chapters + 1):
                    texts = bible.get_iter(books=book.name, chapters=chapter, clean=False)
                    for verse, text in enumerate(texts, start=1):
                        verses[(book.osis_name, chapter, verse)] = text
    return verses


def modules_present(sword_dir):
    """True when both modules' data directories exist under ``sword_dir``."""
    base = os.path.join(sword_dir, "modules", "texts", "ztext")
    return all(os.path.isdir(os.path.join(base, m)) for m in (ES_MODULE, EN_MODULE))


def missing_modules_message(sword_dir):
    return (
        f"SWORD modules {ES_MODULE} and {EN_MODULE} not found under {sword_dir}.\n"
        "Install the public-domain Debian packages: "
        f"sudo apt-get install -y {' '.join(DEBIAN_PACKAGES)}  (or: make sword)"
    )


# ------------------------------------------------------------------------ alignment


def keep_pair(es, en, min_ratio=MIN_RATIO, max_ratio=MAX_RATIO):
    """Both sides non-empty and ``min_ratio <= len(es) / len(en) <= max_ratio``."""
    if not es or not en:
        return False
    return min_ratio <= len(es) / len(en) <= max_ratio


def ref_string(key):
    book, chapter, verse = key
    return f"{book}.{chapter}.{verse}"


def clean_spanish(raw_verses):
    """Clean all RV1909 verses: markup, subscriptions, chapter-opening capitals."""
    texts = {key: clean_osis(raw) for key, raw in raw_verses.items()}
    last_of_book = {}
    for key, text in texts.items():
        if text:
            last_of_book[key[0]] = key
    for key in last_of_book.values():
        texts[key] = strip_subscription(texts[key])
    casing = casing_table(texts.values())
    return {
        key: normalise_capitals(text, chapter_start=key[2] == 1, casing=casing)
        for key, text in texts.items()
    }


def _last_verses(verses):
    """``{(book, chapter): number of its last non-empty verse}``."""
    last = {}
    for (book, chapter, verse), text in verses.items():
        if text:
            last[book, chapter] = max(verse, last.get((book, chapter), 0))
    return last


def align(es_verses, en_verses, min_ratio=MIN_RATIO, max_ratio=MAX_RATIO):
    """Join cleaned verses on (book, chapter, verse) in Spanish order and filter.

    Besides ``MISALIGNED_CHAPTERS``, empty sides and the length ratio, the last
    shared verse of a chapter that ends at a different verse in each edition is
    dropped: one side often carries the other's final verse in it (RV1909 2 Sam
    20:25 = WEB 20:25-26, likewise Job 35:15 and Acts 19:40).

    Returns ``(pairs, dropped)``: ``pairs`` a list of ``(ref, es, en)``, ``dropped``
    a Counter of the reasons pairs were left out.
    """
    last_es, last_en = _last_verses(es_verses), _last_verses(en_verses)
    uneven_end = {
        (*chapter, min(last, last_en[chapter]))
        for chapter, last in last_es.items()
        if chapter in last_en and last != last_en[chapter]
    }
    pairs, dropped = [], collections.Counter()
    for key, es in es_verses.items():
        en = en_verses.get(key)
        if en is None:
            dropped["not in WEB"] += 1
        elif key[:2] in MISALIGNED_CHAPTERS:
            dropped["misaligned chapter"] += 1
        elif not es or not en:
            dropped["empty side"] += 1
        elif key in uneven_end:
            dropped["uneven chapter end"] += 1
        elif not keep_pair(es, en, min_ratio, max_ratio):
            dropped["length ratio"] += 1
        else:
            pairs.append((ref_string(key), es, en))
    return pairs, dropped


def extract_pairs(sword_dir=SWORD_DIR, stats=None):
    """Read, clean and align both modules: a list of ``(ref, es, en)``, e.g.
    ``("Gen.1.1", "En el principio crió Dios …", "In the beginning, God …")``.
    When ``stats`` is a dict, the drop counts are stored in it."""
    from pysword.modules import SwordModules

    if not modules_present(sword_dir):
        raise FileNotFoundError(missing_modules_message(sword_dir))
    modules = SwordModules(sword_dir)
    modules.parse_modules()
    es_verses = clean_spanish(read_module(modules, ES_MODULE))
    en_raw = read_module(modules, EN_MODULE)  # NRSVA: also the deuterocanon
    en_verses = {k: clean_osis(v) for k, v in en_raw.items() if k in es_verses}
    pairs, dropped = align(es_verses, en_verses)
    if stats is not None:
        stats.update(dropped)
    return pairs


# --------------------------------------------------------------------------- splits


def chapter_of(ref):
    """``"Gen.1.1"`` → ``"Gen.1"``."""
    return ref.rsplit(".", 1)[0]


def split_by_chapter(pairs, seed=1, n_valid=1000, n_test=1000):
    """Hold out whole chapters: ``{"train": […], "valid": […], "test": […]}``.

    Chapters are visited in a seeded random order; a chapter goes to valid while it
    fits within ``n_valid`` verses, else to test while it fits within ``n_test``,
    else to train. Each split keeps the canonical order of ``pairs``.
    """
    chapters = collections.defaultdict(list)
    for pair in pairs:
        chapters[chapter_of(pair[0])].append(pair)
    order = sorted(chapters)
    random.Random(seed).shuffle(order)
    assignment, size = {}, {"valid": 0, "test": 0}
    for chapter in order:
        n = len(chapters[chapter])
        for split, limit in (("valid", n_valid), ("test", n_test)):
            if size[split] + n <= limit:
                assignment[chapter], size[split] = split, size[split] + n
                break
        else:
            assignment[chapter] = "train"
    splits = {split: [] for split in SPLITS}
    for pair in pairs:
        splits[assignment[chapter_of(pair[0])]].append(pair)
    return splits


def subsample(pairs, n, seed=1):
    """The first ``n`` pairs after a seeded shuffle, back in their original order."""
    if n is None or n >= len(pairs):
        return list(pairs)
    keep = set(random.Random(seed).sample(range(len(pairs)), n))
    return [pair for i, pair in enumerate(pairs) if i in keep]


def write_splits(splits, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    for split, pairs in splits.items():
        columns = {"refs": 0, "es": 1, "en": 2}
        for name, column in columns.items():
            path = f"refs.{split}" if name == "refs" else f"{split}.{name}"
            with open(os.path.join(out_dir, path), "w", encoding="utf-8") as f:
                f.writelines(pair[column] + "\n" for pair in pairs)


# ------------------------------------------------------------------------------ CLI


def main(argv=None):
    # fmt: off
    parser = argparse.ArgumentParser(
        description="Extract the RV1909→WEB Spanish→English Bible corpus.")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--sword-dir", default=SWORD_DIR,
                        help="SWORD library root (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=1,
                        help="seed for the chapter split and --max-train")
    parser.add_argument("--valid", type=int, default=1000,
                        help="verses held out for validation (whole chapters)")
    parser.add_argument("--test", type=int, default=1000,
                        help="verses held out for test (whole chapters)")
    parser.add_argument("--max-train", type=int, default=None,
                        help="keep N training pairs (seeded sample; default all)")
    args = parser.parse_args(argv)
    # fmt: on
    if not modules_present(args.sword_dir):
        sys.exit(missing_modules_message(args.sword_dir))
    started = time.perf_counter()
    stats = {}
    pairs = extract_pairs(args.sword_dir, stats=stats)
    splits = split_by_chapter(pairs, args.seed, args.valid, args.test)
    splits["train"] = subsample(splits["train"], args.max_train, args.seed)
    write_splits(splits, args.out)
    elapsed = time.perf_counter() - started
    dropped = ", ".join(f"{n} {why}" for why, n in sorted(stats.items()))
    print(f"{len(pairs)} pairs ({dropped} dropped) in {elapsed:.1f} s")
    for split in SPLITS:
        chapters = len({chapter_of(ref) for ref, _, _ in splits[split]})
        print(f"  {split}: {len(splits[split])} pairs, {chapters} chapters")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
