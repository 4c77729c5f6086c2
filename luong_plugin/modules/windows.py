"""Luong et al. (2015) attention windows, §3.2.

    global   every source position
    local-m  p_t = t (monotonic), window [p_t - D, p_t + D]
    local-p  p_t = S_b · sigmoid(v_pᵀ tanh(W_p h_t))              eq. (9)
             a_t(s) = align(h_t, h̄_s) · exp(-(s - p_t)² / 2σ²), σ = D/2   eq. (10)

Conventions (true source positions, see source.py):
- positions s and target steps t are 0-based; the first target step is t = 0;
- local-m centres on min(t, S_b - 1), so a target longer than its source keeps
  attending to the last source word (the window is never empty);
- local-p keeps the real-valued p_t in [0, S_b] for the Gaussian, so W_p and v_p
  get gradients, and takes the 2D + 1 integer positions around floor(p_t + 0.5)
  as the window; the window always overlaps the sentence because D >= 1;
- the Gaussian is applied after the softmax and the result is *not*
  renormalised (as in Luong's code); ``renormalize=True`` divides by the sum.

Every window returns the same types: ``outside`` (B x T x S, True where
excluded), ``prior`` (B x T x S multiplier applied after the softmax) and a dict
of extras (``p_t``, B x T, for the local windows).

Shape legend: B batch, T target len, S source len (padded), H query dim, D window half-width.
"""

import torch
import torch.nn as nn
from torch import Tensor

from .options import lookup, require_positive


def _positions(src_len: int, like: Tensor) -> Tensor:
    return torch.arange(src_len, device=like.device)  # S


class GlobalWindow(nn.Module):
    renormalize = False

    def __init__(self, query_dim: int, window_size: int = 0, **unused):
        super().__init__()

    def forward(self, query: Tensor, steps: Tensor, src_lengths: Tensor, src_len: int):
        B, T = query.shape[:2]
        outside = query.new_zeros((1, 1, 1), dtype=torch.bool).expand(B, T, src_len)
        prior = query.new_ones((1, 1, 1)).expand(B, T, src_len)
        return outside, prior, {}


def _outside(center: Tensor, positions: Tensor, window_size: int) -> Tensor:
    return (positions - center.unsqueeze(-1)).abs() > window_size  # B x T x S


class LocalMonotonicWindow(nn.Module):
    renormalize = False

    def __init__(self, query_dim: int, window_size: int = 10, **unused):
        super().__init__()
        require_positive("--window-size", window_size)
        self.window_size = window_size

    def forward(self, query: Tensor, steps: Tensor, src_lengths: Tensor, src_len: int):
        center = torch.minimum(
            steps.unsqueeze(0), (src_lengths - 1).unsqueeze(1)
        )  # B x T: p_t = t, clipped to the sentence
        outside = _outside(center, _positions(src_len, query), self.window_size)
        prior = query.new_ones((1, 1, 1)).expand_as(outside)
        return outside, prior, {"p_t": center.type_as(query)}


class LocalPredictiveWindow(nn.Module):
    def __init__(
        self, query_dim: int, window_size: int = 10, renormalize: bool = False, **unused
    ):
        super().__init__()
        require_positive("--window-size", window_size)
        self.window_size = window_size
        self.sigma = window_size / 2.0
        self.renormalize = renormalize
        self.W_p = nn.Linear(query_dim, query_dim, bias=False)
        self.v_p = nn.Linear(query_dim, 1, bias=False)

    def forward(self, query: Tensor, steps: Tensor, src_lengths: Tensor, src_len: int):
        gate = torch.sigmoid(self.v_p(torch.tanh(self.W_p(query)))).squeeze(-1)
        center = src_lengths.unsqueeze(1).type_as(query) * gate  # B x T: p_t, eq. (9)
        positions = _positions(src_len, query)
        outside = _outside(torch.floor(center + 0.5), positions, self.window_size)
        distance = positions.type_as(query) - center.unsqueeze(-1)  # B x T x S
        prior = torch.exp(-distance.pow(2) / (2 * self.sigma**2))  # eq. (10)
        return outside, prior, {"p_t": center}


WINDOWS = {
    "global": GlobalWindow,
    "local-m": LocalMonotonicWindow,
    "local-p": LocalPredictiveWindow,
}


def build_window(name: str, query_dim: int, **kwargs) -> nn.Module:
    return lookup("--attention-window", WINDOWS, name)(query_dim, **kwargs)


