"""Distillation data for drafters: the target's own responses to training prompts, with its hidden states.

Training prompts never overlap the evaluation sets. `data.path` is one jsonl file or a list of
them (`.gz` allowed), rows with a `turns` or `prompt` text, an optional `category` and an optional
`chat` flag (false = raw completion, no chat template). The default (data.path: null) is
$SPECBENCH_SPEC_BENCH when set, else the two sets committed in a checkout: 6,000 requests SmolLM2-135M
wrote itself and 1,500 Python standard-library stubs (specbench.train.prompts: magpie requests and
python-stdlib code completions, checked free of MT-Bench and HumanEval text). The committed drafters
were trained on those sets and others, with Spec-Bench's (arXiv 2401.07851) non-MT-Bench categories
(translation, summarization, qa, math_reasoning, rag: 400 prompts; its other 80 prompts are MT-Bench's
and are dropped by `exclude_categories`). Prompts longer than `max_prompt_tokens` are left out. For every
prompt the target writes `samples` responses (the first greedy, the rest sampled at
`temperature`), decoded by specbench's Engine (strategy none, over our DecoderRunner), so every
token is drawn by the Verifier that every strategy shares; the same forwards give, for every
position fed to the target, its final-norm hidden state, the outputs of the layers asked for
(EAGLE-3 fusion) and its top-1 prediction (`FeatureRecorder`). Everything is cached under the
output directory as shards (`distill-<key>.shards/NNNN.pt`, fp16 features, loaded with
weights_only=True), so reruns and resumes skip it. Shards are generated in a seeded random order,
so `data.max_shards=N` (or a run cut by `data.time_budget_s`, which prints the N it reached)
trains on a random subset of prompts.

One sequence = prompt + response, x_0 .. x_{N-1}; features f_0 .. f_{N-2} (x_{N-1} is never fed).

`data.export_responses=<file>` writes the responses of the shards a run used; `data.responses=<file>` makes a
missing shard from them by one prefill of each sequence instead of decoding (specbench.train.responses).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from specbench.data.base import Prompt, encode_prompt, read_jsonl
from specbench.engine import Engine
from specbench.errors import ConfigError, require_int, require_number
from specbench.models.cuda_graphs import GraphedRunner, cuda_graphs_default, maybe_graphed
from specbench.models.decoder import DecoderRunner
from specbench.models.loading import LoadedModel, load_model
from specbench.models.runner import Runner
from specbench.strategies.base import BuildContext, DecodeState
from specbench.strategies.none import TargetOnly
from specbench.train import responses as saved_responses
from specbench.verify import SamplingParams, Verdict, Verifier

MT_BENCH_CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
# data.path: null -> $SPECBENCH_SPEC_BENCH (Spec-Bench's question.jsonl) when set, else the two prompt sets committed in
# a checkout of specbench: SmolLM2-135M's own requests (magpie) and Python standard-library stubs, both written by
# `python -m specbench.train.prompts` and checked free of MT-Bench and HumanEval text (experiments/drafters/README.md)
CHECKOUT_PROMPTS = Path(__file__).resolve().parents[2] / "experiments" / "drafters" / "prompts"
DEFAULT_PROMPT_SETS = ("magpie_smollm2-135m.jsonl.gz", "python_stdlib.jsonl.gz")
# DATA_VERSION, in the cache key: how the responses were made. 2: decoded by specbench.engine, every token drawn by its
# Verifier. 1 (not named in the key): data.py's own decode loop with torch.multinomial, whose shards hold other samples
# at T > 0 and are not reused; the committed drafters (specbench/checkpoints/) were trained on version 1, greedy
# responses only (data.samples=1)
DATA_VERSION = 2
TOP1_ROWS = 1024  # positions per LM-head call when recording top-1 (bounds the [rows, V] logits in memory)
GEN_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}  # data.dtype: the target's while it writes the set
PREFILL_ROWS = 64  # sequences per prefill when a shard is made from data.responses


@dataclass
class DistillData:
    tokens: list[torch.Tensor]  # [N] int64 each: prompt + response
    prompt_lengths: list[int]
    hidden: list[torch.Tensor]  # [N-1, H] fp16 each: final-norm hidden state at positions 0..N-2
    layer_hidden: list[torch.Tensor]  # [N-1, len(layers), H] fp16 each (empty tensors when no layers)
    top1: list[torch.Tensor]  # [N-1] int64 each: the target's argmax prediction at positions 0..N-2
    layers: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.tokens)


def prompt_files(path: str | list[str] | tuple[str, ...] | None) -> list[Path]:
    """data.path's files, each checked to exist; null: $SPECBENCH_SPEC_BENCH, else a checkout's committed sets."""
    if path is None or path == []:
        env = os.environ.get("SPECBENCH_SPEC_BENCH")
        defaults = [CHECKOUT_PROMPTS / name for name in DEFAULT_PROMPT_SETS]
        if not env and not all(f.exists() for f in defaults):
            raise ConfigError("data.path is not set, $SPECBENCH_SPEC_BENCH is not set, and this is no checkout of "
                              f"specbench with its prompt sets ({CHECKOUT_PROMPTS}); allowed: data.path=<a jsonl of "
                              "prompts, `turns` or `prompt` per row> or a list of them, e.g. a set written by "
                              "`python -m specbench.train.prompts --out p.jsonl.gz`")
        paths = [env] if env else [str(f) for f in defaults]
    else:
        paths = [path] if isinstance(path, str) else list(path)
    files = [Path(one).expanduser() for one in paths]
    for file in files:
        if not file.is_file():
            raise ConfigError(f"data.path={str(file)!r} does not exist; point it at Spec-Bench's question.jsonl, "
                              f"a set written by `python -m specbench.train.prompts`, or any jsonl with a `turns` or "
                              f"`prompt` field (a list of files is allowed)")
    return files


def check_data_settings(data_cfg: dict[str, Any]) -> None:
    """What load_or_generate would find wrong only after the target has loaded: the prompt files, the dtype, and
    counts that must be positive."""
    prompt_files(data_cfg.get("path"))
    dtype_name = str(data_cfg.get("dtype") or "float32")
    if dtype_name not in GEN_DTYPES:
        raise ConfigError(f"data.dtype={dtype_name!r}; allowed: {', '.join(GEN_DTYPES)} (the target's dtype while it "
                          f"writes the distillation set)")
    if data_cfg.get("responses") is not None and not Path(str(data_cfg["responses"])).expanduser().is_file():
        raise ConfigError(f"data.responses={data_cfg['responses']!r} does not exist; allowed: null (decode the "
                          "responses), or a file a run wrote with data.export_responses")
    for key, default in (("samples", 1), ("max_new_tokens", 128), ("batch_size", 32), ("max_prompt_tokens", 256)):
        require_int(f"data.{key}", data_cfg.get(key, default))
    require_number("data.temperature", data_cfg.get("temperature", 0.7), meaning="the sampled responses' temperature")
    if data_cfg.get("num_prompts") is not None:  # null: all
        require_int("data.num_prompts", data_cfg["num_prompts"])
    if data_cfg.get("max_shards") is not None:  # null: all
        require_int("data.max_shards", data_cfg["max_shards"], low=0)
    if data_cfg.get("time_budget_s") is not None:
        require_number("data.time_budget_s", data_cfg["time_budget_s"],
                       meaning="seconds of generating new shards; null = no limit")


def training_prompts(path: str | list[str] | tuple[str, ...] | None,
                     exclude_categories: list[str] | tuple[str, ...] = MT_BENCH_CATEGORIES,
                     num_prompts: int | None = None) -> list[Prompt]:
    """Prompts (first turn) of one or more jsonl files outside the excluded (MT-Bench) categories, in file order."""
    prompts = []
    for file in prompt_files(path):
        for row, where, lineno in read_jsonl(file):  # the prompt sets' reader: jsonl or .jsonl.gz, checked rows
            if row.get("category") in exclude_categories:
                continue
            if "turns" not in row and "prompt" not in row:
                raise ConfigError(f"{where} has neither `turns` nor `prompt`; training prompts need one")
            text = row["turns"][0] if "turns" in row else row["prompt"]
            pid = row.get("id", row.get("question_id", lineno))
            prompts.append(Prompt(id=f"train/{file.name}/{pid}", text=text, category=row.get("category"),
                                  chat=bool(row.get("chat", True))))
    return prompts[:num_prompts] if num_prompts else prompts


def cache_key(**parts: Any) -> str:
    return hashlib.sha1(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:12]


class FeatureRecorder(TargetOnly):
    """Target-only decoding that keeps, for every position fed to the target, what distillation needs.

    Because it sets `pass_hidden_states_to_model`, the engine gives it every target forward's final-norm
    hidden states, asked layer outputs and positions (DecodeState.target_*): the prefill's in start(),
    each step's in commit(). They are written by position, so a later forward at a position overwrites
    an earlier one: the right-padded prefill's pad slots are overwritten by the steps that feed the row's
    real tokens there, and a finished row (kept in the batch) re-feeds only its last token, which is
    never a feature. Top-1 is the argmax of the LM head over the recorded hidden state, the product the
    runner makes its logits with (the engine asks the prefill for the last position's logits only).
    """

    pass_hidden_states_to_model = True

    def __init__(self, ctx: BuildContext, layers: tuple[int, ...]) -> None:
        super().__init__(ctx)
        self.layers = tuple(layers)
        self.lm_head = ctx.target.model.get_output_embeddings()
        self.hidden = self.layer_hidden = self.top1 = torch.empty(0)

    def hidden_layers(self) -> tuple[int, ...]:
        return self.layers

    def start(self, state: DecodeState, prefill_hidden: torch.Tensor | None) -> None:
        bsz, size, dim, dev = state.batch_size, state.max_len, prefill_hidden.shape[-1], state.tokens.device
        self.hidden = torch.zeros((bsz, size, dim), dtype=torch.float16, device=dev)  # [B, S, H]
        self.layer_hidden = torch.zeros((bsz, size, len(self.layers), dim), dtype=torch.float16, device=dev)  # [B, S, L, H]
        self.top1 = torch.zeros((bsz, size), dtype=torch.long, device=dev)  # [B, S]
        self._record(state)

    def commit(self, state: DecodeState, verdict: Verdict, accepted: list[int], old_lengths: list[int]) -> None:
        self._record(state)

    def _record(self, state: DecodeState) -> None:
        pos = state.target_positions  # [B, T]
        rows = torch.arange(pos.shape[0], device=pos.device)[:, None]  # [B, 1]
        hidden = state.target_hidden  # [B, T, H]
        self.hidden[rows, pos] = hidden.half()
        if self.layers:
            self.layer_hidden[rows, pos] = torch.stack(state.target_layer_hidden, 2).half()  # [B, T, L, H]
        flat = hidden.reshape(-1, hidden.shape[-1])  # the LM head over at most TOP1_ROWS positions at a time
        top1 = torch.cat([self.lm_head(chunk).argmax(-1) for chunk in flat.split(TOP1_ROWS)])
        self.top1[rows, pos] = top1.view(pos.shape)


@torch.inference_mode()
def generate_distillation(target: LoadedModel, runner: Runner, prompt_ids: list[list[int]], *, max_new_tokens: int,
                          samples: int, temperature: float, batch_size: int, layers: tuple[int, ...], eos_ids: set[int],
                          seed: int, progress: bool = True) -> DistillData:
    """The target's responses (sample 0 greedy, the others at `temperature`) with its features, batched.

    Decoded by the Engine with strategy none, so every token is drawn by a Verifier (verify.logits_to_probs,
    sample_from), the sampler every strategy is tested with. One Verifier seeded with `seed` draws all
    the sampled responses of the call, batch after batch.
    """
    dev = runner.device
    ctx = BuildContext(target=target, target_runner=runner, draft=None, sampling=SamplingParams(), device=dev)
    recorder = FeatureRecorder(ctx, layers)
    greedy, sampled = (Engine(runner, recorder, Verifier(params, dev), max_new_tokens=max_new_tokens, eos_ids=eos_ids,
                              device=dev) for params in (SamplingParams(), SamplingParams(temperature=temperature, seed=seed)))
    data = DistillData([], [], [], [], [], tuple(layers))
    bar = tqdm(total=samples * len(prompt_ids), desc="distill", unit="seq", disable=not progress, mininterval=2.0)
    for s in range(samples):
        for start in range(0, len(prompt_ids), batch_size):
            batch = prompt_ids[start : start + batch_size]
            rows, _ = (greedy if s == 0 else sampled).generate(batch)
            for b, (ids, row) in enumerate(zip(batch, rows)):
                n = len(ids) + len(row.output_ids)
                data.tokens.append(torch.tensor(ids + row.output_ids, dtype=torch.long))
                data.prompt_lengths.append(len(ids))
                data.hidden.append(recorder.hidden[b, : n - 1].cpu())
                data.layer_hidden.append(recorder.layer_hidden[b, : n - 1].cpu())
                data.top1.append(recorder.top1[b, : n - 1].cpu())
            bar.update(len(batch))
    bar.close()
    return data


def features_of(target: LoadedModel, runner: Runner, sequences: list[list[int]], prompt_lengths: list[int], *,
                layers: tuple[int, ...], batch_size: int, progress: bool = True) -> DistillData:
    """The set's rows for finished sequences (prompt + response): the target run once over each whole sequence (the
    Engine's prefill, one token past it thrown away), recording what `generate_distillation` records while decoding."""
    rows = generate_distillation(target, runner, sequences, max_new_tokens=1, samples=1, temperature=0.0,
                                 batch_size=batch_size, layers=layers, eos_ids=set(), seed=0, progress=progress)
    # each row holds the sequence, the token the prefill emitted, and features at every position of the sequence
    return DistillData([t[:-1] for t in rows.tokens], list(prompt_lengths), [h[:-1] for h in rows.hidden],
                       [h[:-1] for h in rows.layer_hidden], [t[:-1] for t in rows.top1], tuple(layers))


def load_or_generate(out_dir: Path, target: LoadedModel, target_name: str, data_cfg: dict[str, Any], layers: tuple[int, ...],
                     eos_ids: set[int], seed: int, progress: bool = True) -> DistillData:
    """The cached distillation set for these settings, generating it once."""
    check_data_settings(data_cfg)  # before the prompts are tokenized (train() checks them before the target loads)
    prompts = training_prompts(data_cfg.get("path"), tuple(data_cfg.get("exclude_categories") or MT_BENCH_CATEGORIES),
                               data_cfg.get("num_prompts"))
    ids = [encode_prompt(p, target.tokenizer) for p in prompts]  # chat template unless the row says chat: false
    keep = [i for i, x in enumerate(ids) if len(x) <= int(data_cfg.get("max_prompt_tokens", 256))]
    ids = [ids[i] for i in keep]
    if not ids:
        raise ConfigError(f"no training prompt is <= data.max_prompt_tokens={data_cfg.get('max_prompt_tokens')} tokens")
    dtype_name = str(data_cfg.get("dtype") or "float32")
    # a float32 set's key is as it was before data.dtype existed, so the sets already made are found again
    key = cache_key(version=DATA_VERSION, target=target_name, ids=ids, layers=layers, seed=seed,
                    **{k: data_cfg.get(k) for k in ("max_new_tokens", "samples", "temperature")},
                    **({} if dtype_name == "float32" else {"dtype": dtype_name}))
    bsz = int(data_cfg.get("batch_size", 32))
    samples = int(data_cfg.get("samples", 1))
    # what the responses depend on (not the layers a head records): data.responses' files are checked against it
    rkey = cache_key(version=DATA_VERSION, target=target_name, ids=ids, seed=seed, dtype=dtype_name,
                     **{k: data_cfg.get(k) for k in ("max_new_tokens", "samples", "temperature")})
    given = saved_responses.Responses(data_cfg["responses"], rkey, bsz) if data_cfg.get("responses") else None
    t0 = time.perf_counter()
    writer, runner = data_writer(target, GEN_DTYPES[dtype_name])
    # a shard = one batch of similar-length prompts (little padding), saved on its own, so an interrupted
    # run resumes where it stopped. Shards are made in a seeded random order: a prefix of that order
    # (`data.max_shards`, or where `data.time_budget_s` stopped) is a random subset of the prompts.
    by_length = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    # a shard is one batch of `bsz` prompts, so shards cut at another batch size live apart (mixing them would
    # repeat some prompts and leave others out)
    shard_dir = out_dir / f"distill-{key}-rows{bsz}.shards"
    shard_dir.mkdir(parents=True, exist_ok=True)
    n_shards = -(-len(ids) // bsz)
    visit = torch.randperm(n_shards, generator=torch.Generator().manual_seed(seed)).tolist()
    max_shards = data_cfg.get("max_shards")
    budget = data_cfg.get("time_budget_s")
    parts, used = [], []
    for n_done, s in enumerate(visit[: n_shards if max_shards is None else min(n_shards, int(max_shards))]):
        shard = shard_dir / f"{s:04d}.pt"
        if not shard.exists():
            if budget is not None and time.perf_counter() - t0 > float(budget):
                print(f"distillation: data.time_budget_s={budget} reached after {n_done} of {n_shards} shards; "
                      f"training on those (reproduce with data.max_shards={n_done})", flush=True)
                break
            prompts_of_shard = [ids[i] for i in by_length[s * bsz : (s + 1) * bsz]]
            if given is not None and s in given:
                part = features_of(writer, runner, *given.sequences(s, prompts_of_shard, samples), layers=layers,
                                   batch_size=min(bsz, PREFILL_ROWS), progress=progress)
                how = f"from {given.path.name}'s responses"
            else:
                part = generate_distillation(writer, runner, prompts_of_shard,
                                             max_new_tokens=int(data_cfg.get("max_new_tokens", 128)), samples=samples,
                                             temperature=float(data_cfg.get("temperature", 0.7)), batch_size=bsz,
                                             layers=layers, eos_ids=eos_ids, seed=seed + s, progress=progress)
                how = "decoded"
            _save(part, shard)
            print(f"distillation shard {n_done + 1}/{n_shards} ({how}): {time.perf_counter() - t0:.0f}s", flush=True)
        parts.append(_load(shard))
        used.append(s)
    if writer is target:
        runner.allocate(1, 1)  # frees the target's cache; a bfloat16 copy's goes with it
    elif isinstance(runner, GraphedRunner):
        runner.drop_graphs()
    del writer, runner
    data = DistillData([], [], [], [], [], tuple(layers))
    for part in parts:
        for name in ("tokens", "prompt_lengths", "hidden", "layer_hidden", "top1"):
            getattr(data, name).extend(getattr(part, name))
    if data_cfg.get("export_responses"):
        out = Path(str(data_cfg["export_responses"])).expanduser()
        saved_responses.export(out, rkey, bsz, {s: (part.tokens, part.prompt_lengths) for s, part in zip(used, parts)})
        print(f"distillation responses of {len(used)} shards -> {out} ({out.stat().st_size / 2**20:.1f} MiB; "
              "data.responses makes the set from them without decoding)", flush=True)
    n_tok = sum(len(t) for t in data.tokens)
    print(f"distillation set: {len(data)} sequences, {n_tok} tokens, {len(parts)} of {n_shards} shards of "
          f"{len(ids)} prompts ({time.perf_counter() - t0:.0f}s) in {shard_dir}", flush=True)
    return data


def data_writer(target: LoadedModel, dtype: torch.dtype) -> tuple[LoadedModel, Runner]:
    """The model that writes the distillation set, and the runner it decodes with.

    float32 (the default, and every committed drafter's data): the target itself on our decoder's torch path.
    bfloat16: the target loaded again in bfloat16, on our decoder's default path, which on CUDA is the decode engine's own
    (Triton kernels, batch-invariant products, CUDA graphs): several times faster there, and the set is then the
    bfloat16 target's responses and features (the target run as the CUDA and the AMX CPU default run it). The
    trainer keeps the float32 target for its losses either way."""
    if dtype == torch.float32:
        return target, DecoderRunner(target.model, use_kernels=False)
    # loaded again, not copied: a DecoderRunner built on the target (fused weights held outside its parameters) would
    # leave float32 tensors in a copy that .to() converts
    writer = load_model(target.spec, next(target.model.parameters()).device, dtype)
    runner = DecoderRunner(writer.model)
    return writer, maybe_graphed(runner, cuda_graphs_default("auto", runner.device))


def _save(data: DistillData, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save({"tokens": data.tokens, "prompt_lengths": data.prompt_lengths, "hidden": data.hidden,
                "layer_hidden": data.layer_hidden, "top1": data.top1, "layers": list(data.layers)}, tmp)
    tmp.replace(path)


def _load(path: Path) -> DistillData:
    blob = torch.load(path, weights_only=True)
    return DistillData(blob["tokens"], blob["prompt_lengths"], blob["hidden"], blob["layer_hidden"], blob["top1"],
                       tuple(blob["layers"]))
