"""The Luong decoder's training pass replayed as CUDA graphs (``--cuda-graphs``).

At the paper's shape on one GPU the input-feeding loop launches many small kernels per
update, and the GPU reads as waiting on the host that launches them (bench/gpu_probe.py: the
host's time before synchronisation is the update's time; a reading, not an experiment that
isolates it). A CUDA graph records the kernels of one forward and one backward pass once and
replays them with one launch each.

A graph replays fixed shapes, so each batch is padded up to a bucket: B, S and T rounded up
to multiples of ``--cuda-graph-step``. The decoder reads the padded batch exactly as the
plain one, and the outputs are cut back to the batch's own shape:

- extra target steps come after the real ones and read padding's zero embedding; the decoder
  is causal, so the real steps' outputs are unchanged and the cut-off steps get no gradient;
- extra source positions come after each sentence's real ones (the encoder's outputs are in
  true order, right-padded: source.py) and are masked like padding: a_t gives them
  probability 0, and local windows and p_t read each sentence's own length S_b;
- extra sentences have a source of one position (a masked-out row would give a softmax of
  nothing) and padding for targets; they are cut off and get no gradient.

``DecoderGraphs`` keeps one captured pair (forward, backward) per bucket, up to
``--cuda-graph-limit``; a batch of another shape beyond it, or of a shape whose capture
failed, runs the plain path (after a failed capture, one of nothing random frees CUDA's
random generator: ``end_failed_recording``). The recording reads aliases of the weights, so
that no gradient node made outside it (on the default stream) is reached by its backward
pass; a replay's gradients go to the weights themselves. The graphs of all buckets share one
memory pool and one set of weight-gradient buffers: each update replays one bucket's forward
and then its backward, and nothing a graph wrote outlives its update (the outputs are read
by the output layer and the loss within it; the weights' gradients are copied out), so a
replay may reuse the memory another bucket's graph used as scratch. The encoder, the output
layer and the loss run eagerly around the graph. Decoding and validation (no autograd) take
the plain path, and so do decoders without input feeding (``DecoderGraphs.applies``).

The recorded kernels read the weights where they are, so fairseq's optimizers (which update
them in place) need nothing more. Autocast (``--amp``, ``--precision bf16``, fairseq's
``--fp16``) is recorded with its weight-cast cache off, so that the casts are in the graph
and every replay casts the current weights.

tests/test_cuda_graphs.py holds the padded batch to the plain one on any device, the
capture's bookkeeping to the plain pass (with a stand-in for the graph on the CPU), and on
CUDA the graphed step to the plain one.

Shape legend: B batch, S source len, T target len, E encoder dim, L layers.
"""

import contextlib
import logging
from collections import OrderedDict
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

logger = logging.getLogger(__name__)

# encoder_out's fields, in the order the graph takes them: (batch dim, source dim or None)
FIELDS = {
    "encoder_out": (0, 1),  # B x S x E
    "src_pad_mask": (0, 1),  # B x S
    "src_lengths": (0, None),  # B
    "src_order": (0, 1),  # B x S
    "final_hiddens": (1, None),  # L x B x E
    "final_cells": (1, None),  # L x B x E
}


