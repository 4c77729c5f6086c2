"""Where an update's time goes on a GPU: host or device, fp32 or TF32, eager or graphed.

    python bench/gpu_probe.py --out DIR [--data BIN]    # on one GPU (a minute or two)
    python bench/gpu_probe.py --out DIR --dry-run       # the same plumbing on a CPU

bench/gpu.py times whole fairseq-train runs; this probe takes them apart, in one process, at
the paper's shape (4 x 1000 LSTMs, 1000-dim embeddings, 50K words a side) on one fixed
synthetic batch (``--batch`` sentences, every source and target ``--length`` tokens, so that
every update has the same shapes). For fairseq's ``lstm_luong_wmt_en_de`` and ours (global
general, local-p; input feeding), in each precision, it times the forward and backward pass
of one update (no optimizer step; the loss is the summed cross-entropy of the output layer):

- ``device_s``: the update's seconds, synchronised with the GPU at its end;
- ``host_s``: the seconds until the Python of the forward and backward pass has returned,
  before that synchronisation. Where ``host_s`` is close to ``device_s`` the GPU reads as
  waiting on the host, and fewer or larger kernels (not faster ones) as what would speed the
  update up (a reading: the graphed column below tests it);
- ``encoder_s``: the encoder's forward and backward alone (eager);
- ``beam_sentences_per_s``, ``beam_decoder_share`` (fp32 and bf16 rows): beam search as
  fairseq-generate runs it (beam ``--beam``, every hypothesis forced to ``--length`` tokens,
  ``--decode-sentences`` of the batch), and the share of its time inside the decoder's calls,
  each synchronised (``decoding``): whether the decoder's step or the search around it sets
  the pace of decoding;
- ``graphed_s``: the encoder run eagerly, the decoder, the output layer and the loss with
  their backward captured once as a CUDA graph (``torch.cuda.graph``) and replayed, then the
  encoder's backward: what the update costs once the host's per-step work is gone. A capture
  that fails records its error (a host synchronisation inside the decoder, say).

Precisions: ``fp32`` (torch's default: cuBLAS products in full fp32; cuDNN, which runs the
encoders' LSTMs, keeps torch's default ``cudnn.allow_tf32`` in every row), ``tf32``
(``torch.backends.cuda.matmul.allow_tf32``: cuBLAS products in TF32 too), ``amp`` (fp16
autocast, as ``--amp``), ``fp16`` (half weights and inputs, as ``--fp16``; not in the
default lists: bench/gpu.py trains it), and ours ``bf16`` (``--precision bf16``); ours also
as ``fp32-plain`` and ``bf16-plain``, with the input-feeding loop's fused CUDA cell off
(``luong_loop.FUSED_CELL``), to isolate what that kernel gives (no graph for these); and as
``bf16+graphs``, ``tf32+graphs``, ``amp+graphs``, ``fp32+graphs``: the eager update with the
plugin's own ``--cuda-graphs`` (cuda_graphs.DecoderGraphs: the decoder's pass graphed, the
output layer and the loss eager), the first warm-up capturing its one bucket; ``graphed_s``
above is the ceiling it is held to.
Writes ``probe.json`` under ``--out`` after every measurement, so a run cut short keeps
what it measured, and adds to the ``probe.json`` an earlier run (of other ``--models``)
left there.
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gpu  # noqa: E402  (the synthetic data and the model options)
import systems  # noqa: E402  (models built as fairseq-train builds them)

sys.path.insert(0, gpu.REPO)
from luong_plugin.models.luong_options import LuongConfig  # noqa: E402
from luong_plugin.modules import luong_loop  # noqa: E402
from luong_plugin.modules.cuda_graphs import DecoderGraphs  # noqa: E402

OURS = ("bf16", "bf16-plain", "fp32", "fp32-plain", "amp", "tf32",
        "bf16+graphs", "tf32+graphs", "amp+graphs", "fp32+graphs")  # fmt: skip
MODELS = {  # name: (arch options, precisions)
    "lstm": (gpu.LSTM, ("fp32", "tf32", "amp")),
    "global": (gpu.LUONG_GLOBAL, OURS),
    "local-p": (gpu.LUONG_LOCAL_P, OURS),
}
PLAIN = "-plain"  # ours with luong_loop.FUSED_CELL off: the step's elementwise work unfused
GRAPHS = gpu.GRAPHS  # ours with --cuda-graphs (cuda_graphs.DecoderGraphs): the plugin's graphs


def build(bin_dir, name, ours_bf16, dry_run):
    """(model, target dictionary) of ``name`` as fairseq-train builds them (systems.py's
    ``build``), on the GPU when present."""
    import torch

    arch = MODELS[name][0] + (["--precision", "bf16"] if ours_bf16 else [])
    common = [bin_dir, "--seed", "1", *(["--cpu"] if dry_run else [])]
    torch.manual_seed(1)
    _, task, model, _ = systems.build(
        arch, common, gpu.USER_DIR, gpu.DRY_SIZES[name] if dry_run else []
    )
    return model.to("cpu" if dry_run else "cuda").train(), task.target_dictionary


def batch(dictionary, n, length, device):
    """One fixed batch: n sentences, sources and targets of ``length`` tokens (the last
    one </s>), words drawn uniformly past the special symbols."""
    import torch

    g = torch.Generator().manual_seed(1)
    words = lambda: torch.randint(
        dictionary.nspecial, len(dictionary), (n, length), generator=g
    )  # noqa: E731
    src, tgt = words(), words()  # B x S, B x T
    src[:, -1] = tgt[:, -1] = dictionary.eos()
    prev = torch.cat([tgt[:, -1:], tgt[:, :-1]], dim=1)  # B x T: </s> y_1 .. y_{T-1}
    lengths = torch.full((n,), length)
    return {k: v.to(device) for k, v in dict(src=src, lengths=lengths, prev=prev, tgt=tgt).items()}


def tensors(value):
    """Every floating tensor inside an encoder's output (dicts, lists, tuples)."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() else []
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors(v)]
    return []


