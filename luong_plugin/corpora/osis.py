"""The Bible corpus's text cleaning (bible.py's steps 1-3): OSIS markup to plain
text, the RV1909 epistle subscriptions, and the recasing of RV1909's capitalised
chapter openings. bible.py's docstring says what each step keeps and drops."""

import collections
import html
import re

# -------------------------------------------------------------------------- markup

_BOOK_END = re.compile(r'<div\b(?=[^>]*\beID=)(?=[^>]*\btype="book")[^>]*/>.*', re.DOTALL)
_NOTE = re.compile(r"<note\b[^>]*>.*?</note>", re.DOTALL)
_SPEAKER = re.compile(r"<speaker\b[^>]*>.*?</speaker>", re.DOTALL)
_TITLE = re.compile(r"<title\b([^>]*)>(.*?)</title>", re.DOTALL)
_CANONICAL = re.compile(r'\bcanonical="true"')
# Phrase-level tags inside running text: drop the tag, keep the content, add no gap.
_INLINE_TAG = re.compile(
    r"</?(?:w|seg|name|hi|foreign|divineName|rdg|catchWord|reference|abbr|"
    r"inscription|mentioned)\b[^>]*>"
)
_TRANS_CHANGE = re.compile(  # (?<!\w): try each preceding word once, not per letter
    r"(?<!\w)(\w*)<transChange\b[^>]*>(.*?)</transChange>(?=(\w?))", re.DOTALL
)
_ANY_TAG = re.compile(r"<[^>]*>")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?])")

_ENCLITIC = re.compile(r"(?:me|te|se|nos|os|lo|la|los|las|le|les)+")
_ACCENT = re.compile(r"[áéíóú]")
_SHORT_VERBS = frozenset({"da", "di", "dí", "vi", "he"})  # dalo, diles, vilo, helo
# Accented words before a supplied pronoun that are not verbs ("cuánto nos ayudó",
# "Jehová los acose", "Josué los circuncidó"): every such case in RV1909.
_NOT_VERBS = frozenset({"cuánto", "jehová", "josué"})


def _is_enclitic(word, pronoun):
    """Whether RV1909 writes ``pronoun`` attached to the verb form ``word``
    (sácalo, díjole, Dadme, condenaros, haciéndoles)."""
    word = word.lower()
    if not word or word in _NOT_VERBS or not _ENCLITIC.fullmatch(pronoun):
        return False
    return bool(_ACCENT.search(word)) or word[-1] in "rdz" or word in _SHORT_VERBS


def _space_trans_change(match):
    before, body, after = match.group(1), match.group(2), match.group(3)
    left = "" if not before or _is_enclitic(before, body) else " "
    right = " " if after else ""
    return f"{before}{left}{body}{right}"


def _keep_canonical_title(match):
    return f" {match.group(2)} " if _CANONICAL.search(match.group(1)) else " "


def clean_osis(raw):
    """One verse of raw OSIS XML → plain text (see the module docstring, step 1-2)."""
    text = _BOOK_END.sub(" ", raw) if 'type="book"' in raw else raw
    if "<note" in text:
        text = _NOTE.sub(" ", text)
    if "<speaker" in text:
        text = _SPEAKER.sub(" ", text)
    if "<title" in text:
        text = _TITLE.sub(_keep_canonical_title, text)
    text = _INLINE_TAG.sub("", text)  # first, so transChange sees its neighbours
    if "<transChange" in text:
        text = _TRANS_CHANGE.sub(_space_trans_change, text)
    text = _ANY_TAG.sub(" ", text)
    if "&" in text:
        text = html.unescape(text)
    text = " ".join(text.split())
    return _SPACE_BEFORE_PUNCT.sub(r"\1", text)


_SUBSCRIPTION = re.compile(
    r"^(?P<body>.*\bAmén\.)\s+(?P<subscription>[^.]*\b(?:escrita|enviada)\b.*)$",
    re.IGNORECASE | re.DOTALL,
)


