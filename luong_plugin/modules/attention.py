"""Luong et al. (2015) attention = score x window, §3.1-3.2.

    a_t(s) = softmax_s(score(h_t, h̄_s)) over the window, times the window prior
    c_t    = Σ_s a_t(s) h̄_s

Three implementations of the same weights (windows.py):
- masked: score every source position, mask what the window excludes, softmax
  over S. Global attention and short sources take this path.
- sliced (local windows): the masked path over the narrowest slice lo .. hi - 1
  of positions that holds every window of the batch: no copy, O(D) per step
  when the windows sit together (decoding a batch of similar lengths: local-m
  centres every sentence longer than t on t).
- gathered (local windows): gather the 2D + 1 keys of each window, score and
  softmax only those, and scatter the weights back into the B x T x S map, so a
  step costs O(D) rather than O(S) wherever the windows lie.
``forward`` takes the masked path while the source is shorter than
``GATHER_FROM`` windows; beyond, the sliced path while the slice is shorter
than that, and the gathered path otherwise. The slice's bounds are values read
back to the host, which is free on the CPU but stalls a GPU's step loop at every
step until the device catches up (``reads_back_freely``): off the CPU, decoding
takes the gathered path wherever the CPU would slice. In training (autograd recording a
step) every path's backward costs O(S) per step (the gradient of the sliced or
gathered keys and values is a B x S x E buffer per step, zero-filled and added
up), so it takes the masked path while the source is shorter than
``TRAIN_GATHER_FROM`` windows and the gathered one beyond, never the sliced one
(docs/BENCHMARKS.md, "Attention in training against the source length", times
the paths against S). The decoder's training loop does not come here for the dot
and general scores: attention_step.py computes their step as one autograd node, over
every position, or over each window's gathered keys and values from its own
``GATHER_FROM`` windows of source on.
Each path can be called directly. Either way the returned map covers the
whole source, B x T x S.

Shape legend: B batch, T target len, S source len (padded), E encoder dim, H
decoder hidden, K projected key dim, W window width 2D + 1, U slice length.
"""

from typing import Dict, NamedTuple, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .scores import build_score, take_positions
from .windows import PositionWeights, build_window

# gather once the source (or the slice of it that holds every window) is this
# many windows long: below it, a few wasted scores in one batched product cost
# less than gathering
GATHER_FROM = 2
# in training: the masked path below this many windows of source, the gathered one beyond
# (docs/LOCAL_P.md, "By source length", before the fused step: gathering was no faster than
# masking up to 80 pieces with D = 14, ahead from 120); the training loop's dot and general
# scores take attention_step.py's fused step instead, at every length, which gathers from its
# own attention_step.GATHER_FROM
TRAIN_GATHER_FROM = 4


def reads_back_freely(device: torch.device) -> bool:
    """Whether a value read back to the host (the sliced path's bounds) costs nothing
    on ``device``: on the CPU it does not; on a GPU it waits for every queued kernel,
    once per decoding step (tests/test_sync_free.py)."""
    return device.type == "cpu"


def attention_weights(
    scores: Tensor,
    excluded: Optional[Tensor],
    prior: Optional[Tensor],
    renormalize: bool = False,
) -> Tensor:
    """Mask, softmax (in fp32 at least) and prior: a_t over the scored positions.
    ``prior`` multiplies the softmax (eq. (10)'s Gaussian G); with ``renormalize``
    it is log G (windows.py), added to the scores: softmax(score + log G) is
    softmax · G divided by its sum, in one softmax."""
    dtype = torch.promote_types(scores.dtype, torch.float32)  # fp16/bf16 -> fp32, fp64 stays
    out_dtype = scores.dtype
    if prior is not None and renormalize:
        scores = scores.to(dtype) + prior  # B x T x (S|W): score + log G
        prior = None
    if excluded is not None:
        scores = scores.masked_fill(excluded, float("-inf"))  # B x T x (S|W)
    probs = torch.softmax(scores, dim=-1, dtype=dtype).to(out_dtype)  # B x T x (S|W)
    if prior is not None:
        probs = probs * prior  # eq. (10): Gaussian for local-p
    return probs


def attend(
    scores: Tensor,
    excluded: Optional[Tensor],
    prior: Optional[Tensor],
    values: Tensor,
    renormalize: bool = False,
) -> Tuple[Tensor, Tensor]:
    """The core of every masked variant as a pure function: mask, softmax, prior, context."""
    probs = attention_weights(scores, excluded, prior, renormalize)  # B x T x S
    context = torch.bmm(probs, values)  # B x T x E: c_t
    return context, probs


