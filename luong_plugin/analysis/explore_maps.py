"""The explorer's attention maps in compact form: T x S weights in [0, 1] as one
character per cell (63 levels), the rows of fairseq's ``lstm`` maps put back over
the true source, and the links a map draws between pieces or words."""

from typing import List

import numpy as np

from .words import merge_attention

LEVELS = 63  # a weight w is stored as round(63 w), one character of ALPHABET
ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
UNKNOWN = "?"  # a weight fairseq-generate did not print (fairseq lstm, see above)


def encode_map(matrix: np.ndarray) -> str:
    """T x S weights -> "OFFSET:CHARS" per row, rows joined by spaces; CHARS
    run from the row's first to its last non-zero cell; NaN is UNKNOWN."""
    matrix = np.asarray(matrix, dtype=float)
    q = np.rint(np.clip(np.nan_to_num(matrix, nan=0.0), 0.0, 1.0) * LEVELS).astype(int)
    chars = np.array(list(ALPHABET))[q]
    chars[np.isnan(matrix)] = UNKNOWN
    rows = []
    for row_q, row_chars in zip(q != 0, chars):
        kept = np.nonzero(row_q | (row_chars == UNKNOWN))[0]
        if len(kept) == 0:
            rows.append("0:")
            continue
        lo, hi = kept[0], kept[-1] + 1
        rows.append(f"{lo}:" + "".join(row_chars[lo:hi]))
    return " ".join(rows)


def decode_map(text: str, n_columns: int) -> np.ndarray:
    """The inverse of ``encode_map`` (to 1/126), for tests and readers of the page."""
    rows = []
    for item in text.split(" "):
        offset, _, chars = item.partition(":")
        row = np.zeros(n_columns)
        for k, c in enumerate(chars):
            row[int(offset) + k] = np.nan if c == UNKNOWN else ALPHABET.index(c) / LEVELS
        rows.append(row)
    return np.array(rows)


def right_padded_rows(printed: np.ndarray) -> np.ndarray:
    """fairseq-generate's rows of a fairseq ``lstm`` map -> rows over the true
    source pieces: the P all-zero columns at the end are the shift; the first P
    cells are 1 - the row's sum when P == 1, else unknown (NaN)."""
    printed = np.asarray(printed, dtype=float)
    S = printed.shape[1]
    zero = np.all(printed == 0.0, axis=0)
    n_pad = 0
    while n_pad < S - 1 and zero[S - 1 - n_pad]:
        n_pad += 1
    if n_pad == 0:
        return printed
    rows = np.full_like(printed, np.nan)
    rows[:, n_pad:] = printed[:, : S - n_pad]
    if n_pad == 1:
        rows[:, 0] = np.clip(1.0 - printed.sum(axis=1), 0.0, 1.0)
    return rows


def piece_links(matrix: np.ndarray) -> List[int]:
    """The argmax source piece (EOS excluded) of every target piece (EOS row
    excluded): -1 where unknown cells could hold more than the best known one."""
    matrix = np.asarray(matrix, dtype=float)
    body = matrix[:-1, :-1]
    if body.shape[1] == 0:
        return [-1] * body.shape[0]
    links = []
    for row, full in zip(body, matrix[:-1]):
        unknown = np.isnan(row)
        if unknown.all():
            links.append(-1)
            continue
        best = int(np.nanargmax(row))
        lost = 1.0 - np.nansum(full)  # what the unknown cells hold together
        links.append(-1 if unknown.any() and lost >= row[best] else best)
    return links


def merge_words(attention: np.ndarray, src_index, tgt_index) -> np.ndarray:
    """``merge_attention``, with a word unknown (NaN) where any of its cells is."""
    unknown = np.isnan(attention)
    merged = merge_attention(np.where(unknown, 0.0, attention), src_index, tgt_index)
    if unknown.any():
        merged[merge_attention(unknown.astype(float), src_index, tgt_index) > 0] = np.nan
    return merged
