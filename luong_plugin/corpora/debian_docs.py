"""English→French technical documentation from Debian's translated manuals and catalogs.

Sources (``SOURCES``; licences in recipes/docs_en_fr/README.md), each read from a
Debian package unpacked under one root (``ROOT/PACKAGE/usr/…``):

* help pages, parallel by file path between an English and a French tree: LibreOffice
  help, GIMP help, GNOME help (Mallard ``.page`` XML) and the Debian Administrator's
  Handbook (HTML);
* message catalogs (``.mo``, read by ``mo.py``): LibreOffice's UI, Freeciv, Blender.

1. Blocks. A page's text is cut at every block-level element (``BLOCK_TAGS``: p, li,
   td, title, h1…, div, Mallard's item …) into leaf text blocks, in document order;
   inline elements (a, span, em, code, …) stay inside their block. Scripts, styles,
   code listings (``pre``, Mallard's ``screen``), Mallard's ``info`` (credits, in the
   French pages the translators) and ``comment``, page headers, footers and
   navigation bars are skipped. Of a LibreOffice switch, the case the help would
   show on Debian is kept (``BlockParser``).
2. Pairing. Two pages are paired block by block when they have the same number of
   blocks, and left out otherwise. A block pair is split into sentences only where
   both sides split into the same number (``split_sentences``); otherwise the whole
   block is one pair. A page whose pairs fail the length ratio too often is left out
   (``misaligned``: an index or glossary sorted in each language's order).
3. Cleaning. Catalog strings go through ``mo.clean_ui_pair`` (placeholders, markup,
   accelerators). On every pair: LibreOffice's product-name variables become
   "LibreOffice"; whitespace, no-break and narrow no-break spaces (French typography
   puts them before ``: ; ? !``) collapse to one space, soft hyphens and zero-width
   spaces are removed; nothing else is changed (both sides stay true-cased).
4. Filters. Pairs with a side that has no letter outside URLs, identical sides of
   three words or more or a French side that reads as English (untranslated text or
   code: ``looks_english``), a side over ``MAX_WORDS`` words, or a length ratio
   ``(len(fr) + 5) / (len(en) + 5)`` in characters outside [0.5, 2.0] (the +5 keeps
   one-word labels such as "Go" → "Aller" in) are dropped.
5. Deduplication. Exact (en, fr) repeats are dropped, keeping the first occurrence
   in ``SOURCES`` order: UI strings and page furniture repeat hundreds of times.
6. Splits. Whole help pages are held out (seeded) for valid and test, none larger
   than a tenth of the split; catalogs, which have no document structure (and whose
   strings reappear in the help), only train. Valid and test then lose any pair whose
   English side is in train (the same sentence with another translation), and test
   any pair whose English side is in valid.

``python luong_plugin/corpora/debian_docs.py extract --root ROOT --out DIR`` writes
``{train,valid,test}.{en,fr}``, ``refs.{train,valid,test}`` (``source:path#block``)
and ``stats.json``; ``packages`` lists the packages and what to unpack from them;
the length profile is lengths.py's, the held-out splits doc_splits.py's.
"""

import argparse
import collections
import glob
import json
import os
import re
import sys
import time
from typing import NamedTuple

if __package__:
    from luong_plugin.corpora.doc_splits import (
        document_of,
        split_documents,
        subsample,
        write_splits,
    )
    from luong_plugin.corpora.help_pages import (  # noqa: F401  (tests read them here)
        normalise,
        page_blocks,
        pair_blocks,
        read_page,
        split_sentences,
        switch_cases,
    )
    from luong_plugin.corpora.lengths import length_profile
    from luong_plugin.corpora.mo import MoError, clean_ui_pair, read_mo
else:  # run as a script (prepare.sh does): keeps the package's fairseq import out
    from doc_splits import document_of, split_documents, subsample, write_splits
    from help_pages import normalise, pair_blocks, read_page, switch_cases
    from lengths import length_profile
    from mo import MoError, clean_ui_pair, read_mo


class Pages(NamedTuple):
    name: str
    en_package: str
    fr_package: str
    en_dir: str  # inside the unpacked package
    fr_dir: str
    suffix: str


