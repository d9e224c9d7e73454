"""Helpers shared by the tests: tiny random models built from a config, perturbed drafts, and a tiny training run's
config.

A plain module (not conftest.py): subdirectories have conftest.py files of their own, so
`from conftest import ...` would pick whichever was imported first.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from hydra import compose, initialize_config_dir

from specbench.config import CONF_DIR
from specbench.models.loading import LoadedModel, load_model, resolve_spec


def cut_at_commonest_token(outputs: list[list[int]]) -> tuple[int, list[list[int]]]:
    """(stop, each output cut after its first stop): stop is the token found in the most outputs (once per output,
    away from its first and last two tokens; the smallest id among ties), so as a stop token it ends some outputs
    early and leaves others whole (the continuous-batching tests, CPU and GPU)."""
    counts = torch.bincount(torch.tensor([t for out in outputs for t in set(out[1:-2])], dtype=torch.long))
    stop = int(counts.argmax())
    return stop, [out[: out.index(stop) + 1] if stop in out else out for out in outputs]


def tiny(name: str = "tiny-llama", seed: int = 0) -> LoadedModel:
    spec = resolve_spec({"name": name, "init_seed": seed}, "target")
    return load_model(spec, "cpu", torch.float32)


def perturbed(model: LoadedModel, scale: float, seed: int = 1) -> LoadedModel:
    """A draft that agrees with `model` often but not always: its weights plus Gaussian noise."""
    hf = copy.deepcopy(model.model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale * p.abs().mean())
    return LoadedModel(spec=model.spec, model=hf, tokenizer=model.tokenizer)


PROMPT_LENGTHS = (5, 9, 3, 12, 7, 4, 10, 6)  # ragged, so a batch of 4 mixes lengths


def ragged_prompts(vocab: int, lengths: tuple[int, ...] = PROMPT_LENGTHS, seed: int = 0) -> list[list[int]]:
    """Random token-id prompts of the given lengths."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=g).tolist() for n in lengths]


def hf_greedy(model: torch.nn.Module, prompts: list[list[int]], max_new: int) -> list[list[int]]:
    """transformers' own greedy generate, one prompt at a time: the reference every strategy must equal."""
    outs = []
    for p in prompts:
        o = model.generate(torch.tensor([p]), max_new_tokens=max_new, min_new_tokens=max_new, do_sample=False,
                           eos_token_id=None, pad_token_id=0)
        outs.append(o[0, len(p):].tolist())
    return outs


def assert_runner(runner: object) -> None:
    """`runner` satisfies specbench.models.runner.Runner as isinstance checks it on this Python, and as Python
    >= 3.12 does (static lookup, which does not see attributes a __getattr__ delegates)."""
    import inspect

    from specbench.models.runner import Runner

    assert isinstance(runner, Runner), f"{type(runner).__name__} is not a Runner"
    members = [name for name in vars(Runner) if name == "__call__" or not name.startswith("_")]
    assert set(members) == {"vocab_size", "device", "max_len", "allocate", "__call__"}
    missing = [name for name in members if inspect.getattr_static(runner, name, None) is None]
    assert not missing, f"{type(runner).__name__} lacks {missing} as class attributes"
    runner.allocate(2, 9)
    assert runner.max_len >= 9 and runner.vocab_size > 0 and isinstance(runner.device, torch.device)


def chisquare_pvalue(counts, probs) -> float:
    """Chi-square goodness of fit of token counts [V] to exact probabilities [V] (torch tensors or numpy
    arrays; `np.bincount(samples, minlength=V)` turns samples into counts). Tokens of expected count < 5
    share one bin so the chi-square approximation holds; a remainder still below 5 joins the largest bin.
    A token of probability 0 must never be emitted. The one helper every distribution test uses."""
    import numpy as np
    from scipy.stats import chisquare

    counts = np.asarray(counts, dtype=np.float64)
    probs = np.asarray(probs, dtype=np.float64)
    assert counts[probs == 0].sum() == 0, "a token of probability 0 was emitted"
    n = counts.sum()
    expected = probs / probs.sum() * n
    big = expected >= 5
    obs, exp = counts[big], expected[big]
    rest_obs, rest_exp = counts[~big].sum(), expected[~big].sum()
    if rest_exp >= 5:
        obs, exp = np.append(obs, rest_obs), np.append(exp, rest_exp)
    elif rest_exp > 0:
        obs, exp = obs.copy(), exp.copy()
        obs[np.argmax(exp)] += rest_obs
        exp[np.argmax(exp)] += rest_exp
    return float(chisquare(obs, exp).pvalue)


