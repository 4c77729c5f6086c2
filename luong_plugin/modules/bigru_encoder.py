"""GRU encoders of Bahdanau et al. (2015): RNNsearch's and the RNNencdec baseline's.

RNNsearch, Appendix A.2.1: a bidirectional GRU (gru.py) over the source
embeddings E x_j (one embedding matrix, two sets of GRU weights):

    h→_j = GRU→(E x_j, h→_{j-1}),  h←_j = GRU←(E x_j, h←_{j+1}),  h→_0 = h←_{T_x+1} = 0
    h_j  = [h→_j; h←_j]                                   the annotation of word j

The decoder starts from h←_1, the backward state at the first word.

RNNencdec (Cho et al. 2014, the paper's baseline; ``bidirectional=False``): one
left-to-right GRU and the summary c = tanh(V h_{T_x}) of its state at each
sentence's own last token.

Both run in true order (source.py): each row's real tokens first, then padding,
so that every direction reads exactly S_b tokens whatever the padding side.

encoder_out (a dict, every tensor batch-first):
    encoder_out     B x S x A   annotations h_j, true order, zero on padding
                                (A = 2n bidirectional, n otherwise)
    src_pad_mask    B x S       True on padding (true order)
    src_lengths     B           S_b
    src_order       B x S       true position -> column of src_tokens
    first_backward  B x n       h←_1 (bidirectional only)
    summary         B x n       c = tanh(V h→_{T_x}) (unidirectional only)

Shape legend: B batch, S source len (padded), m embedding dim, n hidden size
per direction, A annotation dim.
"""

from typing import Dict, Optional

import torch
import torch.nn as nn
from torch import Tensor

from .gru import PaperGRU
from .precision import mixed_precision
from .source_encoder import SourceEncoder


class GRUEncoder(SourceEncoder):
    BATCH_DIMS = {
        "encoder_out": 0,  # and SourceEncoder's layout keys
        "first_backward": 0,
        "summary": 0,
    }

    def __init__(
        self,
        dictionary,
        embed_dim: int,
        hidden_size: int,
        bidirectional: bool,
        dropout: float,
        max_source_positions: Optional[int] = None,
    ):
        super().__init__(dictionary, embed_dim, dropout, max_source_positions)
        self.bidirectional = bidirectional
        self.hidden_size = hidden_size
        self.forward_gru = PaperGRU(embed_dim, hidden_size)  # W→, U→, ...
        if bidirectional:
            self.backward_gru = PaperGRU(embed_dim, hidden_size)  # W←, U←, ...
        else:
            self.V = nn.Linear(hidden_size, hidden_size)  # c = tanh(V h_{T_x})
        self.output_dim = 2 * hidden_size if bidirectional else hidden_size

    @mixed_precision
    def forward(self, src_tokens: Tensor, src_lengths: Tensor = None) -> Dict[str, Tensor]:
        layout = self.layout(src_tokens)
        tokens = layout.to_true_order(src_tokens)  # B x S, right-padded
        x = self.dropout(self.embed_tokens(tokens))  # B x S x m: E x_j
        forward_states, last = self.forward_gru(x, layout.lengths)  # B x S x n, B x n
        out = self.layout_fields(layout)
        if self.bidirectional:
            backward_states, first = self.backward_gru(x, layout.lengths, reverse=True)
            annotations = torch.cat([forward_states, backward_states], dim=-1)
            out["encoder_out"] = annotations  # B x S x 2n: h_j = [h→_j; h←_j]
            out["first_backward"] = first  # B x n: h←_1
        else:
            out["encoder_out"] = forward_states  # B x S x n
            out["summary"] = torch.tanh(self.V(last))  # B x n: c
        return out
