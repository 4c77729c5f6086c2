"""Local windows: the gathered attention (scores, softmax and prior over the 2D + 1
window positions, scattered back into B x T x S) and the sliced one (the masked path
over the slice of positions that holds every window) equal the masked implementation
(scores over all S, ``LuongAttention.masked``) to 1e-5, for local-m and local-p with
every score, renormalised or not, forward and backward, with windows spread over the
source and windows close together; ``forward`` picks the path the thresholds say, with
and without autograd; and a model whose sources are long enough to leave the masked
path matches the loop reference of the paper's equations on either path.
"""

import pytest
import torch
from conftest import build, random_batch, random_prev_output, spread_parameters
from luong_reference import Options, reference_batch

from luong_plugin.modules import attention as attention_module
from luong_plugin.modules.attention import LuongAttention
from luong_plugin.modules.scores import SCORES as SCORE_NAMES

SCORES = list(SCORE_NAMES)  # every registered score
ATOL = 1e-5


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


def record_paths(monkeypatch, module) -> list:
    """The list that ``module``'s masked / sliced / gathered paths append their name to
    when they run (each still runs)."""
    calls = []
    for path in ("masked", "sliced", "gathered"):
        original = getattr(module, path)
        monkeypatch.setattr(
            module, path, lambda *a, p=path, f=original, **k: calls.append(p) or f(*a, **k)
        )
    return calls


def test_forward_masks_short_sources_slices_close_windows_and_gathers_the_rest(monkeypatch):
    module = LuongAttention("general", "local-m", 24, 24, window_size=3)
    calls = record_paths(monkeypatch, module)
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


def test_training_masks_short_sources_and_gathers_long_ones_never_slices(monkeypatch):
    """With autograd recording a step, every local path's backward costs O(S) per step:
    ``forward`` takes the masked path below TRAIN_GATHER_FROM windows of source and the
    gathered one beyond, whatever the slice; without autograd it picks by length and
    slice (test above)."""
    module = LuongAttention("general", "local-m", 24, 24, window_size=3)
    calls = record_paths(monkeypatch, module)
    assert attention_module.TRAIN_GATHER_FROM * module.window.width == 28
    for S in (24, 40):  # 24 < 28 <= 40
        for steps, shortest in (("spread", 1), ("together", 20)):
            query, keys, pad_mask, lengths, steps = _attention_inputs(
                S=S, steps=steps, shortest=shortest
            )
            keys.requires_grad_()
            module(query, module.precompute(keys), keys, pad_mask, lengths, steps)
            with torch.no_grad():
                module(query, module.precompute(keys), keys, pad_mask, lengths, steps)
    # (training, no autograd) for S = 24 spread, 24 together, 40 spread, 40 together
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
