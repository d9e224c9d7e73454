"""Triton acceptance of a tree: the T = 0 walk and recursive rejection sampling, equal to `specbench.verify`.

Contract: `greedy_tree_verify_triton` and `tree_rejection_sample_triton` take the tensors of
`specbench.verify.greedy_tree_verify` and `specbench.verify.tree_rejection_sample` (SpecInfer, arXiv 2305.09781)
and return the same `TreeVerdict` for the same noise. The torch reference loops over the N nodes in Python with
about fifteen [B, V] kernels per node (5-11 ms per step for 16 nodes on the H200); these are two launches at T = 0
and one at T > 0.

Layout:
- T = 0: `rejection._greedy_partial_kernel` finds the argmax of every column over chunks of V (the chain's phase
  1), then one program per row merges the chunks and walks the tree in node order, exactly as the reference does.
- T > 0: one program per row walks the nodes in order. Accepting a child is a few scalar loads; rejecting one is a
  pass over V that writes the residual max(0, r - mass * q) into a scratch row and sums it; the last step is a
  pass that draws argmax(r / E). A row costs (rejected children + 1) passes over V, each on one SM, so the batch
  runs in parallel and the time does not grow with B up to the SM count.

Equality with the reference: acceptance compares u * q(x) * mass < r(x) in float64 and the residual rounds
mass * q to float32 before subtracting, as the reference does; the draw is the chain kernel's IEEE race with
torch's argmax order. The one difference is the order of the float64 sum that gives a residual's mass, which
can move its last bits; a verdict changes only when u lands within that rounding of the acceptance threshold
(about 1e-16 of it), so the tests compare verdicts on fixed noise and also run the chi-square test.
"""

import torch

from specbench.kernels import rejection
from specbench.verify import TreeVerdict

try:
    import triton
    import triton.language as tl
except ImportError:  # rejection.triton_available() says False; the torch reference still works
    triton = None

_BLOCK_V = 2048  # entries per loop step of the T > 0 walk (one program per row)
_NUM_WARPS = 8

triton_available = rejection.triton_available
_INTERPRETED = rejection._INTERPRETED  # decided when rejection was imported (tests reload both, in that order)

