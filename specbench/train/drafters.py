"""Trainers: one per drafter kind, each a loss over teacher-forced target features and a checkpoint format.

A trainer holds the trainable module, says which target layers it needs cached, computes its
loss on a padded `Batch` of distillation sequences, and saves a checkpoint the strategy loads.
Token losses use a sampled subset of positions and, optionally, a restricted vocabulary (the
target's most frequent top-1 tokens in the data): the LM head dominates the cost on a CPU, and
inference always uses the full head.

Alignment (sequence x_0..x_{N-1}, target features f_0..f_{N-2}, target top-1 prediction y_t at t):
- eagle: input at i is (f_i, x_{i+1}); it learns f_{i+1} (smooth L1) and y_{i+1} (the token at i+2).
  Unrolled steps j >= 2 (EAGLE-3's training-time test) feed the head's own step-(j-1) output from
  i-1 as the feature at i and attend exactly as drafting does: true keys at <= i-j+1, then one
  key from each earlier unrolled step, then itself.
- medusa: head h (1-based) reads f_t and learns x_{t+h+1}.
- draft_model: a shallow copy of the target reads x_0..x_t and learns y_t.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from specbench.errors import ConfigError
from specbench.models.loading import LoadedModel
from specbench.strategies.checkpoints import read_weights
from specbench.strategies.eagle import EagleConfig, EagleHead
from specbench.strategies.medusa import MedusaConfig, MedusaHeads


@dataclass
class Batch:
    tokens: torch.Tensor  # [B, N] int64, right-padded
    lengths: torch.Tensor  # [B] int64: n_b
    hidden: torch.Tensor  # [B, N-1, H] float: final-norm features f_0..f_{N-2}
    layer_hidden: torch.Tensor | None  # [B, N-1, L, H] float: cached layer outputs (data.layers order)
    top1: torch.Tensor  # [B, N-1] int64: the target's top-1 at 0..N-2


@dataclass
class TokenLoss:
    """Cross-entropy over a vocabulary subset (all of it when `ids` is None)."""

    ids: torch.Tensor | None  # [Vs] token ids
    index: torch.Tensor | None  # [V] position in ids, -100 outside

    def __call__(self, lm_head: nn.Module, hidden: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden [M, H], labels [M] -> (mean CE, [M] bool top-1 correct)."""
        if self.ids is None:
            logits = lm_head(hidden).float()
            target = labels
        else:
            logits = F.linear(hidden, lm_head.weight[self.ids]).float()
            target = self.index[labels]
        correct = logits.argmax(-1) == target
        if (target >= 0).any():
            loss = F.cross_entropy(logits, target, ignore_index=-100)
        else:
            loss = logits.sum() * 0
        return loss, correct


