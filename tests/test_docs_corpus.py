"""The English→French Debian documentation corpus: the .mo reader and catalog
cleaning, page blocks and their pairing, filters, deduplication, the document split,
and one end-to-end run of recipes/docs_en_fr/prepare.sh on the real packages."""

import gettext
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time

import pytest

from luong_plugin.corpora import debian_docs, mo

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ------------------------------------------------------------------- the .mo reader


def write_mo(path, entries, order="<", charset="UTF-8", revision=0):
    """A gettext .mo file holding ``entries`` ({msgid: msgstr}, ``\\x04`` and
    ``\\x00`` already in place) and a header naming ``charset``; no hash table."""
    header = f"Content-Type: text/plain; charset={charset}\n"
    items = sorted({"": header, **entries}.items())
    ids = [k.encode(charset) for k, _ in items]
    strs = [v.encode(charset) for _, v in items]
    n = len(items)
    ids_at, strs_at = 28, 28 + 8 * n
    offset = strs_at + 8 * n
    tables, blob = [[], []], b""
    for table, strings in zip(tables, (ids, strs)):
        for s in strings:
            table.append((len(s), offset + len(blob)))
            blob += s + b"\0"
    data = struct.pack(order + "7I", mo.MAGIC, revision, n, ids_at, strs_at, 0, 0)
    for table in tables:
        for length, at in table:
            data += struct.pack(order + "2I", length, at)
    path.write_bytes(data + blob)
    return path


CATALOG = {
    "Save": "Enregistrer",
    "Operator\x04Open": "Ouvrir",
    "One file\x00%d files": "Un fichier\x00%d fichiers",
    "Untranslated": "",
}


@pytest.mark.parametrize("order", ["<", ">"])
def test_mo_reader_contexts_plurals_and_untranslated(tmp_path, order):
    path = write_mo(tmp_path / "fr.mo", CATALOG, order=order)
    entries = {(e.context, e.msgid): e for e in mo.read_mo(path)}
    assert set(entries) == {("", "Save"), ("Operator", "Open"), ("", "One file")}
    assert entries["", "Save"] == mo.CatalogEntry("", "Save", "Enregistrer", False)
    assert entries["Operator", "Open"].msgstr == "Ouvrir"
    assert entries["", "One file"] == mo.CatalogEntry("", "One file", "Un fichier", True)


def test_mo_reader_agrees_with_the_standard_library(tmp_path):
    path = write_mo(tmp_path / "fr.mo", CATALOG)
    with open(path, "rb") as f:
        catalog = gettext.GNUTranslations(f)
    for e in mo.read_mo(path):
        if e.plural:
            assert catalog.ngettext(e.msgid, "%d files", 1) == e.msgstr
        elif e.context:
            assert catalog.pgettext(e.context, e.msgid) == e.msgstr
        else:
            assert catalog.gettext(e.msgid) == e.msgstr


def test_mo_reader_uses_the_header_charset(tmp_path):
    path = write_mo(tmp_path / "fr.mo", {"Delete": "Supprimer l'élément"}, charset="ISO-8859-1")
    assert mo.read_mo(path)[0].msgstr == "Supprimer l'élément"


@pytest.mark.skipif(not shutil.which("msgfmt"), reason="gettext's msgfmt not installed")
def test_mo_reader_reads_what_msgfmt_writes(tmp_path):
    (tmp_path / "fr.po").write_text(
        'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n'
        '"Plural-Forms: nplurals=2; plural=(n > 1);\\n"\n\n'
        'msgctxt "Operator"\nmsgid "Open"\nmsgstr "Ouvrir"\n\n'
        'msgid "One file"\nmsgid_plural "%d files"\nmsgstr[0] "Un fichier"\n'
        'msgstr[1] "%d fichiers"\n\n'
        'msgid "Not yet"\nmsgstr ""\n',
        encoding="utf-8",
    )
    subprocess.run(["msgfmt", "-o", tmp_path / "fr.mo", tmp_path / "fr.po"], check=True)
    assert mo.read_mo(tmp_path / "fr.mo") == [
        mo.CatalogEntry("", "One file", "Un fichier", True),
        mo.CatalogEntry("Operator", "Open", "Ouvrir", False),
    ]


