"""Bad input either works correctly or stops with a message naming the input and
what is allowed: windows wider than the source, sources longer than the model or the
task allows, empty and one-token sources, and checkpoints loaded into another
architecture; through fairseq's command-line tools: test_bad_input_tools.py. Bad
options (unknown choices, values out of range, sizes that cannot fit):
test_bad_options.py."""

import pytest
import torch
from conftest import build, random_batch, random_prev_output
from fairseq.sequence_generator import SequenceGenerator

from luong_plugin.modules.options import CheckpointMismatchError, OptionError
from luong_plugin.modules.scores import SCORES
from luong_plugin.modules.windows import WINDOWS

LUONG = [dict(attention_window=w, attention_score=s) for w in WINDOWS for s in SCORES]
BAHDANAU = [dict(attention="additive"), dict(attention="none", readout_state="current")]


def variants():
    return [("luong_tiny", kw) for kw in LUONG] + [("bahdanau_tiny", kw) for kw in BAHDANAU]


def variant_id(variant):
    arch, kw = variant
    return "-".join([arch.split("_")[0], *map(str, kw.values())])


# -- window sizes wider than the source -----------------------------------------------


def _with_weights_of(model, **overrides):
    """A model of another window holding ``model``'s weights (W_p, v_p dropped)."""
    other = build(**overrides)
    state = {k: v for k, v in model.state_dict().items() if k in other.state_dict()}
    other.load_state_dict(state)
    return other


@pytest.mark.parametrize("score", list(SCORES))
@pytest.mark.parametrize("feed", [True, False])
def test_local_m_window_wider_than_the_source_is_global_attention(score, feed):
    """With D >= S_b - 1 every position of the sentence lies within D of p_t =
    min(t, S_b - 1) and the prior is 1: local-m is global attention exactly."""
    lengths = [9, 4, 1]
    base = dict(attention_score=score, input_feeding=feed)
    glob = build(attention_window="global", **base)
    src, lens = random_batch(glob.encoder.dictionary, lengths)
    prev = random_prev_output(glob.decoder.dictionary, 3, 12)  # T > S_b: p_t clipped
    expected, extra = glob(src, lens, prev)
    for size in (max(lengths) - 1, max(lengths), 1000):
        local = _with_weights_of(glob, attention_window="local-m", window_size=size, **base)
        out, local_extra = local(src, lens, prev)
        torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)
        torch.testing.assert_close(local_extra["attn"][0], extra["attn"][0], atol=1e-6, rtol=0)


@pytest.mark.parametrize("score", list(SCORES))
def test_local_p_window_wider_than_the_source_is_global_times_the_gaussian(score):
    """With D >= S_b nothing is cut, so eq. (10) is the global alignment times
    exp(-(s - p_t)² / 2σ²), σ = D/2, on every true position. Without input feeding
    h_t does not depend on attention, so both models see the same queries."""
    size = 50
    base = dict(attention_score=score, input_feeding=False, reverse_source=False)
    local = build(attention_window="local-p", window_size=size, **base)
    glob = _with_weights_of(local, attention_window="global", **base)
    src, lens = random_batch(local.encoder.dictionary, [9, 4, 1], left_pad=False)
    prev = random_prev_output(local.decoder.dictionary, 3, 6)
    _, extra = local(src, lens, prev)
    _, global_extra = glob(src, lens, prev)
    p_t = extra["p_t"][0]  # B x T
    s = torch.arange(src.size(1)).float()  # right-padded: column = true position
    gaussian = torch.exp(-((s - p_t.unsqueeze(-1)) ** 2) / (2 * (size / 2) ** 2))
    expected = global_extra["attn"][0] * gaussian  # zero on padding already
    torch.testing.assert_close(extra["attn"][0], expected, atol=1e-6, rtol=0)
    assert (extra["attn"][0] > 0).sum() == (global_extra["attn"][0] > 0).sum()


def test_local_p_window_far_wider_than_the_source_tends_to_global():
    """σ = D/2 -> ∞ flattens the Gaussian to 1 (here 1 - 2e-8 at worst)."""
    local = build(attention_window="local-p", window_size=100_000)
    glob = _with_weights_of(local, attention_window="global")
    src, lens = random_batch(local.encoder.dictionary, [9, 4, 1])
    prev = random_prev_output(local.decoder.dictionary, 3, 6)
    torch.testing.assert_close(
        local(src, lens, prev)[0], glob(src, lens, prev)[0], atol=1e-5, rtol=0
    )


# -- source lengths -------------------------------------------------------------------


def test_location_score_past_its_maximum():
    """Only the location score has a length limit of its own (one row of W_a per
    position): the model reports it, so fairseq filters longer sources, and a
    longer source handed to the model directly stops naming the option."""
    model = build(attention_window="local-p", attention_score="location", max_source_positions=8)
    assert model.max_positions() == (8, 1024)
    src, lens = random_batch(model.encoder.dictionary, [9, 4])
    prev = random_prev_output(model.decoder.dictionary, 2, 3)
    with pytest.raises(OptionError, match="source length 9 exceeds --max-source-positions 8"):
        model(src, lens, prev)
    for arch, kw in variants():
        if kw.get("attention_score") != "location":
            assert build(arch, max_source_positions=8, **kw).max_positions() == (None, 1024)