class Catalogs(NamedTuple):
    name: str
    package: str
    mo_dir: str
    files: str  # glob of the .mo files in mo_dir
    accelerators: str  # the toolkit's mnemonic markers (see mo.py)


SOURCES = (
    Pages("libreoffice-help", "libreoffice-help-en-us", "libreoffice-help-fr",
          "usr/share/libreoffice/help/en-US", "usr/share/libreoffice/help/fr", ".html"),
    Pages("gimp-help", "gimp-help-en", "gimp-help-fr",
          "usr/share/gimp/2.0/help/en", "usr/share/gimp/2.0/help/fr", ".html"),
    Pages("debian-handbook", "debian-handbook", "debian-handbook",
          "usr/share/doc/debian-handbook/html/en-US",
          "usr/share/doc/debian-handbook/html/fr-FR", ".html"),
    Pages("gnome-help", "gnome-user-docs", "gnome-user-docs",
          "usr/share/help/C/gnome-help", "usr/share/help/fr/gnome-help", ".page"),
    Catalogs("libreoffice-ui", "libreoffice-l10n-fr",
             "usr/lib/libreoffice/program/resource/fr/LC_MESSAGES", "*.mo", "_~"),
    Catalogs("freeciv", "freeciv-data", "usr/share/locale/fr/LC_MESSAGES", "freeciv-*.mo", "_&"),
    Catalogs("blender", "blender-data", "usr/share/locale/fr/LC_MESSAGES", "blender.mo", ""),
)  # fmt: skip
COPYRIGHT = "usr/share/doc/{}/copyright"
# gimp-help-{en,fr} link their doc directory to gimp-help-common (GFDL), not fetched
NO_COPYRIGHT = {"gimp-help-en", "gimp-help-fr"}

MAX_WORDS = 150
MIN_RATIO, MAX_RATIO, RATIO_SMOOTHING = 0.5, 2.0, 5
MISALIGNED_SHARE = 0.2
# Function words that tell an untranslated French side ("on" is French too).
ENGLISH_WORDS = frozenset("the and of to is are in that for with this you be it can".split())
FRENCH_WORDS = frozenset("le la les de des et est en que pour dans une un du vous sur au".split())
WORD = re.compile(r"\w+")
URL = re.compile(r"\b(?:[a-z][a-z0-9+.-]*://|www\.)\S*")
LANGS = ("en", "fr")

# --------------------------------------------------------------------------- sources


def package_dir(root, package):
    path = os.path.join(root, package)
    if not os.path.isdir(path):
        raise FileNotFoundError(
            f"Debian package {package} is not unpacked under {root}: "
            f"recipes/docs_en_fr/prepare.sh fetches it (apt-get download {package})"
        )
    return path


def relative_files(folder, suffix):
    paths = glob.glob(os.path.join(folder, "**", "*" + suffix), recursive=True)
    return {os.path.relpath(path, folder) for path in paths}


def page_documents(root, source, stats):
    """``[(doc, [(ref, en, fr)])]`` for the pages both trees have."""
    en_dir = os.path.join(package_dir(root, source.en_package), source.en_dir)
    fr_dir = os.path.join(package_dir(root, source.fr_package), source.fr_dir)
    for path in (en_dir, fr_dir):
        if not os.path.isdir(path):
            raise FileNotFoundError(f"{source.name}: no help pages under {path}")
    en_files, fr_files = (relative_files(path, source.suffix) for path in (en_dir, fr_dir))
    documents = []
    for rel in sorted(en_files & fr_files):
        cases = switch_cases(rel)
        en_blocks = read_page(os.path.join(en_dir, rel), cases)
        pairs = pair_blocks(en_blocks, read_page(os.path.join(fr_dir, rel), cases))
        if pairs is None:
            stats["pages with unequal blocks"] += 1
            continue
        if misaligned(pairs):
            stats["pages misaligned"] += 1
            continue
        stats["pages paired"] += 1
        doc = f"{source.name}:{rel}"
        documents.append((doc, [(f"{doc}#{i}", en, fr) for i, en, fr in pairs]))
    stats["pages in one language only"] += len(en_files ^ fr_files)
    return documents