def test_mo_reader_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.mo"
    bad.write_bytes(b"\x00" * 40)
    with pytest.raises(mo.MoError, match=r"bad\.mo: not a gettext \.mo file"):
        mo.read_mo(bad)
    short = tmp_path / "short.mo"
    short.write_bytes(write_mo(tmp_path / "ok.mo", CATALOG).read_bytes()[:60])
    with pytest.raises(mo.MoError, match=r"short\.mo: truncated"):
        mo.read_mo(short)
    with pytest.raises(mo.MoError, match=r"missing\.mo: cannot read"):
        mo.read_mo(tmp_path / "missing.mo")
    future = write_mo(tmp_path / "future.mo", CATALOG, revision=7 << 16)
    with pytest.raises(mo.MoError, match="unsupported .mo revision 7"):
        mo.read_mo(future)


# ------------------------------------------------------------------ catalog strings


@pytest.mark.parametrize(
    "english",
    [
        "Your %s destroyed the %s.",
        "Zoom: %.2f",
        "%3d units",
        "Path: %r",
        "%1$s of %2$s",
        "Hello %(name)s",
        "Normal (%1)",
        "Set Heading $(ARG1)",
        "The extension '%Name' failed",
        "Axis {0}",
        "Clamping {}-Axis",
        "Done: 50%%",
    ],
)
def test_pairs_with_placeholders_are_dropped(english):
    assert mo.clean_ui_pair(english, "traduction", "_~") is None


def test_percent_signs_that_are_not_placeholders_stay():
    assert mo.clean_ui_pair("Zoom 100% done", "Zoom 100 % de fait") == (
        "Zoom 100% done",
        "Zoom 100 % de fait",
    )


def test_accelerators_markup_product_name_and_qualifiers():
    assert mo.clean_ui_pair("Pa_ge height:", "_Hauteur de la page", "_~") == (
        "Page height:",
        "Hauteur de la page",
    )
    assert mo.clean_ui_pair("~Close", "~Fermer", "_~") == ("Close", "Fermer")
    assert mo.clean_ui_pair("&Airlift", "&Pont aérien", "_&") == ("Airlift", "Pont aérien")
    assert mo.clean_ui_pair("Black & White", "Noir & blanc", "_&") == (
        "Black & White",
        "Noir & blanc",
    )
    assert mo.clean_ui_pair("Automatic _underline_", "Soulignage_ automatique", "_~") is None
    # no markers declared: identifiers keep their underscores
    assert mo.clean_ui_pair("use_nodes", "use_nodes") == ("use_nodes", "use_nodes")
    assert mo.clean_ui_pair("<b>Bold</b> &amp; more", "<b>Gras</b> &amp; plus") == (
        "Bold & more",
        "Gras & plus",
    )
    assert mo.clean_ui_pair("<None>", "<Aucun>") is None
    assert mo.clean_ui_pair("%PRODUCTNAME Calc", "%PRODUCTNAME Calc") == (
        "LibreOffice Calc",
        "LibreOffice Calc",
    )
    assert mo.clean_ui_pair("?plural:Silesians", "Silésiens") == ("Silesians", "Silésiens")
    assert mo.clean_ui_pair("Two\n  lines", "Deux\u00a0lignes") == ("Two lines", "Deux lignes")


# ----------------------------------------------------------------------- page blocks

EN_PAGE = """<html><head><title>Crop</title><script>var x = "<p>no</p>";</script></head>
<body><header><p>LibreOffice Help</p></header>
<div class="navheader"><table><tr><td>Prev</td><td>Next</td></tr></table></div>
<h1>Crop <a href="#">tool</a></h1>
<p>The <span class="emph">Crop</span> tool clips an image. It works on all layers.</p>
<ul><li>First item <ul><li>nested item</li></ul> tail</li></ul>
<pre>crop --all</pre>
<p>Choose <span class="switchinline"><span hidden="true" class="MAC">LibreOffice -
Preferences</span><span hidden="true">Tools - Options</span></span>.</p>
<table><tr><td>Width</td><td>Height<br>of the area</td></tr></table>
</body></html>"""

