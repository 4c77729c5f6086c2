"""Luong et al. (2015) attention windows, §3.2.

    global   every source position
    local-m  p_t = t (monotonic), window [p_t - D, p_t + D]
    local-p  p_t = S_b · sigmoid(v_pᵀ tanh(W_p h_t))              eq. (9)
             a_t(s) = align(h_t, h̄_s) · exp(-(s - p_t)² / 2σ²), σ = D/2   eq. (10)

Conventions (true source positions, see source.py), those of Luong's code
(lmthang/nmt.matlab, code/layers/attnLayerForward.m, buildSrcVecs.m):
- positions s and target steps t are 0-based; the first target step is t = 0;
- S_b is the number of positions attention may weigh (the encoder's
  ``src_lengths``): the source words, as in Luong's code, whose sources have
  no end symbol; S_b + 1 with ``--attend-source-eos``, which counts the final
  ``</s>`` too;
- local-m centres on min(t, S_b - 1), so a target longer than its source keeps
  attending to the last source word (the window is never empty);
- local-p keeps the real-valued p_t in [0, S_b) for the Gaussian, so W_p and v_p
  get gradients, and takes the 2D + 1 integer positions around floor(p_t) as
  the window (Luong: ``srcPositions = floor(mu)``, attnLayerForward.m line 19,
  with mu = scales .* (srcLens - 1) + 1 in 1-based positions, line 106); the
  window always overlaps the sentence;
- window positions outside the sentence are left out of the softmax, not
  shifted into it (buildSrcVecs.m lines 41-44);
- the Gaussian is applied after the softmax and the result is *not*
  renormalised, Luong's default (``normLocalAttn = 0``, trainLSTM.m line 94;
  attnLayerForward.m lines 69-75); ``renormalize=True`` divides by the sum,
  i.e. softmax(score + log G), and is computed so: the window then gives log G
  as its ``prior``, added to the scores before one softmax (no exp, product,
  sum and division per step). It is neither Luong's default nor his
  ``normLocalAttn = 1`` (softmax(score · G), lines 62-65; his comment: it
  "didn't work as well").
- ``logit_bound`` B > 0 (``--position-logit-bound``, not in the paper): the
  forward pass is unchanged; in backward, an element whose logit
  v_pᵀ tanh(W_p h_t) lies beyond ±B gets no gradient pushing it further out,
  so Adam cannot saturate the sigmoid of eq. (9) early in training.
- ``position_lr_scale`` a (``--position-lr-scale``, not in the paper): eq. (9)'s
  W_p and v_p are a times the module's parameters, which the model initialises
  a times wider, so the function and its initial values are the paper's while
  Adam's steps on W_p and v_p shrink by a (plain SGD's by a²).

Every window offers the same two forms, each returning the same types:

- ``mask(query, steps, src_lengths, positions)`` -> (outside, prior, extras)
  over the source positions ``positions`` (1-D: all S of the padded source, or
  a slice of them, U): ``outside`` B x T x (S|U), True where excluded, and
  ``prior`` B x T x (S|U), the multiplier applied after the softmax (its log,
  added to the scores, when the window renormalises); either is
  None when it is a no-op (global: nothing excluded, no prior; local-m: no
  prior). This is the plain, masked implementation.
- ``span(query, steps, src_lengths, src_len)`` -> (index, outside, prior,
  extras) over the window only: ``index`` B x T x W, the W = 2D + 1 positions
  p - D .. p + D clamped into the padded source, ``outside`` B x T x W, True
  where a position lies outside the sentence [0, S_b) (clamped copies
  included), ``prior`` B x T x W or None. Scores and values are gathered at
  ``index`` and the weights scattered back into the B x T x S map
  (attention.py). ``span`` is None for the global window.

Both local forms take an optional ``centre``, the (p_t, integer centre) pair of
``centre()``, so a caller that has it already does not compute it twice.
``extras`` holds ``p_t`` (B x T) for the local windows. Both forms give the same
attention weights; the masked one is the test oracle for the gathered one.

Shape legend: B batch, T target len, S source len (padded), H query dim, D window
half-width, W window width 2D + 1.
"""

import torch
import torch.nn as nn
from torch import Tensor

from .options import lookup, require_positive
from .precision import at_least_fp32


class GlobalWindow(nn.Module):
    renormalize = False
    span = None  # every position: nothing to gather

    def __init__(self, query_dim: int, window_size: int = 0, **unused):
        super().__init__()

    def mask(
        self, query: Tensor, steps: Tensor, src_lengths: Tensor, positions: Tensor, centre=None
    ):
        return None, None, {}  # nothing excluded but padding, no prior


