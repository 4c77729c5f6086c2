"""Validation helpers: every bad option names itself and what is allowed."""


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
