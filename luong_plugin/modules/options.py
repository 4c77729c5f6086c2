"""Validation helpers: every bad option names itself and what is allowed."""

import argparse


class OptionError(ValueError):
    """An invalid model option; the message names the option and the allowed values."""


def lookup(option: str, registry: dict, name):
    name = getattr(name, "value", name)  # fairseq ChoiceEnum members
    if name not in registry:
        allowed = ", ".join(sorted(registry))
        raise OptionError(f"{option}: unknown value {name!r}; allowed values: {allowed}")
    return registry[name]


def require_positive(option: str, value) -> None:
    if value is None or value <= 0:
        raise OptionError(f"{option} must be a positive integer, got {value}")


def _positive_int(value):
    return None if value is not None and value > 0 else f"must be a positive integer, got {value}"


# What each numeric model option allows: the rule returns None, or what is wrong
# (the text after the option's name). The command line checks a value as it is
# parsed (argparse's own error, exit 2); build_model checks the same rules for
# values that bypass the parser (hydra configs, --model-overrides).
VALUE_RULES = {
    **{
        name: _positive_int
        for name in (
            "encoder_embed_dim", "encoder_hidden_size", "encoder_layers", "decoder_embed_dim",
            "decoder_hidden_size", "decoder_layers", "decoder_out_embed_dim", "window_size",
            "attention_dim", "maxout_dim", "maxout_pool", "max_source_positions",
            "max_target_positions",
        )
    },
    "dropout": lambda v: None if 0.0 <= v < 1.0 else f"must be in [0, 1), got {v}",
    "init_range": lambda v: None if v > 0 else f"must be > 0, got {v}",
    "position_logit_bound": lambda v: None if v >= 0 else f"must be >= 0 (0: off), got {v}",
    "position_lr_scale": lambda v: None if 0 < v <= 1 else f"must be in (0, 1] (1: off), got {v}",
}  # fmt: skip


def option_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def check_values(cfg, names) -> None:
    """Raise an OptionError for the first of ``names`` whose value breaks its rule."""
    for name in names:
        problem = VALUE_RULES[name](getattr(cfg, name))
        if problem:
            raise OptionError(f"{option_name(name)} {problem}")


def argparse_type(name: str, base: type):
    """``base`` (int, float) for argparse, refusing values that break ``name``'s rule
    with argparse's own one-line error naming the option."""
    rule = VALUE_RULES.get(name)
    if rule is None:
        return base

    def parse(text: str):
        value = base(text)  # ValueError: argparse says "invalid int value: 'ten'"
        problem = rule(value)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return value

    parse.__name__ = base.__name__
    return parse


class CheckpointMismatchError(OptionError):
    """A checkpoint whose parameters do not fit the model built from the options."""


def model_family(state_dict) -> str:
    """Which of the plugin's models a state dict holds, told by its encoder."""
    if "encoder.lstm.weight_ih_l0" in state_dict:
        return "luong"
    if "encoder.forward_gru.W.weight" in state_dict:
        return "bahdanau"
    return "not a luong_plugin model"


def check_state_dict(model_name: str, describe, expected: dict, found: dict) -> None:
    """Raise a short, readable error when ``found`` (a checkpoint's parameters)
    does not fit ``expected`` (the model's own state dict).

    ``describe(state_dict) -> {option: value}`` reads the options a state dict
    implies (sizes, layers, attention variant) from its keys and shapes; the
    error lists the options on which checkpoint and model differ, then the
    parameter names behind them, instead of torch's dump of every key.
    """
    missing = [k for k in expected if k not in found]
    unexpected = [k for k in found if k not in expected]
    resized = [
        k for k in expected if k in found and tuple(expected[k].shape) != tuple(found[k].shape)
    ]
    if not (missing or unexpected or resized):
        return
    family = model_family(found)
    if family != model_name:
        raise CheckpointMismatchError(
            f"the checkpoint holds a {family} model, not a {model_name} model: load it with "
            "the arch it was trained with (fairseq reads it from the checkpoint unless "
            "--arch or --model-overrides change it), or start a new training without "
            "--restore-file"
        )
    ours, theirs = describe(expected), describe(found)
    lines = [
        f"  {option}: checkpoint {theirs.get(option)}, model {value}"
        for option, value in ours.items()
        if theirs.get(option) != value
    ]

    def some(keys):
        return ", ".join(keys[:4]) + (f" and {len(keys) - 4} more" if len(keys) > 4 else "")

    if unexpected:
        lines.append(f"  parameters only in the checkpoint: {some(unexpected)}")
    if missing:
        lines.append(f"  parameters only in the model: {some(missing)}")
    for key in resized[:3]:
        lines.append(
            f"  {key}: checkpoint {list(found[key].shape)}, model {list(expected[key].shape)}"
        )
    if len(resized) > 3:
        lines.append(f"  and {len(resized) - 3} more parameters of other shapes")
    advice = (
        "A checkpoint is loaded with the options it was trained with: drop the "
        "--model-overrides or command-line options that change them, or --restore-file a "
        "checkpoint of the same architecture."
    )
    if any("dictionary size" in line for line in lines):
        advice += (
            " A different dictionary size means the data directory's dict.*.txt are not "
            "the ones the checkpoint was trained with."
        )
    raise CheckpointMismatchError(
        f"the checkpoint does not fit this {model_name} model:\n" + "\n".join(lines) + "\n" + advice
    )
