"""GRU decoder with additive attention and a maxout deep output, Bahdanau et
al. (2015), Appendix A.2.2 (RNNsearch), and its no-attention baseline
(RNNencdec, Cho et al. 2014).

    s_0   = tanh(W_s h←_1)                                   (RNNencdec: tanh(V' c))
    e_ij  = v_aᵀ tanh(W_a s_{i-1} + U_a h_j + b_a)           attends from s_{i-1}
    α_ij  = softmax_j(e_ij),  c_i = Σ_j α_ij h_j             (RNNencdec: c_i = c)
    z_i   = σ(W_z E y_{i-1} + U_z s_{i-1} + C_z c_i)
    r_i   = σ(W_r E y_{i-1} + U_r s_{i-1} + C_r c_i)
    s̃_i   = tanh(W E y_{i-1} + U [r_i ∘ s_{i-1}] + C c_i)
    s_i   = (1 - z_i) ∘ s_{i-1} + z_i ∘ s̃_i
    t̃_i   = U_o s_{i-1} + V_o E y_{i-1} + C_o c_i              (or U_o s_i, below)
    t_i   = [max{t̃_{i,2j-1}, t̃_{i,2j}}]_{j=1..l}              maxout.py
    p(y_i) = softmax(W_o t_i)

The additive score is scores.py's ``ConcatScore`` (W_q = W_a, W_k = U_a, v_a);
U_a h_j + b_a is computed once per sentence. Biases, omitted in the paper, are
b_a, the GRU's (gru.py), those of W_s, U_o and W_o, all zero at init.

Readout state (``readout_state``): the paper is not consistent. Appendix
A.2.2 computes t̃_i from s_{i-1} ("previous", the default: the appendix is the
paper's complete specification), so p(y_i) reads c_i and y_{i-1} directly and
s_i only serves the next step; the main text's eq. (4), p(y_i | ...) =
g(y_{i-1}, s_i, c_i), reads s_i ("current"), which makes p(y_i) one GRU step
deeper. Both are offered so either reading can be trained and compared. With
"previous", α_i does not depend on y_{i-1} (s_{i-1} has read y_{<= i-2}). The
authors' released code (GroundHog) orders a step differently again: it attends
from the previous state, then feeds c and the *current* input word into the
GRU, so its attention query for y_i has read y_{i-1}; neither option is that
ordering. The RNNencdec baseline (Cho et al. 2014) reads the new state,
"current", which its named arch sets.

Dropout (``dropout``, 0 in the paper): on the embeddings E y_{i-1} and on t_i
before W_o.

Incremental state (``cached_state``), batch dimension of each key:
    hidden     B x n       (dim 0)   s_{i-1}
    proj_keys  B x S x n'  (dim 0)   U_a h_j + b_a, once per sentence (RNNsearch)
Nothing depends on the position i: with a cached state only the newest token
of the prefix is run, without one the whole prefix.

Shape legend: B batch, T target len, S source len (padded), m embedding dim,
n hidden size, A context dim (annotations h_j, or RNNencdec's c), n' attention
dim, l maxout units, k maxout pool, V vocab.
"""

from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
from torch import Tensor

from .attention import attend
from .dropout import named_dropout
from .gru import PaperGRU
from .incremental import CachedStateDecoder
from .maxout import Maxout
from .options import lookup
from .precision import at_least_fp32, mixed_precision, step_attention_precision
from .scores import ConcatScore
from .source import attention_to_src_layout

ATTENTIONS = {"additive": ConcatScore, "none": None}  # RNNsearch, RNNencdec
READOUT_STATES = {"previous": "s_{i-1}, Appendix A.2.2", "current": "s_i, eq. (4)"}