def strip_subscription(text):
    """Cut an epistle subscription ("… Amén. Escrita de Roma á los Efesios por
    Tichîco.") from the last verse of a book; other text is returned unchanged."""
    match = _SUBSCRIPTION.match(text)
    return match.group("body") if match else text


# ------------------------------------------------------------------ capitalisation

_WORD = re.compile(r"\w+")
_TWO_CAPITALS = re.compile(r"[A-Z\u00c0-\u00de]{2}")  # fast pre-check (Latin-1)
_SENTENCE_END = re.compile(r"[.:!?]")
# The Ps 119 acrostic headings ("ALEPH.", "BETH ¿Con qué…"): WEB keeps them as
# canonical titles in capitals too, so they are left as they are.
HEBREW_LETTERS = frozenset(
    "ALEPH BETH GIMEL DALETH HE VAU ZAIN CHETH TETH JOD CAPH LAMED MEM NUN SAMECH "
    "AIN PE TZADDI COPH RESH SIN SCHIN TAU".split()
)


def casing_table(texts):
    """``{lowercased word: its usual form}`` from mid-sentence occurrences, used to
    recase a capitalised chapter opening that does not start a sentence."""
    counts = collections.Counter()
    for text in texts:
        for sentence in _SENTENCE_END.split(text):
            counts.update(_WORD.findall(sentence)[1:])
    lower, title = collections.Counter(), collections.Counter()
    for word, n in counts.items():
        if word.islower():
            lower[word] += n
        elif word.istitle():
            title[word.lower()] += n
    return {w: (w.capitalize() if title[w] > lower[w] else w) for w in lower | title}


def normalise_capitals(text, chapter_start, casing=None):
    """Recase RV1909's capitalised chapter opening.

    The opening is the first word of two or more letters when it is all capitals
    (after leading one-letter words such as "Y"); in a chapter's first verse it may
    also follow a Psalm superscription, so there the first all-capitals word counts.
    Elsewhere (Luke 1:5 "HUBO en los días") the capitals must run straight into
    lower-case text. The run of consecutive all-capitals words is recased: title
    case at a sentence start, else the form given by ``casing`` (title case when
    unknown).
    """
    if not _TWO_CAPITALS.search(text):
        return text
    casing = casing or {}
    words = list(_WORD.finditer(text))
    first = 0
    if (
        words
        and words[0].group() in HEBREW_LETTERS
        and not text[words[0].end() :].lstrip()[:1].islower()
    ):
        first = 1
    opening = first
    while opening < len(words) and len(words[opening].group()) == 1:
        opening += 1
    if opening < len(words) and words[opening].group().isupper():
        start = opening
    elif chapter_start:
        long_caps = [
            i
            for i in range(first, len(words))
            if len(words[i].group()) > 1 and words[i].group().isupper()
        ]
        if not long_caps:
            return text
        start = long_caps[0]
    else:
        return text

    def joined(i):  # words i-1 and i separated by spaces only
        return not text[words[i - 1].end() : words[i].start()].strip()

    while start > first and words[start - 1].group().isupper() and joined(start):
        start -= 1
    end = start + 1
    while end < len(words) and words[end].group().isupper() and joined(end):
        end += 1
    if not chapter_start and not (
        end < len(words) and joined(end) and words[end].group().islower()
    ):
        return text  # "TEKEL: Pesado has sido", "JAH, si mirares": not an opening

    pieces, cursor = [], 0
    for i in range(start, end):
        match = words[i]
        word = match.group()
        gap = text[words[i - 1].end() : match.start()] if i > 0 else "."
        if _SENTENCE_END.search(gap) or i == 0:
            new = word.capitalize()
        else:
            new = casing.get(word.lower(), word.capitalize())
        pieces += [text[cursor : match.start()], new]
        cursor = match.end()
    pieces.append(text[cursor:])
    return "".join(pieces)
