"""Cross-tokenizer drafting: draft_model with a draft of another tokenizer.

The draft cannot read or write the target's ids, so it keeps its own token sequence and KV cache and
meets the target in text. Every step (`lookup`):

1) sync: each row's committed target tokens since its *anchor* are decoded to text and re-encoded with
   the draft's tokenizer; the draft's sequence is the frozen part before the anchor plus that tail. The
   draft's cache is rolled back to the longest common prefix with what it holds and the rest is fed, in
   one forward for the batch (rows with less to feed re-feed tokens they hold, which rewrites identical
   entries). The anchor is a boundary where both tokenizations split the text at the same character; it
   trails the committed end by at least `lookbehind` target tokens, so the tail re-tokenized each step
   stays short and the tokens before it are stable (a later character can only re-merge the last few).
2) draft K of the draft's own tokens, one forward each (the K-th is not fed);
3) map them to target tokens by one of two rules:

- uad, universal assisted decoding (transformers' AssistedCandidateGeneratorDifferentTokenizers; T = 0
  only): the K draft tokens are decoded and the text re-encoded with the target's tokenizer after a
  lookbehind window of committed target text, so word boundaries tokenize as the target would. That
  gives a variable number of target tokens: at most K are kept and a shorter draft is padded to K
  (every step of a batch verifies K, as ngram pads). Greedy verification keeps the output equal to the
  target's greedy decoding whatever is drafted; padding only costs acceptance. There is no q over the
  target's tokens, so uad is refused at T > 0.
- tli, token-level intersection (Timor et al. 2025, "Accelerating LLM Inference with Lossless
  Speculative Decoding Algorithms for Heterogeneous Vocabularies", arXiv 2502.05202): the draft's
  distribution restricted to the tokens whose text exists in both vocabularies (`shared_vocabulary`),
  renormalized (after temperature / top-k / top-p, as for the target), and mapped to the target's ids.
  Each drafted token is then one target token, drawn from q, so standard rejection sampling keeps the
  target's distribution exactly, at every temperature (at T = 0 it drafts the argmax of the restricted
  distribution).

`CrossTokenizerProposer` is what `DraftModelProposer(ctx, ...)` builds when strategy.cross_tokenizer
picks a rule (draft_model.cross_rule): the base's "lookup" loop calls `lookup`, which runs the draft
model itself, since the base's chain loop assumes the draft reads target ids at target positions.
Its own cache is rolled back by the text sync above, not by `commit` (hence owns_kv_cache = False).
Host work per step and row: one decode and one encode of the tail (plus one per uad draft), a
[B, K] copy of the drafted ids to the host, and a [B, K+1] copy of the committed tokens (commit).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from specbench.errors import ConfigError
from specbench.models.draft_runner import make_draft_runner
from specbench.strategies.base import BuildContext, DecodeState, Draft, Proposer
from specbench.strategies.draft_model import DraftModelProposer, cross_rule, raise_if_cross_unsupported
from specbench.verify import Verdict, argmax_last, exp_noise, logits_to_probs, sample_from


# -- text <-> tokens (pure helpers) ------------------------------------------------------------------------------
def decode(tok: Any, ids: list[int]) -> str:
    """Text of ids, special tokens dropped, spaces as they are (no clean-up: decoding stays concatenative)."""
    return tok.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)


def token_texts(tok: Any, ids: list[int]) -> list[str]:
    """Each id's own text (decode of [id]), in one call where the tokenizer batches."""
    if hasattr(tok, "batch_decode"):
        return tok.batch_decode([[i] for i in ids], skip_special_tokens=True, clean_up_tokenization_spaces=False)
    return [decode(tok, [i]) for i in ids]


def encode(tok: Any, text: str) -> list[int]:
    """Ids of text, without special tokens."""
    return list(tok(text, add_special_tokens=False)["input_ids"])


def special_prefix(tok: Any) -> list[int]:
    """The ids a tokenizer puts before a text (a BOS), read from how it encodes one."""
    with_special = list(tok("a", add_special_tokens=True)["input_ids"])
    plain = encode(tok, "a")
    n = len(with_special) - len(plain)
    return with_special[:n] if n > 0 and with_special[n:] == plain else []


