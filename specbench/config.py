"""The configuration's shape: where conf/ is, the structured configs Hydra checks every setting against, and
the one model group that serves as both `target` and `draft`.

- conf/ sits at the repository's top level; pyproject maps the package `specbench.conf` to it, so an installed
  specbench holds the same files in specbench/conf/. CONF_DIR is whichever of the two this copy has.
- Types are Hydra's to check: `max_new_tokens=abc` fails while the config is composed, naming the key and the
  value. The dataclasses' __post_init__ checks each setting's range when plan() builds them
  (OmegaConf.to_object); plan() checks what only settings together, a strategy's class or the machine decide.
- conf/model/<name>.yaml is one model, usable as target or draft. Hydra takes `target=<name>` as a choice in a
  group named `target` (with `- model@target: <name>` in the defaults list it would take it as a value), so
  the ConfigStore holds target/<name> and draft/<name> for each model file, each mounting the file in its own
  package (`- /model@_here_: <name>`). conf/draft/ adds the two choices only a draft has: auto and self. A
  model yaml on your own search path is chosen with `model@target=<name>` (`model@draft=<name>` after a
  `draft=<preset>`, whose entry it overrides).
- Strategies, prompt sets and loggers are classes named by their yaml's `_target_`: target_class finds one
  without building it, build builds it with hydra.utils.instantiate. The groups whose options differ in
  shape (strategy, logger) stay plain mappings: the class declares the settings it takes, and plan()
  refuses the others before any model loads.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.utils import get_class, instantiate
from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from specbench.data.prompts import DatasetConfig
from specbench.errors import ConfigError, unknown
from specbench.metrics import OBJECTIVES


def _conf_dir() -> Path:
    packaged = Path(__file__).with_name("conf")  # an installed package: pyproject maps specbench.conf to conf/
    if (packaged / "config.yaml").is_file():
        return packaged
    return Path(__file__).resolve().parents[1] / "conf"  # a checkout


CONF_DIR = _conf_dir()
SCHEDULERS = ("static", "continuous")  # engine.scheduler (engine.Engine.generate)
BASELINE_ORDERS = ("interleaved", "sequential")  # RunConfig.baseline_order


@dataclass
class ModelConfig:
    """conf/model/<name>.yaml, as `target` or `draft` (specbench.models.loading.resolve_spec reads it)."""

    name: str = MISSING  # a preset (specbench.models.presets); a model given by `path` is named by its path
    path: str | None = None  # hub id, local directory or .gguf file: overrides the preset's weights
    source: str | None = None  # null = the preset's; random = random weights of the preset's architecture
    trust_remote_code: bool = False
    revision: str | None = None
    init_seed: int = 0  # the seed of random weights


@dataclass
class SamplingConfig:
    """conf/sampling/default.yaml; the ranges are specbench.verify.SamplingParams'."""

    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    seed: int = 0


