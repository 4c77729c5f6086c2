"""The input-feeding decoder's per-step loop, made fast.

The decoder (luong_decoder.py) states the step as the paper reads
(``LuongDecoder.paper_loop``: LSTM cell, attention, eq. (5)); this module runs
the same function with the machinery that makes it fast, tested equal to it
(tests/test_fast_paths.py, test_loop_weight.py, test_luong_model.py):

- the embedding half of layer 0's input gates, W_x y_{t-1} + b for every t,
  is one GEMM before the loop (``input_gates``); each step multiplies only
  [h̃_{t-1}; h_{t-1}] by the recurrent half of the weights (``lstm_step``);
- on CUDA the step's elementwise work (the gates summed, their activations, c_t
  and h_t) is torch's fused LSTM cell kernel, one kernel forward and one backward
  (``fused_lstm_cell``; tests/test_cuda_step.py holds it to the LSTM equations);
- those weights are ``nn.LSTM``'s own parameters, sliced and concatenated once
  per call (and cast to bf16 once under ``--precision bf16``); in incremental
  decoding, once per generation call, kept in the incremental state
  (``step_weights``);
- local-p's eq. (9) multiplies h_t by W_p in fp32 on a CPU, bf16 or not
  (``position_dtype``);
- in training, the gradient of each recurrent weight, of W_c and of local-p's
  W_p and v_p is one GEMM over all steps instead of one product per step
  (``LoopWeight``, loop_weight.py), and so are the gradients of the attended keys
  and values, whose step is one autograd node (attention_step.py).

``run(..., feed=False)`` runs the loop without the feed (h̃ is not fed back):
the per-step path of a no-feed model, to test and time the decoder's fused one.

Shape legend: B batch, T target len, C embedding dim, H decoder hidden,
O attentional hidden (h̃) dim, S source len, L layers.
"""

from typing import Dict, List, NamedTuple, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .attention_step import step_source
from .loop_weight import LoopWeight
from .precision import at_least_fp32, outside_autocast, product_dtype


class LoopOutput(NamedTuple):
    attn_vec: Tensor  # B x T x O: h̃_t
    prob: Optional[Tensor]  # B x T x S: a_t (true order), None for the Base model
    center: Optional[Tensor]  # B x T: p_t of a local window, else None
    hidden: Tensor  # L x B x H: the last step's h
    cell: Tensor  # L x B x H: the last step's c
    input_feed: Tensor  # B x O: the last h̃ (the next step's feed)

    @classmethod
    def of_steps(cls, attn_vecs, probs, centers, hiddens, cells, input_feed) -> "LoopOutput":
        """From per-step lists (T x [B x 1 x O], [B x 1 x S or None], [B x 1 or None])
        and per-layer states (L x [B x H])."""
        return cls(
            torch.cat(attn_vecs, dim=1),  # B x T x O
            None if probs[0] is None else torch.cat(probs, dim=1),  # B x T x S
            None if centers[0] is None else torch.cat(centers, dim=1),  # B x T
            torch.stack(hiddens),  # L x B x H
            torch.stack(cells),
            input_feed,
        )


# Eq. (9)'s first product, h_t W_p, on a CPU in fp32 even under bf16 (the one with v_p is fp32
# always): its B x H rows are too few for bf16 to pay, and in bf16 each step adds four casts
# (the query, tanh's output, and both again in backward). bench/by_length.py times local-p's
# update both ways (docs/LOCAL_P.md, "By source length"). False: the loop's product dtype,
# as on CUDA.
POSITION_FP32_ON_CPU = True


def position_dtype(like: Tensor) -> torch.dtype:
    """The dtype of eq. (9)'s h_t W_p in the loop (W_p's, as ``loop_weights`` casts it; v_p
    is fp32 at least): fp32 at least on a CPU (with ``POSITION_FP32_ON_CPU``), else the
    loop's product dtype (bf16 under autocast)."""
    dtype = product_dtype(like)
    if POSITION_FP32_ON_CPU and like.device.type == "cpu":
        return at_least_fp32(dtype)
    return dtype


# On CUDA, the step's elementwise work (the two halves of the gates summed, four
# activations, c_t, h_t) as torch's fused LSTM cell kernel, one kernel forward and one
# backward instead of about ten each: at the paper's shape the GPU reads as waiting on the
# host's kernel launches, and the fused kernel made the update faster (bench/gpu_probe.py,
# on and off: docs/SPEED.md). False: the plain path below on every device (tests, bench).
FUSED_CELL = True


