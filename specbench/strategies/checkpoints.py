"""Drafter checkpoints (eagle, medusa): find their files, read them safely, check them before loading.

A checkpoint is a directory holding `model.safetensors` (or `pytorch_model.bin`, or Medusa's
`medusa_lm_head.pt`) and `config.json`, its weights file, the name of a directory shipped in
specbench/checkpoints/, or a hub id (org/name, downloaded with huggingface_hub when no such path
exists). Besides specbench's own format, the published EAGLE-1/2, EAGLE-3, Medusa and speculators
layouts load (formats.py converts them). A path that does not
exist is an error naming it: nothing falls back to another directory's files. Weights load from
safetensors, or with `torch.load(weights_only=True)`, never by unpickling arbitrary objects. Every
failure to read a checkpoint is a ConfigError naming the file and what is allowed; validate() reads
the config and the weights' header, so these fail before any model loads. `checkpoint_record` is
what results.json records: the files resolved and the weights' SHA-256.

Two names are not paths: `auto` (the default) is the checkpoint shipped for the target in
specbench/checkpoints/ when there is one, else a random-initialised head when the target itself has
random weights (a speed study: its acceptance comes from verify.synthetic_*), else an error naming
the target; `random` is a random-initialised head for any target, built from a fixed seed.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import MISSING
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from specbench.errors import ConfigError, read_json_object

PACKAGED = Path(__file__).resolve().parents[1] / "checkpoints"  # drafters trained for the packaged presets
TRAIN_HINT = "train one with `python -m specbench.train strategy={kind} target=<target preset>` (see specbench/checkpoints/README.md)"
# looked up, in this order, inside a checkpoint directory (medusa_lm_head.*: the Medusa authors' head file)
WEIGHT_NAMES = ("model.safetensors", "pytorch_model.bin", "medusa_lm_head.safetensors", "medusa_lm_head.pt")
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")  # org/name, as the hub spells repository ids
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
_WEIGHTS_ALLOWED = ("allowed: a safetensors file, or a torch.save of a dict of tensors (read with "
                    "torch.load(weights_only=True); pickled Python objects are never loaded)")


AUTO, RANDOM = "auto", "random"
RANDOM_HEAD_SEED = 0  # random heads are the same on every run and machine


def packaged_for(kind: str, target_label: str) -> str | None:
    """The name of the checkpoint in specbench/checkpoints/ trained for `target_label` (its config.json's target)."""
    for d in sorted(PACKAGED.iterdir()) if PACKAGED.is_dir() else ():
        if d.is_dir() and d.name.startswith(kind) and (d / "config.json").is_file():
            try:
                if json.loads((d / "config.json").read_text(encoding="utf-8")).get("target") == target_label:
                    return d.name
            except (OSError, ValueError, AttributeError):
                continue
    return None


def resolve_checkpoint(given: Any, kind: str, target: Any) -> str:
    """strategy.checkpoint with `auto` resolved for `target` (a ModelSpec): a shipped checkpoint's name, `random`,
    or the path given. A ConfigError when auto finds nothing for a target with real weights."""
    if given != AUTO:
        return given
    shipped = packaged_for(kind, target.label)
    if shipped:
        return shipped
    if getattr(target, "source", None) == RANDOM:
        return RANDOM
    raise ConfigError(f"strategy.checkpoint=auto: no {kind} checkpoint in specbench/checkpoints/ was trained for target "
                      f"{target.label!r}; allowed: strategy.checkpoint=<directory with model.safetensors and config.json>, "
                      f"or strategy.checkpoint=random (a random-initialised head: lossless, but it accepts little; for "
                      f"speed studies with verify.synthetic_*). {TRAIN_HINT.format(kind=kind)}")


def random_head(build: Any, target_model: torch.nn.Module) -> Any:
    """A head from `build()` with weights drawn from RANDOM_HEAD_SEED (the global RNG is left as it was), frozen,
    on the target's device and dtype."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(RANDOM_HEAD_SEED)
        head = build()
    emb = target_model.get_input_embeddings().weight
    return head.to(device=emb.device, dtype=emb.dtype).eval().requires_grad_(False)


def _allowed_checkpoints(kind: str) -> str:
    shipped = sorted(p.name for p in PACKAGED.iterdir() if p.is_dir() and p.name.startswith(kind)) if PACKAGED.is_dir() else []
    return (f"allowed: a directory holding {' or '.join(WEIGHT_NAMES)} and config.json, its weights file, or the name "
            f"of a checkpoint in specbench/checkpoints/ ({', '.join(shipped) or 'none for ' + kind})")


def checkpoint_files(path: str | Path | None, kind: str) -> tuple[Path, Path]:
    """(weights, config.json), resolved, of the checkpoint `path` names: a directory holding both, its weights file
    (config.json beside it), or the name of a directory in specbench/checkpoints/. A ConfigError naming `path`
    when it does not exist or lacks a file: a mistyped path never falls back to another checkpoint."""
    if not path:
        raise ConfigError(f"strategy {kind} needs strategy.checkpoint=<directory with model.safetensors and "
                          f"config.json>; none was given. {TRAIN_HINT.format(kind=kind)}")
    given = str(path)
    p = Path(given).expanduser()
    if not p.exists() and (PACKAGED / given).exists():  # a checkpoint shipped in specbench/checkpoints/
        p = PACKAGED / given
    if not p.exists() and HUB_ID.fullmatch(given) and not given.startswith((".", "/", "~")):
        p = hub_snapshot(given, kind)
    if not p.exists():
        raise ConfigError(f"strategy.checkpoint={given!r} does not exist (resolved to {p.absolute()}); "
                          f"{_allowed_checkpoints(kind)}. Or {TRAIN_HINT.format(kind=kind)}")
    if p.is_dir():
        weights = next((p / n for n in WEIGHT_NAMES if (p / n).is_file()), None)
        if weights is None:
            raise ConfigError(f"strategy.checkpoint={given!r}: the directory {p} holds neither {' nor '.join(WEIGHT_NAMES)}; "
                              f"{_allowed_checkpoints(kind)}. Or {TRAIN_HINT.format(kind=kind)}")
    elif p.suffix in WEIGHT_SUFFIXES:
        weights = p
    else:
        raise ConfigError(f"strategy.checkpoint={given!r} is a file but not a weights file ({', '.join(WEIGHT_SUFFIXES)}); "
                          f"{_allowed_checkpoints(kind)}")
    config = weights.parent / "config.json"
    if not config.is_file():
        raise ConfigError(f"strategy.checkpoint={given!r}: {config} not found (a drafter's config.json sits beside its "
                          f"weights); {_allowed_checkpoints(kind)}. Or {TRAIN_HINT.format(kind=kind)}")
    return weights.resolve(), config.resolve()


@functools.lru_cache(maxsize=16)  # validate, load and record resolve the same id: ask the hub once per process
def hub_snapshot(repo_id: str, kind: str) -> Path:
    """A hub checkpoint's local snapshot (config.json and weights only), via huggingface_hub; a ConfigError naming
    the id when it cannot be fetched (this machine may have no hub)."""
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(repo_id, allow_patterns=["config.json", *WEIGHT_NAMES]))
    except Exception as e:  # noqa: BLE001 - offline, unknown repo, gated ...
        first = next((line.strip() for line in str(e).splitlines() if line.strip()), "")
        raise ConfigError(f"strategy.checkpoint={repo_id!r} does not exist locally, and as a hub id it could not be "
                          f"downloaded ({type(e).__name__}: {first[:200]}); {_allowed_checkpoints(kind)}") from None


def _a(kind: object) -> str:
    """A drafter kind, quoted, with its indefinite article: "an 'eagle'", "a 'medusa'"."""
    return f"{'an' if str(kind)[:1].lower() in ('a', 'e', 'i', 'o', 'u') else 'a'} {kind!r}"


def read_checkpoint_config(config: Path, given: str, kind: str, fields: type) -> tuple[dict[str, Any], Any]:
    """The raw config.json of a `kind` checkpoint and the `fields` dataclass built from it; a ConfigError naming
    the file when it is not JSON, holds another drafter kind or lacks a required field."""
    raw = read_json_object(config, f"strategy.checkpoint={given!r}",
                           "it holds the drafter's config as `specbench.train` writes it")
    if raw.get("kind", kind) != kind:
        held = raw.get("kind")
        raise ConfigError(f"strategy.checkpoint={given!r} holds {_a(held)} drafter, not {_a(kind)} one; "
                          f"use strategy={held} with it, or give {_a(kind)} checkpoint")
    required = [n for n, f in fields.__dataclass_fields__.items() if f.default is MISSING and f.default_factory is MISSING]
    missing = [n for n in required if n not in raw]
    if missing:
        raise ConfigError(f"strategy.checkpoint={given!r}: {config} lacks {missing}; a {kind} config.json holds "
                          f"{', '.join(fields.__dataclass_fields__)}")
    return raw, fields(**{n: raw[n] for n in fields.__dataclass_fields__ if n in raw})


def _reason(e: BaseException) -> str:
    """One line saying why a weights file did not load (torch's refusals run to a page of advice)."""
    text = str(e)
    refused = next((line.strip() for line in text.splitlines() if "Unsupported global" in line or "Unsupported operand" in line), None)
    if refused:
        return f"it holds pickled Python objects, not only tensors ({refused})"
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return f"{type(e).__name__}: {first[:300]}"


def check_weights(weights: Path) -> None:
    """Read a weights file's header (safetensors) or its tensors without copying them (torch zip files, mmap):
    a corrupt or unsafe file is a ConfigError naming it, before any model loads."""
    try:
        if weights.suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(weights), "pt") as f:
                list(f.keys())
            return
        import zipfile

        torch.load(weights, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(weights))
    except Exception as e:  # noqa: BLE001 - SafetensorError, UnpicklingError, RuntimeError, EOFError, OSError ...
        raise ConfigError(f"checkpoint weights {weights} could not be read: {_reason(e)}; {_WEIGHTS_ALLOWED}") from None


def read_weights(weights: Path) -> dict[str, torch.Tensor]:
    """The tensors of a weights file; never unpickles arbitrary objects. Any failure is a ConfigError naming the file."""
    try:
        if weights.suffix == ".safetensors":
            from safetensors.torch import load_file

            state: Any = load_file(str(weights))
        else:
            state = torch.load(weights, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - as in check_weights
        raise ConfigError(f"checkpoint weights {weights} could not be read: {_reason(e)}; {_WEIGHTS_ALLOWED}") from None
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ConfigError(f"checkpoint weights {weights} hold a {type(state).__name__}, not a dict of tensors; {_WEIGHTS_ALLOWED}")
    return dict(state)


def checkpoint_record(given: str | Path | None, kind: str, target: Any) -> dict[str, Any]:
    """What results.json records of a drafter checkpoint: the path given, the files it resolved to, the target
    its config.json says it was trained for, and the weights' SHA-256 (so a result names the exact weights);
    for a random head, that it is one and its seed."""
    path = resolve_checkpoint(given, kind, target)
    if path == RANDOM:
        return {"given": str(given), "random_init": True, "seed": RANDOM_HEAD_SEED, "trained_for": None}
    weights, config = checkpoint_files(path, kind)
    digest = hashlib.sha256()
    with open(weights, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    from specbench.strategies import formats

    try:
        trained_for = formats.trained_for(json.loads(config.read_text(encoding="utf-8")))
    except (OSError, ValueError, AttributeError):
        trained_for = None
    record = {"given": str(given), "weights": str(weights), "config": str(config), "weights_sha256": digest.hexdigest(),
              "trained_for": trained_for}
    published = formats.detect(weights, config, str(given))
    if published is not None:  # a published layout converted on load (formats.FORMATS)
        record["format"] = published.format
    return record


def raise_if_head_does_not_fit_preset(kind: str, path: str | Path, cfg: Any, target: Any) -> None:
    """raise_if_head_does_not_fit before any model loads, against the sizes the target's ModelSpec knows
    (a preset's architecture, a local directory's config.json); nothing to check when it knows none."""
    known = getattr(target, "known", None) or {}
    if known.get("hidden_size") is None or known.get("vocab_size") is None:
        return
    tc = SimpleNamespace(hidden_size=known["hidden_size"], vocab_size=known["vocab_size"],
                         model_type=known.get("model_type"), vision_config=True if known.get("is_vlm") else None)
    raise_if_head_does_not_fit(kind, path, cfg, tc, target.label)


def raise_if_head_does_not_fit(kind: str, path: str | Path, cfg: Any, tc: Any, target_label: str) -> None:
    """A drafter head (eagle, medusa) reads a text decoder's hidden states and shares its LM head:
    refuse a VLM target, and a checkpoint trained for another hidden size or a larger vocabulary (for a published
    format, any other vocabulary size: EAGLE-3's t2d, EAGLE-1's and Medusa's LM heads are the target's size)."""
    if getattr(tc, "vision_config", None) is not None:
        raise ConfigError(f"strategy {kind} reads a text decoder's hidden states; target {target_label!r} is a "
                          f"vision-language model ({tc.model_type}). Use strategy=draft_model for VLM targets")
    published = getattr(cfg, "format", "specbench") != "specbench"  # their vocabularies are the target's, exactly
    if cfg.hidden_size != tc.hidden_size or cfg.vocab_size > tc.vocab_size or (published and cfg.vocab_size != tc.vocab_size):
        raise ConfigError(f"{kind} checkpoint {str(path)!r} was trained for hidden size {cfg.hidden_size}, vocab "
                          f"{cfg.vocab_size} (target {cfg.target!r}); target {target_label!r} has {tc.hidden_size}, "
                          f"{tc.vocab_size}. {TRAIN_HINT.format(kind=kind)}")


def save_head(head: torch.nn.Module, config: Mapping[str, Any], directory: str | Path) -> None:
    """A checkpoint as load_head reads it: `model.safetensors` (the head's own tensors) and `config.json`."""
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    # copies: a prepared head's projections are views of one fused weight (shared storage, which safetensors refuses)
    tensors = {k: v.detach().to("cpu", copy=True).contiguous() for k, v in head.state_dict().items()}
    save_file(tensors, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps(dict(config), indent=1))


def load_head(head: torch.nn.Module, weights: Path, path: str | Path, kind: str, target_model: torch.nn.Module,
              state: Mapping[str, torch.Tensor] | None = None) -> Any:
    """Fill a drafter `head` from `weights` (or from `state`, its tensors already converted from a published
    format), frozen, on the target's device and dtype; a ConfigError naming the checkpoint when its tensors do
    not match its config.json."""
    try:
        missing, unexpected = head.load_state_dict(read_weights(weights) if state is None else dict(state), strict=False)
    except RuntimeError as e:  # a tensor of another shape than its config.json says
        raise ConfigError(f"{kind} checkpoint {str(path)!r} ({weights}) does not match its config.json: "
                          f"{str(e).splitlines()[-1].strip()[:300]}") from None
    if missing or unexpected:
        raise ConfigError(f"{kind} checkpoint {str(path)!r} does not match its config: missing {missing[:4]}, "
                          f"unexpected {unexpected[:4]}")
    emb = target_model.get_input_embeddings().weight
    return head.to(device=emb.device, dtype=emb.dtype).eval().requires_grad_(False)


class HeadCheckpoint:
    """What a proposer whose drafter is a head checkpoint (eagle, medusa) checks before any model loads, and records:
    put it before Proposer in the bases. A subclass names `head_kind`, reads its config with `read_head_config`, and
    adds its own checks in `check_head` (settings against the checkpoint's config) and `check_head_for_target`
    (against the target's known sizes; head_cfg is None for a random head)."""

    head_kind: str

    @classmethod
    def read_head_config(cls, path: str | Path | None, target_layers: int | None = None) -> tuple[Path, Any]:
        """(weights, config) of the checkpoint; target_layers (the target's depth, when known) completes configs
        that depend on it (EAGLE-3's default fused layers)."""
        raise NotImplementedError

    @classmethod
    def check_head(cls, cfg: Mapping[str, Any], head_cfg: Any, given: str) -> None:
        """The strategy's settings against the checkpoint's config.json (validate calls it)."""

    @classmethod
    def check_head_for_target(cls, cfg: Mapping[str, Any], head_cfg: Any | None, target: Any) -> None:
        """The settings and the checkpoint against the target's known sizes (validate_for_target calls it)."""

    @classmethod
    def validate(cls, cfg: Mapping[str, Any]) -> None:
        super().validate(cfg)  # type: ignore[misc]  # the Proposer's checks
        given = cfg.get("checkpoint", AUTO)
        if given in (AUTO, RANDOM):  # resolved against the target in validate_for_target
            return
        weights, head_cfg = cls.read_head_config(given)
        cls.check_head(cfg, head_cfg, str(given))
        check_weights(weights)

    @classmethod
    def validate_for_target(cls, cfg: Mapping[str, Any], target: Any, backend: str) -> None:
        """`auto` resolved for the target, then the checkpoint against the target's sizes known before loading."""
        given = cfg.get("checkpoint", AUTO)
        path = resolve_checkpoint(given, cls.head_kind, target)
        if path == RANDOM:
            cls.check_head_for_target(cfg, None, target)
            return
        if given == AUTO:
            cls.validate({**cfg, "checkpoint": path})
        _, head_cfg = cls.read_head_config(path, (getattr(target, "known", None) or {}).get("num_hidden_layers"))
        raise_if_head_does_not_fit_preset(cls.head_kind, path, head_cfg, target)
        cls.check_head_for_target(cfg, head_cfg, target)

    @classmethod
    def checkpoint_record(cls, cfg: Mapping[str, Any], target: Any) -> dict[str, Any]:
        return checkpoint_record(cfg.get("checkpoint", AUTO), cls.head_kind, target)
