"""The GRU of Bahdanau et al. (2015), Appendix A.2.1, as the paper writes it.

    z_i = σ(W_z x_i + U_z h_{i-1} + b_z)            update gate
    r_i = σ(W_r x_i + U_r h_{i-1} + b_r)            reset gate
    h̃_i = tanh(W x_i + U [r_i ∘ h_{i-1}] + b)       candidate
    h_i = (1 - z_i) ∘ h_{i-1} + z_i ∘ h̃_i,  h_0 = 0

The reset gate multiplies h_{i-1} *before* U. torch.nn.GRU (and cuDNN) apply it
after, tanh(W x + b + r ∘ (U h + b_U)), a different function: hence this cell.
The paper omits biases "to make the equations less cluttered"; each gate has
one here, in the input projection, zero at init (Appendix B).

The input projections of every time step are one matmul (``project``); only
the recurrence loops (``step``). The decoder adds its context term C c_i to
the projection before each step (bahdanau_decoder.py).

Parameters, stacked on the output dim in the order (candidate, update, reset):
    W     n_in -> 3n, bias    [W; W_z; W_r] x + [b; b_z; b_r]
    U_zr  n -> 2n, no bias    [U_z; U_r]
    U     n -> n, no bias

Shape legend: B batch, S sequence len (padded), C input dim, n hidden size.
"""

from typing import List, Tuple

import torch
import torch.nn as nn
from torch import Tensor

from .precision import at_least_fp32


class PaperGRU(nn.Module):
    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.hidden_size = hidden_size
        self.W = nn.Linear(input_size, 3 * hidden_size)  # [W; W_z; W_r], [b; b_z; b_r]
        self.U_zr = nn.Linear(hidden_size, 2 * hidden_size, bias=False)  # [U_z; U_r]
        self.U = nn.Linear(hidden_size, hidden_size, bias=False)

    def recurrent_blocks(self) -> List[Tensor]:
        """The n x n matrices U, U_z, U_r (views), for the orthogonal init."""
        return [self.U.weight.data, *self.U_zr.weight.data.split(self.hidden_size)]

    def project(self, x: Tensor) -> Tensor:
        return self.W(x)  # ... x 3n: [W x + b; W_z x + b_z; W_r x + b_r]

    def step(self, x_proj: Tensor, h: Tensor) -> Tensor:
        """One step from the projected input (B x 3n) and h_{i-1} (B x n)."""
        state = at_least_fp32(h.dtype)  # the gates and h_i in fp32 under bf16 (precision.py)
        cand_in, update_in, reset_in = x_proj.to(state).chunk(3, dim=-1)  # B x n each
        update_h, reset_h = self.U_zr(h).to(state).chunk(2, dim=-1)  # B x n each
        z = torch.sigmoid(update_in + update_h)  # z_i
        r = torch.sigmoid(reset_in + reset_h)  # r_i
        h_tilde = torch.tanh(cand_in + self.U(r * h).to(state))  # h̃_i
        return (1 - z) * h + z * h_tilde  # B x n: h_i

    def forward(self, x: Tensor, lengths: Tensor, reverse: bool = False) -> Tuple[Tensor, Tensor]:
        """Run over right-padded x (B x S x C), each row only over its S_b tokens.

        The state is frozen past each sentence's end, so padding never enters
        it; right to left (``reverse``) it stays h_0 = 0 over the padding and
        starts at each sentence's own last token. Returns the states (B x S x n,
        zero on padding) and the final state (B x n): h at the last token, or
        with ``reverse`` at the first.
        """
        B, S, _ = x.shape
        x_proj = self.project(x)  # B x S x 3n, every step in one matmul
        positions = torch.arange(S, device=x.device)
        valid = positions.unsqueeze(0) < lengths.unsqueeze(1)  # B x S
        valid = valid.unsqueeze(-1)  # B x S x 1
        h = x.new_zeros(B, self.hidden_size)  # B x n: h_0
        states = [None] * S
        for t in reversed(range(S)) if reverse else range(S):
            h_new = self.step(x_proj[:, t], h)  # B x n
            h = torch.where(valid[:, t], h_new, h)
            states[t] = h_new.masked_fill(~valid[:, t], 0.0)
        return torch.stack(states, dim=1), h  # B x S x n, B x n
