"""Triton acceptance step: greedy matching and rejection sampling, bit-identical to `specbench.verify`.

Contract: `greedy_verify_triton` and `rejection_sample_triton` take the same tensors as
`specbench.verify.greedy_verify` and `specbench.verify.rejection_sample` (Leviathan et al. 2023,
arXiv 2211.17192; Chen et al. 2023, arXiv 2302.01318) and return the same `Verdict`, bit for bit,
for the same noise. No host sync and no [B, V] temporaries: the torch reference launches ~20
kernels and writes several [B, V] tensors; this launches two and reads p, q and E once.

Why exact equality holds:
- acceptance compares u * q(d) < p(d) in float64, as the reference does (bf16/fp32 -> fp64 is exact);
- the residual max(0, p - q) is a float32 subtraction, and "has mass" (sum > 0 in the reference) is
  "some entry > 0 and none NaN", which a sum of non-negative floats gives in any order;
- the draw is argmax(w / E) with IEEE division (tl.math.div_rn: Triton's `/` on float32 lowers to
  the approximate div.full.f32 on NVIDIA), and the argmax order is torch's: NaN beats every number,
  then the larger value, then the lower index. That order is total, so chunking V cannot change it.

Layout: phase 1 runs a grid of (row, chunk of V) programs that each write the chunk's best
(value, index) pairs; phase 2 runs one program per row that merges the chunks and applies the
prefix rule. Chunking keeps all SMs busy at B = 1 (one program per row would read 150k-entry rows
on a single SM).
"""

import os

import torch

from specbench.kernels.decode import sm_count
from specbench.verify import Verdict

try:
    import triton
    import triton.language as tl
except ImportError:  # the torch reference still works; triton_available() says False
    triton = None

# Phase-1 launch shape, tuned on an H200 (V = 151936, B in 1..64, CUDA-graph device time): 1024 x 8
# warps beat 2048/4096 and 4 warps; 4 programs per SM beat 16 and 64.
_BLOCK_V = 1024  # entries per loop step of a phase-1 program (a power of two)
_NUM_WARPS = 8  # warps per phase-1 program
_PROGRAMS_PER_SM = 4  # phase-1 programs to aim for per SM when choosing the chunk count
_MAX_CHUNKS = 256  # phase 2 merges at most this many chunk results per row in one tile

# Triton decides at decoration time whether a kernel is interpreted; remember what it decided.
_INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def triton_available(device: torch.device | str) -> bool:
    """True when the kernels can run on `device`: triton imports, and the device is CUDA or the
    kernels were defined under TRITON_INTERPRET=1 (the CPU interpreter used by the tests)."""
    if triton is None:
        return False
    return torch.device(device).type == "cuda" or _INTERPRETED


