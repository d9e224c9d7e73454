"""Trainers: one per drafter kind, each a loss over teacher-forced target features and a checkpoint format.

A trainer holds the trainable module, says which target layers it needs cached, computes its
loss on a padded `Batch` of distillation sequences, and saves a checkpoint the strategy loads.
Token losses use a sampled subset of positions and, optionally, a restricted vocabulary (the
target's most frequent top-1 tokens in the data, `train.ce_vocab`): the LM head dominates the cost on
a CPU, and inference always uses the full head. An EAGLE head with `strategy.draft_vocab=N` has its
own LM head over N target ids instead (EAGLE-3's reduced vocabulary, `DraftVocab`): it is trained,
and inference drafts only those ids.

Alignment (sequence x_0..x_{N-1}, target features f_0..f_{N-2}, target top-1 prediction y_t at t):
- eagle: input at i is (f_i, x_{i+1}); it learns f_{i+1} (smooth L1) and y_{i+1} (the token at i+2), or with
  soft_labels the target's distribution there (softmax of its LM head over f_{i+1}).
  Unrolled steps j >= 2 (EAGLE-3's training-time test) feed the head's own step-(j-1) output from
  i-1 as the feature at i and attend exactly as drafting does: true keys at <= i-j+1, then one
  key from each earlier unrolled step, then itself.
- medusa: head h (1-based) reads f_t and learns x_{t+h+1}.
- draft_model: a shallow copy of the target reads x_0..x_t and learns y_t.
"""

from __future__ import annotations

import copy
import json
import shlex
from collections import Counter
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from specbench.errors import ConfigError, read_json_object, require_int
from specbench.models.loading import LoadedModel
from specbench.strategies.checkpoints import read_weights
from specbench.strategies.eagle import DRAFT_LM_HEADS, EagleConfig, EagleHead, is_layer_count
from specbench.strategies.medusa import MedusaConfig, MedusaHeads
from specbench.train.data import DistillData


class Metrics(MutableMapping):
    """A step's metrics (name -> 0-dim tensor or number) as the device computed them: the first read brings every
    tensor to the host in one transfer, so a step waits for its device once when its metrics are read, and not at
    all when they are not (a float() per metric was a wait each: 13 in a 3-step unrolled EAGLE loss)."""

    def __init__(self) -> None:
        self._values: dict[str, torch.Tensor | float] = {}
        self._host: dict[str, float] | None = None

    def __setitem__(self, key: str, value: torch.Tensor | float) -> None:
        self._values[key] = value.detach() if isinstance(value, torch.Tensor) else value
        self._host = None

    def __getitem__(self, key: str) -> float:
        return self._read()[key]

    def __delitem__(self, key: str) -> None:
        del self._values[key]
        self._host = None

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def _read(self) -> dict[str, float]:
        if self._host is None:
            names = [k for k, v in self._values.items() if isinstance(v, torch.Tensor)]
            read = torch.stack([self._values[k].reshape(()).float() for k in names]).tolist() if names else []
            host = dict(zip(names, read))
            self._host = {k: host[k] if k in host else float(v) for k, v in self._values.items()}
        return self._host


def share(mask: torch.Tensor) -> torch.Tensor | float:
    """The share of a boolean tensor's entries that hold (0.0 when it has none), left on the device for Metrics."""
    return mask.float().mean() if mask.numel() else 0.0


@dataclass
class Batch:
    tokens: torch.Tensor  # [B, N] int64, right-padded
    lengths: torch.Tensor  # [B] int64: n_b
    hidden: torch.Tensor  # [B, N-1, H] float: final-norm features f_0..f_{N-2}
    layer_hidden: torch.Tensor | None  # [B, N-1, L, H] float: cached layer outputs (data.layers order)
    top1: torch.Tensor  # [B, N-1] int64: the target's top-1 at 0..N-2


