"""What the plugin's models share: their options from one dataclass, read once
(fairseq's ChoiceEnum members unwrapped there), and checkpoint loading that checks
first: a checkpoint that does not fit the model built from the options gets a
short error naming the options on which they differ, instead of torch's dump of
every parameter name."""

from fairseq.models import FairseqEncoderDecoderModel

from ..modules.options import CheckpointMismatchError
from .config import add_dataclass_args, config_defaults, fill_defaults, plain_options


class CheckedLoad:
    """A model whose ``load_state_dict`` checks the checkpoint first (mixed in
    before ``FairseqEncoderDecoderModel``). A model gives ``FAMILY`` (its registered
    name), ``FAMILY_KEY`` (a parameter only its checkpoints hold) and
    ``describe_state_dict``; ``before_load`` may adapt the model to the checkpoint's
    options."""

    FAMILY: str
    FAMILY_KEY: str

    @staticmethod
    def describe_state_dict(state: dict) -> dict:
        """{option: value} that a state dict implies, read from its keys and shapes."""
        raise NotImplementedError

    def before_load(self, model_cfg) -> None:
        """Called with the checkpoint's model config before its parameters load."""

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        if strict:
            check_state_dict(self.FAMILY, self.describe_state_dict, self.state_dict(), state_dict)
        if model_cfg is not None:
            self.before_load(model_cfg)
        return super().load_state_dict(state_dict, strict, model_cfg=model_cfg, args=args)


class PluginModel(CheckedLoad, FairseqEncoderDecoderModel):
    """A model of the plugin: ``CONFIG`` is its dataclass of options, ``validate(cfg)``
    checks them together (raising ``OptionError``)."""

    CONFIG: type

    @staticmethod
    def validate(cfg) -> None:
        raise NotImplementedError

    @classmethod
    def add_args(cls, parser):
        add_dataclass_args(parser, cls.CONFIG)

    @classmethod
    def read_options(cls, cfg):
        """Fills every unset option of ``cfg`` (a Namespace or DictConfig), so the
        checkpoint saves them all; returns the options as plain values, validated."""
        fill_defaults(cfg, config_defaults(cls.CONFIG))
        options = plain_options(cfg, cls.CONFIG)
        cls.validate(options)
        return options


def model_family(state_dict) -> str:
    """Which of the plugin's models a state dict holds, told by a parameter only
    that model has (each model's ``FAMILY_KEY``)."""
    models = list(CheckedLoad.__subclasses__())
    while models:  # every model below CheckedLoad, PluginModel's subclasses included
        model = models.pop()
        models.extend(model.__subclasses__())
        key = getattr(model, "FAMILY_KEY", None)
        if key is not None and key in state_dict:
            return model.FAMILY
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