if triton is not None:
    _pick, _argmax, _NO_INDEX = rejection._pick, rejection._argmax, rejection._NO_INDEX
    _merged_argmax = rejection._merged_argmax

    @triton.jit
    def _load_r(p_ptr, s_pb, s_pn, s_pv, scratch_ptr, from_p, b, col, buf, V, idx, m):
        """r at entries idx: column `col` of p while `from_p`, else scratch buffer `buf` of row b."""
        if from_p != 0:
            r = tl.load(p_ptr + b * s_pb + col * s_pn + idx * s_pv, mask=m, other=0.0)
        else:
            r = tl.load(scratch_ptr + (2 * b + buf) * V + idx, mask=m, other=0.0)
        return r

    @triton.jit
    def _at(values, pos, i):
        """values[i] of a block tensor, as a scalar (0 when i is outside it)."""
        return tl.sum(tl.where(pos == i, values, 0), axis=0)

    @triton.jit
    def _greedy_tree_final_kernel(
        part_val_ptr,  # [B, N+1, C] best logit of each chunk of each column
        part_idx_ptr,  # [B, N+1, C] int32, its index
        draft_ptr,  # [B, N] int64
        s_db,
        s_dn,
        parent_ptr,  # [B, N] int64, topological
        s_pb,
        s_pn,
        path_ptr,  # [B, N] int64, contiguous
        accepted_ptr,  # [B] int64
        next_ptr,  # [B] int64
        N,
        NUM_CHUNKS,
        ACC: tl.constexpr,
        BLOCK_N1: tl.constexpr,  # >= N+1
        BLOCK_C: tl.constexpr,  # >= NUM_CHUNKS
    ):
        b = tl.program_id(0).to(tl.int64)
        pos = tl.arange(0, BLOCK_N1)
        # [BLOCK_N1] the target's argmax after column i
        argmax = _merged_argmax(part_val_ptr, part_idx_ptr, b, N, NUM_CHUNKS, ACC, BLOCK_N1, BLOCK_C).to(tl.int64)
        # from the pending token down: take the first child (in node order) whose token is the argmax after it
        node = tl.cast(-1, tl.int64)
        length = tl.cast(0, tl.int64)
        path = tl.full([BLOCK_N1], -1, tl.int64)
        for j in range(0, N):
            parent = tl.load(parent_ptr + b * s_pb + j * s_pn)
            token = tl.load(draft_ptr + b * s_db + j * s_dn)
            take = (parent == node) & (token == _at(argmax, pos, node + 1))
            path = tl.where(take & (pos == length), j, path)
            length += take.to(tl.int64)
            node = tl.where(take, j, node)
        tl.store(path_ptr + b * N + pos, path, mask=pos < N)
        tl.store(accepted_ptr + b, length)
        tl.store(next_ptr + b, _at(argmax, pos, node + 1))

    @triton.jit
    def _tree_rejection_kernel(
        draft_ptr,  # [B, N] int64
        s_db,
        s_dn,
        parent_ptr,  # [B, N] int64, topological
        s_ab,
        s_an,
        q_ptr,  # [B, N, V] float32 (a dummy when HAS_Q is False)
        s_qb,
        s_qn,
        s_qv,
        p_ptr,  # [B, N+1, V] float32
        s_pb,
        s_pn,
        s_pv,
        u_ptr,  # [B, N] float64
        s_ub,
        s_un,
        e_ptr,  # [B, V] float32
        s_eb,
        s_ev,
        scratch_ptr,  # [B, 2, V] float32, contiguous: the residual, double-buffered
        path_ptr,  # [B, N] int64, contiguous
        accepted_ptr,  # [B] int64
        next_ptr,  # [B] int64
        N,
        V,
        HAS_Q: tl.constexpr,
        BLOCK_N: tl.constexpr,  # >= N
        BLOCK_V: tl.constexpr,
    ):
        b = tl.program_id(0).to(tl.int64)
        pos = tl.arange(0, BLOCK_N)
        lanes = tl.arange(0, BLOCK_V)
        node = tl.cast(-1, tl.int64)
        length = tl.cast(0, tl.int64)
        path = tl.full([BLOCK_N], -1, tl.int64)
        # r, what the next token is drawn from: column `col` of p while `from_p`, else scratch buffer `buf`,
        # unnormalised after a rejection (`mass` its sum), exactly the reference's (r, mass)
        from_p = tl.cast(1, tl.int32)
        col = tl.cast(0, tl.int64)
        buf = tl.cast(0, tl.int64)
        mass = tl.cast(1.0, tl.float64)
        for j in range(0, N):
            parent = tl.load(parent_ptr + b * s_ab + j * s_an)
            if parent == node:
                x = tl.load(draft_ptr + b * s_db + j * s_dn)
                r_x = _load_r(p_ptr, s_pb, s_pn, s_pv, scratch_ptr, from_p, b, col, buf, V, x, True)
                if HAS_Q:
                    q_x = tl.load(q_ptr + b * s_qb + j * s_qn + x * s_qv).to(tl.float64)
                else:
                    q_x = tl.cast(1.0, tl.float64)
                u = tl.load(u_ptr + b * s_ub + j * s_un).to(tl.float64)
                if u * q_x * mass < r_x.to(tl.float64):  # accept x: descend, r = p after x
                    path = tl.where(pos == length, j, path)
                    length += 1
                    node = tl.cast(j, tl.int64)
                    from_p = tl.cast(1, tl.int32)
                    col = tl.cast(j + 1, tl.int64)
                    mass = tl.cast(1.0, tl.float64)
                else:  # reject x: r = max(0, r - mass * q) into the other buffer, and its sum
                    dst = 1 - buf
                    total = tl.zeros([BLOCK_V], tl.float64)
                    for off in range(0, V, BLOCK_V):
                        idx = off + lanes
                        m = idx < V
                        r = _load_r(p_ptr, s_pb, s_pn, s_pv, scratch_ptr, from_p, b, col, buf, V, idx, m)
                        if HAS_Q:
                            q = tl.load(q_ptr + b * s_qb + j * s_qn + idx * s_qv, mask=m, other=0.0)
                        else:
                            q = tl.where(idx == x, 1.0, 0.0)
                        res = r - (mass * q.to(tl.float64)).to(tl.float32)
                        res = tl.where(res < 0.0, 0.0, res)  # clamp_min(0) that keeps NaN, as torch's does
                        tl.store(scratch_ptr + (2 * b + dst) * V + idx, res, mask=m)
                        total += tl.where(m, res.to(tl.float64), 0.0)
                    left = tl.sum(total, axis=0)
                    if left > 0:  # no mass left (or NaN): the rejection had probability 0, keep r
                        from_p = tl.cast(0, tl.int32)
                        buf = dst
                        mass = left
        # draw the next token from r: argmax(r / E), torch's order
        best_v = tl.full([BLOCK_V], float("-inf"), tl.float32)
        best_i = tl.full([BLOCK_V], _NO_INDEX, tl.int32)
        for off in range(0, V, BLOCK_V):
            idx = off + lanes
            m = idx < V
            r = _load_r(p_ptr, s_pb, s_pn, s_pv, scratch_ptr, from_p, b, col, buf, V, idx, m)
            e = tl.load(e_ptr + b * s_eb + idx * s_ev, mask=m, other=1.0)
            w = tl.where(m, tl.math.div_rn(r, e), float("-inf"))
            best_v, best_i = _pick(best_v, best_i, w, idx)
        _, token = _argmax(best_v, best_i, 0)
        tl.store(path_ptr + b * N + pos, path, mask=pos < N)
        tl.store(accepted_ptr + b, length)
        tl.store(next_ptr + b, token.to(tl.int64))


