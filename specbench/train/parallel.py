"""The `parallel` trainer: mask-token training of a PARD draft LM (arXiv 2504.18583).

Sequence x_0..x_{N-1} with the target's top-1 y_t at each t (for the target's own greedy responses,
y_t = x_{t+1}). A cut at t is what drafting sees after committing x_0..x_t: the draft reads them and
K-1 mask tokens at positions t+1..t+K-1; its logits at t learn y_t, those at mask j learn y_{t+j}
(the token j+1 ahead). PARD's trick puts many cuts of a sequence into ONE forward: the sequence once
(causal), then per cut its K-1 masks, appended, with a custom attention mask: mask j of cut t sees
x_0..x_t and masks 1..j of its own cut, nothing else; position ids t+1..t+K-1. The real tokens never
see a mask, so their logits are a plain causal LM's. `cuts` cuts per sequence are sampled at random
(0 = every position: the full PARD set, T = N + (N-1)(K-1) columns). The loss is the mean over the K
offsets of each offset's cross-entropy (over `train.ce_vocab` tokens, as the other trainers). Use
`train.ce_vocab=0` (the full vocabulary) at least for the last steps: a draft started from the target's
first layers puts high logits on rare tokens, and a loss over a subset never pushes those down (the
shipped checkpoint's first 105 steps on 8192 tokens left its full-vocabulary top-1 on rare tokens,
agreement 0.06 on MT-Bench; a few full-vocabulary steps fixed it).

Start: a distilled draft model directory (`init_from=<dir>`, from `strategy=draft_model`: its own
embedding and LM head, all stored), else the target's first `num_layers` layers and final norm,
sharing the target's embedding and LM head (frozen, not stored: the checkpoint is the layers and
the norm). Only the decoder layers and the final norm train.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from specbench.errors import ConfigError, require_int
from specbench.models.loading import LoadedModel
from specbench.strategies.checkpoints import read_weights
from specbench.strategies.parallel import ParallelConfig, default_mask_token_id, draft_from_target, save_parallel
from specbench.train.drafters import Batch, Metrics, TokenLoss, Trainer, sample_positions, share


def cut_inputs(tokens: torch.Tensor, cols: torch.Tensor, k: int, mask_id: int) -> tuple[torch.Tensor, torch.Tensor,
                                                                                           torch.Tensor, torch.Tensor]:
    """tokens [B, N] and cuts cols [B, C] -> (input ids [B, T], position ids [B, T], sees [B, T, T] bool: query
    column sees key column, read columns [B, C, K]: where offset j of each cut is read), T = N + C(K-1)."""
    bsz, n = tokens.shape
    c, m = cols.shape[1], k - 1
    dev = tokens.device
    j = torch.arange(1, k, device=dev)  # [M] mask index
    mask_pos = (cols[..., None] + j).reshape(bsz, c * m)  # [B, C*M]
    ids = torch.cat([tokens, torch.full((bsz, c * m), mask_id, dtype=tokens.dtype, device=dev)], 1)
    pos = torch.cat([torch.arange(n, device=dev).expand(bsz, n), mask_pos], 1)
    t = n + c * m
    cut_of = torch.arange(c, device=dev).repeat_interleave(m)  # [C*M] the cut of each mask column
    j_of = j.repeat(c)  # [C*M]
    sees = torch.zeros((bsz, t, t), dtype=torch.bool, device=dev)
    sees[:, :n, :n] = torch.ones((n, n), dtype=torch.bool, device=dev).tril()
    sees[:, n:, :n] = torch.arange(n, device=dev) <= cols.repeat_interleave(m, 1)[..., None]  # x_0..x_t
    sees[:, n:, n:] = (cut_of[:, None] == cut_of[None, :]) & (j_of[None, :] <= j_of[:, None])  # its own masks <= j
    masks_at = (n + torch.arange(c, device=dev)[:, None] * m + j - 1).expand(bsz, c, m)  # [B, C, M]
    read = torch.cat([cols[..., None], masks_at], -1)  # [B, C, K]
    return ids, pos, sees, read


class ParallelTrainer(Trainer):
    name = "parallel"

    def __init__(self, target: LoadedModel, target_label: str, data_layers: tuple[int, ...], name: str = "parallel",
                 num_layers: int = 4, k: int = 5, cuts: int = 16, init_from: str | None = None,
                 mask_token_id: int | None = None) -> None:
        super().__init__(target, target_label, data_layers)
        hf = target.model
        total = hf.config.num_hidden_layers
        self.check_options({"k": k, "cuts": cuts, "init_from": init_from}, target_label)
        vocab = target.vocab_size
        self.mask_id = default_mask_token_id(target.tokenizer, vocab) if mask_token_id is None else mask_token_id
        if not 0 <= self.mask_id < vocab:
            raise ConfigError(f"strategy.mask_token_id={mask_token_id}; allowed: an id in 0..{vocab - 1}, or null")
        if init_from:
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_pretrained(init_from, dtype=torch.float32)
            if model.config.hidden_size != hf.config.hidden_size or model.get_output_embeddings().weight.shape[0] != vocab:
                raise ConfigError(f"strategy.init_from={init_from!r} has hidden size {model.config.hidden_size}; the "
                                  f"target {target_label!r} {hf.config.hidden_size} (and vocab {vocab}): it must be a "
                                  f"draft model distilled for this target")
            num_layers, shares = model.config.num_hidden_layers, False
            model.get_input_embeddings().requires_grad_(False)
            model.get_output_embeddings().requires_grad_(False)
        else:
            if not 1 <= num_layers <= total:
                raise ConfigError(f"strategy.num_layers={num_layers}; allowed: 1..{total} (the target's depth)")
            model, shares = draft_from_target(hf, num_layers), True
        self.module = model.to(hf.device).train()
        self.k, self.cuts = k, cuts
        self.cfg = ParallelConfig(num_layers=num_layers, k=k, mask_token_id=self.mask_id,
                                  hidden_size=hf.config.hidden_size, vocab_size=vocab, shares_embeddings=shares,
                                  target=target_label)

    @classmethod
    def check_options(cls, options: Mapping[str, Any], target_label: str) -> None:
        require_int("strategy.k", options.get("k", 2), 2)  # a setting left out: the default, which passes
        require_int("strategy.cuts", options.get("cuts", 0), 0)
        init_from = options.get("init_from")
        if init_from and not (Path(init_from) / "config.json").is_file():
            raise ConfigError(f"strategy.init_from={init_from!r} is not a draft model directory (config.json and "
                              f"model.safetensors, as `python -m specbench.train strategy=draft_model` writes)")

    def loss(self, batch: Batch, token_loss: TokenLoss, positions: int, g: torch.Generator) -> tuple[torch.Tensor, Metrics]:
        model, k = self.module, self.k
        bsz, n = batch.tokens.shape
        pos = torch.arange(n - 1, device=batch.tokens.device).expand(bsz, n - 1)
        cols, ok = sample_positions(pos <= batch.lengths[:, None] - 2, self.cuts, g)  # cuts t with a label y_t
        ids, position_ids, sees, read = cut_inputs(batch.tokens, cols, k, self.mask_id)
        dtype = next(model.parameters()).dtype
        additive = torch.zeros(sees.shape, dtype=dtype, device=sees.device).masked_fill(~sees, torch.finfo(dtype).min)
        hidden = model.model(input_ids=ids, position_ids=position_ids, attention_mask=additive[:, None]).last_hidden_state
        at = cols[..., None] + torch.arange(k, device=cols.device)  # [B, C, K] the position each offset predicts from
        labels = batch.top1.gather(1, at.reshape(bsz, -1).clamp(max=n - 2)).reshape(at.shape)
        valid = ok[..., None] & (at <= batch.lengths[:, None, None] - 2)
        total = torch.zeros((), device=hidden.device)
        metrics = Metrics()
        for j in range(k):
            sel = hidden.gather(1, read[..., j, None].expand(-1, -1, hidden.shape[-1]))[valid[..., j]]  # [M, H]
            ce, correct = token_loss(model.get_output_embeddings(), sel, labels[..., j][valid[..., j]])
            total = total + ce / k
            metrics[f"token_loss_{j + 1}"] = ce
            metrics[f"acc_{j + 1}"] = share(correct)
        metrics["loss"] = total
        return total, metrics

    def save(self, directory: Path) -> None:
        save_parallel(self.module, self.cfg, directory)

    def load_weights(self, directory: Path) -> None:
        self.module.load_state_dict(read_weights(Path(directory) / "model.safetensors"), strict=False)