if triton is not None:
    _NO_INDEX = tl.constexpr(2**31 - 1)  # index of "nothing yet"; loses every tie to a real one

    @triton.jit
    def _pick(v1, i1, v2, i2):
        # torch.argmax's order (its CUDA GreaterOrNan): NaN beats every number, then the larger
        # value wins, then the lower index. A total order, so any reduction tree gives one answer.
        nan1 = v1 != v1
        nan2 = v2 != v2
        tie = (v1 == v2) | (nan1 & nan2)
        take1 = (v1 > v2) | (nan1 & (v2 == v2)) | (tie & (i1 < i2))
        return tl.where(take1, v1, v2), tl.where(take1, i1, i2)

    @triton.jit
    def _argmax(v, i, AXIS: tl.constexpr):
        # `_pick` as a reduction over AXIS: (value, index) of the first NaN if any, else of the first
        # maximum. Built from tl.max / tl.min rather than tl.reduce(..., _pick): same answer, and
        # the CPU interpreter runs it vectorised instead of calling _pick once per element.
        nan = (v != v).to(tl.int32)
        any_nan = tl.max(nan, AXIS)
        top = tl.max(tl.where(nan > 0, float("-inf"), v), AXIS)
        at_top = (v == tl.expand_dims(top, AXIS)).to(tl.int32) * (1 - tl.expand_dims(any_nan, AXIS))
        idx = tl.min(tl.where(nan + at_top > 0, i, _NO_INDEX), AXIS)
        return tl.where(any_nan > 0, float("nan"), top), idx

    @triton.jit
    def _merged_argmax(part_val_ptr, part_idx_ptr, b, K, NUM_CHUNKS, ACC: tl.constexpr, BLOCK_K1: tl.constexpr,
                       BLOCK_C: tl.constexpr):
        """Row b's argmax per column 0..K ([BLOCK_K1] int32), merged from _greedy_partial_kernel's chunk results."""
        pos = tl.arange(0, BLOCK_K1)
        chunk = tl.arange(0, BLOCK_C)
        m = (pos[:, None] <= K) & (chunk[None, :] < NUM_CHUNKS)
        at = (b * (K + 1) + pos[:, None]) * NUM_CHUNKS + chunk[None, :]
        v = tl.load(part_val_ptr + at, mask=m, other=float("-inf")).to(ACC)
        ix = tl.load(part_idx_ptr + at, mask=m, other=_NO_INDEX)
        _, target_argmax = _argmax(v, ix, 1)
        return target_argmax

    @triton.jit
    def _greedy_partial_kernel(
        logits_ptr,  # [B, K+1, V]
        s_lb,
        s_lk,
        s_lv,
        part_val_ptr,  # [B, K+1, C] best logit of each chunk
        part_idx_ptr,  # [B, K+1, C] int32, its index
        V,
        CHUNK,
        NUM_CHUNKS,
        ACC: tl.constexpr,  # float32, or float64 for float64 logits (a cast would merge ties)
        BLOCK_V: tl.constexpr,
    ):
        b = tl.program_id(0).to(tl.int64)
        i = tl.program_id(1)
        c = tl.program_id(2)
        row = logits_ptr + b * s_lb + i * s_lk
        start = c * CHUNK
        end = tl.minimum(start + CHUNK, V)
        # per-lane running best; lanes merge once at the end
        best_v = tl.full([BLOCK_V], float("-inf"), ACC)
        best_i = tl.full([BLOCK_V], _NO_INDEX, tl.int32)
        for off in range(start, end, BLOCK_V):
            idx = off + tl.arange(0, BLOCK_V)
            m = idx < end
            x = tl.load(row + idx * s_lv, mask=m, other=float("-inf")).to(ACC)
            best_v, best_i = _pick(best_v, best_i, x, idx)
        v, ix = _argmax(best_v, best_i, 0)
        out = (b * tl.num_programs(1) + i) * NUM_CHUNKS + c
        tl.store(part_val_ptr + out, v)
        tl.store(part_idx_ptr + out, ix)

    @triton.jit
    def _greedy_final_kernel(
        part_val_ptr,  # [B, K+1, C]
        part_idx_ptr,  # [B, K+1, C]
        draft_ptr,  # [B, K] int64
        s_db,
        s_dk,
        accepted_ptr,  # [B] int64
        next_ptr,  # [B] int64
        K,
        NUM_CHUNKS,
        ACC: tl.constexpr,
        BLOCK_K1: tl.constexpr,  # >= K+1
        BLOCK_C: tl.constexpr,  # >= NUM_CHUNKS
    ):
        b = tl.program_id(0).to(tl.int64)
        pos = tl.arange(0, BLOCK_K1)
        target_argmax = _merged_argmax(part_val_ptr, part_idx_ptr, b, K, NUM_CHUNKS, ACC, BLOCK_K1, BLOCK_C)
        d = tl.load(draft_ptr + b * s_db + pos * s_dk, mask=pos < K, other=-1)
        # accepted = the first position that differs; position K always "differs" (it is the bonus)
        differs = (target_argmax.to(tl.int64) != d) | (pos >= K)
        n = tl.min(tl.where(differs, pos, BLOCK_K1), axis=0)
        token = tl.sum(tl.where(pos == n, target_argmax, 0), axis=0)
        tl.store(accepted_ptr + b, n.to(tl.int64))
        tl.store(next_ptr + b, token.to(tl.int64))

    @triton.jit
    def _rejection_partial_kernel(
        draft_ptr,  # [B, K] int64
        s_db,
        s_dk,
        q_ptr,  # [B, K, V] (unused when HAS_Q is False)
        s_qb,
        s_qk,
        s_qv,
        p_ptr,  # [B, K+1, V]
        s_pb,
        s_pk,
        s_pv,
        u_ptr,  # [B, K]
        s_ub,
        s_uk,
        e_ptr,  # [B, V] float32
        s_eb,
        s_ev,
        accepted_ptr,  # [B] int64, written by chunk 0
        part_val_ptr,  # [B, C, 2] float32: best residual/E, best p/E
        part_idx_ptr,  # [B, C, 2] int32: their indices
        part_flag_ptr,  # [B, C] int32: bit 0 some residual > 0, bit 1 some residual NaN
        K,
        V,
        CHUNK,
        NUM_CHUNKS,
        HAS_Q: tl.constexpr,
        BLOCK_K: tl.constexpr,  # >= max(K, 1)
        BLOCK_V: tl.constexpr,
    ):
        b = tl.program_id(0).to(tl.int64)
        c = tl.program_id(1)

        # 1) accept: d_i stays iff u_i * q_i(d_i) < p_i(d_i), in float64 like the reference; every
        #    chunk recomputes the count (K scalar loads) rather than wait for another launch
        ks = tl.arange(0, BLOCK_K)
        mk = ks < K
        d = tl.load(draft_ptr + b * s_db + ks * s_dk, mask=mk, other=0)
        p_d = tl.load(p_ptr + b * s_pb + ks * s_pk + d * s_pv, mask=mk, other=0.0).to(tl.float64)
        u = tl.load(u_ptr + b * s_ub + ks * s_uk, mask=mk, other=0.0).to(tl.float64)
        if HAS_Q:
            q_d = tl.load(q_ptr + b * s_qb + ks * s_qk + d * s_qv, mask=mk, other=0.0).to(tl.float64)
            ok = u * q_d < p_d
        else:
            ok = u < p_d  # q = one-hot(d): u * 1.0 == u
        n = tl.min(tl.where(mk & (ok == 0), ks, K), axis=0)
        tl.store(accepted_ptr + b, n.to(tl.int64), mask=c == 0)

        # 2) draw: race w / E over this chunk for both candidate weights, residual and plain p_n;
        #    phase 2 picks one once it knows whether the residual has mass anywhere in the row
        rejected = n < K
        at = tl.maximum(tl.minimum(n, K - 1), 0)  # the rejected slot (a dummy when nothing is)
        d_at = tl.load(draft_ptr + b * s_db + at * s_dk, mask=rejected, other=-1)
        p_row = p_ptr + b * s_pb + n * s_pk
        q_row = q_ptr + b * s_qb + at * s_qk
        e_row = e_ptr + b * s_eb
        start = c * CHUNK
        end = tl.minimum(start + CHUNK, V)
        q_end = tl.where(rejected, end, 0)  # q_n is read only for a rejected row
        res_v = tl.full([BLOCK_V], float("-inf"), tl.float32)
        res_i = tl.full([BLOCK_V], _NO_INDEX, tl.int32)
        p_v = tl.full([BLOCK_V], float("-inf"), tl.float32)
        p_i = tl.full([BLOCK_V], _NO_INDEX, tl.int32)
        pos = tl.zeros([BLOCK_V], tl.int32)
        nan = tl.zeros([BLOCK_V], tl.int32)
        for off in range(start, end, BLOCK_V):
            idx = off + tl.arange(0, BLOCK_V)
            m = idx < end
            p = tl.load(p_row + idx * s_pv, mask=m, other=0.0).to(tl.float32)
            e = tl.load(e_row + idx * s_ev, mask=m, other=1.0)
            if HAS_Q:
                q = tl.load(q_row + idx * s_qv, mask=idx < q_end, other=0.0).to(tl.float32)
            else:
                q = tl.where(idx == d_at, 1.0, 0.0)
            r = p - q
            r = tl.where(r < 0.0, 0.0, r)  # clamp_min(0) that keeps NaN, as torch's does
            pos = tl.maximum(pos, (r > 0.0).to(tl.int32))
            nan = tl.maximum(nan, (r != r).to(tl.int32))
            w_res = tl.where(m, tl.math.div_rn(r, e), float("-inf"))
            w_p = tl.where(m, tl.math.div_rn(p, e), float("-inf"))
            res_v, res_i = _pick(res_v, res_i, w_res, idx)
            p_v, p_i = _pick(p_v, p_i, w_p, idx)
        rv, ri = _argmax(res_v, res_i, 0)
        pv, pi = _argmax(p_v, p_i, 0)
        out = b * NUM_CHUNKS + c
        tl.store(part_val_ptr + 2 * out, rv)
        tl.store(part_val_ptr + 2 * out + 1, pv)
        tl.store(part_idx_ptr + 2 * out, ri)
        tl.store(part_idx_ptr + 2 * out + 1, pi)
        tl.store(part_flag_ptr + out, tl.max(pos, axis=0) + 2 * tl.max(nan, axis=0))

    @triton.jit
    def _rejection_final_kernel(
        accepted_ptr,  # [B] int64
        part_val_ptr,  # [B, C, 2]
        part_idx_ptr,  # [B, C, 2]
        part_flag_ptr,  # [B, C]
        next_ptr,  # [B] int64
        K,
        NUM_CHUNKS,
        BLOCK_C: tl.constexpr,
    ):
        b = tl.program_id(0).to(tl.int64)
        chunk = tl.arange(0, BLOCK_C)
        m = chunk < NUM_CHUNKS
        at = b * NUM_CHUNKS + chunk
        rv = tl.load(part_val_ptr + 2 * at, mask=m, other=float("-inf"))
        ri = tl.load(part_idx_ptr + 2 * at, mask=m, other=_NO_INDEX)
        pv = tl.load(part_val_ptr + 2 * at + 1, mask=m, other=float("-inf"))
        pi = tl.load(part_idx_ptr + 2 * at + 1, mask=m, other=_NO_INDEX)
        flags = tl.load(part_flag_ptr + at, mask=m, other=0)
        _, res_token = _argmax(rv, ri, 0)
        _, p_token = _argmax(pv, pi, 0)
        has_pos = tl.max(flags & 1, axis=0) > 0
        has_nan = tl.max(flags & 2, axis=0) > 0
        n = tl.load(accepted_ptr + b)
        # the reference's `residual.sum() > 0`: false when all zero (p == q) or any NaN
        use_residual = (n < K) & has_pos & (has_nan == 0)
        token = tl.where(use_residual, res_token, p_token)
        tl.store(next_ptr + b, token.to(tl.int64))


