"""--position-logit-bound: local-p's guard against a saturated p_t (and, at the
end, the value checks of --position-lr-scale and --position-sigma).

Eq. (9) predicts p_t = S · sigmoid(x_t), x_t = v_pᵀ tanh(W_p h_t). Trained with
Adam, x_t runs to large negative values within the first updates (p_t = 0, where
the reversed encoder's final state lies) and the sigmoid's gradient vanishes.
The bound B leaves the forward pass alone and drops, element by element, the
gradient that would push x_t further beyond ±B. Checked here:
- the forward pass (logits, attention, p_t) is bit-identical with and without it;
- the gradient equals the plain one with exactly the outward elements zeroed,
  written out element by element;
- under Adam, a loss that pulls p_t to 0 saturates every element of the plain
  predictor and most stay unsaturated with the bound (it is not a hard limit:
  the parameters are shared, so other elements' updates still move x_t).
"""

import pytest
import torch
from conftest import build, random_batch, random_prev_output, spread_parameters

from luong_plugin.modules.options import OptionError
from luong_plugin.modules.windows import LocalPredictiveWindow

BOUND = 1.5


def _twin_models():
    plain = spread_parameters(build("luong_tiny", dropout=0.0))
    bounded = build("luong_tiny", dropout=0.0, position_logit_bound=BOUND)
    bounded.load_state_dict(plain.state_dict())
    return plain, bounded


def test_bound_leaves_the_forward_pass_unchanged():
    plain, bounded = _twin_models()
    src, lengths = random_batch(plain.encoder.dictionary, [12, 4, 7])
    prev = random_prev_output(plain.decoder.dictionary, 3, 9)
    (a, extra_a), (b, extra_b) = plain(src, lengths, prev), bounded(src, lengths, prev)
    assert torch.equal(a, b)
    assert torch.equal(extra_a["attn"][0], extra_b["attn"][0])
    assert torch.equal(extra_a["p_t"][0], extra_b["p_t"][0])


def _logits(window, query):
    return window.v_p(torch.tanh(window.W_p(query))).squeeze(-1)  # B x T: x_t


def test_bound_drops_exactly_the_outward_gradients():
    torch.manual_seed(0)
    window = LocalPredictiveWindow(8, window_size=3, logit_bound=BOUND)
    window = window.double()
    with torch.no_grad():
        window.v_p.weight.mul_(8)  # logits on both sides of ±BOUND
    query = torch.randn(3, 6, 8, dtype=torch.float64)
    lengths = torch.tensor([7, 9, 5])
    weights = torch.randn(3, 6, dtype=torch.float64)  # a loss of either sign per element

    p_t, _ = window.centre(query, torch.arange(6), lengths)
    params = list(window.parameters())
    got = torch.autograd.grad((weights * p_t).sum(), params)

    x = _logits(window, query)
    # dL/dx of the plain eq. (9), then the rule, one element at a time
    d_x = (weights * lengths.unsqueeze(1) * torch.sigmoid(x) * (1 - torch.sigmoid(x))).detach()
    kept = d_x.clone()
    for b in range(x.size(0)):
        for t in range(x.size(1)):
            below = x[b, t] < -BOUND and d_x[b, t] > 0  # a descent step lowers x further
            above = x[b, t] > BOUND and d_x[b, t] < 0  # a descent step raises x further
            if below or above:
                kept[b, t] = 0.0
    assert 0 < (kept == 0).sum() < kept.numel()  # both kinds of element occur
    assert ((x.abs() > BOUND) & (kept != 0)).any()  # beyond the bound, inward survives
    expected = torch.autograd.grad((kept * x).sum(), params)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, atol=1e-12, rtol=0)


def _train_towards_zero(bound: float) -> torch.Tensor:
    """Adam on a loss that pulls every p_t to 0; the final logits x_t."""
    torch.manual_seed(1)
    window = LocalPredictiveWindow(16, window_size=3, logit_bound=bound)
    query = torch.randn(4, 10, 16)
    lengths = torch.full((4,), 20)
    optimizer = torch.optim.Adam(window.parameters(), lr=0.01)
    for _ in range(300):
        p_t, _ = window.centre(query, torch.arange(10), lengths)
        optimizer.zero_grad()
        p_t.mean().backward()
        optimizer.step()
    with torch.no_grad():
        return _logits(window, query)


