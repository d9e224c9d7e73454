"""Errors that name what was given, what is allowed and what to do.

Every user-facing check raises ConfigError before a model loads, so that a bad sweep job fails in
seconds, not after minutes of loading weights.
"""

from __future__ import annotations

from collections.abc import Iterable


class ConfigError(ValueError):
    """A setting is outside what specbench supports; the message says what to change."""


def unknown(kind: str, given: object, allowed: Iterable[str], hint: str = "") -> ConfigError:
    """Error for a name that is not one of `allowed` (strategy, model, dataset ...)."""
    names = ", ".join(sorted(allowed))
    msg = f"unknown {kind} {given!r}; allowed: {names}"
    return ConfigError(msg + (f". {hint}" if hint else ""))
