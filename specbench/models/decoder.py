"""Our own forward pass for the Llama / Qwen2 / Qwen3 decoder family, over a per-row static KV cache.

The weights are the transformers model's own modules (loaded by transformers from the hub, a
local directory, a GGUF file or a config), so loading is transformers' job and numerics match it;
only the forward is ours, because speculative decoding needs what transformers' caches do not
give: every row of the batch writes its new tokens at its own positions.

Cache layout: slot == position. Row b's token at position p lives in slot p of row b. A forward
over [B, T] tokens at positions [B, T] first writes their keys and values into those slots, then
each query at position p attends to slots 0..p of its own row. Rejected draft tokens leave stale
entries above the accepted length; they are never read (the mask stops at p) and are overwritten
by the next step's tokens at the same positions. No copies, no rollback.

The forward performs no host synchronisation: every shape comes from the inputs or from
`attn_len`, a host-side bound on the positions the caller already knows.

Speed (issue 5). The q/k/v and gate/up projections run as one GEMM each: their weights are
concatenated once and transformers' modules are re-pointed at views of the fused tensor (no second
copy; the hf model still works). On CUDA with triton (`use_kernels=None` = auto) the step between
GEMMs runs as four fused kernels per layer (specbench/kernels/decode.py): residual add + RMSNorm,
q/k-norm + rotary + cache write, decode attention over each row's valid slots (read from the
positions on the device, so `attn_len` does not matter for T <= 16 and a CUDA graph can be
captured at a fixed shape), and SiLU * up. A tree verify forward (`slots` apart from positions, `tree_mask`)
takes the same kernels: each node attends to its row's prefix, then its ancestors' slots in logical order.
Elsewhere the torch reference path runs (the same
fused GEMMs), which is what the CPU tests compare against transformers.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from specbench.kernels import cpu_rows
from specbench.kernels.decode_ref import add_rmsnorm_ref, qkv_rope_cache_ref, rmsnorm_ref, tree_paths, tree_slot_mask
from specbench.models.tensor_parallel import TPGroup, biases_summed_once, shard_weights

# model_type -> whether attention has per-head q/k RMSNorm (Qwen3)
SUPPORTED_ARCHS: dict[str, bool] = {"llama": False, "qwen2": False, "qwen3": True}
# the language models of the M-RoPE VLMs (multimodal.FastVLMRunner): a Qwen2 / Qwen3 decoder whose rotary takes a
# position per token; for text tokens (all three M-RoPE components equal) that is the plain 1-D rotary
VLM_TEXT_ARCHS: dict[str, bool] = {"qwen2_vl_text": False, "qwen2_5_vl_text": False, "qwen3_vl_text": True}

DECODE_KERNEL_MAX_T = 16  # the decode-attention kernel takes up to this many new tokens per row; SDPA above


@dataclass
class ForwardOutput:
    logits: torch.Tensor  # [B, T', V] float32: T' = T, or the number of `logits_at` columns
    hidden: torch.Tensor | None = None  # [B, T, H] final-norm hidden states, when asked
    layer_hidden: list[torch.Tensor] = field(default_factory=list)  # [B, T, H] each, outputs of asked layers


# How the decoder multiplies 1..64 rows by a weight on the CPU (fp32, or bf16 off the bit-invariant path); more than
# 64 always take F.linear. Two forms take different MKL paths: F.linear, and `weight @ x.T` on row-major x (a transposed
# view; x.T made contiguous takes a third path, 3x slower on the AMD EPYC below, which a column-major input would
# silently reach, so inputs are made contiguous). Which is faster depends on the machine, and on the row count:
# `weight @ x.T` was 1.2-1.8x faster on the first CPU we measured, 1.5x slower on three later AVX-512 ones (a 1 x 4
# forward of SmolLM2-135M 113.9 ms against F.linear's 77.9), and on an AMD EPYC with AVX2 (experiments/cpu/README.md,
# streaming each shape's weights from memory as a forward does) 2.6x faster on 4 rows, and faster on 2 rows than
# F.linear on 1: there 1 row padded to 2 (and 3 to 4) is faster than the row(s) alone. So by default ("auto") each
# (weight shape, row count) takes the form, and the padding, that a first timing on this machine finds fastest
# (`_cpu_form`). None: F.linear always; (lo, hi): `weight @ x.T` for lo..hi rows always, unpadded
# (experiments/cpu/bench_forward.py measures them side by side).
LINEAR_WT_ROWS: tuple[int, int] | None | str = "auto"
AUTO_ROWS = (1, 8)  # the row counts "auto" decides one by one
# Above them, up to the last bucket's top, "auto" decides per bucket of row counts (9-16, 17-32, 33-64), timing each
# form at the bucket's top; more rows take F.linear. A wide tree's verify or a batch's step meets these counts: on the
# AMD EPYC of experiments/cpu/README.md (2026-12-04) F.linear made a 9-token forward of SmolLM2-135M 2.7x a 1-token
# step and a 17-token one 3.0x, where the buckets' forms (oneDNN's packed product) took 1.28x and 1.61x
# (experiments/cpu/forward_widths.py, amd-run11/forward_widths.txt)
AUTO_BUCKETS = (16, 32, 64)
# (N, K, dtype, rows, float16 copy or not) -> (form, rows computed): "linear" (F.linear), "transposed" (`weight @ x.T`),
# "half" (F.linear on the float16 copy), "packed" (oneDNN's float32 product on a copy of the weight in its packed
# layout, `_onednn_copy`) or "rows" (kernels/cpu_rows.py on its packed copy), on the rows padded with zero rows to
# `rows computed` (rows itself, or one more for an odd count)
_CPU_FORMS: dict[tuple[int, int, torch.dtype, int, bool], tuple[str, int]] = {}
# "auto" times each form on copies of the weight this many bytes in all (at most 256 copies), more than a CPU's
# last-level cache holds, so the weights stream from memory as a forward's do (a warm weight can rank them otherwise:
# on the AMD EPYC, F.linear on 1 row wins warm and loses by 1.5x streaming)
TIMING_BYTES = 64 << 20
# "auto" also times oneDNN's float32 product on a packed copy of the weight ("packed") where torch has it. On the AMD
# EPYC with AVX-512 of experiments/cpu/README.md (2026-12-03) it was the fastest form from 4 rows on: SmolLM2-135M's
# GEMMs of 4 rows 22.7 ms a forward against 27.1 for `weight @ x.T`, of 5 rows 23.1 against 44.6 (1 row, padded to
# 2: 18.8; experiments/cpu/bench_packed_fp32.py), so a 4-token verify streamed the weights at nearly a 1-token
# step's cost. A weight gets its copy (as
# much memory again) only when that form wins for one of its row counts.
PACKED_FORM = True
ONEDNN_FP32_PACK_ROWS = 8  # the packing hint (the layout oneDNN chooses for that many rows); any row count runs on it
# "auto" also times our own float32 product ("rows", kernels/cpu_rows.py: it streams a packed copy of the weight once
# for every row and sums each output in one order whatever the row count) where it builds here, and for 2 rows or
# more takes it unless another form is faster by more than ROWS_MARGIN. The margin is there because the timing above
# can run from a large last-level cache (TIMING_BYTES of copies), which hides what the library forms pay in memory
# traffic from 3 rows on, where they re-pack the weight at every call. On the Intel Xeon with AVX512-BF16 and no AMX
# of experiments/cpu/intel-noamx-run2/ (260 MB of L3) that timing still took F.linear for some shapes at 4 and 6
# rows with a margin of 1.15; with 1.5 it took "rows" from 2 rows on, and SmolLM2-135M's whole forwards of 4 / 6 / 8
# tokens took 0.99 / 1.12 / 1.14 times a 1-token forward, against 1.56 / 1.75 / 1.91 with the forms chosen without
# "rows" (1 token: 37.9 and 36.1 ms; forward_rows-prefetch.txt). The margin is calibrated on that one machine.
ROWS_FORM = True
ROWS_MARGIN = 1.5


def masked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float,
                     fold: bool | None = None) -> torch.Tensor:
    """SDPA of q [B, Hq, T, D] over k, v [B, Hkv, S, D] (query head h reads key/value head h // G, G = Hq / Hkv)
    under a boolean mask [B, 1, T, S] -> [B, Hq, T, D].

    `fold` (on CUDA, unless given, wherever no fused kernel takes the grouped call: in float32, and in any dtype
    while cuDNN's attention is off): run it as Hkv heads of G * T queries, each head's group of queries folded into
    the query axis. In float32 SDPA's enable_gqa with a mask is taken by no fused CUDA backend, and its math backend
    copies the keys and values out to every query head, each layer and step; folded, the memory-efficient kernel
    reads each key/value head once (an H100, torch 2.11: 292 against 867 us at the distillation data's decode
    shape, and its whole step 17 against 30 ms). In bfloat16 cuDNN takes the grouped call, and folding is slower (an
    8B prefill of 1024 tokens: 155 against 116 us; experiments/drafters/datagen-run2/). Without cuDNN (training in
    bfloat16 leaves it out, train/loop.autocast) only the math backend would: folded, a head's training step ran
    1.29-1.41x faster (experiments/drafters/train_speed/fold-run1/). The CPU's own kernel takes the groups as they
    are (and gives the same bits with enable_gqa on or off when the head counts are equal)."""
    bsz, hq, t, d = q.shape
    hkv = k.shape[1]
    if fold is None:
        fold = q.device.type == "cuda" and (q.dtype == torch.float32 or not torch.backends.cuda.cudnn_sdp_enabled())
    if not fold or hq == hkv:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=hq != hkv)
    g = hq // hkv
    grouped = mask.expand(bsz, 1, t, mask.shape[-1]).repeat(1, 1, g, 1)  # [B, 1, G*T, S]: query (j, t) is t's
    return F.scaled_dot_product_attention(q.reshape(bsz, hkv, g * t, d), k, v, attn_mask=grouped,
                                          scale=scale).reshape(bsz, hq, t, d)  # CUDA's may be [B, G*T, Hkv, D]


def _transposed(x: torch.Tensor, weight: torch.Tensor, rows: int | None = None) -> torch.Tensor:
    """x [..., K] @ weight.T as `weight @ x.T` over row-major x, computed on `rows` rows (x's own, or more: zero rows
    appended, their results dropped), returned row-major."""
    flat = x.reshape(-1, x.shape[-1]).contiguous()
    m = flat.shape[0]
    if rows is not None and rows > m:
        flat = torch.cat([flat, flat.new_zeros(rows - m, flat.shape[1])])
    # row-major out: a column-major result would reach later ops as strided views (SDPA's CPU flash kernel wants
    # a unit last stride, and without it falls back to the math path: 25 of a 51 ms 1 x 4 forward)
    return (weight @ flat.T)[:, :m].T.contiguous().view(*x.shape[:-1], weight.shape[0])


def _cpu_form(weight: torch.Tensor, rows: int, half: torch.Tensor | None = None) -> tuple[str, int]:
    """The fastest of F.linear, `weight @ x.T` and (odd rows) `weight @ x.T` on one zero row more, for `rows` rows of
    this weight's shape, oneDNN's product on a packed copy (float32, where `_onednn_fp32`), our own ("rows", float32
    where it builds; from 2 rows on preferred within ROWS_MARGIN), and with `half` (a drafter's float16 copy of the
    weight, `CpuLinear`) F.linear on that copy ("half"): timed once per (shape, dtype, rows, half or not) in this
    process (`_time_forms`). The forms round
    differently (their float sums run in other orders); every later call in the process takes the chosen one, so a
    run's baseline and strategy compute alike."""
    key = _form_key(weight, rows, half)
    if key not in _CPU_FORMS:
        _time_forms(weight, [rows], half)
    return _CPU_FORMS[key]


def _timed_rows(rows: int) -> int | None:
    """The row count whose timing decides the form for `rows` rows: rows itself within AUTO_ROWS, the top of its
    bucket above them (AUTO_BUCKETS), None past the last bucket (F.linear)."""
    if AUTO_ROWS[0] <= rows <= AUTO_ROWS[1]:
        return rows
    return next((top for top in AUTO_BUCKETS if AUTO_ROWS[1] < rows <= top), None)


def _every_timed_rows() -> list[int]:
    """Every row count "auto" times: 1..8 and each bucket's top."""
    return list(range(AUTO_ROWS[0], AUTO_ROWS[1] + 1)) + [top for top in AUTO_BUCKETS if top > AUTO_ROWS[1]]


def cpu_form_choices() -> dict[str, dict[str, str]]:
    """The CPU product forms "auto" chose in this process (results.json's environment): per weight shape ("N x K",
    "drafter" for a drafter's weight with a float16 copy), row count -> form, "+pad" where odd rows ran padded by one.
    The choice is timed per process, and two close forms can swap from one process to the next; this says which ran."""
    out: dict[str, dict[str, str]] = {}
    for (n, k, dtype, rows, half), (form, computed) in sorted(_CPU_FORMS.items(), key=lambda kv: kv[0][:2] + kv[0][3:]):
        shape = f"{n}x{k} {str(dtype).removeprefix('torch.')}" + (" drafter" if half else "")
        below = max([AUTO_ROWS[1]] + [top for top in AUTO_BUCKETS if top < rows])
        span = str(rows) if rows <= AUTO_ROWS[1] else f"{below + 1}-{rows}"  # a bucket: the counts it decides
        out.setdefault(shape, {})[span] = form + ("+pad" if computed != rows else "")
    return out


def _form_key(weight: torch.Tensor, rows: int, half: torch.Tensor | None) -> tuple[int, int, torch.dtype, int, bool]:
    return weight.shape[0], weight.shape[1], weight.dtype, rows, half is not None


def _time_forms(weight: torch.Tensor, row_counts: list[int], half: torch.Tensor | None) -> None:
    """Time the forms for each row count over copies of the weight that stream from memory (TIMING_BYTES, made once
    for all the counts), the best of 3 passes each, alternating, after one untimed pass of each; record the fastest
    in _CPU_FORMS."""
    copies = max(1, min(256, TIMING_BYTES // (weight.numel() * weight.element_size())))
    ws = weight.detach().expand(copies, *weight.shape).contiguous() if copies > 1 else weight.detach()[None]
    hs = None if half is None else ws.to(half.dtype)
    ps = [_pack_onednn(w, ONEDNN_FP32_PACK_ROWS) for w in ws] if _onednn_fp32(weight) else None
    rp = [cpu_rows.pack(w) for w in ws] if _rows_fp32(weight) else None
    for rows in row_counts:
        x = torch.randn((rows, weight.shape[1]), generator=torch.Generator().manual_seed(0)).to(weight.dtype)
        candidates = [("linear", rows), ("transposed", rows)] + ([("transposed", rows + 1)] if rows % 2 else [])
        candidates += [] if half is None else [("half", rows)]
        candidates += [] if ps is None else [("packed", rows)]
        candidates += [("rows", rows)] if rp is not None else []

        def run(c: tuple[str, int]) -> None:
            if c[0] == "half":
                [F.linear(x.to(h.dtype), h).to(x.dtype) for h in hs]
            elif c[0] == "packed":
                [_packed_linear(x, p) for p in ps]
            elif c[0] == "rows":
                [cpu_rows.linear(x, p, weight.shape[0]) for p in rp]
            else:
                [F.linear(x, w) if c[0] == "linear" else _transposed(x, w, c[1]) for w in ws]

        best = dict.fromkeys(candidates, float("inf"))
        for rep in range(4):
            for c in candidates:
                start = time.perf_counter()
                run(c)
                if rep:  # the first pass of each is untimed (allocation, MKL's first-use setup)
                    best[c] = min(best[c], time.perf_counter() - start)
        chosen = min(candidates, key=best.__getitem__)
        if rp is not None and rows > 1 and best[("rows", rows)] <= ROWS_MARGIN * best[chosen]:
            chosen = ("rows", rows)
        _CPU_FORMS[_form_key(weight, rows, half)] = chosen


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
            half: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear, or `weight @ x.T` (possibly on padded rows), or F.linear on `half` (a float16 copy of the weight:
    the input rounded to float16, the result back in x's dtype) for CPU inference over 1..64 rows where
    LINEAR_WT_ROWS says so (see above). The same rows give the same result whatever else shares the process."""
    if LINEAR_WT_ROWS is None or x.device.type != "cpu" or torch.is_grad_enabled():
        return F.linear(x, weight, bias)
    rows = x.numel() // x.shape[-1]
    auto = LINEAR_WT_ROWS == "auto"
    timed = _timed_rows(rows) if auto else (rows if LINEAR_WT_ROWS[0] <= rows <= LINEAR_WT_ROWS[1] else None)
    if timed is None:
        return F.linear(x, weight, bias)
    form, padded = _cpu_form(weight, timed, half) if auto else ("transposed", rows)
    padded = padded if timed == rows else rows  # a bucket's form runs on the rows as they are
    if form == "linear":
        return F.linear(x, weight, bias)
    if form == "packed":
        y = _packed_linear(x, _onednn_copy(weight))
    elif form == "rows":
        y = cpu_rows.linear(x, _copy(weight, "rows"), weight.shape[0])
    elif form == "half":
        y = F.linear(x.to(half.dtype), half).to(x.dtype)
    else:
        y = _transposed(x, weight, padded)
    return y if bias is None else y + bias


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear; at inference on the CPU, the form the target's own products take for this weight's shape and row
    count (`_linear`). For a head that multiplies by the target's LM head, which it holds by reference (not one of its
    own children, so `pack_linears` leaves it a plain nn.Linear): plain F.linear there took 34 ms for Medusa's 3 rows
    over SmolLM2-135M's 49152 x 576 head on the AMD EPYC of experiments/cpu/README.md (2026-12-04)."""
    return _linear(x, weight, bias)


def _onednn_fp32(weight: torch.Tensor) -> bool:
    """Whether "auto" may time the "packed" form for this weight: float32, on a CPU where torch has oneDNN's linear
    over a packed weight (PACKED_FORM)."""
    return PACKED_FORM and weight.dtype == torch.float32 and weight.device.type == "cpu" and _onednn_packed_ops()


def _rows_fp32(weight: torch.Tensor) -> bool:
    """Whether "auto" may time the "rows" form (our own product, kernels/cpu_rows) for this weight: float32 on the
    CPU, where the product built and loaded here (ROWS_FORM)."""
    return ROWS_FORM and weight.dtype == torch.float32 and weight.device.type == "cpu" and cpu_rows.available()


# (weight's id, which copy) -> (a weak reference to it, its version when copied, the copy): a packed copy made on the
# first product that takes a form reading one ("packed": oneDNN's layout, "rows": cpu_rows'), dropped with the
# weight, made again after an in-place change to it
_COPIES: dict[tuple[int, str], tuple[weakref.ref, int, torch.Tensor]] = {}


def _copy(weight: torch.Tensor, kind: str) -> torch.Tensor:
    key, version = (id(weight), kind), _version(weight)
    hit = _COPIES.get(key)
    if hit is None or hit[0]() is not weight or hit[1] != version:
        def drop(ref: weakref.ref) -> None:  # only this weight's entry: a later tensor may reuse the id
            if _COPIES.get(key, (None,))[0] is ref:
                del _COPIES[key]

        made = _pack_onednn(weight, ONEDNN_FP32_PACK_ROWS) if kind == "packed" else cpu_rows.pack(weight)
        hit = _COPIES[key] = (weakref.ref(weight, drop), version, made)
    return hit[2]


def _onednn_copy(weight: torch.Tensor) -> torch.Tensor:
    return _copy(weight, "packed")


def _version(t: torch.Tensor) -> int:
    """t's in-place version counter; -1 for an inference tensor (made under inference_mode: it has none, and cannot
    be changed in place outside it)."""
    return -1 if t.is_inference() else t._version


def onednn_bf16() -> bool:
    """Whether this CPU runs bf16 GEMMs through oneDNN on bf16 units (AMX / AVX512-BF16) and torch exposes oneDNN's
    linear over a packed weight. There a bf16 row's product does not depend on how many rows share the call
    (tests/models/test_decoder_cpu_bf16.py checks it), which the CPU's batch-invariant path relies on."""
    try:
        return _onednn_packed_ops() and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def _onednn_packed_ops() -> bool:
    """Whether torch has oneDNN, and its linear over a weight in oneDNN's packed layout (`_pack_onednn`)."""
    return (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight"))


# oneDNN's bf16 product is row-invariant (a row's result does not depend on how many rows share the call) on the Intel
# CPUs with AMX of experiments/cpu/README.md for every inner dimension K that is a multiple of 64 we tried (64..1536,
# N 48..49152, M 1..40), but not for K = 32 or 48 (another kernel for small K): the CPU's batch-invariant path needs
# every GEMM's K to be such a multiple. That is not enough everywhere: on an AMD EPYC with AVX512-BF16 and no AMX
# (2026-12-03) K = 1536 (SmolLM2-135M's down projection) rounds differently from 2 rows on, and the default job's
# output left the target's on 7 of 10 prompts. So each shape is also probed on this CPU (`onednn_row_invariant`).
ONEDNN_INVARIANT_K = 64


def cpu_bf16_invariant(known: dict | None) -> bool:
    """Whether a target of these sizes (a ModelSpec's `known`, before loading) would take DecoderRunner's bit-invariant
    bf16 path on this CPU (`cpu_invariant`): our decoder's architecture, text only, every GEMM inner size a multiple of
    ONEDNN_INVARIANT_K, oneDNN bf16 GEMMs here, and each of its GEMM shapes row-invariant here (probed on random
    weights). engine.dtype=auto picks bfloat16 on the CPU where it does."""
    shapes = _known_gemm_shapes(known)
    return (bool(shapes) and all(k % ONEDNN_INVARIANT_K == 0 for _, k in shapes) and onednn_bf16()
            and onednn_shapes_row_invariant(shapes, torch.bfloat16))


def _known_gemm_shapes(known: dict | None) -> list[tuple[int, int]] | None:
    """The (N, K) of a target's GEMMs from a ModelSpec's `known` sizes: qkv, o, gate-up, down, and the LM head when
    its vocabulary is known; [] when our decoder does not run it (text only), None when its sizes are not known."""
    k = known or {}
    if k.get("model_type") not in SUPPORTED_ARCHS or k.get("is_vlm"):
        return []
    hidden, inter, heads = k.get("hidden_size"), k.get("intermediate_size"), k.get("num_attention_heads")
    if not (hidden and inter and heads):
        return None
    head_dim = k.get("head_dim") or hidden // heads
    kv = k.get("num_key_value_heads") or heads
    shapes = [((heads + 2 * kv) * head_dim, hidden), (hidden, heads * head_dim), (2 * inter, hidden), (hidden, inter)]
    return shapes + ([(k["vocab_size"], hidden)] if k.get("vocab_size") else [])


# the batch-size hint oneDNN packs a weight for (its blocking). The product stays row-invariant at every hint we tried;
# its speed does not: a 1-token forward of SmolLM2-135M spends 40 ms in GEMMs packed for 1 row (the 49152-row LM
# head alone 4-6 ms, slower than fp32) and less packed for 16 (LM head ~2 ms): experiments/cpu/README.md
ONEDNN_PACK_ROWS = 16


def _pack_onednn(weight: torch.Tensor, rows: int | None = None) -> torch.Tensor:
    """An [N, K] bf16 (or float32) weight in oneDNN's packed layout for `rows` rows (default ONEDNN_PACK_ROWS, read
    now; packed once, the product is F.linear's: `_packed_linear`)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), ONEDNN_PACK_ROWS if rows is None else rows)


# ... but only up to a number of rows per call: with weights packed for 16 rows, SmolLM2-135M's products (inner size
# 576 and 1536) change kernel, and rounding, from 33 rows on (a batch-16 verify of 4 tokens is 64 rows). So a call
# never takes more than this many rows: longer inputs go through in fixed chunks, and every row meets the same kernel
ONEDNN_INVARIANT_ROWS = 32


def _packed_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    rows = x.reshape(-1, x.shape[-1]).contiguous()
    lin = lambda a: torch.ops.mkldnn._linear_pointwise(a, packed, bias, "none", [], "")  # noqa: E731
    chunks = [rows] if rows.shape[0] <= ONEDNN_INVARIANT_ROWS else rows.split(ONEDNN_INVARIANT_ROWS)
    out = torch.cat([lin(c) for c in chunks]) if len(chunks) > 1 else lin(rows)
    return out.view(*x.shape[:-1], out.shape[-1])


# Float32 on a CPU without bf16 matrix units: oneDNN's float32 product on packed weights is row-invariant too on the
# AMD EPYC of experiments/cpu/README.md (1..40 rows, every weight shape of SmolLM2-135M, at packing hints >= 4; not
# at hint 1), while MKL's products (the fast float32 forms) round differently by row count. engine.batch_invariant=true
# takes it there (DecoderRunner's float32_invariant), after `onednn_row_invariant` has checked it on this CPU.
_ROW_INVARIANT: dict[tuple[int, int, torch.dtype], bool] = {}  # probed (N, K, dtype) -> row-invariant here


def onednn_row_invariant(weights: list[torch.Tensor]) -> bool:
    """Whether oneDNN's product on each weight, packed as the decoder packs it, gives every row the bits it gets alone,
    for 1..ONEDNN_INVARIANT_ROWS rows per call (probed once per shape and dtype in this process: a few ms a shape)."""
    return all(_row_invariant(w.shape[0], w.shape[1], w.dtype, lambda w=w: w) for w in weights)


def onednn_shapes_row_invariant(shapes: list[tuple[int, int]], dtype: torch.dtype) -> bool:
    """`onednn_row_invariant` for [N, K] shapes before a model loads, probed on seeded random weights, made only for
    the shapes not probed yet in this process (a plan on every job would otherwise draw them again)."""
    g = torch.Generator().manual_seed(0)
    return all(_row_invariant(n, k, dtype, lambda n=n, k=k: torch.randn((n, k), generator=g).to(dtype))
               for n, k in shapes)


def _row_invariant(n: int, k: int, dtype: torch.dtype, weight: Callable[[], torch.Tensor]) -> bool:
    """The probe's verdict for an [N, K] weight of dtype, from the cache or probed now on `weight()`."""
    key = (n, k, dtype)
    if key not in _ROW_INVARIANT:
        _ROW_INVARIANT[key] = _probe_row_invariance(weight())
    return _ROW_INVARIANT[key]


# the inputs and row counts a probe tries: a rounding that depends on the row count shows on some inputs only (on the
# AMD EPYC above, K = 1536 differed on one random input in four at 2..6 rows, on two or three from 7 rows on)
PROBE_INPUTS, PROBE_ROWS = 4, (2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17, 24, 31, 32)


def _probe_row_invariance(weight: torch.Tensor) -> bool:
    try:
        with torch.inference_mode():
            packed = _pack_onednn(weight)
            g = torch.Generator().manual_seed(0)
            for _ in range(PROBE_INPUTS):
                x = torch.randn((ONEDNN_INVARIANT_ROWS, weight.shape[1]), generator=g).to(weight.dtype)
                alone = torch.cat([_packed_linear(x[i : i + 1], packed) for i in range(x.shape[0])])
                if not all(torch.equal(_packed_linear(x[:m], packed), alone[:m]) for m in PROBE_ROWS):
                    return False
            return True
    except (AttributeError, RuntimeError):  # no oneDNN, or no packed product for this dtype
        return False


def cpu_float32_invariant(known: dict | None) -> bool | None:
    """Before loading (a ModelSpec's `known`): whether DecoderRunner's bit-invariant float32 path would run this target
    on this CPU, probed on random weights of its GEMM shapes; None when its sizes are not known (the runner checks
    its own weights then)."""
    shapes = _known_gemm_shapes(known)
    if shapes is None:
        return None
    if not shapes:
        return False
    return onednn_shapes_row_invariant(shapes, torch.float32)


class PackedLinear(nn.Linear):
    """An nn.Linear whose bf16 inference forward (no grad) runs on a oneDNN-packed copy of its weight
    (`_packed_linear`): a drafter's own layers on the CPU, which otherwise reorder the weight at every call. The
    weight stays the Parameter (state_dict, training); the packed copy is made once, by `pack_linears`."""

    packed: torch.Tensor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() or x.dtype != torch.bfloat16 or x.device.type != "cpu":
            return F.linear(x, self.weight, self.bias)
        return _packed_linear(x, self.packed, self.bias)


class CpuLinear(nn.Linear):
    """An nn.Linear whose float inference forward (no grad) on the CPU takes the decoder's small-batch product
    (`_linear`: per weight shape and row count the form LINEAR_WT_ROWS picks), as the target's own layers do: a
    drafter's layers on a CPU without oneDNN bf16. With `half` (a float16 copy of the weight) the product may also
    run on that copy where it is faster: torch's float16 product streams half the bytes, and on the AMD EPYC of
    experiments/cpu/README.md took about half of float32's time on 1 row and ~0.8x on 2 (more from 4 rows on). A
    drafter's numbers only shape its proposals, never the output (verification keeps the target's). The weight
    stays the Parameter; made by `pack_linears`."""

    half: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _linear(x, self.weight, self.bias, self.half)


class Int8Linear(nn.Linear):
    """An nn.Linear whose bf16 inference forward (no grad) on the CPU runs on an int8 copy of its weight with one
    scale per output row, the input staying bf16 (weight-only int8: `torch._weight_int8pack_mm`). For a drafter's
    own layers: its products only shape its proposals, which verification keeps lossless. It streams half the bytes
    of the bf16 weight: SmolLM2-135M's shipped EAGLE head, 0.379 ms of products a pass in bf16 on packed weights
    against 0.254 ms in int8 (alone, in cache; experiments/cpu/intel-run3/int8_products.txt). The product is the same whatever the number
    of rows or threads (checked there). The weight stays the Parameter; made by `pack_linears(int8=True)`."""

    qweight: torch.Tensor  # [N, K] int8
    scales: torch.Tensor  # [N] bf16

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() or x.dtype != torch.bfloat16 or x.device.type != "cpu":
            return F.linear(x, self.weight, self.bias)
        y = torch._weight_int8pack_mm(x.reshape(-1, x.shape[-1]).contiguous(), self.qweight, self.scales)
        y = y.view(*x.shape[:-1], y.shape[-1])
        return y if self.bias is None else y + self.bias


# torch's CPU int8 product reads the inner size in blocks of 16: at other sizes it returned garbage (inner size 8,
# 24, 40) or crashed (4, 12, 100, 577) on torch 2.13. Such a linear keeps its bf16 product.
INT8_K_MULTIPLE = 16


def int8_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[N, K] weight -> (its int8 copy [N, K], bf16 scales [N]): symmetric, per output row, weight ~ q * scale. The
    scale is rounded to bf16 before q is computed, so q fits the scale the product uses."""
    w = weight.detach().float()
    scales = (w.abs().amax(1) / 127).clamp_min(torch.finfo(torch.bfloat16).tiny).to(torch.bfloat16)
    return torch.round(w / scales.float()[:, None]).clamp(-127, 127).to(torch.int8), scales


def int8_product_works() -> bool:
    """Whether this torch has the CPU int8 product and it agrees with its definition on a small probe (one call)."""
    if not hasattr(torch, "_weight_int8pack_mm"):
        return False
    g = torch.Generator().manual_seed(0)
    w = torch.randn(48, 3 * INT8_K_MULTIPLE, generator=g)
    x = torch.randn(3, w.shape[1], generator=g).to(torch.bfloat16)
    q, scales = int8_rows(w)
    try:
        got = torch._weight_int8pack_mm(x, q, scales).float()
    except RuntimeError:
        return False
    want = x.float() @ (q.float() * scales.float()[:, None]).T
    return bool(torch.allclose(got, want, rtol=2e-2, atol=2e-2 * float(want.abs().max())))


def pack_linears(module: nn.Module, half_weights: bool = False, skip: Iterable[nn.Module] = (),
                 int8: bool = False) -> int:
    """On the CPU, for inference: every nn.Linear inside `module` (its own, not ones it holds by reference outside its
    children), except those in `skip` (linears inference does not run), takes the decoder's CPU product. With oneDNN
    bf16 (`onednn_bf16`) a bf16 one becomes an Int8Linear if `int8` (a drafter's layers only: the product is not the
    bf16 one) and its inner size is a multiple of INT8_K_MULTIPLE, else a PackedLinear, its weight packed once, if
    its inner size is a multiple of ONEDNN_INVARIANT_K; a float32 one becomes a CpuLinear (also on a CPU with oneDNN
    bf16 that runs float32: one whose bf16 product the probe refused), with a float16 copy of its weight to choose
    from if `half_weights` (and the weight fits float16's range). The parameters stay the same objects. Returns how
    many changed. Call it after the weights are loaded and before inference."""
    onednn, count, skipped = onednn_bf16(), 0, {id(m) for m in skip}
    int8 = int8 and onednn and int8_product_works()
    for name, sub in list(module.named_modules()):
        if type(sub) is not nn.Linear or sub.weight.device.type != "cpu" or id(sub) in skipped:
            continue
        if int8 and sub.weight.dtype == torch.bfloat16 and sub.in_features % INT8_K_MULTIPLE == 0:
            swapped = Int8Linear(sub.in_features, sub.out_features, bias=sub.bias is not None, device="meta")
            swapped.qweight, swapped.scales = int8_rows(sub.weight)
        elif onednn and sub.weight.dtype == torch.bfloat16 and sub.in_features % ONEDNN_INVARIANT_K == 0:
            swapped = PackedLinear(sub.in_features, sub.out_features, bias=sub.bias is not None, device="meta")
            swapped.packed = _pack_onednn(sub.weight)
        elif sub.weight.dtype == torch.float32:
            swapped = CpuLinear(sub.in_features, sub.out_features, bias=sub.bias is not None, device="meta")
            half = sub.weight.detach().to(torch.float16) if half_weights else None
            swapped.half = half if half is not None and bool(torch.isfinite(half).all()) else None
        else:
            continue
        swapped.weight, swapped.bias = sub.weight, sub.bias  # the same parameters
        parent, _, attr = name.rpartition(".")
        setattr(module.get_submodule(parent), attr, swapped)
        count += 1
    return count


def time_cpu_forms(*objects: Any) -> int:
    """Time now, for every row count "auto" decides for (AUTO_ROWS), the product form of each weight shape these
    objects multiply through `_linear` on the CPU: a DecoderRunner's own (off its bit-invariant bf16 path) and every
    CpuLinear (with its float16 copy, if any), found in the objects that are modules and in the modules among the
    attributes of those that are not (a proposer's head or draft runner), and in modules held in tuples (outside
    parameters(): EagleHead.fused). For a warm-up: otherwise a timed run pays
    the first timing of each row count it meets late (the default job met 3-row catch-ups of the EAGLE head only
    in its timed decode: 0.6 s there, experiments/cpu/README.md), and makes the packed copies the "packed" form reads.
    Returns how many (shape, row count) it timed."""
    if LINEAR_WT_ROWS != "auto":
        return 0
    products: dict[tuple, tuple[torch.Tensor, torch.Tensor | None]] = {}  # one weight of each shape (rows 0: any)
    every: list[tuple[torch.Tensor, torch.Tensor | None]] = []
    for obj in objects:
        for sub in _held_modules(obj):
            pairs: list[tuple[torch.Tensor, torch.Tensor | None]] = []
            if isinstance(sub, DecoderRunner) and sub.device.type == "cpu" and not sub.cpu_invariant:
                pairs = [(w[n], None) for w in sub._w for n in ("qkv_w", "o_w", "gu_w", "down_w")]
                pairs.append((sub.lm_head.weight, None))
            elif isinstance(sub, CpuLinear) and sub.weight.device.type == "cpu":
                pairs = [(sub.weight, sub.half)]
            for weight, half in pairs:
                products.setdefault(_form_key(weight, 0, half), (weight, half))
            every += pairs
    timed = 0
    with torch.inference_mode():
        for weight, half in products.values():
            todo = [rows for rows in _every_timed_rows() if _form_key(weight, rows, half) not in _CPU_FORMS]
            if todo:
                _time_forms(weight, todo, half)
            timed += len(todo)
        for weight, half in every:  # the copies the chosen forms read, made now rather than in the timed run
            chosen = {_CPU_FORMS[_form_key(weight, rows, half)][0] for rows in _every_timed_rows()}
            for kind in sorted(chosen & {"packed", "rows"}):  # the forms that read a copy of the weight
                _copy(weight, kind)
    return timed


def _held_modules(obj: Any) -> Iterator[nn.Module]:
    """The modules inside obj (a module), or inside its attributes that are modules (another object), with those
    they hold in tuples."""
    roots = [obj] if isinstance(obj, nn.Module) else [v for v in vars(obj).values() if isinstance(v, nn.Module)]
    for root in roots:
        for sub in root.modules():
            yield sub
            for held in vars(sub).values():
                if isinstance(held, tuple):
                    for m in held:
                        if isinstance(m, nn.Module):
                            yield from m.modules()


def fuse_linears(linears: list[nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Concatenate the weights (and biases) of linears over one input; re-point each at its view."""
    with torch.no_grad():
        weight = torch.cat([lin.weight for lin in linears], dim=0)
        has_bias = [lin.bias is not None for lin in linears]
        bias = None
        if any(has_bias):
            bias = torch.cat([lin.bias if lin.bias is not None else weight.new_zeros(lin.out_features) for lin in linears])
        row = 0
        for lin in linears:
            n = lin.weight.shape[0]
            lin.weight.data = weight[row : row + n]
            if lin.bias is not None:
                lin.bias.data = bias[row : row + n]
            row += n
    return weight, bias


class DecoderRunner(nn.Module):
    """Forward over new tokens at given positions for one transformers decoder-only LM.

    `num_layers` < the model's depth gives a shallower model sharing the same weights (the
    layer-skip draft); it then has its own, smaller cache. `use_kernels`: None = the Triton kernels
    on CUDA when triton imports, else the torch path; True/False forces it. `batch_invariant` (kernel
    path): every forward of up to DECODE_KERNEL_MAX_T tokens per row, the LM head included, runs on
    kernels whose per-token result does not depend on the number of rows or tokens in the call
    (`skinny_gemm.invariant_linear`, `decode_attention(invariant=True)`), so a token's logits are
    bit-identical alone, inside a verify forward or at another batch size. Larger forwards (prefill)
    run on cuBLAS and SDPA either way. On a CPU with oneDNN bf16 (`onednn_bf16`), a bf16 model with
    `batch_invariant` takes the torch path with its GEMMs on packed oneDNN weights (row-invariant, and a
    verify of up to 16 tokens costs about what one token does) and attention computed per (row, query)
    over exactly its own slots, so there too a token's logits are bit-identical in any forward of up to
    DECODE_KERNEL_MAX_T tokens per row (for models whose GEMM inner sizes are multiples of 64: see
    ONEDNN_INVARIANT_K; `cpu_invariant` says whether this runner takes that path). float32 on the CPU takes
    MKL's fastest product per row count, which rounds differently by row count: argmax-stable in practice, not
    batch-invariant. With `float32_invariant` (engine.batch_invariant=true) a float32 model takes the same packed
    oneDNN path, where `onednn_row_invariant` finds that product row-invariant on this CPU (else a ValueError): a
    4-token verify then costs ~1.4x a 1-token forward instead of ~1.05x (experiments/cpu/README.md).
    """

    def __init__(self, hf_model: nn.Module, num_layers: int | None = None, use_kernels: bool | None = None,
                 batch_invariant: bool = True, tp: TPGroup | None = None, float32_invariant: bool = False) -> None:
        super().__init__()
        cfg = hf_model.config
        base = hf_model.model
        if getattr(cfg, "text_config", None) is not None and hasattr(base, "language_model"):  # a VLM: its language model
            cfg, base = cfg.text_config, base.language_model
        archs = {**SUPPORTED_ARCHS, **VLM_TEXT_ARCHS}
        if cfg.model_type not in archs:
            raise ValueError(f"DecoderRunner supports {sorted(archs)}, not {cfg.model_type!r}")
        self.config = cfg
        self.hf_model = hf_model
        total = len(base.layers)
        self.num_layers = total if num_layers is None else num_layers
        if not 1 <= self.num_layers <= total:
            raise ValueError(f"num_layers={num_layers} is outside 1..{total}")
        self.embed = base.embed_tokens
        self.layers = list(base.layers[: self.num_layers])
        self.norm = base.norm
        self.rotary = base.rotary_emb
        self.lm_head = hf_model.lm_head
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.qk_norm = archs[cfg.model_type]
        self.mrope = cfg.model_type in VLM_TEXT_ARCHS  # its rotary takes [3, B, T] positions (M-RoPE components)
        self.scaling = self.head_dim**-0.5
        self.use_kernels = use_kernels
        self.batch_invariant = batch_invariant
        self.k_cache: torch.Tensor | None = None  # [L, B, Hkv, S, D]
        self.v_cache: torch.Tensor | None = None
        self.rope_cos: torch.Tensor | None = None  # [S, D] in the model dtype, transformers' own values
        self.rope_sin: torch.Tensor | None = None
        # [rows] int64 or None: row b's rotary position is its slot position + rope_offset[b] (a VLM row past its
        # prompt: M-RoPE's rope delta); slots and attention still go by position. Set in place (CUDA graphs read it)
        self.rope_offset: torch.Tensor | None = None
        # fused projections, shared by every runner over the same hf model (draft = target)
        self._w: list[dict[str, torch.Tensor | None]] = []
        for layer in self.layers:
            attn, mlp = layer.self_attn, layer.mlp
            if not hasattr(attn, "_specbench_qkv"):
                attn._specbench_qkv = fuse_linears([attn.q_proj, attn.k_proj, attn.v_proj])
            if not hasattr(mlp, "_specbench_gate_up"):
                mlp._specbench_gate_up = fuse_linears([mlp.gate_proj, mlp.up_proj])
            qkv_w, qkv_b = attn._specbench_qkv
            gu_w, gu_b = mlp._specbench_gate_up
            qk_w = None
            if self.qk_norm:
                qk_w = torch.stack([attn.q_norm.weight.detach(), attn.k_norm.weight.detach()])
            self._w.append(dict(qkv_w=qkv_w, qkv_b=qkv_b, gu_w=gu_w, gu_b=gu_b, qk_w=qk_w, o_w=attn.o_proj.weight,
                                o_b=attn.o_proj.bias, down_w=mlp.down_proj.weight, down_b=mlp.down_proj.bias))
        # tensor parallel (models/tensor_parallel.py): this rank's heads and MLP columns; o/down sums all-reduced
        self.tp = tp if tp is not None and tp.world > 1 else None
        built_as = getattr(hf_model, "_specbench_shard", None)  # loading._random_model(shard=...): already one share
        if built_as is not None and (self.tp is None or (self.tp.rank, self.tp.world) != tuple(built_as)):
            raise ValueError(f"this model holds tensor-parallel rank {built_as[0]}'s share of {built_as[1]} only "
                             f"(engine.shard_on_load); a runner over it must be that rank's. A draft cannot reuse it "
                             f"(draft=self, layer_skip): they need the whole target")
        if self.tp is not None and built_as is None:
            self._w = [shard_weights(w, self.num_heads, self.num_kv_heads, self.head_dim, self.tp) for w in self._w]
            self.num_heads //= self.tp.world
            self.num_kv_heads //= self.tp.world
        elif self.tp is not None:  # a built share: its config's sizes are the rank's already
            self._w = [biases_summed_once(w, self.tp) for w in self._w]
        # CPU bf16 with batch_invariant (or float32 with float32_invariant): the same weights packed for oneDNN (a
        # second copy), used by the torch path
        inner = {w[n].shape[1] for w in self._w for n in ("qkv_w", "o_w", "gu_w", "down_w")}
        cpu = batch_invariant and self.device.type == "cpu"
        weights = [w[n] for w in self._w[:1] for n in ("qkv_w", "o_w", "gu_w", "down_w")] + [self.lm_head.weight]
        self.cpu_invariant = (cpu and self.dtype == torch.bfloat16 and all(k % ONEDNN_INVARIANT_K == 0 for k in inner)
                              and onednn_bf16() and onednn_row_invariant(weights))
        if cpu and float32_invariant and self.dtype == torch.float32:
            if not onednn_row_invariant(weights):
                raise ValueError("float32_invariant: oneDNN's float32 product on packed weights is not row-invariant "
                                 "on this CPU (or absent), so float32 forwards cannot be made bit-invariant here")
            self.cpu_invariant = True
        self._wp: list[dict[str, torch.Tensor | None]] = []
        self._head_p: torch.Tensor | None = None
        if self.cpu_invariant:
            packed = ("qkv_w", "o_w", "gu_w", "down_w")
            self._wp = [{**w, **{n: _pack_onednn(w[n]) for n in packed}} for w in self._w]
            self._head_p = _pack_onednn(self.lm_head.weight)
        if any(getattr(layer.mlp, "act_fn", None) is not None and type(layer.mlp.act_fn).__name__ not in ("SiLU", "SiLUActivation")
               for layer in self.layers):
            self._silu = False
        else:
            self._silu = True

    @property
    def vocab_size(self) -> int:
        return self.lm_head.out_features

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.weight.dtype

    @property
    def verify_attends_per_token(self) -> bool:
        """Whether each token of a forward attends in a call of its own (the CPU's bit-invariant path), so a verify
        costs about its token count in attention calls and a tree's every node costs what a chain's token does:
        strategy.tree=auto drafts a chain then (trees.resolve_auto)."""
        return self.cpu_invariant

    def allocate(self, batch_size: int, max_len: int) -> None:
        """(Re)allocate the static cache for `batch_size` rows of `max_len` slots, reusing it when it fits."""
        shape = (self.num_layers, batch_size, self.num_kv_heads, max_len, self.head_dim)
        if self.k_cache is not None and self.k_cache.shape == shape:
            return
        self.k_cache = self.v_cache = None  # free before allocating the new one
        self.k_cache = torch.zeros(shape, device=self.device, dtype=self.dtype)
        self.v_cache = torch.zeros(shape, device=self.device, dtype=self.dtype)
        self.rope_table(max_len)

    @contextmanager
    def narrow(self, lo: int, hi: int) -> Iterator[DecoderRunner]:
        """Within the block, cache rows lo..hi-1 are this runner's rows 0..hi-lo-1 (views: what a forward writes lands
        in those rows). Continuous batching prefills a request admitted into a slot this way, alone."""
        saved = self.k_cache, self.v_cache, self.rope_offset
        assert saved[0] is not None and 0 <= lo < hi <= saved[0].shape[1], "narrow() rows outside the cache"
        self.k_cache, self.v_cache = saved[0][:, lo:hi], saved[1][:, lo:hi]
        if saved[2] is not None:
            self.rope_offset = saved[2][lo:hi]
        try:
            yield self
        finally:
            self.k_cache, self.v_cache, self.rope_offset = saved

    def rope_table(self, n: int) -> None:
        """The rotary tables for positions 0..n-1 (allocate: the cache's slots; more for rows with a positive offset)."""
        with torch.inference_mode():
            cos, sin = self._rotary(self.k_cache.new_empty(1), torch.arange(n, device=self.device)[None])  # [1, S, D]
        self.rope_cos, self.rope_sin = cos[0].contiguous(), sin[0].contiguous()

    def _rotary(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """transformers' own rotary at positions [B, T] -> cos, sin [B, T, D]. An M-RoPE rotary (a VLM's language model)
        takes the three components [3, B, T] (transformers 5.17 requires them), here all equal."""
        if not self.mrope:
            return self.rotary(x, positions)
        cos, sin = self.rotary(x, positions[None].expand(3, *positions.shape))
        return (cos[0], sin[0]) if cos.dim() == 4 else (cos, sin)  # [3, B, T, D] where not recomposed

    @property
    def max_len(self) -> int:
        return 0 if self.k_cache is None else self.k_cache.shape[3]

    def kernels_on(self, device: torch.device | None = None) -> bool:
        """Whether forward() takes the Triton path on `device` (default: the model's)."""
        if self.use_kernels is not None:
            return self.use_kernels
        device = device or self.device
        # float32 stays on the torch path on CUDA: tl.dot would round attention inputs to tf32
        if device.type != "cuda" or not self._silu or self.dtype == torch.float32:
            return False
        from specbench.kernels.decode import triton_available

        return triton_available(device)

    @torch.inference_mode()
    def forward(
        self,
        tokens: torch.Tensor,  # [B, T] int64
        positions: torch.Tensor,  # [B, T] int64, each row's positions (need not be equal across rows)
        attn_len: int | None = None,  # attend over slots [0, attn_len): any bound > every position
        logits_at: torch.Tensor | None = None,  # [B, T'] int64 column indices into T; None = all
        want_hidden: bool = False,
        hidden_layers: tuple[int, ...] = (),
        slots: torch.Tensor | None = None,  # [B, T] int64 cache slots to write (a tree); None = the positions
        tree_mask: torch.Tensor | None = None,  # [B, T, T] bool: query t sees new token u (its ancestors and itself)
        tree_path: torch.Tensor | None = None,  # [B, T, E] int64, instead of tree_mask: the slots of each token's
        # ancestors from the tree's root (depth 0, in the slot of its position) down to itself (see tree_paths)
    ) -> ForwardOutput:
        assert self.k_cache is not None, "call allocate() first"
        assert tokens.shape[0] <= self.k_cache.shape[1], "more rows than the cache was allocated for"
        if tree_mask is not None:  # a tree in one forward: its ancestors are among this forward's tokens
            tree_path = tree_paths(tree_mask, positions if slots is None else slots)
        if self.kernels_on(tokens.device):
            return self._forward_kernels(tokens, positions, attn_len, logits_at, want_hidden, hidden_layers, slots, tree_path)
        return self._forward_torch(tokens, positions, attn_len, logits_at, want_hidden, hidden_layers, slots, tree_path)

    @torch.inference_mode()
    def move_kv(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Copy each row's cache entries from slots src [B, n] to slots dst [B, n] in every layer (an accepted tree
        path moves into the slots its positions own; no recompute). Sources are read before any write."""
        bsz = src.shape[0]
        for cache in (self.k_cache, self.v_cache):
            idx = src[None, :, None, :, None].expand(cache.shape[0], bsz, cache.shape[2], src.shape[1], cache.shape[4])
            moved = cache[:, :bsz].gather(3, idx)
            cache[:, :bsz].scatter_(3, dst[None, :, None, :, None].expand_as(idx), moved)

    def _rope_positions(self, positions: torch.Tensor) -> torch.Tensor:
        return positions if self.rope_offset is None else positions + self.rope_offset[: positions.shape[0], None]

    def _reduce(self, y: torch.Tensor) -> torch.Tensor:
        """Tensor parallel: the sum of every rank's partial o_proj / down_proj output; y itself at TP = 1."""
        return y if self.tp is None else self.tp.all_reduce(y.contiguous())

    def _head(self, x: torch.Tensor, logits_at: torch.Tensor | None, want_hidden: bool,
              layer_hidden: list[torch.Tensor], linear=_linear, weight: torch.Tensor | None = None) -> ForwardOutput:
        out_x = x if logits_at is None else x.gather(1, logits_at[..., None].expand(-1, -1, x.shape[-1]))
        rows = out_x.reshape(-1, out_x.shape[-1])
        weight = self.lm_head.weight if weight is None else weight
        logits = linear(rows, weight, self.lm_head.bias).view(*out_x.shape[:-1], -1).float().contiguous()
        return ForwardOutput(logits=logits, hidden=x if want_hidden else None, layer_hidden=layer_hidden)

    def _forward_torch(self, tokens, positions, attn_len, logits_at, want_hidden, hidden_layers,
                       slots=None, tree_path=None) -> ForwardOutput:
        bsz, t = tokens.shape
        s = self.max_len if attn_len is None else attn_len
        hq, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        x = self.embed(tokens)  # [B, T, H]
        cos, sin = self._rotary(x, self._rope_positions(positions))  # [B, T, D], computed as transformers does
        cos, sin = cos[:, None], sin[:, None]  # [B, 1, T, D]
        slots = positions if slots is None else slots
        # flat row indices of the [B, Hkv, S, D] cache viewed as [B*Hkv*S, D] (one index_copy_; bf16 scatter_ is slow)
        write_idx = ((torch.arange(bsz * hkv, device=tokens.device).view(bsz, hkv, 1) * self.max_len
                      + slots[:, None, :]).reshape(-1))
        layer_hidden: list[torch.Tensor] = []
        invariant = self.cpu_invariant and (t <= DECODE_KERNEL_MAX_T or tree_path is not None)  # as on CUDA
        lin, ws = (_packed_linear, self._wp) if self.cpu_invariant else (_linear, self._w)
        if invariant:  # 1) attention runs per (row, query) over its own slots, in this order
            plan = self._per_query_plan(positions.tolist(), None if tree_path is None else tree_path.tolist())
            views = self._per_query_views(plan)
        elif tree_path is None:  # 1) each query at position p sees its own row's slots 0..p
            mask = torch.arange(s, device=tokens.device)[None, None, None, :] <= positions[:, None, :, None]  # [B, 1, T, S]
        else:  # 1) a tree: each token sees the slots below its root's, then its ancestors' slots
            mask = tree_slot_mask(tree_path, positions, s)[:, None]
        for i, layer in enumerate(self.layers):
            attn, w = layer.self_attn, ws[i]
            h = rmsnorm_ref(x, layer.input_layernorm.weight, layer.input_layernorm.variance_epsilon)
            qkv = lin(h, w["qkv_w"], w["qkv_b"]).view(bsz, t, hq + 2 * hkv, d).transpose(1, 2)
            q, k, v = qkv.split([hq, hkv, hkv], dim=1)  # [B, H*, T, D]
            if self.qk_norm:  # contiguous: a strided reduction may sum in an order that depends on T
                q = rmsnorm_ref(q.contiguous(), attn.q_norm.weight, attn.q_norm.variance_epsilon)
                k = rmsnorm_ref(k.contiguous(), attn.k_norm.weight, attn.k_norm.variance_epsilon)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            # 2) write this step's keys and values at their positions, then attend over the valid prefix
            kc, vc = self.k_cache[i, :bsz], self.v_cache[i, :bsz]
            kc.view(-1, d).index_copy_(0, write_idx, k.reshape(-1, d))
            vc.view(-1, d).index_copy_(0, write_idx, v.reshape(-1, d))
            if invariant:
                o = self._attend_per_query(q, k, v, kc, vc, plan, [[(kv[i], vv[i]) for kv, vv in row] for row in views])
            else:
                o = masked_attention(q, kc[:, :, :s], vc[:, :, :s], mask, self.scaling)
            x = x + self._reduce(lin(o.transpose(1, 2).reshape(bsz, t, -1), w["o_w"], w["o_b"]))
            mlp = layer.mlp
            h = rmsnorm_ref(x, layer.post_attention_layernorm.weight, layer.post_attention_layernorm.variance_epsilon)
            gate, up = lin(h, w["gu_w"], w["gu_b"]).chunk(2, dim=-1)
            x = x + self._reduce(lin(mlp.act_fn(gate) * up, w["down_w"], w["down_b"]))
            if i in hidden_layers:
                layer_hidden.append(x)
        x = rmsnorm_ref(x, self.norm.weight, self.norm.variance_epsilon)
        if self.cpu_invariant:
            return self._head(x, logits_at, want_hidden, layer_hidden, _packed_linear, self._head_p)
        return self._head(x, logits_at, want_hidden, layer_hidden)

    @staticmethod
    def _per_query_plan(positions: list[list[int]], paths: list[list[list[int]]] | None) -> list[tuple[list, Any]]:
        """For `_attend_per_query`, once a forward (every layer does the same): per row, the queries in the order
        they are attended, each as (query, its position, whether its key and value go into that slot first), and,
        for a tree, the nodes moved out of their own slots with those slots (to put them back), else None.

        A chain's query j reads slots 0..p. A tree node's ancestors are not in those slots: the nodes are visited
        depth first (an ancestor's path is a prefix of its descendants', so sorted paths are pre-order), and each one
        goes into the slot of its depth, root + d, unless it is there already; the slots above it then hold its
        ancestors, written by the nodes visited before it."""
        plan = []
        for row, pos in enumerate(positions):
            if paths is None:
                plan.append(([(j, p, False) for j, p in enumerate(pos)], None))
                continue
            path, root = paths[row], paths[row][0][0]
            own = [path[j][p - root] for j, p in enumerate(pos)]  # each node's own slot (the path is 0 past its depth)
            held = {slot: j for j, slot in enumerate(own)}  # slot -> the node there now
            steps = []
            for j in sorted(range(len(pos)), key=lambda j: path[j]):
                steps.append((j, pos[j], held[pos[j]] != j))
                held[pos[j]] = j
            moved = [j for j, slot in enumerate(own) if held[slot] != j]
            plan.append((steps, (torch.tensor(moved), torch.tensor([own[j] for j in moved])) if moved else None))
        return plan

    def _per_query_views(self, plan: list[tuple[list, Any]]) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
        """For `_attend_per_query`, once a forward: per row and query (in the plan's order), the views of every
        layer's cached keys and values it reads, row b's slots 0..p as [L, 1, Hkv, p + 1, D] (a layer's is one
        index away: about 4 us a query and layer less than slicing the layer's cache there)."""
        return [[(self.k_cache[:, b : b + 1, :, : p + 1], self.v_cache[:, b : b + 1, :, : p + 1]) for _, p, _ in steps]
                for b, (steps, _) in enumerate(plan)]

    def _attend_per_query(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor,
                          plan: list[tuple[list, Any]], views: list[list[tuple[torch.Tensor, torch.Tensor]]]) -> torch.Tensor:
        """Batch-invariant attention on the CPU: q [B, Hq, T, D] -> [B, Hq, T, D], each query (b, t) in its own SDPA
        call over exactly the keys a 1-token forward at its position reads, in the same layout: row b's slots
        0..p. `plan` (`_per_query_plan`) gives the order and the tree nodes' moves; k, v [B, Hkv, T, D] are this
        forward's keys and values, which the moves copy from; kc, vc [B, Hkv, S, D] are this layer's cache, and
        views[b][n] the keys and values of its slots that the n-th query of row b's plan reads."""
        bsz, hq, t, d = q.shape
        rows = []
        for b, (steps, moved) in enumerate(plan):
            qb = q[b].transpose(0, 1).contiguous().view(t, hq, 1, d).split(1)  # query j: [1, Hq, 1, D]
            outs: list[torch.Tensor] = [None] * t  # type: ignore[list-item]
            for (j, p, write), (keys, values) in zip(steps, views[b]):
                if write:
                    kc[b, :, p] = k[b, :, j]
                    vc[b, :, p] = v[b, :, j]
                outs[j] = F.scaled_dot_product_attention(qb[j], keys, values, scale=self.scaling,
                                                         enable_gqa=True)  # [1, Hq, 1, D]
            if moved is not None:  # each moved node back in its own slot
                kc[b].index_copy_(1, moved[1], k[b].index_select(1, moved[0]))
                vc[b].index_copy_(1, moved[1], v[b].index_select(1, moved[0]))
            rows.append(torch.cat(outs, 2))
        return torch.cat(rows)

    def _fusable_mlp(self, w: dict) -> bool:
        """Whether a layer's MLP may run as `fused_mlp`: no biases, and not under tensor parallelism (its grid
        barrier waits for every program, which a collective on another stream could hold off)."""
        return self.tp is None and w["gu_b"] is None and w["down_b"] is None

    def _forward_kernels(self, tokens, positions, attn_len, logits_at, want_hidden, hidden_layers,
                         slots=None, tree_path=None) -> ForwardOutput:
        from specbench.kernels import decode as K
        from specbench.kernels.skinny_gemm import fused_mlp, invariant_linear, skinny_linear, sum_partials

        bsz, t = tokens.shape
        n = bsz * t
        # a tree (any size) runs on the decode kernels: each node attends to the prefix and its ancestors' slots
        # in logical order (decode_attention's path), so with batch_invariant its logits are its chain's bit for bit
        path = None if tree_path is None else tree_path.contiguous()
        offset = self.rope_offset is not None
        wslots = None if path is None and not offset else (positions if slots is None else slots).reshape(n).contiguous()
        small = t <= DECODE_KERNEL_MAX_T or path is not None
        invariant = self.batch_invariant and small
        lin = invariant_linear if invariant else skinny_linear
        hq, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        pos = self._rope_positions(positions).reshape(n).contiguous()  # rotary positions; wslots: where to write
        x = F.embedding(tokens.reshape(n), self.embed.weight)  # [N, H]
        pending: torch.Tensor | None = None  # the last sublayer's output, not yet added to x
        layer_hidden: list[torch.Tensor] = []
        if not small:
            s = self.max_len if attn_len is None else attn_len
            mask = torch.arange(s, device=tokens.device)[None, None, None, :] <= positions[:, None, :, None]
        for i, layer in enumerate(self.layers):
            attn, w = layer.self_attn, self._w[i]
            x, h = K.add_rmsnorm(x, pending, layer.input_layernorm.weight, layer.input_layernorm.variance_epsilon)
            qkv = lin(h, w["qkv_w"], w["qkv_b"])  # [N, (Hq + 2 Hkv) D]; F.linear above 16 rows
            kc, vc = self.k_cache[i], self.v_cache[i]
            eps = attn.q_norm.variance_epsilon if self.qk_norm else 0.0
            q = K.qkv_rope_cache(qkv, pos, bsz, self.rope_cos, self.rope_sin, w["qk_w"], eps, kc, vc, hq, hkv, d, wslots)
            if small:
                o = K.decode_attention(q.view(bsz, t, hq, d), kc, vc, positions.contiguous(), self.scaling,
                                       invariant=invariant, path=path)
            else:
                o = masked_attention(q.view(bsz, t, hq, d).transpose(1, 2), kc[:bsz, :, :s], vc[:bsz, :, :s], mask,
                                     self.scaling).transpose(1, 2)
            # may be fp32 split-K partials [S, N, H]: add_rmsnorm sums them
            a = lin(o.reshape(n, hq * d), w["o_w"], w["o_b"], may_split=True)
            if self.tp is not None:  # the ranks' partial sums: this rank's split-K partials first, then all ranks
                a = self._reduce(sum_partials(a, x.dtype))
            x, h = K.add_rmsnorm(x, a, layer.post_attention_layernorm.weight, layer.post_attention_layernorm.variance_epsilon)
            # up to 16 rows, one launch with the same bits as the three below (skinny_gemm.fused_mlp)
            pending = fused_mlp(h, w["gu_w"], w["down_w"]) if small and self._fusable_mlp(w) else None
            if pending is None:
                gu = lin(h, w["gu_w"], w["gu_b"])
                # silu(gate) * up: its own kernel (skinny_gemm.FUSE_SILU would fold it into the GEMM; measured slower)
                pending = lin(gu, w["down_w"], w["down_b"], may_split=True, silu=True)
            if self.tp is not None:
                pending = self._reduce(sum_partials(pending, x.dtype))
            if i in hidden_layers:
                x, pending = x + sum_partials(pending, x.dtype), None
                layer_hidden.append(x.view(bsz, t, -1))
        _, x = K.add_rmsnorm(x, pending, self.norm.weight, self.norm.variance_epsilon)
        return self._head(x.view(bsz, t, -1), logits_at, want_hidden, layer_hidden, lin if invariant else _linear)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


__all__ = ["SUPPORTED_ARCHS", "DecoderRunner", "ForwardOutput", "add_rmsnorm_ref", "qkv_rope_cache_ref"]