def _raise_if_bad_shapes(draft_tokens: torch.Tensor, parents: torch.Tensor, target: torch.Tensor,
                         draft_probs: torch.Tensor | None = None) -> None:
    if draft_tokens.dim() != 2 or draft_tokens.dtype != torch.int64:
        raise ValueError(f"draft_tokens has shape {tuple(draft_tokens.shape)} and dtype {draft_tokens.dtype}; "
                         "allowed: [B, N] int64")
    bsz, n = draft_tokens.shape
    if parents.shape != (bsz, n) or parents.dtype != torch.int64:
        raise ValueError(f"parents has shape {tuple(parents.shape)} and dtype {parents.dtype}; "
                         f"allowed: [B, N] = [{bsz}, {n}] int64, topological")
    if target.dim() != 3 or target.shape[:2] != (bsz, n + 1) or not target.is_floating_point():
        raise ValueError(f"target tensor has shape {tuple(target.shape)} and dtype {target.dtype} for {n} nodes; "
                         f"allowed: [B, N+1, V] = [{bsz}, {n + 1}, V] floating point")
    if draft_probs is not None and draft_probs.shape != (bsz, n, target.shape[2]):
        raise ValueError(f"draft_probs has shape {tuple(draft_probs.shape)}; allowed: [B, N, V] = "
                         f"[{bsz}, {n}, {target.shape[2]}] (pad a smaller draft vocabulary with zeros, as Verifier "
                         "does)")


def _raise_if_unavailable(device: torch.device) -> None:
    if not triton_available(device):
        why = "triton is not installed" if triton is None else f"the tensors are on {device}"
        raise RuntimeError(f"the Triton tree acceptance kernels cannot run: {why}; they need a CUDA device, or "
                           "TRITON_INTERPRET=1 set before specbench.kernels is imported (CPU, for tests). "
                           "Use specbench.verify.greedy_tree_verify / tree_rejection_sample instead.")


def greedy_tree_verify_triton(
    draft_tokens: torch.Tensor,  # [B, N] int64
    parents: torch.Tensor,  # [B, N] int64, topological
    target_logits: torch.Tensor,  # [B, N+1, V]
    layout: tuple[torch.Tensor, torch.Tensor] | None = None,  # accepted for the reference's signature; unused
    *,
    block_v: int | None = None,
    num_chunks: int | None = None,
) -> TreeVerdict:
    """T = 0 acceptance of a tree; equals `specbench.verify.greedy_tree_verify` bit for bit."""
    _raise_if_bad_shapes(draft_tokens, parents, target_logits)
    device = target_logits.device
    _raise_if_unavailable(device)
    bsz, n = draft_tokens.shape
    vocab = target_logits.shape[2]
    path = torch.empty((bsz, n), dtype=torch.int64, device=device)
    accepted = torch.empty(bsz, dtype=torch.int64, device=device)
    next_token = torch.empty(bsz, dtype=torch.int64, device=device)
    if bsz == 0:
        return TreeVerdict(path=path, accepted=accepted, next_token=next_token)
    bv = rejection._block_v(vocab, block_v)
    chunk, n_chunks = rejection._chunking(bsz * (n + 1), vocab, bv, num_chunks, device)
    wide = target_logits.dtype == torch.float64
    part_val = torch.empty((bsz, n + 1, n_chunks), dtype=torch.float64 if wide else torch.float32, device=device)
    part_idx = torch.empty((bsz, n + 1, n_chunks), dtype=torch.int32, device=device)
    acc = tl.float64 if wide else tl.float32
    rejection._greedy_partial_kernel[(bsz, n + 1, n_chunks)](
        target_logits, *target_logits.stride(), part_val, part_idx, vocab, chunk, n_chunks,
        ACC=acc, BLOCK_V=bv, num_warps=rejection._NUM_WARPS,
    )
    _greedy_tree_final_kernel[(bsz,)](
        part_val, part_idx, draft_tokens, *draft_tokens.stride(), parents, *parents.stride(), path, accepted,
        next_token, n, n_chunks, ACC=acc, BLOCK_N1=triton.next_power_of_2(n + 1),
        BLOCK_C=triton.next_power_of_2(n_chunks),
    )
    return TreeVerdict(path=path, accepted=accepted, next_token=next_token)


