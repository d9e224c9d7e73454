"""Where the kernel tests run, shared by every test module here: compiled on a CUDA GPU (bf16, the
decoder's dtype there), else in Triton's interpreter on the CPU (fp32).

TRITON_INTERPRET is read when a kernel module is first imported. conftest.py sets it before collection,
but a module imported earlier by another test directory keeps its compiled kernels: `kernels()`
re-imports such modules under the interpreter, in the order given (decode before skinny_gemm, which
reads decode's setting).
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
    if DEVICE.type == "cpu" and not all(m._INTERPRETED for m in modules):
        os.environ["TRITON_INTERPRET"] = "1"
        modules = [importlib.reload(m) for m in modules]
    return modules