def _raise_if_unavailable(device: torch.device) -> None:
    if not triton_available(device):
        why = "triton is not installed" if triton is None else f"the tensors are on {device}"
        raise RuntimeError(
            f"the Triton acceptance kernels cannot run: {why}; they need a CUDA device, or "
            "TRITON_INTERPRET=1 set before specbench.kernels.rejection is imported (CPU, for tests). "
            "Use specbench.verify.greedy_verify / rejection_sample instead."
        )


def _raise_if_bad_shapes(
    draft_tokens: torch.Tensor, target: torch.Tensor, draft_probs: torch.Tensor | None = None
) -> None:
    if draft_tokens.dim() != 2 or draft_tokens.dtype != torch.int64:
        raise ValueError(
            f"draft_tokens has shape {tuple(draft_tokens.shape)} and dtype {draft_tokens.dtype}; "
            "allowed: [B, K] int64"
        )
    bsz, k = draft_tokens.shape
    if target.dim() != 3 or target.shape[:2] != (bsz, k + 1) or target.shape[2] < 1:
        raise ValueError(
            f"target tensor has shape {tuple(target.shape)} for draft_tokens {tuple(draft_tokens.shape)}; "
            f"allowed: [B, K+1, V] = [{bsz}, {k + 1}, V >= 1]"
        )
    if not target.is_floating_point():
        raise ValueError(f"target tensor has dtype {target.dtype}; allowed: a floating-point dtype")
    if draft_probs is not None and draft_probs.shape != (bsz, k, target.shape[2]):
        raise ValueError(
            f"draft_probs has shape {tuple(draft_probs.shape)}; allowed: [B, K, V] = "
            f"[{bsz}, {k}, {target.shape[2]}] (pad a smaller draft vocabulary with zeros, as Verifier does)"
        )