def round_up(n: int, step: int) -> int:
    return -(-n // step) * step


def padded_shape(b: int, s: int, t: int, step: int, source_rows: Optional[int] = None):
    """(B, S, T): a batch of b sentences, s source positions and t target steps padded up to
    multiples of ``step``; the source no further than ``source_rows`` (the location score's
    weight rows), and never below s."""
    S = round_up(s, step)
    if source_rows:
        S = max(s, min(S, source_rows))
    return round_up(b, step), S, round_up(t, step)


def pad_encoder_out(encoder_out: Dict[str, Tensor], B: int, S: int) -> List[Tensor]:
    """``FIELDS`` of ``encoder_out`` padded to B sentences of S positions, in FIELDS' order.
    Extra positions are padding (masked, zero, their own column in ``src_order``); extra
    sentences have one position, unmasked, of zeros."""
    b, s = encoder_out["src_pad_mask"].shape
    device = encoder_out["src_pad_mask"].device
    out = encoder_out["encoder_out"]  # b x s x E
    out = F.pad(out, (0, 0, 0, S - s, 0, B - b))  # B x S x E
    mask = torch.ones(B, S, dtype=torch.bool, device=device)  # True: padding
    mask[:b, :s] = encoder_out["src_pad_mask"]
    mask[b:, 0] = False
    lengths = torch.ones(B, dtype=encoder_out["src_lengths"].dtype, device=device)
    lengths[:b] = encoder_out["src_lengths"]
    order = torch.arange(S, device=device).expand(B, S).clone()  # B x S
    order[:b, :s] = encoder_out["src_order"]
    states = [F.pad(encoder_out[k], (0, 0, 0, B - b)) for k in ("final_hiddens", "final_cells")]
    return [out, mask, lengths, order, *states]


def pad_tokens(tokens: Tensor, B: int, T: int, pad: int) -> Tensor:
    b, t = tokens.shape
    return F.pad(tokens, (0, T - t, 0, B - b), value=pad)  # B x T


class Captured:
    """One function's forward pass and the backward pass of its outputs, recorded once on
    ``static_inputs`` (the last ``n_params`` of them are the weights) and replayed: on
    CUDA as two CUDA graphs; with ``graph=RerunGraph`` the same bookkeeping with the
    function rerun instead of replayed (the tests' stand-in on a CPU)."""

    def __init__(self, fn: Callable, static_inputs: Sequence[Tensor], n_params: int,
                 graph=None, pool=None, grad_buffers=None, warmups: int = 2,
                 weights: Optional[Sequence[Tensor]] = None):  # fmt: skip
        """``grad_buffers``: one tensor per weight, allocated once outside the graphs, into
        which the backward graph copies the weights' gradients (every bucket writes the same
        ones instead of keeping its own). ``weights``: the tensors a replay's gradients go
        to, where the recording read aliases of them (the last ``n_params`` static inputs;
        default: those inputs themselves)."""
        graph = graph or CudaGraph
        self.inputs = tuple(static_inputs)
        self.n_args = len(self.inputs) - n_params
        self.weights = tuple(self.inputs[self.n_args :] if weights is None else weights)
        wanted = [x for x in self.inputs if x.requires_grad]
        graph.warm_up(fn, self.inputs, wanted, warmups)
        self.forward_graph = graph(pool)
        outputs = self.forward_graph.capture(lambda: tuple(fn(*self.inputs)))
        self.grad_outputs = tuple(torch.empty_like(o) if o.requires_grad else None for o in outputs)
        buffers = list(grad_buffers or [None] * n_params)

        def backward():
            live = [o for o in self.forward_graph.live() if o.requires_grad]
            grads = [g for g in self.grad_outputs if g is not None]
            found = iter(torch.autograd.grad(live, wanted, grads, allow_unused=True))
            out = [next(found) if x.requires_grad else None for x in self.inputs]
            for k, buffer in enumerate(buffers):  # the weights' gradients into the shared ones
                i = self.n_args + k
                if buffer is not None and out[i] is not None:
                    buffer.copy_(out[i])
                    out[i] = buffer
            return tuple(out)

        self.backward_graph = graph(self.forward_graph.pool())
        self.grad_inputs = self.backward_graph.capture(backward)
        # the outputs without their autograd graph: its saved tensors and the loop's tapes are
        # the replays' scratch now, memory of the pool, not kept alive by Python
        self.outputs = tuple(o.detach() for o in outputs)
        self.forward_graph.release()
        del outputs

    def __call__(self, *args: Tensor) -> Tuple[Tensor, ...]:
        """The outputs for ``args`` (the inputs but the weights), differentiable as the
        function's own."""
        return Replay.apply(self, *args, *self.weights)


class Replay(torch.autograd.Function):
    @staticmethod
    def forward(ctx, captured: Captured, *inputs: Tensor):
        ctx.captured = captured
        for static, x in zip(captured.inputs[: captured.n_args], inputs):
            if static.data_ptr() != x.data_ptr():
                static.copy_(x)
        captured.forward_graph.replay()
        return tuple(o.detach() for o in captured.outputs)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, *grads: Tensor):
        captured = ctx.captured
        for static, g in zip(captured.grad_outputs, grads):
            if static is not None:
                static.copy_(g)
        captured.backward_graph.replay()
        # copies, not the graph's buffers: autograd may keep a returned tensor as a weight's
        # .grad, which the next replay would overwrite (--update-freq accumulates into it)
        return (None, *(g.clone() if g is not None else None for g in captured.grad_inputs))


class CudaGraph:
    """``torch.cuda.CUDAGraph`` with the warm-up and capture ``Captured`` uses."""

    def __init__(self, pool=None):
        self.graph = torch.cuda.CUDAGraph()
        self.shared_pool = pool
        self.results = ()

    @staticmethod
    def warm_up(fn, inputs, wanted, n):
        """``n`` passes on a side stream before capture, as torch's make_graphed_callables
        does (lazy initialisation out of the recording); their gradients go nowhere
        (``autograd.grad``, not ``.grad``)."""
        torch.cuda.synchronize()
        with torch.cuda.stream(torch.cuda.Stream()):
            for _ in range(n):
                outputs = [o for o in fn(*inputs) if o.requires_grad]
                torch.autograd.grad(outputs, wanted, [torch.ones_like(o) for o in outputs],
                                    allow_unused=True)  # fmt: skip
        torch.cuda.synchronize()

    def capture(self, body):
        # thread_local: a data loader's pinning thread may use CUDA while this one records
        with torch.cuda.graph(self.graph, pool=self.shared_pool, capture_error_mode="thread_local"):
            self.results = body()
        return self.results

    def live(self):
        """The tensors the recording wrote: every replay writes the same ones."""
        return self.results

    def release(self):
        """Drop the recorded tensors (the backward pass is recorded too)."""
        self.results = ()

    def pool(self):
        return self.graph.pool()

    def replay(self):
        self.graph.replay()


