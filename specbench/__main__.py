"""`python -m specbench [overrides]`: a thin Hydra entry point over specbench.run.run(cfg).

In a sweep (-m), a job that fails writes error.json (the message and traceback) into its own
directory and the sweep goes on: finished jobs keep their results.json, and `specbench.report`
lists the failed ones and those that never started. A single run fails loudly.

`+resume=true` skips a job whose directory already holds a complete results.json; every other job
(failed, interrupted, never started) runs again. Re-run an interrupted sweep with the same overrides
in the same order (Hydra numbers the jobs by them) and `hydra.sweep.dir=<its directory>`; the
`resume` key is left out of the job directories' names, so the jobs land in their old directories.

Sweeps over several GPUs go through Hydra's launcher plugins (hydra-submitit-launcher): `hydra/launcher=specbench_slurm`
gives each job its own SLURM allocation, and `hydra/launcher=specbench_local` runs the jobs on the GPUs of one machine,
each job alone on a GPU it takes for itself (one_gpu_per_job). Everything above holds for them as for a sequential sweep.

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

import hydra
from omegaconf import DictConfig

from specbench.config import CONF_DIR
from specbench.errors import ConfigError
from specbench.launchers import one_gpu_per_job, remember_launch_gpus
from specbench.metrics import objective
from specbench.optimize import check_objective, optimizer_config, raise_if_no_draft_forward


def _in_sweep() -> tuple[bool, Path | None]:
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    return str(hc.mode).endswith("MULTIRUN"), Path(hc.runtime.output_dir)


def finished(job_dir: Path) -> bool:
    """Whether `job_dir` holds a complete results.json (what +resume=true skips)."""
    from specbench.report import read_results

    try:
        read_results(job_dir / "results.json")
    except (OSError, ValueError):
        return False
    return True


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> float | None:
    from specbench.report import read_results

    sweep, job_dir = _in_sweep()
    optimizer = optimizer_config()
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
        with one_gpu_per_job():
            from specbench.run import run  # after the GPU is chosen: importing models may ask CUDA for its devices

            if optimizer is not None:
                raise_if_no_draft_forward(cfg)
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
    remember_launch_gpus()  # submitit's local jobs get 0..n-1 in place of the shell's GPUs: one_gpu_per_job maps back
    main()
