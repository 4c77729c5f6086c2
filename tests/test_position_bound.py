"""--position-logit-bound: local-p's guard against a saturated p_t.

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
        (dict(position_logit_bound=3.0, attention_window="global"), "it needs --attention-window local-p, got global"),
        (dict(position_logit_bound=3.0, attention_window="local-m"), "it needs --attention-window local-p, got local-m"),
    ],
)
def test_bad_bounds_are_refused(overrides, message):
    with pytest.raises(OptionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build("luong_tiny", **overrides)