def sample_positions(valid: torch.Tensor, count: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Up to `count` random True columns per row of valid [B, T] -> (cols [B, P], ok [B, P])."""
    if count <= 0 or count >= valid.shape[1]:
        cols = torch.arange(valid.shape[1], device=valid.device).expand_as(valid)
        return cols, valid
    score = torch.rand(valid.shape, generator=generator, device=valid.device).masked_fill(~valid, -1.0)
    top = score.topk(count, dim=1)
    return top.indices, top.values >= 0


class Trainer:
    name = ""

    def __init__(self, target: LoadedModel, target_label: str, data_layers: tuple[int, ...], **options: Any) -> None:
        self.target = target
        self.target_label = target_label
        self.data_layers = data_layers
        self.module: nn.Module

    def layers(self) -> tuple[int, ...]:
        """Target layers this drafter reads (cached with the distillation data)."""
        return ()

    def loss(self, batch: Batch, token_loss: TokenLoss, positions: int, g: torch.Generator) -> tuple[torch.Tensor, dict[str, float]]:
        raise NotImplementedError

    def save(self, directory: Path) -> None:
        self.module.save(directory)

    def load_weights(self, directory: Path) -> None:
        self.module.load_state_dict(read_weights(Path(directory) / "model.safetensors"))


class EagleTrainer(Trainer):
    name = "eagle"

    def __init__(self, target: LoadedModel, target_label: str, data_layers: tuple[int, ...], name: str = "eagle",
                 fuse_layers: list[int] | None = None, unroll: int = 2, w_feature: float = 1.0, w_token: float = 0.5,
                 feature_noise: float = 0.0) -> None:
        super().__init__(target, target_label, data_layers)
        n_layers = target.model.config.num_hidden_layers
        if fuse_layers and not all(0 <= i < n_layers for i in fuse_layers):
            raise ConfigError(f"strategy.fuse_layers={list(fuse_layers)}; allowed: target layer indices 0..{n_layers - 1}")
        if unroll < 1:
            raise ConfigError(f"strategy.unroll={unroll}; allowed: an integer >= 1")
        cfg = EagleConfig.for_target(target.model.config, fuse_layers, target_label)
        self.module = EagleHead(cfg, target.model)
        self.unroll, self.w_feature, self.w_token, self.noise = unroll, w_feature, w_token, feature_noise

    def layers(self) -> tuple[int, ...]:
        return tuple(self.module.cfg.fuse_layers or ())

    def loss(self, batch: Batch, token_loss: TokenLoss, positions: int, g: torch.Generator) -> tuple[torch.Tensor, dict[str, float]]:
        head = self.module
        bsz, t = batch.hidden.shape[:2]  # t = N-1 pairs
        pos = torch.arange(t, device=batch.tokens.device).expand(bsz, t)  # [B, T]
        valid = pos <= batch.lengths[:, None] - 3  # pair i has a next feature f_{i+1} and label y_{i+1}
        layer_hidden = None
        if head.cfg.fuse_layers:
            assert batch.layer_hidden is not None
            layer_hidden = [batch.layer_hidden[:, :, self.data_layers.index(i)] for i in head.cfg.fuse_layers]
        feature = head.features(batch.hidden, layer_hidden)  # [B, T, H]
        if self.noise:
            feature = feature + (torch.rand(feature.shape, generator=g, device=feature.device) - 0.5) * 2 * self.noise
        tokens = batch.tokens[:, 1:]  # x_{i+1}
        target_feat = F.pad(batch.hidden[:, 1:], (0, 0, 0, 1))  # f_{i+1}
        labels = F.pad(batch.top1[:, 1:], (0, 1))  # y_{i+1}
        cols, ok = sample_positions(valid, positions, g)
        q, k = pos[:1, :, None], pos[:1, None, :]  # [1, T, 1], [1, 1, T]
        total = torch.zeros((), device=feature.device)
        metrics: dict[str, float] = {}
        kvs: list[tuple[torch.Tensor, torch.Tensor]] = []
        out = None
        for j in range(1, self.unroll + 1):
            if j == 1:
                out, kv = head(feature, tokens, pos, return_kv=True)
                step_valid = valid
            else:
                fed = F.pad(out[:, :-1], (0, 0, 1, 0))  # the head's step-(j-1) output from i-1
                extra = [(kvs[0][0], kvs[0][1], (k <= q - (j - 1))[:, None])]
                extra += [(kvs[s - 1][0], kvs[s - 1][1], (k == q - (j - s))[:, None]) for s in range(2, j)]
                out, kv = head(fed, tokens, pos, extra_kv=extra, kv_mask=(k == q)[:, None], return_kv=True)
                step_valid = valid & (pos >= j - 1)
            kvs.append(kv)
            m = step_valid[..., None].float()
            reg = (F.smooth_l1_loss(out, target_feat, reduction="none") * m).sum() / (m.sum() * out.shape[-1]).clamp(min=1)
            pick = ok & step_valid.gather(1, cols)
            sel = out.gather(1, cols[..., None].expand(-1, -1, out.shape[-1]))[pick]  # [M, H]
            ce, correct = token_loss(head.lm_head, sel, labels.gather(1, cols)[pick])
            total = total + self.w_feature * reg + self.w_token * ce
            metrics[f"feature_loss_{j}"] = float(reg.detach())
            metrics[f"token_loss_{j}"] = float(ce.detach())
            metrics[f"acc_{j}"] = float(correct.float().mean()) if correct.numel() else 0.0
        metrics["loss"] = float(total.detach())
        return total, metrics


class MedusaTrainer(Trainer):
    name = "medusa"

    def __init__(self, target: LoadedModel, target_label: str, data_layers: tuple[int, ...], name: str = "medusa",
                 num_heads: int = 4, decay: float = 0.8) -> None:
        super().__init__(target, target_label, data_layers)
        if num_heads < 1:
            raise ConfigError(f"strategy.num_heads={num_heads}; allowed: an integer >= 1")
        cfg = MedusaConfig(hidden_size=target.model.config.hidden_size, num_heads=num_heads,
                           vocab_size=target.model.config.vocab_size, target=target_label)
        self.module = MedusaHeads(cfg, target.model)
        self.decay = decay

    def loss(self, batch: Batch, token_loss: TokenLoss, positions: int, g: torch.Generator) -> tuple[torch.Tensor, dict[str, float]]:
        heads = self.module
        bsz, t = batch.hidden.shape[:2]
        pos = torch.arange(t, device=batch.tokens.device).expand(bsz, t)
        cols, ok = sample_positions(pos <= batch.lengths[:, None] - 3, positions, g)
        h = batch.hidden.gather(1, cols[..., None].expand(-1, -1, batch.hidden.shape[-1]))  # [B, P, H]
        total = torch.zeros((), device=h.device)
        metrics: dict[str, float] = {}
        for i, block in enumerate(heads.blocks, start=1):
            idx = cols + i + 1  # x_{t+i+1}
            pick = ok & (idx <= batch.lengths[:, None] - 1)
            labels = batch.tokens.gather(1, idx.clamp(max=batch.tokens.shape[1] - 1))
            out = h + F.silu(block(h))
            ce, correct = token_loss(heads.lm_head, out[pick], labels[pick])
            total = total + self.decay ** (i - 1) * ce
            metrics[f"token_loss_{i}"] = float(ce.detach())
            metrics[f"acc_{i}"] = float(correct.float().mean()) if correct.numel() else 0.0
        metrics["loss"] = float(total.detach())
        return total, metrics


class DraftModelTrainer(Trainer):
    """A shallow copy of the target (its first num_layers layers, embedding, norm, LM head), fine-tuned to
    predict the target's top-1. Saved as a transformers directory: load it with draft.path=<dir>."""

    name = "draft_model"

    def __init__(self, target: LoadedModel, target_label: str, data_layers: tuple[int, ...], name: str = "draft_model",
                 num_layers: int = 4) -> None:
        super().__init__(target, target_label, data_layers)
        total = target.model.config.num_hidden_layers
        if not 1 <= num_layers <= total:
            raise ConfigError(f"strategy.num_layers={num_layers}; allowed: 1..{total} (the target's depth)")
        from transformers import AutoModelForCausalLM

        config = copy.deepcopy(target.model.config)
        config.num_hidden_layers = num_layers
        if getattr(config, "layer_types", None):
            config.layer_types = config.layer_types[:num_layers]
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.load_state_dict(target.model.state_dict(), strict=False)
        self.module = model.to(target.model.device).train()
        self.module.requires_grad_(True)

    def loss(self, batch: Batch, token_loss: TokenLoss, positions: int, g: torch.Generator) -> tuple[torch.Tensor, dict[str, float]]:
        model = self.module
        bsz, n = batch.tokens.shape
        pos = torch.arange(n - 1, device=batch.tokens.device).expand(bsz, n - 1)
        mask = (torch.arange(n, device=pos.device)[None] < batch.lengths[:, None]).long()
        hidden = model.model(input_ids=batch.tokens, attention_mask=mask).last_hidden_state[:, :-1]  # [B, N-1, H]
        cols, ok = sample_positions(pos <= batch.lengths[:, None] - 2, positions, g)
        sel = hidden.gather(1, cols[..., None].expand(-1, -1, hidden.shape[-1]))[ok]
        ce, correct = token_loss(model.get_output_embeddings(), sel, batch.top1.gather(1, cols)[ok])
        return ce, {"loss": float(ce.detach()), "acc_1": float(correct.float().mean()) if correct.numel() else 0.0}

    def save(self, directory: Path) -> None:
        directory = Path(directory)
        self.module.save_pretrained(directory, safe_serialization=True)
        if hasattr(self.target.tokenizer, "save_pretrained"):
            self.target.tokenizer.save_pretrained(directory)
        (directory / "specbench.json").write_text(json.dumps({"kind": "draft_model", "target": self.target_label}))

    def load_weights(self, directory: Path) -> None:
        from safetensors.torch import load_file

        state = load_file(str(Path(directory) / "model.safetensors"))
        self.module.load_state_dict(state, strict=False)  # tied LM head is not stored