class _LocalWindow(nn.Module):
    """[p_t - D, p_t + D] around a centre; subclasses give the centre and the prior."""

    renormalize = False
    round_centre = False  # local-p: floor(p_t + 0.5), the plugin's convention before 0.2

    def __init__(self, query_dim: int, window_size: int = 10, **unused):
        super().__init__()
        require_positive("--window-size", window_size)
        self.window_size = window_size

    @property
    def width(self) -> int:
        return 2 * self.window_size + 1  # W

    def centre(self, query: Tensor, steps: Tensor, src_lengths: Tensor):
        """(p_t, B x T, the extras' value; the integer window centre, B x T)."""
        raise NotImplementedError

    def prior(self, p_t: Tensor, positions: Tensor):
        return None  # no prior

    def mask(
        self, query: Tensor, steps: Tensor, src_lengths: Tensor, positions: Tensor, centre=None
    ):
        p_t, mid = centre or self.centre(query, steps, src_lengths)  # B x T
        outside = (positions - mid.unsqueeze(-1)).abs() > self.window_size  # B x T x (S|U)
        return outside, self.prior(p_t, positions), {"p_t": p_t}

    def span(self, query: Tensor, steps: Tensor, src_lengths: Tensor, src_len: int, centre=None):
        p_t, mid = centre or self.centre(query, steps, src_lengths)  # B x T
        D = self.window_size
        offsets = torch.arange(-D, D + 1, device=query.device)  # W
        positions = mid.unsqueeze(-1) + offsets  # B x T x W
        lengths = src_lengths.view(-1, 1, 1)  # B x 1 x 1
        outside = (positions < 0) | (positions >= lengths)  # B x T x W
        index = positions.clamp(0, src_len - 1)  # B x T x W
        return index, outside, self.prior(p_t, positions), {"p_t": p_t}


class LocalMonotonicWindow(_LocalWindow):
    def centre(self, query: Tensor, steps: Tensor, src_lengths: Tensor):
        mid = torch.minimum(
            steps.unsqueeze(0), (src_lengths - 1).unsqueeze(1)
        )  # B x T: p_t = t, clipped to the sentence
        return mid.to(at_least_fp32(query.dtype)), mid  # fp32 under bf16: exact past 256


class _BoundLogitGradient(torch.autograd.Function):
    """Identity forward. Backward drops the gradient of every element whose logit
    lies beyond ±bound and that gradient descent would push further out."""

    @staticmethod
    def forward(ctx, logit: Tensor, bound: float) -> Tensor:
        ctx.save_for_backward(logit)
        ctx.bound = bound
        return logit.clone()

    @staticmethod
    def backward(ctx, grad: Tensor):
        (logit,) = ctx.saved_tensors
        # a descent step moves the logit by -grad
        outward = ((logit < -ctx.bound) & (grad > 0)) | ((logit > ctx.bound) & (grad < 0))
        return grad.masked_fill(outward, 0.0), None


class LocalPredictiveWindow(_LocalWindow):
    def __init__(
        self,
        query_dim: int,
        window_size: int = 10,
        renormalize: bool = False,
        logit_bound: float = 0.0,
        position_lr_scale: float = 1.0,
        **unused,
    ):
        super().__init__(query_dim, window_size)
        self.sigma = window_size / 2.0
        self.renormalize = renormalize
        self.logit_bound = logit_bound
        self.position_lr_scale = position_lr_scale
        self.W_p = nn.Linear(query_dim, query_dim, bias=False)
        self.v_p = nn.Linear(query_dim, 1, bias=False)

    def centre(self, query: Tensor, steps: Tensor, src_lengths: Tensor):
        a = self.position_lr_scale  # W_p and v_p are a · (their parameters)
        logit = a * self.v_p(torch.tanh(a * self.W_p(query))).squeeze(-1)  # B x T
        if self.logit_bound > 0 and logit.requires_grad:
            logit = _BoundLogitGradient.apply(logit, self.logit_bound)
        logit = logit.to(at_least_fp32(logit.dtype))  # p_t in fp32 under bf16 (precision.py)
        p_t = src_lengths.unsqueeze(1).type_as(logit) * torch.sigmoid(logit)  # B x T: eq. (9)
        if self.round_centre:  # checkpoints saved before the convention changed
            return p_t, torch.floor(p_t + 0.5).long()
        return p_t, torch.floor(p_t).long()  # Luong's code: floor(mu), attnLayerForward.m

    def prior(self, p_t: Tensor, positions: Tensor) -> Tensor:
        distance = positions.type_as(p_t) - p_t.unsqueeze(-1)  # B x T x (S|W)
        log_g = distance.pow(2) * (-0.5 / self.sigma**2)  # B x T x (S|W): log of eq. (10)'s G
        if self.renormalize:
            return log_g  # softmax(score + log G), attention.attention_weights
        return torch.exp(log_g)  # eq. (10)


WINDOWS = {
    "global": GlobalWindow,
    "local-m": LocalMonotonicWindow,
    "local-p": LocalPredictiveWindow,
}


def build_window(name: str, query_dim: int, **kwargs) -> nn.Module:
    return lookup("--attention-window", WINDOWS, name)(query_dim, **kwargs)
