"""One training step of Luong attention as one autograd node, keys' and values'
gradients as one product over all steps.

In the input-feeding decoder's loop (luong_loop.py) attention runs once per target
step. Its plain path (attention.py's masked path, windows.py) records a dozen and more
autograd nodes a step for local-p (eq. (9)'s position network, the window's mask,
eq. (10)'s Gaussian, the softmax, the two products), and the backward of the two
products computes, at every step, a B x S x K gradient for the keys and a B x S x E
one for the values, each added into a buffer. This module computes the same
function, for a bilinear score (dot, general) on the masked path, as one node
per step with its backward written out:

    scores  z_t(s) = h_tᵀ k_s                                    eq. (8), k = h̄ or W_a h̄
    local-p p_t    = S · σ(v_pᵀ tanh(W_p h_t))                     eq. (9)
            log G  = -(s - p_t)² / 2σ²                             eq. (10)
    a_t     = softmax over the window (and the sentence) of z_t [+ log G]
    probs   = a_t [· G]                (· G: Luong's default; + log G: renormalised)
    c_t     = Σ_s probs(s) h̄_s

and leaves the keys' and values' gradients to ``LoopWeight``s (loop_weight.py):
Σ_t g_tᵀ h_t and Σ_t probs_tᵀ ∂L/∂c_t, one batched product each once every step's
gradient is known.

Local windows (local-m, local-p) over sources of ``GATHER_FROM`` windows or more take the
node's gathered form: each step takes the W = 2D + 1 keys and values of its window by row
(the positions around floor(p_t), clamped into the source, those outside the sentence
excluded, as windows.py's ``span``), and scores, softmaxes, weighs and differentiates only
those, forward and backward; the weights and the keys' step gradient are scattered back
into B x S rows for the map and the tapes. In arithmetic a step then costs O(W) in its
products and O(S) only in two zero-filled rows, where the masked form costs O(S) in four
products and the elementwise work between them; on a CPU, where a step's small operations
cost more in overhead than in arithmetic, gathering paid only over longer sources
(``GATHER_FROM``). Eq. (9) and W_p's and v_p's taped gradients are position_network.py's
``position_step`` and ``position_step_grad``, which ``PositionStep`` runs too.

The conventions are windows.py's (p_t real-valued, the window the 2D + 1 positions
around floor(p_t), positions outside the sentence excluded, ``--position-*``
options); attention.py's masked path is the reference the tests hold this to
(tests/test_attention_step.py), for every window and option, in float64, and so is
the gathered path, which the plain path takes for local windows over sources of
``attention.TRAIN_GATHER_FROM`` windows or more. It runs at every step of the loop in
training, whatever the source's length, in its gathered form from ``GATHER_FROM``
windows on; other scores take the plain path. It
runs in fp32 (fp64 in float64 tests) outside autocast, whatever the model's precision:
the keys are fp32 already (the decoder's ``initial_state``), the values are cast once
per pass, and a step's B x 1 x S products run faster in fp32 than in bf16 on a CPU
(precision.py's ``step_attention_precision``, which gives the plain path the same fp32
region where the encoder's output is fp32 already).

Shape legend: B batch, S source len (padded), H query dim (= K, the keys' dim),
E encoder dim, T target len, W window width 2D + 1.
"""

from typing import NamedTuple, Optional

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .loop_weight import LoopWeight
from .position_network import position_step, position_step_grad
from .precision import at_least_fp32
from .scores import _BilinearScore, take_positions
from .windows import GlobalWindow, LocalMonotonicWindow, LocalPredictiveWindow, PositionWeights

# a local window's step gathers its 2D + 1 keys and values once the source is this many
# windows long; below, it scores every position (docs/LOCAL_P.md, "The fused step's gathered
# form": with D = 14 gathering trained faster at 120 to 240 pieces, slower at 40 and 60)
GATHER_FROM = 3


