"""Every fast path against the plain path it replaces, and a smoke run of the
benchmark harness (bench/run.py --quick; it asserts no timing).

- No input feeding: the fused path (one ``nn.LSTM`` call over the whole target,
  attention for all steps in one product) equals the per-step loop of the same
  model (``luong_loop.per_step_features``): outputs, attention maps, p_t and
  every parameter's gradient.
- Input feeding: the fast loop (luong_loop.py: gates precomputed, weights
  concatenated once per call, gradients as one GEMM) equals the decoder's
  ``paper_loop``, the loop as the paper reads: every window and score, every
  dropout placement (the same masks), one and two layers, with gradients.
- Local windows: the gathered attention (scores, softmax and prior over the
  2D + 1 window positions, scattered back into B x T x S) and the sliced one
  (the masked path over the slice of positions that holds every window) equal
  the masked implementation (scores over all S, ``LuongAttention.masked``) to
  1e-5, for local-m and local-p with every score, renormalised or not, forward
  and backward, with windows spread over the source and windows close
  together; and a model whose sources are long enough to leave the masked path
  matches the loop reference of the paper's equations on either path.
"""

import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import REPO, build, random_batch, random_prev_output, spread_parameters
from luong_reference import Options, reference_batch

from luong_plugin.modules import attention as attention_module
from luong_plugin.modules.attention import LuongAttention
from luong_plugin.modules.luong_loop import per_step_features, run
from luong_plugin.modules.scores import SCORES as SCORE_NAMES
from luong_plugin.modules.windows import WINDOWS as WINDOW_NAMES

SCORES = list(SCORE_NAMES)  # every registered score
ATOL = 1e-5


# -- no input feeding: fused == per-step ---------------------------------------------
NO_FEED = [("none", None)] + [(w, s) for w in WINDOW_NAMES for s in SCORES]


def _run(model, src, lengths, prev, step_by_step):
    model.zero_grad()
    if step_by_step:  # the per-step loop, h̃ not fed back
        features, extra = per_step_features(model.decoder, prev, model.encoder(src, lengths))
        logits = model.decoder.output_layer(features)
    else:
        logits, extra = model(src, lengths, prev)
    logits.pow(2).mean().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), extra, grads


@pytest.mark.parametrize("window,score", NO_FEED, ids=lambda v: str(v))
def test_fused_no_feed_path_equals_per_step_path(window, score):
    overrides = dict(attention_window=window, input_feeding=False, dropout=0.0)
    if window == "none":
        overrides["decoder_out_embed_dim"] = 24  # = hidden: W_s reads h_t
    else:
        overrides["attention_score"] = score
    model = spread_parameters(build("luong_tiny", **overrides))
    src, lengths = random_batch(model.encoder.dictionary, [12, 4, 7])
    prev = random_prev_output(model.decoder.dictionary, 3, 9)
    fused = _run(model, src, lengths, prev, step_by_step=False)
    stepped = _run(model, src, lengths, prev, step_by_step=True)
    torch.testing.assert_close(stepped[0], fused[0], atol=ATOL, rtol=0)
    for key in ("attn", "p_t"):
        if fused[1][key][0] is None:
            assert stepped[1][key][0] is None, key
        else:
            torch.testing.assert_close(stepped[1][key][0], fused[1][key][0], atol=ATOL, rtol=0)
    assert fused[2].keys() == stepped[2].keys()
    assert len(fused[2]) == len([p for p in model.parameters() if p.requires_grad])
    for name in fused[2]:
        torch.testing.assert_close(stepped[2][name], fused[2][name], atol=1e-4, rtol=1e-4, msg=name)