class BahdanauDecoder(CachedStateDecoder):
    BATCH_DIMS = {"hidden": 0, "proj_keys": 0}
    WITHOUT_ATTENTION = "RNNencdec (--attention none)"

    def __init__(
        self,
        dictionary,
        embed_dim: int,
        hidden_size: int,
        context_dim: int,
        init_source_dim: int,
        attention: Optional[ConcatScore],
        maxout_dim: int,
        maxout_pool: int,
        readout_state: str,
        dropout: float,
        max_target_positions: int,
    ):
        super().__init__(dictionary)
        lookup("--readout-state", READOUT_STATES, readout_state)
        self.attention = attention
        self.readout_state = readout_state
        self.max_target_positions = max_target_positions
        self.need_attn = True
        self.embed_tokens = nn.Embedding(len(dictionary), embed_dim, dictionary.pad())
        self.dropout = named_dropout(dropout, self)
        self.W_s = nn.Linear(init_source_dim, hidden_size)  # RNNencdec: V'
        self.gru = PaperGRU(embed_dim, hidden_size)  # W, W_z, W_r, U, U_z, U_r
        self.C = nn.Linear(context_dim, 3 * hidden_size, bias=False)  # [C; C_z; C_r]
        self.U_o = nn.Linear(hidden_size, maxout_pool * maxout_dim)  # + readout bias
        self.V_o = nn.Linear(embed_dim, maxout_pool * maxout_dim, bias=False)
        self.C_o = nn.Linear(context_dim, maxout_pool * maxout_dim, bias=False)
        self.maxout = Maxout(maxout_pool)
        self.W_o = nn.Linear(maxout_dim, len(dictionary))

    # -- state -------------------------------------------------------------
    def initial_state(self, encoder_out: Dict[str, Tensor]) -> Dict[str, Tensor]:
        if self.attention is None:
            source = encoder_out["summary"]  # B x n: c
        else:
            source = encoder_out["first_backward"]  # B x n: h←_1
        hidden = torch.tanh(self.W_s(source))  # B x n: s_0
        state = {"hidden": hidden.to(at_least_fp32(hidden.dtype))}  # fp32 under bf16
        if self.attention is not None:
            # B x S x n': U_a h_j + b_a (b_a is the score's key bias)
            proj_keys = self.attention.precompute(encoder_out["encoder_out"])
            # fp32 under bf16: a step's attention runs in fp32 (precision.py)
            state["proj_keys"] = proj_keys.to(at_least_fp32(proj_keys.dtype))
        return state

    # -- forward -----------------------------------------------------------
    @mixed_precision
    def forward(
        self,
        prev_output_tokens,
        encoder_out,
        incremental_state=None,
        features_only: bool = False,
        **unused,
    ):
        features, extra = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        if features_only:
            return features, extra
        return self.output_layer(features, incremental_state), extra

    def output_projection(self) -> nn.Linear:
        """The output layer, one linear map of the features (the fused loss reads it)."""
        return self.W_o

    def output_layer(self, features: Tensor, incremental_state=None) -> Tensor:
        # B x T x V: p(y_i) = softmax(W_o t_i)
        return self.output_linear(self.W_o, features, incremental_state)

    @mixed_precision
    def extract_features(self, prev_output_tokens, encoder_out, incremental_state=None):
        state = None
        if incremental_state is not None:
            state = self.cached_state(incremental_state)
        if state is None:
            state = self.initial_state(encoder_out)
        else:
            prev_output_tokens = prev_output_tokens[:, -1:]
        T = prev_output_tokens.size(1)
        embedded = self.dropout(self.embed_tokens(prev_output_tokens))  # B x T x m
        rnn_in = self.gru.project(embedded)  # B x T x 3n: W E y_{i-1} + b, all steps
        if self.attention is None:
            summary = encoder_out["summary"].unsqueeze(1)  # B x 1 x A: c_i = c
            contexts = summary.expand(-1, T, -1)  # B x T x A
            rnn_in = rnn_in + self.C(summary)  # C c, the same at every step

        hidden = state["hidden"]  # B x n: s_{i-1}
        previous, current, step_contexts, probs = [], [], [], []
        for t in range(T):
            x_t = rnn_in[:, t]  # B x 3n
            if self.attention is not None:
                context, prob = self._attend(hidden, state["proj_keys"], encoder_out)
                x_t = x_t + self.C(context)  # + C c_i
                step_contexts.append(context)
                probs.append(prob)
            previous.append(hidden)
            hidden = self.gru.step(x_t, hidden)  # B x n: s_i
            current.append(hidden)
        if self.attention is not None:
            contexts = torch.stack(step_contexts, dim=1)  # B x T x A: c_i

        if incremental_state is not None:
            self.cache_state(incremental_state, dict(state, hidden=hidden))

        readout = previous if self.readout_state == "previous" else current
        readout = torch.stack(readout, dim=1)  # B x T x n
        t_tilde = self.U_o(readout) + self.V_o(embedded) + self.C_o(contexts)
        features = self.dropout(self.maxout(t_tilde))  # B x T x kl -> B x T x l: t_i

        extra = {"attn": [None]}
        if probs and self.need_attn:
            attn = torch.stack(probs, dim=1)  # B x T x S: α_ij, true order
            extra["attn"] = [attention_to_src_layout(attn, encoder_out["src_order"])]
        return features, extra

    def _attend(
        self, hidden: Tensor, proj_keys: Tensor, encoder_out: Dict[str, Tensor]
    ) -> Tuple[Tensor, Tensor]:
        """s_{i-1} (B x n) -> c_i (B x A), α_i (B x S, true order)."""
        query, values = hidden.unsqueeze(1), encoder_out["encoder_out"]  # B x 1 x n, B x S x A
        with step_attention_precision(query, values, self.embed_tokens.weight):
            scores = self.attention(query, proj_keys)  # B x 1 x S: e_ij
            excluded = encoder_out["src_pad_mask"].unsqueeze(1)  # B x 1 x S
            context, prob = attend(scores, excluded, None, values)
        return context.squeeze(1), prob.squeeze(1)  # B x A, B x S
