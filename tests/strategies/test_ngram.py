"""ngram (prompt lookup): exact drafts (chains and trees of branches) for scripted sequences, and lossless
decoding in the engine."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from specbench_testing import hf_greedy, ragged_prompts, tiny
from specbench.engine import Engine
from specbench.errors import ConfigError
from specbench.models.runner import make_runner
from specbench.strategies.base import BuildContext, DecodeState
from specbench.strategies.ngram import NgramProposer, branch_tree, lookup_branches, lookup_drafts
from specbench.verify import SamplingParams, Verifier

CPU = torch.device("cpu")


def drafts(seq: list[int], k: int = 3, min_n: int = 1, max_n: int = 3) -> list[int]:
    return lookup_drafts(np.array([seq]), np.array([len(seq)]), k, min_n, max_n)[0].tolist()


def reference(seq: list[int], k: int, min_n: int, max_n: int) -> list[int]:
    """The definition, literally: n from max_n down, occurrences from the most recent back."""
    length = len(seq)
    for n in range(max_n, min_n - 1, -1):
        if n >= length:
            continue
        suffix = seq[length - n :]
        for i in range(length - n - 1, -1, -1):
            if seq[i : i + n] == suffix:
                period = length - n - i
                return [seq[i + n + j % period] for j in range(k)]
    return [seq[-1]] * k


# --- matching ----------------------------------------------------------------------------------


def test_longest_match_wins_over_a_more_recent_shorter_one():
    seq = [7, 8, 9, 1, 5, 5, 9, 2, 7, 8, 9]  # trigram 7 8 9 at 0..2; the unigram 9 again at 6
    assert drafts(seq, max_n=3) == [1, 5, 5]
    assert drafts(seq, max_n=2) == [1, 5, 5]  # bigram 8 9 only at 1..2
    assert drafts(seq, max_n=1) == [2, 7, 8]  # unigram only: the most recent 9 (position 6)


def test_most_recent_occurrence_wins():
    assert drafts([3, 4, 10, 3, 4, 11, 3, 4]) == [11, 3, 4]


def test_no_match_repeats_the_last_token():
    assert drafts([1, 2, 3]) == [3, 3, 3]
    assert drafts([6]) == [6, 6, 6]  # a single committed token
    assert drafts([1, 2, 3, 9, 3], min_n=2) == [3, 3, 3]  # only a unigram matches; min_n=2 refuses it
    assert drafts([1, 2, 3, 9, 3], min_n=1) == [9, 3, 9]


def test_short_continuation_continues_the_period():
    # the bigram 1 2 last occurred two tokens ago: the continuation 1 2 is cut by the end; pad by period 2
    assert drafts([5, 1, 2, 1, 2], k=5) == [1, 2, 1, 2, 1]
    assert drafts([4, 4], k=4) == [4, 4, 4, 4]
    assert drafts([1, 2, 3, 1, 2, 3], k=5) == [1, 2, 3, 1, 2]  # trigram at 0..2, period 3


def test_ragged_batch_ignores_tokens_past_each_rows_length():
    rows = [[7, 8, 9, 1, 5, 5, 9, 2, 7, 8, 9], [3, 4, 10, 3, 4, 11, 3, 4], [1, 2, 3]]
    width = 14
    batch = np.zeros((3, width), dtype=np.int64)
    for b, seq in enumerate(rows):
        batch[b, : len(seq)] = seq
        batch[b, len(seq) :] = seq[-1]  # garbage that would match if it were read
    got = lookup_drafts(batch, np.array([len(r) for r in rows]), 4, 1, 3)
    assert got.shape == (3, 4)
    assert got.tolist() == [drafts(r, k=4) for r in rows] == [[1, 5, 5, 9], [11, 3, 4, 11], [3, 3, 3, 3]]


@pytest.mark.parametrize("min_n,max_n,k", [(1, 3, 3), (2, 4, 5), (1, 1, 2), (3, 3, 1)])
def test_matches_the_literal_definition_on_random_ragged_batches(min_n, max_n, k):
    rng = random.Random(min_n * 100 + max_n * 10 + k)
    for _ in range(40):
        seqs = [[rng.randrange(4) for _ in range(rng.randrange(1, 30))] for _ in range(5)]  # vocab 4: many matches
        batch = np.full((5, 31), 3, dtype=np.int64)
        for b, s in enumerate(seqs):
            batch[b, : len(s)] = s
        got = lookup_drafts(batch, np.array([len(s) for s in seqs]), k, min_n, max_n)
        assert got.tolist() == [reference(s, k, min_n, max_n) for s in seqs]


# --- branches (tree=topk) ----------------------------------------------------------------------


def tree(seq: list[int], k: int, m: int, min_n: int = 1, max_n: int = 3) -> tuple[list[int], list[int]]:
    tokens, parents = branch_tree(lookup_branches(np.array([seq]), np.array([len(seq)]), k, m, min_n, max_n))
    return tokens[0].tolist(), parents[0].tolist()


def reference_branches(seq: list[int], k: int, m: int, min_n: int, max_n: int) -> list[list[int]]:
    """The definition, literally: every earlier occurrence e with its match length, longest then most recent."""
    length = len(seq)
    cands = []
    for e in range(length - 1):
        n = 0
        while n < min(max_n, e + 1) and seq[e - n] == seq[length - 1 - n]:
            n += 1
        if n >= min_n:
            cands.append((n, e))
    ends = [e for _, e in sorted(cands, reverse=True)][:m] or [length - 2]
    ends += [ends[0]] * (m - len(ends))
    return [[seq[e + 1 + j % (length - 1 - e)] for j in range(k)] for e in ends]


def reference_trie(branches: list[list[int]]) -> tuple[list[int], list[int]]:
    """Prefixes numbered as first met, branch by branch; padding: node 0's token under the pending token."""
    index: dict[tuple[int, ...], int] = {}
    tokens, parents = [], []
    for branch in branches:
        for d in range(len(branch)):
            prefix = tuple(branch[: d + 1])
            if prefix not in index:
                index[prefix] = len(tokens)
                tokens.append(branch[d])
                parents.append(index[prefix[:-1]] if d else -1)
    n = sum(len(b) for b in branches)
    return tokens + [tokens[0]] * (n - len(tokens)), parents + [-1] * (n - len(parents))


