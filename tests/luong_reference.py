"""A slow, loop-based reference of Luong, Pham & Manning (2015), "Effective
Approaches to Attention-based Neural Machine Translation" (arXiv:1508.04025).

It reads only the model's parameter tensors, by name, and recomputes the
paper's equations one sentence and one time step at a time, in float64, with
its own LSTM cell, scores, windows, softmax and Gaussian. It never calls
``nn.LSTM`` or any module's ``forward``, so it shares no code with the model.

    a_t(s) = softmax_s(score(h_t, h̄_s))                      eq. (7)
    score: dot h_tᵀh̄_s | general h_tᵀW_a h̄_s |
           concat v_aᵀ tanh(W_a [h_t; h̄_s]) | location (W_a h_t)_s   eq. (8)
    c_t    = Σ_s a_t(s) h̄_s                                  §3.1
    h̃_t    = tanh(W_c [c_t; h_t])                            eq. (5)
    p(y_t) = softmax(W_s h̃_t)                                eq. (6)
    local-m: p_t = t; local-p: p_t = S · sigmoid(v_pᵀ tanh(W_p h_t))   eq. (9)
    local:  a_t(s) = align(h_t, h̄_s) · exp(-(s - p_t)² / 2σ²), σ = D/2 eq. (10)
            (the Gaussian for local-p only; align = softmax over the window)
    input feeding (§3.3): the decoder reads [y_{t-1}; h̃_{t-1}], h̃_0 = 0
    Base: p(y_t) = softmax(W_s h_t)

What the paper leaves open is taken from Luong's released code
(lmthang/nmt.matlab), not from this project's modules:
- a source has no end symbol there: the encoder reads the words only
  (reversed offline, ``reverse.py``), attention covers the words only
  (``setAttnParams.m``: numSrcHidVecs = srcMaxLen - 1), and the decoder's first
  input is a start symbol. fairseq appends ``</s>`` to every source: the
  encoder reads it after the words (w_n .. w_1 </s> when reversed), and
  attention skips it; ``attend_eos`` and ``reverse_eos`` are the two
  departures the model offers;
- S is the number of attended positions (the n words); s and t are 0-based
  over them in original order; local-p's mu = scales · (srcLens - 1) + 1 is
  1-based with srcLens - 1 = n (``attnLayerForward.m`` line 106; srcLens
  counts the words and an end symbol never read, ``prepareData.m`` line 23),
  i.e. p_t = n · sigmoid(.) 0-based, and the window is centred on floor(mu)
  (line 19), i.e. floor(p_t); window positions outside the sentence are
  dropped from the softmax (``buildSrcVecs.m`` lines 41-44). With ``attend_eos``
  S counts the ``</s>`` too (S = n + 1): eq. (9) then gives (n + 1) ·
  sigmoid(.), and ``position_scale="luong-code"`` Luong's n · sigmoid(.),
  computed from his variables in ``_luong_code_position``;
- local-m: p_t = t, capped at the last word (``attnLayerForward.m`` lines
  21-23);
- the decoder starts from the encoder's final (h, c) of every layer
  (``lstmCostGrad.m`` line 44). The location score is not in Luong's code
  (``attnOpt`` 1-3 are dot, general and concat, ``trainLSTM.m`` lines 83-87):
  it uses rows 0 .. S - 1 of W_a, the model's own reading of the paper.

Shape legend: T target len, S_b a sentence's real length, E encoder hidden,
H decoder hidden, O attentional hidden (h̃), V vocab, D window half-width.
"""

import math
from dataclasses import dataclass
from typing import List, Optional

import torch
from torch import Tensor

WINDOWS_WITH_ATTENTION = ("global", "local-m", "local-p")


@dataclass(frozen=True)
class Options:
    """What the model was built with; the reference takes no hints from its modules."""

    window: str  # "none" (Base), "global", "local-m" or "local-p"
    score: Optional[str]  # "dot", "general", "concat", "location"; unused for Base
    input_feeding: bool
    reverse_source: bool
    window_size: int = 3  # D
    renormalize: bool = False  # local-p: divide eq. (10) by its sum
    attend_eos: bool = False  # attention also weighs the source's final </s>
    reverse_eos: bool = False  # reversed, the encoder reads </s> first
    # dropout as a fixed scale k (a test's stand-in for a dropout mask) at the
    # places --dropout-placement names; 1.0: no dropout (eval mode)
    dropout_placement: str = "luong"
    dropout_scale: float = 1.0
    position_lr_scale: float = 1.0  # a: W_p, v_p = a · the module's parameters
    sigma: float = 0.0  # eq. (10)'s σ; 0: the paper's D/2
    position_scale: str = "paper"  # eq. (9)'s S: "paper" (S_b) or "luong-code" (Luong's)


