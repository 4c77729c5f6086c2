"""Luong et al. (2015) attention windows, §3.2.

    global   every source position
    local-m  p_t = t (monotonic), window [p_t - D, p_t + D]
    local-p  p_t = S · sigmoid(v_pᵀ tanh(W_p h_t)), S = S_b (or S_b - 1)  eq. (9)
             a_t(s) = align(h_t, h̄_s) · exp(-(s - p_t)² / 2σ²), σ = D/2   eq. (10)

Conventions (true source positions, see source.py), checked against Luong's
code (lmthang/nmt.matlab: code/layers/attnLayerForward.m, distLayerForward.m,
code/misc/buildSrcVecs.m, code/preprocess/prepareData.m), whose positions are
1-based:
- positions s and target steps t are 0-based; the first target step is t = 0;
- S_b is the number of positions attention may weigh (the encoder's
  ``src_lengths``): the source words, as in Luong's code, whose encoder reads
  and attends the words only (prepareData.m lines 47 and 58-59; setAttnParams.m
  line 3: numSrcHidVecs = srcMaxLen - 1); S_b + 1 with ``--attend-source-eos``,
  which counts the final ``</s>`` too. His ``srcLens`` counts an end symbol
  that is never read (prepareData.m line 23, ``srcLens = srcLens + 1; % add
  eos``), so srcLens - 1 is the number of words;
- local-m centres on min(t, S_b - 1), so a target longer than its source keeps
  attending to the last source word (the window is never empty; Luong:
  min(tgtPos, srcLens - 1), attnLayerForward.m lines 21-23);
- local-p: Luong's code computes mu = scales .* (srcLens - 1) + 1 in 1-based
  positions (attnLayerForward.m line 106), i.e. p_t = (srcLens - 1) · σ(.) =
  (number of words) · σ(.) 0-based. ``position_scale`` (``--position-scale``)
  picks eq. (9)'s S: ``paper`` (the default) S = S_b, the positions attention
  weighs, which is his S as long as S_b counts the words only; ``luong-code``
  S = S_b - 1, his S when S_b also counts the final ``</s>`` (fairseq ends
  every source with it), as his srcLens counts its end symbol: the model
  requires ``--attend-source-eos`` for it. p_t stays real-valued in [0, S) for
  the Gaussian (distLayerForward.m line 9 takes mu itself), so W_p and v_p get
  gradients, and the window is the 2D + 1 integer positions around floor(p_t)
  (``srcPositions = floor(mu)``, attnLayerForward.m line 19; buildSrcVecs.m
  lines 37-38); the window always overlaps the sentence;
- window positions outside the sentence are left out of the softmax, not
  shifted into it (buildSrcVecs.m lines 41-44; normLayerForward.m line 22);
- the Gaussian is applied after the softmax and the result is *not*
  renormalised, Luong's default (``normLocalAttn = 0``, trainLSTM.m line 94;
  attnLayerForward.m lines 69-75); ``renormalize=True`` divides by the sum,
  i.e. softmax(score + log G), and is computed so: the window then gives log G
  as its ``prior``, added to the scores before one softmax (no exp, product,
  sum and division per step). It is neither Luong's default nor his
  ``normLocalAttn = 1`` (softmax(score · G), lines 62-65; his comment,
  trainLSTM.m line 93: it "didn't work as well").
- ``logit_bound`` B > 0 (``--position-logit-bound``, not in the paper): the
  forward pass is unchanged; in backward, an element whose logit
  v_pᵀ tanh(W_p h_t) lies beyond ±B gets no gradient pushing it further out,
  so Adam cannot saturate the sigmoid of eq. (9) early in training.
- ``position_lr_scale`` a (``--position-lr-scale``, not in the paper): eq. (9)'s
  W_p and v_p are a times the module's parameters, which the model initialises
  a times wider, so the function and its initial values are the paper's while
  Adam's steps on W_p and v_p shrink by a (plain SGD's by a²).
- ``detach_query`` (``--position-detach-query``, not in the paper): eq. (9) reads
  h_t but passes no gradient back into it, so the loss reaches the decoder
  through the attention alone; W_p and v_p learn as before and the forward
  pass is unchanged.
- ``position_sigma`` σ > 0 (``--position-sigma``, not in the paper): eq. (10)'s
  Gaussian takes this σ instead of D/2; the window stays the 2D + 1 positions
  around floor(p_t). 0 keeps the paper's σ = D/2.

Every window offers the same two forms, each returning the same types:

- ``mask(query, steps, src_lengths, positions)`` -> ``Mask(outside, prior, extras)``
  over the source positions ``positions`` (1-D: all S of the padded source, or
  a slice of them, U): ``outside`` B x T x (S|U), True where excluded, and
  ``prior`` B x T x (S|U), the multiplier applied after the softmax (its log,
  added to the scores, when the window renormalises); either is
  None when it is a no-op (global: nothing excluded, no prior; local-m: no
  prior). This is the plain, masked implementation.
- ``span(query, steps, src_lengths, src_len)`` -> ``Span(index, outside, prior,
  extras)`` over the window only: ``index`` B x T x W, the W = 2D + 1 positions
  p - D .. p + D clamped into the padded source, ``outside`` B x T x W, True
  where a position lies outside the sentence [0, S_b) (clamped copies
  included), ``prior`` B x T x W or None. Scores and values are gathered at
  ``index`` and the weights scattered back into the B x T x S map
  (attention.py). ``span`` is None for the global window.

Both local forms take an optional ``centre``, the ``Centre(p_t, mid)`` of
``centre()``, so a caller that has it already does not compute it twice.
``extras`` holds ``p_t`` (B x T) for the local windows. Both forms give the same
attention weights; the masked one is the test oracle for the gathered one.

Shape legend: B batch, T target len, S source len (padded), H query dim, D window
half-width, W window width 2D + 1.
"""