# -- input feeding: the fast loop == the paper's loop ----------------------------------
PAPER_LOOP_CASES = (
    [(w, s, "luong", 1) for w in WINDOW_NAMES for s in SCORES]
    + [("global", "general", placement, 2) for placement in ("luong", "zaremba", "fairseq")]
    + [("local-p", "general", "luong", 2)]
)
SHORT, LONG = [11, 3, 7], [60, 12, 33]  # LONG: past TRAIN_GATHER_FROM windows, the gathered path
PAPER_LOOP_CASES = [case + (SHORT,) for case in PAPER_LOOP_CASES] + [
    (window, "general", "luong", 1, LONG) for window in ("local-m", "local-p")
]


@pytest.mark.parametrize("window,score,placement,layers,src_lengths", PAPER_LOOP_CASES, ids=str)
def test_fast_loop_equals_the_paper_loop(window, score, placement, layers, src_lengths):
    model = build(
        "luong_tiny", attention_window=window, attention_score=score, input_feeding=True,
        dropout=0.3, dropout_placement=placement, encoder_layers=layers, decoder_layers=layers,
    )  # fmt: skip
    model = spread_parameters(model).double().train()
    decoder = model.decoder
    src, lengths = random_batch(model.encoder.dictionary, src_lengths)
    if src_lengths is LONG:  # training takes the gathered path: check it does
        assert src.size(1) >= attention_module.TRAIN_GATHER_FROM * decoder.attention.window.width
    prev = random_prev_output(decoder.dictionary, 3, 8)
    results = []
    for loop in (run, lambda dec, *args: dec.paper_loop(*args)):
        model.zero_grad()
        torch.manual_seed(3)  # the same dropout masks: both loops draw them in one order
        encoder_out = model.encoder(src, lengths)
        x = decoder.dropout(decoder.embed_tokens(prev))
        out = loop(decoder, x, decoder.initial_state(encoder_out), encoder_out, torch.arange(8))
        loss = decoder.output_layer(out.attn_vec).pow(2).mean() + out.cell.sum() + out.hidden.sum()
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((out, grads))
    (fast, fast_grads), (paper, paper_grads) = results
    for field in fast._fields:
        a, b = getattr(fast, field), getattr(paper, field)
        if b is None:
            assert a is None, field
        else:
            torch.testing.assert_close(a, b, atol=1e-12, rtol=0, msg=field)
    assert fast_grads.keys() == paper_grads.keys()
    assert len(paper_grads) == len([p for p in model.parameters() if p.requires_grad])
    for name in paper_grads:
        torch.testing.assert_close(fast_grads[name], paper_grads[name], atol=1e-10, rtol=1e-10,
                                   msg=name)  # fmt: skip


# -- local windows: gathered == masked -------------------------------------------------
# target steps: windows spread over the source (past S_b for short rows), and
# windows close together (a slice of the source holds them all)
# (the module takes any steps; a decoder's are 0 .. T-1, or one step when decoding)
STEPS = {"spread": [0, 1, 3, 4, 6, 20, 35, 39], "together": [10, 10, 11, 11, 12, 12, 13, 13]}


def _attention_inputs(S=40, B=4, T=8, H=24, seed=0, steps="spread", shortest=1):
    g = torch.Generator().manual_seed(seed)
    # 5 < 2D + 1: every window clipped (unless ``shortest`` is longer)
    lengths = torch.tensor([S, 5, 23, 31])[:B].clamp(min=shortest, max=S)
    keys = torch.randn(B, S, H, generator=g)  # B x S x E
    positions = torch.arange(S)
    pad_mask = positions.unsqueeze(0) >= lengths.unsqueeze(1)  # B x S
    keys = keys.masked_fill(pad_mask.unsqueeze(-1), 0.0)
    query = torch.randn(B, T, H, generator=g) * 2  # B x T x H
    steps = torch.tensor(STEPS[steps])[:T]
    return query, keys, pad_mask, lengths, steps


