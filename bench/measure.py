"""Measurements: each returns plain numbers; run.py interleaves and reports them.

Timing rules: every measurement is repeated in rounds, and within a round every
system runs once, in the same order, on the same batches (so drift on a shared
machine hits all systems alike); a figure is the median over rounds.

Shape legend: B batch, T target len, S source len, H hidden, E encoder dim,
C embedding dim, O attentional hidden (h̃) dim, V vocab, L layers, D window
half-width.
"""

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from typing import Callable, Dict, List, Sequence

import torch
from torch import Tensor

# -- the sitting ---------------------------------------------------------------
# bf16 in hardware: avx512_bf16 (AMD Zen 4/5, Intel), amx_bf16 (Intel AMX)
BF16_FLAGS = {"avx512_bf16", "amx_bf16", "amx_tile"}


def cpu() -> Dict[str, str]:
    """The CPU a benchmark ran on (lscpu): its model name, logical CPUs and bf16
    instructions ("none" without any)."""
    model, cores, info = platform.processor(), str(os.cpu_count()), {}
    try:
        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        info = dict(
            (k.strip(), v.strip())
            for k, v in (line.split(":", 1) for line in lscpu.splitlines() if ":" in line)
        )
        model, cores = info.get("Model name", model), info.get("CPU(s)", "?")
    except OSError:
        pass
    bf16 = " ".join(sorted(set(info.get("Flags", "").split()) & BF16_FLAGS)) or "none"
    return {"cpu": model, "cpus": cores, "cpu_bf16": bf16}


def commit(repo: str, paths: Sequence[str]) -> str:
    """HEAD's short hash, ``+dirty`` when ``paths`` have uncommitted changes."""
    git = ["git", "-C", repo]
    head = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(git + ["status", "--porcelain", *paths], capture_output=True, text=True)
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def median_rounds(jobs: Dict[str, Callable[[], None]], rounds: int, warmup: int = 1):
    """Seconds per call of each job, median over ``rounds`` interleaved rounds."""
    for _ in range(warmup):
        for job in jobs.values():
            job()
    times = {name: [] for name in jobs}
    for _ in range(rounds):
        for name, job in jobs.items():
            start = time.perf_counter()
            job()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}, times


# -- GEMM peak -----------------------------------------------------------------
def gemm_peak(n: int, rounds: int, dtype: str = "float32") -> float:
    """FLOP/s of torch.matmul on two n x n matrices of ``dtype``: the best of
    ``rounds`` (a peak: a busy machine only ever lowers it)."""
    a, b = (torch.randn(n, n).to(getattr(torch, dtype)) for _ in range(2))
    _, times = median_rounds({"mm": lambda: torch.matmul(a, b)}, rounds, warmup=2)
    return 2 * n**3 / min(times["mm"])


# -- training ------------------------------------------------------------------
def train_batches(task, max_tokens: int, count: int, skip: int = 0) -> List[dict]:
    """``count`` batches of the training set, as fairseq-train draws them (seed 1)."""
    task.load_dataset("train")
    iterator = task.get_batch_iterator(
        task.dataset("train"),
        max_tokens=max_tokens,
        max_positions=(1024, 1024),
        seed=1,
        num_workers=0,
    ).next_epoch_itr(shuffle=True)
    batches = [next(iterator) for _ in range(skip + count)]
    return batches[skip:]


def make_update(model, criterion, batches: Sequence[dict], clip_norm: float = 1.0):
    """One call = one training update per batch (forward, backward, clip, Adam)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def run():
        model.train()
        for sample in batches:
            loss, _, _ = criterion(model, sample)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
            optimizer.step()

    return run


def _encode(model, sample: dict):
    """The encoder's output for a batch, without autograd."""
    net_input = sample["net_input"]
    with torch.no_grad():
        return model.encoder(net_input["src_tokens"], net_input["src_lengths"])


def make_decoder_pass(model, batches: Sequence[dict], step_by_step: bool):
    """One call = forward + backward of the decoder's feature path alone (LSTM,
    attention, h̃_t; no output layer, no loss) on every batch, from encoder outputs
    computed once: what the fused no-feed path replaces."""
    model.train()
    encoded = []
    for sample in batches:
        encoder_out = {
            k: v.detach().requires_grad_(v.is_floating_point()) if torch.is_tensor(v) else v
            for k, v in _encode(model, sample).items()
        }
        encoded.append((encoder_out, sample["net_input"]["prev_output_tokens"]))

    from luong_plugin.modules.luong_loop import per_step_features

    def run():
        for encoder_out, prev in encoded:
            if step_by_step:  # the per-step loop, h̃ not fed back
                features, _ = per_step_features(model.decoder, prev, encoder_out)
            else:
                features, _ = model.decoder.extract_features(prev, encoder_out)  # B x T x O
            features.sum().backward()

    return run


