"""ngram: prompt lookup decoding. The draft is what followed the suffix the last time it occurred.

(Saxena 2023, "Prompt Lookup Decoding"; the `ngram` proposer of vLLM and transformers'
`prompt_lookup_num_tokens`.) For each row, take the longest suffix n-gram of its committed tokens
(prompt + output so far), n from max_n down to min_n, find its most recent earlier occurrence and
draft the K tokens that followed it. No model, no KV cache, no q: the verifier treats the draft as
one-hot, which is lossless at every temperature.

Padding. A continuation is shorter than K only when the occurrence ends less than K tokens before
the suffix, i.e. the sequence is repeating with period P = (distance between the two occurrences)
< K; the draft then continues that period (the K tokens the sequence would hold if the repetition
went on), which is what greedy decoding loops produce. A row with no match drafts its last
committed token K times (period 1). Padding only costs acceptance, never correctness: the verify
rule rejects any token the target would not produce. Note that every step verifies K drafts per
row whatever the match length, so a short or missing match still costs K verify slots.

Matching runs on the host in numpy, vectorised over the batch: one [B, S] comparison per n-gram
position (max_n of them), then one argmax per row; no device sync per row. The proposer keeps a
host copy of the committed tokens and appends each step's new tokens in commit() (one [B, K+1]
copy to the host per step).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from specbench.errors import ConfigError
from specbench.strategies.base import BuildContext, DecodeState, Proposer
from specbench.verify import Verdict


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def lookup_drafts(tokens: np.ndarray, lengths: np.ndarray, k: int, min_n: int, max_n: int) -> np.ndarray:
    """Prompt-lookup drafts for a batch of committed sequences (the pure core of this strategy).

    tokens: [B, S] int64, row b's committed tokens in tokens[b, :lengths[b]] (the rest is ignored);
    lengths: [B] int64, each >= 1. Returns [B, K] int64.

    A candidate occurrence is identified by its last position e (e <= L-2: strictly before the
    suffix's end); its match length is the number of tokens ending at e that equal the tokens
    ending at L-1, capped at max_n. The best candidate has the longest match (>= min_n), then the
    largest e (most recent). Its continuation starts at e+1 and runs with period P = L-1-e.
    """
    bsz = tokens.shape[0]
    lengths = lengths.astype(np.int64)
    width = int(lengths.max()) - 1  # candidate end positions e in [0, width)
    rows = np.arange(bsz)
    if width <= 0:  # every row holds a single token: nothing earlier to match
        return np.repeat(tokens[rows, lengths - 1][:, None], k, axis=1)
    ends = np.arange(width)  # [W] candidate e
    # match[b, e] stays True while tokens[b, e-j] == tokens[b, L-1-j] for j = 0..n-1, so the number
    # of j it was True for is the match length ending at e, capped at max_n
    match = np.ones((bsz, width), dtype=bool)
    length = np.zeros((bsz, width), dtype=np.int16 if max_n < 2**15 else np.int64)
    for j in range(min(max_n, width)):
        want = tokens[rows, np.maximum(lengths - 1 - j, 0)]  # [B] the suffix's j-th token from the end
        match[:, :j] = False  # tokens[b, e-j] does not exist for e < j
        match[:, j:] &= tokens[:, : width - j] == want[:, None]
        match[lengths - 1 - j < 0] = False  # a row shorter than the n-gram cannot match it
        length += match
    # a candidate needs match length >= min_n and e <= L-2 (strictly before the suffix's end); the
    # longest match wins, then the most recent (the last column holding the row's longest match)
    length[(length < min_n) | (ends[None, :] > (lengths - 2)[:, None])] = 0
    longest = length.max(axis=1)  # [B]
    most_recent = width - 1 - (length == longest[:, None])[:, ::-1].argmax(axis=1)  # [B]
    end = np.where(longest > 0, most_recent, lengths - 2)  # no match: e = L-2, period 1, the last token repeated
    period = lengths - 1 - end  # [B] >= 1
    idx = end[:, None] + 1 + np.arange(k)[None, :] % period[:, None]  # [B, K], all < L
    return np.take_along_axis(tokens, idx, axis=1)


class NgramProposer(Proposer):
    """Drafts by looking up the committed tokens' own history; see the module docstring."""

    drafting = "lookup"

    def __init__(self, ctx: BuildContext, k: int, name: str = "ngram", min_n: int = 1, max_n: int = 3,
                 **options: Any) -> None:
        super().__init__(ctx, k, name, **options)
        self.validate({"name": name, "k": k, "min_n": min_n, "max_n": max_n})
        self.min_n, self.max_n = min_n, max_n
        self.host: np.ndarray = np.zeros((0, 0), dtype=np.int64)  # [B, S] committed tokens, host copy
        self.host_lengths: np.ndarray = np.zeros(0, dtype=np.int64)  # [B]

    @classmethod
    def validate(cls, cfg: Mapping[str, Any]) -> None:
        super().validate(cfg)
        min_n, max_n = cfg.get("min_n", 1), cfg.get("max_n", 3)
        if not _is_int(min_n) or min_n < 1:
            raise ConfigError(f"strategy.min_n={min_n!r} for strategy 'ngram'; allowed: an integer >= 1 "
                              f"(the shortest suffix n-gram to look up)")
        if not _is_int(max_n) or max_n < min_n:
            raise ConfigError(f"strategy.max_n={max_n!r} with strategy.min_n={min_n!r} for strategy 'ngram'; "
                              f"allowed: an integer >= min_n (the longest suffix n-gram to look up)")

    def start(self, state: DecodeState, prefill_hidden: torch.Tensor | None) -> None:
        super().start(state, prefill_hidden)
        self.host = np.zeros((state.batch_size, state.max_len), dtype=np.int64)
        p = max(state.lengths_host)
        self.host[:, :p] = state.tokens[:, :p].cpu().numpy()  # prompts and the first token, once per batch
        self.host_lengths = np.array(state.lengths_host, dtype=np.int64)

    def lookup(self, state: DecodeState) -> torch.Tensor:
        drafts = lookup_drafts(self.host, self.host_lengths, self.k, self.min_n, self.max_n)  # [B, K]
        return torch.from_numpy(drafts).to(self.device)

    def commit(self, state: DecodeState, verdict: Verdict, accepted: list[int], old_lengths: list[int]) -> None:
        super().commit(state, verdict, accepted, old_lengths)
        # the step wrote at most K+1 tokens per row from its old length on: copy that window only
        cols = np.minimum(np.array(old_lengths, dtype=np.int64)[:, None] + np.arange(self.k + 1), state.max_len - 1)  # [B, K+1]
        window = torch.from_numpy(cols).to(state.tokens.device)
        new = state.tokens.gather(1, window).cpu().numpy()  # the one device -> host copy of the step
        new_lengths = np.array(state.lengths_host, dtype=np.int64)
        keep = cols < new_lengths[:, None]  # committed slots only; finished rows keep their length
        rows = np.broadcast_to(np.arange(cols.shape[0])[:, None], cols.shape)
        self.host[rows[keep], cols[keep]] = new[keep]
        self.host_lengths = new_lengths