def _both_paths(module, dtype, path, where):
    """(context, probs, p_t, d query, d keys, {param: grad}) of the masked path and ``path``."""
    module = module.to(dtype)
    results = {}
    for name in ("masked", path):
        query, keys, pad_mask, lengths, steps = _attention_inputs(steps=where)
        query = query.to(dtype).requires_grad_(True)
        keys = keys.to(dtype).requires_grad_(True)
        module.zero_grad()
        context, probs, extras = getattr(module, name)(
            query, module.precompute(keys), keys, pad_mask, lengths, steps
        )
        weights = torch.rand(probs.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
        (context.pow(2).sum() + (probs * weights).sum()).backward()  # maps get gradients too
        grads = {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}
        results[name] = (context, probs, extras["p_t"], query.grad, keys.grad, grads)
    return results["masked"], results[path]


@pytest.mark.parametrize("steps", STEPS)
@pytest.mark.parametrize("path", ["gathered", "sliced"])
@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize(  # --renormalize-window applies to local-p only
    "window, renormalize",
    [("local-m", False), ("local-p", False), ("local-p", True)],
    ids=["local-m", "local-p", "local-p-renormalized"],
)
def test_local_attention_paths_equal_masked(window, score, renormalize, path, steps):
    module = spread_parameters(
        LuongAttention(
            score, window, 24, 24, window_size=3, renormalize=renormalize, max_source_positions=64
        )
    )
    # float32, as trained: the forward to 1e-5
    masked, gathered = _both_paths(module, torch.float32, path, steps)
    assert gathered[1].shape == masked[1].shape == (4, 8, 40)  # the map covers all S
    for what, a, b in zip(["context", "probs", "p_t"], gathered, masked):
        torch.testing.assert_close(a, b, atol=ATOL, rtol=0, msg=what)
    # float64: gradients too (float32 ones reach ~500 and differ by rounding, ~1e-4)
    masked, gathered = _both_paths(module, torch.float64, path, steps)
    for what, a, b in zip(["context", "probs", "p_t", "d query", "d keys"], gathered, masked):
        torch.testing.assert_close(a, b, atol=1e-9, rtol=0, msg=what)
    assert masked[5].keys() == gathered[5].keys()
    assert len(masked[5]) == len(list(module.parameters()))
    for name in masked[5]:
        torch.testing.assert_close(gathered[5][name], masked[5][name], atol=1e-9, rtol=0, msg=name)
    # the windows really were clipped, partly outside and past the sentence end
    assert torch.all(masked[1][1, :, 5:] == 0)  # nothing beyond S_b = 5
    assert (masked[1] > 0).sum(-1).min() >= 1


def test_forward_masks_short_sources_slices_close_windows_and_gathers_the_rest(monkeypatch):
    module = LuongAttention("general", "local-m", 24, 24, window_size=3)
    calls = []
    for path in ("masked", "sliced", "gathered"):
        original = getattr(module, path)
        monkeypatch.setattr(
            module, path, lambda *a, p=path, f=original, **k: calls.append(p) or f(*a, **k)
        )
    cases = [(6, "spread", 1), (40, "spread", 1), (40, "together", 1), (40, "together", 20)]
    for S, steps, shortest in cases:
        inputs = _attention_inputs(S=S, steps=steps, shortest=shortest)
        query, keys, pad_mask, lengths, steps = inputs
        module(query, module.precompute(keys), keys, pad_mask, lengths, steps)
    # together but a 5-token row centred on 4: slice 1 .. 16, two windows or more
    assert calls == ["masked", "gathered", "gathered", "sliced"]
    assert attention_module.GATHER_FROM * module.window.width == 14 > 6
    # local-m centres min(t, S_b - 1) = t in 10 .. 13: positions 7 .. 16
    assert module.window_slice(torch.tensor([[10, 13], [12, 11]]), 40) == (7, 17)
    assert module.window_slice(torch.tensor([[0, 39]]), 40) == (0, 40)  # clipped to the source


@pytest.mark.parametrize("path", ["forward", "sliced", "gathered"])
@pytest.mark.parametrize("feed", [True, False], ids=["feed", "nofeed"])
@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize("window", ["local-m", "local-p"])
def test_model_on_long_sources_matches_reference(window, score, feed, path, monkeypatch):
    """Sources of 30 tokens (>= 2 windows of 7) leave the masked path: the one
    ``forward`` picks at each call, or always the sliced or the gathered one."""
    if path != "forward":
        calls = []

        def forced(self, query, proj_keys, values, *rest, position=None):
            assert position is None  # no autograd here: no position network weights
            calls.append(values.size(1))
            return getattr(self, path)(query, proj_keys, values, *rest)

        monkeypatch.setattr(LuongAttention, "forward", forced)
    opts = Options(
        window=window, score=score, input_feeding=feed, reverse_source=True, window_size=3
    )
    model = spread_parameters(
        build(
            "luong_tiny",
            attention_window=window,
            attention_score=score,
            input_feeding=feed,
            reverse_source=True,
        )
    )
    lengths = [30, 4, 17]
    src, src_lengths = random_batch(model.encoder.dictionary, lengths)
    assert src.size(1) >= attention_module.GATHER_FROM * (2 * 3 + 1)
    prev = random_prev_output(model.decoder.dictionary, 3, 9)
    with torch.no_grad():
        logits, extra = model(src, src_lengths, prev)
    refs = reference_batch(model, opts, src, prev, model.encoder.dictionary.pad())
    for b, ref in enumerate(refs):
        torch.testing.assert_close(logits[b].double(), ref.logits, atol=ATOL, rtol=0)
        cols = src[b].ne(model.encoder.dictionary.pad()).nonzero().squeeze(1)
        torch.testing.assert_close(
            extra["attn"][0][b][:, cols].double(), ref.attn, atol=ATOL, rtol=0
        )
    if path != "forward":
        assert calls and set(calls) == {src.size(1)}


# -- local-p's position network in the training loop: one node == the plain path -----
@pytest.mark.parametrize("renormalize", [False, True], ids=["G", "renorm"])
@pytest.mark.parametrize("scale", [1.0, 4.0], ids=["a1", "a4"])
@pytest.mark.parametrize("bound", [0.0, 1.5], ids=["nobound", "bound"])
def test_position_step_equals_the_plain_path(bound, scale, renormalize):
    """Eq. (9) and eq. (10)'s prior step by step as the decoder's loop runs them in
    training (``loop_weights``: one autograd node per step, the weight gradients one
    GEMM over all steps) against the plain modules: p_t, the prior and the gradient
    of the query, W_p and v_p, with logits beyond the bound on both sides."""
    from luong_plugin.modules.windows import LocalPredictiveWindow

    torch.manual_seed(0)
    B, T, H, S = 4, 6, 8, 12
    window = LocalPredictiveWindow(H, window_size=3, logit_bound=bound, renormalize=renormalize,
                                   position_lr_scale=scale).double()  # fmt: skip
    with torch.no_grad():
        window.v_p.weight.mul_(8 / scale)  # logits on both sides of ±bound
    queries = torch.randn(B, T, H, dtype=torch.float64)
    lengths = torch.tensor([12, 9, 5, 7])
    positions = torch.arange(S)
    weights = torch.randn(B, T, S, dtype=torch.float64)  # a loss of either sign per element

    def run(looped):
        window.zero_grad()
        query = queries.clone().requires_grad_()
        loop = window.loop_weights(torch.float64) if looped else None
        p_ts, priors = [], []
        for t in range(T):
            step = torch.arange(t, t + 1)
            p_t, mid = window.centre(query[:, t : t + 1], step, lengths, loop)
            priors.append(window.prior(p_t, positions))
            p_ts.append(p_t)
        p_t, prior = torch.cat(p_ts, 1), torch.cat(priors, 1)  # B x T, B x T x S
        ((weights * prior).sum() + p_t.sum()).backward()
        grads = [query.grad] + [param.grad.clone() for param in window.parameters()]
        return p_t.detach(), prior.detach(), grads

    plain, looped = run(False), run(True)
    torch.testing.assert_close(looped[0], plain[0], atol=1e-12, rtol=0)
    torch.testing.assert_close(looped[1], plain[1], atol=1e-12, rtol=0)
    for got, want in zip(looped[2], plain[2]):
        torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)
    if bound:  # the bound acted: some logit lies beyond it
        logits = window.logit(queries)
        assert (logits.abs() > bound).any() and (logits.abs() < bound).any()


