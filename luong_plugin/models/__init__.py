"""Registered models: one file per model."""

from . import bahdanau  # noqa: F401
from . import luong  # noqa: F401
