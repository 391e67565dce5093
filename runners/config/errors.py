"""The error every config check raises: the field, its value and the allowed values, before anything loads."""

from __future__ import annotations


class ConfigError(ValueError):
    """A run config field has a value outside its allowed set."""
