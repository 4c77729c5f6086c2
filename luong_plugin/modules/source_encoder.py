"""What the plugin's encoders share: the source embedding, the conversion of
``src_tokens`` to true order (source.py), and ``encoder_out`` reordering along
each key's documented batch dimension."""

from typing import Dict

import torch.nn as nn
from fairseq.models import FairseqEncoder
from torch import Tensor

from .source import SourceLayout, reorder_batch


class SourceEncoder(FairseqEncoder):
    """Subclasses document each ``encoder_out`` key's batch dimension in ``BATCH_DIMS``."""

    BATCH_DIMS: Dict[str, int] = {}

    def __init__(self, dictionary, embed_dim: int, dropout: float, max_source_positions: int):
        super().__init__(dictionary)
        self.padding_idx = dictionary.pad()
        self.max_source_positions = max_source_positions
        self.embed_tokens = nn.Embedding(len(dictionary), embed_dim, self.padding_idx)
        self.dropout = nn.Dropout(dropout)

    def layout(self, src_tokens: Tensor) -> SourceLayout:
        return SourceLayout.from_tokens(src_tokens, self.padding_idx)

    @staticmethod
    def layout_fields(layout: SourceLayout) -> Dict[str, Tensor]:
        return {
            "src_pad_mask": layout.pad_mask,  # B x S
            "src_lengths": layout.lengths,  # B
            "src_order": layout.order,  # B x S
        }

    def reorder_encoder_out(self, encoder_out: Dict[str, Tensor], new_order: Tensor):
        return reorder_batch(encoder_out, new_order, self.BATCH_DIMS)

    def max_positions(self) -> int:
        return self.max_source_positions