def make_output_pass(model, criterion, batches: Sequence[dict]):
    """One call = forward + backward of the output layer and the loss alone, from
    fixed decoder features: the part of an update that fairseq's lstm and ours
    share operation for operation (W_s h̃_t, log-softmax, label-smoothed loss),
    or the fused loss's version of it."""
    model.train()
    fixed = []
    for sample in batches:
        encoder_out = _encode(model, sample)
        with torch.no_grad():
            features, extra = model.decoder.extract_features(
                sample["net_input"]["prev_output_tokens"], encoder_out
            )  # B x T x O
        fixed.append((features.requires_grad_(), extra, sample))

    from luong_plugin.criterions.fused_cross_entropy import (
        FusedLabelSmoothedCrossEntropyCriterion as Fused,
    )

    def run():
        for features, extra, sample in fixed:
            if isinstance(criterion, Fused):  # chunks of real tokens, no B x T x V logits
                loss = criterion.loss_of_features(model, features, sample)[0]
            else:
                logits = model.decoder.output_layer(features)  # B x T x V
                loss, _ = criterion.compute_loss(model, (logits, extra), sample)
            loss.backward()

    return run


def target_tokens(batches: Sequence[dict]) -> int:
    return sum(int(b["ntokens"]) for b in batches)


# -- generation ----------------------------------------------------------------
def test_batches(task, count: int, batch_size: int) -> List[dict]:
    task.load_dataset("test")
    iterator = task.get_batch_iterator(
        task.dataset("test"),
        max_sentences=batch_size,
        max_positions=(1024, 1024),
        required_batch_size_multiple=1,  # fairseq would drop a last partial batch
        seed=1,
        num_workers=0,
    ).next_epoch_itr(shuffle=False)
    batches, sentences = [], 0
    for sample in iterator:
        batches.append(sample)
        sentences += sample["nsentences"]
        if sentences >= count:
            break
    return batches


def make_generate(model, tgt_dict, batches: Sequence[dict], beam: int, steps: List[int]):
    """Beam search over ``batches``; appends the number of tokens generated per call.

    Untrained weights rarely rank </s> in the top beams, so every hypothesis runs
    to the length limit (source length + 5) and both models decode the same number
    of steps; the generated token count is reported to show it."""
    from fairseq.sequence_generator import SequenceGenerator

    model.eval()
    model.make_generation_fast_()  # need_attn=False, as fairseq-generate without alignments
    generator = SequenceGenerator([model], tgt_dict, beam_size=beam, max_len_a=1, max_len_b=5)

    def run():
        generated = 0
        with torch.no_grad():
            for sample in batches:
                hypos = generator.generate([model], sample)
                generated += sum(len(h[0]["tokens"]) for h in hypos)
        steps.append(generated)

    return run


# -- peak memory -----------------------------------------------------------------
def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    """VmHWM, the peak resident set of this process's address space. Not ru_maxrss:
    Linux carries the parent's peak across fork + exec into a child's ru_maxrss."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def json_from_child(run_py: str, argv: Sequence[str], env=None):
    """Run ``run.py argv`` in a fresh process; the JSON of its last output line."""
    out = subprocess.run(
        [sys.executable, run_py, *argv], check=True, capture_output=True, text=True, env=env
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def memory_in_child(run_py: str, name: str, argv: Sequence[str]) -> Dict[str, int]:
    """Peak resident memory of training ``name`` in a fresh process (run.py --memory-child)."""
    return json_from_child(run_py, [*argv, "--memory-child", name])


def allocator(env: Dict[str, str]) -> str:
    """The malloc a process with ``env`` runs on: tcmalloc when preloaded, else glibc's."""
    return "tcmalloc" if "tcmalloc" in env.get("LD_PRELOAD", "") else "glibc"