def test_three_earlier_continuations_are_three_branches_longest_then_most_recent():
    # the suffix 12 9: the bigram at 0..1 (then 1 2 3); the unigram 9 also at 5 (5 6 7) and 9 (8 10 11)
    seq = [12, 9, 1, 2, 3, 9, 5, 6, 7, 9, 8, 10, 11, 12, 9]
    assert tree(seq, k=3, m=3) == ([1, 2, 3, 8, 10, 11, 5, 6, 7], [-1, 0, 1, -1, 3, 4, -1, 6, 7])
    assert tree(seq, k=3, m=2) == ([1, 2, 3, 8, 10, 11], [-1, 0, 1, -1, 3, 4])
    assert tree(seq, k=3, m=1) == ([1, 2, 3], [-1, 0, 1])  # one branch: the chain
    assert tree(seq, k=3, m=1)[0] == drafts(seq, k=3)


def test_shared_prefixes_are_one_node_and_the_freed_slots_are_padding():
    # 9 1 is followed by 2 3, 2 4 and 5 6: the two branches starting 2 share their first node
    seq = [9, 1, 2, 3, 9, 1, 2, 4, 9, 1, 5, 6, 9, 1]
    tokens, parents = tree(seq, k=3, m=3)
    assert tokens == [5, 6, 9, 2, 4, 9, 3, 9, 5]  # the period of e = 9 is 4: 5 6 then 9
    assert parents == [-1, 0, 1, -1, 3, 4, 3, 6, -1]  # 3 hangs under the shared 2; one padding node: node 0 again
    # fewer occurrences than branches: the missing ones repeat the best and merge away
    assert tree([7, 3, 8, 5, 3], k=2, m=3) == ([8, 5, 8, 8, 8, 8], [-1, 0, -1, -1, -1, -1])
    assert tree([6], k=3, m=2) == ([6, 6, 6, 6, 6, 6], [-1, 0, 1, -1, -1, -1])  # no match: the last token repeated


