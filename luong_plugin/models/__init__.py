"""Registered models: one file per model."""

from . import luong  # noqa: F401
from . import bahdanau  # noqa: F401