@dataclass
class EngineConfig:
    """conf/engine/default.yaml. device, dtype and backend are checked against the machine by plan()."""

    batch_size: int = 1
    device: str = "auto"  # auto = cuda when visible, else cpu
    dtype: str = "auto"  # auto = bfloat16 on cuda; on cpu bfloat16 where run.auto_dtype says, else float32
    backend: str = "auto"  # auto = our decoder for llama/qwen2/qwen3, transformers' forward otherwise
    ignore_eos: bool = False  # true: every prompt generates max_new_tokens
    warmup: bool = True  # one untimed short batch per engine before timing
    triton_verify: Any = "auto"  # auto | true | false (OmegaConf 2.3 types no union of str and bool)
    cuda_graphs: Any = "auto"  # auto | true | false
    batch_invariant: Any = "auto"  # auto | true | false: logits independent of batch and verify width (run.plan)
    pdl: bool = True  # CUDA, Hopper and later: programmatic dependent launch of the decoder's GEMMs (kernels.decode.pdl)
    fused_mlp: bool = True  # CUDA: a layer's MLP in one launch at up to 16 rows (kernels.skinny_gemm.fused_mlp), same bits
    tensor_parallel: int = 1  # ranks the target is split over (models/tensor_parallel.py); the draft is replicated
    shard_on_load: bool = False  # random-weight targets at tensor_parallel > 1: each rank builds only its own share
    scheduler: str = "static"  # static: batches of batch_size prompts; continuous: batch_size slots, refilled
    stop_token_ids: list[int] = field(default_factory=list)  # ids that end a row as EOS does (besides the target's EOS)

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError(f"engine.batch_size={self.batch_size!r}; allowed: an integer >= 1")
        if self.tensor_parallel < 1:
            raise ConfigError(f"engine.tensor_parallel={self.tensor_parallel!r}; allowed: an integer >= 1")
        if self.triton_verify not in ("auto", True, False):
            raise unknown("engine.triton_verify", self.triton_verify, ["auto", "true", "false"])
        if self.batch_invariant not in ("auto", True, False):
            raise unknown("engine.batch_invariant", self.batch_invariant, ["auto", "true", "false"])
        if self.cuda_graphs not in ("auto", True, False, None):
            raise unknown("engine.cuda_graphs", self.cuda_graphs, ["auto", "true", "false"])
        if self.scheduler not in SCHEDULERS:
            raise unknown("engine.scheduler", self.scheduler, list(SCHEDULERS))
        bad = [t for t in self.stop_token_ids if not isinstance(t, int) or isinstance(t, bool) or t < 0]
        if bad:
            raise ConfigError(f"engine.stop_token_ids={list(self.stop_token_ids)!r}: {bad!r} are not token ids; "
                              f"allowed: a list of integers >= 0 (they end a row as EOS does)")


@dataclass
class VerifyConfig:
    """Speed studies with random weights: acceptance drawn at given rates, NOT lossless (specbench.synthetic)."""

    synthetic_acceptance_length: float | None = None  # a constant per-position rate giving this AL at the run's k
    synthetic_per_position: list[float] | None = None  # or the conditional rates [a_1, ..., a_k]

    def __post_init__(self) -> None:
        rates = self.synthetic_per_position
        if rates is not None and not all(0 <= a <= 1 for a in rates):
            raise ConfigError(f"verify.synthetic_per_position={rates!r}; allowed: a list of rates in [0, 1], "
                              f"one per draft position")


@dataclass
class PromptSetConfig(DatasetConfig):
    """conf/dataset/<name>.yaml: a prompt set's options and `_target_`, the DatasetConfig subclass that reads it."""

    _target_: str = MISSING


@dataclass
class RunConfig:
    """One job (conf/config.yaml): its groups and settings, typed."""

    target: ModelConfig = MISSING
    draft: ModelConfig = field(default_factory=lambda: ModelConfig(name="auto"))
    strategy: dict[str, Any] = MISSING  # `_target_` (a Proposer subclass), name, k and the class's own settings
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    dataset: PromptSetConfig = MISSING
    logger: dict[str, Any] = field(default_factory=lambda: {"_target_": "specbench.logging.NullLogger", "name": "none"})
    engine: EngineConfig = field(default_factory=EngineConfig)
    max_new_tokens: int = 64  # per prompt
    max_model_len: int = 2048  # prompt + max_new_tokens + k + 1 must fit
    verify: VerifyConfig = field(default_factory=VerifyConfig)
    baseline: bool = True  # also run strategy `none` on the same prompts and report speedup over it
    baseline_order: str = "interleaved"  # or sequential (specbench.run._decode)
    output_dir: str | None = None  # null = Hydra's job directory
    resume: bool | None = None  # skip a job whose directory holds a complete results.json (specbench.__main__)
    objective: str = "speedup"  # the job's one number for a settings optimizer (specbench.metrics.OBJECTIVES)

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise unknown("objective", self.objective, OBJECTIVES)
        if self.baseline_order not in BASELINE_ORDERS:
            raise unknown("baseline_order", self.baseline_order, BASELINE_ORDERS)
        if self.max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens={self.max_new_tokens!r}; allowed: an integer >= 1")
        if self.max_model_len < 2:
            raise ConfigError(f"max_model_len={self.max_model_len!r}; allowed: an integer >= 2")


