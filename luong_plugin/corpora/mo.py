"""gettext message catalogs (``.mo``) as (English, translation) pairs.

The binary format (GNU gettext manual, "The Format of GNU MO Files"): a header of
seven 32-bit words in the file's byte order, which the magic number 0x950412de
tells (little or big endian)::

    magic, revision, N (strings), O (offset of the msgid table),
    T (offset of the msgstr table), S (hash table size), H (hash table offset)

then two tables of N (length, offset) pairs, one for the msgids and one for the
msgstrs, each string NUL-terminated at its offset. A msgid may carry a context
before ``\\x04`` (``"Operator\\x04Save"``) and plural forms after ``\\x00``
(``"%d file\\x00%d files"``, its msgstr ``"form 0\\x00form 1\\x00…"``): the singular
and form 0 are taken. The entry with the empty msgid is the catalog's header,
which names its charset.

UI strings then go through ``clean_ui_pair``:

1. Placeholders. A pair with a format placeholder on either side is dropped, not
   stripped: ``Your %s destroyed the %s in %s.`` without its arguments is not a
   sentence on either side. Dropped: printf conversions (``%s``, ``%3d``, ``%.2f``,
   ``%1$s``, ``%%``), ``%(name)s``, LibreOffice's numbered and named arguments
   (``%1``, ``$(ARG1)``, ``%PAGECOUNT``), and brace fields (``{0}``, ``{}``,
   ``{name}``). The product name is the exception: ``%PRODUCTNAME`` (and the help's
   ``$[officename]``) is replaced by "LibreOffice", as LibreOffice does at run time.
2. Markup. Tags (``<b>``, ``<p class=…>``) are removed, keeping their content, and
   entities (``&amp;``) unescaped; a string that is nothing but a tag
   (``<None>``) is left empty and dropped.
3. Accelerators. The mnemonic marker of the catalog's toolkit (``_`` in GTK and
   LibreOffice's .ui strings, ``~`` in LibreOffice's older resources, ``&`` in Qt)
   is removed where it stands once, before a letter or digit; a side with two or
   more ``_`` or ``~`` (``Automatic _underline_``) is more likely an identifier or
   markup than a label, and the pair is dropped; a ``&`` before a space is text
   ("Black & White"). Catalogs with no mnemonics (Blender) pass no marker, so their
   underscores are left alone (``use_nodes``).
4. Freeciv's ``?qualifier:`` prefixes (``?female:Mayor %s``, ``?plural:Silesians``),
   which only disambiguate the msgid, are cut.
5. Whitespace (newlines, no-break spaces) is collapsed to single spaces.
"""

import html
import re
import struct
from typing import NamedTuple

MAGIC = 0x950412DE
CONTEXT_SEP = "\x04"
PLURAL_SEP = "\x00"
PRODUCT_NAME = "LibreOffice"

PLACEHOLDER = re.compile(
    r"%%"
    r"|%\d+\$"  # positional printf: %1$s
    r"|%\([\w.-]+\)"  # Python: %(name)s
    r"|%[-+#0']*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|ll|[hlLqjzt])?[diouxXeEfFgGcsrpaAn]"
    r"|%\d+"  # LibreOffice: %1
    r"|%[A-Z]\w+"  # LibreOffice: %PAGECOUNT, %Name
    r"|\$\(\w+\)"  # LibreOffice: $(ARG1)
    r"|\{\w*(?:[:!][^{}]*)?\}"  # str.format: {0} {} {name} {0:.2f}
)
PRODUCT = re.compile(r"%PRODUCTNAME|\$\[officename\]")
TAG = re.compile(r"</?[A-Za-z][\w:-]*(?:\s[^<>]*)?/?>")
ENTITY = re.compile(r"&(?:#\d+|#x[0-9A-Fa-f]+|[A-Za-z]+);")
QUALIFIER = re.compile(r"^\?[\w\s-]+:")
SPACES = re.compile(r"\s+")


