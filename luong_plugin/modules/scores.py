"""Luong et al. (2015) score functions, eq. (8) and the location score.

    dot       score(h_t, h̄_s) = h_tᵀ h̄_s
    general   score(h_t, h̄_s) = h_tᵀ W_a h̄_s
    concat    score(h_t, h̄_s) = v_aᵀ tanh(W_a [h_t; h̄_s])
    location  a_t = softmax(W_a h_t)              (a score per source position)

``concat`` is also Bahdanau et al.'s additive alignment model
e_ij = v_aᵀ tanh(W_a s_{i-1} + U_a h_j) (Appendix A.2.2): splitting W_a over
[h_t; h̄_s] gives W_q h_t + W_k h̄_s, so both models share ``ConcatScore``.

Scores are stateless: ``precompute(keys)`` projects the encoder states once per
sentence and the caller passes the result back in at every step.

``forward(query, proj_keys)`` scores every source position (B x T x S);
``forward(query, proj_keys, index)`` only some: ``index`` a ``slice`` of
positions shared by the whole batch (U of them: B x T x U), or a B x T x W
tensor of positions (a local window's 2D + 1 positions, see windows.py:
B x T x W).

Shape legend: B batch, T target len, S source len (padded), E key dim (encoder
output), H query dim (decoder hidden), A concat/additive hidden dim, W window
width (2D + 1).
"""

from typing import Optional, Union

import torch
import torch.nn as nn
from torch import Tensor

from .options import OptionError, lookup

# which positions to score: None (all S), a slice (U, the same for the whole
# batch) or a B x T x W tensor (W per step)
Index = Optional[Union[slice, Tensor]]
ALL = slice(None)


def take_positions(x: Tensor, index: Tensor, first_row: Optional[Tensor] = None) -> Tensor:
    """x[b, index[b, ...]] for a B x S x K tensor and a B x ... index (B x T x W, or one
    step's B x W): the index's shape x K.

    Whole rows by ``index_select`` on the flattened B·S x K rows (a gather per
    element costs ~10x more). ``first_row``: b · S, shaped to broadcast against the index,
    for a caller that takes positions at every step (attention_step.py) and computes it once."""
    B, S, K = x.shape
    if first_row is None:
        first_row = torch.arange(B, device=index.device).view(B, *(1,) * (index.dim() - 1)) * S
    rows = (index + first_row).reshape(-1)  # B·T·W | B·W
    return x.reshape(B * S, K).index_select(0, rows).view(*index.shape, K)


class _BilinearScore(nn.Module):
    """h_tᵀ k_s for precomputed keys k_s (dot: h̄_s, general: W_a h̄_s)."""

    def precompute(self, keys: Tensor) -> Tensor:
        raise NotImplementedError

    def forward(self, query: Tensor, proj_keys: Tensor, index: Index = None):
        if not torch.is_tensor(index):  # all S, or a slice of U
            keys = proj_keys[:, index or ALL]  # B x (S|U) x K
            return torch.bmm(query, keys.transpose(1, 2))  # B x T x (S|U)
        keys = take_positions(proj_keys, index)  # B x T x W x K
        return (keys * query.unsqueeze(2)).sum(-1)  # B x T x W


class DotScore(_BilinearScore):
    OPTIONS = ()  # build_score's options this score takes

    def __init__(self, query_dim: int, key_dim: int):
        super().__init__()
        if query_dim != key_dim:
            raise OptionError(
                "--attention-score dot needs the decoder and encoder hidden sizes to "
                f"match, got decoder {query_dim} and encoder {key_dim}; use 'general' "
                "or 'concat' for different sizes"
            )

    def precompute(self, keys: Tensor) -> Tensor:
        return keys  # B x S x E: h̄_s


class GeneralScore(_BilinearScore):
    OPTIONS = ()

    def __init__(self, query_dim: int, key_dim: int):
        super().__init__()
        self.W_a = nn.Linear(key_dim, query_dim, bias=False)

    def precompute(self, keys: Tensor) -> Tensor:
        return self.W_a(keys)  # B x S x H: W_a h̄_s


class ConcatScore(nn.Module):
    """v_aᵀ tanh(W_q q + W_k k [+ b]), Luong's concat = Bahdanau's additive score.

    ``key_bias`` adds the bias b inside the tanh (Bahdanau's equations omit biases
    for clarity, the model has them); it rides on the precomputed keys."""

    OPTIONS = ("attention_dim",)

    def __init__(
        self, query_dim: int, key_dim: int, attention_dim: int = 0, key_bias: bool = False
    ):
        super().__init__()
        attention_dim = attention_dim or query_dim
        self.W_q = nn.Linear(query_dim, attention_dim, bias=False)  # W_a (Bahdanau)
        self.W_k = nn.Linear(key_dim, attention_dim, bias=key_bias)  # U_a (Bahdanau)
        self.v_a = nn.Linear(attention_dim, 1, bias=False)

    def precompute(self, keys: Tensor) -> Tensor:
        return self.W_k(keys)  # B x S x A: U_a h_j [+ b_a], once per sentence

    def forward(self, query: Tensor, proj_keys: Tensor, index: Index = None):
        if not torch.is_tensor(index):  # all S, or a slice of U
            keys = proj_keys[:, index or ALL].unsqueeze(1)  # B x 1 x (S|U) x A
        else:
            keys = take_positions(proj_keys, index)  # B x T x W x A
        hidden = torch.tanh(self.W_q(query).unsqueeze(2) + keys)  # B x T x (S|U|W) x A
        return self.v_a(hidden).squeeze(-1)  # B x T x (S|U|W)


class LocationScore(nn.Module):
    """a_t = softmax(W_a h_t) over a fixed maximum source length.

    W_a has one row per source position up to ``--max-source-positions``; a
    batch of length S uses rows 0 .. S-1 (true positions, see source.py) and
    the positions beyond each sentence are masked like padding. A longer source
    is rejected: the model has no weight for its positions.
    """

    OPTIONS = ("max_source_positions",)

    def __init__(self, query_dim: int, key_dim: int, max_source_positions: int = 0):
        super().__init__()
        if max_source_positions <= 0:
            raise OptionError(
                "--attention-score location needs --max-source-positions > 0, "
                f"got {max_source_positions}"
            )
        self.max_source_positions = max_source_positions
        self.W_a = nn.Linear(query_dim, max_source_positions, bias=False)

    def precompute(self, keys: Tensor) -> Tensor:
        return keys  # B x S x E, only its length is used

    def forward(self, query: Tensor, proj_keys: Tensor, index: Index = None):
        S = proj_keys.size(1)
        if S > self.max_source_positions:
            raise OptionError(
                f"source length {S} exceeds --max-source-positions "
                f"{self.max_source_positions}, the number of positions the location "
                "score (--attention-score location) was built for"
            )
        scores = self.W_a(query)[:, :, :S]  # B x T x S
        if not torch.is_tensor(index):  # all S, or a slice of U
            return scores[:, :, index or ALL]  # B x T x (S|U)
        return scores.gather(2, index)  # B x T x W


SCORES = {
    "dot": DotScore,
    "general": GeneralScore,
    "concat": ConcatScore,
    "location": LocationScore,
}


def build_score(name: str, query_dim: int, key_dim: int, **options) -> nn.Module:
    """The score ``name``, given those of ``options`` it takes (its ``OPTIONS``)."""
    score = lookup("--attention-score", SCORES, name)
    return score(query_dim, key_dim, **{k: v for k, v in options.items() if k in score.OPTIONS})
