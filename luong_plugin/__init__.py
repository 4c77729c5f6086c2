"""luong_plugin: Luong et al. (2015) and Bahdanau et al. (2015) for fairseq.

``import luong_plugin`` and ``--user-dir luong_plugin`` both register the models
and the fused loss (the same module either way, so never twice).
"""

from . import checkpoint_atomic  # noqa: F401  (checkpoint_last.pt replaced in one step)
from . import checkpoint_safety  # noqa: F401  (allow-lists checkpoint globals)
from . import criterions  # noqa: F401
from . import fairseq_fixes  # noqa: F401  (--replace-unk, diverse beam search, --print-step)
from . import models  # noqa: F401

__version__ = "0.1.0"
