"""The model ``luong`` against a slow, loop-based reference of Luong, Pham &
Manning (2015), eqs. (5)-(10) (tests/luong_reference.py), and the properties of
the attention weights that follow from the equations alone.

Parameters are redrawn wider than the model's own init (±0.1) so that attention
is far from uniform and local-p's p_t spreads over the whole sentence: with
±0.1 every p_t sits near S_b / 2 and every softmax near 1 / S_b, which would
hide wrong positions, windows and Gaussians.

Tensors are tiny, so the module runs torch on one thread: on a shared CPU,
thread hand-offs cost ~100x the arithmetic.

Batch: 3 sentences of unequal lengths, 12 (a local window fits strictly
inside), 4 (shorter than 2D + 1 = 7, every window is clipped) and 7; targets of
9 steps, longer than the short source so local-m's centre reaches S_b - 1.
"""

import math

import pytest
import torch
from conftest import build, random_batch, random_prev_output, spread_parameters
from luong_reference import Options, reference_batch

from luong_plugin.modules.scores import SCORES as SCORE_NAMES
from luong_plugin.modules.windows import WINDOWS as WINDOW_NAMES

SCORES = list(SCORE_NAMES)  # every registered score and window
WINDOWS = list(WINDOW_NAMES)
LOCAL = ["local-m", "local-p"]
PADS = ["left", "right"]
LENGTHS = [12, 4, 7]
TARGET_LEN = 9
D = 3  # luong_tiny's window_size
ATOL = 1e-5


# how the encoder reads a source and whether attention weighs its </s>:
# Luong's code (the default) and the two departures the model offers
LAYOUTS = {
    "luong": dict(attend_eos=False, reverse_eos=False),
    "attend-eos": dict(attend_eos=True, reverse_eos=False),
    "eos-first": dict(attend_eos=True, reverse_eos=True),
}


def _opts(
    window, score=None, feed=False, reverse=False, renormalize=False, layout="luong", sigma=0.0
):
    return Options(
        window=window,
        score=score,
        input_feeding=feed,
        reverse_source=reverse,
        window_size=D,
        renormalize=renormalize,
        sigma=sigma,
        **LAYOUTS[layout],
    )


def _build(opts: Options):
    overrides = dict(
        attention_window=opts.window,
        input_feeding=opts.input_feeding,
        reverse_source=opts.reverse_source,
        renormalize_window=opts.renormalize,
        attend_source_eos=opts.attend_eos,
        reverse_source_eos=opts.reverse_eos,
        position_sigma=opts.sigma,
    )
    if opts.window == "none":
        overrides["decoder_out_embed_dim"] = 24  # = decoder_hidden_size: W_s reads h_t
    else:
        overrides["attention_score"] = opts.score
    model = build("luong_tiny", **overrides)
    if opts.window in LOCAL:
        assert model.decoder.attention.window.window_size == D
    return spread_parameters(model)


def _assert_close(actual, expected, what: str, atol: float = ATOL):
    """max |actual - expected| <= atol, in float64, naming what differs and where."""
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    diff = (actual.double() - expected.double()).abs()
    assert float(diff.max()) <= atol, (
        f"{what}: max |diff| {float(diff.max()):.3g} > {atol} at {diff.argmax().item()}\n"
        f"model     {actual.tolist()}\nreference {expected.tolist()}"
    )


def _outputs(model, pad: str):
    """The model's (logits, extra, src_tokens) on the batch padded on one side."""
    src_tokens, src_lengths = random_batch(
        model.encoder.dictionary, LENGTHS, left_pad=pad == "left"
    )
    prev = random_prev_output(model.decoder.dictionary, len(LENGTHS), TARGET_LEN)
    with torch.no_grad():
        logits, extra = model(src_tokens, src_lengths, prev)
    return logits, extra, src_tokens


def _reference(model, opts: Options):
    """Per-sentence references; they strip the padding, so either side gives these."""
    src_tokens, _ = random_batch(model.encoder.dictionary, LENGTHS, left_pad=True)
    prev = random_prev_output(model.decoder.dictionary, len(LENGTHS), TARGET_LEN)
    return reference_batch(model, opts, src_tokens, prev, model.encoder.dictionary.pad())


def _true_columns(src_row, padding_idx):
    """Columns of one src_tokens row holding its real tokens, in original order."""
    return src_row.ne(padding_idx).nonzero().squeeze(1)  # S_b