class StepSource(NamedTuple):
    """The keys and values one pass of the loop attends to, taped (``LoopWeight``),
    and what every step of the pass reads of the source."""

    keys: LoopWeight  # B x K x S: the score's precompute(h̄), transposed
    values: LoopWeight  # B x S x E: h̄_s
    positions: Tensor  # S: 0 .. S - 1 in the keys' dtype
    scale: Optional[Tensor]  # B x 1: eq. (9)'s S for local-p (v_p's dtype), else None
    window: Optional["WindowRows"]  # the gathered form's rows; None: every position scored


class WindowRows(NamedTuple):
    """What the gathered form reads: the keys by row and where each sentence's rows start."""

    keys: Tensor  # B x S x K: the keys untransposed (no graph: their gradient is the tape's)
    offsets: Tensor  # W: -D .. D, a window's positions around its centre
    first_row: Tensor  # B x 1: b · S, sentence b's first row of the flattened B·S rows


def step_source(
    attention, proj_keys, values: Tensor, src_lengths: Tensor, position
) -> Optional[StepSource]:
    """The taped keys and values for the fused step, or None where the plain path runs:
    a score other than dot and general, local-p with eq. (9)'s weights frozen
    (``position`` None), or keys and values that take no gradient. Local windows take
    the node at every source length, in its gathered form from ``GATHER_FROM`` windows on
    (module docstring)."""
    window = attention.window
    if not isinstance(attention.score, _BilinearScore) or proj_keys is None:
        return None
    if not isinstance(window, (GlobalWindow, LocalMonotonicWindow, LocalPredictiveWindow)):
        return None
    if isinstance(window, LocalPredictiveWindow) and position is None:
        return None
    if not (torch.is_grad_enabled() and proj_keys.requires_grad and values.requires_grad):
        return None
    # contiguous once: a transposed view would be copied by every step's product
    keys_t = proj_keys.transpose(1, 2).contiguous()  # B x K x S
    positions = torch.arange(values.size(1), device=values.device, dtype=keys_t.dtype)  # S
    scale = rows = None
    if isinstance(window, LocalPredictiveWindow):
        scale = window.scale(src_lengths).unsqueeze(1).to(position.v_p.weight_t.dtype)  # B x 1
    B, S = values.shape[:2]
    if window.span is not None and S >= GATHER_FROM * window.width:
        D = window.window_size
        rows = WindowRows(
            proj_keys.detach().to(keys_t.dtype).contiguous(),  # B x S x K
            torch.arange(-D, D + 1, device=values.device),  # W
            torch.arange(B, device=values.device).unsqueeze(1) * S,  # B x 1
        )
    # a half encoder's output (oneDNN's bf16 LSTM, a half model) in the keys' dtype,
    # fp32 at least (the decoder's initial_state): a step's products run in fp32
    keys, values = LoopWeight(keys_t), LoopWeight(values.to(keys_t.dtype))
    return StepSource(keys, values, positions, scale, rows)


def runs_fused(query: Tensor, source: StepSource) -> bool:
    """Whether this step can take the fused node: a query of one step in the taped
    keys' and values' dtype (fp32 at least, ``step_source``)."""
    keys, values = source.keys.weight_t, source.values.weight_t
    return query.dim() == 3 and query.size(1) == 1 and query.dtype == keys.dtype == values.dtype


def fused_step(attention, query, source: StepSource, src_pad_mask, src_lengths, steps, position):
    """``LuongAttention.forward``'s result for one step (T = 1) through the fused node:
    (c_t B x 1 x E, a_t B x 1 x S, extras {"p_t": B x 1} for local windows)."""
    window = attention.window
    w_p = v_p = None
    if isinstance(window, LocalPredictiveWindow):
        w_p, v_p = position.W_p.weight_t, position.v_p.weight_t
    context, probs, p_t = _AttentionStep.apply(
        query.squeeze(1),
        source.keys.weight_t,
        source.values.weight_t,
        w_p,
        v_p,
        src_pad_mask,
        src_lengths,
        steps,
        window,
        source,
        position,
    )
    extras = {} if window.span is None else {"p_t": p_t}
    return context.unsqueeze(1), probs.unsqueeze(1), extras