@dataclass
class SentenceReference:
    logits: Tensor  # T x V, before the softmax of eq. (6)
    attn: Optional[Tensor]  # T x (n + 1), a_t(s) over the true positions, </s> last; None for Base
    p_t: Optional[Tensor]  # T, the window centre (local windows only)
    windows: Optional[List[List[int]]]  # per t, the positions s inside the window


def _w(module, name: str) -> Tensor:
    return getattr(module, name).detach().to(torch.float64)


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _softmax(values: List[float]) -> List[float]:
    top = max(values)
    exps = [math.exp(v - top) for v in values]
    total = sum(exps)
    return [e / total for e in exps]


class StackedLSTM:
    """Stacked LSTM from raw weights; torch's gate order i, f, g, o.

        i, f, o = sigmoid(.), g = tanh(.) of W_ih x + b_ih + W_hh h + b_hh
        c' = f * c + i * g,  h' = o * tanh(c')
    Layer k > 0 reads layer k - 1's new h (no dropout: eval mode).
    """

    def __init__(self, lstm):
        self.layers = []
        k = 0
        while hasattr(lstm, f"weight_ih_l{k}"):
            self.layers.append(
                tuple(
                    _w(lstm, f"{kind}_l{k}")
                    for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
                )
            )
            k += 1

    def step(self, x: Tensor, hs: List[Tensor], cs: List[Tensor]):
        new_hs, new_cs = [], []
        for (w_ih, w_hh, b_ih, b_hh), h, c in zip(self.layers, hs, cs):
            gates = w_ih @ x + b_ih + w_hh @ h + b_hh  # 4H
            i, f, g, o = gates.chunk(4)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            new_hs.append(h)
            new_cs.append(c)
            x = h
        return new_hs, new_cs


class Weights:
    """The model's parameters as float64 tensors, read by name once per model."""

    def __init__(self, model, opts: Options):
        self.enc_embed = _w(model.encoder.embed_tokens, "weight")  # V_src x C
        self.dec_embed = _w(model.decoder.embed_tokens, "weight")  # V x C
        self.encoder = StackedLSTM(model.encoder.lstm)
        self.decoder = StackedLSTM(model.decoder.lstm)
        self.W_s, self.b_s = _w(model.decoder.W_s, "weight"), _w(model.decoder.W_s, "bias")
        if opts.window == "none":
            return
        self.W_c = _w(model.decoder.W_c, "weight")  # O x (E + H)
        score = model.decoder.attention.score
        if opts.score in ("general", "location"):
            self.W_a = _w(score.W_a, "weight")  # general: H x E; location: max_pos x H
        elif opts.score == "concat":
            # the paper's W_a acts on [h_t; h̄_s]: its two column blocks are W_q and W_k
            self.W_a = torch.cat([_w(score.W_q, "weight"), _w(score.W_k, "weight")], dim=1)
            self.v_a = _w(score.v_a, "weight")[0]  # A
        if opts.window == "local-p":
            window = model.decoder.attention.window
            a = opts.position_lr_scale
            self.W_p = a * _w(window.W_p, "weight")  # H x H
            self.v_p = a * _w(window.v_p, "weight")[0]  # H


def _score(opts: Options, w: Weights, h_t: Tensor, h_bar: Tensor, s: int) -> float:
    """score(h_t, h̄_s), eq. (8), or the location score (W_a h_t)_s."""
    if opts.score == "dot":
        return float(h_t @ h_bar)
    if opts.score == "general":
        return float(h_t @ (w.W_a @ h_bar))
    if opts.score == "concat":
        return float(w.v_a @ torch.tanh(w.W_a @ torch.cat([h_t, h_bar])))
    if opts.score == "location":
        return float(w.W_a[s] @ h_t)  # row s of W_a h_t
    raise ValueError(f"unknown score {opts.score!r}")


def _luong_code_position(scales: float, n_words: int) -> float:
    """Luong's code's local-p centre, 0-based. ``prepareData.m`` line 23 sets
    srcLens = (words) + 1 ("add eos"; the encoder never reads that symbol);
    ``attnLayerForward.m`` line 106: mu = scales .* (srcLens - 1) + 1, a 1-based
    position; position k (1-based) is s = k - 1 (0-based)."""
    src_lens = n_words + 1
    mu = scales * (src_lens - 1) + 1
    return mu - 1


