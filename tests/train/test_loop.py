"""specbench.train.loop's batches: built on the host in the set's half precision and cast on the device, the same
values as a float32 build; built a step ahead in a thread, the same batches and the same weights as without."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time

import torch
from safetensors.torch import load_file

from specbench_testing import train_cfg, train_overrides
from specbench.train.data import DistillData
from specbench.train.drafters import DraftModelTrainer, EagleTrainer, MedusaTrainer
from specbench.train.loop import Batches, host_batch, make_batch, resolve_precision, to_device, train
from specbench.train.parallel import ParallelTrainer

CPU = torch.device("cpu")
H, LAYERS = 5, (0, 2, 3)  # odd sizes: a swapped axis fails


def _data(lengths: tuple[int, ...], dtype: torch.dtype = torch.bfloat16) -> DistillData:
    g = torch.Generator().manual_seed(0)
    return DistillData(
        tokens=[torch.randint(0, 50, (m,), generator=g) for m in lengths],
        prompt_lengths=[2] * len(lengths),
        hidden=[torch.randn(m - 1, H, generator=g).to(dtype) for m in lengths],
        layer_hidden=[torch.randn(m - 1, len(LAYERS), H, generator=g).to(dtype) for m in lengths],
        top1=[torch.randint(0, 50, (m - 1,), generator=g) for m in lengths],
        layers=LAYERS)


def _float32_reference(data: DistillData, idx: list[int]) -> dict[str, torch.Tensor]:
    """The batch as the loop built it before 2026-12-07: float32 on the host, row by row."""
    n = max(len(data.tokens[i]) for i in idx)
    out = {"tokens": torch.zeros(len(idx), n, dtype=torch.long), "hidden": torch.zeros(len(idx), n - 1, H),
           "layer_hidden": torch.zeros(len(idx), n - 1, len(LAYERS), H),
           "top1": torch.zeros(len(idx), n - 1, dtype=torch.long)}
    for b, i in enumerate(idx):
        m = len(data.tokens[i])
        out["tokens"][b, :m] = data.tokens[i]
        out["hidden"][b, : m - 1] = data.hidden[i].float()
        out["layer_hidden"][b, : m - 1] = data.layer_hidden[i].float()
        out["top1"][b, : m - 1] = data.top1[i]
    out["lengths"] = torch.tensor([len(data.tokens[i]) for i in idx])
    return out


def _assert_batch(batch, ref: dict[str, torch.Tensor]) -> None:
    for name, want in ref.items():
        got = getattr(batch, name)
        assert got.dtype == want.dtype and torch.equal(got, want), name


def test_a_half_precision_host_batch_cast_on_the_device_equals_a_float32_build():
    for dtype in (torch.bfloat16, torch.float16):
        data = _data((7, 4, 9, 6), dtype)
        idx = [2, 0, 3]  # B=3, lengths 9, 7, 6: padded to 9
        host = host_batch(data, idx, with_layers=True)
        assert host.hidden.dtype == dtype and host.layer_hidden.dtype == dtype  # half a float32 build's bytes
        _assert_batch(to_device(host, CPU), _float32_reference(data, idx))
        _assert_batch(make_batch(data, idx, CPU, True), _float32_reference(data, idx))
    assert make_batch(data, idx, CPU, False).layer_hidden is None


def test_rows_of_mixed_dtypes_are_built_in_float32():
    data = _data((7, 4, 9))
    data.hidden[1] = data.hidden[1].float() + 1e-3  # not representable in bfloat16: a bfloat16 buffer would round it
    host = host_batch(data, [0, 1, 2], with_layers=True)
    assert host.hidden.dtype == torch.float32 and host.layer_hidden.dtype == torch.bfloat16
    assert torch.equal(host.hidden[1, :3], data.hidden[1])


def test_batches_built_ahead_are_the_batches_built_in_step_across_epochs_and_from_any_step():
    data = _data(tuple(4 + i % 5 for i in range(11)))
    train_ids = [0, 1, 2, 4, 5, 6, 7, 9, 10]  # 9 ids, batches of 2: 4 a epoch, so steps 0..9 cross two epochs
    plain = Batches(data, train_ids, 2, 7, CPU, True, ahead=False)
    ahead = Batches(data, train_ids, 2, 7, CPU, True, ahead=True)
    try:
        steps = [3, 4, 5, 6, 7, 8, 9, 2, 3]  # a resumed run starts mid-epoch; a jump back rebuilds in step
        for step in steps:
            a, b = plain(step), ahead(step)
            _assert_batch(b, {k: getattr(a, k) for k in ("tokens", "lengths", "hidden", "layer_hidden", "top1")})
        epoch = sum((plain.ids(s) for s in range(4)), [])
        assert len(set(epoch)) == 8 and set(epoch) <= set(train_ids)  # an epoch: 8 of the 9 ids, none twice
        assert plain.ids(4) != plain.ids(0)  # the next epoch draws another order
    finally:
        ahead.close()


def test_training_with_and_without_prefetch_gives_the_same_weights(tmp_path, prompts_file):
    def run(name, prefetch):
        ckpt = train(train_cfg(tmp_path, prompts_file, "strategy=eagle", "strategy.unroll=2", "train.steps=5",
                               f"output_dir={tmp_path / name}", f"train.prefetch={prefetch}"))
        return load_file(str(ckpt / "model.safetensors"))

    on, off = run("on", "true"), run("off", "false")
    assert on.keys() == off.keys() and all(torch.equal(on[k], off[k]) for k in on)


def test_bfloat16_autocast_trains_float32_weights_that_differ_from_a_float32_run(tmp_path, prompts_file):
    def run(name, precision):
        ckpt = train(train_cfg(tmp_path, prompts_file, "strategy=eagle", "strategy.unroll=2", "train.steps=5",
                               f"output_dir={tmp_path / name}", f"train.precision={precision}"))
        rows = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        return load_file(str(ckpt / "model.safetensors")), rows

    (full, full_rows), (half, half_rows) = run("fp32", "float32"), run("bf16", "bfloat16")
    auto, _ = run("auto", "auto")  # the default: float32 on the CPU, bit for bit, and config.yaml says which ran
    assert all(torch.equal(full[k], auto[k]) for k in full)
    assert "precision: float32" in (tmp_path / "auto" / "config.yaml").read_text()
    assert full.keys() == half.keys()
    assert all(half[k].dtype == torch.float32 and torch.isfinite(half[k]).all() for k in half)
    # the same batches and starting weights: only the forward's precision differs, and it did take effect
    assert any(not torch.equal(full[k], half[k]) for k in full)
    for rows in (full_rows, half_rows):
        losses = [r["loss"] for r in rows if "loss" in r]
        assert losses and all(math.isfinite(v) for v in losses)
    first = [next(r["loss"] for r in rows if "loss" in r) for rows in (full_rows, half_rows)]
    assert abs(first[0] - first[1]) < 0.05 * abs(first[0])  # bf16 rounding, not another loss


def test_sigterm_saves_the_step_and_resume_ends_where_an_uninterrupted_run_does(tmp_path, prompts_file):
    """SIGTERM mid-training (a scheduler's time limit): the process saves the finished step's state and exits with
    143; resume=true then ends with the weights of a run never stopped, bit for bit (on the CPU)."""
    opts = ["strategy=eagle", "strategy.unroll=2", "train.steps=150", "train.save_every=100000", "device=cpu"]
    cut = tmp_path / "cut"
    proc = subprocess.Popen([sys.executable, "-m", "specbench.train", *train_overrides(tmp_path, prompts_file), *opts,
                             f"output_dir={cut}"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    metrics, deadline = cut / "metrics.jsonl", time.monotonic() + 240
    while proc.poll() is None and time.monotonic() < deadline:  # the data first, then a few steps
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 3:
            proc.send_signal(signal.SIGTERM)
            break
        time.sleep(0.005)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    stopped = json.loads((cut / "last" / "state.json").read_text())["step"]
    assert 3 <= stopped < 150 and f"stopped by SIGTERM after step {stopped} of 150" in out
    assert not (cut / "checkpoint").exists()

    resumed = train(train_cfg(tmp_path, prompts_file, *opts, f"output_dir={cut}", "resume=true"))
    whole = train(train_cfg(tmp_path, prompts_file, *opts, f"output_dir={tmp_path / 'whole'}"))
    a, b = load_file(str(resumed / "model.safetensors")), load_file(str(whole / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_precision_auto_is_bfloat16_for_an_eagle_head_on_cuda_and_float32_elsewhere():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert resolve_precision("auto", cuda, EagleTrainer) == "bfloat16"
    for trainer in (MedusaTrainer, DraftModelTrainer, ParallelTrainer):  # not measured in bf16: float32
        assert resolve_precision("auto", cuda, trainer) == "float32"
    assert resolve_precision("auto", cpu, EagleTrainer) == "float32"
    assert resolve_precision("float32", cuda, EagleTrainer) == "float32"  # a setting given is kept
    assert resolve_precision("bfloat16", cpu, MedusaTrainer) == "bfloat16"
