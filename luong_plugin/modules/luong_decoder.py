"""Stacked LSTM decoder of Luong et al. (2015) with global or local attention.

    h_t    = LSTM(y_{t-1} [; h̃_{t-1}], h_{t-1})     §2, input feeding §3.3
    c_t    = attention(h_t, h̄)                        §3.1-3.2 (attention.py)
    h̃_t    = tanh(W_c [c_t; h_t])                    eq. (5)
    p(y_t) = softmax(W_s h̃_t)                        eq. (6)

Without attention (the paper's "Base", ``attention=None``): p(y_t) = softmax(W_s h_t).

The decoder starts from the encoder's final (h, c) of every layer and h̃_0 = 0.

Two implementations:
- without input feeding nothing depends on the previous step's attention, so
  the LSTM (``nn.LSTM``, fused) runs over the whole target at once and
  attention for all steps is one batched product;
- with input feeding the LSTM must run step by step: ``paper_loop`` below is
  that loop as the paper reads (the oracle the tests hold the fast one to), and
  luong_loop.py runs it fast (gates precomputed, weights concatenated once per
  call, gradients as one GEMM over all steps), which is what ``forward`` uses.

Dropout (``--dropout``, ``dropout_placement``), always on the embeddings and
between stacked layers, and:
    zaremba  on h̃_t before W_s; the input feed carries h̃_t itself (Zaremba et
             al. 2014: every non-recurrent connection);
    luong    on the input feed at the LSTM's input (Luong's code drops the
             whole input [y_{t-1}; h̃_{t-1}] of every layer) and not before W_s;
    fairseq  on h̃_t once, and the dropped h̃_t goes to W_s and is fed back
             (fairseq's ``lstm``; its encoder also drops its outputs).

Incremental state (``cached_state``), batch dimension of each key:
    hidden      L x B x H   (dim 1)
    cell        L x B x H   (dim 1)
    input_feed  B x O       (dim 0)   h̃_{t-1}
    proj_keys   B x S x K   (dim 0)   the score's projection of h̄, once per sentence
The step t is derived from the prefix length, never counted. Without autograd the
input-feeding path also keeps its concatenated LSTM weights there, under a key of
their own (``step_weights``, no batch dimension, never reordered).

Shape legend: B batch, T target len, S source len (padded), C embedding dim,
E encoder dim, H decoder hidden, O attentional hidden (h̃) dim, V vocab, L layers.
"""

from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
from torch import Tensor

from . import luong_loop
from .attention import LuongAttention
from .attention_step import StepSource, fused_step, runs_fused
from .dropout import DropoutLSTM, named_dropout
from .incremental import CachedStateDecoder
from .loop_weight import LoopWeight
from .precision import (
    at_least_fp32,
    full_precision,
    mixed_precision,
    run_dtype,
    step_attention_precision,
)
from .source import attention_to_src_layout
from .windows import PositionWeights