def resample_from_p(draft, draft_probs, target_probs, u, e):
    """THE deliberately wrong acceptance rule of every mutation check (verify.Verifier's `rule`): the right
    acceptance test, but on rejection it samples from p instead of norm(max(0, p - q)). A distribution test
    that passes with the right rule must fail with this one, or it has no power."""
    from specbench.verify import Verdict, rejection_sample, sample_from

    v = rejection_sample(draft, draft_probs, target_probs, u, e)
    resample = sample_from(target_probs[torch.arange(draft.shape[0]), v.accepted], e)
    return Verdict(v.accepted, torch.where(v.accepted < draft.shape[1], resample, v.next_token))


def tree_resample_from_p(tokens, parents, qs, target, u, e):
    """THE deliberately wrong tree rule (verify.Verifier's `tree_rule`; the tree twin of resample_from_p): after a
    rejected child the next sibling, and the final draw, still use r = p instead of norm(max(0, r - q))."""
    from specbench.verify import TreeVerdict, sample_from

    bsz, n = tokens.shape
    dev = tokens.device
    rows = torch.arange(bsz, device=dev)
    node = torch.full((bsz,), -1, device=dev)
    path = torch.full((bsz, n), -1, device=dev)
    length = torch.zeros(bsz, dtype=torch.long, device=dev)
    r = target[:, 0]
    for j in range(n):
        x = tokens[:, j]
        q_x = (qs[:, j].gather(1, x[:, None])[:, 0] if qs is not None else torch.ones(bsz)).double()
        ok = (parents[:, j] == node) & (u[:, j] * q_x < r.gather(1, x[:, None])[:, 0].double())
        r = torch.where(ok[:, None], target[:, j + 1], r)
        path[rows, length] = torch.where(ok, j, path[rows, length])
        length, node = length + ok.long(), torch.where(ok, j, node)
    return TreeVerdict(path=path, accepted=length, next_token=sample_from(r, e))


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models gain nothing from intra-op threads, and on a shared CPU OpenMP spin-waits cost a lot.
    A conftest.py that imports this fixture applies it to its directory's tests."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def local_model_dir(path, weights: bool = True, **config_overrides):
    """A model directory as `target.path=` / `draft.path=` load it: tiny-llama's architecture (config overrides
    applied) with random weights and a whitespace word-level tokenizer. weights=False writes config.json only
    (enough for checks that run before loading)."""
    import json
    from pathlib import Path

    from specbench.models.presets import PRESETS

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    arch = {**PRESETS["tiny-llama"].arch, **config_overrides}
    if not weights:
        (path / "config.json").write_text(json.dumps(arch))
        return path
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    model_type = arch.pop("model_type")
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **arch)).save_pretrained(path)
    words = ["[UNK]", *"the a of to and is in what how why write explain list".split()]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(path)
    return path


# -- trees given as parent lists (node i under node parents[i]; -1 = the pending token) ----------------------------


def tree_ancestors(parents: list[int]) -> torch.Tensor:
    """[T, T] bool over [pending, node 0..N-1]: column u is an ancestor of (or is) row t."""
    n = len(parents)
    m = torch.zeros(n + 1, n + 1, dtype=torch.bool)
    for t in range(n + 1):
        u = t
        while True:
            m[t, u] = True
            if u == 0:
                break
            u = parents[u - 1] + 1
    return m


def tree_depth(parents: list[int], i: int) -> int:
    """Node i's depth (1 under the pending token; -1, the pending token itself, is 0)."""
    return 0 if i < 0 else 1 + tree_depth(parents, parents[i])


def tree_path_nodes(parents: list[int], i: int) -> list[int]:
    """The nodes from the pending token's child down to node i."""
    return [] if i < 0 else tree_path_nodes(parents, parents[i]) + [i]


def tree_columns(parents: list[int]) -> list[list[int]]:
    """Per column of [pending, node 0..N-1], the columns of its root path: [0, ..., itself]."""
    return [[0] + [j + 1 for j in tree_path_nodes(parents, col - 1)] for col in range(len(parents) + 1)]


def row_result(drafts: int, draft_tokens: int, accepted: int, accepted_at: list[int]) -> Any:
    """One prompt's engine.RowResult with these drafting figures, for metrics and the table built from them."""
    from specbench.engine import RowResult

    return RowResult(output_ids=list(range(accepted + drafts)), drafts=drafts, draft_tokens=draft_tokens,
                     accepted_tokens=accepted, accepted_at=accepted_at, ttft_s=0.01, latency_s=0.5,
                     emissions=[(0.01, 1), (0.5, accepted + drafts - 1)], finished_by="length")