class LuongAttention(nn.Module):
    def __init__(
        self,
        score: str,
        window: str,
        query_dim: int,
        key_dim: int,
        window_size: int = 10,
        renormalize: bool = False,
        max_source_positions: int = 0,
        attention_dim: int = 0,
        logit_bound: float = 0.0,
        position_lr_scale: float = 1.0,
        position_sigma: float = 0.0,
        position_detach_query: bool = False,
        position_scale: str = "paper",
    ):
        super().__init__()
        self.score = build_score(
            score,
            query_dim,
            key_dim,
            max_source_positions=max_source_positions,
            attention_dim=attention_dim,
        )
        self.window = build_window(
            window,
            query_dim,
            window_size=window_size,
            renormalize=renormalize,
            logit_bound=logit_bound,
            position_lr_scale=position_lr_scale,
            position_sigma=position_sigma,
            detach_query=position_detach_query,
            position_scale=position_scale,
        )

    def precompute(self, keys: Tensor) -> Tensor:
        return self.score.precompute(keys)

    def forward(
        self,
        query: Tensor,  # B x T x H: h_t
        proj_keys: Tensor,  # from precompute()
        values: Tensor,  # B x S x E: h̄_s
        src_pad_mask: Tensor,  # B x S, True on padding (true order)
        src_lengths: Tensor,  # B: S_b
        steps: Tensor,  # T: 0-based target positions t
        position: Optional[PositionWeights] = None,  # the window's loop_weights(), or None
    ) -> Tuple[Tensor, Tensor, Dict[str, Tensor]]:
        args = (query, proj_keys, values, src_pad_mask, src_lengths, steps)
        if self.window.span is None:  # global: every position
            return self.masked(*args)
        centre = self.window.centre(query, steps, src_lengths, position)  # B x T each
        S, most = values.size(1), GATHER_FROM * self.window.width
        if torch.is_grad_enabled() and (query.requires_grad or values.requires_grad):  # training
            if S < TRAIN_GATHER_FROM * self.window.width:
                return self.masked(*args, centre=centre)
            return self.gathered(*args, centre=centre)
        if S < most:
            return self.masked(*args, centre=centre)
        if not reads_back_freely(values.device):  # the slice's bounds would stall each step
            return self.gathered(*args, centre=centre)
        lo, hi = self.window_slice(centre.mid, S)
        if hi - lo < most:
            return self.sliced(*args, lo=lo, hi=hi, centre=centre)
        return self.gathered(*args, centre=centre)

    def window_slice(self, mid: Tensor, src_len: int) -> Tuple[int, int]:
        """(lo, hi): the positions lo .. hi - 1 hold every window centred on ``mid``."""
        D = self.window.window_size
        low, high = torch.aminmax(mid)
        return max(int(low) - D, 0), min(int(high) + D + 1, src_len)

    # The three paths take forward's arguments (each can be called alone) and
    # an optional ``Centre`` that forward has computed already.
    def masked(self, query, proj_keys, values, src_pad_mask, src_lengths, steps, centre=None):
        """Score all S positions, exclude padding and what the window leaves out."""
        source = Source(proj_keys, values, src_pad_mask, src_lengths)
        return self._masked_over(query, source, steps, 0, values.size(1), centre)

    def sliced(
        self, query, proj_keys, values, src_pad_mask, src_lengths, steps,
        lo=None, hi=None, centre=None,
    ):  # fmt: skip
        """The masked path over the positions lo .. hi - 1 only (a local window's
        weight is 0 outside it); the weights are padded back to B x T x S."""
        if centre is None:
            centre = self.window.centre(query, steps, src_lengths)
        if lo is None:
            lo, hi = self.window_slice(centre.mid, values.size(1))
        source = Source(proj_keys, values, src_pad_mask, src_lengths)
        return self._masked_over(query, source, steps, lo, hi, centre)

    def _masked_over(self, query, source: "Source", steps, lo: int, hi: int, centre=None):
        S, part = source.values.size(1), slice(lo, hi)
        positions = torch.arange(lo, hi, device=source.values.device)  # S|U
        scores = self.score(query, source.proj_keys, part)  # B x T x (S|U)
        mask = self.window.mask(query, steps, source.lengths, positions, centre)
        excluded = source.pad_mask[:, part].unsqueeze(1)  # B x 1 x (S|U)
        if mask.outside is not None:
            excluded = excluded | mask.outside  # B x T x (S|U)
        context, probs = attend(
            scores, excluded, mask.prior, source.values[:, part], self.window.renormalize
        )
        if (lo, hi) != (0, S):
            probs = F.pad(probs, (lo, S - hi))  # B x T x S
        return context, probs, mask.extras

    def gathered(self, query, proj_keys, values, src_pad_mask, src_lengths, steps, centre=None):
        """Score only the window's W positions; scatter the weights into B x T x S."""
        B, T, S = query.size(0), query.size(1), values.size(1)
        span = self.window.span(query, steps, src_lengths, S, centre)
        scores = self.score(query, proj_keys, span.index)  # B x T x W
        probs = attention_weights(scores, span.outside, span.prior, self.window.renormalize)
        window_values = take_positions(values, span.index)  # B x T x W x E
        context = (probs.unsqueeze(-1) * window_values).sum(2)  # B x T x E: c_t
        # clamped copies of an edge position carry weight 0: adding keeps the true one
        full = probs.new_zeros(B, T, S).scatter_add(2, span.index, probs)  # B x T x S
        return context, full, span.extras


class Source(NamedTuple):
    """What attention reads of the encoder's output (true order), for one batch."""

    proj_keys: Tensor  # the score's precompute(h̄): B x S x K
    values: Tensor  # h̄_s: B x S x E
    pad_mask: Tensor  # B x S, True on padding
    lengths: Tensor  # B: S_b