def test_bound_keeps_p_t_off_the_edge_under_adam():
    plain, bounded = _train_towards_zero(0.0), _train_towards_zero(3.0)
    # plain: every element saturates (sigmoid'(x) < 0.02), some at the wrong edge
    # (x > 4: p_t stuck near S although the loss wants 0), carried there by the
    # parameters they share with the rest
    assert plain.abs().min() > 4.0 and plain.max() > 4.0
    # bounded: the shared parameters still carry some elements past the bound,
    # but most stay where the sigmoid has a gradient
    assert (bounded.abs() < 4.0).float().mean() >= 0.5
    assert -4.0 < bounded.median() < -3.0  # the loss pulled them down to -B, no further


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(position_logit_bound=-1.0), "--position-logit-bound must be >= 0 (0: off), got -1.0"),
        (
            dict(position_logit_bound=3.0, attention_window="global"),
            "it needs --attention-window local-p, got global",
        ),
        (
            dict(position_logit_bound=3.0, attention_window="local-m"),
            "it needs --attention-window local-p, got local-m",
        ),
    ],
)
def test_bad_bounds_are_refused(overrides, message):
    with pytest.raises(OptionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build("luong_tiny", **overrides)


# -- --position-lr-scale ------------------------------------------------------


def test_position_lr_scale_matches_reference_and_keeps_the_init():
    import os
    import sys

    sys.path.insert(0, os.path.dirname(__file__))
    from conftest import random_batch, random_prev_output, spread_parameters
    from luong_reference import Options, reference_batch

    a = 0.1
    torch.manual_seed(0)
    model = build("luong_tiny", attention_window="local-p", position_lr_scale=a)
    window = model.decoder.attention.window
    for param in (window.W_p.weight, window.v_p.weight):
        effective = a * param
        assert float(effective.abs().max()) <= 0.1 and float(effective.abs().max()) > 0.05
    model = spread_parameters(model)
    src, lengths = random_batch(model.encoder.dictionary, [9, 4, 6])
    prev = random_prev_output(model.decoder.dictionary, 3, 7)
    with torch.no_grad():
        logits, extra = model(src, lengths, prev)
    opts = Options(
        window="local-p",
        score="general",
        input_feeding=True,
        reverse_source=True,
        position_lr_scale=a,
    )
    refs = reference_batch(model, opts, src, prev, model.encoder.dictionary.pad())
    for b, ref in enumerate(refs):
        assert float((logits[b].double() - ref.logits).abs().max()) < 1e-5
        assert float((extra["p_t"][0][b].double() - ref.p_t).abs().max()) < 1e-4


def test_position_lr_scale_shrinks_adam_steps_of_the_logit():
    """One Adam step moves eq. (9)'s logit about a times as far."""
    moves = {}
    for a in (1.0, 0.1):
        torch.manual_seed(0)
        model = build("luong_tiny", attention_window="local-p", position_lr_scale=a).train()
        window = model.decoder.attention.window
        query = torch.randn(4, 5, 24)
        params = [window.W_p.weight, window.v_p.weight]
        optimizer = torch.optim.Adam(params, lr=0.003)

        def logit():
            return a * window.v_p(torch.tanh(a * window.W_p(query))).squeeze(-1)

        before = logit().detach()
        logit().sum().backward()
        optimizer.step()
        moves[a] = float((logit().detach() - before).abs().mean())
    assert moves[0.1] < 0.2 * moves[1.0], moves


@pytest.mark.parametrize("value", ["0", "-1", "1.5"])
def test_position_lr_scale_out_of_range_is_refused(value):
    with pytest.raises(OptionError, match="--position-lr-scale must be in"):
        build("luong_tiny", attention_window="local-p", position_lr_scale=float(value))


@pytest.mark.parametrize(
    "window, option, value",
    [
        ("global", "position_lr_scale", 0.5),
        ("local-m", "position_sigma", 2.0),
        ("global", "position_detach_query", True),
    ],
)
def test_position_options_need_local_p(window, option, value):
    name = "--" + option.replace("_", "-")
    with pytest.raises(
        OptionError, match=f"^{name} .*; it needs --attention-window local-p, got {window}$"
    ):
        build("luong_tiny", attention_window=window, **{option: value})


# -- --position-sigma -----------------------------------------------------------


@pytest.mark.parametrize("value", ["-1", "inf", "nan"])
def test_position_sigma_out_of_range_is_refused(value):
    with pytest.raises(OptionError, match=r"--position-sigma must be a number >= 0 \(0: D/2"):
        build("luong_tiny", attention_window="local-p", position_sigma=float(value))


# -- --position-detach-query ------------------------------------------------------


@pytest.mark.parametrize("train", [False, True], ids=["plain", "training-loop"])
def test_detached_query_keeps_the_forward_and_cuts_eq9_from_the_decoder(train):
    """Same forward pass; a loss of p_t alone then reaches W_p and v_p, and the
    decoder's LSTM only without the option (eq. (9)'s gradient into h_t)."""
    plain = spread_parameters(build("luong_tiny", dropout=0.0))
    detached = build("luong_tiny", dropout=0.0, position_detach_query=True)
    detached.load_state_dict(plain.state_dict())
    src, lengths = random_batch(plain.encoder.dictionary, [12, 4, 7])
    prev = random_prev_output(plain.decoder.dictionary, 3, 9)
    grads, logits = {}, {}
    for name, model in (("plain", plain), ("detached", detached)):
        model.train(train)  # train: the decoder's per-step loop with loop weights
        out, extra = model(src, lengths, prev)
        names, params = zip(*model.named_parameters())
        p_t_grads = torch.autograd.grad(extra["p_t"][0].sum(), params, allow_unused=True)
        grads[name], logits[name] = dict(zip(names, p_t_grads)), out.detach()
    assert torch.equal(logits["plain"], logits["detached"])
    for name, grad in grads["detached"].items():
        if ".window." in name:  # W_p, v_p: the position network still learns
            assert grad is not None and grad.abs().sum() > 0, name
        else:  # p_t = f(W_p, v_p; h_t held fixed)
            assert grad is None or not grad.any(), name
        if "lstm" in name and "weight" in name:  # without the option eq. (9) reaches them
            assert grads["plain"][name].abs().sum() > 0, name
