"""run(cfg) -> Report: validate, load, run the baseline and the strategy on the same prompts, report.

Data flows one way: config -> models + strategy -> engine -> metrics -> logger. Every setting is
checked before a model loads, so a bad job in a sweep fails in seconds. Results are written
atomically into the job's output directory, so an interrupted sweep keeps its finished jobs.
"""

from __future__ import annotations

import inspect
import os
import platform
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from specbench.config import CONF_DIR, build, options, run_config, target_class  # noqa: F401 - CONF_DIR for callers
from specbench.data import Prompt, check_prompt_lengths, encode_prompt, load_prompts
from specbench.data.images import encode_mm_prompts, mm_images
from specbench.engine import BatchTiming, Engine, RowResult
from specbench.errors import ConfigError, unknown
from specbench.logging import NullLogger, make_logger, results_table, write_json_atomic, write_jsonl_atomic
from specbench.metrics import exact_match, prompt_metrics, speedup, summarize, throughput_speedup
from specbench.models.loading import (DTYPES, LoadedModel, ModelSpec, load_model, model_type_of, needs_hf_tp,
                                      raise_if_unreachable, resolve_spec, suggested_draft)
from specbench.models.multimodal import image_processor_for, make_vlm_aware_runner
from specbench.models.cuda_graphs import cuda_graphs_default, graph_captures, maybe_graphed
from specbench.models.decoder import (cpu_bf16_invariant, cpu_float32_invariant, cpu_form_choices, onednn_bf16,
                                      time_cpu_forms)
from specbench.models.runner import BACKENDS
from specbench.models.tensor_parallel import env_rank, init_group, raise_if_unshardable
from specbench.strategies.base import BuildContext, Proposer
from specbench.strategies.none import TargetOnly
from specbench.synthetic import SyntheticVerifier, rate_for_acceptance_length
from specbench.verify import SamplingParams, Verifier


@dataclass
class Report:
    results: dict[str, Any]  # what results.json holds
    outputs: list[dict[str, Any]]  # what outputs.jsonl holds, one per prompt
    output_dir: Path


@dataclass
class _Plan:
    """The validated configuration: everything needed to load and run, checked up front."""

    strategy_cls: type[Proposer]
    strategy_cfg: dict[str, Any]
    sampling: SamplingParams
    target: ModelSpec
    draft: ModelSpec | None
    prompts: list[Prompt]
    device: torch.device
    dtype: torch.dtype
    batch_size: int
    max_new_tokens: int
    max_model_len: int
    backend: str
    rules: dict[str, Callable[..., Any]]  # Verifier's rule / tree_rule / greedy_tree_rule (empty = torch references)
    cuda_graphs: bool
    batch_invariant: bool  # the decoder's batch-invariant kernels, CUDA and CPU bf16 (engine.batch_invariant auto/true)
    synthetic: dict[str, Any]  # verify.synthetic_*: empty = real, lossless acceptance
    checkpoint: dict[str, Any] | None = None  # the drafter checkpoint's resolved files and weights hash (eagle, medusa)
    tensor_parallel: int = 1  # engine.tensor_parallel: ranks the target is split over
    scheduler: str = "static"  # engine.scheduler: static batches, or continuous batching over batch_size slots
    stop_ids: frozenset[int] = frozenset()  # engine.stop_token_ids: they end a row as the target's EOS does
    shard_on_load: bool = False  # engine.shard_on_load: each rank builds only its share of a random-weight target
    pdl: bool = True  # engine.pdl: programmatic dependent launch of the decoder's GEMMs (CUDA, Hopper and later)
    float32_invariant: bool = False  # engine.batch_invariant=true in float32 on the CPU: the target's oneDNN path
    baseline_order: str = "interleaved"  # baseline and strategy batch by batch in turns, or one after the other
    fused_mlp: bool = True  # engine.fused_mlp: a layer's MLP in one launch at up to 16 rows (CUDA)

    @property
    def lossless(self) -> bool:
        return not self.synthetic

    def verifier(self) -> Verifier:
        """A fresh Verifier (same seed) for each engine, so baseline and strategy draw the same noise."""
        if self.synthetic:
            return SyntheticVerifier(self.sampling, self.device, self.synthetic.get("synthetic_acceptance_length"),
                                     self.synthetic.get("synthetic_per_position"))
        return Verifier(self.sampling, self.device, **self.rules)


def available_strategies() -> list[str]:
    return options("strategy")


