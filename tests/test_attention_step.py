"""A training step's attention as one autograd node (attention_step.py) against the
plain masked path (attention.py, windows.py, plain autograd), and where it runs.

- Step by step over a short recurrence, in float64: c_t, a_t and p_t, and the
  gradients of the query, the keys, the values, W_a's keys and eq. (9)'s W_p and v_p
  (the keys', values', W_p's and v_p's as one product over all steps), with a loss on
  c_t, on a_t and on p_t, for global, local-m and local-p, dot and general scores,
  and every local-p option (renormalised or Luong's G, the logit bound, the detached
  query, eq. (9)'s scale, σ, the rounded centre of old checkpoints, the position
  learning rate scale).
- The node's two forms for local windows, scoring every position and gathering the
  window's keys and values (from ``attention_step.GATHER_FROM`` windows of source on),
  each against the plain path, for every case above; over sources long enough that the
  plain path gathers the windows, against the plain gathered path too.
- The decoder's training loop takes the node at every step, and takes the plain
  path where the node does not apply: other scores, frozen W_p, a query of another
  dtype, no gradient; a half encoder's
  output is attended in fp32.
The whole decoder's fast loop with this node against the paper's loop:
test_fast_paths.py.
"""

import pytest
import torch
from conftest import build, random_batch, random_prev_output, spread_parameters

from luong_plugin.modules import attention_step
from luong_plugin.modules.attention import TRAIN_GATHER_FROM, LuongAttention
from luong_plugin.modules.attention_step import fused_step, runs_fused, step_source

B, T, H, S = 4, 5, 6, 12
LENGTHS = [12, 9, 5, 7]
LEN = torch.tensor(LENGTHS)
LONG = [24, 9, 17, 5]  # TRAIN_GATHER_FROM windows of D = 2 and more: the plain path gathers


def _attention(window, score="general", **options):
    torch.manual_seed(1)
    attention = LuongAttention(score, window, H, H, window_size=2, **options).double()
    with torch.no_grad():
        for p in attention.parameters():
            p.mul_(4.0)  # logits of eq. (9) on both sides of the bound, peaked softmaxes
    return attention


def _run(attention, fused, round_centre=False, src_lengths=LENGTHS):
    """T steps of attention from fixed queries; loss on c_t, a_t and p_t. Returns the
    outputs and the gradients of (queries, keys, values, each parameter)."""
    attention.window.round_centre = round_centre
    attention.zero_grad()
    g = torch.Generator().manual_seed(2)
    S = max(src_lengths)
    queries = torch.randn(B, T, H, dtype=torch.float64, generator=g).requires_grad_()
    keys = torch.randn(B, S, H, dtype=torch.float64, generator=g).requires_grad_()
    values = torch.randn(B, S, H, dtype=torch.float64, generator=g).requires_grad_()
    weights = torch.randn(B, T, S + H, dtype=torch.float64, generator=g)  # either sign
    lengths = torch.tensor(src_lengths)
    pad = torch.arange(S).unsqueeze(0) >= lengths.unsqueeze(1)  # B x S
    proj_keys = attention.precompute(keys)  # B x S x H
    position = attention.window.loop_weights(torch.float64) if fused else None
    source = step_source(attention, proj_keys, values, lengths, position) if fused else None
    assert (source is not None) == fused
    if fused:  # the form the test asks for
        assert (source.window is not None) == (attention_step.GATHER_FROM == 1), "form"
    outputs, loss = [], 0.0
    for t in range(T):
        query, step = queries[:, t : t + 1], torch.arange(t, t + 1)
        if fused:
            assert runs_fused(query, source)
            context, probs, extras = fused_step(attention, query, source, pad, lengths, step,
                                                position)  # fmt: skip
        else:
            context, probs, extras = attention(query, proj_keys, values, pad, lengths, step)
        p_t = extras.get("p_t")
        loss = loss + (context * weights[:, t : t + 1, :H]).sum()
        loss = loss + (probs * weights[:, t : t + 1, H:]).sum()
        if p_t is not None:
            loss = loss + 0.1 * p_t.sum()
        outputs.append((context.detach(), probs.detach(), None if p_t is None else p_t.detach()))
    loss.backward()
    grads = [queries.grad, keys.grad, values.grad]
    grads += [p.grad for p in attention.parameters()]
    return outputs, grads


CASES = [
    ("global", "general", {}, False),
    ("global", "dot", {}, False),
    ("local-m", "general", {}, False),
    ("local-m", "dot", {}, False),
    ("local-p", "dot", {"renormalize": True}, False),
    ("local-p", "general", {"position_scale": "luong-code"}, False),
    ("local-p", "general", {"position_sigma": 2.5, "renormalize": True}, False),
    ("local-p", "general", {"position_lr_scale": 4.0}, False),
    ("local-p", "general", {}, True),  # floor(p_t + 0.5): checkpoints saved before 0.2
] + [
    ("local-p", "general", {"renormalize": r, "logit_bound": b, "position_detach_query": d}, False)
    for r in (False, True)
    for b in (0.0, 1.5)
    for d in (False, True)
]
CASES = [case + (LENGTHS,) for case in CASES]


