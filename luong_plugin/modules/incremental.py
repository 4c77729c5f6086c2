"""What the plugin's decoders share: one ``cached_state`` dict per decoder,
reordered by the decoder itself, and the ``need_attn`` switch of
``make_generation_fast_``."""

from typing import Dict, Optional

import torch
from fairseq.models import FairseqIncrementalDecoder
from torch import Tensor

from .options import OptionError
from .source import reorder_batch


class CachedStateDecoder(FairseqIncrementalDecoder):
    """Subclasses document each key's batch dimension in ``BATCH_DIMS`` and name
    their attention-free variant in ``WITHOUT_ATTENTION``."""

    BATCH_DIMS: Dict[str, int] = {}
    WITHOUT_ATTENTION = ""
    compute_dtype: Optional[torch.dtype] = None  # autocast dtype, precision.py (None: fp32)

    def cached_state(self, incremental_state) -> Optional[Dict[str, Tensor]]:
        return self.get_incremental_state(incremental_state, "cached_state")

    def cache_state(self, incremental_state, state: Dict[str, Tensor]) -> None:
        self.set_incremental_state(incremental_state, "cached_state", state)

    def reorder_incremental_state(self, incremental_state, new_order: Tensor):
        state = self.cached_state(incremental_state)
        if state is not None:
            self.cache_state(incremental_state, reorder_batch(state, new_order, self.BATCH_DIMS))

    def max_positions(self) -> int:
        return self.max_target_positions

    def make_generation_fast_(self, need_attn: bool = False, **kwargs):
        if need_attn and self.attention is None:
            raise OptionError(
                f"--print-alignment needs attention weights; {self.WITHOUT_ATTENTION} has none"
            )
        self.need_attn = bool(need_attn)
