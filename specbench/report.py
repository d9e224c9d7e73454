"""`python -m specbench.report <dir> [<dir> ...] [--out <dir>]`: one table and plots over many jobs.

Every results.json found under the given directories (Hydra multirun sweeps, single runs, or
folders of them) becomes one row: strategy, its settings, k, sampling, models, dataset, acceptance
length and rate, mean TPOT of the baseline and the strategy, speedup and the T = 0 exact-match
count. Written to <out>/report.md and report.csv (and printed), with PNG plots: acceptance length
vs k and speedup vs k (one line per strategy, one panel per temperature; a bar at each point one job made, its 95%
interval over prompts from results.json; the CSV holds the bounds) and per-position
acceptance at each strategy's largest k; where a job's outputs.jsonl records each step's tokens, AL by position in
the response (a table and a plot: does acceptance change as responses grow?). When the jobs' prompt sets have categories (MT-Bench,
Spec-Bench), report.md also holds per-category acceptance length and speedup tables (rows = jobs,
columns = categories), and report_by_category.csv the same in long form.

A job directory without results.json (a crashed or unfinished job: run() writes results.json last)
is counted and listed (with its error.json's message when the job failed), and a results.json that
does not parse is listed with its error; neither stops the report. Job directories are those holding
Hydra's `.hydra/` folder, outputs.jsonl or results.json, and every subdirectory of a sweep directory
(one holding multirun.yaml). The jobs a sweep was to run are read back from its multirun.yaml
(`sweep_jobs`: the cartesian product of its overrides, as Hydra's basic sweeper builds it), so jobs
that never started are listed too; `python -m specbench -m <same overrides> hydra.sweep.dir=<dir>
+resume=true` then runs only the jobs without a complete results.json.

An Optuna sweep (`-m hydra/sweeper=specbench_optuna`, hydra-optuna-sweeper) writes no multirun.yaml: its
trials' settings are chosen as the study runs, so there is no job list to expand. Its directory is known
by the optimization_results.yaml the study writes when it ends, or by its jobs' .hydra/hydra.yaml, and the
report adds a section per study: the best trial's settings and objective (from optimization_results.yaml,
matched to its job directory; the best finished job's when the study did not end), the objective's spread
over the trials, every trial ranked by it, and how many trials failed or never started.
"""

from __future__ import annotations

import argparse
import csv
import functools
import gzip
import io
import json
import math
import re
import sys
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from specbench.metrics import al_by_position, paired_difference_ci, speed_terms

COLUMNS = ("job", "strategy", "settings", "k", "temperature", "top_k", "top_p", "target", "draft", "dataset",
           "n_prompts", "batch_size", "nodes_per_step", "mean_k", "acceptance_length", "al_per_verified_token", "acceptance_rate",
           "tpot_baseline_ms", "tpot_strategy_ms", "speedup", "exact_match", "per_position_acceptance", "verify_ms_per_step", "tpot_baseline_ms_median", "tpot_strategy_ms_median",
           "tpot_strategy_ms_p90", "speedup_per_prompt_median", "speedup_per_prompt_p90", "output_tokens",
           "accepted_histogram", "scheduler", "speedup_whole_batch", "tokens_per_s_baseline", "tokens_per_s_strategy",
           "itl_baseline_ms_median", "itl_baseline_ms_p99", "itl_strategy_ms_median", "itl_strategy_ms_p99",
           "speed_r", "speed_draft", "speed_c", "speed_predicted", "acceptance_length_ci_low",
           "acceptance_length_ci_high", "speedup_ci_low", "speedup_ci_high")
# the columns measured with a clock: they differ run to run where every other column repeats
TIMING_COLUMNS = ("tpot_baseline_ms", "tpot_strategy_ms", "speedup", "tpot_baseline_ms_median",
                  "tpot_strategy_ms_median", "tpot_strategy_ms_p90", "speedup_per_prompt_median", "speedup_per_prompt_p90", "verify_ms_per_step",
                  "speedup_whole_batch", "tokens_per_s_baseline", "tokens_per_s_strategy", "itl_baseline_ms_median",
                  "itl_baseline_ms_p99", "itl_strategy_ms_median", "itl_strategy_ms_p99",
                  "speed_r", "speed_draft", "speed_c", "speed_predicted", "speedup_ci_low", "speedup_ci_high")
# shown in report.md only when they differ between jobs (always in report.csv)
_COLLAPSIBLE = ("top_k", "top_p", "batch_size", "nodes_per_step", "al_per_verified_token",  # these two: trees
                "mean_k",  # K drafted per step: differs from k under adaptive K
                "scheduler", "speedup_whole_batch")
_CSV_ONLY = ("per_position_acceptance", "verify_ms_per_step", "tpot_baseline_ms_median", "tpot_strategy_ms_median", "tpot_strategy_ms_p90",
             "speedup_per_prompt_median", "speedup_per_prompt_p90", "output_tokens", "accepted_histogram",
             "tokens_per_s_baseline", "tokens_per_s_strategy", "itl_baseline_ms_median", "itl_baseline_ms_p99",
             "itl_strategy_ms_median", "itl_strategy_ms_p99", "speed_r", "speed_draft", "speed_c", "speed_predicted",
             "acceptance_length_ci_low", "acceptance_length_ci_high", "speedup_ci_low", "speedup_ci_high")
# strategy settings that are not the strategy's own options
_NOT_SETTINGS = ("_target_", "name", "k")


@dataclass
class Job:
    path: Path  # the job directory
    label: str  # short, unique name: the path under its root, Hydra's override suffix dropped
    results: dict[str, Any]
    row: dict[str, Any]


@dataclass
class Collected:
    jobs: list[Job] = field(default_factory=list)
    missing: list[Path] = field(default_factory=list)  # job directories without results.json
    unreadable: list[tuple[Path, str]] = field(default_factory=list)  # results.json that did not parse, and why
    never_started: list[tuple[Path, int, list[str]]] = field(default_factory=list)  # (sweep, job number, overrides)
    unknown_sweeps: list[tuple[Path, str]] = field(default_factory=list)  # sweeps whose job list was not derived, and why
    studies: list[Study] = field(default_factory=list)  # Optuna sweeps


@dataclass
class Trial:
    job: Job
    value: float | None  # the study's objective, read back from the job's results.json
    overrides: dict[str, str]  # the job's command-line settings (.hydra/overrides.yaml), key -> value as written