@pytest.mark.parametrize("min_n,max_n,k,m", [(1, 3, 3, 3), (2, 4, 5, 2), (1, 1, 2, 5), (1, 2, 1, 3)])
def test_branches_and_trie_match_the_literal_definition_on_random_ragged_batches(min_n, max_n, k, m):
    rng = random.Random(min_n * 1000 + max_n * 100 + k * 10 + m)
    for _ in range(30):
        seqs = [[rng.randrange(5) for _ in range(rng.randrange(1, 24))] for _ in range(5)]  # vocab 5: many matches
        batch = np.full((5, 27), 4, dtype=np.int64)
        for b, s in enumerate(seqs):
            batch[b, : len(s)] = s
        lengths = np.array([len(s) for s in seqs])
        branches = lookup_branches(batch, lengths, k, m, min_n, max_n)
        assert branches.shape == (5, m, k)
        assert branches.tolist() == [reference_branches(s, k, m, min_n, max_n) for s in seqs]
        assert branches[:, 0].tolist() == lookup_drafts(batch, lengths, k, min_n, max_n).tolist()
        tokens, parents = branch_tree(branches)
        assert tokens.shape == parents.shape == (5, k * m)  # N fixed whatever the row
        for b in range(5):
            want = reference_trie(branches[b].tolist())
            assert (tokens[b].tolist(), parents[b].tolist()) == want
            assert all(p < i for i, p in enumerate(parents[b].tolist()))  # topological
            real = len({tuple(x) for br in branches[b].tolist() for x in (br[: d + 1] for d in range(k))})
            siblings = [(p, t) for p, t in zip(parents[b, :real].tolist(), tokens[b, :real].tolist())]
            assert len(set(siblings)) == real  # no two siblings carry one token (padding aside)


# --- settings ----------------------------------------------------------------------------------


@pytest.mark.parametrize("cfg,words", [
    ({"min_n": 0}, ["min_n=0", ">= 1"]),
    ({"min_n": 3, "max_n": 2}, ["max_n=2", "min_n=3", ">= min_n"]),
    ({"max_n": "3"}, ["max_n='3'"]),
    ({"k": 0}, ["k=0", ">= 1"]),
])
def test_validate_names_the_value_and_what_is_allowed(cfg, words):
    with pytest.raises(ConfigError) as e:
        NgramProposer.validate({"name": "ngram", "k": 3, **cfg})
    assert all(w in str(e.value) for w in words), str(e.value)


def test_yaml_defaults_and_unknown_settings(tmp_path):
    from omegaconf import OmegaConf

    from specbench.run import CONF_DIR

    cfg = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "strategy" / "ngram.yaml"))
    assert cfg == {"_target_": "specbench.strategies.ngram.NgramProposer", "name": "ngram", "k": 3, "min_n": 1, "max_n": 3,
                   "tree": "chain", "top_k": 1, "k_schedule": "fixed", "confidence_threshold": 0.4, "k_by_batch_size": None}
    NgramProposer.validate(cfg)
    t = tiny("tiny-llama")
    ctx = BuildContext(target=t, target_runner=None, draft=None, sampling=SamplingParams(), device=CPU)
    with pytest.raises(ConfigError, match="unknown settings"):
        NgramProposer(ctx, k=3, n=2)


# --- in the engine -----------------------------------------------------------------------------

NEW_TOKENS = 20


def _prompts() -> list[list[int]]:
    prompts = ragged_prompts(101)
    prompts[2] = [11, 12, 13, 11, 12, 13, 11]  # repetitive: lookups that hit from the first step
    return prompts


@pytest.fixture(scope="module", params=["tiny-llama", "tiny-qwen3"])
def greedy_case(request):
    """A tiny random target, prompts of different lengths and transformers' own greedy outputs."""
    t = tiny(request.param)
    prompts = _prompts()
    return t, prompts, hf_greedy(t.model, prompts, NEW_TOKENS)


@pytest.mark.parametrize("batch_size", [1, 4])
@pytest.mark.parametrize("k, settings", [(2, {}), (5, {}), (2, {"tree": "topk", "top_k": 3}),
                                         (5, {"tree": "topk", "top_k": 2})], ids=["k2", "k5", "k2-tree3", "k5-tree2"])