FR_PAGE = """<html><head><title>Découper</title></head>
<body><header><p>Aide de LibreOffice</p></header>
<div class="navheader"><table><tr><td>Préc.</td><td>Suiv.</td></tr></table></div>
<h1>Outil <a href="#">Découper</a></h1>
<p>L'outil <span class="emph">Découper</span> rogne une image. Il agit sur tous les calques.</p>
<ul><li>Premier élément <ul><li>élément imbriqué</li></ul> fin</li></ul>
<pre>crop --all</pre>
<p>Choisissez <span class="switchinline"><span hidden="true" class="MAC">LibreOffice -
Préférences</span><span hidden="true">Outils - Options</span></span>.</p>
<table><tr><td>Largeur</td><td>Hauteur<br>de la zone</td></tr></table>
</body></html>"""


def test_page_blocks_are_leaf_text_in_document_order():
    assert debian_docs.page_blocks(EN_PAGE) == [
        "Crop",
        "Crop tool",
        "The Crop tool clips an image. It works on all layers.",
        "First item",
        "nested item",
        "tail",
        "Choose Tools - Options.",
        "Width",
        "Height",
        "of the area",
    ]


SWITCH = (
    '<p>Choose <span class="switchinline"><span hidden="true" class="MAC">Preferences'
    '</span><span hidden="true" class="CALC">Calc - Options</span><span hidden="true">'
    "Tools - Options</span></span> now.</p>"
)


@pytest.mark.parametrize(
    "rel, text",
    [
        ("text/scalc/01/x.html", "Choose Calc - Options now."),
        ("text/swriter/01/x.html", "Choose Tools - Options now."),
        ("text/shared/x.html", "Choose Tools - Options now."),
    ],
)
def test_libreoffice_switches_show_the_case_of_the_page_module(rel, text):
    cases = debian_docs.switch_cases(rel)
    assert debian_docs.page_blocks(SWITCH, cases) == [text]


def test_mallard_pages_skip_info_and_comments():
    page = """<page xmlns="http://projectmallard.org/1.0/" id="mouse">
    <info><credit type="author"><name>Shaun</name></credit><desc>Short</desc></info>
    <title>Mouse</title><comment><p>Editor's note</p></comment>
    <steps><item><p>Open <gui>Settings</gui>.</p></item></steps>
    <screen>gsettings set x</screen></page>"""
    assert debian_docs.page_blocks(page) == ["Mouse", "Open Settings."]


def test_equal_block_counts_pair_and_split_where_sentences_agree():
    pairs = debian_docs.pair_blocks(
        debian_docs.page_blocks(EN_PAGE), debian_docs.page_blocks(FR_PAGE)
    )
    assert ("2.0", "The Crop tool clips an image.", "L'outil Découper rogne une image.") in pairs
    assert ("2.1", "It works on all layers.", "Il agit sur tous les calques.") in pairs
    assert ("6", "Choose Tools - Options.", "Choisissez Outils - Options.") in pairs
    assert len(pairs) == 11


def test_unequal_block_counts_are_not_paired():
    assert debian_docs.pair_blocks(["A.", "B."], ["A."]) is None


def test_a_block_is_split_only_where_both_sides_agree():
    en = ["Click OK. The dialog closes. Done."]
    fr = ["Cliquez sur OK, puis la boîte se ferme. Terminé."]
    assert debian_docs.pair_blocks(en, fr) == [("0", en[0], fr[0])]


@pytest.mark.parametrize(
    "text, sentences",
    [
        ("Save it. Then quit!", ["Save it.", "Then quit!"]),
        ("Voulez-vous continuer\u00a0? Oui.", ["Voulez-vous continuer\u00a0?", "Oui."]),
        ("Use e.g. Gimp. It works.", ["Use e.g. Gimp.", "It works."]),
        ("Written by J. Smith in 2004.", ["Written by J. Smith in 2004."]),
        ("Version 7.4 is out. See “Notes.” Next", ["Version 7.4 is out.", "See “Notes.”", "Next"]),
        ("file.txt and www.debian.org stay", ["file.txt and www.debian.org stay"]),
    ],
)
def test_split_sentences(text, sentences):
    assert debian_docs.split_sentences(text) == sentences