@dataclass
class Study:
    """An Optuna sweep: the study's answer (optimization_results.yaml, written when it ends) and its trials."""

    path: Path  # the sweep directory
    objective: str  # specbench.metrics.OBJECTIVES
    direction: str
    n_trials: int | None  # what the sweep asked for
    searched: list[str]  # the settings the sampler chose
    best_params: dict[str, Any] | None  # None: the study did not end (no optimization_results.yaml)
    best_value: float | None
    trials: list[Trial]  # the finished jobs, best first
    job_dirs: list[Path]  # every job directory of the sweep, finished or not

    @property
    def best(self) -> list[Trial]:
        """The trials run with the best settings; of those, the ones whose objective is the best value first."""
        if self.best_params is None:
            return self.trials[:1] if self.trials and self.trials[0].value is not None else []
        same = [t for t in self.trials if all(_same_value(t.overrides.get(k), v) for k, v in self.best_params.items())]
        return sorted(same, key=lambda t: not (t.value is not None and self.best_value is not None
                                                 and math.isclose(t.value, self.best_value, rel_tol=1e-9)))


@dataclass
class ReportFiles:
    out_dir: Path
    markdown: Path
    csv: Path
    plots: list[Path]
    by_category_csv: Path | None
    text: str  # what was printed
    collected: Collected


