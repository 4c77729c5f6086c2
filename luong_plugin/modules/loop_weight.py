"""A weight multiplied at every step of a recurrence, its gradient as one GEMM.

The input-feeding decoder multiplies the same weights at each of its T steps
(y_t = x_t W + b). Autograd's own backward computes a weight's gradient as T
small products x_tᵀ g_t, each added into an I x N buffer as it comes. A
``LoopWeight`` records the x_t of the forward pass and the g_t = ∂L/∂y_t of the
backward pass and computes, once every g_t is known,

    ∂L/∂W = Σ_t x_tᵀ g_t = [x_0; …; x_{T-1}]ᵀ [g_0; …; g_{T-1}]

as one GEMM over all T·B rows: the same sum, without T accumulations of an
I x N buffer, and one large product instead of T thin ones.

Why the order holds: the steps see W only through ``_Shared`` (the identity), so
autograd runs ``_Shared``'s backward after the backward of every step that used
it; by then the tape holds every g_t. A step whose output got no gradient adds
nothing. Without autograd (generation) it is a plain ``addmm``.

A batched weight works the same way (attention_step.py): W is B x I x N, a matrix
per sentence such as the keys of its source, each step's x_t is B x 1 x I and
∂L/∂W = [x_0 … x_{T-1}]ᵀ [g_0 … g_{T-1}], one B x I x N batched product (no bias).

Shape legend: B batch, I input dim, N output dim, T steps.
"""

from typing import Dict, List, Optional

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable


class _Tape:
    """The x_t of every step (forward) and their g_t (backward), by step."""

    def __init__(self):
        self.inputs: List[Tensor] = []  # T x [B x I]
        self.grads: Dict[int, Tensor] = {}  # step -> B x N


class _Shared(torch.autograd.Function):
    """Identity on W; its backward is the one GEMM over the tape."""

    @staticmethod
    def forward(ctx, weight: Tensor, tape: _Tape) -> Tensor:
        ctx.tape = tape
        return weight.view_as(weight)

    @staticmethod
    @once_differentiable
    def backward(ctx, _unused):
        tape = ctx.tape
        steps = sorted(tape.grads)
        if not steps:
            return None, None
        grads = torch.cat([tape.grads[t] for t in steps], dim=-2)  # (T·B) x N | B x T x N
        inputs = torch.cat([tape.inputs[t] for t in steps], dim=-2).to(grads.dtype)  # .. x I
        tape.grads = {}  # a retained graph refills it
        # I x N | B x I x N (autograd casts it to W's dtype)
        return inputs.transpose(-2, -1).matmul(grads), None


class _StepAddmm(torch.autograd.Function):
    """y_t = bias + x_t W (W from ``_Shared``): records x_t, and g_t in backward."""

    @staticmethod
    def forward(ctx, bias: Optional[Tensor], inputs: Tensor, weight: Tensor, tape: _Tape):
        ctx.save_for_backward(weight)
        ctx.tape, ctx.step = tape, len(tape.inputs)
        ctx.bias_rows = None if bias is None else (bias.dim() == 2 and bias.size(0) > 1)
        tape.inputs.append(inputs.detach())  # no graph: the tape must not hold a cycle
        if bias is None:
            return inputs.matmul(weight)  # B x N | B x 1 x N
        return torch.addmm(bias, inputs, weight)  # B x N

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: Tensor):
        (weight,) = ctx.saved_tensors
        ctx.tape.grads[ctx.step] = grad  # B x N: g_t
        grad_bias = grad_inputs = None
        if ctx.needs_input_grad[0]:
            grad_bias = grad if ctx.bias_rows else grad.sum(0, keepdim=True)
        if ctx.needs_input_grad[1]:
            # under autocast the forward ran in half precision and W may be fp32
            grad_inputs = grad.matmul(weight.transpose(-2, -1).to(grad.dtype))  # B x I | B x 1 x I
        return grad_bias, grad_inputs, None, None


class LoopWeight:
    """``weight_t`` (I x N, already transposed) for one forward pass of a loop.

    ``addmm(bias, x)`` = bias + x W, with ``bias`` B x N, 1 x N, N or None (a
    batched weight, B x I x N, takes None and x B x 1 x I). Build
    one per forward call: the tape lives as long as that call's graph."""

    def __init__(self, weight_t: Tensor):
        self.taped = torch.is_grad_enabled() and weight_t.requires_grad
        self.tape = _Tape() if self.taped else None  # generation: nothing to record
        self.weight_t = _Shared.apply(weight_t, self.tape) if self.taped else weight_t

    def record(self, inputs: Tensor) -> int:
        """For an autograd Function of its own that multiplies ``inputs`` (B x I) by
        the weight in its forward: the step's index, to pass to ``record_grad``."""
        self.tape.inputs.append(inputs.detach())
        return len(self.tape.inputs) - 1

    def record_grad(self, step: int, grad: Tensor) -> None:
        """That Function's backward: the gradient of the step's product, B x N."""
        self.tape.grads[step] = grad

    def addmm(self, bias: Optional[Tensor], inputs: Tensor) -> Tensor:
        if not self.taped:
            if bias is None:
                return inputs.matmul(self.weight_t)  # B x N | B x 1 x N
            return torch.addmm(bias, inputs, self.weight_t)  # B x N
        if bias is not None and bias.dim() == 1:
            bias = bias.unsqueeze(0)  # 1 x N
        return _StepAddmm.apply(bias, inputs, self.weight_t, self.tape)