from typing import Dict, NamedTuple, Optional

import torch
import torch.nn as nn
from torch import Tensor

from .loop_weight import LoopWeight
from .options import lookup, require_positive
from .position_network import GaussianPrior, PositionStep, PredictedPosition
from .precision import at_least_fp32


class Centre(NamedTuple):
    """Where a local window sits, B x T each."""

    p_t: Tensor  # real-valued: local-p's eq. (9), local-m's t (the extras' p_t)
    mid: Tensor  # integer: the window is mid - D .. mid + D


class Mask(NamedTuple):
    """``mask()``'s result over U positions (all S, or a slice)."""

    outside: Optional[Tensor]  # B x T x U, True where excluded; None: nothing
    prior: Optional[Tensor]  # B x T x U: G (its log when renormalising); None: no prior
    extras: Dict[str, Tensor]  # {"p_t": B x T} for the local windows


class Span(NamedTuple):
    """``span()``'s result over the window's W = 2D + 1 positions."""

    index: Tensor  # B x T x W: positions mid - D .. mid + D, clamped into the source
    outside: Tensor  # B x T x W: True outside the sentence (clamped copies included)
    prior: Optional[Tensor]  # B x T x W, or None
    extras: Dict[str, Tensor]


class PositionWeights(NamedTuple):
    """Eq. (9)'s W_p and v_p for one pass of the decoder's per-step loop."""

    W_p: LoopWeight  # H x H, transposed, in luong_loop.position_dtype's dtype
    v_p: LoopWeight  # H x 1, transposed, fp32 at least: the logit stays fp32


class GlobalWindow(nn.Module):
    renormalize = False
    span = None  # every position: nothing to gather
    OPTIONS = ()  # build_window's options this window takes

    def __init__(self, query_dim: int):
        super().__init__()

    def loop_weights(self, dtype: torch.dtype) -> Optional[PositionWeights]:
        return None  # no position network

    def mask(
        self, query: Tensor, steps: Tensor, src_lengths: Tensor, positions: Tensor, centre=None
    ):
        return Mask(None, None, {})  # nothing excluded but padding, no prior


