"""Bad options stop with a message naming the option and what is allowed: unknown
choices, numeric values out of range (refused as the command line is parsed, and at
build_model when they bypass the parser), and sizes that cannot fit together. Bad
sources and checkpoints: test_bad_input.py; through fairseq's command-line tools:
test_bad_input_tools.py."""

from dataclasses import fields

import pytest
from conftest import USER_DIR, build, parse_training_args, run_tool

from luong_plugin.models import bahdanau, luong
from luong_plugin.models.config import TASK_OPTIONS
from luong_plugin.modules.options import VALUE_RULES, OptionError, option_name
from luong_plugin.modules.scores import build_score

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
    for text in ("0", "-1", "1.5", "nan"):
        value = field_type(text) if field_type is float or text.lstrip("-").isdigit() else None
        if value is not None and VALUE_RULES[name](value):
            return text
    raise AssertionError(f"none of 0, -1, 1.5, nan breaks the rule of {name}")


@pytest.mark.parametrize(
    "arch, name, field_type", [(a, n, t) for a in CONFIGS for n, t in numeric_options(a)]
)
def test_numeric_value_refused_by_the_parser(arch, name, field_type, capsys):
    text = refused_value(name, field_type)
    with pytest.raises(SystemExit) as stop:
        parse_training_args(arch, option_name(name), text)
    assert stop.value.code == 2
    assert f"error: argument {option_name(name)}: must be " in capsys.readouterr().err


BAD_VALUES = [
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
        (
            ["--position-sigma", "-2"],
            "argument --position-sigma: must be a number >= 0 (0: D/2, the paper), got -2.0",
        ),
        (["--init-range", "0"], "argument --init-range: must be > 0, got 0.0"),
        (["--forget-gate-bias", "inf"], "argument --forget-gate-bias: must be a number, got inf"),
        (["--window-size", "ten"], "argument --window-size: invalid int value: 'ten'"),
]  # fmt: skip


@pytest.mark.parametrize("argv, message", BAD_VALUES)
def test_fairseq_trains_parser_refuses_a_bad_value_in_one_line(argv, message, capsys):
    """fairseq-train's own parser, in this process: argparse's error as its last line."""
    with pytest.raises(SystemExit) as stop:
        parse_training_args("luong_tiny", *argv)
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(f": error: {message}")


# two of them through the real command (each start of fairseq-train costs seconds): one of
# our checks, one of argparse's own
@pytest.mark.parametrize("argv, message", [BAD_VALUES[0], BAD_VALUES[-1]])
def test_fairseq_train_refuses_a_bad_value_in_one_line(argv, message):
    """The real command: argparse's error as its last line, exit 2, no traceback."""
    status, _, err = run_tool(
        "fairseq-train", "/no/data", "--user-dir", USER_DIR, "--arch", "luong_tiny", *argv
    )
    assert status == 2
    assert err.splitlines()[-1] == f"fairseq-train: error: {message}"
    assert "Traceback" not in err


# -- window sizes ---------------------------------------------------------------------


@pytest.mark.parametrize("window", ["local-m", "local-p"])
@pytest.mark.parametrize("size", [0, -3])
def test_window_size_must_be_positive(window, size):
    with pytest.raises(OptionError) as err:
        build(attention_window=window, window_size=size)
    assert str(err.value) == f"--window-size must be a positive integer, got {size}"


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