CASES += [
    ("local-m", "general", {}, False, LONG),
    ("local-p", "general", {"renormalize": True, "logit_bound": 1.5}, False, LONG),
    ("local-p", "dot", {}, False, LONG),
]


FORMS = {"scored": 10**6, "gathered": 1}  # attention_step.GATHER_FROM for each of the node's forms
CASES = [
    case + (form,) for case in CASES for form in FORMS if form == "scored" or case[0] != "global"
]


@pytest.mark.parametrize("window,score,options,round_centre,src_lengths,form", CASES, ids=str)
def test_fused_step_equals_the_plain_path(
    window, score, options, round_centre, src_lengths, form, monkeypatch
):
    attention = _attention(window, score, **options)
    if src_lengths is LONG:  # the plain path gathers the windows
        assert max(LONG) >= TRAIN_GATHER_FROM * attention.window.width
    plain, plain_grads = _run(attention, False, round_centre, src_lengths)
    monkeypatch.setattr(attention_step, "GATHER_FROM", FORMS[form])
    fused, fused_grads = _run(attention, True, round_centre, src_lengths)
    for t, (got, want) in enumerate(zip(fused, plain)):
        for name, a, b in zip(("c_t", "a_t", "p_t"), got, want):
            if b is None:
                assert a is None, name
            else:
                torch.testing.assert_close(a, b, atol=1e-12, rtol=0, msg=f"{name} at step {t}")
    names = ["query", "keys", "values"] + [n for n, _ in attention.named_parameters()]
    for name, a, b in zip(names, fused_grads, plain_grads):
        if b is None:  # --position-detach-query: nothing reaches W_p through the query
            assert a is None, name
            continue
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-10, msg=name)
        assert b.abs().sum() > 0, name


def test_the_plain_path_where_the_node_does_not_apply():
    values = torch.randn(B, S, H, requires_grad=True)
    for score in ("concat", "location"):
        attention = LuongAttention(score, "global", H, H, max_source_positions=S)
        assert step_source(attention, attention.precompute(values), values, LEN, None) is None
    local_p = LuongAttention("general", "local-p", H, H, window_size=2)
    proj_keys = local_p.precompute(values)
    position = local_p.window.loop_weights(torch.float32)
    assert step_source(local_p, proj_keys, values, LEN, position) is not None
    assert step_source(local_p, proj_keys, values, LEN, None) is None  # W_p, v_p frozen
    long_values = torch.randn(B, TRAIN_GATHER_FROM * local_p.window.width, H, requires_grad=True)
    assert step_source(local_p, local_p.precompute(long_values), long_values, LEN, position)
    with torch.no_grad():
        assert step_source(local_p, proj_keys, values, LEN, position) is None
    source = step_source(local_p, proj_keys, values, LEN, position)
    query = torch.randn(B, 1, H)
    assert runs_fused(query, source)
    assert not runs_fused(query.double(), source)  # another dtype: the plain path casts
    half = step_source(local_p, proj_keys, values.bfloat16(), LEN, position)
    assert half.values.weight_t.dtype == torch.float32  # a half encoder's output: fp32 steps
    assert runs_fused(query, half)


@pytest.mark.parametrize("window", ["global", "local-m", "local-p"])
def test_local_windows_gather_from_gather_from_windows_of_source(window):
    attention = LuongAttention("general", window, H, H, window_size=2)  # W = 5
    position = attention.window.loop_weights(torch.float32)
    shortest = attention_step.GATHER_FROM * 5
    for S in (shortest - 1, shortest, 4 * shortest):
        values = torch.randn(B, S, H, requires_grad=True)
        source = step_source(attention, attention.precompute(values), values, LEN, position)
        assert (source.window is not None) == (window != "global" and S >= shortest), S


@pytest.mark.parametrize("window", ["global", "local-m", "local-p"])
def test_the_training_loop_takes_the_node_at_every_step(window, monkeypatch):
    calls = []
    apply = attention_step._AttentionStep.apply
    monkeypatch.setattr(
        attention_step._AttentionStep, "apply", lambda *a: calls.append(1) or apply(*a)
    )
    model = spread_parameters(build("luong_tiny", attention_window=window, input_feeding=True))
    src, lengths = random_batch(model.encoder.dictionary, [9, 4, 6])
    prev = random_prev_output(model.decoder.dictionary, 3, 7)
    logits, _ = model.train()(src, lengths, prev)
    logits.float().log_softmax(-1).mean().backward()
    assert len(calls) == 7
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    calls.clear()
    with torch.no_grad():
        model.eval()(src, lengths, prev)
    assert not calls  # decoding: the plain path