class _LocalWindow(nn.Module):
    """[p_t - D, p_t + D] around a centre; subclasses give the centre and the prior."""

    renormalize = False
    round_centre = False  # local-p: floor(p_t + 0.5), the plugin's convention before 0.2
    OPTIONS = ("window_size",)

    def __init__(self, query_dim: int, window_size: int = 10):
        super().__init__()
        require_positive("--window-size", window_size)
        self.window_size = window_size

    @property
    def width(self) -> int:
        return 2 * self.window_size + 1  # W

    def loop_weights(self, dtype: torch.dtype) -> Optional[PositionWeights]:
        return None  # no position network

    def centre(self, query: Tensor, steps: Tensor, src_lengths: Tensor, weights=None):
        """``Centre(p_t, mid)``: p_t (the extras' value) and the integer window
        centre, B x T each. ``weights``: ``loop_weights()``'s, inside the decoder's per-step loop.
        """
        raise NotImplementedError

    def prior(self, p_t: Tensor, positions: Tensor):
        return None  # no prior

    def mask(
        self, query: Tensor, steps: Tensor, src_lengths: Tensor, positions: Tensor, centre=None
    ):
        p_t, mid = centre or self.centre(query, steps, src_lengths)  # B x T
        outside = (positions - mid.unsqueeze(-1)).abs() > self.window_size  # B x T x (S|U)
        return Mask(outside, self.prior(p_t, positions), {"p_t": p_t})

    def span(self, query: Tensor, steps: Tensor, src_lengths: Tensor, src_len: int, centre=None):
        p_t, mid = centre or self.centre(query, steps, src_lengths)  # B x T
        D = self.window_size
        offsets = torch.arange(-D, D + 1, device=query.device)  # W
        positions = mid.unsqueeze(-1) + offsets  # B x T x W
        lengths = src_lengths.view(-1, 1, 1)  # B x 1 x 1
        outside = (positions < 0) | (positions >= lengths)  # B x T x W
        index = positions.clamp(0, src_len - 1)  # B x T x W
        return Span(index, outside, self.prior(p_t, positions), {"p_t": p_t})


class LocalMonotonicWindow(_LocalWindow):
    def centre(self, query: Tensor, steps: Tensor, src_lengths: Tensor, weights=None):
        mid = torch.minimum(
            steps.unsqueeze(0), (src_lengths - 1).unsqueeze(1)
        )  # B x T: p_t = t, clipped to the sentence
        return Centre(mid.to(at_least_fp32(query.dtype)), mid)  # fp32 under bf16: exact past 256


# --position-scale: how many of S_b's positions eq. (9)'s S leaves out (module docstring)
POSITION_SCALES = {
    "paper": 0,  # S = S_b, the paper's eq. (9) over the positions attention weighs
    "luong-code": 1,  # S = S_b - 1: Luong's srcLens - 1 (attnLayerForward.m line 106)
}


