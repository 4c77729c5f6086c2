"""Dropout that obeys fairseq's ``--retain-dropout`` and ``--retain-dropout-modules``.

fairseq keeps dropout on at decoding time (Monte-Carlo dropout, for
uncertainty estimates) through ``FairseqDropout``: the generator calls
``make_generation_fast_(retain_dropout=..., retain_dropout_modules=...)`` on
every module, and each ``FairseqDropout`` whose ``module_name`` is listed (or
every one, without a list) stays active in eval mode. ``nn.Dropout`` and
``F.dropout(x, training=self.training)`` ignore the switch, so every dropout of
the plugin is a ``FairseqDropout`` named after the module that owns it (the
encoder's or the decoder's class name, as fairseq's ``lstm`` does).

``nn.LSTM`` applies its own ``dropout`` (between stacked layers) inside the
fused kernel, only when the module is in training mode; ``DropoutLSTM`` runs
that kernel in training mode when its ``FairseqDropout`` is retained, which
changes nothing else (an LSTM has no other train/eval difference).
"""

import torch.nn as nn
from fairseq.modules import FairseqDropout


def named_dropout(p: float, owner: nn.Module) -> FairseqDropout:
    """A FairseqDropout that ``--retain-dropout-modules`` selects by the owner's class name."""
    return FairseqDropout(p, module_name=type(owner).__name__)


class DropoutLSTM(nn.LSTM):
    """``nn.LSTM`` whose dropout between stacked layers (``self.between_layers``,
    p = ``dropout``) is retained at decoding time like every FairseqDropout."""

    def __init__(self, *args, module_name: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.between_layers = FairseqDropout(self.dropout, module_name=module_name)

    def forward(self, input, hx=None):
        if self.training or not self.between_layers.apply_during_inference:
            return super().forward(input, hx)
        self.training = True  # the fused kernel drops out only in training mode
        try:
            return super().forward(input, hx)
        finally:
            self.training = False
