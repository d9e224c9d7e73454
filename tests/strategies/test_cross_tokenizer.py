"""Cross-tokenizer drafting (strategies/cross_tokenizer.py) on a tiny two-tokenizer setup.

Two character-level tokenizers over printable ASCII that disagree on every id: CHAR (<eos> at id 0, then
the characters in order, 96 ids) and MERGED (the characters shuffled, 12 merged pairs such as "th" and
" t", then <eos>: 108 ids). The target is tiny-llama's architecture over CHAR with random weights; the
draft is the same weights re-indexed for MERGED (a merged pair reads and scores as its first character)
plus noise, so it agrees with the target often, not always: drafts are partly accepted, rows roll back.
"""

from __future__ import annotations

import random
from functools import cache

import numpy as np
import pytest
import torch

from specbench_testing import chisquare_pvalue, hf_greedy, resample_from_p
from specbench.engine import Engine
from specbench.errors import ConfigError
from specbench.models.loading import LoadedModel, ModelSpec
from specbench.models.presets import PRESETS
from specbench.models.runner import make_runner
from specbench.strategies.base import BuildContext, DecodeState
from specbench.strategies.cross_tokenizer import (CrossTokenizerProposer, aligned_cut, common_prefix_len, decode, encode,
                                                  shared_vocabulary, special_prefix, target_continuation)
from specbench.strategies.draft_model import DraftModelProposer
from specbench.verify import SamplingParams, Verifier, logits_to_probs

CPU = torch.device("cpu")
CHARS = [chr(c) for c in range(32, 127)]  # 95 printable ASCII characters
MERGES = [("t", "h"), ("h", "e"), (" ", "t"), ("i", "n"), ("e", "r"), ("a", "n"), ("r", "e"), ("o", "n"), (" ", "a"),
          ("e", " "), ("s", " "), ("o", "u")]
GREEDY = SamplingParams()
TEXTS = ["the cat sat on the mat", "hello there, how are you", "once upon a time", "in the beginning was",
         "a quick brown fox jumps", "we went out", "tea or coffee?", "numbers: 1 2 3 4"]


