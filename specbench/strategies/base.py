"""The proposer contract shared by every drafting strategy.

The engine owns the committed tokens, the target model and acceptance; a proposer only turns the
engine's state into K draft tokens per row (and, when it samples, their probabilities q), and
hears back how many were accepted. The class flags below are what differ between strategies
(DESIGN.md's table); the engine reads them instead of branching on strategy names.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from specbench.errors import ConfigError
from specbench.models.loading import LoadedModel
from specbench.verify import SamplingParams, Verdict


def raise_if_vocab_too_large(draft_vocab: int, target_vocab: int, draft_name: str, target_name: str) -> None:
    if draft_vocab > target_vocab:
        raise ConfigError(
            f"draft {draft_name!r} has a vocabulary of {draft_vocab} entries, larger than target {target_name!r}'s "
            f"{target_vocab}; allowed: a draft vocabulary <= the target's (ids beyond the target's cannot be verified). "
            f"Pick a draft of the target's family (draft=auto uses the preset's pair)"
        )


@dataclass
class BuildContext:
    """What a strategy may use to build itself: loaded models, the device and the sampling rule."""

    target: LoadedModel
    target_runner: Any  # specbench.models.runner.Runner over the target
    draft: LoadedModel | None  # loaded by run() only for strategies with needs_draft_model
    sampling: SamplingParams
    device: torch.device
    backend: str = "auto"
    cuda_graphs: bool = False  # wrap the strategy's own forwards in CUDA graphs (models.cuda_graphs.maybe_graphed)
    batch_invariant: bool = True  # the strategy's own decoder runners use the batch-invariant kernels (CUDA)


@dataclass
class DecodeState:
    """The engine's view of one batch, as a proposer sees it. Committed tokens only.

    Row b holds lengths[b] committed tokens (prompt + output). The last of them is *pending*: it has
    been emitted but the target has not processed it yet; the next verify forward starts with it.
    """

    tokens: torch.Tensor  # [B, S] int64, committed tokens; garbage at and beyond lengths[b]
    lengths: torch.Tensor  # [B] int64 on the device
    lengths_host: list[int]  # the same, on the host (the engine syncs once per step anyway)
    prompt_lengths: list[int]
    active: torch.Tensor  # [B] bool, rows still generating
    max_len: int  # cache slots per row
    mm_inputs: list[dict | None] | None = None  # per row: images etc. for multimodal runners (None = text)
    # from the last target forward, for strategies with pass_hidden_states_to_model:
    target_hidden: torch.Tensor | None = None  # [B, T, H] final-norm hidden states of that forward
    target_layer_hidden: list[torch.Tensor] | None = None  # [B, T, H] each, layers asked by hidden_layers()
    target_positions: torch.Tensor | None = None  # [B, T] positions of that forward's inputs

    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]


@dataclass
class Draft:
    tokens: torch.Tensor  # [B, K] int64
    probs: torch.Tensor | None = None  # [B, K, V_draft] q when the strategy samples at T > 0, else None (one-hot)


class Proposer(ABC):
    """Base class of every strategy. Subclasses set the flags and implement propose()."""

    # DESIGN.md's table, one flag per row
    pass_hidden_states_to_model: ClassVar[bool] = False  # draft consumes target hidden states
    owns_kv_cache: ClassVar[bool] = False
    needs_catch_up: ClassVar[bool] = False  # ingests unseen committed tokens in its first forward
    samples: ClassVar[bool] = False  # returns q at T > 0
    needs_draft_model: ClassVar[bool] = False  # run() loads cfg.draft for it

    def __init__(self, ctx: BuildContext, k: int, name: str = "", **options: Any) -> None:
        if options:
            raise ConfigError(f"strategy {name or type(self).__name__} got unknown settings {sorted(options)}")
        self.k = k
        self.name = name
        self.sampling = ctx.sampling
        # the draft's own noise, independent of the verifier's (seed + 1); reseed() restarts it
        self.generator = torch.Generator(device=ctx.device)
        self.reseed()

    def reseed(self) -> None:
        """Restart the draft's random stream. run() calls it after the untimed warm-up, so that
        engine.warmup never changes sampled tokens."""
        self.generator.manual_seed(self.sampling.seed + 1)

    @classmethod
    def validate(cls, cfg: Mapping[str, Any]) -> None:
        """Check the strategy's settings before any model loads. Subclasses extend it."""
        k = cfg.get("k")
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ConfigError(f"strategy.k={k!r} for strategy {cfg.get('name')!r}; allowed: an integer >= 1")

    def hidden_layers(self) -> tuple[int, ...]:
        """Target layers whose outputs this strategy reads (EAGLE-3 style fusion); () = none."""
        return ()

    def start(self, state: DecodeState, prefill_hidden: torch.Tensor | None) -> None:
        """A new batch: the prompts (and the first token) are committed; build per-batch caches here."""

    @abstractmethod
    def propose(self, state: DecodeState) -> Draft:
        """Return K draft tokens per row (rows that are no longer active may hold anything)."""

    def commit(self, state: DecodeState, verdict: Verdict, accepted: list[int], old_lengths: list[int]) -> None:
        """Hear what the target accepted. `state` is already committed; `accepted` (= verdict.accepted on the
        host) and `old_lengths` (the lengths before this step) are per row. Finished rows keep their length."""
