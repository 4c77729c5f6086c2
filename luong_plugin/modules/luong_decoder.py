"""Stacked LSTM decoder of Luong et al. (2015) with global or local attention.

    h_t    = LSTM(y_{t-1} [; h̃_{t-1}], h_{t-1})     §2, input feeding §3.3
    c_t    = attention(h_t, h̄)                        §3.1-3.2 (attention.py)
    h̃_t    = tanh(W_c [c_t; h_t])                    eq. (5)
    p(y_t) = softmax(W_s h̃_t)                        eq. (6)

Without attention (the paper's "Base", ``attention=None``): p(y_t) = softmax(W_s h_t).

The decoder starts from the encoder's final (h, c) of every layer and h̃_0 = 0.

Two paths compute the same function:
- without input feeding nothing depends on the previous step's attention, so
  the LSTM (``nn.LSTM``, fused) runs over the whole target at once and
  attention for all steps is one batched product;
- with input feeding the LSTM must run step by step. The embedding half of
  layer 0's input gates, W_x y_{t-1} + b for every t, is one GEMM before the
  loop; each step multiplies only [h̃_{t-1}; h_{t-1}] by the recurrent half of
  the weights (``lstm_step``). The weights are ``nn.LSTM``'s own parameters,
  sliced and concatenated once per call (incremental decoding: once per
  generation call, kept in the incremental state). In training, the gradient
  of each recurrent weight and of W_c is one GEMM over all steps instead of
  one product per step (``LoopWeight``, loop_weight.py).
``step_by_step=True`` runs the input-feeding loop without the feed (h̃ is not
fed back): the per-step path of a no-feed model, to test and time the fused one.

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

from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .attention import LuongAttention
from .dropout import DropoutLSTM, named_dropout
from .incremental import CachedStateDecoder
from .loop_weight import LoopWeight
from .precision import at_least_fp32, mixed_precision, product_dtype, step_attention_precision
from .source import attention_to_src_layout
from .windows import PositionWeights


def lstm_step(gates_in: Tensor, inputs: Tensor, h: Tensor, c: Tensor, weight: LoopWeight):
    """One LSTM cell step, torch's gate order i, f, g, o.

    ``gates_in`` (B x 4H) holds the part of W_ih x + b_ih + b_hh computed ahead
    of the loop; ``inputs`` (B x I) are the step's remaining inputs, h_{t-1}
    last, and ``weight`` their weights (I x 4H, transposed) as a ``LoopWeight``.
        c_t = σ(f) ∘ c_{t-1} + σ(i) ∘ tanh(g),   h_t = σ(o) ∘ tanh(c_t)
    """
    gates = weight.addmm(gates_in, inputs)  # B x 4H
    gates = gates.to(at_least_fp32(gates.dtype))  # c_t, h_t in fp32 under bf16 (precision.py)
    i, f, g, o = gates.chunk(4, dim=1)  # B x H each
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)  # B x H: c_t
    h = torch.sigmoid(o) * torch.tanh(c)  # B x H: h_t
    return h, c


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
        self.step_by_step = False  # True: the per-step path even without input feeding
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
        features, extra = self.extract_features(
            prev_output_tokens, encoder_out, incremental_state
        )
        return self.output_layer(features), extra

    def output_projection(self) -> nn.Linear:
        """The output layer, one linear map of the features (the fused loss reads it)."""
        return self.W_s

    def output_layer(self, features: Tensor) -> Tensor:
        return self.W_s(features)  # B x T x V, eq. (6)

    @mixed_precision
    def extract_features(self, prev_output_tokens, encoder_out, incremental_state=None):
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
        one_step_bf16 = incremental_state is not None and self.compute_dtype is not None
        if self.input_feeding or self.step_by_step or one_step_bf16:
            attn_vec, prob, center, hidden, cell, input_feed = self._step_loop(
                x, state, encoder_out, steps, incremental_state
            )
        else:
            query, (hidden, cell) = self.lstm(x, (state["hidden"], state["cell"]))
            attn_vec, prob, center = self._attend(
                query, state.get("proj_keys"), encoder_out, steps
            )
            input_feed = state["input_feed"]

        if incremental_state is not None:
            new_state = dict(state, hidden=hidden, cell=cell, input_feed=input_feed)
            self.cache_state(incremental_state, new_state)

        extra = {"attn": [None], "p_t": [center]}
        if prob is not None and self.need_attn:
            extra["attn"] = [attention_to_src_layout(prob, encoder_out["src_order"])]
        if self.dropout_placement == "zaremba" or (
            self.dropout_placement == "fairseq" and not self.input_feeding
        ):
            attn_vec = self.dropout(attn_vec)  # B x T x O, before W_s
        return attn_vec, extra

    def _step_loop(
        self, x: Tensor, state: Dict[str, Tensor], encoder_out, steps: Tensor, incremental_state=None
    ):
        """The per-step path: h_t, then a_t, c_t and h̃_t, one target step at a time;
        h̃_t is fed to step t + 1 with input feeding (§3.3)."""
        lstm, C = self.lstm, x.size(-1)
        layers = self._step_weights(C, incremental_state)
        # each weight's gradient as one GEMM over all steps (loop_weight.py)
        weights = [LoopWeight(weight_t) for weight_t, _ in layers]
        combine = position = None  # eq. (5)'s W_c, eq. (9)'s W_p, v_p: taped in training
        if self.attention is not None and torch.is_grad_enabled():
            combine = LoopWeight(self.W_c.weight.t().to(product_dtype(x)))
            position = self.attention.window.loop_weights(product_dtype(x))  # local-p only
        # layer 0's input gates from y_{t-1}, all steps in one GEMM; unbind, not
        # slicing per step: one backward node instead of a B x T x 4H zero-fill per step
        gates_x = F.linear(x, lstm.weight_ih_l0[:, :C], layers[0][1])  # B x T x 4H
        gates_x = gates_x.unbind(1)  # T x [B x 4H]
        hiddens = list(state["hidden"].unbind(0))  # L x [B x H]
        cells = list(state["cell"].unbind(0))
        input_feed = state["input_feed"]  # B x O: h̃_{t-1}
        attn_vecs, probs, centers = [], [], []
        for t in range(x.size(1)):
            gates_in, below = gates_x[t], None
            for k, (weight, (_, bias)) in enumerate(zip(weights, layers)):
                if k == 0:
                    inputs = [hiddens[0]]
                    if self.input_feeding:
                        inputs.insert(0, self._feed_dropout(input_feed))
                else:
                    gates_in = bias.expand(below.size(0), -1)  # B x 4H
                    inputs = [lstm.between_layers(below), hiddens[k]]
                hiddens[k], cells[k] = lstm_step(
                    gates_in, torch.cat(inputs, dim=1), hiddens[k], cells[k], weight
                )
                below = hiddens[k]
            attn_vec, prob, center = self._attend(
                below.unsqueeze(1), state.get("proj_keys"), encoder_out, steps[t : t + 1],
                combine, position,
            )  # B x 1 x O, B x 1 x S, B x 1
            if self.input_feeding and self.dropout_placement == "fairseq":
                attn_vec = self.dropout(attn_vec)  # to W_s and fed back
            if self.input_feeding:
                input_feed = attn_vec.squeeze(1)  # B x O: h̃_t
            attn_vecs.append(attn_vec)
            probs.append(prob)
            centers.append(center)
        attn_vec = torch.cat(attn_vecs, dim=1)  # B x T x O
        prob = None if probs[0] is None else torch.cat(probs, dim=1)  # B x T x S
        center = None if centers[0] is None else torch.cat(centers, dim=1)  # B x T
        hidden, cell = torch.stack(hiddens), torch.stack(cells)  # L x B x H
        return attn_vec, prob, center, hidden, cell, input_feed

    def _feed_dropout(self, input_feed: Tensor) -> Tensor:
        """h̃_{t-1} as layer 0 reads it: dropped there with ``luong`` placement."""
        return self.dropout(input_feed) if self.dropout_placement == "luong" else input_feed

    def _step_weights(self, embed_dim: int, incremental_state=None) -> List[Tuple[Tensor, Tensor]]:
        """Per layer, the recurrent inputs' weights transposed (layer 0: [W_feed; W_hh],
        layer k > 0: [W_ih; W_hh]) and the summed biases b_ih + b_hh.

        Incremental decoding calls this once per generated token: without autograd
        the result is kept in the incremental state, which lives for one
        generation call, so it is built once per batch of sentences. It has no
        batch dimension and stays out of ``cached_state``, which is reordered."""
        if incremental_state is None or torch.is_grad_enabled():
            return self._concat_step_weights(embed_dim)
        kept = self.get_incremental_state(incremental_state, "step_weights")
        if kept is None:
            layers = self._concat_step_weights(embed_dim)
            kept = {f"{name}{k}": t for k, pair in enumerate(layers)
                    for name, t in zip(("weight_t", "bias"), pair)}
            self.set_incremental_state(incremental_state, "step_weights", kept)
        return [(kept[f"weight_t{k}"], kept[f"bias{k}"]) for k in range(self.lstm.num_layers)]

    def _concat_step_weights(self, embed_dim: int) -> List[Tuple[Tensor, Tensor]]:
        lstm, layers = self.lstm, []
        for k in range(lstm.num_layers):
            w_ih, w_hh = getattr(lstm, f"weight_ih_l{k}"), getattr(lstm, f"weight_hh_l{k}")
            if k == 0:
                w_ih = w_ih[:, embed_dim:]  # W_feed (empty without input feeding)
            # I x 4H, cast once per call under bf16 (autocast would cast it at every step)
            weight_t = torch.cat([w_ih, w_hh], dim=1).t().to(product_dtype(w_hh))
            bias = getattr(lstm, f"bias_ih_l{k}") + getattr(lstm, f"bias_hh_l{k}")  # 4H
            layers.append((weight_t, bias))
        return layers

    def _attend(
        self,
        query: Tensor,
        proj_keys: Optional[Tensor],
        encoder_out,
        steps: Tensor,
        combine: Optional[LoopWeight] = None,
        position: Optional[PositionWeights] = None,
    ) -> Tuple[Tensor, Optional[Tensor], Optional[Tensor]]:
        """h_t (B x T x H) -> h̃_t (B x T x O), a_t (B x T x S, true order), p_t.

        ``combine``, ``position``: W_c and local-p's W_p, v_p as ``LoopWeight``s
        inside the per-step loop in training (T = 1)."""
        if self.attention is None:
            return query, None, None  # Base: softmax(W_s h_t)
        with step_attention_precision(query, encoder_out["encoder_out"]):
            context, prob, extras = self.attention(
                query,
                proj_keys,
                encoder_out["encoder_out"],
                encoder_out["src_pad_mask"],
                encoder_out["src_lengths"],
                steps,
                position,
            )
        joint = torch.cat([context, query], dim=-1)  # B x T x (E + H): [c_t; h_t]
        if combine is None:
            attn_vec = torch.tanh(self.W_c(joint))  # B x T x O: eq. (5)
        else:
            attn_vec = torch.tanh(combine.addmm(None, joint.squeeze(1))).unsqueeze(1)  # B x 1 x O
        return attn_vec, prob, extras.get("p_t")