def char_tokenizer(order: list[str], merges: list[tuple[str, str]], eos_first: bool):
    """A fast tokenizer over `order` (+ the merged pairs, + <eos> first or last), decoding by concatenation."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    pieces = (["<eos>"] if eos_first else []) + order + [a + b for a, b in merges] + ([] if eos_first else ["<eos>"])
    tok = Tokenizer(models.BPE({p: i for i, p in enumerate(pieces)}, merges))
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(["<eos>"])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")


@cache
def tokenizers():
    shuffled = CHARS.copy()
    random.Random(0).shuffle(shuffled)
    return char_tokenizer(CHARS, [], eos_first=True), char_tokenizer(shuffled, MERGES, eos_first=False)


def _llama(vocab: int, seed: int):
    from transformers import AutoConfig, AutoModelForCausalLM

    arch = {**PRESETS["tiny-llama"].arch, "vocab_size": vocab}
    arch.pop("model_type")
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(AutoConfig.for_model("llama", **arch)).eval()


def _loaded(name: str, model, tok) -> LoadedModel:
    model.generation_config.eos_token_id = tok.eos_token_id
    return LoadedModel(spec=ModelSpec(name=name, source="random"), model=model, tokenizer=tok)


@cache
def pair() -> tuple[LoadedModel, LoadedModel]:
    """(target over CHAR, draft over MERGED): see the module docstring. The target's LM head is scaled by 8 so
    that its distributions are peaked (a wrong rejection rule becomes visible) and greedy ties are rare."""
    char, merged = tokenizers()
    target = _llama(len(char), seed=0)
    with torch.no_grad():
        target.lm_head.weight.mul_(8.0)
    draft = _llama(len(merged), seed=1)
    # MERGED id -> the CHAR id whose rows it copies: a character's own, a merged pair's first character's
    source = [char.convert_tokens_to_ids(p if p == "<eos>" else p[0]) for p in merged.convert_ids_to_tokens(list(range(len(merged))))]
    weights = dict(target.named_parameters())
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in draft.named_parameters():
            p.copy_(weights[name][source] if name in ("lm_head.weight", "model.embed_tokens.weight") else weights[name])
            p.add_(torch.randn(p.shape, generator=g) * 0.3 * p.abs().mean())
    return _loaded("tiny-char", target, char), _loaded("tiny-merged", draft, merged)


def _context(target: LoadedModel, draft: LoadedModel, sampling: SamplingParams = GREEDY) -> BuildContext:
    return BuildContext(target=target, target_runner=make_runner(target.model), draft=draft, sampling=sampling, device=CPU)


def _generate(target: LoadedModel, draft: LoadedModel, prompts: list[list[int]], max_new: int, k: int = 3,
              sampling: SamplingParams = GREEDY, rule=None, **options):
    ctx = _context(target, draft, sampling)
    proposer = DraftModelProposer(ctx, k=k, **options)
    engine = Engine(ctx.target_runner, proposer, Verifier(sampling, CPU, rule=rule), max_new_tokens=max_new,
                    eos_ids=set(), device=CPU)
    rows, _ = engine.generate(prompts)
    return proposer, rows


# -- the pure helpers ------------------------------------------------------------------------------------------

def test_common_prefix_len():
    assert common_prefix_len([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix_len([], [1]) == 0
    assert common_prefix_len([7, 8], [7, 8]) == 2


def test_aligned_cut_finds_the_latest_boundary_both_tokenizations_share():
    # "the cat": target "t|h|e| |c|a|t", draft "the| c|at"; shared boundaries after 3 and 5 characters
    target, draft = list("the cat"), ["the", " c", "at"]
    assert aligned_cut(target, draft, limit=7) == (7, 3)
    assert aligned_cut(target, draft, limit=6) == (5, 2)
    assert aligned_cut(target, draft, limit=4) == (3, 1)
    assert aligned_cut(target, draft, limit=2) is None
    assert aligned_cut(["", "ab"], ["a", "b"], limit=2) == (2, 2)  # an empty (special) token adds no character
    assert aligned_cut(["", "x"], ["x"], limit=1) is None  # zero characters is no boundary


def test_merged_tokens_retokenize_and_decode_by_concatenation():
    char, merged = tokenizers()
    ids = encode(merged, "the other")
    assert merged.convert_ids_to_tokens(ids) == ["th", "e ", "o", "th", "er"]
    assert decode(merged, ids) == "the other" == decode(char, encode(char, "the other"))
    assert decode(merged, ids + [merged.eos_token_id]) == "the other"  # special tokens drop out
    assert special_prefix(char) == [] and special_prefix(merged) == []


def test_target_continuation_keeps_the_window_and_falls_back_when_the_text_merges_into_it():
    _, merged = tokenizers()
    window = encode(merged, "in the")
    assert merged.convert_ids_to_tokens(window) == ["in", " ", "th", "e"]
    assert merged.convert_ids_to_tokens(target_continuation(merged, window, "n a")) == ["n", " a"]  # "in then a"
    # the window ends in " t"; "he" after it makes "a the" = a| |th|e, which drops the window's " t" token:
    # the text is encoded on its own
    assert merged.convert_ids_to_tokens(encode(merged, "a t")) == ["a", " t"]
    assert merged.convert_ids_to_tokens(target_continuation(merged, encode(merged, "a t"), "he")) == ["he"]
    assert target_continuation(merged, [], "on") == encode(merged, "on")


def test_shared_vocabulary_maps_the_texts_both_vocabularies_spell():
    char, merged = tokenizers()
    d2t = shared_vocabulary(merged, char, len(merged), len(char), (merged.eos_token_id, char.eos_token_id))
    assert d2t.shape == (len(merged),)
    for i, piece in enumerate(merged.convert_ids_to_tokens(list(range(len(merged))))):
        if len(piece) == 1:  # a character: the same text in CHAR
            assert char.convert_ids_to_tokens(int(d2t[i])) == piece
        elif piece == "<eos>":
            assert int(d2t[i]) == char.eos_token_id == 0
        else:  # a merged pair: CHAR has no such token
            assert int(d2t[i]) == -1, piece
    back = shared_vocabulary(char, merged, len(char), len(merged))
    assert int((back >= 0).sum()) == len(CHARS) and int(back[0]) == -1  # no eos pair given: <eos> is special


# -- the text sync and its lookbehind --------------------------------------------------------------------------

def test_the_draft_sequence_follows_the_committed_text_and_its_anchor_trails_by_the_lookbehind():
    target, draft = pair()
    char, merged = tokenizers()
    proposer = DraftModelProposer(_context(target, draft), k=3, lookbehind=4)
    assert type(proposer) is CrossTokenizerProposer and proposer.rule == "uad"
    text = "the other thing in there"
    ids = encode(char, text)
    tokens = torch.zeros((1, 64), dtype=torch.long)
    tokens[0, :5] = torch.tensor(ids[:5])
    proposer.start(DecodeState(tokens=tokens, lengths=torch.tensor([5]), lengths_host=[5], prompt_lengths=[4],
                               active=torch.tensor([True]), max_len=64), None)
    row = proposer.rows[0]
    for n in range(5, len(ids) + 1):
        want = proposer._draft_sequence(row, ids[:n])
        assert want == encode(merged, text[:n]), n  # the same tokens as re-tokenizing everything
        assert row.anchor <= max(n - 4, 0) and decode(char, ids[: row.anchor]) == decode(merged, row.head)
    assert row.anchor >= len(ids) - 4 - 2  # it moved up, to within a merged pair of the lookbehind


@pytest.mark.parametrize("rule", ["uad", "tli"])
def test_the_draft_cache_holds_each_rows_draft_sequence(rule):
    """Every distribution the draft drafts from equals a full recompute of the draft model over that row's draft
    sequence (its re-tokenized text, then its drafts so far): the rollback to the common prefix and the feeding
    at each row's own positions leave no stale or misplaced entry."""
    target, draft = pair()
    prompts = _prompts(target.tokenizer, 4)
    ctx = _context(target, draft)
    proposer = DraftModelProposer(ctx, k=3, cross_tokenizer=rule, lookbehind=3)
    seen: list[tuple[list[list[int]], list[torch.Tensor]]] = []  # per step: each row's cached ids, the picks' logits
    pick, lookup = proposer._pick_draft, proposer.lookup

    def spy_pick(logits):
        seen[-1][1].append(logits.clone())
        return pick(logits)

    def spy_lookup(state):
        seen.append(([], []))
        out = lookup(state)
        seen[-1][0].extend(list(row.cached) for row in proposer.rows)
        return out

    proposer._pick_draft, proposer.lookup = spy_pick, spy_lookup
    engine = Engine(ctx.target_runner, proposer, Verifier(GREEDY, CPU), max_new_tokens=16, eos_ids=set(), device=CPU)
    rows, _ = engine.generate(prompts)
    assert len(seen) > 4 and any(row.anchor > 0 for row in proposer.rows)
    for cached, logits in seen:
        for i, at in enumerate(logits):  # pick i drafted after the row's sequence and its first i drafts
            for b, ids in enumerate(cached):
                context = ids[: len(ids) - (proposer.k - 1) + i]
                with torch.no_grad():
                    want = draft.model(torch.tensor([context]), use_cache=False).logits[0, -1]
                torch.testing.assert_close(at[b], want, atol=1e-4, rtol=1e-4)


