"""Luong et al. (2015) attention = score x window, §3.1-3.2.

    a_t(s) = softmax_s(score(h_t, h̄_s)) over the window, times the window prior
    c_t    = Σ_s a_t(s) h̄_s

Shape legend: B batch, T target len, S source len (padded), E encoder dim, H
decoder hidden.
"""

from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
from torch import Tensor

from .scores import build_score
from .windows import build_window


def attend(
    scores: Tensor,
    excluded: Tensor,
    prior: Optional[Tensor],
    values: Tensor,
    renormalize: bool = False,
) -> Tuple[Tensor, Tensor]:
    """The core of every variant as a pure function: mask, softmax, prior, context."""
    scores = scores.masked_fill(excluded, float("-inf"))  # B x T x S
    probs = torch.softmax(scores.float(), dim=-1).type_as(scores)  # B x T x S
    if prior is not None:
        probs = probs * prior  # eq. (10): Gaussian for local-p
    if renormalize:
        probs = probs / probs.sum(dim=-1, keepdim=True)
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
            window, query_dim, window_size=window_size, renormalize=renormalize
        )

    def precompute(self, keys: Tensor) -> Tensor:
        return self.score.precompute(keys)

    def forward(
        self,
        query: Tensor,  # B x T x H: h_t
        proj_keys: Tensor,  # B x S x K, from precompute()
        values: Tensor,  # B x S x E: h̄_s
        src_pad_mask: Tensor,  # B x S, True on padding (true order)
        src_lengths: Tensor,  # B: S_b
        steps: Tensor,  # T: 0-based target positions t
    ) -> Tuple[Tensor, Tensor, Dict[str, Tensor]]:
        scores = self.score(query, proj_keys)  # B x T x S
        outside, prior, extras = self.window(query, steps, src_lengths, values.size(1))
        excluded = src_pad_mask.unsqueeze(1) | outside  # B x T x S
        context, probs = attend(scores, excluded, prior, values, self.window.renormalize)
        return context, probs, extras