def auto_dtype(device: torch.device, target: ModelSpec, engine: Any) -> str:
    """engine.dtype=auto: bfloat16 on CUDA. On the CPU, bfloat16 where our decoder runs this target bit-invariantly
    (a token's logits the same alone, in a verify window or in a batch: DecoderRunner.cpu_invariant) and that path is
    on (engine.batch_invariant, our backend, one rank): a 4-token verify of SmolLM2-135M then costs 1.2x a 1-token
    forward, against 1.6x in float32 (experiments/cpu/README.md). float32 elsewhere."""
    if device.type == "cuda":
        return "bfloat16"
    ours = engine.backend != "transformers" and engine.batch_invariant and engine.tensor_parallel == 1
    return "bfloat16" if ours and cpu_bf16_invariant(target.known) else "float32"


def plan(cfg: DictConfig | Mapping[str, Any]) -> _Plan:
    """Validate the whole configuration without loading a model. Each setting's type and range are
    specbench.config's (Hydra checks the types while composing); here: the strategy's class and settings,
    the models, the machine, and the settings that must fit together."""
    c = run_config(cfg)
    strategy_cfg = dict(c.strategy)
    cls = target_class(strategy_cfg, "strategy", Proposer)
    raise_if_unknown_settings(cls, strategy_cfg)
    cls.validate(strategy_cfg)
    s = c.sampling
    sampling = SamplingParams(temperature=s.temperature, top_k=s.top_k, top_p=s.top_p, seed=s.seed)
    target = resolve_spec(asdict(c.target), "target")
    draft = None
    if cls.needs_draft_model:
        d = asdict(c.draft)
        if d["name"] == "auto" and not d["path"]:
            d["name"] = suggested_draft(target.name)
        draft = resolve_spec(d, "draft")
        cls.validate_draft(strategy_cfg, draft, target, sampling.greedy)  # the draft against the target, before loading
    e = c.engine
    device_name = e.device
    if device_name == "auto":
        device_name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(device_name)
    except RuntimeError:
        raise ConfigError(f"engine.device={device_name!r}; allowed: auto, cpu, cuda, cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("engine.device=cuda but no CUDA device is visible; use engine.device=cpu")
    dtype_name = auto_dtype(device, target, e) if e.dtype == "auto" else e.dtype
    if dtype_name not in DTYPES:
        raise unknown("engine.dtype", dtype_name, ["auto", *DTYPES])
    if e.backend not in BACKENDS:
        raise unknown("engine.backend", e.backend, BACKENDS)
    float32_invariant = e.batch_invariant is True and device.type == "cpu" and dtype_name == "float32"
    if float32_invariant:
        raise_if_float32_not_invariant(target, e.backend)
    if e.tensor_parallel > 1 and device.type == "cuda" and env_rank() is None and torch.cuda.device_count() < e.tensor_parallel:
        raise ConfigError(f"engine.tensor_parallel={e.tensor_parallel} but {torch.cuda.device_count()} CUDA device(s) are "
                          f"visible; allowed: at most that many ranks (or engine.device=cpu: gloo processes)")
    if e.tensor_parallel > 1 and target.known:  # presets, a local config.json: before anything loads
        raise_if_unshardable(target.known, e.tensor_parallel, target.label)
    if e.shard_on_load:
        raise_if_cannot_shard_on_load(e.tensor_parallel, target, draft, cls, e.backend)
    cls.validate_for_target(strategy_cfg, target, e.backend)  # the strategy's settings against the target's known sizes
    max_new = c.max_new_tokens
    k = int(strategy_cfg.get("k") or 0)
    for role, spec in (("target", target), ("draft", draft)):
        limit = ((spec.known or {}).get("max_position_embeddings") if spec is not None else None)
        if limit and max_new + k + 2 > limit:  # a prompt has at least one token
            raise ConfigError(f"max_new_tokens={max_new} + strategy.k={k} + 1 (verify slot) + a prompt of at least one "
                              f"token = {max_new + k + 2} positions exceeds max_position_embeddings={limit} "
                              f"of {role} {spec.label!r}; lower max_new_tokens or strategy.k")
    rules = _acceptance_rules(device, e.triton_verify)
    synthetic = {key: v for key, v in asdict(c.verify).items() if v is not None}
    if synthetic.get("synthetic_acceptance_length") is not None and k >= 1:
        rate_for_acceptance_length(float(synthetic["synthetic_acceptance_length"]), k)  # ConfigError outside [1, k+1]
    raise_if_unknown_logger_settings(target_class(c.logger, "logger", NullLogger), c.logger)
    prompts = load_prompts(asdict(c.dataset))
    if e.scheduler == "continuous" and any(mm_images(pr) for pr in prompts):
        raise ConfigError(f"engine.scheduler=continuous with prompts that carry images (dataset "
                          f"{c.dataset.name!r}); allowed: engine.scheduler=static (a VLM's images are encoded per batch)")
    return _Plan(cls, strategy_cfg, sampling, target, draft, prompts, device, DTYPES[dtype_name], e.batch_size,
                 max_new, c.max_model_len, e.backend, rules, cuda_graphs_default(e.cuda_graphs, device),
                 e.batch_invariant is not False, synthetic, cls.checkpoint_record(strategy_cfg, target),
                 e.tensor_parallel, e.scheduler, frozenset(e.stop_token_ids), e.shard_on_load, e.pdl, float32_invariant,
                 c.baseline_order, fused_mlp=e.fused_mlp)


def raise_if_float32_not_invariant(target: ModelSpec, backend: str) -> None:
    """engine.batch_invariant=true in float32 on the CPU needs our decoder and a CPU whose oneDNN float32 product on
    packed weights is row-invariant (decoder.cpu_float32_invariant, probed on the target's GEMM shapes); a target
    whose sizes are not known yet is checked by its runner when it loads."""
    allowed = ("allowed: engine.batch_invariant=auto (float32 on the CPU then takes the fastest products: "
               "argmax-stable, not bit-invariant) or false, or engine.dtype=bfloat16 on a CPU with bf16 matrix units")
    if backend == "transformers":
        raise ConfigError(f"engine.batch_invariant=true in float32 on the CPU with engine.backend=transformers: only "
                          f"our decoder has a bit-invariant path; {allowed}")
    ok = cpu_float32_invariant(target.known)
    if ok is False:
        raise ConfigError(f"engine.batch_invariant=true in float32 on the CPU for target {target.label!r}: our "
                          f"decoder does not run it, or this CPU's oneDNN float32 product on packed weights is not "
                          f"row-invariant for its shapes; {allowed}")


def raise_if_cannot_shard_on_load(world: int, target: ModelSpec, draft: ModelSpec | None,
                                   cls: type[Proposer], backend: str = "auto") -> None:
    """engine.shard_on_load builds each rank's share of random weights (loading._random_model): it needs ranks, a
    random-weight target on our decoder, and a draft of its own (a draft that is the target would need the whole of
    it)."""
    if world < 2:
        raise ConfigError(f"engine.shard_on_load=true with engine.tensor_parallel={world}; allowed: tensor_parallel >= 2 "
                          f"(each rank builds its share), or shard_on_load=false")
    if target.source != "random":
        raise ConfigError(f"engine.shard_on_load=true with target {target.label!r} (source {target.source!r}); allowed: "
                          f"random-weight targets (the *-random presets); a checkpoint loads whole on each rank, then splits")
    model_type = model_type_of(target)
    if needs_hf_tp(model_type, backend):
        raise ConfigError(f"engine.shard_on_load=true with target {target.label!r} on transformers' forward "
                          f"(engine.backend={backend}, model_type {model_type!r}); allowed: shard_on_load=false there "
                          f"(transformers' tp_plan loads each rank's share), or our decoder (engine.backend=auto)")
    if draft is not None and draft == target:
        raise ConfigError(f"engine.shard_on_load=true with draft={draft.label!r}, the target itself; allowed: a draft "
                          f"model of its own (a draft that is the target would need its whole weights on every rank)")
    if cls.drafts_with_target_weights:
        raise ConfigError(f"engine.shard_on_load=true with strategy {cls.__name__}, which drafts with the target's own "
                          f"weights (the whole target on every rank); allowed: shard_on_load=false for it")


def raise_if_unknown_settings(cls: type[Proposer], cfg: Mapping[str, Any]) -> None:
    """Refuse strategy keys that no __init__ in the strategy's class hierarchy takes (`+strategy.kk=3`), before
    any model loads; Proposer.__init__ would refuse them only after loading."""
    allowed = {"_target_"}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        allowed.update(name for name, param in list(inspect.signature(init).parameters.items())[1:]
                       if param.kind not in (param.VAR_POSITIONAL, param.VAR_KEYWORD) and name != "ctx")
    extra = sorted(set(cfg) - allowed)
    if extra:
        raise ConfigError(f"unknown setting(s) {extra} for strategy {cfg.get('name')!r}; allowed: "
                          f"{', '.join(sorted(allowed - {'_target_'}))}. Check the key's spelling (strategy.<key>=...)")


def raise_if_unknown_logger_settings(cls: type[NullLogger], cfg: Mapping[str, Any]) -> None:
    """Refuse logger keys its class does not take (`+logger.projet=x`) before the job runs, not after it."""
    try:
        inspect.signature(cls).bind_partial(**{key: v for key, v in cfg.items() if key != "_target_"})
    except TypeError as e:
        raise ConfigError(f"logger {cfg.get('name')!r}: {e}; its settings are the parameters of {cls.__name__}") from None


def _acceptance_rules(device: torch.device, setting: str | bool) -> dict[str, Callable[..., Any]]:
    """The Triton acceptance kernels on CUDA (equal to the torch references on the same noise): the chain's
    rejection sampler, and the tree's walk at T = 0 and recursive rejection sampler at T > 0. Else none: the
    Verifier uses the references."""
    if setting is False or device.type != "cuda":
        return {}
    from specbench.kernels.rejection import rejection_sample_triton, triton_available
    from specbench.kernels.tree_rejection import greedy_tree_verify_triton, tree_rejection_sample_triton

    if triton_available(device):
        return {"rule": rejection_sample_triton, "tree_rule": tree_rejection_sample_triton,
                "greedy_tree_rule": greedy_tree_verify_triton}
    if setting is True:
        raise ConfigError("engine.triton_verify=true but triton is not available on this machine")
    return {}


def _warm_up(engines: Any, p: _Plan, token_ids: list[list[int]], mm_inputs: list[dict | None] | None) -> None:
    """Untimed: allocate every cache at its final size, tune the GEMMs (on the CPU: time the product forms for every
    row count) and capture every CUDA graph the timed run will replay (each batch size it will use: the full batch
    and the last, smaller one), on CUDA run each batch's prefill shape once, then restart the drafts' random
    streams, so engine.warmup changes timings only, never tokens. Continuous batching: a short continuous run (rows
    finish at different steps, so slots are refilled), and on CUDA one prompt of each length prefilled alone, as
    admissions are."""
    n = len(token_ids)
    continuous = p.scheduler == "continuous"
    starts = sorted({0, (n - 1) // p.batch_size * p.batch_size})  # the first batch, and the last (maybe smaller)
    for engine in engines:
        if p.device.type == "cpu":  # every product form the timed run may meet, chosen now (decoder._cpu_form)
            time_cpu_forms(engine.target, engine.proposer)
        k = engine.proposer.k  # three steps even when every draft is accepted (draft catch-ups differ after step 1)
        warm = Engine(engine.target, engine.proposer, p.verifier(), max_new_tokens=min(3 * (k + 1) + 1, p.max_new_tokens),
                      eos_ids=set(), device=p.device)
        warm.min_cache_len = engine.min_cache_len
        if continuous:
            warm.generate(token_ids[: 2 * p.batch_size], concurrency=p.batch_size)
        else:
            for s in starts:
                batch = slice(s, min(s + p.batch_size, n))
                warm.generate(token_ids[batch], mm_inputs=mm_inputs[batch] if mm_inputs else None)
        if p.device.type == "cuda":
            # the prefills (the target's, and a draft's in proposer.start) run eagerly at each batch's own shape;
            # a shape's first call compiles Triton kernels and picks cuBLAS algorithms. Without this the first job
            # of a process paid that inside its timed decode (issue 9's first job; experiments/gpu/README.md, run 5).
            # max_new_tokens=1 stops each batch after its prefill.
            prefill = Engine(engine.target, engine.proposer, p.verifier(), max_new_tokens=1, eos_ids=set(),
                             device=p.device)
            prefill.min_cache_len = engine.min_cache_len
            if continuous:  # [1, P] for each prompt length P
                prefill.generate(list({len(ids): ids for ids in token_ids}.values()), concurrency=p.batch_size)
            else:
                shapes = set()
                for s in range(0, n, p.batch_size):
                    batch = slice(s, min(s + p.batch_size, n))
                    shape = (len(token_ids[batch]), max(len(ids) for ids in token_ids[batch]))
                    if shape not in shapes:
                        shapes.add(shape)
                        prefill.generate(token_ids[batch], mm_inputs=mm_inputs[batch] if mm_inputs else None)
        engine.proposer.reseed()


def _decode(engines: Mapping[str, Engine], labels: Mapping[str, str], prompts: list[list[int]], batch_size: int,
            mm_inputs: list[dict | None] | None = None, quiet: bool = False, continuous: bool = False,
            interleave: bool = False) -> tuple[dict[str, list[RowResult]], dict[str, list[BatchTiming]], str]:
    """Every prompt through each engine (one progress bar each): static batches of batch_size, or (continuous) one
    run over batch_size slots per engine. With `interleave` and more than one engine and batch, the engines take
    turns batch by batch, their order reversed every batch (A B, B A, A B, ...), so a machine whose speed drifts
    during the job (clocks, neighbours) drifts on both sides of a speedup alike; otherwise each engine runs all its
    batches before the next starts. Returns rows and batch timings per engine, and the order that ran
    ("interleaved" or "sequential")."""
    sides = list(engines)
    starts = list(range(0, len(prompts), batch_size))
    alternate = interleave and not continuous and len(sides) > 1 and len(starts) > 1
    if alternate:
        turns = [(side, s) for b, s in enumerate(starts) for side in (sides if b % 2 == 0 else sides[::-1])]
    else:
        turns = [(side, s) for side in sides for s in ([0] if continuous else starts)]
    rows: dict[str, list[RowResult]] = {side: [] for side in sides}
    timings: dict[str, list[BatchTiming]] = {side: [] for side in sides}
    bars: dict[str, tqdm] = {}
    try:
        for side, start in turns:
            engine = engines[side]
            if side not in bars:  # opened at a side's first turn: sequential bars then print one below the other
                bars[side] = tqdm(total=len(prompts) * engine.max_new_tokens, desc=labels[side], unit="tok",
                                  dynamic_ncols=True, mininterval=1.0, disable=quiet,
                                  position=len(bars) if alternate else None, leave=True)
            bar = bars[side]
            if continuous:
                batch_rows, timing = engine.generate(prompts, on_step=bar.update, concurrency=batch_size)
            else:
                batch_mm = None if mm_inputs is None else mm_inputs[start : start + batch_size]
                batch_rows, timing = engine.generate(prompts[start : start + batch_size], on_step=bar.update,
                                                     mm_inputs=batch_mm)
            rows[side].extend(batch_rows)
            timings[side].append(timing)
            bar.total = bar.n + (len(prompts) - len(rows[side])) * engine.max_new_tokens  # rows can stop at EOS
            bar.refresh()
            if not alternate and len(rows[side]) == len(prompts):
                bar.close()
    finally:
        for bar in bars.values():
            bar.close()
    return rows, timings, "interleaved" if alternate else "sequential"


def project_commit() -> dict[str, Any]:
    """specbench's own commit: {"git_sha", "git_dirty"} when the package sits in a git checkout of its own
    (the checkout's top level holds specbench/), else git_sha None and a note why (an installed package, or
    a copy inside another project's repository, whose commit says nothing about specbench)."""
    root = Path(__file__).resolve().parents[1]

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], capture_output=True, text=True, timeout=5, cwd=root)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != root:
        return {"git_sha": None, "git_note": f"specbench at {root} is not a git checkout of its own"}
    return {"git_sha": git("rev-parse", "HEAD"), "git_dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def _environment(device: torch.device) -> dict[str, Any]:
    import transformers

    env = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
           "platform": platform.platform(), "device": str(device), "cpu_count": os.cpu_count(), **project_commit()}
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
    else:  # on the CPU the dtype engine.dtype=auto picks, and the speed, depend on the vector and matrix units
        env.update(torch_threads=torch.get_num_threads(), cpu=_cpu_model(),
                   cpu_capability=torch.backends.cpu.get_cpu_capability(), onednn_bf16=onednn_bf16(),
                   cpu_forms=cpu_form_choices())  # the small-batch product each weight shape took (timed per process)
    return env


def _cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux; platform.processor() elsewhere, which may be empty)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _output_dir(cfg: DictConfig | Mapping[str, Any]) -> tuple[Path, str | None, str]:
    """The job's directory, the sweep's W&B group (None outside multirun) and a run name."""
    explicit = cfg.get("output_dir")
    try:
        from hydra.core.hydra_config import HydraConfig

        hc = HydraConfig.get()
        directory = Path(explicit or hc.runtime.output_dir)
        multirun = hc.mode is not None and str(hc.mode).endswith("MULTIRUN")
        group = Path(hc.sweep.dir).name if multirun else None
        name = hc.job.override_dirname or "default"
    except ValueError:  # not under @hydra.main (tests, notebooks)
        directory = Path(explicit or Path("outputs") / time.strftime("%Y-%m-%d/%H-%M-%S"))
        group, name = None, "default"
    directory.mkdir(parents=True, exist_ok=True)
    return directory, group, name


