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

import contextlib
import fcntl
import json
import logging
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

import hydra
from omegaconf import DictConfig

from specbench.config import CONF_DIR
from specbench.errors import ConfigError

log = logging.getLogger("specbench")
LAUNCH_GPUS = "SPECBENCH_LAUNCH_CUDA_VISIBLE_DEVICES"  # the launching shell's CUDA_VISIBLE_DEVICES, for submitit's jobs


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


@contextlib.contextmanager
def one_gpu_per_job(poll_s: float = 0.5) -> Iterator[str | None]:
    """Under submitit's local executor (hydra/launcher=specbench_local), hold one GPU for this job alone.

    submitit (1.5, local/local.py: LocalExecutor._submit_command) starts every job of a sweep at once, with no
    array_parallelism, and sets the same CUDA_VISIBLE_DEVICES=0,...,gpus_per_node-1 in each, whatever the launching
    shell had. So the job takes one of those GPUs that no other job holds (an exclusive flock on one file per GPU,
    polled until one is free; the kernel drops it when the process ends, however it ends) and narrows
    CUDA_VISIBLE_DEVICES to it before anything starts CUDA: as many jobs run at a time as there are GPUs, each alone
    on its own. GPU i is the i-th entry of the launching shell's CUDA_VISIBLE_DEVICES when it set one (LAUNCH_GPUS).
    The locks are per user and machine (in the temp folder), so two sweeps on one machine share its GPUs too.
    Anywhere else (a sequential sweep; SLURM, which gives each job its own GPUs; gpus_per_node=0) this yields None.
    """
    shown = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    if os.environ.get("SUBMITIT_EXECUTOR") != "local" or not shown.strip():
        yield None
        return
    gpus = [g.strip() for g in shown.split(",")]
    launch = os.environ.get(LAUNCH_GPUS)
    if launch is not None:
        mine = [g.strip() for g in launch.split(",") if g.strip()]
        if len(gpus) > len(mine):
            raise ConfigError(f"hydra.launcher.gpus_per_node={len(gpus)}, but the sweep was launched with "
                              f"CUDA_VISIBLE_DEVICES={launch!r}; allowed: at most {len(mine)} GPUs")
        gpus = mine[: len(gpus)]
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():  # too late to choose a device
        raise RuntimeError("CUDA started before this job took its GPU (specbench.__main__.one_gpu_per_job)")
    folder = Path(tempfile.gettempdir()) / f"specbench-gpus-{os.getuid()}"
    folder.mkdir(exist_ok=True)
    waiting = False
    while True:
        for gpu in gpus:
            lock = open(folder / f"gpu-{gpu}.lock", "a")  # noqa: SIM115 - held while the job runs
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.close()
                continue
            os.environ["CUDA_VISIBLE_DEVICES"] = gpu
            log.info(f"specbench: this job (pid {os.getpid()}) holds GPU {gpu} (CUDA_VISIBLE_DEVICES={gpu}, "
                     f"of {','.join(gpus)})")
            try:
                yield gpu
            finally:
                log.info(f"specbench: GPU {gpu} released")
                lock.close()
            return
        if not waiting:
            log.info(f"specbench: GPUs {','.join(gpus)} are all held by other jobs; waiting for one")
            waiting = True
        time.sleep(poll_s)


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
    if "CUDA_VISIBLE_DEVICES" in os.environ:  # submitit's local jobs get 0..n-1 in its place: one_gpu_per_job maps back
        os.environ[LAUNCH_GPUS] = os.environ["CUDA_VISIBLE_DEVICES"]
    main()