class LocalPredictiveWindow(_LocalWindow):
    OPTIONS = (
        "window_size", "renormalize", "logit_bound", "position_lr_scale", "position_sigma",
        "detach_query", "position_scale",
    )  # fmt: skip

    def __init__(
        self,
        query_dim: int,
        window_size: int = 10,
        renormalize: bool = False,
        logit_bound: float = 0.0,
        position_lr_scale: float = 1.0,
        position_sigma: float = 0.0,
        detach_query: bool = False,
        position_scale: str = "paper",
    ):
        super().__init__(query_dim, window_size)
        self.position_scale = position_scale
        self.left_out = lookup("--position-scale", POSITION_SCALES, position_scale)
        self.detach_query = detach_query
        self.sigma = position_sigma if position_sigma > 0 else window_size / 2.0  # paper: D/2
        self.renormalize = renormalize
        self.logit_bound = logit_bound
        self.position_lr_scale = position_lr_scale
        self.W_p = nn.Linear(query_dim, query_dim, bias=False)
        self.v_p = nn.Linear(query_dim, 1, bias=False)

    def loop_weights(self, dtype: torch.dtype) -> Optional[PositionWeights]:
        """W_p and v_p for one pass of the per-step loop in training: W_p cast to
        ``dtype`` once per call (``luong_loop.position_dtype``: fp32 at least on a CPU,
        the loop's product dtype on CUDA or with ``POSITION_FP32_ON_CPU`` off), v_p fp32, and
        the gradient of each one GEMM over all steps (``LoopWeight``). None (the plain
        path) when either is frozen."""
        if not (self.W_p.weight.requires_grad and self.v_p.weight.requires_grad):
            return None
        a = self.position_lr_scale  # W_p and v_p are a · (their parameters)
        w_p, v_p = self.W_p.weight.t(), self.v_p.weight.t()  # H x H, H x 1
        if a != 1.0:
            w_p, v_p = a * w_p, a * v_p
        return PositionWeights(LoopWeight(w_p.to(dtype)), LoopWeight(v_p.to(at_least_fp32(dtype))))

    def logit(self, query: Tensor) -> Tensor:
        """v_pᵀ tanh(W_p h_t), B x T: the argument of eq. (9)'s sigmoid."""
        a = self.position_lr_scale
        if a == 1.0:
            return self.v_p(torch.tanh(self.W_p(query))).squeeze(-1)  # B x T
        return a * self.v_p(torch.tanh(a * self.W_p(query))).squeeze(-1)  # B x T

    def scale(self, src_lengths: Tensor) -> Tensor:
        """Eq. (9)'s S, B: S_b (``--position-scale paper``) or S_b - 1 (``luong-code``)."""
        return src_lengths - self.left_out if self.left_out else src_lengths

    def centre(self, query: Tensor, steps: Tensor, src_lengths: Tensor, weights=None):
        scale = self.scale(src_lengths).unsqueeze(1)  # B x 1: S
        if weights is not None:  # one step of the decoder's loop in training (T = 1)
            p_t = PositionStep.apply(
                query.squeeze(1),
                weights.W_p.weight_t,
                weights.v_p.weight_t,
                scale.to(weights.v_p.weight_t.dtype),
                self.logit_bound,
                weights,
                self.detach_query,
            )  # B x 1: eq. (9)
        else:
            logit = self.logit(query.detach() if self.detach_query else query)  # B x T
            logit = logit.to(at_least_fp32(logit.dtype))  # p_t in fp32 under bf16 (precision.py)
            p_t = PredictedPosition.apply(logit, scale.type_as(logit), self.logit_bound)  # eq. (9)
        if self.round_centre:  # checkpoints saved before the convention changed
            return Centre(p_t, torch.floor(p_t + 0.5).long())
        return Centre(p_t, torch.floor(p_t).long())  # Luong: floor(mu), attnLayerForward.m:19

    def prior(self, p_t: Tensor, positions: Tensor) -> Tensor:
        """Eq. (10)'s G, B x T x (S|W); its log when renormalising: softmax(score +
        log G), attention.attention_weights."""
        return GaussianPrior.apply(p_t, positions.type_as(p_t), self.sigma, self.renormalize)


WINDOWS = {
    "global": GlobalWindow,
    "local-m": LocalMonotonicWindow,
    "local-p": LocalPredictiveWindow,
}


def build_window(name: str, query_dim: int, **options) -> nn.Module:
    """The window ``name``, given those of ``options`` it takes (its ``OPTIONS``)."""
    window = lookup("--attention-window", WINDOWS, name)
    return window(query_dim, **{k: v for k, v in options.items() if k in window.OPTIONS})