def with_leaves(value, leaves):
    """``value`` with each floating tensor replaced by the next of ``leaves``, in the
    order ``tensors`` lists them (the static inputs of a graph)."""
    import torch

    if isinstance(value, torch.Tensor):
        return leaves.pop(0) if value.is_floating_point() else value
    if isinstance(value, dict):
        return {k: with_leaves(v, leaves) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(with_leaves(v, leaves) for v in value)
    return value


def decoder_loss(model, b, encoder_out, pad):
    """The decoder, the output layer and the summed cross-entropy (fp32 softmax)."""
    import torch.nn.functional as F

    logits, _ = model.decoder(b["prev"], encoder_out=encoder_out)  # B x T x V
    return F.cross_entropy(
        logits.float().view(-1, logits.size(-1)), b["tgt"].view(-1), ignore_index=pad,
        reduction="sum",
    )  # fmt: skip


def precision_context(precision, cuda):
    import contextlib

    import torch

    if precision == "amp" and cuda:
        return torch.autocast("cuda", dtype=torch.float16)
    return contextlib.nullcontext()


def timed(step, cuda, iters):
    """(device_s, host_s): medians over ``iters`` runs of ``step`` after two warm-ups, the
    first synchronised with the GPU at the end, the second when ``step`` returned."""
    import statistics

    import torch

    device_times, host_times = [], []
    for i in range(iters + 2):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        host = time.perf_counter() - start
        if cuda:
            torch.cuda.synchronize()
        if i >= 2:
            device_times.append(time.perf_counter() - start)
            host_times.append(host)
    return statistics.median(device_times), statistics.median(host_times)


def eager(model, b, pad, precision, cuda, iters):
    """(device_s, host_s) of an update's forward and backward pass."""

    def step():
        model.zero_grad(set_to_none=True)
        with precision_context(precision, cuda):
            encoder_out = model.encoder(b["src"], src_lengths=b["lengths"])
            loss = decoder_loss(model, b, encoder_out, pad)
        loss.backward()

    return timed(step, cuda, iters)


def encoder_alone(model, b, precision, cuda, iters):
    """Seconds of the encoder's forward and backward (the sum of its outputs as the loss):
    the part a decoder graph leaves eager."""

    def step():
        model.zero_grad(set_to_none=True)
        with precision_context(precision, cuda):
            outputs = tensors(model.encoder(b["src"], src_lengths=b["lengths"]))
        sum(t.float().sum() for t in outputs if t.requires_grad).backward()

    return timed(step, cuda, iters)[0]


def graphed(model, b, pad, precision, iters):
    """Seconds per update with the decoder's forward and backward replayed as one CUDA
    graph (the encoder eager around it), median over ``iters``."""
    import statistics

    import torch

    with precision_context(precision, True):
        sample = model.encoder(b["src"], src_lengths=b["lengths"])
    leaves = [t.detach().clone().requires_grad_(True) for t in tensors(sample)]
    static_out = with_leaves(sample, list(leaves))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-ups on a side stream, as torch's docs ask
        for _ in range(3):
            model.zero_grad(set_to_none=True)
            with precision_context(precision, True):
                decoder_loss(model, b, static_out, pad).backward()
    torch.cuda.current_stream().wait_stream(side)
    model.zero_grad(set_to_none=True)
    for leaf in leaves:
        leaf.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        with precision_context(precision, True):
            loss = decoder_loss(model, b, static_out, pad)
        loss.backward()
    times = []
    for i in range(iters + 2):
        torch.cuda.synchronize()
        start = time.perf_counter()
        with precision_context(precision, True):
            encoder_out = model.encoder(b["src"], src_lengths=b["lengths"])
        outputs = tensors(encoder_out)
        for leaf, t in zip(leaves, outputs):
            leaf.data.copy_(t.detach())
        graph.replay()
        pairs = [
            (t, leaf.grad)
            for t, leaf in zip(outputs, leaves)
            if t.requires_grad and leaf.grad is not None
        ]
        torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])
        torch.cuda.synchronize()
        if i >= 2:
            times.append(time.perf_counter() - start)
    return statistics.median(times), float(loss.detach())