def leave_gloo_rank() -> None:
    """A spawned gloo rank whose work, barrier and teardown succeeded ends here, without the interpreter's own
    finalization. In CI (2026-12-02, after the barriers were added) rank 0 of tp_forward_worker still died with
    SIGABRT, "terminate called without an active exception", which reads as a C++ thread destroyed at exit; 14 runs
    here under load did not repeat it. Results are written before this point, and a failure raises before it."""
    import os
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def tp_forward_worker(rank: int, world: int, port: int, out: str) -> None:
    """One gloo rank of a tensor-parallel forward (tests/models/test_tensor_parallel.py, spawned by
    torch.multiprocessing): tiny-qwen3-tp split over `world` ranks, a prefill of 2 ragged rows and three decode
    steps of 1, 3 and 2 tokens; rank 0 saves every forward's logits to `out`."""
    import os

    import torch.distributed as dist

    from specbench.models.decoder import DecoderRunner
    from specbench.models.tensor_parallel import TPGroup

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        logits = tp_forward_logits(DecoderRunner(tiny("tiny-qwen3-tp").model, tp=TPGroup(rank, world)))
        if rank == 0:
            torch.save(logits, out)
        dist.barrier()  # both ranks done before either tears gloo down (a rank leaving first aborted the other in CI)
    finally:
        dist.destroy_process_group()
    leave_gloo_rank()


def tp_shard_on_load_worker(rank: int, world: int, port: int, out: str) -> None:
    """One gloo rank of tiny-qwen3-tp built as that rank's share only (load_model(shard=...), engine.shard_on_load):
    saves its weights to out/rank<r>.pt, and rank 0 the forwards' logits to out/logits.pt."""
    import os
    from pathlib import Path

    import torch.distributed as dist

    from specbench.models.decoder import DecoderRunner
    from specbench.models.tensor_parallel import TPGroup

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        model = load_model(resolve_spec({"name": "tiny-qwen3-tp"}, "target"), "cpu", torch.float32, shard=(rank, world))
        torch.save(model.model.state_dict(), Path(out) / f"rank{rank}.pt")
        logits = tp_forward_logits(DecoderRunner(model.model, tp=TPGroup(rank, world)))
        if rank == 0:
            torch.save(logits, Path(out) / "logits.pt")
        dist.barrier()
    finally:
        dist.destroy_process_group()
    leave_gloo_rank()


def tp_hf_plan_worker(rank: int, world: int, port: int, out: str) -> None:
    """One gloo rank: tiny-qwen3-tp loaded through transformers' tp_plan; rank 0 saves its local q_proj / down_proj
    shapes and its logits for a few tokens."""
    import os

    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        model = load_model(resolve_spec({"name": "tiny-qwen3-tp"}, "target"), "cpu", torch.float32, hf_tp=True).model
        layer = model.model.layers[0]
        logits = model(torch.tensor([[3, 1, 4, 1, 5]])).logits
        if rank == 0:
            torch.save({"q": tuple(layer.self_attn.q_proj.weight.to_local().shape),
                        "down": tuple(layer.mlp.down_proj.weight.to_local().shape), "logits": logits}, out)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    leave_gloo_rank()


def tp_forward_logits(runner: Any) -> list[torch.Tensor]:
    """The forwards tp_forward_worker runs, on any runner (TP = 1 for the reference)."""
    g = torch.Generator().manual_seed(3)
    seq = torch.randint(0, 101, (2, 30), generator=g)
    runner.allocate(2, 40)
    lengths = torch.tensor([9, 5])
    out = [runner(seq[:, :9], torch.arange(9).expand(2, 9), attn_len=9).logits]
    for t in (1, 3, 2):
        positions = lengths[:, None] + torch.arange(t)
        out.append(runner(seq.gather(1, positions), positions, attn_len=int(positions.max()) + 1).logits)
        lengths = lengths + t
    return out


def train_overrides(tmp_path, prompts_file) -> list[str]:
    """A tiny training run's settings as command-line overrides: the tiny random target, six prompts, batches of two."""
    return ["target=tiny-llama", "logger=none", f"data.cache_dir={tmp_path / 'data'}", f"data.path={prompts_file}",
            "data.num_prompts=6", "data.max_new_tokens=6", "data.batch_size=4", "train.batch_size=2",
            "train.ce_vocab=40", "train.ce_positions=8", "train.save_every=2", "train.val_sequences=1",
            "train.log_every=1"]


def train_cfg(tmp_path, prompts_file, *overrides):
    """The tiny run's config as `python -m specbench.train` composes it, into tmp_path/run; `overrides` come last."""
    with initialize_config_dir(config_dir=str(CONF_DIR / "train"), version_base="1.3"):
        return compose("config", overrides=[*train_overrides(tmp_path, prompts_file), f"output_dir={tmp_path / 'run'}",
                                            *overrides])
