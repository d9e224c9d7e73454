"""parallel: a draft LM that drafts K tokens in ONE forward from K-1 mask tokens (PARD, arXiv 2504.18583).

PARD (parallel draft, An et al. 2025; P-EAGLE, arXiv 2602.01469, does the same over EAGLE's features)
trains a small causal LM so that after the committed tokens x_0..x_{L-1} and K-1 copies of a mask
token m at positions L..L+K-2, the logits at x_{L-1} predict x_L (as any LM) and the logits at the
j-th mask predict x_{L+j}. So one draft forward gives all K draft distributions q_1..q_K, and the
draft cost per step no longer grows with K (a chain draft_model pays K forwards).

Each step the base's parallel path runs ONE draft forward over the unseen committed tokens (the
catch-up: the bonus token, plus the last accepted draft when all K were accepted) followed by the
K-1 masks (`draft_forward` appends them, at each row's own positions after its last token), and
takes the logits at the last committed token and the masks: [B, K, V]. At T = 0 each draft is the
argmax of its q_i; at T > 0 each d_i is sampled from q_i shaped by the target's temperature /
top-k / top-p (verify.logits_to_probs), independently of the others, and q is returned.

Why rejection sampling stays lossless with independently drafted tokens: the verifier accepts d_i
with probability min(1, p_i(d_i) / q_i(d_i)), p_i = the target's distribution after the prefix and
d_1..d_{i-1}, and on rejection samples from norm(max(0, p_i - q_i)). Leviathan et al.'s proof needs
only that, given everything before it, d_i is distributed as the q_i the verifier is handed. Here
q_i depends on the committed prefix alone and d_i is drawn from it with fresh noise, so given the
prefix AND d_1..d_{i-1} its distribution is still q_i: position i is an ordinary speculative-sampling
step, and the emitted token there is distributed as p_i. (Drafts that ignore d_{<i} only accept less.)

KV cache: the draft owns one (slot == position, like draft_model). The masks' entries sit above the
committed length: `seen` stays at the committed length (the base sets it before drafting, and its
commit keeps nothing for parallel drafters), so the next catch-up overwrites them; until then no
query reads them (attention stops at each query's own position). No copy, no rollback.

The mask token is an existing id that the target's tokenizer never emits in a response: by default
its highest special id that is not EOS / BOS / pad (SmolLM2: 16, `<empty_output>`), else the last id
of the vocabulary; the trainer records it (`mask_token_id` in config.json). Its embedding is the
target's row for that id: nothing is added to the vocabulary, so the draft can share the target's
embedding and LM head (not stored in the checkpoint) and its cache writes go through the same decoder
kernels as any token. The trained layers learn what that row means.

Checkpoint (`strategy.checkpoint`): `auto` = the one in specbench/checkpoints/ trained for the target,
else, for a random-weight target, an untrained draft: the target's first `num_layers` layers (shared,
as layer_skip) with the target's own embedding row as the mask; `random` = that untrained draft for
any target; or a directory from `python -m specbench.train strategy=parallel target=<preset>`:
`config.json` ({"kind": "parallel", "num_layers", "k", "mask_token_id", ...}) and `model.safetensors`
(the draft's layers and final norm; its embedding and LM head too when it does not share the target's).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from specbench.errors import ConfigError
from specbench.models.cuda_graphs import maybe_graphed
from specbench.models.decoder import SUPPORTED_ARCHS
from specbench.models.runner import make_runner
from specbench.strategies.base import BuildContext, DraftOutput, Proposer
from specbench.strategies.checkpoints import (AUTO, RANDOM, HeadCheckpoint, check_weights, checkpoint_files,
                                              read_checkpoint_config, read_weights, resolve_checkpoint)

KIND = "parallel"
SHARED_KEYS = ("model.embed_tokens.weight", "lm_head.weight")  # the target's, when cfg.shares_embeddings


@dataclass
class ParallelConfig:
    num_layers: int  # the draft's decoder layers
    k: int  # drafts per forward it was trained for (K-1 masks); strategy.k <= k
    mask_token_id: int
    hidden_size: int
    vocab_size: int
    shares_embeddings: bool = True  # embedding and LM head are the target's (not stored)
    target: str = ""
    kind: str = KIND


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def default_mask_token_id(tokenizer: Any, vocab_size: int) -> int:
    """An id the tokenizer never emits in a response: its highest special id other than EOS / BOS / pad / UNK,
    else the last id of the vocabulary."""
    ends = {getattr(tokenizer, a, None) for a in ("eos_token_id", "bos_token_id", "pad_token_id", "unk_token_id")}
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}  # SmolLM2's <repo_name> ... <empty_output>: 3..16
    ids = set(getattr(tokenizer, "all_special_ids", None) or []) | {i for i, tok in added.items() if getattr(tok, "special", False)}
    special = [i for i in ids if _is_int(i) and i not in ends and i < vocab_size]
    return max(special) if special else vocab_size - 1


def random_num_layers(num_layers: int | None, total: int) -> int:
    """The untrained draft's depth: strategy.num_layers, or half the target's layers (as layer_skip)."""
    layers = max(1, total // 2) if num_layers is None else num_layers
    if not _is_int(layers) or not 1 <= layers <= total:
        raise ConfigError(f"strategy.num_layers={num_layers!r} for strategy 'parallel'; allowed: an integer in 1..{total} "
                          f"(the target's depth) or null for half ({max(1, total // 2)}); it sizes the untrained draft only")
    return layers


def text_config(config: Any, num_layers: int) -> Any:
    """The target's config cut to `num_layers` layers (the draft's architecture)."""
    config = copy.deepcopy(config)
    config.num_hidden_layers = num_layers
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[:num_layers]
    return config


def share_embeddings(draft: nn.Module, target_model: nn.Module) -> None:
    """Point the draft's embedding and LM head at the target's modules (no copy)."""
    draft.model.embed_tokens = target_model.model.embed_tokens
    draft.lm_head = target_model.lm_head


def own_rotary(draft: nn.Module, target_model: nn.Module) -> None:
    """A copy of the target's rotary tables (a draft built on the meta device has none; sharing the module would let
    a later .to(dtype) on the draft cast the target's inv_freq)."""
    draft.model.rotary_emb = copy.deepcopy(target_model.model.rotary_emb)