def _get(d: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(d, Mapping):
            return None
        d = d.get(key)
    return d


def _job_dirs(root: Path) -> set[Path]:
    dirs: set[Path] = set()
    for marker in (".hydra", "outputs.jsonl", "results.json"):
        dirs.update(p.parent for p in root.rglob(marker))
    for sweep in root.rglob("multirun.yaml"):
        dirs.update(p for p in sweep.parent.iterdir() if p.is_dir() and not p.name.startswith("."))
    if (root / "multirun.yaml").exists():
        dirs.discard(root)
    return dirs


def read_results(path: Path) -> dict[str, Any]:
    """A complete results.json (run() writes it last, atomically), or ValueError / OSError saying why not."""
    results = json.loads(path.read_text())
    if not isinstance(results, dict) or not isinstance(results.get("run"), dict):
        raise ValueError("no 'run' section: not a specbench results.json")
    if not isinstance(results.get("strategy"), dict):
        raise ValueError("no 'strategy' section")
    return results


def _override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


# keys that change how a job runs, not what it computes: a job re-run with them is the same job
_NOT_JOB_KEYS = ("resume",)


def _job_id(overrides: Sequence[str]) -> tuple[str, ...]:
    return tuple(sorted(o for o in overrides if _override_key(o) not in _NOT_JOB_KEYS))


def sweep_jobs(multirun_yaml: Path) -> list[list[str]]:
    """The overrides of every job a Hydra sweep was to run, in job-number order, from its multirun.yaml:
    `hydra.sweeper.params` then `hydra.overrides.task`, expanded into their cartesian product exactly as Hydra's
    BasicSweeper does (comma lists, range(), choice(); a later override of a key replaces an earlier one).
    ValueError when it cannot be derived: another sweeper (Optuna, Ax ...), or a glob() sweep, which needs
    the config groups to expand."""
    import yaml
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        hydra_cfg = (yaml.safe_load(multirun_yaml.read_text()) or {}).get("hydra") or {}
    except (OSError, yaml.YAMLError, AttributeError) as e:
        raise ValueError(f"{multirun_yaml} does not parse: {e}") from None
    sweeper = (hydra_cfg.get("sweeper") or {}).get("_target_", "")
    if not sweeper.endswith("BasicSweeper"):
        raise ValueError(f"sweeper {sweeper or 'unknown'!r}: only the basic sweeper's job list is derived")
    task = list((hydra_cfg.get("overrides") or {}).get("task") or [])
    params = [f"{k}={v}" for k, v in ((hydra_cfg.get("sweeper") or {}).get("params") or {}).items()]
    try:
        overrides = OverridesParser.create().parse_overrides(params + task)
        return BasicSweeper.split_arguments(overrides, None)[0]
    except Exception as e:  # noqa: BLE001 - hydra's parser and sweeper raise several types
        raise ValueError(f"the sweep's overrides could not be expanded ({type(e).__name__}: {e})") from None


def _overrides_list(job_dir: Path) -> list[str] | None:
    """A job's command-line overrides as Hydra saved them (.hydra/overrides.yaml); None when there is no list of
    strings that reads."""
    import yaml

    try:
        items = yaml.safe_load((job_dir / ".hydra" / "overrides.yaml").read_text()) or []
    except (OSError, yaml.YAMLError):
        return None
    return items if isinstance(items, list) and all(isinstance(o, str) for o in items) else None


def _never_started(sweep: Path, job_dirs: Sequence[Path]) -> list[tuple[int, list[str]]]:
    """Jobs of `sweep` (numbered as Hydra numbers them) with no job directory: matched by the job's own
    .hydra/overrides.yaml, else by the job number that starts its directory name."""
    seen_ids, seen_nums = set(), set()
    for d in job_dirs:
        overrides = _overrides_list(d)
        if overrides is not None:
            seen_ids.add(_job_id(overrides))
            continue
        m = re.match(r"^(\d+)(_|$)", d.name)
        if m:
            seen_nums.add(int(m.group(1)))
    return [(i, job) for i, job in enumerate(sweep_jobs(sweep / "multirun.yaml"))
            if _job_id(job) not in seen_ids and i not in seen_nums]


def _label(job_dir: Path, root: Path, several_roots: bool) -> str:
    rel = job_dir.relative_to(root) if job_dir != root else Path(job_dir.name)
    parts = list(rel.parts)
    if parts:
        parts[-1] = re.sub(r"^(\d+)_.*$", r"\1", parts[-1])  # Hydra's "<num>_<overrides>" -> "<num>"
    label = "/".join(parts) or job_dir.name
    return f"{root.name}/{label}" if several_roots else label


def _setting_text(value: Any) -> str:
    """A setting's value with no space in it, so `key=value` pairs split on spaces: a mapping (eagle_auto's
    confidence_threshold) as {chain:0.3,dynamic:0.4}, a list as [1,2]."""
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{_setting_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_setting_text(v) for v in value) + "]"
    return str(value)


def settings_of(results: Mapping[str, Any]) -> str:
    """The strategy's own options (num_layers, min_n ...) from the job's config, as `key=value` pairs."""
    cfg = _get(results, "config", "strategy")
    if not isinstance(cfg, Mapping) or cfg.get("name") == "none":
        return ""  # target-only decoding reads none of its settings (none.yaml has them so sweeps can cross strategies)
    return " ".join(f"{key}={_setting_text(value)}" for key, value in sorted(cfg.items()) if key not in _NOT_SETTINGS)


def job_row(results: Mapping[str, Any], label: str) -> dict[str, Any]:
    """One table row from a results.json (missing fields become None)."""
    run = results.get("run") or {}
    em = results.get("exact_match")
    per_pos = _get(results, "strategy", "per_position_acceptance") or []
    terms = speed_terms(results) or {}
    return {
        "job": label,
        "strategy": run.get("strategy"),
        "settings": settings_of(results),
        "k": run.get("k"),
        "temperature": run.get("temperature"),
        "top_k": run.get("top_k"),
        "top_p": run.get("top_p"),
        "target": run.get("target"),
        "draft": run.get("draft"),
        "dataset": run.get("dataset"),
        "n_prompts": run.get("n_prompts"),
        "batch_size": run.get("batch_size"),
        "nodes_per_step": _get(results, "strategy", "nodes_per_step"),
        "mean_k": _get(results, "strategy", "mean_k"),
        "acceptance_length": _get(results, "strategy", "acceptance_length"),
        "al_per_verified_token": _get(results, "strategy", "al_per_verified_token"),
        "acceptance_rate": _get(results, "strategy", "acceptance_rate"),
        "tpot_baseline_ms": _get(results, "baseline", "tpot_ms", "mean"),
        "tpot_strategy_ms": _get(results, "strategy", "tpot_ms", "mean"),
        "speedup": _get(results, "speedup", "speedup"),
        "exact_match": f"{em['equal']}/{em['n']}" if isinstance(em, Mapping) and "equal" in em else None,
        "per_position_acceptance": " ".join(f"{a:.3f}" for a in per_pos if isinstance(a, (int, float))),
        "verify_ms_per_step": _get(results, "strategy", "verify_ms_per_step"),
        "tpot_baseline_ms_median": _get(results, "baseline", "tpot_ms", "median"),
        "tpot_strategy_ms_median": _get(results, "strategy", "tpot_ms", "median"),
        "tpot_strategy_ms_p90": _get(results, "strategy", "tpot_ms", "p90"),
        "speedup_per_prompt_median": _get(results, "speedup", "per_prompt", "median"),
        "speedup_per_prompt_p90": _get(results, "speedup", "per_prompt", "p90"),
        "output_tokens": _get(results, "strategy", "output_tokens"),
        # row-steps that accepted 0, 1, ..., k drafts
        "accepted_histogram": " ".join(str(c) for c in _get(results, "strategy", "accepted_histogram") or []),
        "scheduler": run.get("scheduler", "static"),
        "speedup_whole_batch": _get(results, "speedup", "whole_batch"),
        # whole-run output tokens per second (every row of every batch together, prefills included)
        "tokens_per_s_baseline": _get(results, "baseline", "output_tokens_per_s_overall"),
        "tokens_per_s_strategy": _get(results, "strategy", "output_tokens_per_s_overall"),
        "itl_baseline_ms_median": _get(results, "baseline", "itl_ms", "median"),
        "itl_baseline_ms_p99": _get(results, "baseline", "itl_ms", "p99"),
        "itl_strategy_ms_median": _get(results, "strategy", "itl_ms", "median"),
        "itl_strategy_ms_p99": _get(results, "strategy", "itl_ms", "p99"),
        # the speed model (metrics.speed_terms): speedup ~ AL / (r + draft), c = draft / draft passes per step
        **{f"speed_{key}": terms.get(key) for key in ("r", "draft", "c", "predicted")},
        # 95% bootstrap intervals over prompts (metrics.ratio_ci95); absent from results written before them
        **_bounds("acceptance_length", _get(results, "strategy", "acceptance_length_ci95")),
        **_bounds("speedup", _get(results, "speedup", "ci95")),
    }


def _bounds(name: str, ci: Any) -> dict[str, float | None]:
    low, high = ci if isinstance(ci, Sequence) and len(ci) == 2 else (None, None)
    return {f"{name}_ci_low": low, f"{name}_ci_high": high}


def _outputs_file(job_dir: Path) -> Path | None:
    """A job's outputs.jsonl, or outputs.jsonl.gz as an archived sweep may keep it; None without either."""
    return next((p for p in (Path(job_dir) / "outputs.jsonl", Path(job_dir) / "outputs.jsonl.gz") if p.is_file()), None)


def outputs_rows(job_dir: Path) -> list[dict[str, Any]] | None:
    """The lines of a job's outputs file, in order; None without one."""
    path = _outputs_file(job_dir)
    if path is None:
        return None
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


OutputsReader = Callable[[Path], list[dict[str, Any]] | None]  # outputs_rows, or a cached one (build_report)


def collect(roots: Sequence[Path | str], exclude: Sequence[Path | str] = (),
            read: OutputsReader = outputs_rows) -> Collected:
    """Read every results.json under `roots`; list job directories without one and files that do not parse.

    `exclude`: directories that are not jobs even inside a sweep (the report's own output folder). `read`: how a
    job's outputs file is read (build_report passes one that reads each file once).
    """
    roots = [Path(r) for r in roots]
    out = Collected()
    seen: set[Path] = {Path(e).resolve() for e in exclude}
    all_dirs: list[Path] = []
    for root in roots:
        if not root.is_dir():
            out.unreadable.append((root, "not a directory"))
            continue
        dirs = sorted(_job_dirs(root))
        all_dirs += [d for d in dirs if d.resolve() not in seen and d not in all_dirs]
        for sweep in sorted(m.parent for m in root.rglob("multirun.yaml")):
            try:
                jobs = _never_started(sweep, [d for d in dirs if d.parent == sweep])
            except ValueError as e:
                out.unknown_sweeps.append((sweep, str(e)))
                continue
            out.never_started += [(sweep, i, job) for i, job in jobs]
        for job_dir in dirs:
            if job_dir.resolve() in seen:
                continue
            seen.add(job_dir.resolve())
            path = job_dir / "results.json"
            if not path.exists():
                out.missing.append(job_dir)
                continue
            try:
                results = read_results(path)
                label = _label(job_dir, root, len(roots) > 1)
                out.jobs.append(Job(job_dir, label, results, job_row(results, label)))
            except (OSError, ValueError, TypeError, KeyError) as e:  # JSONDecodeError is a ValueError
                out.unreadable.append((path, f"{type(e).__name__}: {e}"))
    out.jobs.sort(key=lambda j: tuple(_sort_key(j.row.get(c)) for c in
                                      ("target", "dataset", "strategy", "settings", "temperature", "top_k", "top_p", "k", "job")))
    _exact_match_against_none_jobs(out.jobs, read)
    out.studies = studies(roots, all_dirs, out.jobs)
    return out


_SAME_REQUESTS = ("target", "dataset", "n_prompts", "max_new_tokens", "batch_size", "dtype")


def _outputs(job: Job, read: OutputsReader) -> dict[str, list[int]] | None:
    try:
        rows = read(job.path)
        return None if rows is None else {r["prompt_id"]: r["output_token_ids"] for r in rows if r}
    except (OSError, ValueError, KeyError, TypeError, EOFError):
        return None


def _failure(job_dir: Path) -> str:
    """' (failed: <message>)' when the job left an error.json (python -m specbench writes one in a sweep)."""
    try:
        error = json.loads((job_dir / "error.json").read_text()).get("error")
    except (OSError, ValueError, AttributeError):
        return ""
    return f" (failed: {str(error).splitlines()[0][:200]})" if error else ""


def _exact_match_against_none_jobs(jobs: Sequence[Job], read: OutputsReader) -> None:
    """A T = 0 job run without its own baseline (baseline=false) is compared, prompt by prompt, with a
    `none` job of the same target, dataset, prompt count, max_new_tokens, batch size and dtype in the
    same report; its exact_match then reads "equal/n vs <none job>"."""
    def key(job: Job) -> tuple[Any, ...]:
        return tuple((job.results.get("run") or {}).get(c) for c in _SAME_REQUESTS)

    references = {key(j): j for j in jobs if j.row["strategy"] == "none" and j.row["temperature"] == 0}
    for job in jobs:
        ref = references.get(key(job))
        if job.row["exact_match"] is not None or job.row["temperature"] != 0 or ref is None or ref is job:
            continue
        mine, theirs = _outputs(job, read), _outputs(ref, read)
        if not mine or not theirs or set(mine) != set(theirs):
            continue
        equal = sum(mine[pid] == theirs[pid] for pid in mine)
        job.row["exact_match"] = f"{equal}/{len(mine)} vs {ref.label}"


def _sort_key(v: Any) -> tuple[int, Any]:
    if v is None:
        return (2, "")
    return (0, v) if isinstance(v, (int, float)) else (1, str(v))


# --- Optuna studies ----------------------------------------------------------------------------


def _hydra_section(job_dir: Path) -> dict[str, Any]:
    """The `hydra` section of a job's .hydra/hydra.yaml ({} when there is none that reads)."""
    import yaml

    try:
        hydra_cfg = (yaml.safe_load((job_dir / ".hydra" / "hydra.yaml").read_text()) or {}).get("hydra")
    except (OSError, yaml.YAMLError, AttributeError):
        return {}
    return hydra_cfg if isinstance(hydra_cfg, dict) else {}


def _job_overrides(job_dir: Path) -> dict[str, str]:
    """A job's command-line settings (.hydra/overrides.yaml) as key -> value, both as written."""
    return dict(o.split("=", 1) for o in _overrides_list(job_dir) or [] if "=" in o)


def _same_value(written: str | None, value: Any) -> bool:
    """Whether a value as written on the command line (`strategy.k=3`: "3") is the study's `value` (3)."""
    import yaml

    if written is None:
        return False
    if written == str(value):
        return True
    try:
        return yaml.safe_load(written) == value
    except yaml.YAMLError:
        return False


def _objective_of(results: Mapping[str, Any], name: str) -> float | None:
    from specbench.errors import ConfigError
    from specbench.metrics import objective

    try:
        return objective(results, name)
    except ConfigError:  # an objective this specbench does not know
        return None


def studies(roots: Sequence[Path], job_dirs: Sequence[Path], jobs: Sequence[Job]) -> list[Study]:
    """The Optuna sweeps among `job_dirs`: the directories holding optimization_results.yaml, and those whose
    jobs ran under an Optuna sweeper (a study that did not end has no optimization_results.yaml)."""
    import yaml

    by_sweep: dict[Path, list[Path]] = defaultdict(list)
    for d in job_dirs:
        by_sweep[d.parent].append(d)
    hydra_of = {sweep: next((h for h in map(_hydra_section, sorted(dirs)) if h), {}) for sweep, dirs in by_sweep.items()}
    found = {p.parent for root in roots if root.is_dir() for p in root.rglob("optimization_results.yaml")}
    found |= {sweep for sweep, h in hydra_of.items() if "optuna" in str(_get(h, "sweeper", "_target_") or "").lower()}
    finished = {j.path: j for j in jobs}
    out = []
    for sweep in sorted(found):
        dirs = sorted(by_sweep.get(sweep, []))
        sweeper = _get(hydra_of.get(sweep), "sweeper") or {}
        try:
            answer = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
        except (OSError, yaml.YAMLError):
            answer = None
        answer = answer if isinstance(answer, dict) else {}
        best_params = answer.get("best_params") if isinstance(answer.get("best_params"), dict) else None
        done = [finished[d] for d in dirs if d in finished]
        name = next((str(o) for j in done if (o := _get(j.results, "config", "objective"))), "speedup")
        direction = str(sweeper.get("direction") or "maximize")
        trials = [Trial(j, _objective_of(j.results, name), _job_overrides(j.path)) for j in done]
        sign = 1 if direction == "minimize" else -1
        trials.sort(key=lambda t: (t.value is None, sign * (t.value or 0.0), _sort_key(t.job.label)))
        if best_params:
            searched = list(best_params)
        else:  # the preset's params and whatever the trials set differently
            keys = {k for t in trials for k in t.overrides}
            searched = sorted({*map(str, sweeper.get("params") or {}),
                               *(k for k in keys if len({t.overrides.get(k) for t in trials}) > 1)})
        n_trials = sweeper.get("n_trials")
        best_value = answer.get("best_value")
        out.append(Study(sweep, name, direction, n_trials if isinstance(n_trials, int) else None, searched, best_params,
                         float(best_value) if isinstance(best_value, (int, float)) else None, trials, dirs))
    return out


def study_section(study: Study) -> str:
    """Markdown: the study's best settings and objective, its spread over the trials, and the trials ranked."""
    from specbench.metrics import OBJECTIVES, spread

    name = study.objective
    what = OBJECTIVES[name][0] if name in OBJECTIVES else "not an objective this specbench knows"
    unfinished = [d for d in study.job_dirs if not (d / "results.json").exists()]
    failed = sum((d / "error.json").exists() for d in unfinished)
    counts = [f"{len(study.trials)} finished"] + [f"{failed} failed"] * bool(failed)
    counts += [f"{len(unfinished) - failed} unfinished"] * bool(len(unfinished) - failed)
    never = (study.n_trials or 0) - len(study.job_dirs)
    counts += [f"{never} never started"] * (never > 0)
    asked = f"{study.n_trials} trials asked, " if study.n_trials else ""
    parts = [f"## Optuna study: {study.path}", "",
             f"{study.direction.capitalize()}s `{name}` ({what}) over {', '.join(study.searched) or '-'}: "
             f"{asked}{', '.join(counts)}."]
    best = study.best
    if study.best_params is not None:
        settings = " ".join(f"{k}={v}" for k, v in study.best_params.items())
        where = (f" (job {best[0].job.label}" + "".join(f"; also job {t.job.label}: {_fmt(t.value)}" for t in best[1:]) + ")"
                 if best else " (no job directory with these settings and a results.json)")
        parts.append(f"\n**Best settings** (optimization_results.yaml): `{settings}`, {name} = {_fmt(study.best_value)}{where}.")
    elif best:
        settings = " ".join(f"{k}={best[0].overrides.get(k, '-')}" for k in study.searched)
        parts.append(f"\nThe study did not end (no optimization_results.yaml). **Best settings so far**: `{settings}`, "
                     f"{name} = {_fmt(best[0].value)} (job {best[0].job.label}).")
    else:
        parts.append("\nNo trial finished with a value: the study has no best settings.")
    if best:
        r = best[0].job.row
        ci = (f"95% interval over prompts {_fmt(r['speedup_ci_low'])}-{_fmt(r['speedup_ci_high'])}; "
              if r.get("speedup_ci_low") is not None else "")
        parts.append(f"That job: acceptance length {_fmt(r['acceptance_length'])}, speedup {_fmt(r['speedup'])} ({ci}per prompt: "
                     f"median {_fmt(r['speedup_per_prompt_median'])}, p90 {_fmt(r['speedup_per_prompt_p90'])}, "
                     f"n={r['n_prompts']}), strategy TPOT {_fmt(r['tpot_strategy_ms'])} ms vs {_fmt(r['tpot_baseline_ms'])} ms.")
    values = sorted(t.value for t in study.trials if t.value is not None)
    if values:
        parts.append(f"`{name}` over the {len(values)} trials with a value: min {_fmt(values[0])}, median "
                     f"{_fmt(spread(values)['median'])}, max {_fmt(values[-1])}.")
    if never > 0:
        parts.append(f"{never} trial{'s' if never != 1 else ''} never started: a study picks each trial's settings as it goes, "
                     f"so they cannot be listed. `+resume=true` with the same overrides and hydra.sweep.dir replays a seeded "
                     f"study: its finished trials are proposed again and skipped, and the study goes on.")
    if study.trials:
        extra = [c for c in ("acceptance_length", "speedup", "tpot_strategy_ms") if c != name]
        header = ["rank", "job", *study.searched, name, *extra]
        rows = [[i + 1, t.job.label, *(t.overrides.get(k, "-") for k in study.searched), t.value, *(t.job.row[c] for c in extra)]
                for i, t in enumerate(study.trials)]
        parts += ["", f"Trials by {name}, best first:", "", markdown_table(header, rows)]
    return "\n".join(parts) + "\n"


# --- tables ------------------------------------------------------------------------------------


def _fmt(v: Any) -> str:
    """Numbers to 3 decimals with trailing zeros dropped (T=0 reads "0", AL 2.5 reads "2.5"); None -> "-"."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}".rstrip("0").rstrip(".") if abs(v) < 100 else f"{v:.1f}"
    return str(v) if str(v) else "-"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in header]] + [[_fmt(v) for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    return "\n".join([line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in cells[1:]])


def _markdown_columns(rows: Sequence[Mapping[str, Any]]) -> tuple[list[str], dict[str, Any]]:
    """Columns for report.md, and the collapsed ones' common values."""
    constant = {c: rows[0][c] for c in _COLLAPSIBLE if rows and len({repr(r[c]) for r in rows}) == 1}
    return [c for c in COLUMNS if c not in constant and c not in _CSV_ONLY], constant


def _csv_text(header: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(header), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in header})
    return buf.getvalue()