@dataclass
class TokenLoss:
    """Cross-entropy over the LM head's rows `ids` (all of them when None), with the labels mapped by `index`
    (target id -> class; the identity when None). A label mapped to -100 is outside the scored vocabulary:
    left out of the cross-entropy, and never top-1 correct. `classes` [C] are the target ids of the classes, in
    class order (None: every target id), for soft labels: the target's distribution over exactly those ids."""

    ids: torch.Tensor | None  # [Vs] rows of the LM head scored
    index: torch.Tensor | None  # [V] target id -> class, -100 outside
    classes: torch.Tensor | None = None  # [C] target id of each class (None: class == target id)

    def __call__(self, lm_head: nn.Module, hidden: torch.Tensor, labels: torch.Tensor,
                 soft: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden [M, H], labels [M] target ids -> (mean CE, [M] bool top-1 correct). With soft [M, C] (the target's
        probabilities over the classes) the cross-entropy is to that distribution instead of the top-1 label, over
        the same rows (a row whose label is outside the classes is left out, as EAGLE-3 masks it)."""
        logits = self._logits(lm_head, hidden).float()
        target = labels if self.index is None else self.index[labels]
        correct = logits.argmax(-1) == target
        scored = target >= 0
        if not scored.any():
            loss = logits.sum() * 0
        elif soft is None:
            loss = F.cross_entropy(logits, target, ignore_index=-100)
        else:
            loss = -(soft[scored] * F.log_softmax(logits[scored], dim=-1)).sum(-1).mean()
        return loss, correct

    @classmethod
    def over(cls, classes: torch.Tensor, vocab: int, own_head: bool = False) -> TokenLoss:
        """The loss over these target ids [C] (sorted) of a vocabulary of `vocab`: rows `classes` of the target's LM
        head, or with `own_head` every row of a head that holds exactly these ids (EAGLE-3's draft vocabulary)."""
        return cls(None if own_head else classes, class_index(classes, vocab), classes)

    def target_probs(self, lm_head_weight: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """The target's distribution over the classes, [M, C] float32, from its final-norm features [M, H] and its
        LM head's weight [V, H]: softmax over the classes' logits (renormalised to them, as EAGLE-3's t2d)."""
        weight = lm_head_weight if self.classes is None else lm_head_weight[self.classes]
        return torch.softmax(F.linear(features.to(weight.dtype), weight).float(), dim=-1)

    @torch.no_grad()
    def predicts(self, lm_head: nn.Module, hidden: torch.Tensor, tokens: torch.Tensor,
                 chunk: int = 4096) -> torch.Tensor:
        """hidden [..., H], tokens [...] target ids -> [...] bool: the head's top-1 over the scored classes is that
        token (never for a token outside them). No gradient; rows go through the LM head `chunk` at a time."""
        flat, ids = hidden.reshape(-1, hidden.shape[-1]), tokens.reshape(-1)
        target = ids if self.index is None else self.index[ids]
        top = torch.cat([self._logits(lm_head, h).argmax(-1) for h in flat.split(chunk)]) if flat.shape[0] \
            else target.new_empty(0)
        return (top == target).reshape(tokens.shape)

    def _logits(self, lm_head: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [M, H] -> [M, C]: the LM head's logits over the scored classes."""
        return lm_head(hidden) if self.ids is None else F.linear(hidden, lm_head.weight[self.ids])

    def outside(self, labels: torch.Tensor) -> torch.Tensor:
        """[M] target ids -> [M] bool: the labels this loss cannot score."""
        return torch.zeros_like(labels, dtype=torch.bool) if self.index is None else self.index[labels] < 0


def top1_counts(data: DistillData, ids: list[int], with_tokens: bool = False) -> Counter[int]:
    """How often each target id is the target's top-1 over sequences `ids` (every position), and with_tokens
    how often it also occurs as a token of them."""
    counts: Counter[int] = Counter()
    for i in ids:
        counts.update(data.top1[i].tolist())
        if with_tokens:
            counts.update(data.tokens[i].tolist())
    return counts


def token_loss_for(data: DistillData, train_ids: list[int], vocab: int, size: int, device: torch.device) -> TokenLoss:
    """The `size` most frequent target top-1 tokens of the training sequences (plus their tokens); train.ce_vocab."""
    if not size or size >= vocab:
        return TokenLoss(None, None)
    counts = top1_counts(data, train_ids, with_tokens=True)
    ids = torch.tensor(sorted(t for t, _ in counts.most_common(size)), device=device)
    return TokenLoss.over(ids, vocab)


def class_index(ids: torch.Tensor, vocab: int) -> torch.Tensor:
    """[V] int64: each target id's position in `ids` (the class a TokenLoss scores it as), -100 outside them."""
    index = torch.full((vocab,), -100, dtype=torch.long, device=ids.device)
    index[ids] = torch.arange(len(ids), device=ids.device)
    return index


@dataclass
class DraftVocab:
    """EAGLE-3's reduced draft vocabulary: the `size` target ids most often the target's top-1 over the training
    sequences (every position; ties, unseen ids included, to the lower id), ascending. Draft id i is target id
    ids[i]; EAGLE-3 stores d2t[i] = ids[i] - i. Saved beside the checkpoint as vocab_counts.json."""

    ids: list[int]  # [Vd] target ids, ascending
    counts: list[int]  # [Vd] how often each was the top-1
    labels: int  # top-1 labels counted (the training sequences' positions)
    sequences: int  # training sequences counted

    FILE = "vocab_counts.json"

    @classmethod
    def count(cls, data: DistillData, train_ids: list[int], size: int, vocab: int) -> DraftVocab:
        counts = top1_counts(data, train_ids)
        ranked = sorted(counts, key=lambda t: (-counts[t], t))[:size]
        ranked += [t for t in range(vocab) if t not in counts][: size - len(ranked)]  # count 0, lowest ids first
        ids = sorted(ranked)
        return cls(ids, [counts[t] for t in ids], sum(counts.values()), len(train_ids))

    @property
    def covered(self) -> float:
        """The fraction of counted labels inside the vocabulary."""
        return sum(self.counts) / max(1, self.labels)

    def d2t(self) -> torch.Tensor:
        """[Vd] int64: target id minus draft id (EAGLE-3's d2t)."""
        return torch.tensor(self.ids) - torch.arange(len(self.ids))

    def save(self, directory: Path) -> None:
        blob = {"draft_vocab_size": len(self.ids), "labels": self.labels, "covered": self.covered,
                "sequences": self.sequences, "source": "the target's top-1 at every position of the training sequences",
                "target_ids": self.ids, "counts": self.counts}
        (Path(directory) / self.FILE).write_text(json.dumps(blob))

    @classmethod
    def read(cls, directory: Path) -> DraftVocab | None:
        path = Path(directory) / cls.FILE
        if not path.is_file():
            return None
        blob = json.loads(path.read_text())
        return cls(blob["target_ids"], blob["counts"], blob["labels"], blob["sequences"])


def sample_positions(valid: torch.Tensor, count: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Up to `count` random True columns per row of valid [B, T] -> (cols [B, P], ok [B, P])."""
    if count <= 0 or count >= valid.shape[1]:
        cols = torch.arange(valid.shape[1], device=valid.device).expand_as(valid)
        return cols, valid
    score = torch.rand(valid.shape, generator=generator, device=valid.device).masked_fill(~valid, -1.0)
    top = score.topk(count, dim=1)
    return top.indices, top.values >= 0


def start_checkpoint(given: str | None, kind: str, target_label: str) -> Path | None:
    """strategy.init_from resolved: a directory, or the name of one in specbench/checkpoints/, holding a `kind` head's
    model.safetensors and config.json trained for `target_label`; a ConfigError naming what was given."""
    if given is None:
        return None
    from specbench.strategies.checkpoints import PACKAGED

    path = Path(str(given))
    if not path.is_dir() and (PACKAGED / str(given)).is_dir():
        path = PACKAGED / str(given)
    if not (path / "model.safetensors").is_file() or not (path / "config.json").is_file():
        raise ConfigError(f"strategy.init_from={given!r} holds no model.safetensors and config.json; allowed: null (a "
                          f"new head) or a checkpoint directory specbench.train wrote for strategy={kind}, or the name "
                          f"of one in specbench/checkpoints/")
    cfg = read_json_object(path / "config.json", f"strategy.init_from={given!r}", f"a {kind} head's config.json")
    if cfg.get("kind", kind) != kind or cfg.get("target", target_label) != target_label:
        raise ConfigError(f"strategy.init_from={given!r} holds a drafter of kind {cfg.get('kind')!r} for target "
                          f"{cfg.get('target')!r}; allowed: one of kind {kind!r} trained for target {target_label!r}")
    return path


class Trainer:
    name = ""
    # what train.precision=auto runs on CUDA (float32 elsewhere): bfloat16 only where a head trained so was measured
    # to accept as float32's does (EagleTrainer)
    auto_precision_cuda = "float32"

    def __init__(self, target: LoadedModel, target_label: str, data_layers: tuple[int, ...], **options: Any) -> None:
        self.target = target
        self.target_label = target_label
        self.data_layers = data_layers
        self.module: nn.Module
        self.init_from: Path | None = None  # a fine-tune's starting checkpoint (start_checkpoint), where supported

    @classmethod
    def check_options(cls, options: Mapping[str, Any], target_label: str) -> None:
        """The checks of the strategy.* settings that need no target's weights (a starting checkpoint, strategy.init_from,
        is checked against the target's label). train() runs them before the target loads, so a mistyped value costs
        no model load; the constructor runs them again and checks the rest against the target."""

    def layers(self) -> tuple[int, ...]:
        """Target layers this drafter reads (cached with the distillation data)."""
        return ()

    def prepare(self, data: DistillData, train_ids: list[int], ce_vocab: int, device: torch.device,
                resume_from: Path | None) -> TokenLoss:
        """Once the distillation data exists, before the optimiser: fit what depends on the data (resume_from: the
        saved state a resumed run continues, to read it back) and return the token loss, by default over the
        `ce_vocab` most frequent top-1 tokens of the training sequences (train.ce_vocab; 0 = all)."""
        token_loss = token_loss_for(data, train_ids, self.target.vocab_size, ce_vocab, device)
        self.start_from_checkpoint(resume_from)
        return token_loss

    def start_from_checkpoint(self, resume_from: Path | None) -> None:
        """A fine-tune's weights (strategy.init_from); a resumed run loads its own state instead, after this."""
        if self.init_from is None or resume_from is not None:
            return
        try:
            self.load_start(self.init_from)
        except RuntimeError as e:  # load_state_dict: missing or unexpected names, other shapes
            detail = " ".join(str(e).split())[:400]
            raise ConfigError(f"strategy.init_from={str(self.init_from)!r}: its weights do not fit the head these "
                              f"strategy.* settings build ({detail}); allowed: a checkpoint trained with the same "
                              f"settings (its config.json says which)") from e
        print(f"initialised from {self.init_from}", flush=True)

    def loss(self, batch: Batch, token_loss: TokenLoss, positions: int,
             g: torch.Generator) -> tuple[torch.Tensor, Metrics]:
        raise NotImplementedError

    def save(self, directory: Path) -> None:
        self.module.save(directory)

    def decode_overrides(self, directory: Path) -> str:
        """The `python -m specbench` overrides that decode with the checkpoint saved in `directory`."""
        return f"strategy={self.name} strategy.checkpoint={shlex.quote(str(directory))}"

    def load_weights(self, directory: Path) -> None:
        self.module.load_state_dict(read_weights(Path(directory) / "model.safetensors"))

    def load_start(self, directory: Path) -> None:
        """A fine-tune's starting weights (strategy.init_from): the same head's, by default."""
        self.load_weights(directory)


class EagleTrainer(Trainer):
    """An EAGLE head (strategy=eagle). With `draft_vocab=N` it gets EAGLE-3's reduced vocabulary: its own LM head
    over the N target ids most often the target's top-1 in the training sequences (DraftVocab), initialised from
    the target's rows of them and trained (the target's LM head stays frozen); the token loss is a cross-entropy
    over those N with every other label left out (logged as `outside_vocab`, counted wrong in acc_j).
    `train.ce_vocab` does not apply then: draft_vocab wins. `soft_labels` (the default; false before 2026-12-03): the
    token loss is a cross-entropy to the target's whole distribution at each position (its frozen LM head over the
    cached final-norm feature, renormalised to the scored vocabulary), as EAGLE and EAGLE-3 train, instead of to its
    top-1. `aligned_unroll` (GRIFFIN's token-alignable training, arXiv 2502.11018): an unrolled step j >= 2 is trained
    only at positions where every earlier step's top-1 was the token that step j is fed, i.e. where drafting would
    reach it; elsewhere its draft is never verified, so the loss there spends capacity on what cannot be accepted.
    Validation measures, for every head, `aligned_j` (the share of positions drafting reaches at step j) and
    `acc_aligned_j` (step j's agreement there: what the chain's acceptance at position j, given the earlier ones,
    estimates); an aligned run logs them in training too. `init_from` (a checkpoint this trainer wrote, or the name of
    one shipped in specbench/checkpoints/): training starts from its weights and its draft vocabulary, with a fresh
    optimiser and the schedule of train.*: a fine-tune. The strategy.* settings must build the same head."""

    name = "eagle"
    # the 2-layer recipe in bf16 on one H100: 1.41-1.42x float32's steps a second, MT-Bench and HumanEval AL at T = 0
    # within 0.015 of the float32 head's (experiments/drafters/README.md, "A head trained in bfloat16")
    auto_precision_cuda = "bfloat16"

    def __init__(self, target: LoadedModel, target_label: str, data_layers: tuple[int, ...], name: str = "eagle",
                 fuse_layers: list[int] | None = None, unroll: int = 2, w_feature: float = 1.0, w_token: float = 0.5,
                 feature_noise: float = 0.0, draft_vocab: int | None = None, soft_labels: bool = True,
                 intermediate_size: int | None = None, aligned_unroll: bool = False,
                 init_from: str | None = None, num_layers: int = 1, draft_lm_head: str = "own") -> None:
        super().__init__(target, target_label, data_layers)
        self.check_options({"aligned_unroll": aligned_unroll, "soft_labels": soft_labels, "unroll": unroll,
                            "num_layers": num_layers, "draft_lm_head": draft_lm_head, "draft_vocab": draft_vocab},
                           target_label)
        self.init_from = start_checkpoint(init_from, self.name, target_label)
        n_layers = target.model.config.num_hidden_layers
        if fuse_layers and not all(0 <= i < n_layers for i in fuse_layers):
            raise ConfigError(f"strategy.fuse_layers={list(fuse_layers)}; allowed: target layer indices "
                              f"0..{n_layers - 1}")
        cfg = EagleConfig.for_target(target.model.config, fuse_layers, target_label)
        _raise_if_bad_draft_vocab(draft_vocab, cfg.vocab_size)
        cfg.draft_vocab_size = draft_vocab
        if intermediate_size is not None:  # the head's MLP width (saved in its config.json; the strategy reads it)
            if isinstance(intermediate_size, bool) or not isinstance(intermediate_size, int) or intermediate_size < 1:
                raise ConfigError(f"strategy.intermediate_size={intermediate_size!r}; allowed: null (the target's, "
                                  f"{cfg.intermediate_size}) or an integer >= 1: the width of the head's MLP")
            cfg.intermediate_size = intermediate_size
        cfg.num_layers, cfg.draft_lm_head = num_layers, draft_lm_head
        self.module = EagleHead(cfg, target.model)
        self.vocab: DraftVocab | None = None  # chosen in prepare(), once the data exists
        self.unroll, self.w_feature, self.w_token, self.noise = unroll, w_feature, w_token, feature_noise
        self.soft_labels = soft_labels
        self.aligned_unroll = aligned_unroll

    @classmethod
    def check_options(cls, options: Mapping[str, Any], target_label: str) -> None:
        o = options  # a setting left out takes the constructor's default, which passes
        start_checkpoint(o.get("init_from"), cls.name, target_label)
        if not isinstance(o.get("aligned_unroll", False), bool):
            raise ConfigError(f"strategy.aligned_unroll={o['aligned_unroll']!r}; allowed: true (train unrolled step j "
                              f"only where steps 1..j-1 predicted the tokens it is fed) or false (at every position)")
        if not isinstance(o.get("soft_labels", True), bool):
            raise ConfigError(f"strategy.soft_labels={o['soft_labels']!r}; allowed: true (the target's distribution) "
                              f"or false (its top-1)")
        require_int("strategy.unroll", o.get("unroll", 1))
        if not is_layer_count(o.get("num_layers", 1)):
            raise ConfigError(f"strategy.num_layers={o['num_layers']!r}; allowed: an integer >= 1, the head's decoder "
                              f"layers (1 as EAGLE publishes it)")
        head, vocab = o.get("draft_lm_head", "own"), o.get("draft_vocab")
        if head not in DRAFT_LM_HEADS or (head == "target" and not vocab):
            raise ConfigError(f"strategy.draft_lm_head={head!r} with strategy.draft_vocab={vocab!r}; allowed: own (the "
                              f"draft vocabulary's own LM head, trained and saved) or target (the target's LM head rows "
                              f"at the draft ids, frozen and not saved; needs strategy.draft_vocab)")

    def layers(self) -> tuple[int, ...]:
        return tuple(self.module.cfg.fuse_layers or ())

    def prepare(self, data: DistillData, train_ids: list[int], ce_vocab: int, device: torch.device,
                resume_from: Path | None) -> TokenLoss:
        head, size = self.module, self.module.cfg.draft_vocab_size
        saved_in = resume_from or self.init_from  # a resumed run's state, else the checkpoint a fine-tune starts from
        saved = DraftVocab.read(saved_in) if saved_in is not None else None
        trained = None if saved is None else len(saved.ids)
        if saved_in is not None and trained != size:
            how = "resume=true" if resume_from is not None else "strategy.init_from"
            raise ConfigError(f"{how} with strategy.draft_vocab={size}, but {saved_in} was trained with "
                              f"draft_vocab={trained}; give the same setting")
        if size is None:
            return super().prepare(data, train_ids, ce_vocab, device, resume_from)
        if ce_vocab and ce_vocab < head.cfg.vocab_size:
            print(f"train.ce_vocab={ce_vocab} is not used: the token loss is over strategy.draft_vocab={size}",
                  flush=True)
        # a resumed run reads its vocabulary back (its weights, loaded next, hold the same d2t)
        self.vocab = saved or DraftVocab.count(data, train_ids, size, head.cfg.vocab_size)
        ids = torch.tensor(self.vocab.ids, device=device)
        with torch.no_grad():
            if head.draft_lm_head is not None:  # its own rows start as the target's (draft_lm_head=target: they are)
                head.draft_lm_head.weight.copy_(self.target.model.get_output_embeddings().weight[ids])
            if head.d2t is not None:  # absent when N is the whole vocabulary: draft id == target id
                head.d2t.copy_(self.vocab.d2t())
        print(f"draft vocabulary: {size} target ids cover {self.vocab.covered:.4f} of {self.vocab.labels} top-1 labels "
              f"of the training sequences", flush=True)
        self.start_from_checkpoint(resume_from)
        # target id -> draft id; the target's own rows at the draft ids when the head has none
        return TokenLoss.over(ids, head.cfg.vocab_size, own_head=head.draft_lm_head is not None)

    def save(self, directory: Path) -> None:
        super().save(directory)
        if self.vocab is not None:
            self.vocab.save(directory)

    def load_start(self, directory: Path) -> None:
        """A fine-tune's starting weights. From a head of fewer decoder layers than strategy.num_layers, the head grows
        (LLaMA Pro's block expansion, arXiv 2401.02415): the checkpoint's layers as they were, and each new one after
        them with its o_proj and down_proj zero, so that the grown head starts as the checkpoint's function exactly."""
        head = self.module
        missing, unexpected = head.load_state_dict(read_weights(Path(directory) / "model.safetensors"), strict=False)
        grown = sorted({int(n.split(".")[1]) for n in missing if n.startswith("layers.")})
        kept = len(head.layers) - len(grown)
        if unexpected or any(not n.startswith("layers.") for n in missing) or grown != list(range(kept, len(head.layers))):
            raise RuntimeError(f"Missing key(s): {missing[:6]}; Unexpected key(s): {unexpected[:6]}")
        loaded = set(head.state_dict()) - set(missing)
        if any(n.startswith(f"layers.{i}.") for i in grown for n in loaded):
            raise RuntimeError(f"layers {grown} are partly in the checkpoint")
        with torch.no_grad():
            for i in grown:
                head.layers[i].o_proj.weight.zero_()
                head.layers[i].down_proj.weight.zero_()
        if grown:
            print(f"grown from {kept + 1} to {len(head.layers) + 1} decoder layers: the new ones' o_proj and down_proj "
                  f"start at zero", flush=True)

    def loss(self, batch: Batch, token_loss: TokenLoss, positions: int,
             g: torch.Generator) -> tuple[torch.Tensor, Metrics]:
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
        first = ok & valid.gather(1, cols)  # step 1's rows; a later step's are a subset of them
        soft = None
        if self.soft_labels:  # the target's distribution at i+1, from f_{i+1} (constant: no gradient)
            with torch.no_grad():
                rows = target_feat.gather(1, cols[..., None].expand(-1, -1, target_feat.shape[-1]))[first]
                soft = token_loss.target_probs(self.target.model.get_output_embeddings().weight, rows)  # [M1, C]
        total = torch.zeros((), device=feature.device)
        metrics = Metrics()
        kvs: list[list[tuple[torch.Tensor, torch.Tensor]]] = []  # per unrolled step, each layer's keys and values
        # [B, T] bool per step: its top-1 at i is x_{i+2}. Needed to train aligned, and measured in validation (run under
        # no_grad) for every head: acc_aligned_j, step j's agreement where drafting reaches it, is what the chain's
        # acceptance at position j given the earlier ones estimates
        hits: list[torch.Tensor] = []
        reach_hits = self.aligned_unroll or not torch.is_grad_enabled()
        fed_tokens = F.pad(tokens[:, 1:], (0, 1))  # x_{i+2}: what the next step is fed after step s's output at i
        out = None
        for j in range(1, self.unroll + 1):
            if j == 1:
                out, kv = head(feature, tokens, pos, return_kv=True)
                step_valid = valid
            else:
                fed = F.pad(out[:, :-1], (0, 0, 1, 0))  # the head's step-(j-1) output from i-1
                earlier, own = unrolled_masks(t, j, feature.device)
                extra = [(kvs[s - 1], mask) for s, mask in enumerate(earlier, start=1)]
                out, kv = head(fed, tokens, pos, extra_kv=extra, kv_mask=own, return_kv=True)
                step_valid = valid & (pos >= j - 1)
            reached = step_valid  # where drafting reaches step j: step s's output at i-(j-s) drafted, every s < j
            for s, hit in enumerate(hits, start=1):
                reached = reached & F.pad(hit[:, :t - (j - s)], (j - s, 0))
            measured = j > 1 and reach_hits  # aligned_j and acc_aligned_j
            if measured:
                metrics[f"aligned_{j}"] = reached.sum() / step_valid.sum().clamp(min=1)
            # the positions its losses count; acc_j is measured at every step_valid one
            scored = reached if self.aligned_unroll else step_valid
            if reach_hits and j < self.unroll:
                hits.append(token_loss.predicts(head.lm_head, out.detach(), fed_tokens))
            kvs.append(kv)
            m = scored[..., None].float()
            reg = (F.smooth_l1_loss(out, target_feat, reduction="none") * m).sum()
            reg = reg / (m.sum() * out.shape[-1]).clamp(min=1)
            pick = ok & step_valid.gather(1, cols)
            sel = out.gather(1, cols[..., None].expand(-1, -1, out.shape[-1]))[pick]  # [M, H]
            picked = labels.gather(1, cols)[pick]  # [M] target ids
            if scored is step_valid:
                ce, correct = token_loss(head.lm_head, sel, picked, None if soft is None else soft[pick[first]])
            else:  # the loss over the aligned rows; the agreement over all of them, comparable with a plain run's
                train_rows = scored.gather(1, cols)[pick]
                ce, _ = token_loss(head.lm_head, sel[train_rows], picked[train_rows],
                                   None if soft is None else soft[pick[first]][train_rows])
                correct = token_loss.predicts(head.lm_head, sel.detach(), picked)
            total = total + self.w_feature * reg + self.w_token * ce
            if j == 1 and token_loss.index is not None:  # step 1's labels hold every later step's
                metrics["outside_vocab"] = share(token_loss.outside(picked))
            metrics[f"feature_loss_{j}"] = reg
            metrics[f"token_loss_{j}"] = ce
            metrics[f"acc_{j}"] = share(correct)
            if measured:  # the agreement where drafting reaches step j (0 where it reaches none)
                at = reached.gather(1, cols)[pick]
                metrics[f"acc_aligned_{j}"] = (correct & at).sum() / at.sum().clamp(min=1)
        metrics["loss"] = total
        return total, metrics


def unrolled_masks(t: int, j: int, device: torch.device) -> tuple[list[torch.Tensor], torch.Tensor]:
    """The training-time test's attention at unrolled step j >= 2 over T positions ([1, 1, T, T] bool each): the query
    at i stands for the j-th draft of a step whose first draft came from i-(j-1), so it sees step 1's keys (the true
    features') at positions <= i-(j-1), step s's (1 < s < j) at i-(j-s) only, and its own at i: what the cache holds
    for that draft at inference. Returns (steps 1..j-1's masks, its own)."""
    pos = torch.arange(t, device=device)
    q, k = pos[:, None], pos[None, :]
    earlier = [k <= q - (j - 1)] + [k == q - (j - s) for s in range(2, j)]
    return [m[None, None] for m in earlier], (k == q)[None, None]


def _raise_if_bad_draft_vocab(size: Any, vocab: int) -> None:
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= vocab):
        raise ConfigError(f"strategy.draft_vocab={size!r}; allowed: null (the target's LM head, shared) or an integer "
                          f"1..{vocab} (the target's vocabulary size): the size of the head's own draft vocabulary")


class MedusaTrainer(Trainer):
    name = "medusa"

    def __init__(self, target: LoadedModel, target_label: str, data_layers: tuple[int, ...], name: str = "medusa",
                 num_heads: int = 4, decay: float = 0.8, init_from: str | None = None) -> None:
        super().__init__(target, target_label, data_layers)
        self.check_options({"num_heads": num_heads}, target_label)
        self.init_from = start_checkpoint(init_from, self.name, target_label)
        cfg = MedusaConfig(hidden_size=target.model.config.hidden_size, num_heads=num_heads,
                           vocab_size=target.model.config.vocab_size, target=target_label)
        self.module = MedusaHeads(cfg, target.model)
        self.decay = decay

    @classmethod
    def check_options(cls, options: Mapping[str, Any], target_label: str) -> None:
        require_int("strategy.num_heads", options.get("num_heads", 1))  # left out: the default, which passes
        start_checkpoint(options.get("init_from"), cls.name, target_label)

    def loss(self, batch: Batch, token_loss: TokenLoss, positions: int,
             g: torch.Generator) -> tuple[torch.Tensor, Metrics]:
        heads = self.module
        bsz, t = batch.hidden.shape[:2]
        pos = torch.arange(t, device=batch.tokens.device).expand(bsz, t)
        cols, ok = sample_positions(pos <= batch.lengths[:, None] - 3, positions, g)
        h = batch.hidden.gather(1, cols[..., None].expand(-1, -1, batch.hidden.shape[-1]))  # [B, P, H]
        total = torch.zeros((), device=h.device)
        metrics = Metrics()
        for i, block in enumerate(heads.blocks, start=1):
            idx = cols + i + 1  # x_{t+i+1}
            pick = ok & (idx <= batch.lengths[:, None] - 1)
            labels = batch.tokens.gather(1, idx.clamp(max=batch.tokens.shape[1] - 1))
            out = h + F.silu(block(h))
            ce, correct = token_loss(heads.lm_head, out[pick], labels[pick])
            total = total + self.decay ** (i - 1) * ce
            metrics[f"token_loss_{i}"] = ce
            metrics[f"acc_{i}"] = share(correct)
        metrics["loss"] = total
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

    def decode_overrides(self, directory: Path) -> str:
        return f"strategy=draft_model draft.path={shlex.quote(str(directory))}"

    def loss(self, batch: Batch, token_loss: TokenLoss, positions: int,
             g: torch.Generator) -> tuple[torch.Tensor, Metrics]:
        model = self.module
        bsz, n = batch.tokens.shape
        pos = torch.arange(n - 1, device=batch.tokens.device).expand(bsz, n - 1)
        mask = (torch.arange(n, device=pos.device)[None] < batch.lengths[:, None]).long()
        hidden = model.model(input_ids=batch.tokens, attention_mask=mask).last_hidden_state[:, :-1]  # [B, N-1, H]
        cols, ok = sample_positions(pos <= batch.lengths[:, None] - 2, positions, g)
        sel = hidden.gather(1, cols[..., None].expand(-1, -1, hidden.shape[-1]))[ok]
        ce, correct = token_loss(model.get_output_embeddings(), sel, batch.top1.gather(1, cols)[ok])
        metrics = Metrics()
        metrics["loss"], metrics["acc_1"] = ce, share(correct)
        return ce, metrics

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
