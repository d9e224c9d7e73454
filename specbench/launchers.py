"""Sweeps on several GPUs through Hydra's launcher plugins (hydra-submitit-launcher): what a job does for itself.

`hydra/launcher=specbench_slurm` gives each job its own SLURM allocation; `hydra/launcher=specbench_local` runs
the jobs on the GPUs of one machine, and submitit's local executor does not keep them apart, so each job takes a
GPU for itself here (one_gpu_per_job), before CUDA starts.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from specbench.errors import ConfigError

log = logging.getLogger("specbench")
LAUNCH_GPUS = "SPECBENCH_LAUNCH_CUDA_VISIBLE_DEVICES"  # the launching shell's CUDA_VISIBLE_DEVICES, for submitit's jobs


def remember_launch_gpus() -> None:
    """In the process that launches a sweep: keep the shell's CUDA_VISIBLE_DEVICES where its jobs can read it."""
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        os.environ[LAUNCH_GPUS] = os.environ["CUDA_VISIBLE_DEVICES"]


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
