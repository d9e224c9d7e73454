"""draft_model: a smaller causal LM of the same tokenizer drafts K tokens autoregressively.

(Leviathan et al. 2023, arXiv 2211.17192; Chen et al. 2023, arXiv 2302.01318.) The draft keeps its
own per-row cache. In the first forward of a step it ingests every committed token it has not yet
seen (the bonus token, plus the last accepted draft when all K were accepted) together, so a step
costs K draft forwards, not K+1. At T > 0 it samples from its own distribution q, shaped by the
same temperature / top-k / top-p as the target, and returns q for rejection sampling.
"""

from __future__ import annotations

from typing import Any

import torch

from specbench.models.draft_runner import make_draft_runner, raise_if_tokenizers_disagree
from specbench.strategies.base import BuildContext, DecodeState, Draft, Proposer, raise_if_vocab_too_large
from specbench.verify import Verdict, logits_to_probs, sample_from


class DraftModelProposer(Proposer):
    owns_kv_cache = True
    needs_catch_up = True
    samples = True
    needs_draft_model = True

    def __init__(self, ctx: BuildContext, k: int, name: str = "draft_model", **options: Any) -> None:
        super().__init__(ctx, k, name, **options)
        assert ctx.draft is not None, "run() loads the draft for strategies with needs_draft_model"
        raise_if_vocab_too_large(ctx.draft.vocab_size, ctx.target.vocab_size, ctx.draft.spec.label, ctx.target.spec.label)
        raise_if_tokenizers_disagree(ctx.draft.tokenizer, ctx.target.tokenizer, ctx.draft.spec.label, ctx.target.spec.label)
        # chosen from the DRAFT's own config: a VLM draft gets images (begin_batch), a text draft plain positions
        self._use_runner(ctx, make_draft_runner(ctx.draft.model, ctx.backend, graphs=ctx.cuda_graphs,
                                                 batch_invariant=ctx.batch_invariant))

    def _use_runner(self, ctx: BuildContext, runner: Any) -> None:
        """The drafting state around `runner` (layer_skip reuses all of it with the target's first layers)."""
        self.runner = runner
        self.device = ctx.device
        # under captured graphs every catch-up after the first step feeds 2 tokens (one graph shape, warmed
        # before timing). Re-feeding a token the draft already wrote in an earlier decode step rewrites its
        # cache entry bit for bit (batch-invariant kernels); the prompt's own entries (written by the
        # prefill, on other kernels) are never re-fed, so the first step keeps its single token.
        self.fixed_catch_up = ctx.cuda_graphs and ctx.device.type == "cuda"
        self.seen: list[int] = []  # per row: committed tokens the draft has processed (positions < seen)

    def start(self, state: DecodeState, prefill_hidden: torch.Tensor | None) -> None:
        b, p = state.batch_size, max(state.prompt_lengths)
        self.runner.allocate(b, state.max_len)
        if hasattr(self.runner, "begin_batch"):  # a multimodal draft sees the images too
            self.runner.begin_batch([state.tokens[i, :n].tolist() for i, n in enumerate(state.prompt_lengths)], state.mm_inputs)
        # right-padded prompts: slots past a row's prompt get garbage that is masked, then overwritten
        positions = torch.arange(p, device=self.device).expand(b, p)
        self.runner(state.tokens[:, :p], positions, attn_len=p, logits_at=positions[:, :1])
        self.seen = list(state.prompt_lengths)

    def propose(self, state: DecodeState) -> Draft:
        bsz = state.batch_size
        # 1) catch up: feed the last T committed tokens, T = the most any row has not seen; rows that
        #    saw more re-feed tokens at their own positions, which rewrites identical cache entries
        t = max(1, *(length - seen for length, seen in zip(state.lengths_host, self.seen)))
        if self.fixed_catch_up and all(n - 2 >= p for n, p in zip(state.lengths_host, state.prompt_lengths)):
            t = 2
        positions = state.lengths[:, None] - t + torch.arange(t, device=self.device)  # [B, T]
        inputs = state.tokens.gather(1, positions)
        attn_len = max(state.lengths_host) + self.k
        last = torch.full((bsz, 1), t - 1, device=self.device)
        logits = self.runner(inputs, positions, attn_len=attn_len, logits_at=last).logits[:, 0]  # [B, V]
        # 2) draft K tokens; d_i is fed back for i < K (d_K never needs the draft's cache)
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
        # the draft processed the pending token and d_1..d_{K-1}: its cache is valid up to the first
        # rejected one, and never past a row's (possibly truncated) committed length
        self.seen = [min(old + min(n, self.k - 1), new) for old, n, new in zip(old_lengths, accepted, state.lengths_host)]
