"""Where results go: results.json and outputs.jsonl (atomic), W&B (offline by default), the console.

Logging sits behind a small interface with a no-op and a W&B implementation, so run() never
branches on the logger and tests can use `logger=none`. conf/logger/<name>.yaml names the class in
`_target_`; its other keys are the class's settings.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from specbench.metrics import speed_terms


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write JSON so that a reader (or a crash) never sees half a file."""
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(_clean(obj), indent=1))
    os.replace(tmp, path)


def write_jsonl_atomic(path: Path, rows: Iterable[Mapping[str, Any]]) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with open(tmp, "w") as f:
        for row in rows:
            f.write(json.dumps(_clean(row)) + "\n")
    os.replace(tmp, path)


def _clean(obj: Any) -> Any:
    """NaN/inf -> None so results.json stays strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, Mapping):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


class NullLogger:
    """Logs nothing (logger=none)."""

    def __init__(self, **_: Any) -> None:  # the run's details, which it does not need
        pass

    def log_results(self, results: Mapping[str, Any]) -> None:
        pass

    def finish(self) -> None:
        pass


class WandbLogger(NullLogger):
    """One W&B run per job: the resolved config, summary metrics and a per-position acceptance table."""

    def __init__(self, run_dir: Path, config: Mapping[str, Any], group: str | None, run_name: str, *,
                 name: str = "wandb", mode: str | None = "offline", project: str | None = "specbench",
                 entity: str | None = None, tags: Iterable[str] | None = ()) -> None:
        import wandb

        self.wandb = wandb
        self.run = wandb.init(
            project=project or "specbench", entity=entity, mode=mode or "offline", dir=str(run_dir),
            config=dict(config), group=group, name=run_name, tags=list(tags or []), reinit="finish_previous",
        )

    def log_results(self, results: Mapping[str, Any]) -> None:
        summary: dict[str, Any] = {}
        for side in ("strategy", "baseline"):
            block = results.get(side)
            if not block:
                continue
            for key, value in block.items():
                if isinstance(value, Mapping) and "mean" in value:
                    for stat in ("mean", "median", "p90"):
                        summary[f"{side}/{key}/{stat}"] = value[stat]
                elif isinstance(value, (int, float)) and value is not None:
                    summary[f"{side}/{key}"] = value
        if results.get("speedup"):
            summary["speedup"] = results["speedup"]["speedup"]
        # the 95% intervals over prompts (metrics.ratio_ci95), as two numbers each
        for name, ci in (("speedup", (results.get("speedup") or {}).get("ci95")),
                         ("strategy/acceptance_length", (results.get("strategy") or {}).get("acceptance_length_ci95"))):
            if ci:
                summary[f"{name}_ci95_low"], summary[f"{name}_ci95_high"] = ci
        for key, value in (speed_terms(results) or {}).items():
            summary[f"speed_model/{key}"] = value
        if results.get("exact_match"):
            summary["exact_match/equal"] = results["exact_match"]["equal"]
        self.run.summary.update(_clean(summary))
        per_pos = (results.get("strategy") or {}).get("per_position_acceptance") or []
        table = self.wandb.Table(columns=["position", "acceptance"], data=[[i + 1, a] for i, a in enumerate(per_pos)])
        self.run.log({"per_position_acceptance": table})

    def finish(self) -> None:
        self.run.finish()


def make_logger(cfg: Mapping[str, Any], run_dir: Path, config: Mapping[str, Any], group: str | None, name: str) -> NullLogger:
    """The logger `cfg._target_` names, for one job: its directory, config, sweep group and run name."""
    if os.environ.get("WANDB_MODE") == "disabled":
        return NullLogger()
    from specbench.config import build

    return build(cfg, run_dir=run_dir, config=config, group=group, run_name=name)


def _fmt(v: Any, digits: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _interval(bounds: Sequence[float] | None) -> str:
    """A 95% interval [low, high] as 'low-high' ('-' when none: one prompt, or no drafts)."""
    return f"{bounds[0]:.2f}-{bounds[1]:.2f}" if bounds else "-"


def _by_category(results: Mapping[str, Any]) -> str:
    """One line: each category's acceptance length (and speedup, with a baseline), categories in name order."""
    parts = []
    for name, block in sorted(results["by_category"].items()):
        speedup = (block.get("speedup") or {}).get("speedup")
        al = _fmt((block.get("strategy") or {}).get("acceptance_length"))
        parts.append(f"{name} {al}" + (f" / {_fmt(speedup)}x" if speedup is not None else ""))
    return "by category (AL" + (" / speedup" if results.get("speedup") else "") + "): " + ", ".join(parts)


