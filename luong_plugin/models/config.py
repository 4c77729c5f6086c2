"""Dataclass options shared by the plugin's models.

One source of truth for defaults: the dataclass. The command line gets every
field through ``add_dataclass_args`` with no argparse default (None), so named
architectures can fill in their differences and ``fill_defaults`` the rest;
``fairseq-hydra-train`` reads the same dataclass.
"""

import argparse
from dataclasses import MISSING, field, fields
from enum import Enum

from fairseq.dataclass import ChoiceEnum
from fairseq.models import ARCH_CONFIG_REGISTRY, register_model_architecture
from fairseq.utils import safe_getattr

from ..modules.options import argparse_type
from ..modules.precision import PRECISIONS

PrecisionChoice = ChoiceEnum(list(PRECISIONS))


def precision_field():
    """``--precision``, the same for every model of the plugin."""
    return field(
        default="fp32",
        metadata={
            "help": "bf16: mixed precision, products in bf16, weights, softmax and "
            "recurrent states fp32, on the CPU (AVX512-BF16/AMX) or a GPU; saved in the "
            "checkpoint, --model-overrides \"{'precision': 'fp32'}\" changes it at decoding"
        },
    )


def _choices(field_type):
    if isinstance(field_type, type) and issubclass(field_type, Enum):
        return [member.value for member in field_type]
    return None


# Options the translation task already owns (its defaults apply).
TASK_OPTIONS = {"max_source_positions", "max_target_positions"}


def add_dataclass_args(parser: argparse.ArgumentParser, config_cls) -> None:
    """Add one option per field, booleans as a ``--x`` / ``--no-x`` pair; choices and
    numeric ranges (``VALUE_RULES``) are checked as the command line is parsed."""
    for f in fields(config_cls):
        if f.name.startswith("_") or f.name in TASK_OPTIONS:
            continue
        option = "--" + f.name.replace("_", "-")
        help_text = f.metadata.get("help")
        try:
            if f.type is bool:
                parser.add_argument(
                    option, dest=f.name, action="store_true", default=None, help=help_text
                )
                parser.add_argument(
                    "--no-" + option[2:],
                    dest=f.name,
                    action="store_false",
                    default=None,
                    help=f"disable {option}",
                )
                continue
            choices = _choices(f.type)
            parser.add_argument(
                option,
                dest=f.name,
                type=str if choices else argparse_type(f.name, f.type),
                choices=choices,
                default=None,
                metavar=None if choices else f.type.__name__.upper(),
                help=help_text,
            )
        except argparse.ArgumentError:
            pass  # already added by another component (e.g. the task)


def config_defaults(config_cls) -> dict:
    defaults = {}
    for f in fields(config_cls):
        if f.name.startswith("_"):
            continue
        if f.default is not MISSING:
            defaults[f.name] = f.default
        elif f.default_factory is not MISSING:
            defaults[f.name] = f.default_factory()
    return defaults


def fill_defaults(args, values: dict) -> None:
    """Set every option that is unset (None) on a Namespace or DictConfig."""
    for name, value in values.items():
        if safe_getattr(args, name) is None:
            setattr(args, name, _plain(value))


def plain_options(cfg, config_cls) -> argparse.Namespace:
    """A model's options read once from a Namespace or a DictConfig, fairseq's
    ChoiceEnum members as their strings: the one place the plugin unwraps them."""
    return argparse.Namespace(
        **{f.name: _plain(safe_getattr(cfg, f.name)) for f in fields(config_cls)}
    )


def _plain(value):
    return value.value if isinstance(value, Enum) else value


def register_archs(model_name: str, config_cls, archs: dict):
    """Register the named architectures of a dataclass model.

    Each arch fills its differences, then the dataclass defaults, on the
    namespace, so the full option set is saved with the checkpoint.
    ``register_model(dataclass=...)`` registers a no-op arch named like the
    model; it is replaced by the defaults-filling one. Returns
    ``arch_config(name) -> dict`` of a named architecture's full options.
    """
    defaults = config_defaults(config_cls)

    def base_architecture(args):
        fill_defaults(args, defaults)

    ARCH_CONFIG_REGISTRY[model_name] = base_architecture

    def register(name: str, differences: dict) -> None:
        @register_model_architecture(model_name, name)
        def arch(args):
            fill_defaults(args, differences)
            base_architecture(args)

    for name, differences in archs.items():
        register(name, differences)

    def arch_config(name: str) -> dict:
        return {**defaults, **archs.get(name, {})}

    return arch_config