class LuongDecoder(CachedStateDecoder):
    BATCH_DIMS = {"hidden": 1, "cell": 1, "input_feed": 0, "proj_keys": 0}
    WITHOUT_ATTENTION = "the Base model (--attention-window none)"

    def __init__(
        self,
        dictionary,
        embed_dim: int,
        hidden_size: int,
        out_embed_dim: int,
        num_layers: int,
        dropout: float,
        attention: Optional[LuongAttention],
        input_feeding: bool,
        encoder_output_dim: int,
        max_target_positions: int,
        share_input_output_embed: bool = False,
        dropout_placement: str = "luong",
    ):
        super().__init__(dictionary)
        self.attention = attention
        self.input_feeding = input_feeding
        self.dropout_placement = dropout_placement
        self.out_embed_dim = out_embed_dim
        self.max_target_positions = max_target_positions
        self.need_attn = True
        self.embed_tokens = nn.Embedding(len(dictionary), embed_dim, dictionary.pad())
        self.dropout = named_dropout(dropout, self)
        self.lstm = DropoutLSTM(
            embed_dim + (out_embed_dim if input_feeding else 0),
            hidden_size,
            num_layers,
            batch_first=True,
            dropout=dropout if num_layers > 1 else 0.0,
            module_name=type(self).__name__,
        )
        if attention is not None:
            self.W_c = nn.Linear(encoder_output_dim + hidden_size, out_embed_dim, bias=False)
        self.W_s = nn.Linear(out_embed_dim, len(dictionary))
        if share_input_output_embed:
            self.W_s.weight = self.embed_tokens.weight
        self.graphs = None  # --cuda-graphs: a cuda_graphs.DecoderGraphs

    # -- state -------------------------------------------------------------
    def initial_state(self, encoder_out: Dict[str, Tensor]) -> Dict[str, Tensor]:
        hidden = encoder_out["final_hiddens"]  # L x B x H
        state = {
            "hidden": hidden,
            "cell": encoder_out["final_cells"],
            "input_feed": hidden.new_zeros(hidden.size(1), self.out_embed_dim),  # B x O
        }
        if self.attention is not None:
            proj_keys = self.attention.precompute(encoder_out["encoder_out"])  # B x S x K
            # fp32 under bf16: a step's attention runs in fp32 (precision.py)
            state["proj_keys"] = proj_keys.to(at_least_fp32(proj_keys.dtype))
        return state

    # -- forward -----------------------------------------------------------
    @mixed_precision
    def forward(self, prev_output_tokens, encoder_out, incremental_state=None, **unused):
        features, extra = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        return self.output_layer(features, incremental_state), extra

    def output_projection(self) -> nn.Linear:
        """The output layer, one linear map of the features (the fused loss reads it)."""
        return self.W_s

    def output_layer(self, features: Tensor, incremental_state=None) -> Tensor:
        return self.output_linear(self.W_s, features, incremental_state)  # B x T x V, eq. (6)

    @mixed_precision
    def extract_features(self, prev_output_tokens, encoder_out, incremental_state=None):
        graphs = self.graphs
        if graphs is not None and graphs.applies(
            prev_output_tokens, encoder_out, incremental_state
        ):
            graphed = graphs(prev_output_tokens, encoder_out)  # None: past the limit, or failed
            if graphed is not None:
                return graphed
        return self.plain_features(prev_output_tokens, encoder_out, incremental_state)

    def plain_features(self, prev_output_tokens, encoder_out, incremental_state=None):
        """``extract_features`` without CUDA graphs (inside its autocast): what a graph
        records."""
        state = None
        start = 0
        if incremental_state is not None:
            state = self.cached_state(incremental_state)
        if state is None:  # a new sentence: run the whole prefix
            state = self.initial_state(encoder_out)
        else:  # the cache holds every step but the newest
            start = prev_output_tokens.size(1) - 1
            prev_output_tokens = prev_output_tokens[:, -1:]
        T = prev_output_tokens.size(1)
        steps = torch.arange(start, start + T, device=prev_output_tokens.device)  # T
        x = self.dropout(self.embed_tokens(prev_output_tokens))  # B x T x C

        # bf16 decoding steps take the loop too: nn.LSTM would hand on a bf16 cell state
        one_step_bf16 = incremental_state is not None and run_dtype(self) is not None
        if self.input_feeding or one_step_bf16:
            attn_vec, prob, center, hidden, cell, input_feed = luong_loop.run(
                self, x, state, encoder_out, steps, incremental_state
            )
        else:
            query, (hidden, cell) = self.lstm(x, (state["hidden"], state["cell"]))
            attn_vec, prob, center = self.attend(query, state.get("proj_keys"), encoder_out, steps)
            input_feed = state["input_feed"]

        if incremental_state is not None:
            new_state = dict(state, hidden=hidden, cell=cell, input_feed=input_feed)
            self.cache_state(incremental_state, new_state)
        return self.features(attn_vec, prob, center, encoder_out)

    def features(self, attn_vec: Tensor, prob, center, encoder_out):
        """h̃ (B x T x O) as W_s reads it, and the extras: a_t in the source's
        layout, p_t."""
        extra = {"attn": [None], "p_t": [center]}
        if prob is not None and self.need_attn:
            extra["attn"] = [attention_to_src_layout(prob, encoder_out["src_order"])]
        if self.dropout_placement == "zaremba" or (
            self.dropout_placement == "fairseq" and not self.input_feeding
        ):
            attn_vec = self.dropout(attn_vec)  # B x T x O, before W_s
        return attn_vec, extra

    def paper_loop(self, x: Tensor, state: Dict[str, Tensor], encoder_out, steps: Tensor):
        """The input-feeding decoder one step at a time, as the paper reads (§2,
        §3.3, eq. (5)), from the embedded, dropped targets ``x`` (B x T x C):
        what luong_loop.run computes fast, and the oracle it is tested against
        (fp32; returns luong_loop's ``LoopOutput``)."""
        lstm = self.lstm
        hiddens = list(state["hidden"].unbind(0))  # L x [B x H]
        cells = list(state["cell"].unbind(0))
        input_feed = state["input_feed"]  # B x O: h̃_{t-1}, 0 before the first step
        attn_vecs, probs, centers = [], [], []
        for t in range(x.size(1)):
            below = x[:, t]  # B x C: y_{t-1}
            if self.input_feeding:
                below = torch.cat([below, self.feed_dropout(input_feed)], dim=1)  # [y; h̃]
            for k in range(lstm.num_layers):
                if k > 0:
                    below = lstm.between_layers(below)
                weights = [getattr(lstm, f"{name}_l{k}") for name in
                           ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]  # fmt: skip
                hiddens[k], cells[k] = torch.lstm_cell(below, (hiddens[k], cells[k]), *weights)
                below = hiddens[k]  # B x H: h_t of layer k
            attn_vec, prob, center = self.attend(
                below.unsqueeze(1), state.get("proj_keys"), encoder_out, steps[t : t + 1]
            )  # h̃_t = tanh(W_c [c_t; h_t]), B x 1 x O
            if self.input_feeding and self.dropout_placement == "fairseq":
                attn_vec = self.dropout(attn_vec)
            if self.input_feeding:
                input_feed = attn_vec.squeeze(1)
            attn_vecs.append(attn_vec)
            probs.append(prob)
            centers.append(center)
        return luong_loop.LoopOutput.of_steps(attn_vecs, probs, centers, hiddens, cells, input_feed)

    def feed_dropout(self, input_feed: Tensor) -> Tensor:
        """h̃_{t-1} as layer 0 reads it: dropped there with ``luong`` placement."""
        return self.dropout(input_feed) if self.dropout_placement == "luong" else input_feed

    def attend(
        self,
        query: Tensor,
        proj_keys: Optional[Tensor],
        encoder_out,
        steps: Tensor,
        combine: Optional[LoopWeight] = None,
        position: Optional[PositionWeights] = None,
        source: Optional[StepSource] = None,
    ) -> Tuple[Tensor, Optional[Tensor], Optional[Tensor]]:
        """h_t (B x T x H) -> h̃_t (B x T x O), a_t (B x T x S, true order), p_t.

        ``combine``, ``position``, ``source``: W_c, local-p's W_p, v_p, and the
        attended keys and values taped, inside the fast per-step loop in training
        (T = 1, luong_loop.py); with ``source`` the step's attention is one autograd
        node where it can be (attention_step.py)."""
        if self.attention is None:
            return query, None, None  # Base: softmax(W_s h_t)
        if source is not None and runs_fused(query, source):
            with full_precision(query.device):  # the taped dtype, fp32 at least
                context, prob, extras = fused_step(
                    self.attention,
                    query,
                    source,
                    encoder_out["src_pad_mask"],
                    encoder_out["src_lengths"],
                    steps,
                    position,
                )
        else:
            with step_attention_precision(query, encoder_out["encoder_out"], self.W_c.weight):
                context, prob, extras = self.attention(
                    query,
                    proj_keys,
                    encoder_out["encoder_out"],
                    encoder_out["src_pad_mask"],
                    encoder_out["src_lengths"],
                    steps,
                    position=position,
                )
        joint = torch.cat([context, query], dim=-1)  # B x T x (E + H): [c_t; h_t]
        if combine is None:
            attn_vec = torch.tanh(self.W_c(joint))  # B x T x O: eq. (5)
        else:
            attn_vec = torch.tanh(combine.addmm(None, joint.squeeze(1))).unsqueeze(1)  # B x 1 x O
        return attn_vec, prob, extras.get("p_t")
