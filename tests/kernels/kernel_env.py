"""Where the kernel tests run, shared by every test module here: compiled on a CUDA GPU (bf16, the
decoder's dtype there), else in Triton's interpreter on the CPU (fp32).

TRITON_INTERPRET is read when a kernel module is first imported; tests/conftest.py sets it before any
test module is collected. A kernel module found compiled on a machine without a GPU was imported before
that (by a caller that set TRITON_INTERPRET=0, or outside pytest): `kernels()` says so instead of
re-importing it, because a reload cannot interpret triton.language's own jit functions (triton 3.9:
"Cannot call @triton.jit'd outside of the scope of a kernel").
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import torch

COMPILED = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")
DEVICE = torch.device("cuda" if COMPILED else "cpu")
DTYPE = torch.bfloat16 if COMPILED else torch.float32


def kernels(*names: str) -> list[ModuleType]:
    """specbench.kernels.<name> for each name, interpreted when there is no GPU."""
    modules = [importlib.import_module(f"specbench.kernels.{n}") for n in names]
    compiled = [m.__name__ for m in modules if not m._INTERPRETED]
    if DEVICE.type == "cpu" and compiled:
        raise RuntimeError(f"{compiled} imported without TRITON_INTERPRET=1 on a machine without a GPU "
                           f"(TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET')!r}): the kernel tests need the "
                           "interpreter there; tests/conftest.py sets it unless the environment already does")
    return modules
