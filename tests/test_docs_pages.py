"""The Debian documentation corpus's pages: the leaf text blocks of a help page in document
order, LibreOffice's switches, Mallard pages, pairing an English page's blocks with the French
page's, sentence splitting, misaligned pages and the filters' drop reasons
(luong_plugin/corpora/debian_docs.py)."""

import pytest

from luong_plugin.corpora import debian_docs

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