# -- losslessness ----------------------------------------------------------------------------------------------

def _prompts(tok, n: int) -> list[list[int]]:
    return [encode(tok, t) for t in TEXTS[:n]]


@pytest.mark.parametrize("batch_size", [1, 4])
@pytest.mark.parametrize("reverse", [False, True], ids=["char-target", "merged-target"])
@pytest.mark.parametrize("rule", ["auto", "tli"])
def test_greedy_output_equals_target_only_greedy_decoding(batch_size, reverse, rule):
    target, draft = pair()[::-1] if reverse else pair()
    prompts = _prompts(target.tokenizer, batch_size)
    proposer, rows = _generate(target, draft, prompts, max_new=14, cross_tokenizer=rule)
    assert type(proposer) is CrossTokenizerProposer and proposer.rule == ("uad" if rule == "auto" else "tli")
    assert [r.output_ids for r in rows] == hf_greedy(target.model, prompts, 14)
    accepted, drafted = sum(r.accepted_tokens for r in rows), sum(r.draft_tokens for r in rows)
    assert 0 < accepted < drafted, (accepted, drafted)  # drafts partly accepted: rollbacks happened


def test_a_self_draft_through_the_text_sync_accepts_every_token():
    """The target drafting for itself across the text round trip (CHAR re-tokenizes exactly): AL = K + 1."""
    target, _ = pair()
    prompts = _prompts(target.tokenizer, 3)
    for rule in ("uad", "tli"):
        _, rows = _generate(target, target, prompts, max_new=13, k=3, cross_tokenizer=rule)
        assert [r.output_ids for r in rows] == hf_greedy(target.model, prompts, 13), rule
        assert all(r.accepted_tokens == 3 * r.drafts for r in rows), rule