def test_greedy_output_equals_transformers_generate(greedy_case, batch_size, k, settings):
    t, prompts, want = greedy_case
    sp = SamplingParams()
    ctx = BuildContext(target=t, target_runner=make_runner(t.model), draft=None, sampling=sp, device=CPU)
    proposer = NgramProposer(ctx, k=k, **settings)
    engine = Engine(ctx.target_runner, proposer, Verifier(sp, CPU), max_new_tokens=NEW_TOKENS, eos_ids=set(), device=CPU)
    rows = []
    for s in range(0, len(prompts), batch_size):
        batch = prompts[s : s + batch_size]
        got, _ = engine.generate(batch)
        # the host copy the lookups read is exactly the committed tokens
        for b, (p, r) in enumerate(zip(batch, got)):
            assert proposer.host_lengths[b] == len(p) + len(r.output_ids)
            assert proposer.host[b, : proposer.host_lengths[b]].tolist() == p + r.output_ids
        rows += got
    assert [r.output_ids for r in rows] == want
    assert sum(r.accepted_tokens for r in rows) > 0  # greedy tiny models loop; the lookups catch it
    assert all(r.draft_tokens == k * settings.get("top_k", 1) * r.drafts for r in rows)  # N = K * top_k every step


class _BigramTarget:
    """A scripted target whose logits after a token depend on that token only (table [V, V]), so its decoding is
    known exactly and a tree verify needs no cache (move_kv does nothing)."""

    device, max_len = CPU, 0

    def __init__(self, table: torch.Tensor) -> None:
        self.table = table  # [V, V] logits of the next token after each token
        self.vocab_size = table.shape[0]

    def allocate(self, batch_size: int, max_len: int) -> None:
        self.max_len = max_len

    def __call__(self, tokens, positions, attn_len=None, logits_at=None, slots=None, tree_mask=None, **_):
        logits = self.table[tokens]  # [B, T, V]
        if logits_at is not None:
            logits = logits.gather(1, logits_at[..., None].expand(-1, -1, self.vocab_size))
        return type("Out", (), {"logits": logits, "hidden": None, "layer_hidden": []})()

    def move_kv(self, src, dst) -> None:
        pass


def _nxt(x: int) -> int:
    return (5 * x + 2) % 23  # the scripted greedy target: table row x is one-hot at _nxt(x)


def test_a_tree_accepts_at_least_what_its_chain_accepts_on_a_repetitive_prompt():
    """After the first token y the suffix 13 4 y occurred twice: most recently followed by 9 9 9, earlier by the
    target's own continuation. The chain drafts the recent one; the tree holds both. On every step the tree
    accepts at least what its chain (branch 0, nodes 0..K-1, verified greedily on the same logits) accepts, and
    a whole branch on the first."""
    from specbench.verify import greedy_verify

    k, x = 3, 4
    y = _nxt(x)  # the prefill's token
    prompt = [13, x, y, _nxt(y), _nxt(_nxt(y)), _nxt(_nxt(_nxt(y))), 17, 13, x, y, 9, 9, 9, 1, 13, x]
    want = [y]
    while len(want) < 16:
        want.append(_nxt(want[-1]))
    sp = SamplingParams()
    target = _BigramTarget(torch.nn.functional.one_hot(torch.tensor([_nxt(i) for i in range(23)]), 23).float())
    ctx = BuildContext(target=None, target_runner=target, draft=None, sampling=sp, device=CPU)
    runs, steps = {}, []
    for settings in ({}, {"tree": "topk", "top_k": 2}):
        verifier = Verifier(sp, CPU)
        if settings:
            tree_verify = verifier.tree

            def spy(tokens, parents, probs, logits, layout=None):
                verdict = tree_verify(tokens, parents, probs, logits, layout)
                assert parents[0, :k].tolist() == [-1, 0, 1]  # branch 0 (the chain) leads
                steps.append((int(verdict.accepted[0]), int(greedy_verify(tokens[:, :k], logits[:, : k + 1]).accepted[0])))
                return verdict

            verifier.tree = spy
        engine = Engine(ctx.target_runner, NgramProposer(ctx, k=k, **settings), verifier, max_new_tokens=16,
                        eos_ids=set(), device=CPU)
        runs[bool(settings)] = engine.generate([prompt])[0][0]
    tree, chain = runs[True], runs[False]
    assert tree.output_ids == chain.output_ids == want
    assert steps[0] == (k, 0)  # the chain drafts 9 9 9; the tree's second branch is the target's continuation
    assert all(t >= c for t, c in steps)
    assert tree.accepted_tokens / tree.drafts > chain.accepted_tokens / chain.drafts
    assert tree.draft_tokens == 2 * k * tree.drafts