def lstm_step(gates_in: Tensor, inputs: Tensor, h: Tensor, c: Tensor, weight: LoopWeight):
    """One LSTM cell step, torch's gate order i, f, g, o.

    ``gates_in`` (B x 4H) holds the part of W_ih x + b_ih + b_hh computed ahead
    of the loop; ``inputs`` (B x I) are the step's remaining inputs, h_{t-1}
    last, and ``weight`` their weights (I x 4H, transposed) as a ``LoopWeight``.
        c_t = σ(f) ∘ c_{t-1} + σ(i) ∘ tanh(g),   h_t = σ(o) ∘ tanh(c_t)
    """
    if FUSED_CELL and gates_in.is_cuda:
        return fused_lstm_cell(gates_in, weight.addmm(None, inputs), c)
    gates = weight.addmm(gates_in, inputs)  # B x 4H
    gates = gates.to(at_least_fp32(gates.dtype))  # c_t, h_t in fp32 under bf16 (precision.py)
    i, f, g, o = gates.chunk(4, dim=1)  # B x H each
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)  # B x H: c_t
    h = torch.sigmoid(o) * torch.tanh(c)  # B x H: h_t
    return h, c


def fused_lstm_cell(gates_in: Tensor, gates_h: Tensor, c: Tensor):
    """``lstm_step``'s elementwise work in torch's fused CUDA kernel (``_thnn_fused_lstm_cell``,
    the one ``nn.LSTMCell`` takes on CUDA): the gates ``gates_in`` + ``gates_h`` (B x 4H each),
    c_t and h_t, in fp32 at least (outside autocast, which would make c_t half)."""
    dtype = at_least_fp32(torch.promote_types(gates_h.dtype, c.dtype))
    gates_in, gates_h, c = gates_in.to(dtype), gates_h.to(dtype), c.to(dtype)
    with outside_autocast(c.device):
        return torch.ops.aten._thnn_fused_lstm_cell(gates_in, gates_h, c)[:2]  # B x H each


