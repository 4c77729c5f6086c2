"""Subword pieces -> words, for word-level alignments (Luong §5.4, Bahdanau §5.2).

Models read and write subword pieces; alignments and their gold standards are
about words. A word is one or more consecutive pieces:

    sentencepiece  a piece starting with U+2581 "▁" starts a word   ▁la ▁cas a -> la casa
    bpe            a piece ending with "@@" continues into the next  la cas@@ a -> la casa
    none           every piece is a word

Attention over pieces becomes attention over words by

    source pieces of a word: **summed**.  a_t is a distribution over source
        positions, so the weight a target step puts on a word is the total weight
        on its pieces; rows still sum to 1 and a word is not penalised for being
        split into many pieces (a mean would favour short words).
    target pieces of a word: **averaged**.  each piece's row is a distribution;
        their mean is the word's distribution (a sum would weight long words up).

The end-of-sentence token stays a word of its own, last on both axes. The hard
alignment is the paper's: for each target word, the source word with the
highest weight, the source EOS excluded; the target EOS gets no link. Links are
written in Pharaoh format ``i-j`` (0-based source word i, target word j), as
fast_align and ``fairseq-generate --print-alignment`` do.

Shape legend: T target pieces (+ EOS), S source pieces (+ EOS),
J target words (+ EOS), I source words (+ EOS).
"""

from typing import Iterable, List, Optional, Sequence, Tuple

import numpy as np

SCHEMES = ("auto", "sentencepiece", "bpe", "none")
SPM_SPACE = "\u2581"
BPE_CONTINUATION = "@@"
EOS = "</s>"


def detect_scheme(sentences: Iterable[Sequence[str]]) -> str:
    """``sentencepiece`` if any piece holds "▁", else ``bpe`` if any ends with
    "@@", else ``none``."""
    bpe = False
    for pieces in sentences:
        for piece in pieces:
            if SPM_SPACE in piece:
                return "sentencepiece"
            bpe = bpe or piece.endswith(BPE_CONTINUATION)
    return "bpe" if bpe else "none"


def word_index(pieces: Sequence[str], scheme: str) -> List[int]:
    """The word number of every piece (the first piece always starts word 0)."""
    if scheme not in SCHEMES[1:]:
        raise ValueError(f"--subword {scheme!r}: expected one of {', '.join(SCHEMES[1:])}")
    index, word = [], -1
    continues = False
    for k, piece in enumerate(pieces):
        if scheme == "sentencepiece":
            starts = k == 0 or piece.startswith(SPM_SPACE)
        elif scheme == "bpe":
            starts = not continues
            continues = piece.endswith(BPE_CONTINUATION)
        else:
            starts = True
        word += starts
        index.append(word)
    return index


def words(pieces: Sequence[str], scheme: str) -> List[str]:
    """The words the pieces spell (markers removed)."""
    out: List[str] = []
    for piece, w in zip(pieces, word_index(pieces, scheme)):
        if scheme == "sentencepiece":
            piece = piece.replace(SPM_SPACE, "")
        elif scheme == "bpe" and piece.endswith(BPE_CONTINUATION):
            piece = piece[: -len(BPE_CONTINUATION)]
        if w == len(out):
            out.append(piece)
        else:
            out[w] += piece
    return out


def _membership(index: Sequence[int]) -> np.ndarray:
    """Pieces (+ EOS) x words (+ EOS) 0/1 matrix; EOS is its own last word."""
    n_words = (index[-1] + 1) if index else 0
    full = list(index) + [n_words]
    member = np.zeros((len(full), n_words + 1))  # pieces+1 x words+1
    member[np.arange(len(full)), full] = 1.0
    return member


def merge_attention(
    attention: np.ndarray, src_index: Sequence[int], tgt_index: Sequence[int]
) -> np.ndarray:
    """T x S piece attention (EOS last on both axes) -> J x I word attention:
    summed over a word's source pieces, averaged over its target pieces."""
    attention = np.asarray(attention, dtype=np.float64)
    src_member, tgt_member = _membership(src_index), _membership(tgt_index)
    if attention.shape != (tgt_member.shape[0], src_member.shape[0]):
        raise ValueError(
            f"attention is {attention.shape[0]} x {attention.shape[1]}, expected "
            f"{tgt_member.shape[0]} x {src_member.shape[0]} (pieces + EOS)"
        )
    summed = attention @ src_member  # T x I
    return (tgt_member.T @ summed) / tgt_member.sum(axis=0)[:, None]  # J x I


def merge_positions(
    centers: np.ndarray, src_index: Sequence[int], tgt_index: Sequence[int]
) -> np.ndarray:
    """Local-p's p_t (one per target piece, in source-piece units) -> one per
    target word, in source-word units: piece position p maps linearly between
    the words of the pieces around it; a word's p_t is the mean of its pieces'."""
    full_src = np.array(list(src_index) + [(src_index[-1] + 1) if src_index else 0], float)
    on_words = np.interp(np.asarray(centers, float), np.arange(len(full_src)), full_src)  # T
    tgt_member = _membership(tgt_index)  # T x J
    return (on_words @ tgt_member) / tgt_member.sum(axis=0)  # J


def hard_alignment(word_attention: np.ndarray) -> List[Tuple[int, int]]:
    """(source word, target word) pairs: argmax over source words (EOS excluded)
    for every target word (EOS row excluded)."""
    word_attention = np.asarray(word_attention)
    n_tgt, n_src = word_attention.shape[0] - 1, word_attention.shape[1] - 1
    if n_src == 0:
        return []
    best = word_attention[:n_tgt, :n_src].argmax(axis=1)  # J - 1
    return [(int(i), j) for j, i in enumerate(best)]


def format_pharaoh(links: Iterable[Tuple[int, int]]) -> str:
    return " ".join(f"{i}-{j}" for i, j in links)


def with_eos(tokens: Sequence[str], eos: Optional[str] = EOS) -> List[str]:
    return list(tokens) + [eos]
