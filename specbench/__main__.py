"""`python -m specbench [overrides]`: a thin Hydra entry point over specbench.run.run(cfg).

In a sweep (-m), a job that fails writes error.json (the message and traceback) into its own
directory and the sweep goes on: finished jobs keep their results.json, and `specbench.report`
lists the failed ones and those that never started. A single run fails loudly.

`+resume=true` skips a job whose directory already holds a complete results.json; every other job
(failed, interrupted, never started) runs again. Re-run an interrupted sweep with the same overrides
in the same order (Hydra numbers the jobs by them) and `hydra.sweep.dir=<its directory>`; the
`resume` key is left out of the job directories' names, so the jobs land in their old directories.

A settings optimizer (`-m hydra/sweeper=specbench_optuna`, the hydra-optuna-sweeper plugin) maximizes
what main() returns: the job's `objective` (specbench.metrics.OBJECTIVES), read from its results.json;
a job skipped by `+resume=true` returns the one it recorded, so a seeded study replays its trials. A
failed job returns None: the plugin cannot cast it to float, marks the trial FAIL (the sampler and the
study's best leave it out) and asks for the next one. Raising instead would stop the study (the plugin
re-raises a job's exception), and so would NaN (optuna 2.10 refuses NaN, and the plugin's fallback, telling
FAIL with that value, raises). A mistake that every trial shares stops the study before its first job: an
unknown objective, a sweeper that minimizes, a speedup objective with baseline=false.
"""

from __future__ import annotations

import json
import traceback
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from specbench.config import CONF_DIR
from specbench.errors import ConfigError, unknown
from specbench.metrics import NEEDS_BASELINE, OBJECTIVES, objective


def _in_sweep() -> tuple[bool, Path | None]:
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    return str(hc.mode).endswith("MULTIRUN"), Path(hc.runtime.output_dir)


def _optimizer() -> Any:
    """The sweeper's config when it optimizes main()'s return value (any sweeper but Hydra's basic one), else None."""
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    if not str(hc.mode).endswith("MULTIRUN") or str(hc.sweeper.get("_target_", "")).endswith("BasicSweeper"):
        return None
    return hc.sweeper


def finished(job_dir: Path) -> bool:
    """Whether `job_dir` holds a complete results.json (what +resume=true skips)."""
    from specbench.report import read_results

    try:
        read_results(job_dir / "results.json")
    except (OSError, ValueError):
        return False
    return True


def check_objective(cfg: DictConfig, optimizer: Any) -> None:
    """ConfigError for what would make every trial of an optimizing sweep fail or mislead: an unknown objective
    (refused in any run), a direction other than maximize, a speedup objective without the baseline."""
    name = cfg.get("objective", "speedup")
    if name not in OBJECTIVES:
        raise unknown("objective", name, OBJECTIVES)
    if optimizer is None:
        return
    direction = optimizer.get("direction", "maximize")
    direction = getattr(direction, "name", direction)  # Optuna's Direction enum or its name
    if direction != "maximize":
        raise ConfigError(f"hydra.sweeper.direction={direction!r}; allowed: maximize (objective={name} is better when "
                          f"higher). Use hydra/sweeper=specbench_optuna, or add hydra.sweeper.direction=maximize")
    if name in NEEDS_BASELINE and not cfg.get("baseline", True):
        raise ConfigError(f"objective={name} is measured against the baseline, and baseline=false; allowed: baseline=true, "
                          f"or objective=acceptance_length / al_per_draft_forward")


def _raise_if_no_draft_forward(cfg: DictConfig) -> None:
    """al_per_draft_forward divides by the draft forwards per step: a lookup strategy (ngram, none) has none."""
    from specbench.config import target_class
    from specbench.strategies.base import Proposer

    if cfg.get("objective") != "al_per_draft_forward":
        return
    cls = target_class(cfg.strategy, "strategy", Proposer)
    if cls.drafting == "lookup":
        raise ConfigError(f"objective=al_per_draft_forward divides by the draft forwards per step, and strategy "
                          f"{cfg.strategy.get('name')!r} drafts without a forward; allowed: a strategy with a draft "
                          f"forward, or objective=speedup / acceptance_length")


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> float | None:
    from specbench.report import read_results
    from specbench.run import run

    sweep, job_dir = _in_sweep()
    optimizer = _optimizer()
    try:
        check_objective(cfg, optimizer)
    except ConfigError as e:  # the same for every job: stop the sweep now (SystemExit passes Hydra's job runner)
        raise SystemExit(f"specbench: configuration error: {e}") from None
    if cfg.get("output_dir"):
        job_dir = Path(cfg.output_dir)
    if cfg.get("resume") and job_dir is not None and finished(job_dir):
        print(f"specbench: {job_dir / 'results.json'} is complete; skipped (resume=true)")
        return objective(read_results(job_dir / "results.json"), cfg.objective)
    if job_dir is not None:
        (job_dir / "error.json").unlink(missing_ok=True)  # a previous attempt's: this one decides
    try:
        if optimizer is not None:
            _raise_if_no_draft_forward(cfg)
        report = run(cfg)
    except Exception as e:
        if sweep and job_dir is not None:
            (job_dir / "error.json").write_text(json.dumps(
                {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}, indent=1))
            print(f"specbench: this job failed ({type(e).__name__}: {e}); the sweep goes on. See {job_dir / 'error.json'}")
            return None  # a failed trial (see the module docstring)
        if isinstance(e, ConfigError):
            raise SystemExit(f"specbench: configuration error: {e}") from None
        raise
    value = objective(report.results, cfg.objective)
    if optimizer is not None:
        print(f"specbench: objective {cfg.objective} = {value}" + ("" if value is not None else
              " (not in this job's results); the trial counts as failed"))
    return value


if __name__ == "__main__":
    main()
