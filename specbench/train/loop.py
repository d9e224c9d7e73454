"""train(cfg) -> Path: distil a drafter for a target and write a checkpoint its strategy loads.

1) load the target (frozen, fp32; TF32 matmuls on CUDA) and the trainer named
   by cfg.strategy._target_; 2) load or generate the cached distillation set, and let the trainer fit
   what depends on it (Trainer.prepare: the token loss's vocabulary, EAGLE-3's draft vocabulary, read
   back on resume); 3) train with AdamW (the forward in fp32, or under bf16 autocast: train.precision, whose auto
   is bf16 for an EAGLE head on CUDA), linear warmup then cosine decay, logging loss and per-position accuracy to
   metrics.jsonl and W&B (offline, under the output directory; logger=none disables it);
   4) every save_every steps write <output_dir>/last (weights, optimizer, step: `resume=true` continues
   from it) and, at the end, the checkpoint (cfg.checkpoint, default <output_dir>/checkpoint). SIGTERM (a
   scheduler's time limit) stops training after the step under way, with its state in <output_dir>/last.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import signal
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from specbench.errors import ConfigError, require_int, require_number
from specbench.models.loading import DTYPES, load_model, resolve_spec
from specbench.train.data import DistillData, check_data_settings, load_or_generate
from specbench.train.drafters import Batch, TokenLoss, Trainer


def _trainer_class(cfg: Mapping[str, Any]) -> type[Trainer]:
    from hydra.utils import get_class

    target = cfg.get("_target_")
    try:
        cls = get_class(target) if target else None
    except Exception:  # noqa: BLE001 - hydra wraps import errors in several types
        cls = None
    if not (isinstance(cls, type) and issubclass(cls, Trainer)):
        raise ConfigError(f"strategy {cfg.get('name')!r} has no trainer (_target_={target!r}); "
                          f"trainable: eagle, medusa, draft_model, parallel (conf/train/strategy/)")
    return cls


def _stored_dtype(rows: list[torch.Tensor]) -> torch.dtype:
    """The dtype these stored rows share (the set's: float16 or bfloat16), float32 when they differ."""
    dtype = rows[0].dtype
    return dtype if all(r.dtype == dtype for r in rows) else torch.float32


def host_batch(data: DistillData, idx: list[int], with_layers: bool, pin: bool = False) -> Batch:
    """The sequences `idx`, right-padded, on the host in the set's own dtypes (pinned for a GPU when `pin`);
    `to_device` makes the features float32. Half the bytes of a float32 build, and no cast on the host: a batch of 32
    sequences of 384 tokens with three layers holds 113 MB in float32 (27-133 ms to build on a 2-core CPU, 16-43 in
    half precision)."""
    n = max(len(data.tokens[i]) for i in idx)
    bsz, h = len(idx), data.hidden[idx[0]].shape[-1]
    tokens = torch.zeros((bsz, n), dtype=torch.long, pin_memory=pin)
    hidden = torch.zeros((bsz, n - 1, h), dtype=_stored_dtype([data.hidden[i] for i in idx]), pin_memory=pin)
    top1 = torch.zeros((bsz, n - 1), dtype=torch.long, pin_memory=pin)
    layers = None
    if with_layers and data.layers:
        dtype = _stored_dtype([data.layer_hidden[i] for i in idx])
        layers = torch.zeros((bsz, n - 1, len(data.layers), h), dtype=dtype, pin_memory=pin)
    for b, i in enumerate(idx):
        m = len(data.tokens[i])
        tokens[b, :m] = data.tokens[i]
        hidden[b, : m - 1] = data.hidden[i]
        top1[b, : m - 1] = data.top1[i]
        if layers is not None:
            layers[b, : m - 1] = data.layer_hidden[i]
    lengths = torch.tensor([len(data.tokens[i]) for i in idx], pin_memory=pin)
    return Batch(tokens, lengths, hidden, layers, top1)


def to_device(batch: Batch, device: torch.device) -> Batch:
    """A host batch on `device` (copies from pinned memory do not block), its features cast to float32 there:
    float16 and bfloat16 are exact in float32, so the values are those of a cast on the host."""
    def put(x: torch.Tensor) -> torch.Tensor:
        return x.to(device, non_blocking=True)

    return Batch(put(batch.tokens), put(batch.lengths), put(batch.hidden).float(),
                 None if batch.layer_hidden is None else put(batch.layer_hidden).float(), put(batch.top1))


def make_batch(data: DistillData, idx: list[int], device: torch.device, with_layers: bool) -> Batch:
    """The sequences `idx` as a training batch on `device`: tokens, lengths, float32 features, the target's top-1."""
    return to_device(host_batch(data, idx, with_layers, pin=device.type == "cuda"), device)


class Batches:
    """The training batch of each step: the sequences are a function of (train_seed, step), so a resumed run sees
    the same ones. With `ahead`, a worker thread builds the next step's batch on the host while the device works
    on this one (torch's copies release the GIL); the batches, and so the weights, are the same either way."""

    def __init__(self, data: DistillData, train_ids: list[int], batch_size: int, train_seed: int,
                 device: torch.device, with_layers: bool, ahead: bool) -> None:
        self.data, self.train_ids, self.bsz, self.train_seed = data, train_ids, batch_size, train_seed
        self.device, self.with_layers = device, with_layers
        self.per_epoch = max(1, len(train_ids) // batch_size)
        self._order: tuple[int, list[int]] | None = None  # (epoch, its permutation of train_ids)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batches") if ahead else None
        self._next: tuple[int, Future[Batch]] | None = None

    def ids(self, step: int) -> list[int]:
        epoch, within = divmod(step, self.per_epoch)
        if self._order is None or self._order[0] != epoch:
            g = torch.Generator().manual_seed(self.train_seed * 100_003 + epoch)
            self._order = (epoch, torch.randperm(len(self.train_ids), generator=g).tolist())
        return [self.train_ids[j] for j in self._order[1][within * self.bsz : (within + 1) * self.bsz]]

    def _host(self, step: int) -> Batch:
        return host_batch(self.data, self.ids(step), self.with_layers, pin=self.device.type == "cuda")

    def __call__(self, step: int) -> Batch:
        if self._pool is None:
            return to_device(self._host(step), self.device)
        if self._next is not None and self._next[0] == step:
            batch = self._next[1].result()
        else:
            batch = self._host(step)
        self._next = (step + 1, self._pool.submit(self._host, step + 1))  # ids() runs in one thread at a time
        return to_device(batch, self.device)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


def split_by_prompt(data: DistillData, val_sequences: int, seed: int) -> tuple[list[int], list[int]]:
    """(train, validation) sequence indices: at least min(val_sequences, len // 5) sequences held out, by
    whole prompts (every response to one), so validation measures generalisation, not recall."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, (tokens, plen) in enumerate(zip(data.tokens, data.prompt_lengths)):
        groups.setdefault(tuple(tokens[:plen].tolist()), []).append(i)
    prompts_order = [groups[key] for key in sorted(groups)]
    perm = torch.randperm(len(prompts_order), generator=torch.Generator().manual_seed(seed)).tolist()
    n_val = min(val_sequences, len(data) // 5)
    val_ids: list[int] = []
    train_ids: list[int] = []
    for j in perm:
        (val_ids if len(val_ids) < n_val else train_ids).extend(prompts_order[j])
    return train_ids, val_ids


class _Log:
    """metrics.jsonl always; W&B offline under the output directory unless logger=none. A resumed run continues
    the W&B run it was saved from (`run_id`, kept in <output_dir>/last/state.json): one run, one curve."""

    def __init__(self, cfg: Mapping[str, Any], out_dir: Path, config: dict[str, Any], run_id: str | None) -> None:
        self.path = out_dir / "metrics.jsonl"
        self.wandb = None
        if (cfg.get("name") or "none") == "wandb":
            import wandb

            self.wandb = wandb.init(project=cfg.get("project", "specbench"), entity=cfg.get("entity"),
                                    mode=cfg.get("mode", "offline"), dir=str(out_dir), config=config,
                                    name=out_dir.name, tags=list(cfg.get("tags") or []) + ["train"],
                                    job_type="train", id=run_id, resume="allow" if run_id else None)

    @property
    def run_id(self) -> str | None:
        return None if self.wandb is None else self.wandb.id

    def __call__(self, step: int, metrics: dict[str, float]) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps({"step": step, **metrics}) + "\n")
        if self.wandb is not None:
            self.wandb.log(metrics, step=step)

    def finish(self) -> None:
        if self.wandb is not None:
            self.wandb.finish()


def _lr_at(step: int, base: float, warmup: int, total: int) -> float:
    if step < warmup:
        return base * (step + 1) / warmup
    frac = (step - warmup) / max(1, total - warmup)
    return base * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


class _StopOnSigterm:
    """SIGTERM during training (a scheduler's time limit or preemption, `timeout`, `kill`): the step under way
    finishes, its state goes to <output_dir>/last, and the process exits with 128 + 15, so `resume=true` continues
    from that step (the batches are a function of the step). Installed in the main thread only, where Python takes
    signals; `restore` puts the previous handler back."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous = None
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._take)

    def _take(self, signum: int, frame: object) -> None:
        self.signum = signum

    def restore(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

    def exit(self, step: int, steps: int, last: Path) -> None:
        try:
            print(f"\nstopped by {signal.Signals(self.signum).name} after step {step} of {steps}; its state is in "
                  f"{last}: resume=true continues from it", flush=True)
        except (BrokenPipeError, OSError):  # whatever read our output went with the signal
            pass
        raise SystemExit(128 + int(self.signum))


def _save_state(trainer: Trainer, opt: torch.optim.Optimizer, step: int, last: Path, run_id: str | None) -> None:
    tmp = last.with_name(last.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    trainer.save(tmp)
    torch.save(opt.state_dict(), tmp / "optimizer.pt")
    (tmp / "state.json").write_text(json.dumps({"step": step, "wandb_run_id": run_id}))
    shutil.rmtree(last, ignore_errors=True)
    tmp.rename(last)


PRECISIONS = ("auto", "float32", "bfloat16")


def resolve_precision(name: str, device: torch.device, trainer: type[Trainer]) -> str:
    """train.precision as it runs: auto is the trainer's `auto_precision_cuda` on CUDA (bfloat16 for an EAGLE head,
    float32 for the others) and float32 elsewhere (the CPU's runs, tests among them, stay as they were)."""
    if name == "auto":
        return trainer.auto_precision_cuda if device.type == "cuda" else "float32"
    return name


@contextlib.contextmanager
def autocast(precision: str, device: torch.device) -> Iterator[None]:
    """The context a training step's forward and losses run in: none for float32; for bfloat16, torch's autocast
    (products and attention in bfloat16, softmax, losses and reductions in float32 by its own policy; the weights,
    their gradients and AdamW's state stay float32). On CUDA the attention leaves out cuDNN's kernels: they plan a
    graph on the host for each new shape, and a batch's length changes every step (one H200: 25-30 ms of host time a
    call, the step 126 ms against float32's 89; experiments/drafters/README.md)."""
    if precision != "bfloat16":
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    with torch.autocast(device.type, dtype=torch.bfloat16), \
            (sdpa_kernel(backends) if device.type == "cuda" else contextlib.nullcontext()):
        yield


@torch.no_grad()
def _evaluate(trainer: Trainer, data: DistillData, ids: list[int], token_loss: TokenLoss, device: torch.device,
              with_layers: bool, seed: int, precision: str) -> dict[str, float]:
    trainer.module.eval()
    g = torch.Generator(device=device).manual_seed(seed)
    with autocast(precision, device):
        _, metrics = trainer.loss(make_batch(data, ids, device, with_layers), token_loss, 0, g)
    trainer.module.train()
    return {f"val/{k}": v for k, v in metrics.items()}


def summary(step: int, recent: list[Mapping[str, float]], held_out: dict[str, float], val_sequences: int) -> str:
    """The run's closing table: each training metric's mean over the last `len(recent)` batches beside its value on
    the held-out sequences at the last validation (`held_out`, keys "val/<metric>"; empty when none ran). Equal
    columns mean the drafter does as well on sequences it has not seen as on those it trains on."""
    keys = [k for k in recent[-1] if k != "grad_norm"] if recent else []
    if not keys:
        return ""
    head = f"at step {step}: mean of the last {len(recent)} training batches"
    held = f"the {val_sequences} held-out sequence{'' if val_sequences == 1 else 's'}"
    lines = [f"{head} and {held}" if held_out else head,
             "| metric | training | held out |", "| --- | --- | --- |"]
    for k in keys:
        values = [m[k] for m in recent if k in m]
        mean = sum(values) / len(values)
        val = held_out.get(f"val/{k}")
        lines.append(f"| {k} | {mean:.3f} | {'-' if val is None else f'{val:.3f}'} |")
    for k, val in held_out.items():  # measured on the held-out sequences only (acc_aligned_j of a plain run)
        if k.removeprefix("val/") not in keys:
            lines.append(f"| {k.removeprefix('val/')} | - | {val:.3f} |")
    return "\n".join(lines)


def check_train_settings(c: Mapping[str, Any]) -> None:
    """The run's own settings and the train group's, checked before the target loads (AdamW would refuse a negative
    lr only after the distillation set is made, which can take an hour)."""
    t = dict(c.get("train") or {})
    for key, low in (("steps", 1), ("batch_size", 1), ("warmup", 0), ("ce_vocab", 0), ("ce_positions", 0),
                     ("val_sequences", 0), ("log_every", 1), ("save_every", 1)):
        if key in t:
            require_int(f"train.{key}", t[key], low=low)
    for key in ("seed", "stop_after"):  # null: the run's seed; the whole schedule
        if t.get(key) is not None:
            require_int(f"train.{key}", t[key], low=0 if key == "seed" else 1)
    require_number("train.lr", t.get("lr", 1e-3), meaning="AdamW's peak learning rate; 0 keeps the starting weights")
    require_number("train.weight_decay", t.get("weight_decay", 0.0), meaning="AdamW's decoupled weight decay")
    if t.get("grad_clip") is not None:
        require_number("train.grad_clip", t["grad_clip"], meaning="the gradient norm's cap; 0 or null = none")
    if t.get("time_budget_s") is not None:
        require_number("train.time_budget_s", t["time_budget_s"], meaning="seconds of training; null = no limit")
    if t.get("precision", "auto") not in PRECISIONS:
        raise ConfigError(f"train.precision={t['precision']!r}; allowed: {', '.join(PRECISIONS)} (bfloat16: the "
                          "head's forward and losses under autocast, float32 weights and optimizer; auto: bfloat16 "
                          "for an EAGLE head on CUDA, else float32)")
    if not isinstance(t.get("prefetch", True), bool):
        raise ConfigError(f"train.prefetch={t['prefetch']!r}; allowed: true (build the next batch in a thread while "
                          "the device works on this one) or false")
    require_int("seed", c.get("seed", 0), low=0)
    if c.get("threads") is not None:
        require_int("threads", c["threads"])
    if c.get("save_dtype") is not None and c["save_dtype"] not in DTYPES:
        raise ConfigError(f"save_dtype={c['save_dtype']!r}; allowed: null (float32), {', '.join(DTYPES)}")
    run_device(c.get("device", "auto"))


def run_device(name: Any) -> torch.device:
    """The device a `device` setting names (auto: cuda when visible, else cpu); ConfigError for anything else."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(name)
    except (RuntimeError, TypeError):
        raise ConfigError(f"device={name!r}; allowed: auto (cuda when visible, else cpu), cpu, cuda, cuda:<n>") \
            from None


def train(cfg: DictConfig | Mapping[str, Any]) -> Path:
    """Train the configured drafter; returns the checkpoint directory."""
    c = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    s, d, t = dict(c["strategy"]), dict(c.get("data") or {}), dict(c.get("train") or {})
    cls = _trainer_class(s)
    target_spec = resolve_spec(c["target"], "target")
    # a target given by path is labelled by it: its last part names the directory
    out_dir = Path(c.get("output_dir") or Path("outputs/train") / f"{s.get('name')}-{Path(target_spec.label).name}")
    ckpt_dir = Path(c.get("checkpoint") or out_dir / "checkpoint")
    last = out_dir / "last"
    if c.get("resume") and not (last / "state.json").exists():
        raise ConfigError(f"resume=true but {last} holds no saved state; run once without resume first")
    check_data_settings(d)  # before the target loads: a wrong setting costs no model load
    check_train_settings(c)
    options = {k: v for k, v in s.items() if k != "_target_"}
    cls.check_options(options, target_spec.label)
    device = run_device(c.get("device", "auto"))
    if c.get("threads"):
        torch.set_num_threads(int(c["threads"]))
    seed = int(c.get("seed", 0))  # the distillation set and its held-out split
    train_seed = t.get("seed")  # the head's initial weights and the batches; null: `seed`
    if train_seed is None:
        train_seed = seed
    given = t.get("precision", "auto")
    prefetch, precision = t.get("prefetch", True), resolve_precision(given, device, cls)
    if given == "auto":  # config.yaml records what ran
        c["train"] = {**t, "precision": precision}
        print(f"train.precision=auto: {precision} on {device.type}")
    torch.manual_seed(train_seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(c)))

    # 1) target (frozen) and trainer
    target = load_model(target_spec, device, torch.float32)
    probe = cls(target, target_spec.label, (), **options)
    layers = tuple(sorted(set(d.get("layers") or []) | set(probe.layers())))
    trainer = cls(target, target_spec.label, layers, **options) if layers else probe
    trainer.module.to(device).train()

    # 2) distillation data (cached), a held-out slice for validation
    data = load_or_generate(Path(d.get("cache_dir") or out_dir), target, target_spec.label, d, layers,
                            target.eos_ids, seed)
    train_ids, val_ids = split_by_prompt(data, int(t.get("val_sequences", 8)), seed)
    if not train_ids:
        raise ConfigError(f"the distillation set has {len(data)} sequences; too few to train on")
    with_layers = bool(trainer.layers())
    # what depends on the data (EAGLE-3's draft vocabulary: counted over train_ids, or read back on resume)
    token_loss = trainer.prepare(data, train_ids, int(t.get("ce_vocab", 0)), device, last if c.get("resume") else None)

    # 3) optimiser, resume
    params = [p for p in trainer.module.parameters() if p.requires_grad]
    lr, steps = float(t.get("lr", 1e-3)), int(t.get("steps", 100))
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=float(t.get("weight_decay", 0.0)))
    step, run_id = 0, None
    if c.get("resume"):
        trainer.load_weights(last)
        opt.load_state_dict(torch.load(last / "optimizer.pt", weights_only=True))
        state = json.loads((last / "state.json").read_text())
        step, run_id = state["step"], state.get("wandb_run_id")  # saved before the id was kept: a new W&B run
        print(f"resumed from {last} at step {step}")
    log = _Log(c.get("logger") or {}, out_dir, c, run_id)
    bsz, positions = int(t.get("batch_size", 8)), int(t.get("ce_positions", 0))
    warmup, clip = int(t.get("warmup", 0)), float(t.get("grad_clip", 0) or 0)
    log_every, save_every = int(t.get("log_every", 10)), int(t.get("save_every", 100))
    batches = Batches(data, train_ids, bsz, train_seed, device, with_layers, prefetch)
    per_epoch = batches.per_epoch
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # fp32 master weights and losses, TF32 matmuls

    t0 = time.perf_counter()
    bar = tqdm(total=steps, initial=step, desc=f"train {s.get('name')}", dynamic_ncols=True, mininterval=2.0)
    stop_after = int(t.get("stop_after") or steps)  # stop early with the schedule of `steps` (reproduces a cut run)
    budget = t.get("time_budget_s")  # wall-clock cap on this run's training (the data has its own)
    recent: deque[Mapping[str, float]] = deque(maxlen=100)  # the last batches' metrics, for the closing table
    held_out: dict[str, float] = {}
    stop = _StopOnSigterm()
    try:
        while step < min(steps, stop_after):
            g = torch.Generator(device=device).manual_seed(train_seed * 1_000_003 + step)
            for group in opt.param_groups:
                group["lr"] = _lr_at(step, lr, warmup, steps)
            with autocast(precision, device):
                loss, metrics = trainer.loss(batches(step), token_loss, positions, g)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if clip:
                metrics["grad_norm"] = torch.nn.utils.clip_grad_norm_(params, clip)
            opt.step()
            step += 1
            recent.append(metrics)  # read back (one wait for the device) only where a line of them is written
            if step % log_every == 0 or step in (steps, stop_after):
                log(step, {**metrics, "lr": opt.param_groups[0]["lr"], "epoch": step / per_epoch,
                           "elapsed_s": time.perf_counter() - t0})
                bar.set_postfix({k: f"{v:.3f}" for k, v in metrics.items() if k == "loss" or k.startswith("acc_")})
            if stop.signum is not None:  # before anything is printed: the pipe it prints to may be gone with it
                _save_state(trainer, opt, step, last, log.run_id)
                break
            bar.update(1)
            out_of_time = budget is not None and time.perf_counter() - t0 > float(budget) and step < min(steps, stop_after)
            if step % save_every == 0 or step in (steps, stop_after) or out_of_time:
                if val_ids:
                    held_out = _evaluate(trainer, data, val_ids, token_loss, device, with_layers, seed, precision)
                    log(step, held_out)
                _save_state(trainer, opt, step, last, log.run_id)
            if out_of_time:
                print(f"train.time_budget_s={budget} reached at step {step} of {steps}; the same weights again: "
                      f"train.steps={steps} train.stop_after={step}", flush=True)
                break
    finally:  # also when a step raises: a sweep's next job in this process inherits no handler and no thread
        stop.restore()
        batches.close()
    bar.close()
    if stop.signum is not None:
        log.finish()
        stop.exit(step, steps, last)

    # 4) the checkpoint the strategy loads (optionally in a smaller dtype: the strategy casts to the target's)
    save_dtype = c.get("save_dtype")
    if save_dtype:
        trainer.module.to(DTYPES[save_dtype])
    trainer.save(ckpt_dir)
    log.finish()
    print(f"checkpoint: {ckpt_dir} ({step} steps, {time.perf_counter() - t0:.0f}s this run)")
    print(f"decode with it (and this run's target): python -m specbench {trainer.decode_overrides(ckpt_dir.resolve())}")
    table = summary(step, list(recent), held_out, len(val_ids))
    if table:
        print(table)
    if recent:
        from specbench.train.curves import plot as plot_curves

        print(f"curves: {plot_curves(log.path, out_dir / 'curves.png')}")
    return ckpt_dir
