"""What the plugin's encoders share: the source embedding, the conversion of
``src_tokens`` to true order (source.py), ``encoder_out`` reordering along
each key's documented batch dimension, and the longest source they accept.

The recurrent encoders read a source of any length, so by default they set no
limit of their own (``max_positions()`` is None) and the task's
``--max-source-positions`` of the current run decides, at training and at
decoding time alike. A model with a real maximum (Luong's location score has
one weight row per source position) passes it as ``max_source_positions``.

Shape legend: B batch, S source len (padded).
"""

from typing import Dict, Optional

import torch
import torch.nn as nn
from fairseq.models import FairseqEncoder
from torch import Tensor

from .dropout import named_dropout
from .source import SourceLayout, reorder_batch

# the keys of ``layout_fields`` and their batch dimension
LAYOUT_BATCH_DIMS = {"src_pad_mask": 0, "src_lengths": 0, "src_order": 0}


class SourceEncoder(FairseqEncoder):
    """Subclasses give the batch dimension of each ``encoder_out`` key of their own in
    ``BATCH_DIMS`` (with ``encoder_out``); those of ``layout_fields`` are added here."""

    BATCH_DIMS: Dict[str, int] = {}
    compute_dtype: Optional[torch.dtype] = None  # autocast dtype, precision.py (None: fp32)

    def __init__(
        self,
        dictionary,
        embed_dim: int,
        dropout: float,
        max_source_positions: Optional[int] = None,
    ):
        super().__init__(dictionary)
        self.padding_idx = dictionary.pad()
        self.max_source_positions = max_source_positions
        self.embed_tokens = nn.Embedding(len(dictionary), embed_dim, self.padding_idx)
        self.dropout = named_dropout(dropout, self)

    def layout(self, src_tokens: Tensor) -> SourceLayout:
        layout = SourceLayout.from_tokens(src_tokens, self.padding_idx)
        if src_tokens.is_meta:  # shapes only: no values to check
            return layout
        if src_tokens.numel() == 0 or bool((layout.lengths == 0).any()):
            empty = (layout.lengths == 0).nonzero().flatten().tolist()
            raise ValueError(
                f"src_tokens rows {empty or 'all'} (shape {list(src_tokens.shape)}) hold no "
                "token: every source needs at least its end-of-sentence symbol "
                f"{self.dictionary.eos_word!r} (fairseq appends it, so an empty input line "
                "is the one-token source </s>)"
            )
        return layout

    @staticmethod
    def layout_fields(layout: SourceLayout) -> Dict[str, Tensor]:  # keys: LAYOUT_BATCH_DIMS
        return {
            "src_pad_mask": layout.pad_mask,  # B x S
            "src_lengths": layout.lengths,  # B
            "src_order": layout.order,  # B x S
        }

    def reorder_encoder_out(self, encoder_out: Dict[str, Tensor], new_order: Tensor):
        return reorder_batch(encoder_out, new_order, {**LAYOUT_BATCH_DIMS, **self.BATCH_DIMS})

    def max_positions(self) -> Optional[int]:
        return self.max_source_positions  # None: no limit of the model's own
