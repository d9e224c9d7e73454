"""logging.results_table: the lines under the table, from a results.json's summaries (made by metrics.summarize)."""

from __future__ import annotations

from specbench_testing import row_result
from specbench.engine import BatchTiming
from specbench.logging import results_table
from specbench.metrics import prompt_metrics, summarize


def _summary(drafts: int, accepted: int, draft_s: float, verify_s: float, steps: int) -> dict:
    row = row_result(drafts, 3 * drafts, accepted, [1] * 3)
    timing = BatchTiming(draft_s=draft_s, verify_s=verify_s, total_s=1.0, steps=steps, draft_forwards=3 * steps)
    return summarize([prompt_metrics(row)], [timing])


def _results(by_category: dict | None = None, baseline: bool = True) -> dict:
    base = _summary(0, 0, 0.0, 0.14, 7) if baseline else None  # target-only: 20 ms a step
    return {"run": {"strategy": "eagle", "k": 3}, "baseline": base,
            "strategy": _summary(5, 6, 0.015, 0.13, 5),  # verify 26 ms a step, drafting 3 ms a step
            "speedup": {"speedup": 1.4, "per_prompt": {"median": 1.4, "p90": 1.4, "n": 1}} if baseline else None,
            "exact_match": None, "by_category": by_category or {}}


def test_the_speed_model_line_splits_a_step_into_verify_and_drafting():
    table = results_table(_results())
    assert ("speed model: AL 2.20 / (r 1.30 + draft 0.15) = 1.52x predicted (r: verify forward / target-only step; "
            "draft: drafting per step / target-only step: 3.0 passes x c 0.05)") in table
    assert "speed model" not in results_table(_results(baseline=False))


def test_categories_are_listed_in_name_order_with_their_speedup():
    cats = {"writing": {"strategy": {"acceptance_length": 1.6}, "speedup": {"speedup": 0.891}},
            "coding": {"strategy": {"acceptance_length": 2.333}, "speedup": {"speedup": 2.06}},
            "math": {"strategy": {"acceptance_length": 2.17}, "speedup": {"speedup": 1.43}}}
    assert "by category (AL / speedup): coding 2.33 / 2.06x, math 2.17 / 1.43x, writing 1.60 / 0.89x" in (
        results_table(_results(cats)))
    no_baseline = {name: {"strategy": block["strategy"]} for name, block in cats.items()}
    assert "by category (AL): coding 2.33, math 2.17, writing 1.60" in results_table(_results(no_baseline, False))
    assert "by category" not in results_table(_results({"coding": cats["coding"]}))  # one category: the table says it


def test_the_intervals_over_prompts_are_printed_where_results_have_them():
    results = _results()
    # one prompt: no interval (nor in results written before them)
    assert "strategy TPOT): 1.40x (per prompt:" in results_table(results)
    results["speedup"]["ci95"] = [1.234, 1.567]
    results["strategy"]["acceptance_length_ci95"] = [2.05, 2.351]
    table = results_table(results)
    assert "speedup (baseline TPOT / strategy TPOT): 1.40x, 95% CI over prompts 1.23-1.57 (per prompt:" in table
    row = next(line for line in table.splitlines() if line.startswith("| AL 95% CI over prompts"))
    assert [c.strip() for c in row.strip("|").split("|")] == ["AL 95% CI over prompts", "-", "2.05-2.35"]
