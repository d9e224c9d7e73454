"""metrics.summarize: what a tree's step is worth (AL per verified token) and what its verify costs (ms per step);
metrics.speed_terms: the speed model's terms read back from those summaries; the 95% intervals over prompts."""

from __future__ import annotations

import math
import statistics

import pytest

from specbench_testing import row_result
from specbench.engine import BatchTiming, RowResult
from specbench.metrics import al_by_position, prompt_metrics, ratio_ci95, speed_terms, speedup, spread, summarize


def test_tree_metrics_per_node_and_per_step():
    # two prompts, 16-node trees: 5 steps accepting 9 path tokens, 2 steps accepting 3
    rows = [row_result(5, 5 * 16, 9, [5, 3, 1]), row_result(2, 2 * 16, 3, [2, 1, 0])]
    timing = BatchTiming(prefill_s=0.1, draft_s=0.2, verify_s=0.35, total_s=0.7, steps=7, draft_forwards=21)
    out = summarize([prompt_metrics(r) for r in rows], [timing])
    assert out["nodes_per_step"] == 16.0
    assert out["acceptance_length"] == pytest.approx(1 + 12 / 7)
    assert out["al_per_verified_token"] == pytest.approx((1 + 12 / 7) / 17)  # 17 tokens per verify forward
    assert out["per_position_acceptance"] == pytest.approx([1.0, 4 / 7, 1 / 7])  # acceptance at depth 1, 2, 3
    assert out["verify_ms_per_step"] == pytest.approx(50.0)
    assert out["draft_forwards_per_step"] == pytest.approx(3.0)


def test_target_only_is_one_token_per_verified_token():
    out = summarize([prompt_metrics(row_result(0, 0, 0, []))], [BatchTiming(total_s=1.0, verify_s=0.5, steps=4)])
    assert out["al_per_verified_token"] == 1.0 and out["verify_ms_per_step"] == pytest.approx(125.0)


def test_mean_k_and_the_accepted_histogram_under_a_varying_k():
    """Adaptive K: row 0 drafted K = 3, 1, 2 (accepting 3, 0, 1), row 1 K = 3, 3 (accepting 2, 3). Counted over
    row-steps like AL: mean K 12/5, histogram [1, 1, 1, 2]; AL and acceptance rate keep their definitions."""
    rows = [RowResult(output_ids=list(range(7)), drafts=3, draft_tokens=6, accepted_tokens=4, accepted_at=[2, 1, 1],
                      k_drafted=6, accepted_histogram=[1, 1, 0, 1], ttft_s=0.01, latency_s=0.5),
            RowResult(output_ids=list(range(8)), drafts=2, draft_tokens=6, accepted_tokens=5, accepted_at=[2, 2, 1],
                      k_drafted=6, accepted_histogram=[0, 0, 1, 1], ttft_s=0.01, latency_s=0.5)]
    per_prompt = [prompt_metrics(r) for r in rows]
    assert [m["mean_k"] for m in per_prompt] == [2.0, 3.0]
    assert per_prompt[0]["accepted_histogram"] == [1, 1, 0, 1]
    out = summarize(per_prompt)
    assert out["mean_k"] == pytest.approx(12 / 5)
    assert out["accepted_histogram"] == [1, 1, 1, 2]
    assert sum(out["accepted_histogram"]) == out["drafts"] == 5
    assert sum(n * c for n, c in enumerate(out["accepted_histogram"])) == out["accepted_tokens"] == 9
    assert out["acceptance_length"] == pytest.approx(1 + 9 / 5) and out["acceptance_rate"] == pytest.approx(9 / 12)


def test_target_only_has_no_k_and_an_empty_histogram():
    out = summarize([prompt_metrics(row_result(0, 0, 0, []))])
    assert out["mean_k"] is None and out["accepted_histogram"] == []


def test_spread_ranks_p90_and_p99_nearest_rank():
    out = spread([float(v) for v in range(100, 0, -1)] + [float("nan"), None])  # 1..100, shuffled by reversal
    assert out == {"mean": 50.5, "median": 50.5, "p90": 90.0, "p99": 99.0, "n": 100}
    assert spread([2.0])["p99"] == 2.0 and spread([])["p99"] is None


def _job(baseline_timing: BatchTiming | None, strategy_rows: list[RowResult], timing: BatchTiming) -> dict:
    """A results.json's baseline / strategy blocks, as run() writes them."""
    baseline = None
    if baseline_timing is not None:
        baseline = summarize([prompt_metrics(row_result(0, 0, 0, []))], [baseline_timing])
    return {"baseline": baseline, "strategy": summarize([prompt_metrics(r) for r in strategy_rows], [timing])}


def test_speed_terms_split_a_step_into_verify_and_drafting_against_the_target_only_step():
    """Target-only decoding: 7 steps of 20 ms. The strategy: 5 steps, 130 ms of verify (26 ms a step, r = 1.3) and
    15 ms of drafting over 3 passes a step (3 ms a step: draft 0.15, c 0.05); AL = 1 + 6 / 5."""
    rows = [row_result(3, 9, 4, [2, 1, 1]), row_result(2, 6, 2, [1, 1, 0])]
    job = _job(BatchTiming(verify_s=0.14, total_s=0.2, steps=7),
               rows, BatchTiming(draft_s=0.015, verify_s=0.13, total_s=0.2, steps=5, draft_forwards=15))
    terms = speed_terms(job)
    assert terms == pytest.approx({"r": 1.3, "draft": 0.15, "draft_passes": 3.0, "c": 0.05,
                                   "predicted": (1 + 6 / 5) / 1.45})