def catalog_documents(root, source, stats):
    """``[(doc, [(ref, en, fr)])]``, one document per ``.mo`` file."""
    mo_dir = os.path.join(package_dir(root, source.package), source.mo_dir)
    paths = sorted(glob.glob(os.path.join(mo_dir, source.files)))
    if not paths:
        raise FileNotFoundError(f"{source.name}: no catalogs {source.files} under {mo_dir}")
    documents = []
    for path in paths:
        doc = f"{source.name}:{os.path.basename(path)}"
        pairs = []
        for i, entry in enumerate(read_mo(path)):
            cleaned = clean_ui_pair(entry.msgid, entry.msgstr, source.accelerators)
            if cleaned is None:
                stats["catalog strings with placeholders or markup only"] += 1
            else:
                pairs.append((f"{doc}#{i}", normalise(cleaned[0]), normalise(cleaned[1])))
        stats["catalog strings"] += len(pairs)
        documents.append((doc, pairs))
    return documents


def ratio_ok(en, fr):
    ratio = (len(fr) + RATIO_SMOOTHING) / (len(en) + RATIO_SMOOTHING)
    return MIN_RATIO <= ratio <= MAX_RATIO


def misaligned(pairs):
    """True when more than ``MISALIGNED_SHARE`` of a page's pairs of 20 characters or
    more (and at least two) fail the length ratio: the blocks matched in number but
    not in order (an index or a glossary sorted in each language's order)."""
    long_pairs = [(en, fr) for _, en, fr in pairs if max(len(en), len(fr)) >= 20]
    bad = sum(not ratio_ok(en, fr) for en, fr in long_pairs)
    return bad >= 2 and bad > MISALIGNED_SHARE * len(long_pairs)


def looks_english(text):
    """At least two English function words and more of them than French ones."""
    words = WORD.findall(text.lower())
    english = sum(w in ENGLISH_WORDS for w in words)
    return english >= 2 and english > sum(w in FRENCH_WORDS for w in words)


def has_words(text):
    """A letter outside URLs: "→ https://www.debian.org/" alone is not text."""
    return any(c.isalpha() for c in URL.sub("", text))


def drop_reason(en, fr, min_words=0):
    """Why a pair is filtered out (module docstring, step 4), or None to keep it;
    ``min_words`` > 0 also drops pairs whose English side is shorter (``--min-words``)."""
    if not has_words(en) or not has_words(fr):
        return "no letter"
    en_words, fr_words = len(en.split()), len(fr.split())
    if en_words < min_words:
        return "too short"
    if (en == fr and en_words >= 3) or looks_english(fr):
        return "untranslated"
    if max(en_words, fr_words) > MAX_WORDS:
        return "too long"
    if not ratio_ok(en, fr):
        return "length ratio"
    return None


def extract_documents(root, sources=SOURCES, stats=None, min_words=0):
    """Read, pair, filter and deduplicate every source: ``[(doc, [(ref, en, fr)])]``.
    ``stats`` (a dict) receives ``{source: Counter}`` of what was kept and dropped;
    ``min_words``: see ``drop_reason``."""
    stats = {} if stats is None else stats
    documents, seen = [], set()
    for source in sources:
        counts = stats.setdefault(source.name, collections.Counter())
        read = page_documents if isinstance(source, Pages) else catalog_documents
        for doc, pairs in read(root, source, counts):
            kept = []
            for ref, en, fr in pairs:
                reason = drop_reason(en, fr, min_words)
                if reason is None and (en, fr) in seen:
                    reason = "duplicate"
                if reason:
                    counts[f"dropped: {reason}"] += 1
                    continue
                seen.add((en, fr))
                kept.append((ref, en, fr))
            counts["pairs"] += len(kept)
            if kept:
                documents.append((doc, kept))
    return documents


# ------------------------------------------------------------------------------ CLI


def select_sources(names=None):
    """The sources named (all by default), in SOURCES' order; an unknown name exits
    with a message that lists the known ones."""
    if not names:
        return SOURCES
    known = {source.name for source in SOURCES}
    unknown = [name for name in names if name not in known]
    if unknown:
        sys.exit(f"error: --sources: unknown {', '.join(unknown)}; known: {', '.join(known)}")
    return tuple(source for source in SOURCES if source.name in names)


