"""Medusa (Cai et al. 2024, arXiv 2401.10774): K extra heads on the target's last hidden state draft K tokens.

The target processed committed positions up to L-2 (the pending token at L-1 came from its LM head
there), so from its final-norm hidden state h at L-2, head i (1-based) predicts the token at L-1+i:
logits_i = lm_head(h + SiLU(W_i h + b_i)) with the target's own (frozen, shared) LM head. Drafting:
the top-1 of each head as a chain, or with `strategy.tree=static` Medusa's sparse tree over the heads'
top-k (node (r1, ..., rd) is head d's r_d-th choice; trees.parallel_static); no KV cache and no q (the
verifier treats the drafts as one-hot, which stays lossless at every temperature).

Checkpoints: a directory (or its model.safetensors) holding `model.safetensors` and `config.json`
({"kind": "medusa", "num_heads": ..., "hidden_size": ...}); train them with
`python -m specbench.train strategy=medusa target=<preset>`. The Medusa authors' format (config.json with
medusa_num_heads / medusa_num_layers beside `medusa_lm_head.pt`, each head with its own LM head) loads too
(formats.py): `num_layers` repeats each head's block, `own_lm_heads` gives each head its LM head.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from specbench.errors import ConfigError
from specbench.models.decoder import linear, pack_linears
from specbench.strategies import formats
from specbench.strategies.base import BuildContext, DraftOutput, Proposer
from specbench.strategies.checkpoints import (AUTO, RANDOM, HeadCheckpoint, checkpoint_files, load_head,
                                              raise_if_head_does_not_fit, random_head, read_checkpoint_config,
                                              resolve_checkpoint, save_head)


@dataclass
class MedusaConfig:
    hidden_size: int
    num_heads: int  # trained heads; strategy.k may use the first k of them
    vocab_size: int
    target: str = ""
    kind: str = "medusa"
    num_layers: int = 1  # times each head's block is applied (Medusa's `[ResBlock(h)] * medusa_num_layers` repeats one)
    own_lm_heads: bool = False  # each head has its own LM head (the Medusa authors' format); False: the target's, shared
    format: str = "specbench"  # the layout it was read from (formats.FORMATS); specbench's own when trained here


class MedusaHeads(nn.Module):
    """num_heads residual blocks over the target's LM head (held by reference, not in the state_dict)."""

    def __init__(self, cfg: MedusaConfig, target_model: nn.Module) -> None:
        super().__init__()
        self.cfg = cfg
        self.shared = (target_model.get_output_embeddings(),)
        self.blocks = nn.ModuleList(nn.Linear(cfg.hidden_size, cfg.hidden_size) for _ in range(cfg.num_heads))
        for block in self.blocks:  # start as the identity: every head first predicts what the LM head does
            nn.init.zeros_(block.weight)
            nn.init.zeros_(block.bias)
        self.lm_heads = (nn.ModuleList(nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False) for _ in range(cfg.num_heads))
                         if cfg.own_lm_heads else None)

    @property
    def lm_head(self) -> nn.Module:
        return self.shared[0]

    def forward(self, hidden: torch.Tensor, num: int | None = None) -> torch.Tensor:
        """hidden [..., H] -> logits [..., num, V] of the first `num` heads."""
        outs = []
        for block in self.blocks[: num or self.cfg.num_heads]:
            x = hidden
            for _ in range(self.cfg.num_layers):
                x = x + F.silu(block(x))
            outs.append(x)
        if self.lm_heads is None:  # the target's LM head, through the target's CPU products there
            return linear(torch.stack(outs, dim=-2), self.lm_head.weight, self.lm_head.bias)
        return torch.stack([head(x) for head, x in zip(self.lm_heads, outs)], dim=-2)

    def save(self, directory: str | Path) -> None:
        save_head(self, asdict(self.cfg), directory)


def read_medusa_config(path: str | Path | None) -> tuple[Path, MedusaConfig]:
    """(weights, MedusaConfig) of a checkpoint in our format or the Medusa authors' (formats.py)."""
    weights, config = checkpoint_files(path, "medusa")
    published = formats.detect(weights, config, str(path))
    if published is not None:
        return weights, formats.medusa_config(published)
    return weights, read_checkpoint_config(config, str(path), "medusa", MedusaConfig)[1]


def load_medusa_heads(path: str | Path, target_model: nn.Module, target_label: str = "") -> MedusaHeads:
    weights, cfg = read_medusa_config(path)
    raise_if_head_does_not_fit("medusa", path, cfg, target_model.config, target_label)
    published = formats.detect(weights, weights.parent / "config.json", str(path))
    state = None if published is None else formats.medusa_state(published, cfg)
    return load_head(MedusaHeads(cfg, target_model), weights, path, "medusa", target_model, state)


def raise_if_too_few_heads(k: int, num_heads: int, checkpoint: str) -> None:
    if k > num_heads:
        raise ConfigError(f"strategy.k={k} but medusa checkpoint {checkpoint!r} has {num_heads} trained heads; allowed: "
                          f"k <= {num_heads}. Lower strategy.k or train more heads (train strategy.num_heads=...)")


class MedusaProposer(HeadCheckpoint, Proposer):
    head_kind = "medusa"
    pass_hidden_states_to_model = True
    drafting = "parallel"  # K heads over one hidden state: one draft forward per step, no cache, no q

    def __init__(self, ctx: BuildContext, k: int, name: str = "medusa", checkpoint: str | None = AUTO,
                 **options: Any) -> None:
        super().__init__(ctx, k, name, **options)
        target = ctx.target.model
        checkpoint = resolve_checkpoint(checkpoint, "medusa", ctx.target.spec)
        if checkpoint == RANDOM:  # untrained heads as Medusa initialises them: identity blocks (each starts as the LM head)
            cfg = MedusaConfig(hidden_size=target.config.hidden_size, num_heads=k, vocab_size=target.config.vocab_size,
                               target=ctx.target.spec.label)
            self.heads = random_head(lambda: MedusaHeads(cfg, target), target)
        else:
            self.heads = load_medusa_heads(checkpoint, target, ctx.target.spec.label)
            raise_if_too_few_heads(k, self.heads.cfg.num_heads, str(checkpoint))
        if self.device.type == "cpu":  # the heads' own linears take the decoder's CPU products too
            pack_linears(self.heads)

    @classmethod
    def read_head_config(cls, path: str | Path | None, target_layers: int | None = None) -> tuple[Path, MedusaConfig]:
        return read_medusa_config(path)

    @classmethod
    def check_head(cls, cfg: Mapping[str, Any], head_cfg: MedusaConfig, given: str) -> None:
        raise_if_too_few_heads(cfg["k"], head_cfg.num_heads, given)

    def draft_forward(self, tokens: torch.Tensor, positions: torch.Tensor, hidden: torch.Tensor | None,
                      attn_len: int) -> DraftOutput:
        # the base feeds the pending token at L-1 with the target's final-norm hidden state at L-2 (prefill: the
        # prompt's last position; verify: the last accepted one); head i predicts the token at L-1+i
        assert hidden is not None
        return DraftOutput(logits=self.heads(hidden[:, -1].to(self.heads.blocks[0].weight.dtype), self.k))  # [B, K, V]
