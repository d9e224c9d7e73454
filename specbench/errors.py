"""Errors that name what was given, what is allowed and what to do.

Every user-facing check raises ConfigError before a model loads, so that a bad sweep job fails in
seconds, not after minutes of loading weights.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A setting is outside what specbench supports; the message says what to change."""


def unknown(kind: str, given: object, allowed: Iterable[str], hint: str = "") -> ConfigError:
    """Error for a name that is not one of `allowed` (strategy, model, dataset ...)."""
    names = ", ".join(sorted(allowed))
    msg = f"unknown {kind} {given!r}; allowed: {names}"
    return ConfigError(msg + (f". {hint}" if hint else ""))


def require_int(setting: str, value: object, low: int = 1) -> None:
    """A ConfigError naming `setting` unless `value` is an integer (not a bool) >= `low`."""
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ConfigError(f"{setting}={value!r}; allowed: an integer >= {low}")


def require_number(setting: str, value: object, low: float = 0.0, meaning: str = "") -> None:
    """A ConfigError naming `setting` unless `value` is a number (not a bool) >= `low`; `meaning` says what the
    setting does, in the message."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < low:
        raise ConfigError(f"{setting}={value!r}; allowed: a number >= {low:g}" + (f" ({meaning})" if meaning else ""))


def read_json_object(path: Path, setting: str, holds: str) -> dict[str, Any]:
    """The JSON object in `path`; a ConfigError that names `setting` and the file, and says what it should
    hold, when the file cannot be read, is not JSON, or is not an object."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"{setting}: {path} could not be read as JSON ({type(e).__name__}: {e}); {holds}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{setting}: {path} holds a {type(value).__name__}, not a JSON object; {holds}")
    return value