class CatalogEntry(NamedTuple):
    context: str  # "" when the msgid has none
    msgid: str  # English, the singular form
    msgstr: str  # translation, plural form 0
    plural: bool


class MoError(ValueError):
    """A file that is not a readable gettext catalog."""


def _header_charset(header):
    match = re.search(r"charset=([\w.:-]+)", header)
    return match.group(1) if match else "utf-8"


def read_mo(path):
    """Every translated entry of one ``.mo`` file, header excluded, in file order.

    Untranslated entries (empty msgstr) are left out. Raises ``MoError`` naming the
    file when it is not a gettext catalog or a table points outside it."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise MoError(f"{path}: cannot read: {e.strerror}") from e
    if len(data) < 28:
        raise MoError(f"{path}: not a gettext .mo file ({len(data)} bytes, no header)")
    for order in "<>":
        magic, revision, count, ids_at, strs_at = struct.unpack_from(order + "5I", data)
        if magic == MAGIC:
            break
    else:
        raise MoError(f"{path}: not a gettext .mo file (magic {data[:4].hex()})")
    if revision >> 16 not in (0, 1):
        raise MoError(f"{path}: unsupported .mo revision {revision >> 16}")

    def string(table_at, i):
        at = table_at + 8 * i
        if at + 8 > len(data):
            raise MoError(f"{path}: truncated: string table entry {i} beyond the file")
        length, offset = struct.unpack_from(order + "2I", data, at)
        if offset + length > len(data):
            raise MoError(f"{path}: truncated: string {i} ends beyond the file")
        return data[offset : offset + length]

    raw = [(string(ids_at, i), string(strs_at, i)) for i in range(count)]
    charset = "utf-8"
    for msgid, msgstr in raw:
        if not msgid:
            charset = _header_charset(msgstr.decode("ascii", "replace"))
    entries = []
    for msgid, msgstr in raw:
        if not msgid:
            continue
        try:
            msgid, msgstr = msgid.decode(charset), msgstr.decode(charset)
        except (UnicodeDecodeError, LookupError) as e:
            raise MoError(f"{path}: cannot decode as {charset}: {e}") from e
        context, _, msgid = msgid.rpartition(CONTEXT_SEP)
        singular, _, plural_id = msgid.partition(PLURAL_SEP)
        translation = msgstr.split(PLURAL_SEP)[0]
        if translation:
            entries.append(CatalogEntry(context, singular, translation, bool(plural_id)))
    return entries


def _clean_markup(text):
    text = PRODUCT.sub(PRODUCT_NAME, text)
    if "<" in text:
        text = TAG.sub(" ", text)
    if "&" in text and ENTITY.search(text):
        text = html.unescape(text)
    return text


def _strip_accelerator(text, markers):
    """``text`` without its mnemonic marker (one before a letter or digit), or None
    when that is ambiguous: two such markers, or a ``_``/``~`` marker with another
    ``_``/``~`` in the string (``Automatic _underline_``). A ``&`` that precedes no
    letter is text ("Black & White")."""
    for marker in markers:
        found = [m.start() for m in re.finditer(re.escape(marker), text)]
        accelerators = [i for i in found if text[i + 1 : i + 2].isalnum()]
        if len(accelerators) > 1 or (accelerators and marker != "&" and len(found) > 1):
            return None
        if accelerators:
            text = text[: accelerators[0]] + text[accelerators[0] + 1 :]
    return text


def clean_ui_string(text, accelerators=""):
    """One catalog string cleaned (see the module docstring); None to drop it."""
    text = QUALIFIER.sub("", text)
    text = _clean_markup(text)
    if PLACEHOLDER.search(text):
        return None
    text = _strip_accelerator(text, accelerators)
    if text is None:
        return None
    return SPACES.sub(" ", text).strip()


def clean_ui_pair(english, french, accelerators=""):
    """``(english, french)`` cleaned, or None when either side is dropped."""
    en = clean_ui_string(english, accelerators)
    fr = clean_ui_string(french, accelerators)
    if not en or not fr:
        return None
    return en, fr
