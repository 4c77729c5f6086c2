"""Bad input either works correctly or stops with a message naming the option or
input and what is allowed: unknown choices, numeric values out of range (refused
as the command line is parsed), window sizes, sources longer than the
model or the task allows, empty and one-token sources, sizes that cannot fit,
and checkpoints loaded into another architecture; through fairseq's command-line
tools: test_bad_input_tools.py."""

import os
import subprocess
import sys
from dataclasses import fields

import pytest
import torch
from conftest import USER_DIR, build, parse_training_args, random_batch, random_prev_output
from fairseq.sequence_generator import SequenceGenerator

from luong_plugin.models import bahdanau, luong
from luong_plugin.models.config import TASK_OPTIONS
from luong_plugin.modules.options import (
    VALUE_RULES,
    CheckpointMismatchError,
    OptionError,
    option_name,
)
from luong_plugin.modules.scores import SCORES, build_score
from luong_plugin.modules.windows import WINDOWS

LUONG = [dict(attention_window=w, attention_score=s) for w in WINDOWS for s in SCORES]
BAHDANAU = [dict(attention="additive"), dict(attention="none", readout_state="current")]


def variants():
    return [("luong_tiny", kw) for kw in LUONG] + [("bahdanau_tiny", kw) for kw in BAHDANAU]


def variant_id(variant):
    arch, kw = variant
    return "-".join([arch.split("_")[0], *map(str, kw.values())])


# -- unknown choices ------------------------------------------------------------------


@pytest.mark.parametrize(
    "arch, argv, message",
    [
        (
            "luong_tiny",
            ["--attention-score", "cosine"],
            "argument --attention-score: invalid choice: 'cosine' (choose from 'dot', 'general', 'concat', 'location')",
        ),
        (
            "luong_tiny",
            ["--attention-window", "local"],
            "argument --attention-window: invalid choice: 'local' (choose from 'none', 'global', 'local-m', 'local-p')",
        ),
        (
            "bahdanau_tiny",
            ["--attention", "dot"],
            "argument --attention: invalid choice: 'dot' (choose from 'additive', 'none')",
        ),
        ("luong_huge", [], "argument --arch/-a: invalid choice: 'luong_huge' (choose from"),
    ],
)
def test_unknown_choice_on_the_command_line(arch, argv, message, capsys):
    with pytest.raises(SystemExit):
        parse_training_args(arch, *argv)
    err = capsys.readouterr().err
    assert message in err
    if arch == "luong_huge":  # the list of choices names every registered arch
        assert all(name in err for name in list(luong.ARCHS) + list(bahdanau.ARCHS))


@pytest.mark.parametrize(
    "arch, overrides, message",
    [
        (
            "luong_tiny",
            dict(attention_score="cosine"),
            "--attention-score: unknown value 'cosine'; allowed values: concat, dot, general, location",
        ),
        (
            "luong_tiny",
            dict(attention_window="local"),
            "--attention-window: unknown value 'local'; allowed values: global, local-m, local-p",
        ),
        (
            "bahdanau_tiny",
            dict(attention="dot"),
            "--attention: unknown value 'dot'; allowed values: additive, none",
        ),
        (
            "bahdanau_tiny",
            dict(readout_state="next"),
            "--readout-state: unknown value 'next'; allowed values: current, previous",
        ),
    ],
)
def test_unknown_choice_past_the_parser(arch, overrides, message):
    """--model-overrides and configs reach build_model without argparse's check."""
    with pytest.raises(OptionError) as err:
        build(arch, **overrides)
    assert message in str(err.value)


# -- numeric values, refused as the command line is parsed -----------------------------

CONFIGS = {"luong_tiny": luong.LuongConfig, "bahdanau_tiny": bahdanau.BahdanauConfig}


def numeric_options(arch):
    """(name, type) of every int and float option the arch's model adds."""
    return [(f.name, f.type) for f in fields(CONFIGS[arch])
            if f.type in (int, float) and f.name not in TASK_OPTIONS]  # fmt: skip


def test_every_numeric_option_has_a_rule():
    """A new numeric option cannot be added without saying what it allows."""
    for arch in CONFIGS:
        assert [n for n, _ in numeric_options(arch) if n not in VALUE_RULES] == [], arch


def refused_value(name, field_type):
    for text in ("0", "-1", "1.5"):
        value = field_type(text) if field_type is float or "." not in text else None
        if value is not None and VALUE_RULES[name](value):
            return text
    raise AssertionError(f"none of 0, -1, 1.5 breaks the rule of {name}")


