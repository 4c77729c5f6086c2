"""Source positions independent of the padding side.

fairseq left-pads sources by default, others right-pad, and users may hand the
model either. Position-dependent attention (local-m, local-p, location) is only
right on *true* source positions s = 0 .. S_b - 1 of each sentence, so the
encoder converts its input once, here, to "true order": each row's real tokens
first, in their original order, then padding. Everything downstream works in
true order; attention maps are scattered back to the layout of ``src_tokens``
so fairseq's ``extract_hard_alignment`` and ``--replace-unk`` index the right
column.

Shape legend: B batch, T target len, S source len (padded).
"""

from dataclasses import dataclass, replace
from typing import Optional

import torch
from torch import Tensor


@dataclass
class SourceLayout:
    order: Tensor  # B x S: true position s -> column of src_tokens
    lengths: Tensor  # B: S_b, real tokens (EOS included)
    pad_mask: Tensor  # B x S, True on padding, in true order (right-padded)

    @classmethod
    def from_tokens(cls, src_tokens: Tensor, padding_idx: int) -> "SourceLayout":
        is_pad = src_tokens.eq(padding_idx)  # B x S
        # a stable sort on the pad flag moves real tokens first, keeping their order
        order = torch.sort(is_pad.to(torch.uint8), dim=1, stable=True).indices
        lengths = (~is_pad).sum(dim=1)  # B
        return cls(order=order, lengths=lengths, pad_mask=beyond(lengths, src_tokens.size(1)))

    def first(self, counts: Tensor) -> "SourceLayout":
        """The layout of each sentence's first ``counts`` (B) true positions only: the
        rest counts as padding (the order of ``src_tokens`` is kept)."""
        return replace(self, lengths=counts, pad_mask=beyond(counts, self.pad_mask.size(1)))

    def to_true_order(self, src_tokens: Tensor) -> Tensor:
        return src_tokens.gather(1, self.order)  # B x S

    def reversed_index(self, lengths: Optional[Tensor] = None) -> Tensor:
        """Index that reverses the first ``lengths`` (B, default S_b) positions of
        each sentence and leaves the rest in place (an involution)."""
        lengths = self.lengths if lengths is None else lengths
        S = self.pad_mask.size(1)
        positions = torch.arange(S, device=self.lengths.device).expand_as(self.order)
        reverse = lengths.unsqueeze(1) - 1 - positions  # B x S
        return torch.where(positions < lengths.unsqueeze(1), reverse, positions)

    def word_counts(self, tokens: Tensor, eos: int) -> Tensor:
        """B: the tokens before a sentence's final ``eos`` (S_b - 1 where the true-order
        ``tokens`` end with it, S_b otherwise)."""
        last = tokens.gather(1, (self.lengths - 1).clamp(min=0).unsqueeze(1)).squeeze(1)  # B
        return self.lengths - last.eq(eos).long()


def beyond(lengths: Tensor, size: int) -> Tensor:
    """B x size, True at positions s >= lengths[b]."""
    positions = torch.arange(size, device=lengths.device)  # S
    return positions.unsqueeze(0) >= lengths.unsqueeze(1)  # B x S


def gather_positions(x: Tensor, index: Tensor) -> Tensor:
    """x[b, index[b, s]] for a B x S x C tensor and a B x S index."""
    return x.gather(1, index.unsqueeze(-1).expand(-1, -1, x.size(-1)))


def attention_to_src_layout(attn: Tensor, order: Tensor) -> Tensor:
    """Scatter a B x T x S map from true order to the columns of src_tokens."""
    index = order.unsqueeze(1).expand(-1, attn.size(1), -1)  # B x T x S
    return attn.new_zeros(attn.shape).scatter_(2, index, attn)


def reorder_batch(state: dict, new_order: Tensor, batch_dims: dict) -> dict:
    """index_select every tensor of ``state`` along its documented batch dim."""
    return {
        key: value.index_select(batch_dims[key], new_order) if isinstance(value, Tensor) else value
        for key, value in state.items()
    }