def _job_title(job: Job, settings: str) -> str:
    r = job.row
    extra = f" {settings}" if settings else ""
    return f"{job.label}: {r['strategy']}{extra} k={r['k']} T={_fmt(r['temperature'])}"


def category_tables(jobs: Sequence[Job]) -> tuple[str, list[dict[str, Any]]]:
    """Spec-Bench style: acceptance length and speedup per category (rows = jobs). Markdown + long rows."""
    with_cats = [j for j in jobs if isinstance(j.results.get("by_category"), Mapping) and j.results["by_category"]]
    if not with_cats:
        return "", []
    cats = sorted({c for j in with_cats for c in j.results["by_category"]})
    long_rows: list[dict[str, Any]] = []
    tables = {"acceptance_length": [], "speedup": []}
    shown, _ = _settings_per_strategy([j.row for j in with_cats])  # as in the main table: what tells jobs apart
    for j, settings in zip(with_cats, shown):
        by = j.results["by_category"]
        al_row: list[Any] = [_job_title(j, settings)]
        sp_row: list[Any] = [_job_title(j, settings)]
        for c in cats:
            block = by.get(c) or {}
            al, sp = _get(block, "strategy", "acceptance_length"), _get(block, "speedup", "speedup")
            al_row.append(al)
            sp_row.append(sp)
            if c in by:
                long_rows.append({"job": j.label, "strategy": j.row["strategy"], "settings": j.row["settings"],
                                  "k": j.row["k"], "temperature": j.row["temperature"], "category": c,
                                  "n_prompts": _get(block, "strategy", "n_prompts"), "acceptance_length": al, "speedup": sp})
        al_row.append(j.row["acceptance_length"])
        sp_row.append(j.row["speedup"])
        tables["acceptance_length"].append(al_row)
        tables["speedup"].append(sp_row)
    header = ["job", *cats, "overall"]
    md = ("## Acceptance length by category\n\n" + markdown_table(header, tables["acceptance_length"])
          + "\n\n## Speedup by category (baseline TPOT / strategy TPOT)\n\n" + markdown_table(header, tables["speedup"]) + "\n")
    return md, long_rows