def run(cfg: DictConfig | Mapping[str, Any]) -> Report:
    """Run one job: baseline (strategy none) and the configured strategy on the same prompts."""
    p = plan(cfg)
    raise_if_unreachable(p.target, "target")
    if p.draft is not None:
        raise_if_unreachable(p.draft, "draft")
    if p.tensor_parallel > 1 and env_rank() is None:
        return _run_ranks(cfg, p.tensor_parallel)
    tp = init_group(p.tensor_parallel, p.device) if p.tensor_parallel > 1 else None
    writer = tp is None or tp.rank == 0  # only rank 0 writes results, logs and progress
    if tp is not None and p.device.type == "cuda":  # rank r on cuda:r (its LOCAL_RANK under torchrun)
        p.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", tp.rank)))
        torch.cuda.set_device(p.device)
    out_dir, group, name = _output_dir(cfg)
    torch.manual_seed(p.sampling.seed)
    # the kernels (and triton) load when a job runs, not when the CLI is imported: a test session that runs them in
    # Triton's interpreter must set TRITON_INTERPRET before triton is first imported (tests/kernels/conftest.py)
    from specbench.kernels.decode import pdl, use_pdl
    from specbench.kernels.skinny_gemm import use_fused_mlp

    use_pdl(p.pdl)  # launch settings of this process's kernels, set per job before any graph is captured
    use_fused_mlp(p.fused_mlp)

    # models: load the target once; a draft equal to the target shares its weights (its own cache)
    # at tensor_parallel > 1 our decoder splits a whole-loaded target after loading; transformers splits the rest
    hf_tp = tp is not None and not p.shard_on_load and needs_hf_tp(model_type_of(p.target), p.backend)
    target = load_model(p.target, p.device, p.dtype, shard=(tp.rank, tp.world) if tp and p.shard_on_load else None,
                        hf_tp=hf_tp)
    draft = None
    if p.draft is not None:
        draft = target if p.draft == p.target else load_model(p.draft, p.device, p.dtype)
    mm_inputs: list[dict | None] | None = None  # per prompt: pixel values and grid sizes for a VLM target
    if any(mm_images(pr) for pr in p.prompts):
        token_ids, mm_inputs = encode_mm_prompts(p.prompts, target.tokenizer, image_processor_for(target), target.model.config)
    else:
        token_ids = [encode_prompt(pr, target.tokenizer) for pr in p.prompts]
    k = int(p.strategy_cfg.get("k") or 0)
    check_prompt_lengths(p.prompts, token_ids, p.max_model_len, p.max_new_tokens, extra=k + 1,
                         model_limits=_position_limits(("target", target), ("draft", draft)))

    if tp is not None and not p.shard_on_load:
        raise_if_unshardable(target.model.config, tp.world, target.spec.label)
    target_runner = maybe_graphed(make_vlm_aware_runner(target.model, p.backend, batch_invariant=p.batch_invariant, tp=tp,
                                                        graphs=p.cuda_graphs, float32_invariant=p.float32_invariant),
                                  p.cuda_graphs)
    tree = p.strategy_cfg.get("tree", "chain")
    if tree != "chain" and not getattr(target_runner, "verifies_trees", True):
        raise ConfigError(f"strategy.tree={tree} with target {target.spec.label!r}, a vision-language model; allowed: "
                          f"strategy.tree=chain (a VLM target verifies chains only: its runner takes no tree mask yet)")
    ctx = BuildContext(target=target, target_runner=target_runner, draft=draft, sampling=p.sampling,
                       device=p.device, backend=p.backend, cuda_graphs=p.cuda_graphs, batch_invariant=p.batch_invariant)
    proposer = build(p.strategy_cfg, ctx)  # the Proposer classes take ctx first
    if proposer.nodes_per_step > k:  # a tree's verify window holds more cache slots than its k positions
        check_prompt_lengths(p.prompts, token_ids, p.max_model_len, p.max_new_tokens, extra=proposer.nodes_per_step + 1)
    eos = set() if (cfg.get("engine") or {}).get("ignore_eos", False) else set(target.eos_ids) | p.stop_ids
    if p.scheduler == "continuous":
        multimodal = [role for role, r in (("target", target_runner), ("draft", getattr(proposer, "runner", None)))
                      if hasattr(r, "begin_batch")]
        if multimodal:
            raise ConfigError(f"engine.scheduler=continuous with a vision-language {' and '.join(multimodal)} "
                              f"({target.spec.label if multimodal[0] == 'target' else p.draft.label}); allowed: "
                              f"engine.scheduler=static (a VLM's images and M-RoPE positions are set per batch)")

    def engine_for(prop: Proposer) -> Engine:
        return Engine(target_runner, prop, p.verifier(), max_new_tokens=p.max_new_tokens,
                      eos_ids=eos, device=p.device)

    engines = {"strategy": engine_for(proposer)}
    if cfg.get("baseline", True) and not isinstance(proposer, TargetOnly):
        engines = {"baseline": engine_for(TargetOnly(ctx)), **engines}
    longest = max(len(ids) for ids in token_ids)
    for engine in engines.values():  # caches sized once for the whole run (graphs are captured over them)
        engine.reserve(longest)
    if (cfg.get("engine") or {}).get("warmup", True):
        _warm_up(engines.values(), p, token_ids, mm_inputs)
    captures_before = graph_captures()

    summaries: dict[str, Any] = {}
    per_prompt: dict[str, list[dict[str, Any]]] = {}
    labels = {side: "none" if side == "baseline" else p.strategy_cfg.get("name", side) for side in engines}
    rows, timings, order = _decode(engines, labels, token_ids, p.batch_size, mm_inputs=mm_inputs, quiet=not writer,
                                   continuous=p.scheduler == "continuous", interleave=p.baseline_order == "interleaved")
    for side in engines:
        per_prompt[side] = [prompt_metrics(r) for r in rows[side]]
        summaries[side] = summarize(per_prompt[side], timings[side])

    results: dict[str, Any] = {
        "run": {"strategy": p.strategy_cfg.get("name"), "k": proposer.k, "tree": proposer.tree, "target": p.target.label,
                "draft": p.draft.label if p.draft else None, "target_files": _model_files(p.target),
                "draft_files": _model_files(p.draft) if p.draft else None, "checkpoint": p.checkpoint,
                "dataset": (cfg.get("dataset") or {}).get("name"),
                "n_prompts": len(p.prompts), "max_new_tokens": p.max_new_tokens, "batch_size": p.batch_size,
                "scheduler": p.scheduler, "order": order,
                "temperature": p.sampling.temperature, "top_k": p.sampling.top_k, "top_p": p.sampling.top_p,
                "seed": p.sampling.seed, "dtype": str(p.dtype).removeprefix("torch."), "lossless": p.lossless,
                "synthetic_acceptance": p.synthetic or None, "cuda_graphs": p.cuda_graphs,
                "batch_invariant": p.batch_invariant, "float32_invariant": p.float32_invariant,
                "tensor_parallel": p.tensor_parallel,
                "shard_on_load": p.shard_on_load, "pdl": p.pdl and pdl(p.device),
                "fused_mlp": p.fused_mlp and p.device.type == "cuda",
                "graph_captures_while_timing": graph_captures() - captures_before},
        "config": OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg),
        "environment": _environment(p.device),
        "baseline": summaries.get("baseline"),
        "strategy": summaries["strategy"],
        "speedup": ({**speedup(per_prompt["baseline"], per_prompt["strategy"]),
                     "whole_batch": throughput_speedup(summaries["baseline"], summaries["strategy"])}
                    if "baseline" in per_prompt else None),
        "exact_match": (exact_match([r.output_ids for r in rows["baseline"]], [r.output_ids for r in rows["strategy"]])
                        if "baseline" in rows and p.sampling.greedy and p.lossless else None),
        "by_category": _by_category(p.prompts, per_prompt),
    }
    outputs = []
    for i, (prompt, ids) in enumerate(zip(p.prompts, token_ids)):
        row = rows["strategy"][i]
        entry = {"prompt_id": prompt.id, "category": prompt.category, "prompt_token_ids": ids,
                 "output_token_ids": row.output_ids,
                 "output_text": target.tokenizer.decode(row.output_ids, skip_special_tokens=True),
                 "metrics": per_prompt["strategy"][i]}
        if "baseline" in rows:
            entry["baseline_output_token_ids"] = rows["baseline"][i].output_ids
            entry["baseline_metrics"] = per_prompt["baseline"][i]
        outputs.append(entry)
    if not writer:
        return Report(results=results, outputs=outputs, output_dir=out_dir)
    write_jsonl_atomic(out_dir / "outputs.jsonl", outputs)
    write_json_atomic(out_dir / "results.json", results)  # last: its presence marks a finished job

    # W&B's config holds the run's labels too (a model given by path is named by its path, as in results.json)
    logger = make_logger(cfg.get("logger") or {"_target_": "specbench.logging.NullLogger"}, out_dir,
                         {**results["config"], "run": results["run"]}, group, name)
    logger.log_results(results)
    logger.finish()
    print(results_table(results))
    print(f"results: {out_dir / 'results.json'}")
    return Report(results=results, outputs=outputs, output_dir=out_dir)


