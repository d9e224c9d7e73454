"""Per-step counters -> the figures specbench reports, with the names and definitions of DESIGN.md.

- drafts: verification steps that had a draft; draft_tokens; accepted_tokens (bonus excluded).
- acceptance_length AL = 1 + accepted_tokens / drafts (target-only decoding = 1).
- acceptance_rate = accepted_tokens / draft_tokens; per_position_acceptance[i] = accepted at i / drafts.
- mean_k = K drafted per step (a chain's length, a tree's depth: k, or a dynamic tree's expanded depth), averaged over row-steps: strategy.k
  when K is fixed, less under an adaptive K schedule. accepted_histogram[n] = row-steps that accepted exactly n
  drafts (n = 0..k; that step's AL is n + 1), counted like AL over (row, step) pairs, so
  sum(histogram) = drafts and sum(n * histogram[n]) = accepted_tokens. With a varying K, AL, the rates and
  per_position_acceptance keep their definitions (per step, whatever that step's K); a step that drafted fewer
  than i + 1 tokens counts as not accepting position i.
- TTFT: request start to first output token. TPOT = (latency - TTFT) / (output_tokens - 1).
  ITL: gaps between emissions (one emission may hold several tokens).
- tokens_per_step (a prompt's, in outputs.jsonl): the tokens each decode step committed, in order (that step's
  accepted drafts + 1; fewer where max_new_tokens or EOS cut the step). `al_by_position` reads AL over stretches of
  the response from it: a step counts in the stretch holding its first token (the response's position 0 is the
  prefill's token), and each prompt's last step is left out, since a cut step kept fewer tokens than it accepted.
- output_tokens_per_s; speedup = baseline TPOT / strategy TPOT on the same prompts;
  time split: draft, verify, other.

Counters are summed over prompts (AL and rates are token-weighted, as Spec-Bench and vLLM report
them); timings are reported per prompt with their spread: mean, median, p90, p99 and n.

95% intervals (`acceptance_length_ci95`, speedup's `ci95`): percentile bootstrap over the prompts (CI_RESAMPLES
resamples of as many prompts, drawn with replacement from a generator seeded with CI_SEED, so the same results give
the same interval), each figure recomputed as above on every resample; the speedup's resamples take a prompt's
baseline and strategy TPOT together, and `paired_difference_ci` (two jobs' AL on the same prompts, for
`specbench.report --against`) a prompt's two jobs together. They say how much the figure depends on which prompts
were drawn; how much timings vary between runs of the same prompts is not in them.

OBJECTIVES: the one number per job that a settings optimizer (`-m hydra/sweeper=specbench_optuna`)
maximizes, read from results.json (the `objective` setting picks one; every one is better when higher).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from specbench.errors import unknown

if TYPE_CHECKING:  # annotations only: the report and the config read OBJECTIVES without importing torch
    from specbench.engine import BatchTiming, RowResult

TIMED = ("ttft_ms", "tpot_ms", "latency_ms", "output_tokens_per_s")
CI_RESAMPLES = 2000
CI_SEED = 0


def _resampled(n: int) -> np.ndarray:
    """[CI_RESAMPLES, n] prompt indices drawn with replacement, the same for the same n."""
    return np.random.default_rng(CI_SEED).integers(0, n, size=(CI_RESAMPLES, n))


def paired_difference_ci(num_a: Sequence[float], den_a: Sequence[float], num_b: Sequence[float],
                         den_b: Sequence[float]) -> list[float] | None:
    """95% bootstrap interval of sum(num_b) / sum(den_b) - sum(num_a) / sum(den_a) over prompts, row i of a and of b
    being the same prompt (resampled together): how two jobs' AL differ on the prompts both ran. None below 2."""
    a_num, a_den, b_num, b_den = (np.asarray(v, dtype=np.float64) for v in (num_a, den_a, num_b, den_b))
    if a_num.size < 2 or not a_num.size == a_den.size == b_num.size == b_den.size:
        return None
    idx = _resampled(a_num.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _interval(b_num[idx].sum(1) / b_den[idx].sum(1) - a_num[idx].sum(1) / a_den[idx].sum(1))


def _interval(values: np.ndarray) -> list[float] | None:
    values = values[np.isfinite(values)]
    return [float(v) for v in np.quantile(values, [0.025, 0.975])] if values.size else None


def ratio_ci95(numerators: Sequence[float], denominators: Sequence[float], offset: float = 0.0) -> list[float] | None:
    """95% bootstrap interval of offset + sum(numerators) / sum(denominators) over prompts (a prompt's pair resampled
    together); None below 2 prompts. AL is 1 + accepted / drafts; a speedup of mean TPOTs is sum(b) / sum(s)."""
    num, den = np.asarray(numerators, dtype=np.float64), np.asarray(denominators, dtype=np.float64)
    if num.size < 2:
        return None
    idx = _resampled(num.size)
    with np.errstate(divide="ignore", invalid="ignore"):  # a resample of prompts without drafts: left out
        return _interval(offset + num[idx].sum(1) / den[idx].sum(1))


def spread(values: Sequence[float]) -> dict[str, float | int | None]:
    """mean, median, p90 and p99 (nearest-rank on the sorted values) and n."""
    vals = sorted(v for v in values if v is not None and not math.isnan(v))
    if not vals:
        return {"mean": None, "median": None, "p90": None, "p99": None, "n": 0}
    n = len(vals)
    mid = n // 2
    median = vals[mid] if n % 2 else (vals[mid - 1] + vals[mid]) / 2
    rank = lambda q: vals[min(n - 1, math.ceil(q * n) - 1)]  # noqa: E731
    return {"mean": sum(vals) / n, "median": median, "p90": rank(0.9), "p99": rank(0.99), "n": n}


def prompt_metrics(row: RowResult) -> dict[str, Any]:
    """The metrics of one prompt (also written per line to outputs.jsonl)."""
    out_tokens = len(row.output_ids)
    times = [t for t, _ in row.emissions]
    tpot = (row.latency_s - row.ttft_s) / (out_tokens - 1) if out_tokens > 1 else float("nan")
    return {
        "output_tokens": out_tokens,
        "drafts": row.drafts,
        "draft_tokens": row.draft_tokens,
        "accepted_tokens": row.accepted_tokens,
        "acceptance_length": 1 + row.accepted_tokens / row.drafts if row.drafts else 1.0,
        "acceptance_rate": row.accepted_tokens / row.draft_tokens if row.draft_tokens else None,
        "per_position_acceptance": [a / row.drafts for a in row.accepted_at] if row.drafts else [],
        "mean_k": row.k_drafted / row.drafts if row.drafts else None,
        "accepted_histogram": list(row.accepted_histogram),
        "ttft_ms": row.ttft_s * 1e3,
        "tpot_ms": tpot * 1e3,
        "latency_ms": row.latency_s * 1e3,
        "itl_ms": [(b - a) * 1e3 for a, b in zip(times, times[1:])],
        "tokens_per_step": [n for _, n in row.emissions[1:]],  # emissions[0]: the prefill's token
        "output_tokens_per_s": out_tokens / row.latency_s if row.latency_s > 0 else None,
        "finished_by": row.finished_by,
    }


def summarize(per_prompt: Sequence[dict[str, Any]], timings: Sequence[BatchTiming] = ()) -> dict[str, Any]:
    """Aggregate per-prompt metrics of one strategy over a prompt set (or one category of it)."""
    drafts = sum(m["drafts"] for m in per_prompt)
    draft_tokens = sum(m["draft_tokens"] for m in per_prompt)
    accepted = sum(m["accepted_tokens"] for m in per_prompt)
    k = max((len(m["per_position_acceptance"]) for m in per_prompt), default=0)
    per_pos = [sum(m["per_position_acceptance"][i] * m["drafts"] for m in per_prompt if m["drafts"]) / drafts
               for i in range(k)] if drafts else []
    al = 1 + accepted / drafts if drafts else 1.0
    hist = [sum(h[n] for m in per_prompt if n < len(h := m.get("accepted_histogram") or []))
            for n in range(max((len(m.get("accepted_histogram") or []) for m in per_prompt), default=0))]
    k_drafted = sum(m["mean_k"] * m["drafts"] for m in per_prompt if m.get("mean_k") is not None)
    nodes = draft_tokens / drafts if drafts else 0.0
    out: dict[str, Any] = {
        "n_prompts": len(per_prompt),
        "output_tokens": sum(m["output_tokens"] for m in per_prompt),
        "drafts": drafts,
        "draft_tokens": draft_tokens,
        "accepted_tokens": accepted,
        "acceptance_length": al,
        "acceptance_rate": accepted / draft_tokens if draft_tokens else None,
        "nodes_per_step": nodes,  # draft tokens verified per step (K for a chain)
        # tokens emitted per token the verify forward processes (the pending one included): 1.0 target-only
        "al_per_verified_token": al / (1 + nodes),
        "per_position_acceptance": per_pos,
        "mean_k": k_drafted / drafts if drafts else None,  # K drafted per step (strategy.k unless K is adaptive)
        "accepted_histogram": hist,  # [k+1] row-steps that accepted exactly n drafts
        "acceptance_length_per_prompt": spread([m["acceptance_length"] for m in per_prompt]),
        "acceptance_length_ci95": ratio_ci95([m["accepted_tokens"] for m in per_prompt],
                                             [m["drafts"] for m in per_prompt], 1.0) if drafts else None,
        "itl_ms": spread([g for m in per_prompt for g in m["itl_ms"]]),
    }
    for key in TIMED:
        out[key] = spread([m[key] for m in per_prompt])
    if timings:
        total = sum(t.total_s for t in timings)
        draft = sum(t.draft_s for t in timings)
        verify = sum(t.verify_s for t in timings)
        prefill = sum(t.prefill_s for t in timings)
        out["time_split"] = {
            "total_s": total, "prefill_s": prefill, "draft_prefill_s": sum(t.draft_prefill_s for t in timings),
            "draft_s": draft, "verify_s": verify,
            "other_s": max(0.0, total - prefill - draft - verify),
            "draft_frac": draft / total if total else None, "verify_frac": verify / total if total else None,
            "steps": sum(t.steps for t in timings),
        }
        steps = out["time_split"]["steps"]
        out["draft_forwards_per_step"] = sum(t.draft_forwards for t in timings) / steps if steps else None
        # what one verify forward costs (a 16-node tree against a 4-token chain, say): wall time of the verify phase
        out["verify_ms_per_step"] = 1e3 * verify / steps if steps else None
        out["output_tokens_per_s_overall"] = out["output_tokens"] / total if total else None
        # whole-batch decode throughput: tokens after each row's first (which the prefill emits) over the time
        # outside the prefills (the target's, and a draft model's ingestion of the same prompts: draft_prefill_s),
        # every row of every batch counted together; output_tokens_per_s_overall counts every second
        decode_s = total - prefill
        out["decode_tokens_per_s_overall"] = (out["output_tokens"] - len(per_prompt)) / decode_s if decode_s > 0 else None
    return out


def throughput_speedup(baseline: dict[str, Any], strategy: dict[str, Any]) -> float | None:
    """Whole-batch decode tokens/s of the strategy over the baseline's (summaries from `summarize`)."""
    b, s = baseline.get("decode_tokens_per_s_overall"), strategy.get("decode_tokens_per_s_overall")
    return s / b if b and s else None


def speedup(baseline: Sequence[dict[str, Any]], strategy: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """baseline TPOT / strategy TPOT: overall (ratio of mean TPOTs) with its 95% interval over prompts (the prompts
    timed on both sides), and per prompt with its spread."""
    pairs = [(b["tpot_ms"], s["tpot_ms"]) for b, s in zip(baseline, strategy)
             if s["tpot_ms"] and not math.isnan(s["tpot_ms"]) and not math.isnan(b["tpot_ms"])]
    mean_b = spread([m["tpot_ms"] for m in baseline])["mean"]
    mean_s = spread([m["tpot_ms"] for m in strategy])["mean"]
    return {"speedup": mean_b / mean_s if mean_b and mean_s else None,
            "ci95": ratio_ci95([b for b, _ in pairs], [s for _, s in pairs]),
            "per_prompt": spread([b / s for b, s in pairs])}


POSITION_STARTS = (0, 64, 128, 256, 512, 1024, 2048)  # al_by_position's stretches of a response, the last open


def al_by_position(steps_per_prompt: Sequence[Sequence[int]],
                   starts: Sequence[int] = POSITION_STARTS) -> list[dict[str, Any]]:
    """AL over stretches of the responses, from each prompt's tokens_per_step (the module docstring says what a step
    counts in): one entry per stretch [start, end) that has a step (end None: the last, open), with its steps, the
    prompts that stepped there and acceptance_length = tokens / steps."""
    stretches = [{"start": a, "end": b, "steps": 0, "tokens": 0, "prompts": 0}
                 for a, b in zip(starts, [*starts[1:], None])]
    for steps in steps_per_prompt:
        position, seen = 1, set()  # position 0: the prefill's token
        for n in list(steps)[:-1]:
            i = max(j for j, a in enumerate(starts) if a <= position)
            stretches[i]["steps"] += 1
            stretches[i]["tokens"] += n
            seen.add(i)
            position += n
        for i in seen:
            stretches[i]["prompts"] += 1
    return [{"start": s["start"], "end": s["end"], "steps": s["steps"], "prompts": s["prompts"],
             "acceptance_length": s["tokens"] / s["steps"]} for s in stretches if s["steps"]]


def speed_terms(results: Mapping[str, Any]) -> dict[str, float | None] | None:
    """The speed model behind a job's speedup, from its results.json: speedup ~ AL / (r + d), where r is the
    strategy's verify forward over target-only decoding's step (one 1-token forward; the in-job baseline) and d its
    drafting time per step over that step; c = d / draft passes per step is one draft pass's cost (None for
    drafters without a forward: ngram, suffix). The model leaves out the commit and sampling between forwards and the
    measured speedup's averaging over prompts, so `predicted` differs from it by those. None without a baseline or
    without drafts."""
    step = _number(_at(results, "baseline", "verify_ms_per_step"))
    strat = results.get("strategy") or {}
    al, verify = _number(strat.get("acceptance_length")), _number(strat.get("verify_ms_per_step"))
    split = strat.get("time_split") or {}
    steps, draft_s = _number(split.get("steps")), _number(split.get("draft_s"))
    if not step or al is None or verify is None or not steps or draft_s is None or not strat.get("draft_tokens"):
        return None  # no baseline, no drafts, or a results.json without these figures (an older one)
    r, d = verify / step, draft_s * 1e3 / steps / step
    passes = _number(strat.get("draft_forwards_per_step")) or 0.0
    return {"r": r, "draft": d, "draft_passes": passes, "c": d / passes if passes else None, "predicted": al / (r + d)}


def exact_match(baseline_ids: Sequence[list[int]], strategy_ids: Sequence[list[int]]) -> dict[str, Any]:
    """How many prompts produced exactly the baseline's tokens (the T = 0 losslessness check)."""
    equal = [a == b for a, b in zip(baseline_ids, strategy_ids)]
    first_diff = next((i for i, e in enumerate(equal) if not e), None)
    return {"equal": sum(equal), "n": len(equal), "all_equal": all(equal), "first_mismatch_index": first_diff}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _at(results: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        results = results.get(key) if isinstance(results, Mapping) else None
    return results


def _al_per_draft_forward(results: Mapping[str, Any]) -> float | None:
    al, forwards = _number(_at(results, "strategy", "acceptance_length")), _number(_at(results, "strategy", "draft_forwards_per_step"))
    return al / forwards if al is not None and forwards else None


# name -> (what it is, how it is read from a results.json); None when the job's results do not hold it
OBJECTIVES: dict[str, tuple[str, Callable[[Mapping[str, Any]], float | None]]] = {
    "speedup": ("baseline TPOT / strategy TPOT, means over prompts",
                lambda r: _number(_at(r, "speedup", "speedup"))),
    "whole_batch_speedup": ("whole-batch decode tokens/s of the strategy over the baseline's",
                            lambda r: _number(_at(r, "speedup", "whole_batch"))),
    "acceptance_length": ("AL = 1 + accepted / drafts", lambda r: _number(_at(r, "strategy", "acceptance_length"))),
    "al_per_draft_forward": ("AL / draft forwards per step", _al_per_draft_forward),
}
NEEDS_BASELINE = ("speedup", "whole_batch_speedup")  # measured against the target-only run (baseline=true)


def objective(results: Mapping[str, Any], name: str) -> float | None:
    """The objective `name` (one of OBJECTIVES) of a job's results.json; None when the results do not hold it
    (no baseline for a speedup, no draft forward for al_per_draft_forward, a NaN)."""
    if name not in OBJECTIVES:
        raise unknown("objective", name, OBJECTIVES)
    return OBJECTIVES[name][1](results)