class RerunGraph:
    """The tests' stand-in for a CUDA graph on a CPU: ``capture`` runs the body and keeps
    its results; ``replay`` runs it again and copies the new results into the kept ones,
    the buffers a CUDA graph's replay writes (``live``: the last run's own, with their
    autograd graph, which a rerun backward pass reads)."""

    def __init__(self, pool=None):
        self.body, self.results, self.fresh = None, (), ()

    @staticmethod
    def warm_up(fn, inputs, wanted, n):
        pass

    def capture(self, body):
        self.body = body
        # a replay runs as recorded: under the autocast the capture ran in
        self.autocast = (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"),
                         torch.is_autocast_cache_enabled())  # fmt: skip
        self.results = self.fresh = body()
        return self.results

    def live(self):
        return self.fresh

    def release(self):
        """The rerun needs its results: kept."""

    def pool(self):
        return None

    def replay(self):
        enabled, dtype, cache = self.autocast
        with torch.enable_grad(), torch.autocast("cpu", dtype, enabled, cache):
            self.fresh = self.body()
        for kept, new in zip(self.results, self.fresh):
            if kept is not None:
                kept.detach().copy_(new)


class DecoderGraphs:
    """The graphed training pass of a ``LuongDecoder``'s ``extract_features``: call it as
    the decoder's features of a whole target (no incremental state)."""

    def __init__(self, decoder, step: int, limit: int, graph=None):
        self.decoder = decoder
        self.step, self.limit = step, limit
        self.graph = graph  # None: CUDA graphs
        self.captured: "OrderedDict[tuple, Captured]" = OrderedDict()
        self.pool = None
        self.kinds: Dict[tuple, Tuple[bool, bool]] = {}  # key: (a_t returned, p_t returned)
        self.failed: Dict[tuple, str] = {}  # key: why its capture failed (the plain path)
        self.grad_buffers: Optional[List[Tensor]] = None
        self.eager_batches = 0  # batches of a shape beyond the limit: the plain path

    def applies(self, prev_output_tokens: Tensor, encoder_out, incremental_state) -> bool:
        """The training pass of an input-feeding decoder. Without input feeding the decoder's
        LSTM is one cuDNN call over the whole target (few kernels to save), whose dropout
        state is a buffer cuDNN may free and make anew between updates (when fairseq reseeds),
        which a recording would keep using: not graphed."""
        return (
            incremental_state is None
            and self.decoder.input_feeding
            and self.decoder.training
            and torch.is_grad_enabled()
            and (prev_output_tokens.is_cuda or self.graph is not None)
            and isinstance(encoder_out, dict)
            and set(encoder_out) == set(FIELDS)
        )

    def bucket(self, b: int, s: int, t: int) -> Tuple[int, int, int]:
        """(B, S, T): a batch of b sentences, s source positions and t target steps padded."""
        attention = self.decoder.attention
        # the location score has one weight row per position
        rows = getattr(attention.score, "max_source_positions", None) if attention else None
        return padded_shape(b, s, t, self.step, rows)

    def __call__(self, prev_output_tokens: Tensor, encoder_out) -> Optional[tuple]:
        """(features, extra) as ``extract_features`` gives them, or None where the batch's
        bucket has no graph and the limit is reached (the caller runs the plain path)."""
        b, t = prev_output_tokens.shape
        s = encoder_out["src_pad_mask"].size(1)
        B, S, T = self.bucket(b, s, t)
        device = prev_output_tokens.device.type
        dtypes = tuple(encoder_out[k].dtype for k in FIELDS)
        key = (B, S, T, self.decoder.need_attn, autocast_state(device), dtypes)
        if key in self.failed:
            return None
        captured = self.captured.get(key)
        if captured is None and len(self.captured) >= self.limit:  # nothing padded for it
            if self.eager_batches == 0:
                logger.info(
                    f"--cuda-graphs: {self.limit} batch shapes graphed (--cuda-graph-limit); "
                    f"batches of other shapes, such as {B} x {S} / {T}, take the plain path"
                )
            self.eager_batches += 1
            return None
        tokens = pad_tokens(prev_output_tokens, B, T, self.decoder.embed_tokens.padding_idx)
        fields = pad_encoder_out(encoder_out, B, S)
        if captured is None:
            try:
                captured = self.capture(tokens, fields, key)
            except Exception as e:  # noqa: BLE001  (this shape trains on the plain path)
                self.failed[key] = f"{type(e).__name__}: {e}"
                logger.warning(
                    f"--cuda-graphs: recording a batch of {B} x {S} / {T} failed, such batches "
                    f"take the plain path: {self.failed[key][:500]}"
                )
                if self.graph is None:
                    end_failed_recording()
                return None
        outputs = captured(tokens, *fields)
        features, prob, center = unflatten(outputs, self.kinds[key])
        extra = {"attn": [None if prob is None else prob[:b, :t, :s]],
                 "p_t": [None if center is None else center[:b, :t]]}  # fmt: skip
        return features[:b, :t], extra

    def capture(self, tokens: Tensor, fields: List[Tensor], key) -> Captured:
        """The recording reads the weights through aliases (the same memory, new leaves of
        autograd): a weight's own gradient node may be kept alive from an earlier pass (the
        loss or outputs of the last update still referenced), made on the default stream,
        and a recorded backward pass that reached it would wait on that stream, which ends
        the recording with an error."""
        decoder = self.decoder
        params = [p for p in decoder.parameters() if p.requires_grad]
        aliases = [p.detach().requires_grad_() for p in params]
        statics = [tokens.clone()] + [
            f.detach().clone().requires_grad_(f.requires_grad) for f in fields
        ]

        def features(tokens, *inputs):
            encoder_out = dict(zip(FIELDS, inputs[: len(FIELDS)]))
            with parameters_replaced(decoder, params, aliases):
                attn_vec, extra = decoder.plain_features(tokens, encoder_out)
            prob, center = extra["attn"][0], extra["p_t"][0]
            self.kinds[key] = (prob is not None, center is not None)
            return [x for x in (attn_vec, prob, center) if x is not None]

        device = tokens.device.type
        if self.grad_buffers is None:
            self.grad_buffers = [torch.empty_like(p) for p in params]
        with uncached_autocast(device):
            captured = Captured(features, statics + aliases, len(params), self.graph,
                                self.pool, self.grad_buffers, weights=params)  # fmt: skip
        if self.graph is None and self.pool is None:
            self.pool = captured.forward_graph.pool()
        self.captured[key] = captured
        return captured