# --- plots -------------------------------------------------------------------------------------


def _short(value: Any) -> str:
    """A path-like value as its last two parts (plots label series with it); other values unchanged."""
    text = str(value)
    return "/".join(Path(text).parts[-2:]) if "/" in text else text


def _settings(row: Mapping[str, Any], keep_none: bool = False) -> dict[str, str]:
    """A row's settings string back as {key: value}. It splits only before `key=`, so a value with a space in it (a
    path; a mapping as older results.json files wrote it, {'chain': 0.3, ...}) stays whole."""
    pairs = (kv.split("=", 1) for kv in re.split(r"\s+(?=[A-Za-z_][\w.]*=)", str(row["settings"] or "").strip()) if "=" in kv)
    return {k: v for k, v in pairs if keep_none or v != "None"}


def _varying_settings(rows: Sequence[Mapping[str, Any]]) -> dict[str, set[str]]:
    """Per strategy, the settings that tell its jobs apart: those whose value differs between them (a job lacking one,
    or holding None, counts as None). The table's settings column and the plots' series labels show only these."""
    each: dict[str, list[dict[str, str]]] = defaultdict(list)  # strategy -> each job's settings
    for r in rows:
        each[str(r["strategy"])].append(_settings(r))
    return {s: {k for k in set().union(*all_) if len({one.get(k) for one in all_}) > 1} for s, all_ in each.items()}


def _settings_per_strategy(rows: Sequence[Mapping[str, Any]]) -> tuple[list[str], dict[str, str]]:
    """For report.md: each row's settings that tell its strategy's jobs apart (`_varying_settings`), and per strategy
    the others, which all its jobs share, shown once under the table (report.csv keeps them all)."""
    varying = _varying_settings(rows)
    parsed = [_settings(r, keep_none=True) for r in rows]
    shown = [" ".join(f"{k}={v}" for k, v in p.items() if k in varying[str(r["strategy"])]) for r, p in zip(rows, parsed)]
    first: dict[str, dict[str, str]] = {}  # strategy -> its first job's settings
    for r, p in zip(rows, parsed):
        first.setdefault(str(r["strategy"]), p)
    notes = {s: " ".join(f"{k}={v}" for k, v in sorted(p.items()) if k not in varying[s]) for s, p in first.items()}
    return shown, {s: text for s, text in notes.items() if text}