def test_misaligned_pages_are_detected_by_their_length_ratios():
    aligned = [
        (str(i), "A sentence of some length here.", "Une phrase d'une certaine longueur ici.")
        for i in range(10)
    ]
    shifted = aligned[:7] + [
        (str(i), "Short one.", "Une phrase bien plus longue que sa source anglaise, de loin.")
        for i in range(3)
    ]
    assert not debian_docs.misaligned(aligned)
    assert debian_docs.misaligned(shifted)


@pytest.mark.parametrize(
    "en, fr, reason",
    [
        ("12.6.1.", "12.6.1.", "no letter"),
        ("→ https://www.debian.org/", "→ https://www.debian.org/", "no letter"),
        ("See https://www.debian.org/", "Voir https://www.debian.org/", None),
        ("Copy the file to the folder", "Copy the file to the folder", "untranslated"),
        ("Click the button", "Click the button to open it", "untranslated"),
        ("Go", "Aller", None),
        ("Section", "Section", None),
        (
            "Open the file",
            "Ouvrir le fichier, puis le fermer et recommencer encore une fois",
            "length ratio",
        ),
        ("word " * 151, "mot " * 151, "too long"),
    ],
)
def test_drop_reasons(en, fr, reason):
    assert debian_docs.drop_reason(en.strip(), fr.strip()) == reason


# -------------------------------------------------------- sources, dedup and splits


def make_root(tmp_path):
    """Two packages: a help tree with three English/French page pairs (one with
    unequal blocks) and one catalog, repeating strings across both."""
    root = tmp_path / "root"
    pages = {
        "a.html": (
            "<p>Open the file.</p><p>Save the file.</p>",
            "<p>Ouvrez le fichier.</p><p>Enregistrez le fichier.</p>",
        ),
        "sub/b.html": (
            "<p>Open the file.</p><p>Close the window.</p>",
            "<p>Ouvrez le fichier.</p><p>Fermez la fenêtre.</p>",
        ),
        "c.html": ("<p>One.</p><p>Two.</p>", "<p>Un et deux.</p>"),
    }
    for rel, (en, fr) in pages.items():
        for lang, text in (("en", en), ("fr", fr)):
            path = root / "help-pkg" / "help" / lang / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"<html><body>{text}</body></html>", encoding="utf-8")
    mo_dir = root / "ui-pkg" / "locale"
    mo_dir.mkdir(parents=True)
    write_mo(
        mo_dir / "app.mo",
        {
            "Save the file.": "Enregistrez le fichier.",
            "_Quit": "_Quitter",
            "%s saved": "%s enregistré",
        },
    )
    sources = (
        debian_docs.Pages("help", "help-pkg", "help-pkg", "help/en", "help/fr", ".html"),
        debian_docs.Catalogs("ui", "ui-pkg", "locale", "*.mo", "_"),
    )
    return root, sources


def test_extract_documents_pairs_pages_and_catalogs_and_deduplicates(tmp_path):
    root, sources = make_root(tmp_path)
    stats = {}
    documents = dict(debian_docs.extract_documents(root, sources, stats))
    assert documents == {
        "help:a.html": [
            ("help:a.html#0", "Open the file.", "Ouvrez le fichier."),
            ("help:a.html#1", "Save the file.", "Enregistrez le fichier."),
        ],
        "help:sub/b.html": [("help:sub/b.html#1", "Close the window.", "Fermez la fenêtre.")],
        "ui:app.mo": [("ui:app.mo#2", "Quit", "Quitter")],
    }
    assert stats["help"]["pages with unequal blocks"] == 1
    assert stats["help"]["dropped: duplicate"] == 1
    assert stats["ui"]["dropped: duplicate"] == 1
    assert stats["ui"]["catalog strings with placeholders or markup only"] == 1


