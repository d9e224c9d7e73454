"""The repository passes `ruff check` under pyproject.toml's [tool.ruff] (names that do not resolve, unused imports and
variables, bare excepts), so CI catches them; ruff comes with the dev extra."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(importlib.util.find_spec("ruff") is None, reason="ruff is not installed (pip install -e '.[dev]')")
def test_ruff_check_passes():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", str(ROOT)],
                          capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 0, f"ruff check found problems:\n{done.stdout}{done.stderr}"