def without_tcmalloc(env: Dict[str, str]) -> Dict[str, str]:
    """``env`` with tcmalloc taken out of LD_PRELOAD (recipes/with_tcmalloc puts it there)."""
    env = dict(env)
    kept = [lib for lib in env.pop("LD_PRELOAD", "").split(":") if lib and "tcmalloc" not in lib]
    if kept:
        env["LD_PRELOAD"] = ":".join(kept)
    return env


# -- attention cost against the source length ------------------------------------
def attention_step_times(
    attentions: Dict[str, Callable],
    lengths: Sequence[int],
    batch: int,
    hidden: int,
    rounds: int,
    repeat: int = 20,
) -> Dict[str, Dict[int, float]]:
    """Seconds per decoding step (T = 1, forward) of each attention, for each S.

    ``attentions`` maps a label to f(query, proj_keys, values, pad_mask, lengths,
    steps) with the module's ``precompute`` applied by the caller once per S. A
    step takes a fraction of a millisecond: each round times ``repeat`` steps in
    a row, so the clock's and the scheduler's noise spread over them."""
    results = {name: {} for name in attentions}
    for S in lengths:
        g = torch.Generator().manual_seed(S)
        keys = torch.randn(batch, S, hidden, generator=g)  # B x S x E
        query = torch.randn(batch, 1, hidden, generator=g)  # B x 1 x H
        src_lengths = torch.full((batch,), S)
        pad_mask = torch.zeros(batch, S, dtype=torch.bool)
        steps = torch.tensor([S // 2])  # a step in the middle of the sentence
        jobs = {}
        for name, (module, call) in attentions.items():
            proj_keys = module.precompute(keys)
            args = (query, proj_keys, keys, pad_mask, src_lengths, steps)
            jobs[name] = lambda call=call, args=args: [call(*args) for _ in range(repeat)]
        with torch.no_grad():
            seconds, _ = median_rounds(jobs, rounds, warmup=1)
        for name, s in seconds.items():
            results[name][S] = s / repeat
    return results


def attention_train_job(
    module,
    call: Callable,
    keys: Tensor,
    queries: Tensor,
    pad_mask: Tensor,
    src_lengths: Tensor,
    call_kwargs: Callable[[], dict] = dict,
) -> Callable[[], None]:
    """A job: the T steps of a recurrence as the input-feeding loop runs them (each
    query, ``queries`` T x B x 1 x H, adds the previous step's context; ``keys`` B x S x E)
    through ``call``, then one backward through all of them, as in a training update.
    ``call_kwargs()`` gives ``call``'s keyword arguments afresh for each run (a
    loop's taped weights live for one pass)."""

    def job():
        values = keys.clone().requires_grad_()
        proj_keys = module.precompute(values)
        kwargs = call_kwargs()
        context, total = torch.zeros(keys.size(0), 1, keys.size(2)), 0.0  # B x 1 x E
        for t in range(queries.size(0)):
            query = queries[t] + 0.5 * context  # B x 1 x H
            args = (query, proj_keys, values, pad_mask, src_lengths, torch.tensor([t]))
            context, _, _ = call(*args, **kwargs)
            total = total + context.sum()
        total.backward()

    return job


def attention_train_step_times(
    attentions: Dict[str, Callable],
    lengths: Sequence[int],
    batch: int,
    hidden: int,
    rounds: int,
    steps: int = 20,
) -> Dict[str, Dict[int, float]]:
    """Seconds per training step (forward and backward, autograd on) of each
    attention, for each S: ``steps`` steps of a recurrence as the input-feeding
    loop runs them (each query adds the previous step's context), then one
    backward through all of them, as in a training update."""
    results = {name: {} for name in attentions}
    for S in lengths:
        g = torch.Generator().manual_seed(S)
        keys = torch.randn(batch, S, hidden, generator=g)  # B x S x E
        queries = torch.randn(steps, batch, 1, hidden, generator=g)  # T x B x 1 x H
        src_lengths = torch.randint(S // 2, S + 1, (batch,), generator=g)
        src_lengths[0] = S
        pad_mask = torch.arange(S).unsqueeze(0) >= src_lengths.unsqueeze(1)  # B x S
        jobs = {
            name: attention_train_job(module, call, keys, queries, pad_mask, src_lengths)
            for name, (module, call) in attentions.items()
        }
        seconds, _ = median_rounds(jobs, rounds, warmup=1)
        for name, s in seconds.items():
            results[name][S] = s / steps
    return results


# -- model FLOPs -----------------------------------------------------------------
def training_flops(batches: Sequence[dict], dims: dict, window: str, feed: bool) -> float:
    """Useful FLOPs of training updates on ``batches`` (real tokens only, padding
    excluded): 2 per multiply-add, forward x 3 for forward + backward.

    per source token: encoder LSTM 2·4H(C + H) (+ 2·4H·2H per upper layer),
                      the score's key projection 2·E·H (general)
    per target token: decoder LSTM 2·4H(C [+ O with feeding] + H) (+ upper layers),
                      score 2·H·n + context 2·E·n over the n = S_b (global) or
                      min(2D + 1, S_b) (local) attended positions, W_c 2·O(E + H),
                      output layer 2·O·V
    """
    H, C, O, E, V, L = (dims[k] for k in ("H", "C", "O", "E", "V", "L"))
    upper = (L - 1) * 2 * 4 * H * 2 * H
    per_src = 2 * 4 * H * (C + H) + upper + 2 * E * H
    per_tgt = 2 * 4 * H * (C + (O if feed else 0) + H) + upper + 2 * O * (E + H) + 2 * O * V
    total = 0.0
    for sample in batches:
        pad = dims["pad"]
        src_len = sample["net_input"]["src_tokens"].ne(pad).sum(1).double()  # B: S_b
        tgt_len = sample["target"].ne(pad).sum(1).double()  # B: T_b
        attended = src_len if window == "global" else src_len.clamp(max=2 * dims["D"] + 1)
        total += float(src_len.sum()) * per_src
        total += float(tgt_len.sum()) * per_tgt + float((tgt_len * attended).sum()) * 2 * (H + E)
    return 3 * total


# -- profile -----------------------------------------------------------------------
def profile_table(run: Callable[[], None], rows: int) -> List[Dict[str, object]]:
    """Top operators by self CPU time over one call of ``run`` (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    run()  # warm-up
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run()
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events) or 1
    return [
        {
            "op": e.key,
            "calls": e.count,
            "self_ms": e.self_cpu_time_total / 1000,
            "share": e.self_cpu_time_total / total,
        }
        for e in events[:rows]
    ]


# -- bf16's gain by kind of operator ----------------------------------------------
KINDS = (
    "products of one step (B rows)",
    "products over the whole batch",
    "attention products of one step (bmm)",
    "the rest",
)
_MATRIX_PRODUCTS = {
    "aten::mm": 0,
    "aten::addmm": 1,
    "aten::addmm_": 1,
    "mkldnn::_linear_pointwise": 0,
}
_BATCHED_PRODUCTS = {"aten::bmm", "aten::baddbmm"}
_RNN = {"aten::mkldnn_rnn_layer", "aten::mkldnn_rnn_layer_backward"}


def operator_kind(op: str, shapes: list, rows: int, steps: int, calls: int) -> str:
    """The kind (``KINDS``) of one profiled operator and its input shapes in a training update
    of a batch of ``rows`` sentences and ``steps`` target steps: a matrix product whose output
    has the batch's rows and that runs at least once a step is a step's (the input-feeding
    loop's, forward or backward); a batched product of one row per sentence
    (B x 1 x K by B x K x N) is a step's attention; oneDNN's LSTM and the other products run
    once over the whole batch (the encoder, the output layer, the loss, the weights'
    gradients); everything else is the rest."""
    if op in _MATRIX_PRODUCTS:
        operand = shapes[_MATRIX_PRODUCTS[op]] if len(shapes) > _MATRIX_PRODUCTS[op] else []
        if len(operand) == 2 and operand[0] == rows and calls >= steps:
            return KINDS[0]
        return KINDS[1]
    if op in _BATCHED_PRODUCTS:
        operand = shapes[0] if shapes else []
        if len(operand) == 3 and operand[0] == rows and operand[1] == 1:
            return KINDS[2]
        return KINDS[1]
    if op in _RNN:
        return KINDS[1]
    return KINDS[3]


def profile_kinds(run: Callable[[], None], rows: int, steps: int) -> Dict[str, float]:
    """Self CPU milliseconds of one call of ``run`` (torch.profiler) by ``operator_kind``."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        run()
    ms = dict.fromkeys(KINDS, 0.0)
    for e in prof.key_averages(group_by_input_shape=True):
        ms[operator_kind(e.key, e.input_shapes, rows, steps, e.count)] += (
            e.self_cpu_time_total / 1000
        )
    return ms
