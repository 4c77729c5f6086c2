"""luong_plugin/corpora/mo.py, the Debian documentation corpus's catalogs: the .mo reader
(contexts, plurals, untranslated entries, both byte orders and the header's charset, against
the standard library's reader and gettext's own msgfmt, and its errors), then the cleaning of
a catalog's strings into sentence pairs."""

import gettext
import shutil
import subprocess

import pytest
from mo_files import write_mo

from luong_plugin.corpora import mo

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