def package_patterns(sources=SOURCES):
    """``{package: [tar member patterns]}``: the English and French files each source
    reads, and the package's copyright file. No other language is unpacked."""
    patterns = collections.defaultdict(list)
    for source in sources:
        if isinstance(source, Pages):
            patterns[source.en_package].append(f"./{source.en_dir}/*{source.suffix}")
            patterns[source.fr_package].append(f"./{source.fr_dir}/*{source.suffix}")
        else:
            patterns[source.package].append(f"./{source.mo_dir}/{source.files}")
    for package, found in patterns.items():
        if package not in NO_COPYRIGHT:
            found.append("./" + COPYRIGHT.format(package))
    return dict(patterns)


def summarise(stats, documents, splits):
    """What ``stats.json`` holds: counts per source and per split, and words per line
    per split and per source (all its pairs, before the split)."""
    summary = {
        "sources": {name: dict(sorted(counts.items())) for name, counts in stats.items()},
        "pairs": sum(len(pairs) for _, pairs in documents),
        "splits": {},
        "words": {},
        "words_by_source": {},
    }
    by_source = collections.defaultdict(list)
    for doc, pairs in documents:
        by_source[doc.split(":", 1)[0]].extend(pairs)
    for name, pairs in by_source.items():
        summary["words_by_source"][name] = {
            lang: length_profile([len(pair[column].split()) for pair in pairs])
            for column, lang in ((1, "en"), (2, "fr"))
        }
    for split, pairs in splits.items():
        documents = {document_of(ref) for ref, _, _ in pairs}
        summary["splits"][split] = {"pairs": len(pairs), "documents": len(documents)}
        summary["words"][split] = {
            lang: length_profile([len(pair[column].split()) for pair in pairs])
            for column, lang in ((1, "en"), (2, "fr"))
        }
    return summary


def extract(args):
    started = time.perf_counter()
    stats = {}
    try:
        documents = extract_documents(
            args.root, select_sources(args.sources), stats=stats, min_words=args.min_words
        )
    except (FileNotFoundError, MoError, OSError) as e:
        sys.exit(f"error: {e}")
    splits, docs = split_documents(documents, args.seed, args.valid, args.test)
    splits["train"] = subsample(splits["train"], args.max_train, args.seed)
    write_splits(splits, args.out)
    summary = summarise(stats, documents, splits)
    with open(os.path.join(args.out, "stats.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{summary['pairs']} pairs in {time.perf_counter() - started:.1f} s")
    for name, counts in stats.items():
        print(f"  {name}: {counts['pairs']} pairs")
    for split, counts in summary["splits"].items():
        print(f"  {split}: {counts['pairs']} pairs, {counts['documents']} documents")
    print(f"written to {args.out}")


def main(argv=None):
    # fmt: off
    parser = argparse.ArgumentParser(
        description="Extract the English→French Debian documentation corpus.")
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("packages", help="print 'PACKAGE PATTERN…' per package to unpack")
    p.add_argument("--sources", nargs="*", default=None,
                   help=f"read only these sources (default all): {' '.join(s.name for s in SOURCES)}")
    p = commands.add_parser("extract", help="pair, clean, split and write raw text")
    p.add_argument("--root", required=True,
                   help="folder with one unpacked package per subfolder (ROOT/PACKAGE/usr/…)")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--seed", type=int, default=1,
                   help="seed for the document split and --max-train")
    p.add_argument("--valid", type=int, default=1000,
                   help="pairs held out for validation (whole help pages)")
    p.add_argument("--test", type=int, default=1000,
                   help="pairs held out for test (whole help pages)")
    p.add_argument("--max-train", type=int, default=None,
                   help="keep N training pairs (seeded sample; default all)")
    p.add_argument("--sources", nargs="*", default=None,
                   help="read only these sources (default all; as for packages)")
    p.add_argument("--min-words", type=int, default=0,
                   help="drop pairs whose English side has fewer words (default 0: keep "
                        "all): longer segments, such as the Bible's or WMT's")
    args = parser.parse_args(argv)
    # fmt: on
    if args.command == "packages":
        for package, patterns in package_patterns(select_sources(args.sources)).items():
            print(package, *patterns)
    elif args.command == "extract":
        extract(args)


if __name__ == "__main__":
    main()