@pytest.mark.parametrize("variant", variants(), ids=variant_id)
def test_one_token_sources(variant):
    """An empty line reaches the model as the one-token source </s>: finite
    scores, the attention of a one-token sentence on its only position, zero on
    padding, in a batch, alone, and through beam search."""
    arch, kw = variant
    model = build(arch, **kw)
    d = model.encoder.dictionary
    for left_pad in (True, False):
        src, lens = random_batch(d, [1, 6, 1], left_pad=left_pad)
        prev = random_prev_output(model.decoder.dictionary, 3, 8)
        out, extra = model(src, lens, prev)
        assert torch.isfinite(out).all()
        attn = extra["attn"][0]
        if attn is None:
            continue
        real = src.ne(d.pad()).unsqueeze(1).expand_as(attn)
        assert torch.isfinite(attn).all() and attn[~real].abs().max() == 0
        one = attn[[0, 2]][real[[0, 2]]]  # the one-token rows, their only column
        if kw.get("attention_window") in ("global", "local-m", None):
            torch.testing.assert_close(one, torch.ones_like(one), atol=1e-6, rtol=0)
        else:  # local-p: the Gaussian at p_t in [0, 1] (eq. 10), not renormalised
            p_t = extra["p_t"][0][[0, 2]].flatten()
            torch.testing.assert_close(one, torch.exp(-(p_t**2) / (2 * 1.5**2)), atol=1e-6, rtol=0)
    generator = SequenceGenerator([model], model.decoder.dictionary, beam_size=3, max_len_b=5)
    src, lens = random_batch(d, [1, 1])
    hyps = generator.generate([model], {"net_input": {"src_tokens": src, "src_lengths": lens}})
    assert all(torch.isfinite(h["positional_scores"]).all() for beam in hyps for h in beam)


@pytest.mark.parametrize("arch", ["luong_tiny", "bahdanau_tiny"])
def test_a_source_without_any_token_is_refused(arch):
    model = build(arch)
    d = model.encoder.dictionary
    src, lens = random_batch(d, [4, 1])
    src[1] = d.pad()  # not even </s>
    with pytest.raises(
        ValueError,
        match=r"src_tokens rows \[1\] .* hold no token: every source "
        "needs at least its end-of-sentence symbol '</s>'",
    ):
        model(src, lens, random_prev_output(model.decoder.dictionary, 2, 3))


# -- checkpoints loaded into another architecture ------------------------------------------


def mismatch(saved, loading):
    with pytest.raises(CheckpointMismatchError) as err:
        loading.load_state_dict(saved.state_dict())
    message = str(err.value)
    assert len(message.splitlines()) <= 10  # not torch's dump of every key
    return message


@pytest.mark.parametrize(
    "saved, loading, lines",
    [
        (
            dict(attention_window="local-p"),
            dict(attention_window="global"),
            [
                "--attention-window: checkpoint local-p, model global or local-m",
                "parameters only in the checkpoint: decoder.attention.window.W_p.weight, decoder.attention.window.v_p.weight",
            ],
        ),
        (
            dict(attention_window="global"),
            dict(attention_window="local-p"),
            ["--attention-window: checkpoint global or local-m, model local-p"],
        ),
        (
            dict(attention_score="general"),
            dict(attention_score="concat"),
            ["--attention-score: checkpoint general, model concat"],
        ),
        (
            dict(attention_score="dot"),
            dict(attention_score="location"),
            ["--attention-score: checkpoint dot, model location (--max-source-positions 1024)"],
        ),
        (
            dict(encoder_layers=3, decoder_layers=3),
            dict(),
            ["--encoder-layers: checkpoint 3, model 2", "--decoder-layers: checkpoint 3, model 2"],
        ),
        (
            dict(encoder_hidden_size=32, decoder_hidden_size=32),
            dict(),
            [
                "--encoder-hidden-size: checkpoint 32, model 24",
                "encoder.lstm.weight_hh_l0: checkpoint [128, 32], model [96, 24]",
            ],
        ),
        (dict(), dict(input_feeding=False), ["--input-feeding: checkpoint on, model off"]),
        (
            dict(n_symbols=30),
            dict(),
            ["source dictionary size: checkpoint 34, model 24", "dict.*.txt"],
        ),
    ],
)
def test_luong_checkpoint_of_another_variant_names_the_options(saved, loading, lines):
    message = mismatch(build(**saved), build(**loading))
    assert message.startswith("the checkpoint does not fit this luong model:")
    assert all(line in message for line in lines), message
    assert "--model-overrides" in message


@pytest.mark.parametrize(
    "saved, loading, lines",
    [
        (
            dict(attention="additive"),
            dict(attention="none"),
            ["--attention: checkpoint additive, model none"],
        ),
        (dict(maxout_dim=6), dict(), ["--maxout-dim: checkpoint 6, model 12"]),
        (dict(attention_dim=8), dict(), ["--attention-dim: checkpoint 8, model 20"]),
    ],
)
def test_bahdanau_checkpoint_of_another_variant_names_the_options(saved, loading, lines):
    message = mismatch(build("bahdanau_tiny", **saved), build("bahdanau_tiny", **loading))
    assert all(line in message for line in lines), message


def test_checkpoint_of_the_other_model_is_named():
    luong_model, bahdanau_model = build("luong_tiny"), build("bahdanau_tiny")
    message = mismatch(luong_model, bahdanau_model)
    assert message.startswith("the checkpoint holds a luong model, not a bahdanau model")
    message = mismatch(bahdanau_model, luong_model)
    assert message.startswith("the checkpoint holds a bahdanau model, not a luong model")


@pytest.mark.parametrize("variant", variants(), ids=variant_id)
def test_a_checkpoint_of_the_same_variant_loads(variant):
    arch, kw = variant
    saved, loading = build(arch, **kw), build(arch, **kw)
    loading.load_state_dict(saved.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(saved.parameters(), loading.parameters()))
    partial = {k: v for k, v in saved.state_dict().items() if "embed_tokens" not in k}
    loading.load_state_dict(partial, strict=False)  # strict=False is left alone
