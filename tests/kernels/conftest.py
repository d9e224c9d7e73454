"""Kernel tests run the Triton kernels in the CPU interpreter unless a CUDA GPU is present.

TRITON_INTERPRET is read when a kernel is decorated, so it must be set before
specbench.kernels.* is imported: tests/conftest.py sets it, before any test module is collected.

In the interpreter, `tl.dot` is numpy's matmul, and numpy's float32 matmul may sum in an order that
follows the operands' shapes: on an AMD EPYC (AVX2, no AVX-512; 2026-12-02) rows 0..2 of a 16-row
product differed in their last bits from the same rows multiplied alone, where on the AVX-512 machines
they had not. A GPU's MMA sums each output in an order the tile's height does not change, and the
batch-invariance tests here check that property of our kernels. So on the CPU the interpreter's dot is
replaced (a test double, for these tests only) by one whose result does not depend on the shapes:
each chunk's products summed in float64, then rounded to float32 once.
"""

import os

import numpy as np


def _shape_independent_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
    from triton.runtime.interpreter import TensorHandle

    if a.data.dtype != np.float32 or b.data.dtype != np.float32 or d.data.dtype != np.float32:
        return _numpy_dot(self, a, b, d, input_precision, max_num_imprecise_acc)
    product = np.matmul(a.data.astype(np.float64), b.data.astype(np.float64)).astype(np.float32)
    return TensorHandle(product + d.data, d.dtype.scalar)


_numpy_dot = None
if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    try:
        from triton.runtime.interpreter import InterpreterBuilder
    except ImportError:  # no triton: the kernel tests skip themselves
        InterpreterBuilder = None
    if InterpreterBuilder is not None and hasattr(InterpreterBuilder, "create_dot"):
        _numpy_dot = InterpreterBuilder.create_dot
        InterpreterBuilder.create_dot = _shape_independent_dot
