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
def main(cfg: DictConfig) -> None:
    sweep, job_dir = _in_sweep()
    if cfg.get("output_dir"):
        job_dir = Path(cfg.output_dir)
    if cfg.get("resume") and job_dir is not None and finished(job_dir):
        print(f"specbench: {job_dir / 'results.json'} is complete; skipped (resume=true)")
        return
    if job_dir is not None:
        (job_dir / "error.json").unlink(missing_ok=True)  # a previous attempt's: this one decides
    try:
        with one_gpu_per_job():
            from specbench.run import run  # after the GPU is chosen: importing models may ask CUDA for its devices

            run(cfg)
    except Exception as e:
        if sweep and job_dir is not None:
            (job_dir / "error.json").write_text(json.dumps(
                {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}, indent=1))
            print(f"specbench: this job failed ({type(e).__name__}: {e}); the sweep goes on. See {job_dir / 'error.json'}")
            return
        if isinstance(e, ConfigError):
            raise SystemExit(f"specbench: configuration error: {e}") from None
        raise


if __name__ == "__main__":
    remember_launch_gpus()  # submitit's local jobs get 0..n-1 in place of the shell's GPUs: one_gpu_per_job maps back
    main()
