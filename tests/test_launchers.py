"""Sweeps through Hydra's submitit launcher (conf/hydra/launcher/): real jobs in submitit's local executor on the CPU,
each in its own process. On a machine without GPUs, hydra.launcher.gpus_per_node=2 still exercises how jobs share
GPUs (specbench.launchers.one_gpu_per_job): they hold the names "0" and "1", two at a time, and decode on the CPU."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="needs hydra-submitit-launcher (specbench[launchers])")

from specbench import report  # noqa: E402
from specbench.launchers import LAUNCH_GPUS, one_gpu_per_job  # noqa: E402
from specbench.errors import ConfigError  # noqa: E402

COMMON = ["target=tiny-llama", "strategy=draft_model", "draft=self", "dataset=builtin", "dataset.num_prompts=3",
          "max_new_tokens=6", "logger=none", "engine.warmup=false", "engine.device=cpu"]
GRID = ["strategy.k=1,2", "sampling.temperature=0,1"]
HOLDS = re.compile(r"^\[([\d\- :,]+)\]\[specbench\]\[INFO\] - specbench: this job \(pid (\d+)\) holds GPU (\S+) ")
RELEASED = re.compile(r"^\[([\d\- :,]+)\]\[specbench\]\[INFO\] - specbench: GPU (\S+) released")


def _command(out: Path, *overrides: str, launcher: bool = True) -> list[str]:
    hydra = ["hydra/launcher=specbench_local"] if launcher else []
    return [sys.executable, "-m", "specbench", "-m", *hydra, *overrides, *COMMON, f"hydra.sweep.dir={out}"]


def _env(tmp_path: Path) -> dict[str, str]:
    """No GPUs named by the caller; the GPU locks in a temp folder of this test's own."""
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", LAUNCH_GPUS)}
    (tmp_path / "tmp").mkdir(exist_ok=True)
    # one thread a job: two jobs run at once, and at 2 threads each on a 2-core machine their OpenMP threads spin
    # against each other (the 4-job sweep took 4-5 minutes instead of ~30 s)
    return {**env, "TMPDIR": str(tmp_path / "tmp"), "OMP_NUM_THREADS": "1"}


