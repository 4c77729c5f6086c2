"""One ``cached_state`` dict per decoder, reordered by the decoder itself."""

from typing import Dict, Optional

from fairseq.models import FairseqIncrementalDecoder
from torch import Tensor

from .source import reorder_batch


class CachedStateDecoder(FairseqIncrementalDecoder):
    """Subclasses document each key's batch dimension in ``BATCH_DIMS``."""

    BATCH_DIMS: Dict[str, int] = {}

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