def common_prefix_len(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def aligned_cut(target_texts: list[str], draft_texts: list[str], limit: int) -> tuple[int, int] | None:
    """The latest boundary where both tokenizations of one text split at the same character: (t, j) with the
    first t target tokens and the first j draft tokens spelling the same number of characters, 1 <= t <= limit,
    j >= 1; None when there is none. `*_texts` are each token's own text, from the same start."""
    ends: dict[int, int] = {}
    n = 0
    for j, text in enumerate(draft_texts, 1):
        n += len(text)
        ends.setdefault(n, j)  # the fewest draft tokens reaching n characters (skip empty ones after)
    n, best = 0, None
    for t, text in enumerate(target_texts[:limit], 1):
        n += len(text)
        if n > 0 and n in ends:
            best = (t, ends[n])
    return best


def target_continuation(target_tok: Any, window: list[int], text: str) -> list[int]:
    """Target ids that continue the committed `window` (the last committed target ids) with `text`: text is
    encoded after the window's own text, so that a word boundary tokenizes as the target would; when that
    encoding does not keep the window's tokens as a prefix (the text merges into the window's last token),
    text is encoded on its own."""
    before = decode(target_tok, window)
    head = encode(target_tok, before)
    both = encode(target_tok, before + text)
    if both[: len(head)] == head:
        return both[len(head):]
    return encode(target_tok, text)


def shared_vocabulary(draft_tok: Any, target_tok: Any, draft_vocab: int, target_vocab: int,
                      eos: tuple[int | None, int | None] = (None, None)) -> torch.Tensor:
    """[V_draft] int64: the target id of each draft id whose text is also a target token's text, -1 elsewhere
    (TLI's intersection). Special tokens, empty texts and texts with U+FFFD (a byte piece of a character)
    are not shared; `eos` = (draft EOS, target EOS) are mapped to each other. Where several target ids spell
    one text (a byte-fallback twin), the one the target's tokenizer encodes that text to wins."""

    def texts(tok: Any, n: int) -> list[str | None]:
        n = min(n, len(tok))
        special = set(getattr(tok, "all_special_ids", None) or ())
        raw = token_texts(tok, list(range(n)))
        return [None if i in special or not s or "\ufffd" in s else s for i, s in enumerate(raw)]

    by_text: dict[str, list[int]] = {}
    for i, s in enumerate(texts(target_tok, target_vocab)):
        if s is not None:
            by_text.setdefault(s, []).append(i)
    d2t = torch.full((draft_vocab,), -1, dtype=torch.long)
    for i, s in enumerate(texts(draft_tok, draft_vocab)):
        ids = by_text.get(s) if s is not None else None
        if not ids:
            continue
        if len(ids) > 1:
            canonical = encode(target_tok, s)
            ids = canonical if len(canonical) == 1 and canonical[0] in ids else ids
        d2t[i] = ids[0]
    if eos[0] is not None and eos[1] is not None and eos[0] < draft_vocab and eos[1] < target_vocab:
        d2t[eos[0]] = eos[1]
    return d2t


def _eos_id(tok: Any) -> int | None:
    eos = getattr(tok, "eos_token_id", None)
    return eos if isinstance(eos, int) else None


@dataclass
class _Row:
    """One row's draft-side state. The draft's cache holds `cached` at positions 0..len-1; the committed target
    tokens before `anchor` spell the same text as `head`, which is never re-tokenized again."""

    head: list[int]
    anchor: int = 0
    cached: list[int] = field(default_factory=list)


class CrossTokenizerProposer(DraftModelProposer):
    """draft_model across tokenizers (uad at T = 0, tli at any T); see the module docstring."""

    drafting = "lookup"  # the base calls lookup(); it runs the draft model over the draft's own tokens
    owns_kv_cache = False  # its cache is in the draft's token space, rolled back by the text sync, not by commit()
    cuda_graphs = False  # catch-ups vary in length every step

    def __init__(self, ctx: BuildContext, k: int, name: str = "draft_model", cross_tokenizer: str = "auto",
                 lookbehind: int = 10, **options: Any) -> None:
        Proposer.__init__(self, ctx, k, name, **options)  # not DraftModelProposer's: no shared-id checks, own runner
        raise_if_cross_unsupported({"name": name, "tree": self.tree, "one_extra_forward_pass": self.one_extra_forward_pass})
        assert ctx.draft is not None, "run() loads the draft for strategies with needs_draft_model"
        rule = cross_rule(ctx, cross_tokenizer) or ("uad" if ctx.sampling.greedy else "tli")
        if rule == "uad" and not ctx.sampling.greedy:
            raise ConfigError("strategy.cross_tokenizer=uad with sampling.temperature > 0: universal assisted decoding has "
                              "no q over the target's tokens, so it is lossless only at T=0; allowed at T>0: "
                              "cross_tokenizer=tli or auto")
        self.rule = rule
        self.lookbehind = lookbehind
        self.target_tok, self.draft_tok = ctx.target.tokenizer, ctx.draft.tokenizer
        self.target_vocab = ctx.target.vocab_size
        self.draft_runner = make_draft_runner(ctx.draft.model, ctx.backend, batch_invariant=ctx.batch_invariant)
        self.draft_vocab = self.draft_runner.vocab_size
        self.prefix = special_prefix(self.draft_tok)  # the draft's BOS, if its tokenizer adds one
        self.draft_eos = set(ctx.draft.eos_ids)
        self.target_eos = _eos_id(self.target_tok)
        self.d2t: torch.Tensor | None = None  # [V_draft] tli: target id of each shared draft id, -1 elsewhere
        if rule == "tli":
            d2t = shared_vocabulary(self.draft_tok, self.target_tok, self.draft_vocab, self.target_vocab,
                                    (_eos_id(self.draft_tok), self.target_eos))
            if not bool((d2t >= 0).any()):
                raise ConfigError(f"strategy.cross_tokenizer=tli: draft {ctx.draft.spec.label!r} and target "
                                  f"{ctx.target.spec.label!r} share no token text; allowed: a draft whose vocabulary "
                                  f"overlaps the target's (or cross_tokenizer=uad at T=0)")
            self.d2t = d2t.to(self.device)
            self.unshared = self.d2t < 0  # [V_draft]
        self.rows: list[_Row] = []
        self.host: list[list[int]] = []  # per row: the committed target tokens (host copy)
        self.capacity = 0  # draft cache slots per row

    # -- the loop ----------------------------------------------------------------------------------------------
    def begin(self, state: DecodeState) -> None:
        super().begin(state)
        self.host = [[] for _ in range(state.batch_size)]
        self.rows = [_Row(head=list(self.prefix)) for _ in range(state.batch_size)]
        self.capacity = 0

    def admit(self, state: DecodeState, lo: int, hi: int, *prefill: Any) -> None:
        super().admit(state, lo, hi, *prefill)
        for b, row in zip(range(lo, hi), self.admitted_tokens(state, lo, hi)):
            self.host[b] = row
            self.rows[b] = _Row(head=list(self.prefix))  # nothing cached: its first lookup feeds it from position 0
        # the draft's sequences may be longer than the target's (a finer tokenizer): room for 2x the new tokens, grown
        # (and re-fed from scratch) if a row ever needs more
        prompt = max(len(self.prefix) + len(encode(self.draft_tok, decode(self.target_tok, h)))
                     for h in self.host[lo:hi])
        need = prompt + 2 * (state.max_len - max(state.prompt_lengths[lo:hi])) + self.k + 1
        if need > self.capacity:
            self._allocate(need)

    def lookup(self, state: DecodeState) -> Draft:
        bsz, k = state.batch_size, self.k
        # 1) sync: each row's draft sequence for its committed text, and the cache rolled back to what it shares
        wants = [self._draft_sequence(row, tokens) for row, tokens in zip(self.rows, self.host)]
        if max(len(w) for w in wants) + k > self.capacity:
            self._allocate(2 * max(len(w) for w in wants) + k)
        keep = [common_prefix_len(row.cached, w) for row, w in zip(self.rows, wants)]
        t = max(1, *(len(w) - c for w, c in zip(wants, keep)))
        cols = [[max(len(w) - t + i, 0) for i in range(t)] for w in wants]  # each row's last t positions (clamped at 0)
        tokens = torch.tensor([[w[p] for p in c] for w, c in zip(wants, cols)], device=self.device)  # [B, T]
        positions = torch.tensor(cols, device=self.device)  # [B, T]
        lengths = torch.tensor([len(w) for w in wants], device=self.device)[:, None]  # [B, 1]
        attn_len = max(len(w) for w in wants) + k
        last = torch.full((bsz, 1), t - 1, device=self.device) if t > 1 else None
        logits = self.draft_runner(tokens, positions, attn_len=attn_len, logits_at=last).logits[:, -1]  # [B, V_draft]
        self.draft_forwards += 1
        # 2) draft K of the draft's tokens; d_1..d_{K-1} are fed back (at the positions after each row's sequence)
        drafted, targets, probs = [], [], []
        for i in range(k):
            d, q = self._pick_draft(logits)  # [B] draft ids, q [B, V_target] (tli at T > 0) or None
            drafted.append(d)
            if self.d2t is not None:
                targets.append(self.d2t[d])
            if q is not None:
                probs.append(q)
            if i + 1 < k:
                logits = self.draft_runner(d[:, None], lengths + i, attn_len=attn_len).logits[:, -1]
                self.draft_forwards += 1
        drafted_host = torch.stack(drafted, 1).tolist()  # [B, K] the one device -> host copy of propose
        for row, w, d in zip(self.rows, wants, drafted_host):
            row.cached = w + d[: k - 1]
        # 3) the draft in target ids: tli's one to one, uad's re-encoded text (at most K, padded to K)
        if self.d2t is not None:
            return Draft(tokens=torch.stack(targets, 1), probs=torch.stack(probs, 1) if probs else None)
        return Draft(tokens=torch.tensor([self._to_target(h, d) for h, d in zip(self.host, drafted_host)],
                                         device=self.device))

    def commit(self, state: DecodeState, verdict: Verdict, accepted: list[int], old_lengths: list[int]) -> None:
        super().commit(state, verdict, accepted, old_lengths)
        # the step wrote at most K+1 tokens per row from its old length on: copy that window only
        cols = (torch.tensor(old_lengths, device=self.device)[:, None] + torch.arange(self.k + 1, device=self.device))
        new = state.tokens.gather(1, cols.clamp(max=state.max_len - 1)).tolist()  # [B, K+1]
        for b, (row, old, n) in enumerate(zip(self.host, old_lengths, state.lengths_host)):
            row.extend(new[b][: n - old])

    # -- helpers -----------------------------------------------------------------------------------------------
    def _allocate(self, slots: int) -> None:
        """Size the draft's cache; what it held is gone, so every row is fed from scratch at the next step."""
        self.draft_runner.allocate(len(self.rows), slots)
        self.capacity = slots
        for row in self.rows:
            row.cached = []

    def _draft_sequence(self, row: _Row, tokens: list[int]) -> list[int]:
        """The draft's tokens for a row's committed target tokens: the head, then the text since the anchor
        re-encoded; the anchor moves up to `lookbehind` target tokens before the end, to a boundary both
        tokenizations share (and spell identically: a byte piece of a character never anchors)."""
        window = tokens[row.anchor:]
        tail = encode(self.draft_tok, decode(self.target_tok, window))
        want = row.head + tail
        limit = len(window) - self.lookbehind
        if limit >= 1 and tail:
            cut = aligned_cut(token_texts(self.target_tok, window[:limit]), token_texts(self.draft_tok, tail), limit)
            if cut is not None and decode(self.target_tok, window[: cut[0]]) == decode(self.draft_tok, tail[: cut[1]]):
                row.anchor += cut[0]
                row.head = row.head + tail[: cut[1]]
        return want or [min(self.draft_eos, default=0)]  # an empty text (no BOS either): one token to start from

    def _pick_draft(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """[B, V_draft] logits -> draft ids [B] and, for tli at T > 0, q over the target's ids [B, V_target]."""
        if self.d2t is None:
            return argmax_last(logits), None  # uad: the draft's own greedy choice
        logits = logits.masked_fill(self.unshared, float("-inf"))  # tli: shared tokens only
        if self.sampling.greedy:
            return argmax_last(logits), None
        q = logits_to_probs(logits, self.sampling)  # [B, V_draft], zero off the intersection
        d = sample_from(q, exp_noise(q.shape, self.generator, q.device))
        q_target = torch.zeros((q.shape[0], self.target_vocab), device=q.device, dtype=q.dtype)
        q_target.scatter_add_(1, self.d2t.clamp(min=0).expand(q.shape[0], -1), q)  # unshared ids add 0
        return d, q_target

    def _to_target(self, committed: list[int], drafted: list[int]) -> list[int]:
        """uad: K draft ids -> exactly K target ids: the drafted text re-encoded after the last `lookbehind` committed
        target tokens, cut at the draft's EOS (which becomes the target's), at most K, padded with the last one."""
        end = next((i for i, d in enumerate(drafted) if d in self.draft_eos), len(drafted))
        ids = target_continuation(self.target_tok, committed[-self.lookbehind:], decode(self.draft_tok, drafted[:end]))
        if end < len(drafted) and self.target_eos is not None:
            ids.append(self.target_eos)
        ids = [i for i in ids if i < self.target_vocab][: self.k]
        pad = ids[-1] if ids else committed[-1]
        return ids + [pad] * (self.k - len(ids))