def draft_from_target(target_model: nn.Module, num_layers: int) -> nn.Module:
    """The trainer's starting point: a copy of the target's first `num_layers` layers and final norm, sharing the
    target's embedding and LM head, in fp32."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        draft = AutoModelForCausalLM.from_config(text_config(target_model.config, num_layers), dtype=torch.float32)
    share_embeddings(draft, target_model)
    own_rotary(draft, target_model)
    own = {k: v.detach().clone().float() for k, v in target_model.state_dict().items()
           if k.startswith("model.norm.") or any(k.startswith(f"model.layers.{i}.") for i in range(num_layers))}
    draft.load_state_dict(own, strict=False, assign=True)
    return draft


def save_parallel(draft: nn.Module, cfg: ParallelConfig, directory: str | Path) -> None:
    """config.json + model.safetensors: the draft's own tensors (not the target's shared embedding and LM head)."""
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state, seen = {}, set()
    for key, v in draft.state_dict().items():
        if (cfg.shares_embeddings and key in SHARED_KEYS) or v.data_ptr() in seen:  # tied LM head: stored once
            continue
        seen.add(v.data_ptr())
        state[key] = v.detach().contiguous().cpu()
    save_file(state, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps(asdict(cfg), indent=1))


def read_parallel_config(path: str | Path | None) -> tuple[Path, ParallelConfig]:
    weights, config = checkpoint_files(path, KIND)
    return weights, read_checkpoint_config(config, str(path), KIND, ParallelConfig)[1]


def raise_if_draft_does_not_fit(path: str | Path, cfg: ParallelConfig, hidden_size: int, vocab_size: int,
                                target_label: str) -> None:
    if cfg.hidden_size != hidden_size or cfg.vocab_size != vocab_size or not 0 <= cfg.mask_token_id < vocab_size:
        raise ConfigError(f"parallel checkpoint {str(path)!r} was trained for hidden size {cfg.hidden_size}, vocab "
                          f"{cfg.vocab_size}, mask id {cfg.mask_token_id} (target {cfg.target!r}); target {target_label!r} "
                          f"has {hidden_size}, {vocab_size}. Train one for it: `python -m specbench.train strategy=parallel "
                          f"target=<preset>`")


def raise_if_k_too_large(k: int, trained_k: int, checkpoint: str) -> None:
    if k > trained_k:
        raise ConfigError(f"strategy.k={k} but parallel checkpoint {checkpoint!r} was trained to draft {trained_k} "
                          f"tokens per forward ({trained_k - 1} masks); allowed: k <= {trained_k}. Lower strategy.k or "
                          f"train with strategy.k=... (conf/train/strategy/parallel.yaml)")


def load_parallel(path: str | Path, target_model: nn.Module, target_label: str = "") -> tuple[nn.Module, ParallelConfig]:
    """The trained draft LM on the target's device and dtype, frozen; a ConfigError naming the checkpoint when its
    tensors do not match its config.json."""
    from transformers import AutoModelForCausalLM

    weights, cfg = read_parallel_config(path)
    raise_if_draft_does_not_fit(path, cfg, target_model.config.hidden_size, target_model.config.vocab_size, target_label)
    with torch.device("meta"):
        draft = AutoModelForCausalLM.from_config(text_config(target_model.config, cfg.num_layers))
    state = read_weights(weights)
    if cfg.shares_embeddings:
        share_embeddings(draft, target_model)
    own_rotary(draft, target_model)
    try:
        draft.load_state_dict(state, strict=False, assign=True)
    except RuntimeError as e:
        raise ConfigError(f"parallel checkpoint {str(path)!r} ({weights}) does not match its config.json: "
                          f"{str(e).splitlines()[-1].strip()[:300]}") from None
    if not cfg.shares_embeddings and "lm_head.weight" not in state:  # a tied LM head is stored once
        draft.lm_head.weight = draft.model.embed_tokens.weight
    missing = [n for n, p in list(draft.named_parameters()) + list(draft.named_buffers()) if p.is_meta]
    if missing:
        raise ConfigError(f"parallel checkpoint {str(path)!r} ({weights}) lacks {missing[:4]} for a {cfg.num_layers}-layer "
                          f"draft of this target")
    emb = target_model.get_input_embeddings().weight
    return draft.to(device=emb.device, dtype=emb.dtype).eval().requires_grad_(False), cfg


class ParallelProposer(HeadCheckpoint, Proposer):
    """The base's parallel path (one forward gives [B, K, V]) over a draft LM with its own cache and K-1 masks."""

    head_kind = KIND
    owns_kv_cache = True
    samples = True
    cuda_graphs = True
    drafting = "parallel"

    def __init__(self, ctx: BuildContext, k: int, name: str = KIND, checkpoint: str | None = AUTO,
                 num_layers: int | None = None, mask_token_id: int | None = None, **options: Any) -> None:
        super().__init__(ctx, k, name, **options)
        self.validate({"name": name, "k": k, "checkpoint": checkpoint, "num_layers": num_layers,
                       "mask_token_id": mask_token_id})
        target = ctx.target.model
        checkpoint = resolve_checkpoint(checkpoint, KIND, ctx.target.spec)
        if checkpoint == RANDOM:  # untrained: the target's first L layers, shared (the trainer's starting point)
            layers = random_num_layers(num_layers, target.config.num_hidden_layers)
            if layers < target.config.num_hidden_layers and (ctx.backend == "transformers" or
                                                              target.config.model_type not in SUPPORTED_ARCHS):
                raise ConfigError(f"strategy {name!r} with an untrained draft (checkpoint=random) on a "
                                  f"{target.config.model_type!r} target with engine.backend={ctx.backend!r}; allowed: "
                                  f"engine.backend=auto or native on a {'/'.join(sorted(SUPPORTED_ARCHS))} target (only "
                                  f"specbench's decoder runs the target's first num_layers layers alone), or a trained "
                                  f"checkpoint")
            self.runner = make_runner(target, ctx.backend, num_layers=layers, batch_invariant=ctx.batch_invariant)
            self.mask_id = default_mask_token_id(ctx.target.tokenizer, ctx.target.vocab_size) if mask_token_id is None \
                else mask_token_id
        else:
            self.draft, cfg = load_parallel(checkpoint, target, ctx.target.spec.label)
            raise_if_k_too_large(k, cfg.k, str(checkpoint))
            self.runner = make_runner(self.draft, ctx.backend, batch_invariant=ctx.batch_invariant)
            self.mask_id = cfg.mask_token_id if mask_token_id is None else mask_token_id
        if not 0 <= self.mask_id < ctx.target.vocab_size:
            raise ConfigError(f"strategy.mask_token_id={self.mask_id} for strategy {name!r}; allowed: an id in "
                              f"0..{ctx.target.vocab_size - 1} (the target's vocabulary), or null (the checkpoint's)")
        self.runner = maybe_graphed(self.runner, self.use_graphs)
        self.offsets = torch.arange(k, device=ctx.device)  # [K]: the last committed token, then K-1 masks

    @classmethod
    def validate(cls, cfg: Mapping[str, Any]) -> None:
        super().validate(cfg)
        for key in ("num_layers", "mask_token_id"):
            value = cfg.get(key)
            low = 1 if key == "num_layers" else 0
            if value is not None and (not _is_int(value) or value < low):
                raise ConfigError(f"strategy.{key}={value!r} for strategy {cfg.get('name')!r}; allowed: an integer >= "
                                  f"{low}, or null ({'half the target' if key == 'num_layers' else 'the checkpoint'}'s)")

    @classmethod
    def read_head_config(cls, path: str | Path | None) -> tuple[Path, ParallelConfig]:
        return read_parallel_config(path)

    @classmethod
    def check_head(cls, cfg: Mapping[str, Any], head_cfg: ParallelConfig, given: str) -> None:
        raise_if_k_too_large(cfg["k"], head_cfg.k, given)

    @classmethod
    def validate_for_target(cls, cfg: Mapping[str, Any], target: Any, backend: str) -> None:
        given = cfg.get("checkpoint", AUTO)
        path = resolve_checkpoint(given, KIND, target)
        known = getattr(target, "known", None) or {}
        if path == RANDOM:
            if known.get("num_hidden_layers"):
                random_num_layers(cfg.get("num_layers"), known["num_hidden_layers"])
            return
        if given == AUTO:
            cls.validate({**cfg, "checkpoint": path})
        weights, head_cfg = read_parallel_config(path)
        check_weights(weights)
        if known.get("hidden_size") is not None and known.get("vocab_size") is not None:
            raise_if_draft_does_not_fit(path, head_cfg, known["hidden_size"], known["vocab_size"], target.label)

    def draft_forward(self, tokens: torch.Tensor, positions: torch.Tensor, hidden: torch.Tensor | None,
                      attn_len: int) -> DraftOutput:
        """tokens [B, T] at positions [B, T], then K-1 masks at each row's next K-1 positions: logits [B, K, V] at
        the last token and the masks. (In start() the prompt's masks are written and overwritten later, unread.)"""
        bsz, t = tokens.shape
        k = self.k
        masks = torch.full((bsz, k - 1), self.mask_id, dtype=tokens.dtype, device=tokens.device)
        pos = torch.cat([positions, positions[:, -1:] + self.offsets[1:]], 1)  # [B, T+K-1]
        cols = (t - 1 + self.offsets).expand(bsz, k)  # [B, K]
        # the masks sit at up to K-1 positions past the last token (start() feeds the prompt with attn_len = its end)
        bound = min(attn_len + k - 1, self.runner.max_len)
        out = self.runner(torch.cat([tokens, masks], 1), pos, attn_len=bound, logits_at=cols)
        return DraftOutput(logits=out.logits)