def results_table(results: Mapping[str, Any]) -> str:
    """The console table: baseline next to the strategy, timings as mean / median / p90."""
    sides = [(s, results[s]) for s in ("baseline", "strategy") if results.get(s)]
    name = results["run"]["strategy"]
    if ((results.get("config") or {}).get("strategy") or {}).get("tree") == "auto" and results["run"].get("tree"):
        name = f"{name} (tree={results['run']['tree']})"  # what strategy.tree=auto drafted on this machine
    names = {"baseline": "none (baseline)", "strategy": name}
    header = ["metric"] + [names[s] for s, _ in sides]
    lines: list[list[str]] = []

    def add(label: str, fn) -> None:
        lines.append([label] + [fn(block) for _, block in sides])

    add("prompts", lambda b: str(b["n_prompts"]))
    add("output tokens", lambda b: str(b["output_tokens"]))
    add("acceptance length", lambda b: _fmt(b["acceptance_length"]))
    add("AL 95% CI over prompts", lambda b: _interval(b.get("acceptance_length_ci95")))
    add("acceptance rate", lambda b: _fmt(b["acceptance_rate"], 3))
    add("per-position acc.", lambda b: " ".join(_fmt(a) for a in b["per_position_acceptance"]) or "-")
    add("draft forwards / step", lambda b: _fmt(b.get("draft_forwards_per_step")))
    add("nodes verified / step", lambda b: _fmt(b.get("nodes_per_step")))
    add("mean K drafted / step", lambda b: _fmt(b.get("mean_k")))
    add("steps accepting 0..k", lambda b: " ".join(str(c) for c in b.get("accepted_histogram") or []) or "-")
    add("AL / verified token", lambda b: _fmt(b.get("al_per_verified_token")))
    add("verify ms / step", lambda b: _fmt(b.get("verify_ms_per_step")))
    for key, label in (("ttft_ms", "TTFT ms"), ("tpot_ms", "TPOT ms"), ("itl_ms", "ITL ms"), ("output_tokens_per_s", "tokens/s")):
        add(f"{label} mean/med/p90", lambda b, key=key: "/".join(_fmt(b[key][s], 1) for s in ("mean", "median", "p90")))
    add("ITL ms p99", lambda b: _fmt(b["itl_ms"].get("p99"), 1))
    add("decode tok/s, whole batch", lambda b: _fmt(b.get("decode_tokens_per_s_overall"), 1))
    add("output tok/s, whole run", lambda b: _fmt(b.get("output_tokens_per_s_overall"), 1))
    add("time: prefill/draft/verify/other %", lambda b: "/".join(  # prefill: the target's and the drafter's
        _fmt(100 * b["time_split"].get(f, 0.0) / b["time_split"]["total_s"], 0) if b["time_split"]["total_s"] else "-"
        for f in ("prefill_s", "draft_s", "verify_s", "other_s")))
    widths = [max(len(r[i]) for r in [header] + lines) for i in range(len(header))]
    fmt = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    out = [fmt(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [fmt(r) for r in lines]
    if results["run"].get("scheduler") == "continuous":
        out.append(f"continuous batching over {results['run']['batch_size']} slots: a request's TTFT and latency count "
                   f"from its admission into a slot; whole-run tok/s includes every admission's prefill")
    if results.get("speedup"):
        sp = results["speedup"]
        order = {"interleaved": ", batches in turns", "sequential": ", baseline first"}.get(results["run"].get("order"), "")
        ci = f", 95% CI over prompts {_interval(sp['ci95'])}" if sp.get("ci95") else ""
        out.append(f"speedup (baseline TPOT / strategy TPOT{order}): {_fmt(sp['speedup'])}x{ci} "
                   f"(per prompt: median {_fmt(sp['per_prompt']['median'])}, p90 {_fmt(sp['per_prompt']['p90'])}, n={sp['per_prompt']['n']})")
        if sp.get("whole_batch") is not None:
            out.append(f"speedup in whole-batch decode tokens/s: {_fmt(sp['whole_batch'])}x")
    if terms := speed_terms(results):
        passes = f": {_fmt(terms['draft_passes'], 1)} passes x c {_fmt(terms['c'])}" if terms["c"] is not None else ""
        out.append(f"speed model: AL {_fmt(results['strategy']['acceptance_length'])} / (r {_fmt(terms['r'])} + draft "
                   f"{_fmt(terms['draft'])}) = {_fmt(terms['predicted'])}x predicted (r: verify forward / target-only "
                   f"step; draft: drafting per step / target-only step{passes})")
    if len(results.get("by_category") or {}) > 1:
        out.append(_by_category(results))
    if results.get("exact_match"):
        em = results["exact_match"]
        out.append(f"T=0 output identical to target-only decoding: {em['equal']}/{em['n']} prompts")
    return "\n".join(out)