def decoding(model, dictionary, b, cuda, sentences, beam, length):
    """Beam search as fairseq-generate runs it (fairseq's SequenceGenerator, every hypothesis
    forced to ``length`` tokens) on the first ``sentences`` of the batch, no autograd:
    (sentences/s, the share of the search's time inside the decoder's calls). The share comes
    from a second search whose decoder calls are each synchronised with the GPU before and
    after, so it bounds what the decoder's step costs against the search around it
    (scoring, top-k, finishing hypotheses, reordering the cached states)."""
    import torch
    from fairseq.sequence_generator import SequenceGenerator

    model.eval()
    generator = SequenceGenerator([model], dictionary, beam_size=beam, max_len_a=0,
                                  max_len_b=length, min_len=length)  # fmt: skip
    sample = {"net_input": {"src_tokens": b["src"][:sentences],
                            "src_lengths": b["lengths"][:sentences]}}  # fmt: skip
    decoder = model.decoder
    plain_forward = decoder.forward
    inside = [0.0]

    def timed_forward(*args, **kwargs):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = plain_forward(*args, **kwargs)
        if cuda:
            torch.cuda.synchronize()
        inside[0] += time.perf_counter() - start
        return out

    def search():
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            generator.generate([model], sample)
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - start

    try:
        search()  # warm-up
        seconds = search()
        decoder.forward = timed_forward
        inside[0] = 0.0
        total = search()
    finally:
        if "forward" in vars(decoder):
            del decoder.forward
        model.train()
    return sentences / seconds, inside[0] / total


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="folder for probe.json")
    p.add_argument("--data", default=None, help="bench/gpu.py's binary data (made if absent)")
    p.add_argument("--work", default=None, help="where to make the data (default OUT/../gpu_work)")
    p.add_argument("--dry-run", action="store_true", help="tiny models on the CPU, no graphs")
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--precisions", nargs="+", default=None, help="instead of each model's list")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--length", type=int, default=30, help="tokens of every source and target")
    p.add_argument("--iters", type=int, default=8)
    p.add_argument("--beam", type=int, default=10)
    p.add_argument("--budget-s", type=float, default=240, help="start no measurement after this")
    p.add_argument("--decode-sentences", type=int, default=64,
                   help="beam search of this many of the batch's sentences, per model and "
                   "precision (fp32 and bf16 rows; 0: none)")  # fmt: skip
    args = p.parse_args(argv)
    import torch

    cuda = torch.cuda.is_available() and not args.dry_run
    os.makedirs(args.out, exist_ok=True)
    bin_dir = args.data
    if bin_dir is None:
        work = args.work or os.path.join(os.path.dirname(os.path.abspath(args.out)), "gpu_work")
        vocab, n, n_test = (300, 256, 8) if args.dry_run else (50000, 8192, 256)  # as gpu.py
        bin_dir = gpu.make_data(os.path.join(work, "data"), vocab, n, n_test, sys.executable, 8)
    start = time.time()  # the budget counts from here, after the data
    if args.dry_run:
        args.batch, args.length, args.iters = 4, 6, 1
        args.decode_sentences, args.beam = min(args.decode_sentences, 4), min(args.beam, 2)
    results = {"batch": args.batch, "length": args.length, "iters": args.iters,
               "device": torch.cuda.get_device_name(0) if cuda else "cpu",
               "torch": torch.__version__, "runs": {}}  # fmt: skip
    path = os.path.join(args.out, "probe.json")
    if os.path.exists(path):  # one model per process: a failed capture cannot touch the next
        try:
            with open(path) as f:
                results["runs"] = json.load(f)["runs"]
        except (ValueError, KeyError) as e:  # a process killed while writing it
            print(f"[probe] {path} unreadable ({e}): starting it again", flush=True)

    def save(key, value):
        results["runs"][key] = value
        results["seconds"] = round(time.time() - start, 1)
        with open(path + ".tmp", "w") as f:
            json.dump(results, f, indent=1)
        os.replace(path + ".tmp", path)  # whole or not at all
        print(f"[probe] {key}: {value}", flush=True)

    for name in args.models:
        precisions = args.precisions or MODELS[name][1]
        built = {}
        for precision in precisions:
            if time.time() - start > args.budget_s:
                save(f"{name} {precision}", {"skipped": "past --budget-s"})  # (as listed)
                continue
            label = precision
            plain, graphs = precision.endswith(PLAIN), precision.endswith(GRAPHS)
            luong_loop.FUSED_CELL = not plain
            precision = precision.split("-")[0].split("+")[0]
            bf16 = precision == "bf16"
            if bf16 not in built:
                built.pop(not bf16, None)  # one model on the GPU at a time
                torch.cuda.empty_cache() if cuda else None
                built[bf16] = build(bin_dir, name, bf16, args.dry_run)
            model, dictionary = built[bf16]
            if precision == "fp16":
                model = model.half()
            torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
            model.decoder.graphs = (
                DecoderGraphs(
                    model.decoder, LuongConfig.cuda_graph_step, LuongConfig.cuda_graph_limit
                )
                if graphs
                else None
            )  # the option's defaults
            b = batch(dictionary, args.batch, args.length, "cuda" if cuda else "cpu")
            tokens = args.batch * args.length
            row = {}
            try:
                device_s, host_s = eager(model, b, dictionary.pad(), precision, cuda, args.iters)
                row.update(tokens_per_s=round(tokens / device_s), device_s=round(device_s, 4),
                           host_s=round(host_s, 4))  # fmt: skip
                seconds = encoder_alone(model, b, precision, cuda, args.iters)
                row["encoder_s"] = round(seconds, 4)
            except Exception as e:  # noqa: BLE001  (recorded, the next one runs)
                row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            decodes = precision in ("fp32", "bf16") and not (plain or graphs)
            if args.decode_sentences and decodes and "error" not in row:
                try:
                    rate, share = decoding(model, dictionary, b, cuda, args.decode_sentences,
                                           args.beam, args.length)  # fmt: skip
                    row.update(beam_sentences_per_s=round(rate, 1),
                               beam_decoder_share=round(share, 3))  # fmt: skip
                except Exception as e:  # noqa: BLE001
                    row["beam_error"] = f"{type(e).__name__}: {str(e)[:300]}"
            if graphs and model.decoder.graphs.captured:  # the first pass captured its bucket
                row["buckets"] = len(model.decoder.graphs.captured)
            model.decoder.graphs = None
            if cuda and "error" not in row and not (plain or graphs):  # no host work to save
                try:
                    seconds, _ = graphed(model, b, dictionary.pad(), precision, args.iters)
                    row.update(
                        graphed_s=round(seconds, 4), graphed_tokens_per_s=round(tokens / seconds)
                    )
                except Exception as e:  # noqa: BLE001
                    row["graph_error"] = f"{type(e).__name__}: {str(e)[:300]}"
            if cuda:
                row["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
                torch.cuda.reset_peak_memory_stats()
            if precision == "fp16":
                built.pop(bf16)  # its weights are half now
            save(f"{name} {label}", row)
    torch.backends.cuda.matmul.allow_tf32 = False


if __name__ == "__main__":
    main()
