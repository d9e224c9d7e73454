"""Kernel tests run the Triton kernels in the CPU interpreter unless a CUDA GPU is present.

TRITON_INTERPRET is read when a kernel is decorated, so it must be set before
specbench.kernels.* is imported; conftest runs before the test modules here are collected.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