class _Saved(NamedTuple):
    """What the backward reads besides the saved tensors."""

    local_p: bool
    renormalize: bool
    sigma: float
    bound: float
    detach_query: bool
    query_dtype: torch.dtype
    key_step: int
    value_step: int
    position_steps: Optional[tuple]  # (W_p's, v_p's) tape steps for local-p
    gathered: bool  # the gathered form: a, prior, distance are B x W


class _AttentionStep(torch.autograd.Function):
    """c_t, a_t and p_t of one step; the module docstring's equations."""

    @staticmethod
    def forward(
        ctx, query, keys_t, values, w_p, v_p, src_pad_mask, src_lengths, steps, window,
        source: StepSource, position: Optional[PositionWeights],
    ):  # fmt: skip
        ctx.set_materialize_grads(False)
        q = query.unsqueeze(1)  # B x 1 x H
        key_step = source.keys.record(q)
        scale, rows = source.scale, source.window  # B x 1, WindowRows
        local_p = scale is not None
        renormalize = local_p and window.renormalize
        hidden = logit = s = distance = prior = index = None
        position_steps = None
        if local_p:
            p_t, (hidden, logit, s), position_steps = position_step(
                query, w_p, v_p, scale, position
            )  # B x 1: eq. (9)
            mid = torch.floor(p_t + 0.5 if window.round_centre else p_t)  # B x 1
        elif window.span is not None:  # local-m: p_t = t, clipped to the sentence
            p_t, mid = window.centre(q, steps, src_lengths)  # B x 1 each
        else:
            p_t = query.new_zeros(query.size(0), 1)  # B x 1: global attention has none
        if rows is None:  # every position: S
            positions = source.positions  # S
            scores = q.bmm(keys_t).squeeze(1)  # B x S: z_t(s), eq. (8)
            excluded = src_pad_mask  # B x S
            if window.span is not None:
                outside = (positions - mid).abs_() > window.window_size  # B x S
                excluded = excluded | outside  # B x S
        else:  # the window's W positions (windows.py's span)
            at = mid.long() + rows.offsets  # B x W: mid - D .. mid + D
            excluded = (at < 0) | (at >= src_lengths.unsqueeze(1))  # B x W: outside the sentence
            index = at.clamp(0, values.size(1) - 1)  # B x W
            keys_w = take_positions(rows.keys, index, rows.first_row)  # B x W x K
            # B x 1 x K times the window's keys transposed: the B x W x K by B x K x 1 form
            # of this product ran several times slower on a CPU
            scores = q.bmm(keys_w.transpose(1, 2)).squeeze(1)  # B x W: z_t(s), eq. (8)
            positions = at  # B x W
        z = scores  # B x (S|W)
        if local_p:
            distance = positions.to(p_t.dtype) - p_t  # B x (S|W): s - p_t
            log_g = distance.square().mul_(-0.5 / window.sigma**2)  # log G, eq. (10)
            if renormalize:
                z = z + log_g  # softmax(z + log G) = softmax(z) · G / Σ
            else:
                prior = log_g.exp_()  # B x (S|W): G
        z = z.masked_fill(excluded, float("-inf"))  # B x (S|W)
        a = torch.softmax(z, dim=-1, dtype=at_least_fp32(z.dtype)).to(scores.dtype)
        probs = a if prior is None else a * prior  # B x (S|W)
        if rows is None:
            context = probs.unsqueeze(1).bmm(values).squeeze(1)  # B x E: c_t
        else:
            values_w = take_positions(values, index, rows.first_row)  # B x W x E
            context = probs.unsqueeze(1).bmm(values_w).squeeze(1)  # B x E: c_t
            # clamped copies of an edge position weigh 0: adding keeps the true one
            probs = _scatter(probs, index, values.size(1))  # B x S
        value_step = source.values.record(probs.unsqueeze(1))
        ctx.save_for_backward(
            keys_t, values, a, prior, distance, w_p, v_p, hidden, logit, s, scale, index
        )  # fmt: skip
        ctx.meta = _Saved(
            local_p, renormalize, window.sigma if local_p else 0.0,
            window.logit_bound if local_p else 0.0, local_p and window.detach_query,
            query.dtype, key_step, value_step, position_steps, rows is not None,
        )  # fmt: skip
        ctx.source, ctx.position = source, position
        if not local_p:
            ctx.mark_non_differentiable(p_t)
        return context, probs, p_t

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_context, grad_probs, grad_p_t):
        saved_tensors = ctx.saved_tensors
        keys_t, values, a, prior, distance, w_p, v_p, hidden, logit, s, scale, index = saved_tensors
        saved, source = ctx.meta, ctx.source
        none = (None,) * 10
        keys_w = values_w = None  # B x W x K, B x W x E: the gathered form's rows, again
        if saved.gathered:
            first_row = source.window.first_row  # B x 1
            keys_w = take_positions(source.window.keys, index, first_row)
            values_w = take_positions(values, index, first_row)
        grad = None  # B x (S|W): ∂L/∂probs
        if grad_context is not None:
            source.values.record_grad(saved.value_step, grad_context.unsqueeze(1))  # B x 1 x E
            if saved.gathered:
                grad = grad_context.unsqueeze(1).bmm(values_w.transpose(1, 2)).squeeze(1)  # B x W
            else:
                grad = grad_context.unsqueeze(1).bmm(values.transpose(1, 2)).squeeze(1)  # B x S
        if grad_probs is not None:
            if saved.gathered:  # the map's rows are scattered from the window's
                grad_probs = grad_probs.gather(1, index)  # B x W
            grad = grad_probs if grad is None else grad + grad_probs
        grad_p = grad_p_t if saved.local_p else None  # B x 1: ∂L/∂p_t
        grad_query = None
        if grad is not None:
            grad_a = grad if prior is None else grad * prior  # B x (S|W)
            grad_z = a * (grad_a - (a * grad_a).sum(-1, keepdim=True))  # B x (S|W): softmax
            if saved.gathered:
                source.keys.record_grad(
                    saved.key_step, _scatter(grad_z, index, values.size(1)).unsqueeze(1)
                )  # B x 1 x S
                grad_query = grad_z.unsqueeze(1).bmm(keys_w).squeeze(1)  # B x H
            else:
                source.keys.record_grad(saved.key_step, grad_z.unsqueeze(1))  # B x 1 x S
                grad_query = grad_z.unsqueeze(1).bmm(keys_t.transpose(1, 2)).squeeze(1)  # B x H
            if saved.local_p:
                # ∂ log G / ∂p_t = (s - p_t) / σ²; G's own gradient is G times that
                grad_log_g = grad_z if saved.renormalize else grad * a * prior  # B x (S|W)
                from_g = torch.linalg.vecdot(grad_log_g, distance).unsqueeze(1) / saved.sigma**2
                grad_p = from_g if grad_p is None else grad_p + from_g  # B x 1
        if grad_p is not None:
            # B x H, or None with --position-detach-query
            from_p = position_step_grad(
                grad_p, w_p, v_p, (hidden, logit, s), scale, saved.bound, ctx.position,
                saved.position_steps, saved.detach_query, saved.query_dtype,
            )  # fmt: skip
            if from_p is not None:
                grad_query = from_p if grad_query is None else grad_query + from_p
        return (grad_query, *none)


def _scatter(x: Tensor, index: Tensor, src_len: int) -> Tensor:
    """A B x W row of the window's positions as a B x S row of the source's, 0 elsewhere
    (clamped copies of an edge position add their 0 to it)."""
    return x.new_zeros(x.size(0), src_len).scatter_add_(1, index, x)  # B x S