def test_training_masks_short_sources_and_gathers_long_ones_never_slices(monkeypatch):
    """With autograd recording a step, every local path's backward costs O(S) per step:
    ``forward`` takes the masked path below TRAIN_GATHER_FROM windows of source and the
    gathered one beyond, whatever the slice; without autograd it picks by length and
    slice (test above)."""
    module = LuongAttention("general", "local-m", 24, 24, window_size=3)
    calls = []
    for path in ("masked", "sliced", "gathered"):
        original = getattr(module, path)
        monkeypatch.setattr(
            module, path, lambda *a, p=path, f=original, **k: calls.append(p) or f(*a, **k)
        )
    assert attention_module.TRAIN_GATHER_FROM * module.window.width == 56
    for S in (40, 60):  # 40 < 56 <= 60
        for steps, shortest in (("spread", 1), ("together", 20)):
            query, keys, pad_mask, lengths, steps = _attention_inputs(
                S=S, steps=steps, shortest=shortest
            )
            keys.requires_grad_()
            module(query, module.precompute(keys), keys, pad_mask, lengths, steps)
            with torch.no_grad():
                module(query, module.precompute(keys), keys, pad_mask, lengths, steps)
    # (training, no autograd) for S = 40 spread, 40 together, 60 spread, 60 together
    expected = [
        "masked",
        "gathered",
        "masked",
        "sliced",
        "gathered",
        "gathered",
        "gathered",
        "sliced",
    ]
    assert calls == expected


