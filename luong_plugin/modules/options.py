"""Validation helpers: every bad option names itself and what is allowed."""

import argparse
import math


class OptionError(ValueError):
    """An invalid model option; the message names the option and the allowed values."""


def lookup(option: str, registry: dict, name: str):
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
            "max_target_positions", "cuda_graph_step", "cuda_graph_limit",
        )
    },
    "dropout": lambda v: None if 0.0 <= v < 1.0 else f"must be in [0, 1), got {v}",
    "init_range": lambda v: None if v > 0 else f"must be > 0, got {v}",
    "forget_gate_bias": lambda v: None if math.isfinite(v) else f"must be a number, got {v}",
    "position_logit_bound": lambda v: None if v >= 0 else f"must be >= 0 (0: off), got {v}",
    "position_lr_scale": lambda v: None if 0 < v <= 1 else f"must be in (0, 1] (1: off), got {v}",
    "position_sigma": lambda v: (
        None if 0 <= v < math.inf else f"must be a number >= 0 (0: D/2, the paper), got {v}"
    ),
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