def end_failed_recording():
    """After a recording that failed: a recording that succeeds, of nothing random. A failed
    one ends without telling CUDA's default random generator (torch 2.11, as run on an H200,
    keeps one flag for it), which then refuses every later draw outside a recording, the
    plain path's dropout included; a recording that ends well clears that flag."""
    try:
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            torch.zeros(1, device="cuda").add_(1)
        del graph
    except Exception as e:  # noqa: BLE001
        raise RuntimeError(
            "--cuda-graphs: after a failed recording CUDA could not record again, and its "
            f"random numbers may be unusable; train without --cuda-graphs ({e})"
        ) from e


@contextlib.contextmanager
def parameters_replaced(module: torch.nn.Module, params: List[Tensor], aliases: List[Tensor]):
    """``module`` and its children read ``aliases[i]`` where they hold ``params[i]``, until
    the block ends (a parameter shared by two children is replaced in both)."""
    alias_of = {id(p): a for p, a in zip(params, aliases)}
    replaced = []
    for child in module.modules():
        for name, p in child._parameters.items():
            if p is not None and id(p) in alias_of:
                replaced.append((child, name, p))
                child._parameters[name] = alias_of[id(p)]
    try:
        yield
    finally:
        for child, name, p in replaced:
            child._parameters[name] = p


def unflatten(outputs, kinds: Tuple[bool, bool]):
    outputs = list(outputs)
    features = outputs.pop(0)
    prob = outputs.pop(0) if kinds[0] else None
    center = outputs.pop(0) if kinds[1] else None
    return features, prob, center


def autocast_state(device: str) -> tuple:
    if device not in ("cpu", "cuda") or not torch.is_autocast_enabled(device):
        return (False,)
    return (True, torch.get_autocast_dtype(device))


def uncached_autocast(device: str):
    """The autocast now in force (or none) with its cache of weight casts off: a cast kept
    from before the capture would be replayed as it was, not of the updated weights."""
    state = autocast_state(device)
    if device not in ("cpu", "cuda"):
        return torch.autocast("cpu", enabled=False, cache_enabled=False)
    return torch.autocast(
        device, dtype=state[1] if state[0] else None, enabled=state[0], cache_enabled=False
    )