@pytest.mark.parametrize(
    "arch, name, field_type", [(a, n, t) for a in CONFIGS for n, t in numeric_options(a)]
)
def test_numeric_value_refused_by_the_parser(arch, name, field_type, capsys):
    text = refused_value(name, field_type)
    with pytest.raises(SystemExit) as stop:
        parse_training_args(arch, option_name(name), text)
    assert stop.value.code == 2
    assert f"error: argument {option_name(name)}: must be " in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--window-size", "0"], "argument --window-size: must be a positive integer, got 0"),
        (["--dropout", "1"], "argument --dropout: must be in [0, 1), got 1.0"),
        (
            ["--position-lr-scale", "2"],
            "argument --position-lr-scale: must be in (0, 1] (1: off), got 2.0",
        ),
        (
            ["--position-logit-bound", "-4"],
            "argument --position-logit-bound: must be >= 0 (0: off), got -4.0",
        ),
        (["--init-range", "0"], "argument --init-range: must be > 0, got 0.0"),
        (["--window-size", "ten"], "argument --window-size: invalid int value: 'ten'"),
    ],
)
def test_fairseq_train_refuses_a_bad_value_in_one_line(argv, message):
    """The real command: argparse's error as its last line, exit 2, no traceback."""
    train = os.path.join(os.path.dirname(sys.executable), "fairseq-train")
    run = subprocess.run([train, "/no/data", "--user-dir", USER_DIR, "--arch", "luong_tiny", *argv],
                         capture_output=True, text=True)  # fmt: skip
    assert run.returncode == 2
    assert run.stderr.splitlines()[-1] == f"fairseq-train: error: {message}"
    assert "Traceback" not in run.stderr


# -- window sizes ---------------------------------------------------------------------


@pytest.mark.parametrize("window", ["local-m", "local-p"])
@pytest.mark.parametrize("size", [0, -3])
def test_window_size_must_be_positive(window, size):
    with pytest.raises(OptionError) as err:
        build(attention_window=window, window_size=size)
    assert str(err.value) == f"--window-size must be a positive integer, got {size}"


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


# -- sizes that cannot fit ----------------------------------------------------------------

LUONG_SIZES = [
    "encoder_embed_dim",
    "encoder_hidden_size",
    "encoder_layers",
    "decoder_embed_dim",
    "decoder_hidden_size",
    "decoder_layers",
    "decoder_out_embed_dim",
    "max_source_positions",
    "max_target_positions",
]
BAHDANAU_SIZES = [
    "encoder_embed_dim",
    "encoder_hidden_size",
    "decoder_embed_dim",
    "decoder_hidden_size",
    "attention_dim",
    "maxout_dim",
    "maxout_pool",
    "max_source_positions",
    "max_target_positions",
]


@pytest.mark.parametrize(
    "arch, option",
    [("luong_tiny", o) for o in LUONG_SIZES] + [("bahdanau_tiny", o) for o in BAHDANAU_SIZES],
)
@pytest.mark.parametrize("value", [0, -1])
def test_sizes_must_be_positive(arch, option, value):
    with pytest.raises(OptionError) as err:
        build(arch, **{option: value})
    flag = "--" + option.replace("_", "-")
    assert str(err.value) == f"{flag} must be a positive integer, got {value}"


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            dict(encoder_hidden_size=32),
            "the decoder starts from the encoder's final states, so --encoder-hidden-size (32) must equal --decoder-hidden-size (24)",
        ),
        (dict(decoder_layers=3), "--encoder-layers (2) must equal --decoder-layers (3)"),
        (
            dict(share_decoder_input_output_embed=True),
            "--share-decoder-input-output-embed needs --decoder-out-embed-dim (20) == --decoder-embed-dim (16)",
        ),
        (
            dict(attention_window="none", input_feeding=False),
            "with --attention-window none the output layer reads h_t, so --decoder-out-embed-dim (20) must equal --decoder-hidden-size (24)",
        ),
    ],
)
def test_luong_sizes_that_cannot_fit(overrides, message):
    with pytest.raises(OptionError) as err:
        build("luong_tiny", **overrides)
    assert message in str(err.value)
    fixed = {"decoder_out_embed_dim": 16} if "share_decoder_input_output_embed" in overrides else {}
    if fixed:  # the sizes the message asks for do fit
        build("luong_tiny", **overrides, **fixed)


def test_dot_score_with_different_sizes():
    with pytest.raises(
        OptionError,
        match="--attention-score dot needs the decoder and encoder "
        "hidden sizes to match, got decoder 24 and encoder 32; use 'general'",
    ):
        build_score("dot", 24, 32)


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
