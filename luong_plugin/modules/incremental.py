"""What the plugin's decoders share: one ``cached_state`` dict per decoder,
reordered by the decoder itself, the output layer's weights cast once per
generation call, and the ``need_attn`` switch of ``make_generation_fast_``."""

from typing import Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from fairseq.models import FairseqIncrementalDecoder
from torch import Tensor

from .options import OptionError
from .precision import product_dtype
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

    def output_linear(self, layer: nn.Linear, features: Tensor, incremental_state=None) -> Tensor:
        """The output layer ``layer(features)``; in incremental decoding under bf16 (or another
        dtype autocast gives the products) with its weight and bias cast once per generation call
        and kept in the incremental state. Autocast would cast them at every decoding step:
        its cache of cast parameters lasts one autocast region, and each step is one
        (``mixed_precision``). For the output layer W (V x O) that cast is a pass over V x O
        at every step. The kept copies have no batch dimension and stay out of
        ``cached_state``, which is reordered."""
        dtype = product_dtype(features)
        if incremental_state is None or torch.is_grad_enabled() or layer.weight.dtype == dtype:
            return layer(features)
        kept = self.get_incremental_state(incremental_state, "output_weights")
        if kept is None:
            kept = {"weight": layer.weight.to(dtype)}
            if layer.bias is not None:
                kept["bias"] = layer.bias.to(dtype)
            self.set_incremental_state(incremental_state, "output_weights", kept)
        return F.linear(features, kept["weight"], kept.get("bias"))

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
