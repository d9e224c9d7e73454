"""Tensor parallelism for our decoder: each rank keeps 1/N of every layer's heads and MLP columns.

Megatron's split (Shoeybi et al. 2019, arXiv 1909.08053), as vLLM and gpt-fast apply it to Llama-style
decoders: the fused q/k/v and gate/up projections are split by output columns (rank r keeps query heads
r*Hq/N .. (r+1)*Hq/N - 1, the matching KV heads, and intermediate columns r*I/N ..), o_proj and
down_proj by input columns; each rank's o_proj and down_proj outputs are partial sums, added over the
ranks by one all-reduce each (2 per layer). Embedding, norms and the LM head stay whole on every rank, so
every rank computes the same logits and runs the same engine loop: the same draft (replicated on each
rank, as vLLM's draft_tensor_parallel_size=1 per rank would be), the same seeded verifier, the same
accepted tokens, with no other communication. The KV cache of a rank holds its own KV heads only. Only
rank 0 writes results and logs (run.py).

Exactness: an all-reduce adds the ranks' partial sums elementwise, so a token's result does not depend on
the other rows or tokens of the forward; with the batch-invariant kernels a node's logits stay its
chain's at TP = N as at TP = 1 (they differ from TP = 1's in the last bits: the sum is split differently).
What must equal what is speculative decoding and target-only decoding at the same N.

Loading: each rank loads the whole target and keeps its share, so a target must fit one device. For random-weight
targets `engine.shard_on_load=true` builds only the rank's share instead (loading._random_model: a model with 1/N of
the heads and MLP columns, which DecoderRunner takes as this rank's share as is); its weights are not those of
tensor_parallel=1, and no draft may reuse it (draft=self, layer_skip are refused).

Launch: `engine.tensor_parallel=N` on one machine starts N - 1 worker processes beside the current one
(run.py), or `torchrun --nproc-per-node N -m specbench engine.tensor_parallel=N ...` sets the ranks
itself. NCCL on CUDA (rank r on cuda:r), gloo on the CPU (the tests).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from specbench.errors import ConfigError


@dataclass(frozen=True)
class TPGroup:
    rank: int
    world: int
    group: Any = None  # a torch.distributed ProcessGroup (None: the default group)

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """Sum x over the ranks, in place (x must be contiguous); returns it."""
        dist.all_reduce(x, group=self.group)
        return x


def env_rank() -> tuple[int, int] | None:
    """(rank, world size) when this process was started as one rank of several (torchrun or run.py's workers)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    return (int(os.environ.get("RANK", "0")), world) if world > 1 else None


def init_group(world: int, device: torch.device) -> TPGroup:
    """Join (or reuse) the default process group of `world` ranks from the environment (RANK, WORLD_SIZE,
    MASTER_ADDR, MASTER_PORT); NCCL on CUDA, gloo on the CPU."""
    ranks = env_rank()
    if ranks is None or ranks[1] != world:
        raise ConfigError(f"engine.tensor_parallel={world} but this process is not one of {world} ranks "
                          f"(WORLD_SIZE={os.environ.get('WORLD_SIZE')!r}); start it with torchrun --nproc-per-node {world}, "
                          f"or let `python -m specbench` start the ranks")
    if not dist.is_initialized():  # a rank that dies ends the others' wait within the timeout
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=ranks[0], world_size=world,
                                timeout=timedelta(minutes=10))
    return TPGroup(rank=dist.get_rank(), world=dist.get_world_size())


SPLIT_SIZES = ("num_attention_heads", "num_key_value_heads", "intermediate_size")


def raise_if_unshardable(config: Any, world: int, label: str) -> None:
    """Every rank needs whole heads and an equal share of the MLP: Hq, Hkv and the intermediate size must divide by N.
    `config`: a transformers config, or a mapping of sizes known before loading (checked where present)."""
    if isinstance(config, Mapping):
        sizes = {k: config[k] for k in SPLIT_SIZES if config.get(k) is not None}
    else:
        text = getattr(config, "text_config", None) or config
        sizes = {k: getattr(text, k) for k in SPLIT_SIZES}
    bad = {k: v for k, v in sizes.items() if v % world}
    if bad:
        raise ConfigError(f"engine.tensor_parallel={world} for target {label!r}: {bad} do not divide by {world}; "
                          f"allowed: a tensor_parallel size that divides {sizes}")


def shard_weights(w: dict[str, torch.Tensor | None], num_heads: int, num_kv_heads: int, head_dim: int,
                  tp: TPGroup) -> dict[str, torch.Tensor | None]:
    """One layer's fused weights (DecoderRunner._w: qkv_w [(Hq + 2 Hkv) D, H], gu_w [2 I, H], o_w [H, Hq D],
    down_w [H, I], their biases) -> this rank's share, as new contiguous tensors. o_proj's and down_proj's
    biases stay on rank 0 only (they are added once, before the all-reduce sums the ranks)."""
    r, n = tp.rank, tp.world
    hq, hkv, d = num_heads // n, num_kv_heads // n, head_dim

    def qkv_rows(t: torch.Tensor) -> torch.Tensor:
        q, k, v = t.split([num_heads * d, num_kv_heads * d, num_kv_heads * d])
        return torch.cat([q[r * hq * d:(r + 1) * hq * d], k[r * hkv * d:(r + 1) * hkv * d], v[r * hkv * d:(r + 1) * hkv * d]])

    def gu_rows(t: torch.Tensor) -> torch.Tensor:
        gate, up = t.chunk(2)
        i = gate.shape[0] // n
        return torch.cat([gate[r * i:(r + 1) * i], up[r * i:(r + 1) * i]])

    inter = w["down_w"].shape[1] // n
    out = dict(w)
    out["qkv_w"] = qkv_rows(w["qkv_w"]).contiguous()
    out["qkv_b"] = None if w["qkv_b"] is None else qkv_rows(w["qkv_b"]).contiguous()
    out["gu_w"] = gu_rows(w["gu_w"]).contiguous()
    out["gu_b"] = None if w["gu_b"] is None else gu_rows(w["gu_b"]).contiguous()
    out["o_w"] = w["o_w"][:, r * hq * d:(r + 1) * hq * d].contiguous()
    out["down_w"] = w["down_w"][:, r * inter:(r + 1) * inter].contiguous()
    return biases_summed_once(out, tp)


def biases_summed_once(w: dict[str, torch.Tensor | None], tp: TPGroup) -> dict[str, torch.Tensor | None]:
    """o_proj's and down_proj's biases are added to partial sums that the all-reduce then adds up across
    ranks: only rank 0 keeps them, so each is counted once."""
    return w if tp.rank == 0 else dict(w, o_b=None, down_b=None)
