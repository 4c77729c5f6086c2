"""Registered models: one file per model."""

from . import luong  # noqa: F401