def tree_rejection_sample_triton(
    draft_tokens: torch.Tensor,  # [B, N] int64
    parents: torch.Tensor,  # [B, N] int64, topological
    draft_probs: torch.Tensor | None,  # [B, N, V] q each node was drawn from; None = one-hot at each node's token
    target_probs: torch.Tensor,  # [B, N+1, V] p
    accept_uniforms: torch.Tensor,  # [B, N] float64 in [0, 1)
    exponentials: torch.Tensor,  # [B, V] float32, Exp(1) noise
    *,
    block_v: int | None = None,
) -> TreeVerdict:
    """T > 0 acceptance of a tree; equals `specbench.verify.tree_rejection_sample` on the same noise (see the
    module docstring for the one float64 sum whose order differs)."""
    _raise_if_bad_shapes(draft_tokens, parents, target_probs, draft_probs)
    bsz, n = draft_tokens.shape
    vocab = target_probs.shape[2]
    if accept_uniforms.shape != (bsz, n) or not accept_uniforms.is_floating_point():
        raise ValueError(f"accept_uniforms has shape {tuple(accept_uniforms.shape)} and dtype {accept_uniforms.dtype}; "
                         f"allowed: [B, N] = [{bsz}, {n}] float64")
    if exponentials.shape != (bsz, vocab) or exponentials.dtype != torch.float32:
        raise ValueError(f"exponentials has shape {tuple(exponentials.shape)} and dtype {exponentials.dtype}; "
                         f"allowed: [B, V] = [{bsz}, {vocab}] float32")
    device = target_probs.device
    _raise_if_unavailable(device)
    path = torch.empty((bsz, n), dtype=torch.int64, device=device)
    accepted = torch.empty(bsz, dtype=torch.int64, device=device)
    next_token = torch.empty(bsz, dtype=torch.int64, device=device)
    if bsz == 0:
        return TreeVerdict(path=path, accepted=accepted, next_token=next_token)
    p = target_probs.float()  # the reference reads p and q as float32
    has_q = draft_probs is not None
    q = draft_probs.float() if has_q else p  # a dummy pointer when q is one-hot
    if n == 0:  # no node: give the kernel valid (never read) pointers
        draft_tokens = parents = torch.zeros((bsz, 1), dtype=torch.int64, device=device)
        accept_uniforms = torch.zeros((bsz, 1), dtype=torch.float64, device=device)
    scratch = torch.empty((bsz, 2, vocab), dtype=torch.float32, device=device)
    bv = min(_BLOCK_V, triton.next_power_of_2(vocab)) if block_v is None else rejection._block_v(vocab, block_v)
    _tree_rejection_kernel[(bsz,)](
        draft_tokens, *draft_tokens.stride(), parents, *parents.stride(), q, *q.stride(), p, *p.stride(),
        accept_uniforms, *accept_uniforms.stride(), exponentials, *exponentials.stride(), scratch, path, accepted,
        next_token, n, vocab, HAS_Q=has_q, BLOCK_N=triton.next_power_of_2(max(n, 1)), BLOCK_V=bv,
        num_warps=_NUM_WARPS,
    )
    return TreeVerdict(path=path, accepted=accepted, next_token=next_token)