def _series_key(row: Mapping[str, Any], varying: Sequence[str], shown_settings: set[str]) -> str:
    """strategy (its settings that differ between the jobs of that strategy) + the other columns that differ."""
    settings = " ".join(f"{k}={_short(v)}" for k, v in _settings(row).items() if k in shown_settings)
    label = str(row["strategy"]) + (f" ({settings})" if settings else "")
    extra = [f"{c}={_short(row[c])}" for c in varying]
    return label + (" " + " ".join(extra) if extra else "")


def _grouped(jobs: Sequence[Job]) -> dict[Any, dict[str, list[Job]]]:
    """(dataset, temperature) -> series label -> jobs. Series: strategy + its settings that differ between its jobs
    + whatever else differs between jobs (the draft only where the strategy has one). Settings one strategy's jobs
    all share are left out of its label (the report's table lists them)."""
    context = ("target", "draft", "top_k", "top_p", "batch_size")
    varying = [c for c in context if len({repr(j.row[c]) for j in jobs if c != "draft" or j.row["draft"]}) > 1]
    shown = _varying_settings([j.row for j in jobs])
    out: dict[Any, dict[str, list[Job]]] = defaultdict(lambda: defaultdict(list))
    for j in jobs:
        cols = [c for c in varying if c != "draft" or j.row["draft"]]
        strategy = str(j.row["strategy"])
        out[(str(j.row["dataset"]), j.row["temperature"])][_series_key(j.row, cols, shown.get(strategy, set()))].append(j)
    return out


def _panels(keys: Sequence[tuple[str, Any]], title: str):
    """One panel per (dataset, temperature): datasets down, temperatures across."""
    from matplotlib.figure import Figure  # no pyplot: no global backend state, renders with Agg

    datasets = sorted({d for d, _ in keys})
    temps = sorted({t for _, t in keys}, key=_sort_key)
    fig = Figure(figsize=(5.0 * len(temps), 3.6 * len(datasets) + 0.9), layout="constrained")
    grid = fig.subplots(len(datasets), len(temps), squeeze=False)
    fig.suptitle(title)
    axes = {}
    for r, dataset in enumerate(datasets):
        for c, temp in enumerate(temps):
            ax = axes[(dataset, temp)] = grid[r][c]
            ax.set_title(f"{dataset}, temperature {_fmt(temp)}" if len(datasets) > 1 or dataset != "None"
                         else f"temperature {_fmt(temp)}")
            if (dataset, temp) not in keys:
                ax.set_visible(False)
    return fig, axes


def _legend_below(fig, axes) -> None:
    """One legend for the figure, under the panels (series are the same in every panel)."""
    handles: dict[str, Any] = {}
    for ax in axes.values():
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    labels = sorted(handles)
    if labels:
        fig.legend([handles[lb] for lb in labels], labels, loc="outside lower center", ncols=2 if len(labels) > 4 else 1,
                   fontsize="small")


def ci_bars(members: Sequence[Job], metric: str) -> list[tuple[int, float, float, float]]:
    """(k, value, 95% low, 95% high) for each k that one job of `members` ran with an interval over prompts (repeated
    jobs at a k are plotted as their mean, which has no such interval)."""
    by_k: dict[int, list[Job]] = defaultdict(list)
    for j in members:
        by_k[j.row["k"]].append(j)
    bars = []
    for k, (j,) in ((k, js) for k, js in sorted(by_k.items()) if len(js) == 1):
        low, high = j.row.get(f"{metric}_ci_low"), j.row.get(f"{metric}_ci_high")
        if isinstance(low, (int, float)) and isinstance(high, (int, float)):
            bars.append((k, j.row[metric], low, high))
    return bars


def _plot_vs_k(jobs: Sequence[Job], metric: str, ylabel: str, path: Path, ref_line: float | None) -> Path | None:
    groups = _grouped([j for j in jobs if isinstance(j.row[metric], (int, float)) and isinstance(j.row["k"], int)
                       and j.row["k"] > 0])  # target-only (k = 0) is the reference line, not a series
    if not groups:
        return None
    with_bars = any(ci_bars(m, metric) for g in groups.values() for m in g.values())
    fig, axes = _panels(list(groups), f"{ylabel} vs k" + ("\nbars: 95% interval over prompts" if with_bars else ""))
    for key, ax in axes.items():
        if key not in groups:
            continue
        every_k: set[int] = set()
        for label, members in sorted(groups[key].items()):
            by_k: dict[int, list[float]] = defaultdict(list)
            for j in members:
                by_k[j.row["k"]].append(j.row[metric])
            ks = sorted(by_k)
            every_k.update(ks)
            line, = ax.plot(ks, [sum(by_k[k]) / len(by_k[k]) for k in ks], "o-", label=label)  # mean over repeated jobs
            if bars := ci_bars(members, metric):
                ax.errorbar([b[0] for b in bars], [b[1] for b in bars], yerr=[[b[1] - b[2] for b in bars],
                            [b[3] - b[1] for b in bars]], fmt="none", ecolor=line.get_color(), capsize=3, linewidth=1)
        if ref_line is not None:
            ax.axhline(ref_line, color="grey", linestyle="--", linewidth=1)
        ax.set_xlabel("k (draft tokens per step)")
        ax.set_ylabel(ylabel)
        ax.xaxis.get_major_locator().set_params(integer=True)
        if len(every_k) <= 12:  # a tick at each k the jobs ran (one k alone would get ticks at 1.900 ... 2.100)
            ax.set_xticks(sorted(every_k))
            ax.set_xlim(min(every_k) - 0.5, max(every_k) + 0.5)
        ax.grid(alpha=0.3)
    _legend_below(fig, axes)
    fig.savefig(path, dpi=110)
    return path


def _plot_per_position(jobs: Sequence[Job], path: Path) -> Path | None:
    usable = [j for j in jobs if isinstance(_get(j.results, "strategy", "per_position_acceptance"), list)
              and j.results["strategy"]["per_position_acceptance"]]
    groups = _grouped(usable)
    if not groups:
        return None
    fig, axes = _panels(list(groups), "per-position acceptance at each strategy's largest k")
    for key, ax in axes.items():
        if key not in groups:
            continue
        for label, members in sorted(groups[key].items()):
            top = max(members, key=lambda j: j.row["k"] or 0)
            per_pos = [a if isinstance(a, (int, float)) else float("nan") for a in top.results["strategy"]["per_position_acceptance"]]
            ax.plot(range(1, len(per_pos) + 1), per_pos, "o-", label=label)
        ax.set_xlabel("draft position")
        ax.set_ylabel("accepted at position / drafts")
        ax.set_ylim(0, 1.02)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
    _legend_below(fig, axes)
    fig.savefig(path, dpi=110)
    return path


# --- the report --------------------------------------------------------------------------------