def _assert_matches_reference(opts: Options):
    model = _build(opts)
    refs = _reference(model, opts)
    padding_idx = model.encoder.dictionary.pad()
    for pad in PADS:
        logits, extra, src_tokens = _outputs(model, pad)
        for b, ref in enumerate(refs):
            where = f"{pad}-padded sentence {b} (S_b={LENGTHS[b]})"
            _assert_close(logits[b], ref.logits, f"logits, {where}")
            if ref.attn is None:
                assert extra["attn"][0] is None
                continue
            attn = extra["attn"][0][b]  # T x S, src layout
            cols = _true_columns(src_tokens[b], padding_idx)
            _assert_close(attn[:, cols], ref.attn, f"attention, {where}")
            on_padding = attn[:, src_tokens[b].eq(padding_idx)]
            assert torch.all(on_padding == 0), f"attention on padding, {where}"
            if ref.p_t is not None:
                if opts.window == "local-p":
                    # float32 p_t is off by ~1e-6: it must not sit where floor(p_t) flips
                    frac = ref.p_t - torch.floor(ref.p_t)
                    assert torch.all((frac > 1e-5) & (frac < 1 - 1e-5)), "p_t too near an integer"
                _assert_close(extra["p_t"][0][b], ref.p_t, f"p_t, {where}")
    return refs


def _window_kinds(refs):
    """Which edge cases the batch exercised: windows strictly inside / clipped."""
    kinds = set()
    for ref, S_b in zip(refs, LENGTHS):
        for positions in ref.windows:
            inside = len(positions) == 2 * D + 1 and 0 < positions[0] and positions[-1] < S_b - 1
            kinds.add("inside" if inside else "clipped")
    return kinds


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("reverse", [True, False], ids=["reverse", "forward"])
@pytest.mark.parametrize("feed", [True, False], ids=["feed", "nofeed"])
@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("score", SCORES)
def test_attention_matches_reference(score, window, feed, reverse, layout):
    refs = _assert_matches_reference(_opts(window, score, feed, reverse, layout=layout))
    if window != "global":
        assert _window_kinds(refs) == {"inside", "clipped"}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("reverse", [True, False], ids=["reverse", "forward"])
def test_base_matches_reference(reverse, layout):
    _assert_matches_reference(_opts("none", reverse=reverse, layout=layout))


@pytest.mark.parametrize("feed", [True, False], ids=["feed", "nofeed"])
@pytest.mark.parametrize("score", SCORES)
def test_renormalized_local_p_matches_reference(score, feed):
    _assert_matches_reference(_opts("local-p", score, feed, True, renormalize=True))


@pytest.mark.parametrize("renormalize", [False, True], ids=["paper", "renormalized"])
@pytest.mark.parametrize("sigma", [0.75, 4.0])
def test_local_p_position_sigma_matches_reference(sigma, renormalize):
    """--position-sigma: eq. (10)'s Gaussian with σ narrower and wider than D/2 = 1.5;
    the window stays the 2D + 1 positions around floor(p_t)."""
    opts = _opts("local-p", "general", True, False, renormalize=renormalize, sigma=sigma)
    _assert_matches_reference(opts)


@pytest.mark.parametrize("score", SCORES)
def test_global_rows_sum_to_one(score):
    model = _build(_opts("global", score, True, True))
    for pad in PADS:
        _, extra, _ = _outputs(model, pad)
        sums = extra["attn"][0].sum(dim=-1)  # B x T
        _assert_close(sums, torch.ones_like(sums), f"row sums, {pad}-padded", atol=1e-6)


@pytest.mark.parametrize("window", LOCAL)
@pytest.mark.parametrize("score", SCORES)
def test_local_weights_zero_outside_window_and_on_padding(score, window):
    opts = _opts(window, score, True, True)
    model = _build(opts)
    refs = _reference(model, opts)
    for pad in PADS:
        _, extra, src_tokens = _outputs(model, pad)
        attn = extra["attn"][0]  # B x T x S, src layout
        for b, ref in enumerate(refs):
            cols = _true_columns(src_tokens[b], model.encoder.dictionary.pad())
            for t, positions in enumerate(ref.windows):
                inside = torch.zeros(attn.size(2), dtype=torch.bool)  # S
                inside[cols[positions]] = True
                where = (pad, b, t, positions)
                assert torch.all(attn[b, t][~inside] == 0), where
                assert torch.all(attn[b, t][inside] > 0), where


@pytest.mark.parametrize("score", SCORES)
def test_local_p_is_softmax_times_gaussian_not_renormalized(score):
    """Divide the model's weights by the Gaussian of its own p_t (σ = D/2): what
    is left is the window's softmax, so it sums to 1, while the weights do not."""
    model = _build(_opts("local-p", score, True, True))
    sigma = D / 2.0
    for pad in PADS:
        _, extra, src_tokens = _outputs(model, pad)
        attn, centres = extra["attn"][0].double(), extra["p_t"][0].double()  # B x T x S, B x T
        for b in range(len(LENGTHS)):
            cols = _true_columns(src_tokens[b], model.encoder.dictionary.pad())
            positions = torch.arange(len(cols), dtype=torch.float64)  # S_b
            for t in range(TARGET_LEN):
                weights = attn[b, t, cols]  # S_b, true order
                gauss = torch.exp(-((positions - centres[b, t]) ** 2) / (2 * sigma**2))
                align = weights / gauss  # eq. (10) undone: the window's softmax
                assert math.isclose(float(align.sum()), 1.0, abs_tol=1e-5), (pad, b, t)
                assert float(weights.sum()) < 1.0 - 1e-3, (pad, b, t)