def _run_ranks(cfg: DictConfig | Mapping[str, Any], world: int) -> Report:
    """engine.tensor_parallel=N started as one process: ranks 1..N-1 run in worker processes (spawned, each with
    the resolved config), rank 0 here; they meet through torch.distributed on a free local port. A rank that
    fails fails the job: rank 0's error is raised, a worker's exit code is reported."""
    import socket
    from multiprocessing import get_context

    out_dir, _, _ = _output_dir(cfg)
    container = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    container["output_dir"] = str(out_dir)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(world)}
    workers = [get_context("spawn").Process(target=_rank_worker, args=(container, {**env, "RANK": str(r), "LOCAL_RANK": str(r)}),
                                            name=f"specbench-rank-{r}", daemon=True) for r in range(1, world)]
    for w in workers:
        w.start()
    saved = {key: os.environ.get(key) for key in (*env, "RANK", "LOCAL_RANK")}
    os.environ.update({**env, "RANK": "0", "LOCAL_RANK": "0"})
    try:
        report = run(OmegaConf.create(container))
        _barrier()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        import torch.distributed as dist

        for w in workers:
            w.join(timeout=120)
            if w.is_alive():  # rank 0 failed while the workers wait in a collective
                w.terminate()
                w.join()
        if dist.is_initialized():
            dist.destroy_process_group()
    failed = [(w.name, w.exitcode) for w in workers if w.exitcode != 0]
    if failed:
        raise RuntimeError(f"tensor-parallel worker(s) failed: {failed} (rank 0 finished; see their stderr above)")
    return report


