"""A gettext .mo file written byte by byte, for the tests of luong_plugin/corpora/mo.py
and of the Debian documentation corpus, which reads the catalogs it holds."""

import struct

from luong_plugin.corpora import mo


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