def _sweep(tmp_path: Path, out: Path, *overrides: str, launcher: bool = True) -> None:
    proc = subprocess.run(_command(out, *overrides, launcher=launcher), env=_env(tmp_path), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def _job(out: Path, num: int) -> Path:
    (job,) = out.glob(f"{num}_*")
    return job


def _time(stamp: str) -> datetime:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f")


def _holds(job: Path) -> tuple[int, str, datetime, datetime | None] | None:
    """(pid, GPU, since, released) from the job's log (Hydra writes it into the job directory)."""
    held = None
    for line in (job / "__main__.log").read_text().splitlines() if (job / "__main__.log").exists() else []:
        if m := HOLDS.match(line):
            held = (int(m.group(2)), m.group(3), _time(m.group(1)), None)
        elif (m := RELEASED.match(line)) and held:
            held = (*held[:3], _time(m.group(1)))
    return held


def _pid(out: Path, num: int) -> int | None:
    """The process of job `num` once it holds its GPU."""
    jobs = list(out.glob(f"{num}_*"))
    held = _holds(jobs[0]) if jobs else None
    return held[0] if held else None


def _wait_for(what: Callable[[], Any], timeout_s: float = 300) -> Any:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if found := what():
            return found
        time.sleep(0.05)
    raise AssertionError(f"waited {timeout_s} s")


def _rows(sweep: Path) -> list[dict[str, str]]:
    """`python -m specbench.report <sweep>`'s table, less the columns that time the run."""
    assert report.main([str(sweep)]) == 0
    rows = list(csv.DictReader(io.StringIO((sweep / "report.csv").read_text())))
    return [{k: v for k, v in row.items() if k not in report.TIMING_COLUMNS} for row in rows]


def test_a_4_job_sweep_runs_2_at_a_time_and_reports_like_a_sequential_one(tmp_path: Path):
    out, sequential = tmp_path / "launcher", tmp_path / "sequential"
    _sweep(tmp_path, out, "hydra.launcher.gpus_per_node=2", *GRID)
    results = sorted(out.glob("*/results.json"))
    assert len(results) == 4
    assert sorted(json.loads(p.read_text())["strategy"]["acceptance_length"] for p in results) == [2.0, 2.0, 3.0, 3.0]
    # each job held GPU "0" or "1" alone: on each, one job's hold ends before the next one's starts
    holds = [_holds(p.parent) for p in results]
    assert all(h is not None and h[3] is not None for h in holds), holds
    assert sorted(h[1] for h in holds) == ["0", "0", "1", "1"]
    for gpu in "01":
        first, second = sorted((h[2], h[3]) for h in holds if h[1] == gpu)
        assert first[1] <= second[0], (gpu, holds)
    assert (out / ".submitit").is_dir()  # submitit's own files, which the report must pass over

    _sweep(tmp_path, sequential, *GRID, launcher=False)
    assert _rows(out) == _rows(sequential) and len(_rows(out)) == 4
    for sweep in (out, sequential):
        found = report.collect([sweep])
        assert not found.missing and not found.never_started and not found.unreadable


def test_a_failed_or_killed_job_loses_nothing_and_resume_reruns_only_those(tmp_path: Path):
    out = tmp_path / "multirun"
    overrides = ["hydra.launcher.gpus_per_node=2", "strategy.k=0,1,2"]  # k=0 fails in plan()
    with open(tmp_path / "sweep.log", "w") as log:
        sweep = subprocess.Popen(_command(out, *overrides), env=_env(tmp_path), stdout=log, stderr=subprocess.STDOUT)
        try:
            # 1) job 1 dies while it runs, as in an out-of-memory kill or a preemption without requeue
            pid = _wait_for(lambda: _pid(out, 1))
            os.kill(pid, signal.SIGKILL)
            sweep.wait(timeout=600)
        finally:
            sweep.kill()
    # submitit reports the job that died without an answer and the sweep command stops; the other jobs go on
    assert sweep.returncode != 0
    _wait_for(lambda: (_job(out, 2) / "results.json").is_file() and (_job(out, 0) / "error.json").is_file())
    assert "strategy.k=0" in json.loads((_job(out, 0) / "error.json").read_text())["error"]
    assert not (_job(out, 1) / "results.json").exists()
    text = report.build_report([out]).text
    assert "(failed: ConfigError: strategy.k=0" in text and str(_job(out, 1)) in text

    # 2) +resume=true: the finished job is skipped, the failed and the killed ones run again in their directories
    kept = _job(out, 2) / "results.json"
    kept.write_text(json.dumps({**json.loads(kept.read_text()), "marker": "kept"}))
    jobs = sorted(p.name for p in out.iterdir() if p.is_dir())
    _sweep(tmp_path, out, *overrides, "+resume=true")
    assert json.loads(kept.read_text())["marker"] == "kept"
    assert json.loads((_job(out, 1) / "results.json").read_text())["run"]["k"] == 1
    assert (_job(out, 0) / "error.json").is_file()
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == jobs  # the same job directories, no new ones


def test_one_gpu_per_job_holds_a_free_gpu_of_the_launching_shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")  # what submitit sets with gpus_per_node=2
    monkeypatch.delenv(LAUNCH_GPUS, raising=False)
    monkeypatch.delenv("SUBMITIT_EXECUTOR", raising=False)
    with one_gpu_per_job() as gpu:  # not a submitit local job: nothing to do
        assert gpu is None and os.environ["CUDA_VISIBLE_DEVICES"] == "0,1"

    monkeypatch.setenv("SUBMITIT_EXECUTOR", "local")
    monkeypatch.setenv(LAUNCH_GPUS, "5,7,9")  # the sweep was launched with CUDA_VISIBLE_DEVICES=5,7,9
    with one_gpu_per_job() as a:
        assert a == "5" and os.environ["CUDA_VISIBLE_DEVICES"] == "5"
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
        with one_gpu_per_job() as b:  # another job (a lock is per open file, so one process shows it too)
            assert b == "7"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with one_gpu_per_job() as c:  # 5 is free again
        assert c == "5"

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv(LAUNCH_GPUS, "3")
    with pytest.raises(ConfigError, match="gpus_per_node=2.*CUDA_VISIBLE_DEVICES='3'"):
        with one_gpu_per_job():
            pass


def test_the_slurm_preset_asks_for_one_gpu_per_job_in_one_array(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The sbatch script submitit writes for a 4-job sweep (sbatch itself is not called: no cluster here)."""
    import submitit.slurm.slurm as slurm
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from specbench.config import CONF_DIR

    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "srun").write_text("#!/bin/sh\nexit 1\n")  # submitit looks for srun before it submits
    (tmp_path / "bin" / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    scripts: list[str] = []

    class Submitted(Exception):
        pass

    def submit(self: Any, command: str) -> None:
        scripts.append(self._make_submission_file_text(command, "uid"))
        raise Submitted

    monkeypatch.setattr(slurm.SlurmExecutor, "_submit_command", submit)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", return_hydra_config=True,
                      overrides=["hydra/launcher=specbench_slurm", "hydra.launcher.partition=gpu",
                                 "hydra.launcher.array_parallelism=2", f"hydra.sweep.dir={tmp_path / 'sweep'}",
                                 "hydra.job.name=specbench"])
    launcher = instantiate(cfg.hydra.launcher)
    launcher.config = cfg
    with pytest.raises(Submitted):
        launcher.launch([[f"strategy.k={k}"] for k in (1, 2, 3, 4)], initial_job_idx=0)
    (script,) = scripts
    for line in ("--array=0-3%2", "--gpus-per-node=1", "--ntasks-per-node=1", "--cpus-per-task=8", "--mem=64GB",
                 "--time=120", "--partition=gpu", f"--output={tmp_path / 'sweep'}/.submitit/%A_%a/"):
        assert f"#SBATCH {line}" in script, script
    assert "--account" not in script and "--qos" not in script
