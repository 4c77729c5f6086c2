"""Local-p's eq. (9) and (10) as autograd nodes, for windows.py's ``LocalPredictiveWindow``
and the fused training step (attention_step.py):

    p_t   = S · σ(v_pᵀ tanh(W_p h_t))          eq. (9)   (PredictedPosition, PositionStep)
    log G = -(s - p_t)² / 2σ²                   eq. (10)  (GaussianPrior)

with their backward written out: ``--position-logit-bound``'s dropped gradients
(``logit_gradient``), and eq. (9)'s step in the decoder's loop with W_p's and v_p's
gradients left to their ``LoopWeight`` tapes (``position_step``, ``position_step_grad``,
which the fused step calls too). The conventions (S, the window, the options) are
windows.py's.

Shape legend: B batch, T target len, S source len (padded), W window width, H query dim.
"""

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .precision import outside_autocast


def logit_gradient(grad: Tensor, logit: Tensor, s: Tensor, scale: Tensor, bound: float):
    """∂L/∂logit from ∂L/∂p_t for p_t = S σ(logit) (s = σ(logit), S = ``scale``), with
    ``--position-logit-bound``: an element beyond ±bound that a descent step (which
    moves the logit by -grad) would push further out gets no gradient."""
    grad_logit = grad * (scale * s * (1 - s))  # ∂p_t/∂logit = S σ (1 - σ)
    if bound > 0:
        outward = (logit.abs() > bound) & (grad_logit * logit < 0)
        grad_logit = grad_logit.masked_fill(outward, 0.0)
    return grad_logit


class PredictedPosition(torch.autograd.Function):
    """p_t = S · σ(logit), eq. (9), as one autograd node (a step of the decoder's
    loop records one node here instead of three); S (``scale``) is
    ``LocalPredictiveWindow.scale``'s.

    ``bound`` B > 0 (``--position-logit-bound``): the forward pass is unchanged;
    backward drops the gradient of every element whose logit lies beyond ±B and
    that a descent step (which moves the logit by -grad) would push further out."""

    @staticmethod
    def forward(ctx, logit: Tensor, scale: Tensor, bound: float) -> Tensor:
        s = torch.sigmoid(logit)  # B x T
        ctx.save_for_backward(logit, s, scale)
        ctx.bound = bound
        return scale * s  # B x T: p_t

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):
        logit, s, scale = ctx.saved_tensors
        return logit_gradient(grad, logit, s, scale, ctx.bound), None, None


def position_step(query: Tensor, w_p: Tensor, v_p: Tensor, scale: Tensor, weights):
    """Eq. (9) for one step of the decoder's loop in training, p_t = S · σ(v_pᵀ tanh(W_p h_t))
    (B x 1) for h_t ``query`` (B x H), with the products' inputs recorded on ``weights``'
    ``LoopWeight``s. Returns p_t, what ``position_step_grad`` reads (tanh(W_p h_t), the
    logit, its sigmoid) and the two tape steps. Inside an autograd Function's forward."""
    x = query.to(w_p.dtype)  # B x H
    # the products in their operands' dtypes, autocast or not (the plain path of a bf16 model
    # runs under it, the fused step outside): h_t W_p in W_p's (luong_loop.position_dtype;
    # autocast would run an fp32 W_p in bf16, casting it at every step), the logit in v_p's
    # fp32 (autocast would run it in bf16)
    with outside_autocast(x.device):
        hidden = torch.tanh(x.mm(w_p)).to(v_p.dtype)  # B x H: tanh(W_p h_t)
        logit = hidden.mm(v_p)  # B x 1
    s = torch.sigmoid(logit)  # B x 1
    steps = (weights.W_p.record(x), weights.v_p.record(hidden))
    return scale * s, (hidden, logit, s), steps  # p_t: B x 1


def position_step_grad(
    grad, w_p, v_p, kept, scale, bound: float, weights, steps, detach_query: bool, query_dtype
):
    """``position_step``'s backward: eq. (9)'s chain rule from ∂L/∂p_t (``grad``, B x 1),
    W_p's and v_p's step gradients recorded on their tapes; returns ∂L/∂h_t (B x H), or
    None with ``--position-detach-query``."""
    hidden, logit, s = kept
    grad_logit = logit_gradient(grad, logit, s, scale, bound)  # B x 1
    step_w, step_v = steps
    weights.v_p.record_grad(step_v, grad_logit)
    grad_pre = grad_logit.mm(v_p.t()) * (1 - hidden * hidden)  # B x H: through tanh
    grad_pre = grad_pre.to(w_p.dtype)
    weights.W_p.record_grad(step_w, grad_pre)
    if detach_query:  # --position-detach-query: h_t gets nothing from eq. (9)
        return None
    return grad_pre.mm(w_p.t()).to(query_dtype)  # B x H


class PositionStep(torch.autograd.Function):
    """Eq. (9) for one step of the decoder's loop in training, one autograd node:
    p_t = S · σ(v_pᵀ tanh(W_p h_t)), h_t B x H, S (``scale``) as in
    ``PredictedPosition``. The products use ``weights``'
    ``LoopWeight``s (inputs recorded, the weight gradients one GEMM each over all
    steps); the backward is eq. (9)'s chain rule written out, with ``bound`` as in
    ``PredictedPosition``. Tested against the plain path (``logit`` + that)."""

    @staticmethod
    def forward(ctx, query, w_p, v_p, scale, bound, weights, detach_query=False):
        p_t, (hidden, logit, s), ctx.steps = position_step(query, w_p, v_p, scale, weights)
        ctx.weights, ctx.bound, ctx.query_dtype = weights, bound, query.dtype
        ctx.detach_query = detach_query
        ctx.save_for_backward(w_p, v_p, hidden, logit, s, scale)
        return p_t  # B x 1

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        w_p, v_p, hidden, logit, s, scale = ctx.saved_tensors
        grad_query = position_step_grad(
            grad, w_p, v_p, (hidden, logit, s), scale, ctx.bound, ctx.weights, ctx.steps,
            ctx.detach_query, ctx.query_dtype,
        )  # fmt: skip
        return grad_query, None, None, None, None, None, None


class GaussianPrior(torch.autograd.Function):
    """Eq. (10)'s G = exp(-(s - p_t)² / 2σ²) at ``positions`` (or its log, with
    ``log``), as one autograd node: ∂ log G / ∂p_t = (s - p_t) / σ²."""

    @staticmethod
    def forward(ctx, p_t: Tensor, positions: Tensor, sigma: float, log: bool) -> Tensor:
        distance = positions - p_t.unsqueeze(-1)  # B x T x (S|W): s - p_t
        out = distance.square().mul_(-0.5 / sigma**2)  # log G
        if not log:
            out = out.exp_()  # G
        ctx.save_for_backward(distance, None if log else out)
        ctx.sigma = sigma
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):
        distance, g = ctx.saved_tensors
        if g is not None:
            grad = grad * g  # ∂G/∂p_t = G · ∂ log G/∂p_t
        grad_p = torch.linalg.vecdot(grad, distance) * (1.0 / ctx.sigma**2)  # B x T
        return grad_p, None, None, None
