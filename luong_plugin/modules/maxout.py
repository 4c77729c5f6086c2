"""Maxout (Goodfellow et al. 2013), the deep output of Bahdanau et al. (2015).

    t_i = [max{t̃_{i,2j-1}, t̃_{i,2j}}]_{j=1..l}      Appendix A.2.2, pool size 2

Each group of ``pool_size`` adjacent units of t̃ (size pool_size · l) keeps its
maximum. The linear map that produces t̃ lives with its inputs (the decoder).

Shape legend: l output units, k pool size.
"""

import torch.nn as nn
from torch import Tensor

from .options import OptionError, require_positive


class Maxout(nn.Module):
    def __init__(self, pool_size: int = 2):
        super().__init__()
        require_positive("--maxout-pool", pool_size)
        self.pool_size = pool_size

    def forward(self, x: Tensor) -> Tensor:
        if x.size(-1) % self.pool_size:
            raise OptionError(
                f"Maxout input size {x.size(-1)} is not divisible by --maxout-pool "
                f"{self.pool_size}"
            )
        groups = x.unflatten(-1, (-1, self.pool_size))  # ... x l x k
        return groups.max(dim=-1).values  # ... x l

    def extra_repr(self) -> str:
        return f"pool_size={self.pool_size}"
