"""ngram (prompt lookup): exact drafts for scripted sequences, and lossless decoding in the engine."""

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
from specbench.strategies.ngram import NgramProposer, lookup_drafts
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
    assert cfg == {"_target_": "specbench.strategies.ngram.NgramProposer", "name": "ngram", "k": 3, "min_n": 1, "max_n": 3}
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
@pytest.mark.parametrize("k", [2, 5])
def test_greedy_output_equals_transformers_generate(greedy_case, batch_size, k):
    t, prompts, want = greedy_case
    sp = SamplingParams()
    ctx = BuildContext(target=t, target_runner=make_runner(t.model), draft=None, sampling=sp, device=CPU)
    proposer = NgramProposer(ctx, k=k)
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