def input_gates(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """Layer 0's input gates from y_{t-1} for every t, W_x y_{t-1} + b: one GEMM before
    the loop (in bf16 under ``--precision bf16``, like the other products)."""
    return F.linear(x, weight, bias)  # B x T x 4H


def run(
    decoder,
    x: Tensor,
    state: Dict[str, Tensor],
    encoder_out,
    steps: Tensor,
    incremental_state=None,
    feed: Optional[bool] = None,
) -> LoopOutput:
    """The per-step path of ``decoder`` (a LuongDecoder) over the embedded, dropped
    targets ``x`` (B x T x C) from ``state``: h_t, then a_t, c_t and h̃_t, one
    target step at a time; h̃_t is fed to step t + 1 with input feeding (§3.3).
    ``feed`` defaults to the decoder's ``input_feeding``."""
    feed = decoder.input_feeding if feed is None else feed
    lstm, C = decoder.lstm, x.size(-1)
    layers = step_weights(decoder, C, incremental_state)
    # each weight's gradient as one GEMM over all steps (loop_weight.py)
    weights = [LoopWeight(weight_t) for weight_t, _ in layers]
    # eq. (5)'s W_c, eq. (9)'s W_p, v_p, the attended keys and values: taped in training
    combine = position = source = None
    if decoder.attention is not None and torch.is_grad_enabled():
        combine = LoopWeight(decoder.W_c.weight.t().to(product_dtype(x)))
        position = decoder.attention.window.loop_weights(position_dtype(x))  # local-p only
        source = step_source(
            decoder.attention,
            state.get("proj_keys"),
            encoder_out["encoder_out"],
            encoder_out["src_lengths"],
            position,
        )  # None where a step's attention takes the plain path (attention_step.py)
    # unbind, not slicing per step: one backward node instead of a B x T x 4H zero-fill per step
    gates_x = input_gates(x, lstm.weight_ih_l0[:, :C], layers[0][1]).unbind(1)  # T x [B x 4H]
    hiddens = list(state["hidden"].unbind(0))  # L x [B x H]
    cells = list(state["cell"].unbind(0))
    input_feed = state["input_feed"]  # B x O: h̃_{t-1}
    attn_vecs, probs, centers = [], [], []
    for t in range(x.size(1)):
        gates_in, below = gates_x[t], None
        for k, (weight, (_, bias)) in enumerate(zip(weights, layers)):
            if k == 0:
                inputs = [hiddens[0]]
                if feed:
                    inputs.insert(0, decoder.feed_dropout(input_feed))
            else:
                gates_in = bias.expand(below.size(0), -1)  # B x 4H
                inputs = [lstm.between_layers(below), hiddens[k]]
            hiddens[k], cells[k] = lstm_step(
                gates_in, torch.cat(inputs, dim=1), hiddens[k], cells[k], weight
            )
            below = hiddens[k]
        attn_vec, prob, center = decoder.attend(
            below.unsqueeze(1),
            state.get("proj_keys"),
            encoder_out,
            steps[t : t + 1],
            combine,
            position,
            source,
        )  # B x 1 x O, B x 1 x S, B x 1
        if feed and decoder.dropout_placement == "fairseq":
            attn_vec = decoder.dropout(attn_vec)  # to W_s and fed back
        if feed:
            input_feed = attn_vec.squeeze(1)  # B x O: h̃_t
        attn_vecs.append(attn_vec)
        probs.append(prob)
        centers.append(center)
    return LoopOutput.of_steps(attn_vecs, probs, centers, hiddens, cells, input_feed)


def step_weights(decoder, embed_dim: int, incremental_state=None) -> List[Tuple[Tensor, Tensor]]:
    """Per layer, the recurrent inputs' weights transposed (layer 0: [W_feed; W_hh],
    layer k > 0: [W_ih; W_hh]) and the summed biases b_ih + b_hh.

    Incremental decoding calls this once per generated token: without autograd
    the result is kept in the incremental state, which lives for one
    generation call, so it is built once per batch of sentences. It has no
    batch dimension and stays out of ``cached_state``, which is reordered."""
    if incremental_state is None or torch.is_grad_enabled():
        return concat_step_weights(decoder.lstm, embed_dim)
    kept = decoder.get_incremental_state(incremental_state, "step_weights")
    if kept is None:
        layers = concat_step_weights(decoder.lstm, embed_dim)
        kept = {f"{name}{k}": t for k, pair in enumerate(layers)
                for name, t in zip(("weight_t", "bias"), pair)}  # fmt: skip
        decoder.set_incremental_state(incremental_state, "step_weights", kept)
    return [(kept[f"weight_t{k}"], kept[f"bias{k}"]) for k in range(decoder.lstm.num_layers)]


def concat_step_weights(lstm, embed_dim: int) -> List[Tuple[Tensor, Tensor]]:
    layers = []
    for k in range(lstm.num_layers):
        w_ih, w_hh = getattr(lstm, f"weight_ih_l{k}"), getattr(lstm, f"weight_hh_l{k}")
        if k == 0:
            w_ih = w_ih[:, embed_dim:]  # W_feed (empty without input feeding)
        # I x 4H, cast once per call under bf16 (autocast would cast it at every step)
        weight_t = torch.cat([w_ih, w_hh], dim=1).t().to(product_dtype(w_hh))
        bias = getattr(lstm, f"bias_ih_l{k}") + getattr(lstm, f"bias_hh_l{k}")  # 4H
        layers.append((weight_t, bias))
    return layers


def per_step_features(decoder, prev_output_tokens: Tensor, encoder_out, incremental_state=None):
    """``decoder.extract_features`` (a whole prefix, no incremental state) through
    this loop whatever the decoder's input feeding: a no-feed model takes its
    per-step path (h̃ not fed back), the one its fused path replaces. Tests hold
    the two equal; the benchmark times them."""
    if incremental_state is not None:
        raise ValueError("per_step_features runs whole prefixes, without incremental state")
    state = decoder.initial_state(encoder_out)
    x = decoder.dropout(decoder.embed_tokens(prev_output_tokens))  # B x T x C
    steps = torch.arange(prev_output_tokens.size(1), device=prev_output_tokens.device)  # T
    out = run(decoder, x, state, encoder_out, steps)
    return decoder.features(out.attn_vec, out.prob, out.center, encoder_out)
