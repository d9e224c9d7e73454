"""Triton kernels for the decoder's forward on CUDA, each beside the torch reference it must match.

The decoder's step at small batch is a chain of GEMVs separated by many tiny elementwise kernels
(norms, rope, cache writes, SiLU, residual adds: ~20 per layer in plain PyTorch, ~2 us each even
inside a CUDA graph). These kernels cut the non-GEMM work to four launches per layer:

- `add_rmsnorm`: residual add (optional) + RMSNorm, one read of each input, one write of each output;
- `qkv_rope_cache`: split the fused QKV projection, per-head q/k RMSNorm (Qwen3), rotary embedding
  from a per-position cos/sin table, and the K/V cache write at each token's position (slot == position);
- `decode_attention`: attention of [B, T] new tokens over each row's own valid cache slots 0..p
  (it reads the positions on the device: no host bound, nothing past a row's last position), with
  an optional split over the cache length and a combine pass for parallelism at small batch;
- `silu_mul`: SiLU(gate) * up over the fused gate/up projection.

Numerics follow transformers' bf16 arithmetic step by step (each torch op rounds to the model dtype,
so the kernels round at the same points); in float32 they agree with the torch references to
rounding. `*_ref` functions are the torch references (also the CPU path of the decoder).

TRITON_INTERPRET=1 is read when this module is first imported (tests run the kernels on the CPU
in Triton's interpreter).
"""

from __future__ import annotations

import functools
import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # the torch references still work
    triton = None

_INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def triton_available(device: torch.device | str) -> bool:
    if triton is None:
        return False
    return torch.device(device).type == "cuda" or _INTERPRETED


PDL = True  # programmatic dependent launch on sm90+ (a switch for A/B measurements; see `pdl`)


@functools.lru_cache(maxsize=None)
def _properties(index: int):
    """torch.cuda.get_device_properties, once per GPU (the decoder asks on every launch)."""
    return torch.cuda.get_device_properties(index)


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


def use_pdl(on: bool) -> None:
    """engine.pdl: turn programmatic dependent launch on or off for the kernels launched from now on."""
    global PDL
    PDL = bool(on)


def pdl(device: torch.device) -> bool:
    """Whether the decoder's kernels on `device` use programmatic dependent launch (Hopper and later, compiled
    kernels only): the GEMMs are launched as dependents of the kernel before them and may start while it runs,
    waiting for its output before they read it (`skinny_gemm._skinny_kernel`); the other kernels here signal at
    their start that the next one may launch.
    Arithmetic is unchanged: every read of an activation and every write comes after the wait."""
    if not PDL or _INTERPRETED or triton is None or device.type != "cuda":
        return False
    return _properties(_index(device)).major >= 9


from specbench.kernels.decode_ref import (  # noqa: E402,F401 - the references, re-exported beside the kernels
    add_rmsnorm_ref,
    decode_attention_ref,
    qkv_rope_cache_ref,
    rmsnorm_ref,
    rotate_half,
    silu_mul_ref,
    tree_paths,
    tree_slot_mask,
)

# --------------------------------------------------------------------------------------------
# Triton kernels
# --------------------------------------------------------------------------------------------