def test_missing_package_names_it_and_how_to_fetch_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"help-pkg is not unpacked.*apt-get download"):
        debian_docs.extract_documents(tmp_path, make_root(tmp_path)[1])
    with pytest.raises(SystemExit, match="libreoffice-help-en-us is not unpacked"):
        debian_docs.main(["extract", "--root", str(tmp_path), "--out", str(tmp_path / "o")])


def fake_documents(n_docs=40, size=5, catalog=300):
    documents = [
        (
            f"help:p{d}.html",
            [(f"help:p{d}.html#{i}", f"English {d} {i}", f"Français {d} {i}") for i in range(size)],
        )
        for d in range(n_docs)
    ]
    documents.append(
        ("ui:app.mo", [(f"ui:app.mo#{i}", f"Label {i}", f"Libellé {i}") for i in range(catalog)])
    )
    return documents


def test_held_out_splits_are_whole_documents():
    splits, docs = debian_docs.split_documents(fake_documents(), seed=3, n_valid=50, n_test=60)
    assert len(splits["valid"]) == 50 and len(splits["test"]) == 60
    for split, pairs in splits.items():
        assert {debian_docs.document_of(ref) for ref, _, _ in pairs} == docs[split]
    assert not docs["train"] & docs["valid"] and not docs["train"] & docs["test"]
    assert not docs["valid"] & docs["test"]
    assert "ui:app.mo" in docs["train"]  # catalogs only train
    for split in ("valid", "test"):  # every pair of a held-out page is held out
        for doc in docs[split]:
            assert sum(debian_docs.document_of(r) == doc for r, _, _ in splits[split]) == 5
    again, _ = debian_docs.split_documents(fake_documents(), seed=3, n_valid=50, n_test=60)
    assert again == splits
    other, _ = debian_docs.split_documents(fake_documents(), seed=4, n_valid=50, n_test=60)
    assert other["test"] != splits["test"]


def test_held_out_sentences_seen_in_training_are_dropped():
    documents = [
        (
            "help:a.html",
            [("help:a.html#0", "Save", "Enregistrer"), ("help:a.html#1", "Quit", "Quitter")],
        ),
        ("ui:app.mo", [("ui:app.mo#0", "Save", "Sauvegarder")]),
    ]
    splits, _ = debian_docs.split_documents(documents, seed=1, n_valid=20, n_test=0)
    assert [en for _, en, _ in splits["valid"]] == ["Quit"]


def test_large_documents_are_not_held_out():
    documents = [("help:big.html", [(f"help:big.html#{i}", f"E{i}", f"F{i}") for i in range(20)])]
    splits, _ = debian_docs.split_documents(documents, seed=1, n_valid=100, n_test=100)
    assert len(splits["train"]) == 20


def test_length_profile():
    profile = debian_docs.length_profile(list(range(1, 101)))
    assert profile == {
        "lines": 100,
        "median": 50.5,
        "p90": 91,
        "p99": 100,
        "mean": 50.5,
        "max": 100,
    }
    assert debian_docs.length_profile([]) == {"lines": 0}


def test_packages_unpack_english_and_french_only():
    patterns = debian_docs.package_patterns()
    assert set(patterns) == {
        p
        for s in debian_docs.SOURCES
        for p in (
            (s.en_package, s.fr_package) if isinstance(s, debian_docs.Pages) else (s.package,)
        )
    }
    for package, found in patterns.items():
        for pattern in found:
            assert pattern.startswith("./usr/")
            assert not re.search(r"/de([-_][A-Z]{2})?/", pattern)  # English and French only
            assert pattern.count("*") <= 1


# ----------------------------------------------------------------------- end to end


def count_lines(path):
    with open(path, encoding="utf-8") as f:
        return sum(1 for _ in f)


