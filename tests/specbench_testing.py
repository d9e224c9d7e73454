"""Helpers shared by the tests: tiny random models built from a config, and perturbed drafts.

A plain module (not conftest.py): subdirectories have conftest.py files of their own, so
`from conftest import ...` would pick whichever was imported first.
"""

from __future__ import annotations

import copy

import torch

from specbench.models.loading import LoadedModel, load_model, resolve_spec


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