def run_config(cfg: DictConfig | Mapping[str, Any]) -> RunConfig:
    """`cfg` as a RunConfig, every setting's type and range checked. A composed config has its types from
    Hydra already; a plain mapping (a notebook's dict) is checked against the same schema here."""
    try:
        if not (isinstance(cfg, DictConfig) and OmegaConf.get_type(cfg) is RunConfig):
            cfg = OmegaConf.merge(OmegaConf.structured(RunConfig), cfg)
        return OmegaConf.to_object(cfg)
    except OmegaConfBaseException as e:
        raise ConfigError(readable(e)) from None


def readable(e: OmegaConfBaseException) -> str:
    """An OmegaConf error as one line naming the setting: "max_new_tokens: Value 'abc' of type 'str' could not be
    converted to Integer" rather than its message, key, reference and object types on four lines."""
    key = getattr(e, "full_key", None)
    message = str(e).split("\n")[0]
    return f"{key}: {message}" if key else message


def options(group: str) -> list[str]:
    """The choices of a config group in conf/ (target and draft choose from conf/model/; draft adds conf/draft/)."""
    folders = {"target": ("model",), "draft": ("model", "draft")}.get(group, (group,))
    return sorted({p.stem for folder in folders for p in (CONF_DIR / folder).glob("*.yaml")})


def target_class(cfg: Mapping[str, Any], group: str, base: type) -> type:
    """The class a group option's `_target_` names, found without building it (plan() asks it about the
    settings before any model loads); a ConfigError listing the group's options when it is not there."""
    target, name = cfg.get("_target_"), cfg.get("name")
    if not target:
        raise unknown(group, name, options(group), hint=f"a {group} config needs `_target_: <{base.__name__} subclass>`")
    try:
        cls = get_class(target)
    except Exception as e:  # noqa: BLE001 - hydra wraps import errors in several types
        raise unknown(group, name or target, options(group), hint=f"could not import {target}: {e}") from None
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ConfigError(f"{group}._target_={target!r} is not a {base.__module__}.{base.__name__} subclass")
    return cls


def build(cfg: Mapping[str, Any], /, *args: Any, **kwargs: Any) -> Any:
    """hydra.utils.instantiate(cfg), then called with `args` and `kwargs` as they are. Given to instantiate,
    they would be merged into the config (a dataclass such as BuildContext copied into a new one, losing
    identity), and every error the class raises would come back wrapped; a ConfigError must say what to change."""
    return instantiate(cfg, _partial_=True, _convert_="all")(*args, **kwargs)


JOB_DIR_BYTES = 160  # a sweep job's directory name stays well under the filesystems' 255-byte limit


def job_dirname(overrides: str) -> str:
    """A sweep job's directory name from Hydra's override_dirname: itself when short, else its start and a hash of
    the whole (a long override list made a name past 255 bytes and the sweep died before its first job). A '/' in a
    value (strategy.checkpoint=/some/dir) becomes '_', so each job is one directory, not a tree of them. The same
    overrides give the same name, so `+resume=true` finds its old directories."""
    overrides = overrides.replace("/", "_")
    raw = overrides.encode()
    if len(raw) <= JOB_DIR_BYTES:
        return overrides
    digest = hashlib.sha256(raw).hexdigest()[:12]
    return raw[: JOB_DIR_BYTES - 13].decode(errors="ignore") + "-" + digest


def _register() -> None:
    cs = ConfigStore.instance()
    cs.store(name="specbench_schema", node=RunConfig)
    for path in sorted((CONF_DIR / "model").glob("*.yaml")):
        for role in ("target", "draft"):
            cs.store(group=role, name=path.stem, node={"defaults": [{"/model@_here_": path.stem}]})
    # conf/train/config.yaml's hydra.searchpath: conf/ wherever this copy has it (model/ and logger/ for training)
    OmegaConf.register_new_resolver("specbench.conf_dir", lambda: str(CONF_DIR), replace=True)
    OmegaConf.register_new_resolver("specbench.job_dirname", job_dirname, replace=True)


_register()
