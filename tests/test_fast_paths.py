"""Every fast path of the decoder's recurrence against the plain path it replaces.

- No input feeding: the fused path (one ``nn.LSTM`` call over the whole target,
  attention for all steps in one product) equals the per-step loop of the same
  model (``luong_loop.per_step_features``): outputs, attention maps, p_t and
  every parameter's gradient.
- Input feeding: the fast loop (luong_loop.py: gates precomputed, weights
  concatenated once per call, gradients as one GEMM) equals the decoder's
  ``paper_loop``, the loop as the paper reads: every window and score, every
  dropout placement (the same masks), one and two layers, with gradients.
- local-p's position network in the training loop (one autograd node per step)
  equals the plain modules.

The local windows' gathered and sliced attention against the masked one:
test_local_attention_paths.py.
"""

import pytest
import torch
from conftest import (
    assert_fast_loop_equals_the_paper_loop,
    build,
    position_steps,
    random_batch,
    random_prev_output,
    spread_parameters,
)

from luong_plugin.modules.luong_loop import per_step_features
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
# LONG: past TRAIN_GATHER_FROM windows, where the plain path gathers
SHORT, LONG = [11, 3, 7], [60, 12, 33]
PAPER_LOOP_CASES = [case + (SHORT,) for case in PAPER_LOOP_CASES] + [
    (window, "general", "luong", 1, LONG) for window in ("local-m", "local-p")
]


@pytest.mark.parametrize("window,score,placement,layers,src_lengths", PAPER_LOOP_CASES, ids=str)
def test_fast_loop_equals_the_paper_loop(window, score, placement, layers, src_lengths):
    model = build(
        "luong_tiny", attention_window=window, attention_score=score, input_feeding=True,
        dropout=0.3, dropout_placement=placement, encoder_layers=layers, decoder_layers=layers,
    )  # fmt: skip
    paper_grads = assert_fast_loop_equals_the_paper_loop(model, src_lengths, src_lengths is LONG)
    assert len(paper_grads) == len([p for p in model.parameters() if p.requires_grad])


# -- local-p's position network in the training loop: one node == the plain path -----
@pytest.mark.parametrize("renormalize", [False, True], ids=["G", "renorm"])
@pytest.mark.parametrize("scale", [1.0, 4.0], ids=["a1", "a4"])
@pytest.mark.parametrize("bound", [0.0, 1.5], ids=["nobound", "bound"])
@pytest.mark.parametrize("detach", [False, True], ids=["query", "detached"])
def test_position_step_equals_the_plain_path(detach, bound, scale, renormalize):
    """Eq. (9) and eq. (10)'s prior step by step as the decoder's loop runs them in
    training (``loop_weights``: one autograd node per step, the weight gradients one
    GEMM over all steps) against the plain modules: p_t, the prior and the gradient
    of the query, W_p and v_p, with logits beyond the bound on both sides; with
    ``--position-detach-query`` the query gets no gradient on either path."""
    from luong_plugin.modules.windows import LocalPredictiveWindow

    torch.manual_seed(0)
    B, T, H, S = 4, 6, 8, 12
    window = LocalPredictiveWindow(H, window_size=3, logit_bound=bound, renormalize=renormalize,
                                   position_lr_scale=scale, detach_query=detach
                                   ).double()  # fmt: skip
    with torch.no_grad():
        window.v_p.weight.mul_(8 / scale)  # logits on both sides of ±bound
    queries = torch.randn(B, T, H, dtype=torch.float64)
    lengths = torch.tensor([12, 9, 5, 7])
    weights = torch.randn(B, T, S, dtype=torch.float64)  # a loss of either sign per element

    plain, looped = [position_steps(window, queries, lengths, weights, looped)
                     for looped in (False, True)]  # fmt: skip
    torch.testing.assert_close(looped[0], plain[0], atol=1e-12, rtol=0)
    torch.testing.assert_close(looped[1], plain[1], atol=1e-12, rtol=0)
    if detach:
        assert looped[2][0] is None and plain[2][0] is None  # h_t: nothing from eq. (9)
        looped, plain = (looped[0], looped[1], looped[2][1:]), (plain[0], plain[1], plain[2][1:])
    for got, want in zip(looped[2], plain[2]):
        torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)
        assert got.abs().sum() > 0
    if bound:  # the bound acted: some logit lies beyond it
        logits = window.logit(queries)
        assert (logits.abs() > bound).any() and (logits.abs() < bound).any()