if triton is not None:

    @triton.jit
    def _add_rmsnorm_kernel(x_ptr, d_ptr, w_ptr, s_ptr, out_ptr, H, NROWS, eps,
                            HAS_ADD: tl.constexpr, NUM_PARTS: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
        if PDL:  # the next kernel (a GEMM) may launch now; it waits for this one's output
            tl.extra.cuda.gdc_launch_dependents()
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK)
        m = cols < H
        dt = out_ptr.dtype.element_ty
        x = tl.load(x_ptr + row * H + cols, mask=m, other=0.0)
        if HAS_ADD:
            if NUM_PARTS == 1:
                d = tl.load(d_ptr + row * H + cols, mask=m, other=0.0).to(tl.float32)
            else:  # fp32 split-K partials of the producing GEMM: fixed-order sum, then its output rounding
                d = tl.zeros([BLOCK], tl.float32)
                for p in tl.static_range(NUM_PARTS):
                    d += tl.load(d_ptr + (p * NROWS + row) * H + cols, mask=m, other=0.0)
                d = d.to(dt).to(tl.float32)
            x = (x.to(tl.float32) + d).to(dt)
            tl.store(s_ptr + row * H + cols, x, mask=m)
        xf = x.to(tl.float32)
        var = tl.sum(xf * xf, axis=0) / H
        y = (xf * (1.0 / tl.sqrt(var + eps))).to(dt)
        w = tl.load(w_ptr + cols, mask=m, other=0.0)
        tl.store(out_ptr + row * H + cols, (w.to(tl.float32) * y.to(tl.float32)).to(dt), mask=m)

    @triton.jit
    def _qkv_rope_cache_kernel(qkv_ptr, pos_ptr, slot_ptr, cos_ptr, sin_ptr, nw_ptr, q_ptr, kc_ptr, vc_ptr,
                               T, eps, stride_qkv, stride_tab,
                               kc_sb, kc_sh, kc_ss, vc_sb, vc_sh, vc_ss,
                               HQ: tl.constexpr, HKV: tl.constexpr, D: tl.constexpr, QK_NORM: tl.constexpr,
                               PDL: tl.constexpr):
        if PDL:
            tl.extra.cuda.gdc_launch_dependents()
        n = tl.program_id(0).to(tl.int64)  # token (row-major over [B, T])
        h = tl.program_id(1)  # head among q (HQ), k (HKV), v (HKV)
        b = n // T
        pos = tl.load(pos_ptr + n)  # rotary position
        slot = tl.load(slot_ptr + n)  # cache slot (== pos, except for the nodes of a tree)
        HALF: tl.constexpr = D // 2
        i = tl.arange(0, HALF)
        src = qkv_ptr + n * stride_qkv + h * D
        if h >= HQ + HKV:  # v: straight into the cache
            dst = vc_ptr + b * vc_sb + (h - HQ - HKV) * vc_sh + slot * vc_ss
            tl.store(dst + i, tl.load(src + i))
            tl.store(dst + HALF + i, tl.load(src + HALF + i))
        else:
            dt = q_ptr.dtype.element_ty
            x1 = tl.load(src + i).to(tl.float32)
            x2 = tl.load(src + HALF + i).to(tl.float32)
            if QK_NORM:
                r = 1.0 / tl.sqrt((tl.sum(x1 * x1, axis=0) + tl.sum(x2 * x2, axis=0)) / D + eps)
                woff = (h >= HQ).to(tl.int32) * D
                w1 = tl.load(nw_ptr + woff + i).to(tl.float32)
                w2 = tl.load(nw_ptr + woff + HALF + i).to(tl.float32)
                x1 = (w1 * (x1 * r).to(dt).to(tl.float32)).to(dt).to(tl.float32)
                x2 = (w2 * (x2 * r).to(dt).to(tl.float32)).to(dt).to(tl.float32)
            c1 = tl.load(cos_ptr + pos * stride_tab + i).to(tl.float32)
            c2 = tl.load(cos_ptr + pos * stride_tab + HALF + i).to(tl.float32)
            s1 = tl.load(sin_ptr + pos * stride_tab + i).to(tl.float32)
            s2 = tl.load(sin_ptr + pos * stride_tab + HALF + i).to(tl.float32)
            # q * cos + rotate_half(q) * sin, rounding where torch's bf16 ops round
            o1 = ((x1 * c1).to(dt).to(tl.float32) + (-x2 * s1).to(dt).to(tl.float32)).to(dt)
            o2 = ((x2 * c2).to(dt).to(tl.float32) + (x1 * s2).to(dt).to(tl.float32)).to(dt)
            if h < HQ:
                dst = q_ptr + (n * HQ + h) * D
            else:
                dst = kc_ptr + b * kc_sb + (h - HQ) * kc_sh + slot * kc_ss
            tl.store(dst + i, o1)
            tl.store(dst + HALF + i, o2)

    @triton.jit
    def _decode_attn_kernel(q_ptr, kc_ptr, vc_ptr, pos_ptr, path_ptr, out_ptr, part_acc_ptr, part_ml_ptr,
                            T, N, scale, kc_sb, kc_sh, kc_ss, vc_sb, vc_sh, vc_ss, M_TILES, E,
                            HQ: tl.constexpr, G: tl.constexpr, D: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, NUM_SPLITS: tl.constexpr, CHUNK: tl.constexpr,
                            TREE: tl.constexpr, PDL: tl.constexpr):
        if PDL:
            tl.extra.cuda.gdc_launch_dependents()
        b = tl.program_id(0).to(tl.int64)
        kvh = tl.program_id(1) // M_TILES
        split = tl.program_id(2)
        if TREE:  # one token per tile: its keys are its own (prefix, then its ancestors' slots)
            m = tl.arange(0, BLOCK_M)
            t = m * 0 + tl.program_id(1) % M_TILES
            g = m
            valid_m = g < G
        else:
            m = (tl.program_id(1) % M_TILES) * BLOCK_M + tl.arange(0, BLOCK_M)  # (token, head in group) pairs
            t = m // G
            g = m % G
            valid_m = t < T
        n_idx = b * T + t
        pos_m = tl.load(pos_ptr + n_idx, mask=valid_m, other=-1)
        kv_len = tl.max(pos_m, axis=0) + 1  # the slots this tile's queries can see: 0..max position
        if NUM_SPLITS == 1:
            lo = 0
            hi = kv_len
        elif CHUNK > 0:  # batch-invariant: fixed boundaries, whatever the other queries are
            lo = split * CHUNK
            hi = tl.minimum(lo + CHUNK, kv_len)
        else:
            chunk = tl.cdiv(tl.cdiv(kv_len, NUM_SPLITS), BLOCK_N) * BLOCK_N
            lo = split * chunk
            hi = tl.minimum(lo + chunk, kv_len)
        d = tl.arange(0, D)
        head = kvh * G + g
        q = tl.load(q_ptr + (n_idx[:, None] * HQ + head[:, None]) * D + d[None, :], mask=valid_m[:, None], other=0.0)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, D], tl.float32)
        kbase = kc_ptr + b * kc_sb + kvh * kc_sh
        vbase = vc_ptr + b * vc_sb + kvh * vc_sh
        if TREE:  # logical key j >= base (the root's position and slot) lives in slot path[b, t, j - base]
            path_row = path_ptr + (b * T + tl.max(t, axis=0)) * E
            base = tl.load(path_row)
        # blocks past a query's own position are masked to exact no-ops (alpha = 1, p = 0), so a query's
        # result does not depend on how far the other queries of its tile reach
        for start in range(lo, hi, BLOCK_N):
            s_idx = start + tl.arange(0, BLOCK_N)
            smask = s_idx < hi
            if TREE:
                rel = s_idx - base
                anc = tl.load(path_row + rel, mask=smask & (rel >= 0) & (rel < E), other=0)
                phys = tl.where(rel >= 0, anc, s_idx)
            else:
                phys = s_idx
            k = tl.load(kbase + phys[:, None] * kc_ss + d[None, :], mask=smask[:, None], other=0.0)
            qk = tl.dot(q, tl.trans(k)) * scale
            ok = (s_idx[None, :] <= pos_m[:, None]) & smask[None, :]
            qk = tl.where(ok, qk, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, axis=1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.exp(m_i - m_safe)
            p = tl.exp(qk - m_safe[:, None])
            l_i = l_i * alpha + tl.sum(p, axis=1)
            v = tl.load(vbase + phys[:, None] * vc_ss + d[None, :], mask=smask[:, None], other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m_i = m_new
        if NUM_SPLITS == 1:
            out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
            tl.store(out_ptr + (n_idx[:, None] * HQ + head[:, None]) * D + d[None, :],
                     out.to(out_ptr.dtype.element_ty), mask=valid_m[:, None])
        elif CHUNK == 0 or lo < hi:  # invariant mode: the combine reads only the chunks up to each query's position
            prow = (split * N + n_idx) * HQ + head  # [BLOCK_M]
            tl.store(part_acc_ptr + prow[:, None] * D + d[None, :], acc, mask=valid_m[:, None])
            tl.store(part_ml_ptr + prow * 2, m_i, mask=valid_m)
            tl.store(part_ml_ptr + prow * 2 + 1, l_i, mask=valid_m)

    @triton.jit
    def _attn_combine_kernel(part_acc_ptr, part_ml_ptr, pos_ptr, out_ptr, N,
                             HQ: tl.constexpr, D: tl.constexpr, NUM_SPLITS: tl.constexpr, CHUNK: tl.constexpr,
                             PDL: tl.constexpr):
        if PDL:
            tl.extra.cuda.gdc_launch_dependents()
        n = tl.program_id(0).to(tl.int64)
        h = tl.program_id(1)
        d = tl.arange(0, D)
        if CHUNK > 0:  # the chunks that hold slots 0..pos; later ones would add exact zeros
            used = tl.load(pos_ptr + n) // CHUNK + 1
        else:
            used = NUM_SPLITS
        mx = tl.full([], float("-inf"), tl.float32)
        for s in range(0, used):
            mx = tl.maximum(mx, tl.load(part_ml_ptr + ((s * N + n) * HQ + h) * 2))
        mx = tl.where(mx == float("-inf"), 0.0, mx)
        acc = tl.zeros([D], tl.float32)
        den = tl.zeros([], tl.float32)
        for s in range(0, used):
            row = (s * N + n) * HQ + h
            w = tl.exp(tl.load(part_ml_ptr + row * 2) - mx)
            den += w * tl.load(part_ml_ptr + row * 2 + 1)
            acc += w * tl.load(part_acc_ptr + row * D + d)
        out = acc / tl.where(den == 0.0, 1.0, den)
        tl.store(out_ptr + (n * HQ + h) * D + d, out.to(out_ptr.dtype.element_ty))

    @triton.jit
    def _silu_mul_kernel(gu_ptr, out_ptr, I, BLOCK: tl.constexpr, PDL: tl.constexpr):
        if PDL:
            tl.extra.cuda.gdc_launch_dependents()
        n = tl.program_id(0).to(tl.int64)
        cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        m = cols < I
        dt = out_ptr.dtype.element_ty
        g = tl.load(gu_ptr + n * 2 * I + cols, mask=m, other=0.0).to(tl.float32)
        u = tl.load(gu_ptr + n * 2 * I + I + cols, mask=m, other=0.0).to(tl.float32)
        s = (g / (1.0 + tl.exp(-g))).to(dt).to(tl.float32)
        tl.store(out_ptr + n * I + cols, (s * u).to(dt), mask=m)


def _check(device: torch.device) -> None:
    if not triton_available(device):
        raise RuntimeError(f"the decode kernels need triton on CUDA (or TRITON_INTERPRET=1); device is {device}")


def add_rmsnorm(x: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """x [N, H] contiguous; delta [N, H], or fp32 split-K partials [S, N, H] of the GEMM that produced it
    (summed in order, then rounded to x's dtype) -> (x + delta or x, rmsnorm of it)."""
    _check(x.device)
    n, h = x.shape
    out = torch.empty_like(x)
    s = x if delta is None else torch.empty_like(x)
    parts = 1 if delta is None or delta.dim() == 2 else delta.shape[0]
    assert delta is None or delta.is_contiguous()
    block = triton.next_power_of_2(h)
    _add_rmsnorm_kernel[(n,)](x, x if delta is None else delta, weight, s, out, h, n, eps,
                              HAS_ADD=delta is not None, NUM_PARTS=parts, BLOCK=block, PDL=pdl(x.device),
                              num_warps=max(1, min(16, block // 256)))
    return s, out


def qkv_rope_cache(qkv, positions, batch, cos_table, sin_table, norm_w, eps, k_cache, v_cache, hq, hkv, d, slots=None):
    """The Triton twin of `qkv_rope_cache_ref` (same arguments, same result)."""
    _check(qkv.device)
    n = qkv.shape[0]
    q = torch.empty((n, hq, d), device=qkv.device, dtype=qkv.dtype)
    assert qkv.stride(1) == 1 and k_cache.stride(3) == 1 and v_cache.stride(3) == 1 and cos_table.stride(1) == 1
    _qkv_rope_cache_kernel[(n, hq + 2 * hkv)](
        qkv, positions, positions if slots is None else slots, cos_table, sin_table, norm_w if norm_w is not None else qkv, q, k_cache, v_cache,
        n // batch, eps, qkv.stride(0), cos_table.stride(0),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        HQ=hq, HKV=hkv, D=d, QK_NORM=norm_w is not None, PDL=pdl(qkv.device), num_warps=1)
    return q


def sm_count(device: torch.device) -> int:
    return _properties(_index(device)).multi_processor_count


def attention_splits(batch: int, hkv: int, max_slots: int, device: torch.device) -> int:
    """How many pieces to split each row's cache into so that the grid fills the GPU at small batch."""
    if device.type != "cuda":
        return 2 if max_slots > 64 else 1  # exercise the combine pass in the interpreter tests
    sms = sm_count(device)
    want = -(-2 * sms // max(1, batch * hkv))
    return int(max(1, min(16, want, -(-max_slots // 128))))


INVARIANT_TILE_M = 16  # query rows per attention program in batch-invariant mode
INVARIANT_MAX_SPLITS = 32


def invariant_chunk(max_slots: int) -> int:
    """Slots per split in batch-invariant mode: fixed by the cache's size alone, never by the queries."""
    return max(128, triton.next_power_of_2(-(-max_slots // INVARIANT_MAX_SPLITS)))


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, positions: torch.Tensor,
                     scale: float, num_splits: int | None = None, block_n: int = 64, invariant: bool = False,
                     path: torch.Tensor | None = None) -> torch.Tensor:
    """The Triton twin of `decode_attention_ref`: q [B, T, hq, d] contiguous -> [B, T, hq, d].

    invariant=True: a query's result is bit-identical whatever the other queries (its own row's other
    tokens, other rows, the batch size): query tiles of a fixed height, splits at fixed slot boundaries
    (`invariant_chunk`), the same warps. Otherwise the split count and tile follow the shape, for speed.

    path [B, T, E] int64 (a tree; `tree_paths` builds it): query (b, t) at position p sees slots 0..base-1 of its
    row (base = path[b, t, 0], the tree root's slot, which is its position) and then, as logical keys base..p,
    the slots path[b, t, 0..p-base] of its ancestors from the root down to itself (fed in this forward or an
    earlier one). Keys are visited in that logical order, one token per tile, so with invariant=True a node's
    result is bit-identical to the same tokens fed as a chain (its ancestors at consecutive slots)."""
    _check(q.device)
    b, t, hq, d = q.shape
    hkv = k_cache.shape[1]
    g = hq // hkv
    assert q.is_contiguous() and positions.is_contiguous() and k_cache.stride(3) == 1 and v_cache.stride(3) == 1
    tree = path is not None
    if tree:
        assert g <= INVARIANT_TILE_M, f"tree attention keeps a token's {g} heads of a group in one {INVARIANT_TILE_M}-row tile"
        assert path.shape[:2] == (b, t) and path.dtype == torch.int64 and path.is_contiguous()
    if invariant:
        block_m, chunk = INVARIANT_TILE_M, invariant_chunk(k_cache.shape[2])
        m_tiles, ns, warps = t if tree else -(-(g * t) // block_m), -(-k_cache.shape[2] // chunk), 4
    else:
        block_m, chunk, m_tiles = (INVARIANT_TILE_M, 0, t) if tree else (max(16, triton.next_power_of_2(g * t)), 0, 1)
        ns = attention_splits(b, hkv, k_cache.shape[2], q.device) if num_splits is None else num_splits
        warps = 4 if block_m <= 32 else 8
    out = torch.empty_like(q)
    n = b * t
    if ns > 1:
        part_acc = torch.empty((ns, n, hq, d), device=q.device, dtype=torch.float32)
        part_ml = torch.empty((ns, n, hq, 2), device=q.device, dtype=torch.float32)
    else:
        part_acc = part_ml = out
    _decode_attn_kernel[(b, hkv * m_tiles, ns)](
        q, k_cache, v_cache, positions, path if tree else positions, out, part_acc, part_ml, t, n, scale,
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        m_tiles, path.shape[2] if tree else 1, HQ=hq, G=g, D=d, BLOCK_M=block_m, BLOCK_N=block_n, NUM_SPLITS=ns,
        CHUNK=chunk, TREE=tree, PDL=pdl(q.device), num_warps=warps)
    if ns > 1:
        _attn_combine_kernel[(n, hq)](part_acc, part_ml, positions, out, n, HQ=hq, D=d, NUM_SPLITS=ns, CHUNK=chunk,
                                      PDL=pdl(q.device), num_warps=1)
    return out


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """gate_up [N, 2I] contiguous -> silu(gate) * up [N, I]."""
    _check(gate_up.device)
    n, two_i = gate_up.shape
    i = two_i // 2
    out = torch.empty((n, i), device=gate_up.device, dtype=gate_up.dtype)
    block = min(1024, triton.next_power_of_2(i))
    _silu_mul_kernel[(n, triton.cdiv(i, block))](gate_up, out, i, BLOCK=block, PDL=pdl(gate_up.device), num_warps=4)
    return out