def test_branches_keep_the_targets_distribution_at_t_above_0():
    """T > 0 over trees that really branch: a soft bigram target over 7 tokens and a prompt where every token
    recurs with several continuations, so most trees branch 2 or 3 ways (and hold padding). The first 3
    generated tokens of 6000 rows follow the target's exact marginals; the wrong tree rule (resampling from p
    after a rejected sibling) fails the same test, so it has the power to see the sibling rule."""
    from specbench_testing import chisquare_pvalue, tree_resample_from_p
    from specbench.verify import logits_to_probs

    v, rows, tokens = 7, 6000, 3
    table = torch.randn(v, v, generator=torch.Generator().manual_seed(3)) * 1.5
    prompt = torch.randint(0, v, (31,), generator=torch.Generator().manual_seed(4)).tolist()
    sp = SamplingParams(temperature=0.8, top_k=5, seed=2)
    step = logits_to_probs(table, sp).double()  # [V, V] p(next | token)
    marginals = [step[prompt[-1]]]
    for _ in range(tokens - 1):
        marginals.append(marginals[-1] @ step)

    def sample(tree_rule=None):
        ctx = BuildContext(target=None, target_runner=_BigramTarget(table), draft=None, sampling=sp, device=CPU)
        proposer = NgramProposer(ctx, k=2, tree="topk", top_k=3)
        lookup, branched = proposer.lookup, []

        def spy(state):
            d = lookup(state)
            branched.append(np.mean([len(set(t[p == -1].tolist())) for t, p in zip(d.tokens, d.parents)]))
            return d

        proposer.lookup = spy
        engine = Engine(ctx.target_runner, proposer, Verifier(sp, CPU, tree_rule=tree_rule), max_new_tokens=tokens,
                        eos_ids=set(), device=CPU)
        out = np.array([r.output_ids for r in engine.generate([prompt] * rows)[0]])
        return [chisquare_pvalue(np.bincount(out[:, i], minlength=v), m.numpy()) for i, m in enumerate(marginals)], branched

    pvalues, branched = sample()
    assert min(pvalues) > 1e-4, pvalues
    assert branched[0] > 2, branched  # distinct tokens under the pending token per row at the first step (2.5)
    wrong, _ = sample(tree_resample_from_p)
    assert min(wrong[1:]) < 1e-6, f"no power: the wrong tree rule passes ({wrong})"


def test_sampling_runs_with_one_hot_drafts():
    t = tiny("tiny-llama")
    sp = SamplingParams(temperature=1.0, top_k=10, seed=1)
    ctx = BuildContext(target=t, target_runner=make_runner(t.model), draft=None, sampling=sp, device=CPU)
    proposer = NgramProposer(ctx, k=3)
    engine = Engine(ctx.target_runner, proposer, Verifier(sp, CPU), max_new_tokens=12, eos_ids=set(), device=CPU)
    rows, _ = engine.generate(_prompts()[:3])
    assert [len(r.output_ids) for r in rows] == [12, 12, 12]
    # drafts carry no q: the verifier treats them as one-hot
    state = DecodeState(tokens=torch.tensor([[1, 2, 1, 0]]), lengths=torch.tensor([3]), lengths_host=[3],
                        prompt_lengths=[2], active=torch.tensor([True]), max_len=4)
    proposer.start(state, None)
    draft = proposer.propose(state)
    assert draft.probs is None and draft.tokens.tolist() == [[2, 1, 2]] and draft.tokens.dtype == torch.long
