"""specbench/_cache.py: wheels fetched from the package index once, safely when several processes ask at once."""

from __future__ import annotations

import io
import subprocess
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from specbench import _cache
from specbench._cache import fetch_wheel
from specbench.errors import ConfigError

SMALL_WHEEL = ("six==1.17.0", "six-1.17.0")  # 11 kB, pure Python: what the package index always has


def test_three_real_downloads_at_once_leave_one_whole_wheel_and_nothing_else(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    with ThreadPoolExecutor(3) as pool:  # fetch_wheel runs pip in a subprocess: three downloads overlap
        paths = list(pool.map(lambda _: fetch_wheel(*SMALL_WHEEL), range(3)))
    assert len(set(paths)) == 1 and paths[0].parent == tmp_path / "wheels"
    assert zipfile.ZipFile(paths[0]).testzip() is None  # every member's CRC checks: the file is whole
    assert [p.name for p in (tmp_path / "wheels").iterdir()] == [paths[0].name]  # no .download-* left behind
    assert fetch_wheel(*SMALL_WHEEL) == paths[0]  # and later calls find it without pip


def test_a_requirement_the_index_lacks_is_a_config_error_naming_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    with pytest.raises(ConfigError, match="specbench-no-such-package-xyz==0.0.1"):
        fetch_wheel("specbench-no-such-package-xyz==0.0.1", "specbench_no_such")
    assert list((tmp_path / "wheels").iterdir()) == []


def test_no_other_process_sees_a_wheel_while_pip_is_still_writing_it(tmp_path, monkeypatch):
    """A fake pip (unit-test fake) writes the wheel in two halves and, between them, looks for it the way a second
    process's fetch_wheel would: it must not find a half-written file in the cache's wheels/."""
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    wheels = tmp_path / "wheels"
    body = io.BytesIO()
    with zipfile.ZipFile(body, "w") as zf:
        zf.writestr("six.py", "x = 1\n" * 1000)
    seen_midway = []

    def fake_pip_download(cmd, **kwargs):
        dest = Path(cmd[cmd.index("-d") + 1]) / "six-1.17.0-py2.py3-none-any.whl"
        data = body.getvalue()
        with open(dest, "wb") as out:
            out.write(data[: len(data) // 2])
            out.flush()
            seen_midway.extend(wheels.glob("six-1.17.0*.whl"))
            out.write(data[len(data) // 2:])
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(_cache.subprocess, "run", fake_pip_download)
    path = fetch_wheel(*SMALL_WHEEL)
    assert seen_midway == []
    assert path == wheels / "six-1.17.0-py2.py3-none-any.whl" and zipfile.ZipFile(path).testzip() is None