# -- the harness -----------------------------------------------------------------------
@pytest.mark.slow
def test_bench_quick_mode_writes_a_report(bible, tmp_path):
    out, raw = tmp_path / "BENCHMARKS.md", tmp_path / "bench.json"
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(REPO, "bench", "run.py"),
            "--quick",
            "--threads",
            "1",
            "--data",
            str(bible),
            "--out",
            str(out),
            "--json",
            str(raw),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1"),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads(raw.read_text())
    for section in ("train", "generate", "memory", "attention", "attention_train", "profile", "flops",
                    "gemm", "malloc"):  # fmt: skip
        assert results[section], section
    assert all(v["tok_s"] > 0 for v in results["train"].values())
    assert "fairseq lstm, fused loss" in results["malloc"]["train"]
    assert results["malloc"]["allocator"] == "glibc"  # the child runs without tcmalloc
    assert (
        results["memory"]["fairseq lstm"]["peak"] > results["memory"]["fairseq lstm"]["rss_before"]
    )
    text = out.read_text()
    for heading in (
        "## Targets",
        "## Training throughput",
        "## Beam-5 generation",
        "## Peak memory",
        "## Attention cost against the source length",
        "## Where the time goes",
        "## Training with glibc's allocator",
    ):
        assert heading in text, heading
    assert "--quick" in text
    bf16 = results["bf16"]
    if "skipped" in bf16:  # no native bf16 on this CPU: the report says so
        assert "## bf16 mixed precision" in text and bf16["skipped"] in text
    else:
        assert bf16["train"]["global-general feed [bf16]"]["tok_s"] > 0
        assert bf16["gemm"]["bf16"] > 0 and bf16["generate"] and bf16["memory"] and bf16["profile"]
        assert "| global-general feed [bf16] |" in text