def _chunking(rows: int, vocab: int, block_v: int, num_chunks: int | None, device: torch.device) -> tuple[int, int]:
    """Split V into chunks of whole blocks so that rows * chunks fills the GPU; -> (chunk, count)."""
    blocks = triton.cdiv(vocab, block_v)
    if num_chunks is None:
        num_chunks = triton.cdiv(_PROGRAMS_PER_SM * (sm_count(device) if device.type == "cuda" else 1), rows)
    num_chunks = max(1, min(num_chunks, blocks, _MAX_CHUNKS))
    chunk = triton.cdiv(blocks, num_chunks) * block_v
    return chunk, triton.cdiv(vocab, chunk)  # no empty chunk: each one owns a real index


def _block_v(vocab: int, block_v: int | None) -> int:
    if block_v is None:
        return min(_BLOCK_V, triton.next_power_of_2(vocab))
    if block_v < 1 or block_v & (block_v - 1):
        raise ValueError(f"block_v={block_v}; allowed: a power of two (None picks {_BLOCK_V} or less)")
    return block_v


def greedy_verify_triton(
    draft_tokens: torch.Tensor,  # [B, K] int64
    target_logits: torch.Tensor,  # [B, K+1, V]
    *,
    block_v: int | None = None,
    num_chunks: int | None = None,
) -> Verdict:
    """T = 0 acceptance; equals `specbench.verify.greedy_verify` bit for bit.

    block_v / num_chunks tune the V split (tests use them to force several chunks and blocks).
    """
    _raise_if_bad_shapes(draft_tokens, target_logits)
    device = target_logits.device
    _raise_if_unavailable(device)
    bsz, k = draft_tokens.shape
    vocab = target_logits.shape[2]
    accepted = torch.empty(bsz, dtype=torch.int64, device=device)
    next_token = torch.empty(bsz, dtype=torch.int64, device=device)
    if bsz == 0:
        return Verdict(accepted=accepted, next_token=next_token)
    bv = _block_v(vocab, block_v)
    chunk, n_chunks = _chunking(bsz * (k + 1), vocab, bv, num_chunks, device)
    wide = target_logits.dtype == torch.float64
    part_val = torch.empty((bsz, k + 1, n_chunks), dtype=target_logits.dtype if wide else torch.float32, device=device)
    part_idx = torch.empty((bsz, k + 1, n_chunks), dtype=torch.int32, device=device)
    acc = tl.float64 if wide else tl.float32
    _greedy_partial_kernel[(bsz, k + 1, n_chunks)](
        target_logits,
        *target_logits.stride(),
        part_val,
        part_idx,
        vocab,
        chunk,
        n_chunks,
        ACC=acc,
        BLOCK_V=bv,
        num_warps=_NUM_WARPS,
    )
    draft = draft_tokens if k > 0 else torch.zeros((bsz, 1), dtype=torch.int64, device=device)
    _greedy_final_kernel[(bsz,)](
        part_val,
        part_idx,
        draft,
        *draft.stride(),
        accepted,
        next_token,
        k,
        n_chunks,
        ACC=acc,
        BLOCK_K1=triton.next_power_of_2(k + 1),
        BLOCK_C=triton.next_power_of_2(n_chunks),
    )
    return Verdict(accepted=accepted, next_token=next_token)


