"""suffix (SuffixDecoding): the suffix trie's counts against brute-force substring counts, matching, the
best-first speculation tree against its definition, FIFO eviction, the warm-up clear, settings, and lossless
decoding in the engine (chain and tree) with long accepted runs on repeated text."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import torch

from specbench_testing import hf_greedy, ragged_prompts, tiny, tree_depth
from specbench.engine import Engine
from specbench.errors import ConfigError
from specbench.models.runner import make_runner
from specbench.strategies.base import BuildContext, Draft
from specbench.strategies.suffix import (ROOT, SuffixProposer, SuffixTrie, longest_match, pad_chain, pad_tree,
                                         speculate)
from specbench.verify import SamplingParams, Verifier

CPU = torch.device("cpu")


def substrings(seqs: list[list[int]], depth: int) -> Counter:
    """The definition: every substring of at most `depth` tokens, counted over all sequences."""
    out: Counter = Counter()
    for s in seqs:
        for i in range(len(s)):
            for j in range(i + 1, min(i + depth, len(s)) + 1):
                out[tuple(s[i:j])] += 1
    return out


def contents(trie: SuffixTrie) -> Counter:
    """Every string the trie holds with its count (nodes reachable from the root), checking `total` on the way."""
    out: Counter = Counter()
    stack = [(ROOT, ())]
    while stack:
        node, string = stack.pop()
        assert trie.total[node] == sum(trie.count[c] for c in trie.kids[node].values())
        for token, child in trie.kids[node].items():
            assert trie.token[child] == token and trie.count[child] > 0
            out[string + (token,)] = trie.count[child]
            stack.append((child, string + (token,)))
    return out


def random_seqs(rng: random.Random, n: int, vocab: int = 4, longest: int = 30) -> list[list[int]]:
    return [[rng.randrange(vocab) for _ in range(rng.randrange(1, longest))] for _ in range(n)]


# --- the trie --------------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [2, 3, 7])
def test_counts_are_the_substring_counts_incremental_or_at_once(depth):
    rng = random.Random(depth)
    for _ in range(20):
        seqs = random_seqs(rng, 3)
        at_once = SuffixTrie(depth)
        for s in seqs:
            at_once.insert(s)
        assert contents(at_once) == substrings(seqs, depth)
        one, active = SuffixTrie(depth), []  # token by token, as commit() extends a request's trie
        for i, token in enumerate(seqs[0]):
            active = one.extend(active, token)
            assert contents(one) == substrings([seqs[0][: i + 1]], depth)
            assert active == [one.walk(seqs[0][i + 1 - n : i + 1]) for n in range(1, min(i + 1, depth - 1) + 1)]


def test_remove_takes_back_an_insert_and_reuses_the_freed_nodes():
    rng = random.Random(5)
    for _ in range(20):
        a, b, c = random_seqs(rng, 3, vocab=5)
        trie = SuffixTrie(4)
        trie.insert(a)
        trie.insert(b)
        trie.remove(a)
        assert contents(trie) == substrings([b], 4)
        assert len(trie) == len(substrings([b], 4)) + 1  # freed nodes are out of use
        size = len(trie.kids)
        trie.insert(c)
        assert contents(trie) == substrings([b, c], 4)
        assert len(trie.kids) <= max(size, len(trie))  # freed slots are taken first
        trie.remove(b)
        trie.remove(c)
        assert contents(trie) == Counter() and trie.total[ROOT] == 0


def test_suffix_nodes_and_advance_follow_the_longest_occurring_suffix():
    trie = SuffixTrie(5)
    trie.insert([1, 2, 3, 4, 9])
    assert trie.suffix_nodes([7, 2, 3], 4) == [trie.walk([3]), trie.walk([2, 3])]  # 7 2 3 never occurred
    assert trie.suffix_nodes([1, 2, 3], 2) == [trie.walk([3]), trie.walk([2, 3])]  # capped at 2 tokens
    assert trie.suffix_nodes([8], 4) == []
    rng = random.Random(3)
    for _ in range(30):
        seq, more = random_seqs(rng, 2, vocab=3)
        nodes = trie.suffix_nodes(seq, 3)
        for token in more:
            seq = seq + [token]
            nodes = trie.advance(nodes, token, 3)
            assert nodes == trie.suffix_nodes(seq, 3)


def test_longest_match_skips_suffixes_without_a_continuation():
    trie, active = SuffixTrie(6), []
    for token in [5, 6, 7, 1, 6, 7]:  # 6 7 occurred before (then 1); 1 6 7 and 7 1 6 7 only now
        active = trie.extend(active, token)
    assert longest_match(trie, active, 5) == (trie.walk([6, 7]), 2)
    assert longest_match(trie, active, 1) == (trie.walk([7]), 1)
    fresh, active = SuffixTrie(6), []
    for token in [1, 2, 3]:
        active = fresh.extend(active, token)
    assert longest_match(fresh, active, 5) == (-1, 0)


# --- the speculation tree ----------------------------------------------------------------------------


def test_speculate_weighs_continuations_by_frequency():
    trie = SuffixTrie(5)
    trie.insert([9, 1, 2, 9, 1, 2, 9, 1, 3, 9, 1])  # after 9 1: 2 twice, 3 once (the last 9 1 has no continuation)
    node = trie.walk([9, 1])
    tokens, parents, probs = speculate(trie, node, 8, 3, 0.0, 4)
    assert tokens[:4] == [2, 9, 1, 3] and parents[:4] == [-1, 0, 1, -1]  # 2 9 1 always follows 9 1 2
    assert probs[:4] == pytest.approx([2 / 3, 2 / 3, 2 / 3, 1 / 3])
    assert speculate(trie, node, 8, 3, 0.5, 4)[0] == [2, 9, 1]  # 3 (1/3) is under the threshold; 9 1 after 2 9
    assert speculate(trie, node, 2, 3, 0.0, 4)[0] == [2, 9]  # max_nodes
    assert speculate(trie, node, 8, 1, 0.0, 4)[0] == [2, 3]  # depth 1
    assert speculate(trie, node, 8, 2, 0.0, 1) == ([2, 9], [-1, 0], pytest.approx([2 / 3, 2 / 3]))  # width 1: a chain


def reference_tree(trie: SuffixTrie, node: int, max_nodes: int, depth: int, min_prob: float, width: int):
    """The definition without a heap: every node within `depth` (each one's `width` most frequent children,
    stable on ties), its path probability; the max_nodes likeliest >= min_prob (earlier in breadth-first order
    first on ties: a best-first growth adds them in that order too)."""
    found, frontier = [], [(node, 1.0, ())]
    for _ in range(depth):
        nxt = []
        for at, prob, path in frontier:
            kids = sorted(trie.kids[at].values(), key=lambda c: -trie.count[c])[:width]
            for child in kids:
                p = prob * trie.count[child] / trie.total[at]
                found.append((path + (trie.token[child],), p))
                nxt.append((child, p, path + (trie.token[child],)))
        frontier = nxt
    return {path: p for path, p in sorted(found, key=lambda x: -x[1])[:max_nodes] if p >= min_prob}


@pytest.mark.parametrize("max_nodes,depth,min_prob,width", [(6, 3, 0.0, 3), (9, 4, 0.1, 2), (4, 2, 0.3, 5)])
def test_speculate_is_the_likeliest_connected_subtree(max_nodes, depth, min_prob, width):
    rng = random.Random(max_nodes * 10 + depth)
    for _ in range(30):
        trie = SuffixTrie(8)
        for s in random_seqs(rng, 3, vocab=4, longest=40):
            trie.insert(s)
        node = trie.walk([rng.randrange(4)]) or ROOT
        tokens, parents, probs = speculate(trie, node, max_nodes, depth, min_prob, width)
        assert len(tokens) <= max_nodes and all(p >= min_prob for p in probs)
        assert all(p < i for i, p in enumerate(parents))  # topological
        assert max((tree_depth(parents, i) for i in range(len(parents))), default=0) <= depth
        paths = {}
        for i, token in enumerate(tokens):
            paths[i] = (paths[parents[i]] if parents[i] >= 0 else ()) + (token,)
        got = {paths[i]: probs[i] for i in range(len(tokens))}
        want = reference_tree(trie, node, max_nodes, depth, min_prob, width)
        # equal probabilities may pick different nodes: compare the multiset of probabilities, and every node's own
        assert sorted(got.values()) == pytest.approx(sorted(want.values()))
        for path, p in got.items():
            assert p == pytest.approx(_path_prob(trie, node, path))


def _path_prob(trie: SuffixTrie, node: int, path: tuple[int, ...]) -> float:
    p = 1.0
    for token in path:
        child = trie.kids[node][token]
        p *= trie.count[child] / trie.total[node]
        node = child
    return p


def test_padding_repeats_node_0_under_the_pending_token():
    assert pad_tree([4, 5, 6], [-1, 0, -1], 5, 9) == ([4, 5, 6, 4, 4], [-1, 0, -1, -1, -1])
    assert pad_tree([], [], 3, 9) == ([9, 9, 9], [-1, -1, -1])  # no match: the last committed token
    assert pad_chain([4, 5], 4, 9) == [4, 5, 5, 5]
    assert pad_chain([], 2, 9) == [9, 9]


# --- the proposer: global cache, eviction, warm-up clear -------------------------------------------


@pytest.fixture(scope="module")
def target():
    return tiny("tiny-llama")


def _build(target, sp: SamplingParams = SamplingParams(), k: int = 3, **settings) -> tuple[SuffixProposer, Engine]:
    ctx = BuildContext(target=target, target_runner=make_runner(target.model), draft=None, sampling=sp, device=CPU)
    proposer = SuffixProposer(ctx, k=k, **settings)
    return proposer, Engine(ctx.target_runner, proposer, Verifier(sp, CPU), max_new_tokens=NEW_TOKENS, eos_ids=set(),
                            device=CPU)


NEW_TOKENS = 16


def test_finished_outputs_enter_the_global_trie_first_in_first_out(target):
    proposer, engine = _build(target, max_cached_requests=2)
    prompts = ragged_prompts(101, (5, 9, 3))
    outputs = []
    for p in prompts:  # three requests, one batch each
        rows, _ = engine.generate([p])
        outputs.append(rows[0].output_ids)
    assert list(proposer.cached) == outputs[1:]  # the first was evicted
    assert contents(proposer.global_trie) == substrings(outputs[1:], proposer.max_depth)
    rows, _ = engine.generate(prompts[:2])  # a batch of two: both enter as they finish, the two oldest leave
    assert sorted(proposer.cached) == sorted(r.output_ids for r in rows)
    assert contents(proposer.global_trie) == substrings([r.output_ids for r in rows], proposer.max_depth)
    off, engine = _build(target, max_cached_requests=0)
    engine.generate(prompts[:2])
    assert len(off.global_trie) == 1 and not off.cached


def test_reseed_clears_the_global_trie_so_the_warm_up_never_feeds_the_timed_run(target):
    proposer, engine = _build(target)
    engine.generate(ragged_prompts(101, (5, 9)))
    assert len(proposer.cached) == 2 and len(proposer.global_trie) > 1
    proposer.reseed()  # what run() calls after the untimed warm-up
    assert len(proposer.cached) == 0 and len(proposer.global_trie) == 1 and proposer.global_trie.total[ROOT] == 0


# --- in the engine ---------------------------------------------------------------------------------


def _prompts() -> list[list[int]]:
    prompts = ragged_prompts(101)[:5]
    prompts[2] = [11, 12, 13, 11, 12, 13, 11]  # repetitive: local matches from the first step
    return prompts


@pytest.fixture(scope="module")
def greedy_case(target):
    prompts = _prompts()
    return prompts, hf_greedy(target.model, prompts, NEW_TOKENS)


def _al(rows) -> float:
    return 1 + sum(r.accepted_tokens for r in rows) / sum(r.drafts for r in rows)


@pytest.mark.parametrize("batch_size", [1, 3])
@pytest.mark.parametrize("k, settings", [(2, {}), (5, {"min_token_prob": 0.0, "max_spec_factor": 3.0}),
                                         (3, {"tree": "dynamic", "num_nodes": 7, "top_k": 2}),
                                         (4, {"tree": "dynamic", "num_nodes": 5, "top_k": 3, "max_match": 3,
                                              "max_spec_factor": 2.0})],
                         ids=["k2", "k5-wide", "k3-tree7", "k4-tree5"])
def test_greedy_output_equals_transformers_generate_and_repeats_accept_long_runs(target, greedy_case, batch_size, k,
                                                                                 settings):
    prompts, want = greedy_case
    proposer, engine = _build(target, k=k, **settings)
    seen = []
    lookup = proposer.lookup

    def spy(state):
        draft = lookup(state)
        seen.append(draft if isinstance(draft, Draft) else Draft(tokens=draft))  # a chain comes as [B, K] tokens
        return draft

    proposer.lookup = spy
    passes = []
    for _ in range(2):  # the second pass repeats the first: the global trie holds every output
        rows = []
        for s in range(0, len(prompts), batch_size):
            batch = prompts[s : s + batch_size]
            got, _ = engine.generate(batch)
            rows += got
            for b, (p, r) in enumerate(zip(batch, got)):  # the request's trie saw exactly the committed tokens
                assert proposer.seqs[b] == p + r.output_ids
                assert contents(proposer.tries[b]) == substrings([p + r.output_ids], proposer.max_depth)
        assert [r.output_ids for r in rows] == want
        passes.append(_al(rows))
    # the second pass drafts the first pass's outputs: long accepted runs (the first steps match a single token,
    # so max_spec_factor * match length caps them)
    assert passes[1] > passes[0] + 1.0 and passes[1] >= 0.6 * (k + 1), passes
    n = settings.get("num_nodes", k)
    for draft in seen:  # every row and step the same N nodes, at most k deep
        assert draft.tokens.shape[1] == n
        if settings.get("tree") == "dynamic":
            assert not draft.chain
            for row in draft.parents.tolist():
                assert all(p < i for i, p in enumerate(row))
                assert max(tree_depth(row, i) for i in range(n)) <= k
        else:
            assert draft.chain


# --- settings ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("cfg,words", [
    ({"max_depth": 1}, ["max_depth=1", ">= 2"]),
    ({"max_match": 24}, ["max_match=24", "max_depth=24", "1 to max_depth - 1 = 23"]),
    ({"max_match": 0}, ["max_match=0"]),
    ({"max_spec_factor": 0}, ["max_spec_factor=0", "> 0"]),
    ({"max_spec_factor": True}, ["max_spec_factor=True"]),
    ({"min_token_prob": 1.5}, ["min_token_prob=1.5", "0 to 1"]),
    ({"max_cached_requests": -1}, ["max_cached_requests=-1", ">= 0"]),
    ({"max_cached_requests": 2.0}, ["max_cached_requests=2.0"]),
    ({"tree": "topk", "top_k": 2}, ["tree='topk'", "chain", "dynamic"]),
    ({"tree": "static"}, ["tree='static'"]),
    ({"tree": "dynamic", "num_nodes": 0}, ["num_nodes=0", "1 to 1024"]),
    ({"tree": "dynamic", "top_k": 0, "num_nodes": 4}, ["top_k=0", ">= 1"]),
    ({"tree_choices": [[0]]}, ["tree_choices"]),
    ({"k": 0}, ["k=0", ">= 1"]),
])
def test_validate_names_the_value_and_what_is_allowed(cfg, words):
    with pytest.raises(ConfigError) as e:
        SuffixProposer.validate({"name": "suffix", "k": 3, **cfg})
    assert all(w in str(e.value) for w in words), str(e.value)


def test_yaml_defaults_validate_and_unknown_settings_are_refused(target):
    from omegaconf import OmegaConf

    from specbench.run import CONF_DIR

    cfg = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "strategy" / "suffix.yaml"))
    assert cfg["_target_"] == "specbench.strategies.suffix.SuffixProposer" and cfg["tree"] == "chain"
    SuffixProposer.validate(cfg)
    SuffixProposer.validate({**cfg, "tree": "dynamic"})
    settings = {key: value for key, value in cfg.items() if key not in ("_target_", "name", "k")}
    proposer, _ = _build(target, k=cfg["k"], **settings)
    assert proposer.nodes_per_step == cfg["k"]
    assert _build(target, k=3, tree="dynamic", num_nodes=11)[0].nodes_per_step == 11
    with pytest.raises(ConfigError, match="unknown settings"):
        _build(target, k=3, min_n=2)
    with pytest.raises(ConfigError, match="max_match=30"):
        _build(target, k=3, max_match=30)