def per_prompt_acceptance(job_dir: Path, read: OutputsReader = outputs_rows) -> tuple[list[str], list[int], list[int]] | None:
    """A job's prompt ids, accepted tokens and drafts, one each per prompt in its outputs file's order; None without
    one. `read`: how the outputs file is read (build_report passes one that reads each job once)."""
    rows = read(job_dir)
    if rows is None:
        return None
    return ([str(r["prompt_id"]) for r in rows], [int(r["metrics"]["accepted_tokens"]) for r in rows],
            [int(r["metrics"]["drafts"]) for r in rows])


def _stretch_name(stretch: Mapping[str, Any]) -> str:
    return f"{stretch['start']}-{stretch['end'] - 1}" if stretch["end"] is not None else f"{stretch['start']}+"


def by_position(jobs: Sequence[Job], read: OutputsReader = outputs_rows) -> list[tuple[Job, list[dict[str, Any]]]]:
    """Each drafting job's AL over stretches of its responses (metrics.al_by_position), for the jobs whose outputs
    file records every prompt's tokens_per_step (written since 2026-12-07); others are left out of this section."""
    found = []
    for j in jobs:
        if j.row["strategy"] == "none":
            continue
        try:
            rows = read(j.path) or []
        except (OSError, ValueError, EOFError):  # an unreadable outputs file costs this section its job, no more
            continue
        steps = [(r.get("metrics") or {}).get("tokens_per_step") if isinstance(r, dict) else None for r in rows]
        if steps and all(isinstance(s, list) and all(isinstance(n, int) for n in s) for s in steps):
            found.append((j, al_by_position(steps)))
    return found


def by_position_section(found: Sequence[tuple[Job, list[dict[str, Any]]]]) -> str:
    """report.md's table of AL by position in the response (rows = jobs, columns = stretches of positions)."""
    names = sorted({(s["start"], _stretch_name(s)) for _, stretches in found for s in stretches})
    rows = []
    for j, stretches in found:
        cell = {_stretch_name(s): f"{s['acceptance_length']:.3f} ({s['prompts']})" for s in stretches}
        rows.append([j.label, j.row["strategy"], _fmt(j.row["k"]), _fmt(j.row["temperature"]), _fmt(j.row["dataset"]),
                     *(cell.get(name, "-") for _, name in names)])
    return "\n".join([
        "## AL by position in the response", "",
        "AL (tokens / steps) of the steps whose first token lies at those positions of the response (0 is the "
        "prefill's token), and in brackets the prompts with such a step; each prompt's last step is left out, since "
        "max_new_tokens or EOS may have cut it. Later stretches hold only the prompts that ran that long.", "",
        markdown_table(["job", "strategy", "k", "temperature", "dataset", *(name for _, name in names)], rows)])


def _plot_by_position(found: Sequence[tuple[Job, list[dict[str, Any]]]], path: Path) -> Path | None:
    if not found:
        return None
    names = sorted({(s["start"], _stretch_name(s)) for _, stretches in found for s in stretches})
    index = {name: i for i, (_, name) in enumerate(names)}
    keys = sorted({(str(j.row["dataset"]), j.row["temperature"]) for j, _ in found}, key=lambda kt: (kt[0], _sort_key(kt[1])))
    fig, axes = _panels(keys, "AL by position in the response")
    colors = [f"C{i % 10}" for i in range(len(found))]  # one color a job across the panels: the legend is shared
    for (j, stretches), color in zip(found, colors):
        ax = axes[(str(j.row["dataset"]), j.row["temperature"])]
        ax.plot([index[_stretch_name(s)] for s in stretches], [s["acceptance_length"] for s in stretches], "o-",
                color=color, label=f"{j.label} ({j.row['strategy']}, k={_fmt(j.row['k'])})")
    values = [s["acceptance_length"] for _, stretches in found for s in stretches]
    low, high = min(values), max(values)
    margin = max(0.05, 0.05 * (high - low))
    for ax in axes.values():
        ax.set_ylim(low - margin, high + margin)  # one scale in every panel, so their slopes compare
        ax.set_xticks(range(len(names)), [name for _, name in names], fontsize="small")
        ax.set_xlabel("position in the response")
        ax.set_ylabel("acceptance length")
        ax.grid(alpha=0.3)
    _legend_below(fig, axes)
    fig.savefig(path, dpi=110)
    return path


def against_section(jobs: Sequence[Job], reference: Path, read: OutputsReader = outputs_rows) -> str:
    """report.md's comparison of every job with `reference` (a job directory) on the prompts both ran: each job's AL
    minus the reference's, with a 95% interval from resampling the prompts in pairs (metrics.paired_difference_ci).
    A job whose outputs.jsonl is missing or holds other prompts is listed as such."""
    ref = per_prompt_acceptance(reference, read)
    if ref is None:
        return f"## AL against {reference}\n\n{reference} has no outputs.jsonl: nothing to compare against."

    def al(accepted: list[int], drafts: list[int]) -> float:  # metrics.summarize's AL
        return 1 + sum(accepted) / max(1, sum(drafts))

    ref_ids, ref_accepted, ref_drafts = ref
    ref_al = al(ref_accepted, ref_drafts)
    rows, other = [], []
    for j in jobs:
        if j.path.resolve() == Path(reference).resolve():
            continue
        mine = per_prompt_acceptance(j.path, read)
        if mine is None or mine[0] != ref_ids:
            other.append(f"{j.label} ({'no outputs.jsonl' if mine is None else 'other prompts'})")
            continue
        _, accepted, drafts = mine
        ci = paired_difference_ci(ref_accepted, ref_drafts, accepted, drafts)
        rows.append([j.label, j.row["strategy"], _fmt(j.row["k"]), _fmt(j.row["temperature"]),
                     f"{al(accepted, drafts):.3f}", f"{al(accepted, drafts) - ref_al:+.4f}",
                     "-" if ci is None else f"{ci[0]:+.4f} to {ci[1]:+.4f}", str(len(ref_ids))])
    text = [f"## AL against {reference} (AL {ref_al:.3f}), paired over the same prompts", "",
            "Each job's AL minus the reference's on the same prompts; the interval resamples the prompts, each "
            "with both jobs' counts (95%, percentile bootstrap, seeded): how much the difference depends on which "
            "prompts were drawn.", ""]
    text.append(markdown_table(["job", "strategy", "k", "temperature", "AL", "difference", "95% interval", "prompts"],
                               rows) if rows else "No other job ran the reference's prompts.")
    if other:
        text.append("\nNot compared: " + ", ".join(other))
    return "\n".join(text)