def _window(opts: Options, w: Weights, h_t: Tensor, t: int, S_b: int, n_words: int):
    """(positions s in the window, p_t or None, prior(s) multiplying the softmax);
    S_b is the number of attended positions, n_words the source words."""
    D = opts.window_size
    if opts.window == "global":
        return list(range(S_b)), None, lambda s: 1.0
    if opts.window == "local-m":
        p_t = float(min(t, S_b - 1))  # p_t = t, kept inside the sentence
        return [s for s in range(S_b) if abs(s - p_t) <= D], p_t, lambda s: 1.0
    if opts.window == "local-p":
        scales = _sigmoid(float(w.v_p @ torch.tanh(w.W_p @ h_t)))  # scaleLayerForward.m
        if opts.position_scale == "luong-code":
            p_t = _luong_code_position(scales, n_words)
        else:
            p_t = S_b * scales  # eq. (9), S = S_b
        centre = math.floor(p_t)
        sigma = opts.sigma or D / 2.0  # the paper: "we empirically set σ = D/2"
        positions = [s for s in range(S_b) if abs(s - centre) <= D]
        return positions, p_t, lambda s: math.exp(-((s - p_t) ** 2) / (2 * sigma**2))
    raise ValueError(f"unknown window {opts.window!r}")


def reference_sentence(
    w: Weights, opts: Options, tokens: List[int], prev_output: List[int]
) -> SentenceReference:
    """The paper's model on one unpadded source sentence (original order, its
    final token fairseq's </s>)."""
    n = len(tokens) - 1  # source words
    encoder, decoder = w.encoder, w.decoder
    E = encoder.layers[0][1].size(1)

    # encoder: read right to left when reversed; store h̄_s at its true position s
    hs = [torch.zeros(E, dtype=torch.float64) for _ in encoder.layers]
    cs = [torch.zeros(E, dtype=torch.float64) for _ in encoder.layers]
    annotations: List[Optional[Tensor]] = [None] * len(tokens)
    read_order = list(range(n + 1))
    if opts.reverse_source:
        read_order = (
            list(range(n, -1, -1)) if opts.reverse_eos else list(range(n - 1, -1, -1)) + [n]
        )
    k = opts.dropout_scale
    for s in read_order:
        hs, cs = encoder.step(k * w.enc_embed[tokens[s]], hs, cs)  # dropout on the input
        annotations[s] = hs[-1] * (k if opts.dropout_placement == "fairseq" else 1.0)

    # attention weighs the words only (a source of </s> alone: that </s>)
    S_b = n + 1 if opts.attend_eos or n == 0 else n

    # decoder starts from the encoder's final (h, c) of every layer; h̃_0 = 0
    has_attention = opts.window in WINDOWS_WITH_ATTENTION
    if has_attention:
        feed = torch.zeros(w.W_c.size(0), dtype=torch.float64)  # h̃_0
    logits, attn_rows, centres, windows = [], [], [], []
    for t, y_prev in enumerate(prev_output):
        x = k * w.dec_embed[y_prev]
        if opts.input_feeding:
            # Luong's code drops the layer's whole input, the fed h̃_{t-1} included
            x = torch.cat([x, feed * (k if opts.dropout_placement == "luong" else 1.0)])  # §3.3
        hs, cs = decoder.step(x, hs, cs)
        h_t = hs[-1]
        before_W_s = 1.0 if opts.dropout_placement == "luong" else k
        if not has_attention:
            logits.append(w.W_s @ (before_W_s * h_t) + w.b_s)  # Base
            continue

        positions, p_t, prior = _window(opts, w, h_t, t, S_b, n)
        align = _softmax([_score(opts, w, h_t, annotations[s], s) for s in positions])
        weights = [a * prior(s) for a, s in zip(align, positions)]  # eq. (10)
        if opts.renormalize:
            total = sum(weights)
            weights = [a / total for a in weights]
        row = torch.zeros(len(tokens), dtype=torch.float64)  # T x (n + 1) in all
        context = torch.zeros(E, dtype=torch.float64)
        for a, s in zip(weights, positions):
            row[s] = a
            context = context + a * annotations[s]  # c_t
        attn_vec = torch.tanh(w.W_c @ torch.cat([context, h_t]))  # h̃_t, eq. (5)
        if opts.dropout_placement == "fairseq" and opts.input_feeding:
            attn_vec = k * attn_vec  # dropped once: to W_s and fed back
            before_W_s = 1.0
        logits.append(w.W_s @ (before_W_s * attn_vec) + w.b_s)  # eq. (6)
        feed = attn_vec
        attn_rows.append(row)
        centres.append(p_t)
        windows.append(positions)

    return SentenceReference(
        logits=torch.stack(logits),
        attn=torch.stack(attn_rows) if has_attention else None,
        p_t=None if not centres or centres[0] is None else torch.tensor(centres),
        windows=windows if has_attention else None,
    )


def reference_batch(
    model, opts: Options, src_tokens: Tensor, prev_output_tokens: Tensor, padding_idx: int
) -> List[SentenceReference]:
    """Strip each row's padding (either side) and run the reference per sentence."""
    weights = Weights(model, opts)
    return [
        reference_sentence(
            weights,
            opts,
            [tok for tok in row.tolist() if tok != padding_idx],
            prev.tolist(),
        )
        for row, prev in zip(src_tokens, prev_output_tokens)
    ]