def test_speed_terms_need_a_baseline_and_drafts():
    rows = [row_result(3, 9, 4, [2, 1, 1])]
    timing = BatchTiming(draft_s=0.01, verify_s=0.1, total_s=0.2, steps=3, draft_forwards=0)
    assert speed_terms(_job(None, rows, timing)) is None  # baseline=false
    target_only = _job(BatchTiming(verify_s=0.1, total_s=0.2, steps=5), [row_result(0, 0, 0, [])], timing)
    assert speed_terms(target_only) is None
    lookup = speed_terms(_job(BatchTiming(verify_s=0.1, total_s=0.2, steps=5), rows, timing))  # ngram: no forward
    assert lookup is not None and lookup["c"] is None and lookup["draft_passes"] == 0.0
    older = _job(BatchTiming(verify_s=0.1, total_s=0.2, steps=5), rows, timing)
    del older["strategy"]["time_split"]["draft_s"]  # a results.json without the figure reads as no model
    assert speed_terms(older) is None


def test_the_al_interval_matches_the_normal_approximation_and_repeats():
    """41 prompts of 10 drafts each accepting 0..40 tokens (AL 3.0): a percentile bootstrap of a mean of n i.i.d.
    values spans about +-1.96 sd / sqrt(n); the same counts give the same interval."""
    accepted, drafts = [3 * i % 41 for i in range(41)], [10] * 41
    low, high = ratio_ci95(accepted, drafts, 1.0)
    half = 1.96 * statistics.pstdev(accepted) / 10 / math.sqrt(41)
    assert low < 3.0 < high and (high - low) / 2 == pytest.approx(half, rel=0.1)
    assert abs((3.0 - low) - (high - 3.0)) < 0.2 * half  # about symmetric: a mean of many draws
    assert ratio_ci95(accepted, drafts, 1.0) == [low, high]
    assert ratio_ci95(accepted[:1], drafts[:1], 1.0) is None  # one prompt: no interval
    assert ratio_ci95([7] * 5, [10] * 5, 1.0) == pytest.approx([1.7, 1.7])  # the same prompt five times


def test_the_speedup_interval_resamples_a_prompts_two_tpots_together():
    """TPOTs that differ tenfold between prompts, each prompt exactly twice as fast with the strategy: resampled in
    pairs every resample's ratio is 2.0; resampled apart, the interval would span most of 0.3-10."""
    tpot_b = [10.0 * (1 + 9 * (i % 2)) + i for i in range(20)]
    out = speedup([{"tpot_ms": t} for t in tpot_b], [{"tpot_ms": t / 2} for t in tpot_b])
    assert out["speedup"] == pytest.approx(2.0) and out["ci95"] == pytest.approx([2.0, 2.0])
    noisy = speedup([{"tpot_ms": t} for t in tpot_b], [{"tpot_ms": t / (2 + (-1) ** i * 0.5)} for i, t in enumerate(tpot_b)])
    assert noisy["ci95"][0] < noisy["speedup"] < noisy["ci95"][1] and noisy["ci95"][1] - noisy["ci95"][0] < 1.0


def test_summaries_carry_the_al_interval_and_target_only_has_none():
    rows = [row_result(5, 15, 2 * i, [1, 1, 0]) for i in range(6)]
    out = summarize([prompt_metrics(r) for r in rows])
    low, high = out["acceptance_length_ci95"]
    assert low < out["acceptance_length"] < high
    assert summarize([prompt_metrics(row_result(0, 0, 0, []))] * 3)["acceptance_length_ci95"] is None


def test_the_paired_difference_interval_is_zero_for_equal_jobs_and_needs_two_prompts():
    from specbench.metrics import paired_difference_ci

    acc, drafts = [3, 30, 7, 12, 0], [10, 10, 5, 8, 4]
    assert paired_difference_ci(acc, drafts, acc, drafts) == [0.0, 0.0]
    low, high = paired_difference_ci(acc, drafts, [a + 1 for a in acc], drafts)  # one more token a prompt
    assert 0 < low < 5 / 37 < high < 0.25  # better on every prompt: the interval stays above 0
    assert paired_difference_ci(acc[:1], drafts[:1], acc[:1], drafts[:1]) is None


def test_tokens_per_step_are_the_emissions_after_the_prefills_token():
    row = RowResult(output_ids=list(range(9)), drafts=3, accepted_tokens=5, ttft_s=0.01, latency_s=0.5,
                    emissions=[(0.01, 1), (0.1, 3), (0.2, 4), (0.3, 1)])
    m = prompt_metrics(row)
    assert m["tokens_per_step"] == [3, 4, 1]
    assert 1 + sum(m["tokens_per_step"]) == m["output_tokens"]


def test_al_by_position_counts_a_step_where_its_first_token_lies_and_leaves_each_last_step_out():
    """Prompt a: steps of 3 tokens from position 1 (1, 4, ..., 70), its last step (at 73) left out: 21 steps
    start at 1-61 and 3 at 64-70. Prompt b: 5 steps, its last one cut to 1 token (left out). Prompt c: one step,
    nothing counted."""
    a, b, c = [3] * 25, [2, 1, 4, 2, 1], [7]
    out = al_by_position([a, b, c], starts=(0, 64, 128))
    assert out == [
        {"start": 0, "end": 64, "steps": 21 + 4, "prompts": 2, "acceptance_length": pytest.approx((63 + 9) / 25)},
        {"start": 64, "end": 128, "steps": 3, "prompts": 1, "acceptance_length": 3.0},
    ]
    assert al_by_position([[1] * 300], starts=(0, 64, 128))[-1] == {
        "start": 128, "end": None, "steps": 299 - 127, "prompts": 1, "acceptance_length": 1.0}
    assert al_by_position([]) == [] and al_by_position([[5]]) == []