# -- T > 0: tli keeps the target's distribution ------------------------------------------------------------------

SAMPLING = SamplingParams(temperature=1.0, seed=1)
N = 6000
TOKENS = 3


@cache
def marginals() -> tuple[list[int], list[np.ndarray]]:
    """The CHAR target's exact marginals of generated tokens 1..3 after a prompt, over all V^2 continuations."""
    target, _ = pair()
    prompt = encode(target.tokenizer, "the ot")
    v, n = target.vocab_size, len(prompt)
    x1, x2 = torch.arange(v).repeat_interleave(v), torch.arange(v).repeat(v)
    seqs = torch.cat([torch.tensor(prompt).expand(v * v, n), x1[:, None], x2[:, None]], dim=1)  # [V*V, P+2]
    with torch.no_grad():
        logits = target.model(seqs, use_cache=False).logits  # [V*V, P+2, V]
    p1 = logits_to_probs(logits[0, n - 1], SAMPLING).double()  # [V]
    p2 = logits_to_probs(logits[::v, n], SAMPLING).double()  # [x1, V]
    p3 = logits_to_probs(logits[:, n + 1], SAMPLING).double().view(v, v, v)  # [x1, x2, V]
    return prompt, [p1.numpy(), (p1 @ p2).numpy(), torch.einsum("a,ab,abc->c", p1, p2, p3).numpy()]


def _sampled(rule=None) -> tuple[np.ndarray, float, list[float]]:
    target, draft = pair()
    prompt, exact = marginals()
    proposer, rows = _generate(target, draft, [prompt] * N, max_new=TOKENS, k=2, sampling=SAMPLING, rule=rule)
    assert type(proposer) is CrossTokenizerProposer and proposer.rule == "tli"
    out = np.array([r.output_ids for r in rows])
    pvalues = [chisquare_pvalue(np.bincount(out[:, i], minlength=len(m)), m) for i, m in enumerate(exact)]
    return out, sum(r.accepted_tokens for r in rows) / sum(r.draft_tokens for r in rows), pvalues


def test_tli_sampling_follows_the_target_distribution():
    _, acceptance, pvalues = _sampled()
    assert min(pvalues) > 1e-4, pvalues
    assert 0.05 < acceptance < 0.95, acceptance


def test_the_distribution_test_fails_under_a_wrong_acceptance_rule():
    _, _, pvalues = _sampled(rule=resample_from_p)
    assert min(pvalues[1:]) < 1e-6, f"no power: the wrong rule passes ({pvalues})"


# -- refusals --------------------------------------------------------------------------------------------------