def rejection_sample_triton(
    draft_tokens: torch.Tensor,  # [B, K] int64
    draft_probs: torch.Tensor | None,  # [B, K, V] float, q; None = one-hot at draft_tokens
    target_probs: torch.Tensor,  # [B, K+1, V] float, p
    accept_uniforms: torch.Tensor,  # [B, K] float64 in [0, 1)
    exponentials: torch.Tensor,  # [B, V] float32, Exp(1) noise
    *,
    block_v: int | None = None,
    num_chunks: int | None = None,
) -> Verdict:
    """T > 0 acceptance; equals `specbench.verify.rejection_sample` bit for bit on the same noise."""
    _raise_if_bad_shapes(draft_tokens, target_probs, draft_probs)
    bsz, k = draft_tokens.shape
    vocab = target_probs.shape[2]
    if accept_uniforms.shape != (bsz, k) or not accept_uniforms.is_floating_point():
        raise ValueError(
            f"accept_uniforms has shape {tuple(accept_uniforms.shape)} and dtype {accept_uniforms.dtype}; "
            f"allowed: [B, K] = [{bsz}, {k}] float64"
        )
    if exponentials.shape != (bsz, vocab) or exponentials.dtype != torch.float32:
        raise ValueError(
            f"exponentials has shape {tuple(exponentials.shape)} and dtype {exponentials.dtype}; "
            f"allowed: [B, V] = [{bsz}, {vocab}] float32 (the reference divides in its dtype)"
        )
    device = target_probs.device
    _raise_if_unavailable(device)
    accepted = torch.empty(bsz, dtype=torch.int64, device=device)
    next_token = torch.empty(bsz, dtype=torch.int64, device=device)
    if bsz == 0:
        return Verdict(accepted=accepted, next_token=next_token)
    bv = _block_v(vocab, block_v)
    chunk, n_chunks = _chunking(bsz, vocab, bv, num_chunks, device)
    part_val = torch.empty((bsz, n_chunks, 2), dtype=torch.float32, device=device)
    part_idx = torch.empty((bsz, n_chunks, 2), dtype=torch.int32, device=device)
    part_flag = torch.empty((bsz, n_chunks), dtype=torch.int32, device=device)
    if k == 0:  # nothing to accept; give the kernel valid (never read) pointers
        draft_tokens = torch.zeros((bsz, 1), dtype=torch.int64, device=device)
        accept_uniforms = torch.zeros((bsz, 1), dtype=torch.float64, device=device)
        draft_probs = None
    has_q = draft_probs is not None
    q = draft_probs if has_q else target_probs  # a dummy pointer when q is one-hot
    _rejection_partial_kernel[(bsz, n_chunks)](
        draft_tokens,
        *draft_tokens.stride(),
        q,
        *q.stride(),
        target_probs,
        *target_probs.stride(),
        accept_uniforms,
        *accept_uniforms.stride(),
        exponentials,
        *exponentials.stride(),
        accepted,
        part_val,
        part_idx,
        part_flag,
        k,
        vocab,
        chunk,
        n_chunks,
        HAS_Q=has_q,
        BLOCK_K=triton.next_power_of_2(max(k, 1)),
        BLOCK_V=bv,
        num_warps=_NUM_WARPS,
    )
    _rejection_final_kernel[(bsz,)](
        accepted, part_val, part_idx, part_flag, next_token, k, n_chunks, BLOCK_C=triton.next_power_of_2(n_chunks)
    )
    return Verdict(accepted=accepted, next_token=next_token)
