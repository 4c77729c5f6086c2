"""Help pages in two languages, parallel by path, as aligned text blocks.

The leaf text blocks (p, li, td, title, h1, ...) of an HTML, XHTML or Mallard page in
document order (``BlockParser``, ``page_blocks``), with LibreOffice's switch cases
(``switch_cases``), normalised spaces; two pages' blocks pair when they are as many,
and a pair of blocks splits into sentence pairs only where both sides split into the
same number (``split_sentences``, ``pair_blocks``). Used by debian_docs.py.
"""

import os
import re
from html.parser import HTMLParser

if __package__:
    from luong_plugin.corpora.mo import PRODUCT, PRODUCT_NAME
else:  # imported by debian_docs.py run as a script
    from mo import PRODUCT, PRODUCT_NAME

BLOCK_TAGS = frozenset(
    "p li td th dt dd title h1 h2 h3 h4 h5 h6 caption figcaption blockquote div table tr "
    "ul ol dl body html section article main form br hr "  # HTML (br: a new line)
    "page item desc subtitle note list terms steps tree quote cite example figure "
    "synopsis links".split()  # Mallard
)
SKIP_TAGS = frozenset(
    "script style noscript pre header footer nav aside svg math screen info comment".split()
)
INLINE_SKIP_TAGS = frozenset("script style noscript svg math".split())
SKIP_CLASSES = frozenset("navheader navfooter docnav".split())  # DocBook, Publican
VOID_TAGS = frozenset("area base br col embed hr img input link meta param source wbr".split())


class BlockParser(HTMLParser):
    """Leaf text blocks of an HTML or Mallard page, in document order.

    LibreOffice's switches (``class="switch"``/``"switchinline"``) hold one hidden
    case per application or system (``class="CALC"``, ``"MAC"`` …) and a class-less
    default, last; the help shows the case of the page's module or system, else the
    default. ``cases`` names the cases to show (``switch_cases``)."""

    def __init__(self, cases=frozenset()):
        super().__init__(convert_charrefs=True)
        self.cases = cases
        self.blocks, self.run = [], []
        self.skipping = None  # [tag, depth] of the skipped subtree we are in
        self.switches = []  # [tag, depth, a case was shown] of the open switches

    def flush(self):
        text = normalise("".join(self.run))
        if text:
            self.blocks.append(text)
        self.run = []

    def _depth(self, stack, tag, step):
        if stack and stack[-1][0] == tag and tag not in VOID_TAGS:
            stack[-1][1] += step
            if not stack[-1][1]:
                stack.pop()

    def _skip(self, tag, attrs):
        classes = set((attrs.get("class") or "").split())
        if tag in SKIP_TAGS or classes & SKIP_CLASSES:
            return True
        if "hidden" in attrs:
            if not self.switches:
                return True
            switch = self.switches[-1]  # a case of the innermost switch
            if not classes:
                return switch[2]  # the default, unless a case was shown
            shown = bool(classes & self.cases) and not switch[2]
            switch[2] = switch[2] or shown
            return not shown
        if classes & {"switch", "switchinline"} and tag not in VOID_TAGS:
            self.switches.append([tag, 0, False])  # counted below with its own tag
        return False

    def handle_starttag(self, tag, attrs):
        if self.skipping:
            self._depth([self.skipping], tag, 1)
            self._depth(self.switches, tag, 1)
            return
        if self._skip(tag, dict(attrs)) and tag not in VOID_TAGS:
            if tag in BLOCK_TAGS or tag in SKIP_TAGS - INLINE_SKIP_TAGS:
                self.flush()  # a skipped span leaves its sentence whole
            self.skipping = [tag, 1]
        elif tag in BLOCK_TAGS:
            self.flush()
        self._depth(self.switches, tag, 1)

    def handle_startendtag(self, tag, attrs):
        if not self.skipping and tag in BLOCK_TAGS:
            self.flush()

    def handle_endtag(self, tag):
        self._depth(self.switches, tag, -1)
        if self.skipping:
            stack = [self.skipping]
            self._depth(stack, tag, -1)
            self.skipping = stack[0] if stack else None
        elif tag in BLOCK_TAGS:
            self.flush()

    def handle_data(self, data):
        if not self.skipping:
            self.run.append(data)

    def close(self):
        super().close()
        self.flush()


def page_blocks(text, cases=frozenset()):
    """The leaf text blocks of one page's markup (see the module docstring)."""
    parser = BlockParser(cases)
    parser.feed(text)
    parser.close()
    return parser.blocks


# LibreOffice help modules (text/MODULE/…) and the switch case each shows; Debian
# runs the UNIX case of system switches.
MODULE_CASES = {
    "scalc": "CALC", "swriter": "WRITER", "simpress": "IMPRESS", "sdraw": "DRAW",
    "schart": "CHART", "smath": "MATH", "sdatabase": "BASE", "sbasic": "BASIC",
}  # fmt: skip


def switch_cases(rel):
    """The switch cases a page shows: ``"text/scalc/01/x.html"`` → {UNIX, CALC}."""
    parts = rel.split(os.sep)
    module = MODULE_CASES.get(parts[1]) if len(parts) > 2 and parts[0] == "text" else None
    return frozenset({"UNIX", module} - {None})


def read_page(path, cases=frozenset()):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return page_blocks(f.read(), cases)
    except OSError as e:
        raise OSError(f"{path}: cannot read: {e.strerror}") from e


INVISIBLE = re.compile("[\u00ad\u200b\u200c\u200d\ufeff]")
SPACES = re.compile(r"\s+")  # \s includes U+00A0 and U+202F


def normalise(text):
    text = PRODUCT.sub(PRODUCT_NAME, INVISIBLE.sub("", text))
    return SPACES.sub(" ", text).strip()


# Words ending in "." that do not end a sentence (English and French).
ABBREVIATIONS = frozenset(
    "e.g i.e etc vs cf fig figs no nos p pp ex env resp approx dr mr mrs ms st vol ch "
    "sect éd ed av apr mm mme mlle".split()
)
SENTENCE_END = re.compile(r"""[.!?…]+["”»’)\]]*\s+(?=["“«(\[]?[A-ZÀ-ÖØ-Þ0-9])""")


def split_sentences(text):
    """Split at ``. ! ? …`` (and closing quotes) followed by a space and a capital or
    digit, except after an abbreviation or a single-letter initial."""
    sentences, start = [], 0
    for match in SENTENCE_END.finditer(text):
        word = text[start : match.start()].rsplit(" ", 1)[-1].lower()
        if word in ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
            continue
        sentences.append(text[start : match.end()].strip())
        start = match.end()
    sentences.append(text[start:].strip())
    return [s for s in sentences if s]


def pair_blocks(en_blocks, fr_blocks):
    """Block pairs of two pages, each split into sentence pairs where both sides agree
    on the count; ``None`` when the pages have a different number of blocks. Returns
    ``[(index, en, fr)]`` with index ``"7"`` for a whole block, ``"7.2"`` for its
    third sentence."""
    if len(en_blocks) != len(fr_blocks):
        return None
    pairs = []
    for i, (en, fr) in enumerate(zip(en_blocks, fr_blocks)):
        en_sents, fr_sents = split_sentences(en), split_sentences(fr)
        if len(en_sents) > 1 and len(en_sents) == len(fr_sents):
            pairs.extend((f"{i}.{j}", e, f) for j, (e, f) in enumerate(zip(en_sents, fr_sents)))
        else:
            pairs.append((str(i), en, fr))
    return pairs