def build_report(roots: Sequence[Path | str], out_dir: Path | str | None = None,
                 against: Path | str | None = None) -> ReportFiles:
    """Collect, write report.md / report.csv / plots into `out_dir` (default: the first root) and return them; with
    `against` (a job directory) also each job's AL against that job's, paired over the prompts both ran."""
    roots = [Path(r) for r in roots]
    out = Path(out_dir) if out_dir is not None else roots[0]
    out.mkdir(parents=True, exist_ok=True)
    read = functools.cache(outputs_rows)  # each job's outputs file read once in this report
    found = collect(roots, exclude=[out], read=read)
    rows = [j.row for j in found.jobs]

    shown, shared = _settings_per_strategy(rows)
    md_rows = [{**r, "settings": text} for r, text in zip(rows, shown)]
    columns, constant = _markdown_columns(md_rows)
    parts = [f"# specbench report: {len(rows)} job{'s' if len(rows) != 1 else ''} from {', '.join(str(r) for r in roots)}", ""]
    if rows:
        if not any(shown):  # no strategy's jobs differ in a setting: the list under the table has them
            columns.remove("settings")
        parts.append(markdown_table(columns, [[r[c] for c in columns] for r in md_rows]))
        if constant:
            parts.append("\nSame in every job: " + ", ".join(f"{c}={_fmt(v)}" for c, v in constant.items()))
        if shared:
            parts.append("\nSettings every job of a strategy shares (the settings column shows the others; report.csv "
                         "has them all):")
            parts += [f"- {strategy}: {text}" for strategy, text in sorted(shared.items())]
        parts.append("\nacceptance_length = 1 + accepted / drafts (bonus included); TPOT means in ms; "
                     "speedup = baseline TPOT / strategy TPOT; exact_match = prompts identical to the baseline (T = 0); "
                     "\"vs <job>\": to that `none` job's outputs (same target, prompts and settings), for jobs run "
                     "with baseline=false.")
    else:
        parts.append("No results.json found.")
    for study in found.studies:
        parts.append("\n" + study_section(study).rstrip("\n"))
    if found.missing:
        parts.append(f"\n{len(found.missing)} job director{'ies' if len(found.missing) != 1 else 'y'} without results.json "
                     "(crashed or unfinished), skipped:")
        parts += [f"- {p}{_failure(p)}" for p in found.missing]
    if found.never_started:
        n = len(found.never_started)
        parts.append(f"\n{n} job{'s' if n != 1 else ''} of the sweep never started (in multirun.yaml, no job directory):")
        parts += [f"- {sweep} job {i}: {' '.join(job)}" for sweep, i, job in found.never_started]
    if found.never_started or any((d.parent / "multirun.yaml").exists() for d in found.missing):
        parts.append("\nTo run only the jobs without a complete results.json: `python -m specbench -m <the same overrides, "
                     "in the same order> hydra.sweep.dir=<the sweep directory> +resume=true`.")
    if found.unknown_sweeps:
        parts.append("\nJobs that never started are not listed for:")
        parts += [f"- {p}: {why}" for p, why in found.unknown_sweeps]
    if found.unreadable:
        parts.append(f"\n{len(found.unreadable)} unreadable, skipped:")
        parts += [f"- {p}: {why}" for p, why in found.unreadable]
    if against is not None:
        parts.append("\n" + against_section(found.jobs, Path(against), read))
    positions = by_position(found.jobs, read)
    if positions:
        parts.append("\n" + by_position_section(positions))
    cat_md, cat_rows = category_tables(found.jobs)
    text = "\n".join(parts) + "\n"
    if cat_md:
        text += "\n" + cat_md

    md_path, csv_path = out / "report.md", out / "report.csv"
    csv_path.write_text(_csv_text(COLUMNS, rows))
    cat_csv = None
    if cat_rows:
        cat_csv = out / "report_by_category.csv"
        cat_csv.write_text(_csv_text(list(cat_rows[0]), cat_rows))
    plots: list[Path] = []
    for name, draw in (
        ("acceptance_length_vs_k", lambda p: _plot_vs_k(found.jobs, "acceptance_length", "acceptance length", p, None)),
        ("speedup_vs_k", lambda p: _plot_vs_k(found.jobs, "speedup", "speedup over target-only", p, 1.0)),
        ("per_position_acceptance", lambda p: _plot_per_position(found.jobs, p)),
        ("al_by_position", lambda p: _plot_by_position(positions, p)),
    ):
        try:
            written = draw(out / f"{name}.png")
        except Exception as e:  # noqa: BLE001 - odd values in one file must not cost the whole report
            text += f"\nplot {name} failed: {type(e).__name__}: {e}\n"
            continue
        if written is not None:
            plots.append(written)
    if plots:
        text += "\n## Plots\n\n" + "\n".join(f"![{p.stem}]({p.name})" for p in plots) + "\n"
    md_path.write_text(text)
    return ReportFiles(out, md_path, csv_path, plots, cat_csv, text, found)


def _print_report(files: ReportFiles) -> None:
    print(files.text)
    written = [files.markdown, files.csv, *([files.by_category_csv] if files.by_category_csv else []), *files.plots]
    print("written: " + ", ".join(str(p) for p in written))


class SweepReport(Callback):
    """Hydra callback (conf/config.yaml, hydra.callbacks.report): when a `-m` sweep ends, its report (what
    `python -m specbench.report <sweep dir>` gives) is written into the sweep's directory and printed, so a sweep
    ends with one table over its jobs. It runs after every job, in the process that launched them. A report that
    fails says so and how to make it again; it never fails the sweep, whose results are on disk by then."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep = Path(str(config.hydra.sweep.dir))
        try:
            files = build_report([sweep])
        except Exception as e:  # noqa: BLE001 (the sweep's results stay; only the summary is lost)
            print(f"specbench: the sweep's report failed ({type(e).__name__}: {e}); every job's results are in {sweep}; "
                  f"to make it: python -m specbench.report {sweep}", file=sys.stderr)
            return
        print(f"\nspecbench: the sweep's report ({len(files.collected.jobs)} jobs; "
              f"python -m specbench.report {sweep} makes it again)\n")
        _print_report(files)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specbench.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path, help="directories to search for results.json (recursively)")
    parser.add_argument("--out", type=Path, default=None, help="where to write report.md, report.csv and plots "
                                                               "(default: the first directory)")
    parser.add_argument("--against", type=Path, default=None,
                        help="a job directory: every job's AL against its, paired over the prompts both ran, with a "
                             "95%% interval")
    args = parser.parse_args(argv)
    if args.against is not None and _outputs_file(args.against) is None:
        parser.error(f"--against {args.against}: no outputs.jsonl (or .gz) there; give a job's directory (it holds "
                     "results.json and outputs.jsonl)")
    missing = [str(d) for d in args.dirs if not d.is_dir()]
    if missing:  # a mistyped sweep directory: say so, write nothing (the default --out is the first directory)
        parser.error(f"no such directory: {', '.join(missing)}; give the sweep's directory (multirun/<date>/<time>) "
                     f"or a job's")
    files = build_report(args.dirs, args.out, args.against)
    _print_report(files)
    return 0 if files.collected.jobs else 1


if __name__ == "__main__":
    sys.exit(main())