def _rank_worker(container: dict[str, Any], env: dict[str, str]) -> None:
    """One worker rank of _run_ranks: the same job on its share of the target; it writes nothing."""
    os.environ.update(env)
    try:
        run(OmegaConf.create(container))
        _barrier()
    finally:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def _barrier() -> None:
    """After a rank's job succeeded: wait for the others, so that no rank tears the process group down while
    another still talks through it (gloo aborts the process then)."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()


def _position_limits(*models: tuple[str, LoadedModel | None]) -> list[tuple[str, int]]:
    """("<role> '<label>'", max_position_embeddings) of each loaded model whose config says (a VLM's text config)."""
    out = []
    for role, m in models:
        if m is None:
            continue
        config = m.model.config
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        limit = getattr(text, "max_position_embeddings", None)
        if isinstance(limit, int) and limit > 0:
            out.append((f"{role} {m.spec.label!r}", limit))
    return out


def _model_files(spec: ModelSpec) -> str | None:
    """Where a model's weights came from: the resolved file or directory of a local / GGUF path, a hub id;
    None for presets and random weights (their label says it all)."""
    if spec.source in ("local", "gguf") and spec.path:
        return str(Path(spec.path).expanduser().resolve())
    return spec.path if spec.source == "hub" else None


def _by_category(prompts: list[Prompt], per_prompt: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Every summary again per prompt category (Spec-Bench, MT-Bench), when the set has categories."""
    cats = sorted({pr.category for pr in prompts if pr.category})
    out: dict[str, Any] = {}
    for cat in cats:
        idx = [i for i, pr in enumerate(prompts) if pr.category == cat]
        block = {side: summarize([m[i] for i in idx]) for side, m in per_prompt.items()}
        if "baseline" in per_prompt:
            block["speedup"] = speedup([per_prompt["baseline"][i] for i in idx], [per_prompt["strategy"][i] for i in idx])
        out[cat] = block
    return out
