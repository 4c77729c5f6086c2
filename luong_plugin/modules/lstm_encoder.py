"""Stacked unidirectional LSTM encoder of Luong et al. (2015), §2.

The encoder reads each sentence left to right, or right to left with
``reverse_source`` (Sutskever et al. 2014; Luong Table 1: +1.3 BLEU), but its
outputs h̄_s are always returned in the original, true source order (source.py),
so that positions p_t, s and location scores refer to the source as written.

encoder_out (a dict, every tensor batch-first except the final states):
    encoder_out    B x S x E   h̄_s, top layer, true order, zero on padding
    src_pad_mask   B x S       True on padding (true order)
    src_lengths    B           S_b
    src_order      B x S       true position -> column of src_tokens
    final_hiddens  L x B x E   last state of each layer (after the whole sentence)
    final_cells    L x B x E

Shape legend: B batch, S source len (padded), C embedding dim, E hidden size, L layers.
"""

from typing import Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .dropout import DropoutLSTM, named_dropout
from .precision import mixed_precision
from .source import gather_positions
from .source_encoder import SourceEncoder

# On a CPU, a batch whose sentences have at most this many distinct lengths runs as one RNN
# call per length over unpadded rows (``run_by_length``), not as one call on a packed batch:
# torch runs a packed batch whose lengths differ through its own step-by-step LSTM, and
# unpadded rows (or a packed batch of one length) through oneDNN's, in bf16 under
# --precision bf16 (docs/SPEED.md, "On a CPU with AMX"). fairseq orders a corpus by source
# length before it cuts batches (LanguagePairDataset.ordered_indices), so a batch's
# sentences have one or a few source lengths. 0: always packed.
LENGTH_GROUPS = 4


def run_packed(rnn: nn.RNNBase, x: Tensor, lengths: Tensor, hidden=None):
    """Run a batch-first RNN over right-padded x, each row only up to its length: one call
    per distinct length on a CPU (up to ``LENGTH_GROUPS``), else one on a packed batch."""
    if hidden is None and x.device.type == "cpu":
        groups, counts = torch.unique(lengths, return_counts=True)  # ascending
        if len(groups) <= LENGTH_GROUPS:
            return run_by_length(rnn, x, lengths, groups.tolist(), counts.tolist())
    packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
    out, final = rnn(packed, hidden)
    out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.size(1))
    return out, final  # B x S x E


def run_by_length(rnn: nn.RNNBase, x: Tensor, lengths: Tensor, groups, counts):
    """``run_packed``'s result (outputs zero on padding, the final states after each row's
    last token) from one call of ``rnn`` per distinct length (``groups``, ascending, with
    ``counts`` rows each), on that length's rows cut to it."""
    S = x.size(1)
    order = torch.argsort(lengths, stable=True)  # B: rows grouped by length, ascending
    outs, finals, start = [], [], 0
    for length, count in zip(groups, counts):
        rows = order[start : start + count]  # n
        start += count
        out, final = rnn(x.index_select(0, rows)[:, :length])  # n x length x E
        outs.append(F.pad(out, (0, 0, 0, S - length)))  # n x S x E, zero on padding
        finals.append(final)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.numel(), device=order.device)  # B: row -> its place
    out = torch.cat(outs).index_select(0, inverse)  # B x S x E
    if isinstance(finals[0], tuple):  # an LSTM's (h, c): L x B x E each
        final = tuple(torch.cat(parts, dim=1).index_select(1, inverse) for parts in zip(*finals))
    else:
        final = torch.cat(finals, dim=1).index_select(1, inverse)
    return out, final


class LuongEncoder(SourceEncoder):
    BATCH_DIMS = {
        "encoder_out": 0,  # and SourceEncoder's layout keys
        "final_hiddens": 1,
        "final_cells": 1,
    }

    def __init__(
        self,
        dictionary,
        embed_dim: int,
        hidden_size: int,
        num_layers: int,
        dropout: float,
        reverse_source: bool,
        max_source_positions: Optional[int] = None,
        reverse_source_eos: bool = False,
        attend_source_eos: bool = False,
        output_dropout: float = 0.0,
    ):
        super().__init__(dictionary, embed_dim, dropout, max_source_positions)
        self.reverse_source = reverse_source
        self.reverse_source_eos = reverse_source_eos
        self.attend_source_eos = attend_source_eos
        self.output_dropout = named_dropout(output_dropout, self)
        self.lstm = DropoutLSTM(
            embed_dim,
            hidden_size,
            num_layers,
            batch_first=True,
            dropout=dropout if num_layers > 1 else 0.0,
            module_name=type(self).__name__,
        )
        self.output_dim = hidden_size

    @mixed_precision
    def forward(self, src_tokens: Tensor, src_lengths: Tensor = None) -> Dict[str, Tensor]:
        layout = self.layout(src_tokens)
        tokens = layout.to_true_order(src_tokens)  # B x S
        words = layout.word_counts(tokens, self.dictionary.eos())  # B
        if self.reverse_source:
            # [w_n .. w_1, </s>]: the words reversed (Sutskever et al.; Luong's code, whose
            # encoder reads no </s>), or [</s>, w_n .. w_1]
            reverse = layout.reversed_index(None if self.reverse_source_eos else words)
            tokens = tokens.gather(1, reverse)  # B x S
        x = self.dropout(self.embed_tokens(tokens))  # B x S x C
        out, (final_hiddens, final_cells) = run_packed(self.lstm, x, layout.lengths)
        if self.reverse_source:
            out = gather_positions(out, reverse)  # back to true order
        attended = layout  # what attention may weigh
        if not self.attend_source_eos:  # the words only; a source of </s> alone keeps it
            attended = layout.first(torch.where(words > 0, words, layout.lengths))
        return {
            "encoder_out": self.output_dropout(out),  # B x S x E
            **self.layout_fields(attended),
            "final_hiddens": final_hiddens,  # L x B x E
            "final_cells": final_cells,
        }