def test_prepare_sh_without_a_registry_names_the_package(tmp_path):
    """apt-get (here a stand-in that fails as it does offline) is retried once after
    an update, then prepare.sh stops, naming the package; the cache is left clean."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, script in (
        ("apt-get", 'echo "E: Unable to locate package $2" >&2; exit 100'),
        ("sudo", '"$@"'),
    ):
        (bin_dir / tool).write_text(f"#!/bin/sh\n{script}\n")
        (bin_dir / tool).chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", PYTHON=sys.executable)
    cmd = ["bash", "recipes/docs_en_fr/prepare.sh", "--out", tmp_path / "out"]
    proc = subprocess.run(
        [*cmd, "--debs", tmp_path / "debs"], cwd=REPO, capture_output=True, text=True, env=env
    )
    assert proc.returncode == 1
    assert "cannot fetch Debian package libreoffice-help-en-us" in proc.stderr
    assert "Unable to locate package libreoffice-help-en-us" in proc.stderr
    assert "updating the package lists once" in proc.stdout
    assert os.listdir(tmp_path / "debs") == ["unpacked"]
    assert not (tmp_path / "out" / "raw").exists()


@pytest.mark.slow
def test_prepare_sh_on_the_real_packages(tmp_path):
    """prepare.sh fetches the real .deb files into the shared cache (data/debs, or
    DEB_CACHE) on its first run: here LibreOffice's three (about 6 MB: its help pages
    and catalogs), so that a fresh machine downloads little; the other sources' readers
    are tested on built pages and catalogs above."""
    out = tmp_path / "docs"
    cmd = [
        "bash",
        "recipes/docs_en_fr/prepare.sh",
        "--sources",
        "libreoffice-help libreoffice-ui",
        "--out",
        out,
        "--max-train",
        "2000",
        "--valid",
        "60",
        "--test",
        "30",
        "--vocab",
        "1000",
    ]
    env = dict(os.environ, PYTHON=sys.executable)
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        pytest.fail(
            "recipes/docs_en_fr/prepare.sh failed (it needs apt-get to reach a Debian "
            f"package registry the first time):\n{proc.stderr[-3000:]}\n{proc.stdout[-2000:]}"
        )
    elapsed = time.perf_counter() - started
    counts = {"train": 2000, "valid": 60, "test": 30}
    docs = {}
    for split, limit in counts.items():
        n = count_lines(out / "raw" / f"refs.{split}")
        assert 0 < n <= limit and (split != "train" or n == limit)
        for lang in ("en", "fr"):
            assert count_lines(out / "raw" / f"{split}.{lang}") == n
            assert count_lines(out / "spm" / f"{split}.{lang}") == n
            for ext in ("bin", "idx"):
                assert (out / "bin" / f"{split}.en-fr.{lang}.{ext}").stat().st_size > 0
        with open(out / "raw" / f"refs.{split}", encoding="utf-8") as f:
            docs[split] = {debian_docs.document_of(line.strip()) for line in f}
    assert not docs["train"] & docs["valid"] and not docs["train"] & docs["test"]
    assert not docs["valid"] & docs["test"]
    lengths = json.loads((out / "lengths.json").read_text())
    assert lengths["pieces"]["test"]["fr"]["lines"] == count_lines(out / "raw" / "test.fr")
    stats = json.loads((out / "raw" / "stats.json").read_text())
    assert set(stats["sources"]) == {"libreoffice-help", "libreoffice-ui"}
    assert all(counts["pairs"] > 0 for counts in stats["sources"].values())
    assert not list(out.glob("**/*.tmp*"))
    # a second run rebuilds nothing
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[extract] up to date, skipped" in proc.stdout
    assert "[fairseq-preprocess] up to date, skipped" in proc.stdout
    print(f"prepare.sh: {elapsed:.0f} s")


def test_an_unknown_source_is_refused_with_the_known_ones(capsys):
    with pytest.raises(SystemExit) as exit_:
        debian_docs.main(["packages", "--sources", "libreoffice-help", "wesnoth"])
    assert "--sources: unknown wesnoth; known: " in str(exit_.value)
    assert "gimp-help" in str(exit_.value)


def test_packages_of_some_sources_only():
    selected = debian_docs.select_sources(["libreoffice-help", "libreoffice-ui"])
    packages = debian_docs.package_patterns(selected)
    assert set(packages) == {"libreoffice-help-en-us", "libreoffice-help-fr", "libreoffice-l10n-fr"}
