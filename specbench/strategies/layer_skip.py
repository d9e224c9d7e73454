"""layer_skip: self-speculation. The target's own first L layers draft for the full model.

(Draft & Verify, Zhang et al. 2023, arXiv 2309.08168; LayerSkip, Elhoushi et al. 2024, arXiv
2404.16710: early exit at layer L, then the target's final norm and LM head.) The draft shares
every weight with the target (embedding, layers 0..L-1, final norm, LM head), so it costs no
memory for weights and needs no tokenizer or vocabulary checks; it keeps its own L-layer KV
cache. Models not trained for early exit (no LayerSkip recipe) accept less at small L.

The cache is kept exactly as draft_model keeps its own: in the first forward of a step the draft
ingests every committed token it has not yet seen (the bonus token, plus the last accepted draft
when all K were accepted) together, so a step costs K draft forwards, not K+1; rejected drafts
leave stale slots above the committed length that are never read and get overwritten. At T > 0
it samples from its own q, shaped by the same temperature / top-k / top-p as the target, and
returns q for rejection sampling.

Settings: k, num_layers (L; null = half the target's layers, rounded down; 1 <= L < the target's
depth). It needs specbench's own decoder (Llama / Qwen2 / Qwen3): transformers' forward cannot
stop early.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from specbench.errors import ConfigError
from specbench.models.decoder import SUPPORTED_ARCHS
from specbench.models.cuda_graphs import maybe_graphed
from specbench.models.runner import make_runner
from specbench.strategies.base import BuildContext, DecodeState, Draft, Proposer
from specbench.verify import Verdict, logits_to_probs, sample_from


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def resolve_num_layers(num_layers: int | None, total: int) -> int:
    """The draft depth L: null means half the target's layers; anything outside 1..total-1 is refused."""
    if total < 2:
        raise ConfigError(f"layer_skip needs a target of at least 2 layers to skip one; the target has {total}")
    layers = max(1, total // 2) if num_layers is None else num_layers
    if not _is_int(layers) or not 1 <= layers < total:
        raise ConfigError(f"strategy.num_layers={num_layers!r} for strategy 'layer_skip'; allowed: an integer in "
                          f"1..{total - 1} (the target has {total} layers; the draft must skip at least one), "
                          f"or null for half ({max(1, total // 2)})")
    return layers


def raise_if_no_native_decoder(model_type: str, backend: str) -> None:
    if backend == "transformers" or model_type not in SUPPORTED_ARCHS:
        raise ConfigError(f"layer_skip with engine.backend={backend!r} on a {model_type!r} target; allowed: "
                          f"engine.backend=auto or native on a {'/'.join(sorted(SUPPORTED_ARCHS))} target (layer_skip runs "
                          f"the first L layers with specbench's own decoder; transformers' forward cannot exit early)")


class LayerSkipProposer(Proposer):
    owns_kv_cache = True
    needs_catch_up = True
    samples = True

    def __init__(self, ctx: BuildContext, k: int, name: str = "layer_skip", num_layers: int | None = None,
                 **options: Any) -> None:
        super().__init__(ctx, k, name, **options)
        self.validate({"name": name, "k": k, "num_layers": num_layers})
        hf = ctx.target.model
        raise_if_no_native_decoder(hf.config.model_type, ctx.backend)
        self.num_layers = resolve_num_layers(num_layers, hf.config.num_hidden_layers)
        self.runner = maybe_graphed(make_runner(hf, ctx.backend, num_layers=self.num_layers), ctx.cuda_graphs)  # shares the target's weights
        self.device = ctx.device
        self.generator = torch.Generator(device=ctx.device)
        self.generator.manual_seed(ctx.sampling.seed + 1)  # the draft's noise is independent of the verifier's
        self.seen: list[int] = []  # per row: committed tokens the draft has processed (positions < seen)

    @classmethod
    def validate(cls, cfg: Mapping[str, Any]) -> None:
        super().validate(cfg)
        layers = cfg.get("num_layers")
        if layers is not None and (not _is_int(layers) or layers < 1):
            raise ConfigError(f"strategy.num_layers={layers!r} for strategy 'layer_skip'; allowed: an integer >= 1 "
                              f"and below the target's depth, or null for half the target's layers")

    def start(self, state: DecodeState, prefill_hidden: torch.Tensor | None) -> None:
        b, p = state.batch_size, max(state.prompt_lengths)
        self.runner.allocate(b, state.max_len)
        # right-padded prompts: slots past a row's prompt get garbage that is masked, then overwritten
        positions = torch.arange(p, device=self.device).expand(b, p)
        self.runner(state.tokens[:, :p], positions, attn_len=p, logits_at=positions[:, :1])
        self.seen = list(state.prompt_lengths)

    def propose(self, state: DecodeState) -> Draft:
        bsz = state.batch_size
        # 1) catch up: feed the last T committed tokens, T = the most any row has not seen; rows that
        #    saw more re-feed tokens at their own positions, which rewrites identical cache entries
        t = max(1, *(length - seen for length, seen in zip(state.lengths_host, self.seen)))
        positions = state.lengths[:, None] - t + torch.arange(t, device=self.device)  # [B, T]
        inputs = state.tokens.gather(1, positions)
        attn_len = max(state.lengths_host) + self.k
        last = torch.full((bsz, 1), t - 1, device=self.device)
        logits = self.runner(inputs, positions, attn_len=attn_len, logits_at=last).logits[:, 0]  # [B, V]
        # 2) draft K tokens through the early exit; d_i is fed back for i < K (d_K never needs the cache)
        tokens, probs = [], []
        for i in range(self.k):
            if self.sampling.greedy:
                d = logits.argmax(-1)
            else:
                q = logits_to_probs(logits, self.sampling)  # [B, V]
                e = torch.empty_like(q).exponential_(generator=self.generator)
                d = sample_from(q, e)
                probs.append(q)
            tokens.append(d)
            if i + 1 < self.k:
                pos = state.lengths[:, None] + i  # d_{i+1} sits at position lengths + i
                logits = self.runner(d[:, None], pos, attn_len=attn_len).logits[:, 0]
        return Draft(tokens=torch.stack(tokens, 1), probs=torch.stack(probs, 1) if probs else None)

    def commit(self, state: DecodeState, verdict: Verdict, accepted: list[int], old_lengths: list[int]) -> None:
        # 3) roll back: the draft processed the pending token and d_1..d_{K-1}; its cache is valid up to
        #    the first rejected one, and never past a row's (possibly truncated) committed length
        self.seen = [min(old + min(n, self.k - 1), new) for old, n, new in zip(old_lengths, accepted, state.lengths_host)]