def test_the_settings_are_checked_before_loading():
    with pytest.raises(ConfigError, match=r"strategy.cross_tokenizer='maybe' .*allowed: auto, off, uad, tli"):
        DraftModelProposer.validate({"name": "draft_model", "k": 3, "cross_tokenizer": "maybe"})
    with pytest.raises(ConfigError, match=r"strategy.lookbehind=0 .*allowed: an integer >= 1"):
        DraftModelProposer.validate({"name": "draft_model", "k": 3, "lookbehind": 0})
    with pytest.raises(ConfigError, match=r"strategy.tree='topk' with cross-tokenizer drafting .*allowed: tree=chain"):
        DraftModelProposer.validate({"name": "draft_model", "k": 3, "cross_tokenizer": "tli", "tree": "topk", "top_k": 2})
    with pytest.raises(ConfigError, match=r"one_extra_forward_pass=true with cross-tokenizer drafting"):
        DraftModelProposer.validate({"name": "draft_model", "k": 3, "cross_tokenizer": "uad", "one_extra_forward_pass": True,
                                     "drop_first_drafted_tokens": True})


def test_uad_is_refused_at_t_above_zero():
    target, draft = pair()
    with pytest.raises(ConfigError, match=r"cross_tokenizer=uad with sampling.temperature > 0.*allowed at T>0: cross_tokenizer=tli"):
        DraftModelProposer(_context(target, draft, SAMPLING), k=3, cross_tokenizer="uad")
    spec = ModelSpec(name="x", source="preset")
    with pytest.raises(ConfigError, match=r"cross_tokenizer=uad with sampling.temperature > 0"):
        DraftModelProposer.validate_draft({"cross_tokenizer": "uad"}, spec, spec, greedy=False)
    DraftModelProposer.validate_draft({"cross_tokenizer": "uad"}, spec, spec, greedy=True)


def test_off_refuses_a_draft_of_another_tokenizer_and_auto_refuses_trees_across_tokenizers():
    target, draft = pair()
    with pytest.raises(ConfigError, match=r"tokenizers disagree on id 0.*cross_tokenizer=off"):
        DraftModelProposer(_context(draft, target), k=3, cross_tokenizer="off")  # the smaller vocabulary drafts
    with pytest.raises(ConfigError, match=r"vocabulary of 108 entries, larger than target 'tiny-char'"):
        DraftModelProposer(_context(target, draft), k=3, cross_tokenizer="off")
    with pytest.raises(ConfigError, match=r"strategy.tree='topk' with cross-tokenizer drafting"):
        DraftModelProposer(_context(target, draft), k=3, tree="topk", top_k=2)


def test_a_draft_of_the_same_tokenizer_stays_plain_draft_model():
    target, _ = pair()
    proposer = DraftModelProposer(_context(target, target), k=3)
    assert type(proposer) is DraftModelProposer and proposer.owns_kv_cache and proposer.drafting == "chain"


def _plan(*overrides: str):
    from hydra import compose, initialize_config_dir

    from specbench.run import CONF_DIR, plan

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return plan(compose(config_name="config", overrides=["strategy=draft_model", "dataset=builtin", "logger=none",
                                                             *overrides]))


def test_the_packaged_pair_plans_both_ways_and_refusals_come_before_loading():
    """Presets only (nothing is loaded): a larger draft vocabulary of another family waits for the tokenizers."""
    p = _plan("target=smollm2-135m", "draft=gemma3-270m")
    assert (p.target.label, p.draft.label, p.draft.vocab_size) == ("smollm2-135m", "gemma3-270m", 262144)
    assert _plan("target=gemma3-270m").draft.label == "smollm2-135m"  # draft=auto: the preset's pair
    with pytest.raises(ConfigError, match=r"vocabulary of 262144 entries, larger than target 'smollm2-135m'"):
        _plan("target=smollm2-135m", "draft=gemma3-270m", "strategy.cross_tokenizer=off")
    with pytest.raises(ConfigError, match=r"cross_tokenizer=uad with sampling.temperature > 0"):
        _plan("target=gemma3-270m", "strategy.cross_tokenizer=uad", "sampling.temperature=1")
    with pytest.raises(ConfigError, match=r"vocabulary of 49152 entries, larger than target 'tiny-llama'"):
        _plan("target=tiny-llama", "draft=smollm2-135m-random")  # random weights: one byte tokenizer, refused as before
