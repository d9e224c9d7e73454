"""Torch references of the decoder kernels in `decode.py` (also the decoder's CPU path).

Kept apart from decode.py so that importing the decoder neither imports triton nor fixes whether
the kernels are interpreted (TRITON_INTERPRET is read when decode.py is first imported).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def rmsnorm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' LlamaRMSNorm / Qwen3RMSNorm: normalise in fp32, scale in x's dtype."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def add_rmsnorm_ref(x: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(x + delta, rmsnorm(x + delta)); delta None = no add."""
    s = x if delta is None else x + delta
    return s, rmsnorm_ref(s, weight, eps)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def qkv_rope_cache_ref(qkv, positions, batch, cos_table, sin_table, norm_w, eps, k_cache, v_cache, hq, hkv, d, slots=None):
    """qkv [N, (hq+2hkv)*d] (N = batch*T, row-major over [batch, T]); positions [N]; tables [S, d];
    norm_w [2, d] (q_norm, k_norm) or None; k_cache/v_cache [Bc, hkv, S, d] (rows >= batch untouched).
    Writes k, v at their slots (default: their positions; a tree's nodes differ) and returns q [N, hq, d]
    (normed, rotated)."""
    n = qkv.shape[0]
    t = n // batch
    q, k, v = qkv.view(n, hq + 2 * hkv, d).split([hq, hkv, hkv], dim=1)
    if norm_w is not None:
        q, k = rmsnorm_ref(q, norm_w[0], eps), rmsnorm_ref(k, norm_w[1], eps)
    cos, sin = cos_table[positions][:, None], sin_table[positions][:, None]  # [N, 1, d]
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    idx = (positions if slots is None else slots).view(batch, 1, t, 1).expand(batch, hkv, t, d)
    k_cache[:batch].scatter_(2, idx, k.reshape(batch, t, hkv, d).transpose(1, 2))
    v_cache[:batch].scatter_(2, idx, v.reshape(batch, t, hkv, d).transpose(1, 2))
    return q.contiguous()


def tree_paths(tree_mask: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """tree_mask [B, T, T] bool (query t sees new token u: its ancestors and itself; column 0 is the root) and
    slots [B, T] int64 -> path [B, T, T] int64: path[b, t, e] = the slot of t's ancestor at depth e, from the root
    (e = 0) to t itself (e = depth(t)); 0 past it."""
    t = tree_mask.shape[-1]
    depth = tree_mask.sum(-1) - 1  # [B, T]
    at_depth = depth[:, :, None] == torch.arange(t, device=slots.device)  # [B, U, E]
    picks = tree_mask[:, :, :, None] & at_depth[:, None, :, :]  # [B, T, U, E]
    return (picks * slots[:, None, :, None]).sum(2).contiguous()


def tree_slot_mask(path: torch.Tensor, positions: torch.Tensor, s: int) -> torch.Tensor:
    """[B, T, S] bool: which of slots 0..S-1 the token (b, t) at positions[b, t] sees in a tree, its ancestors' slots
    given by path [B, T, E] (see `tree_paths`; the root at depth 0 sits in the slot of its own position): the slots
    below the root's position, then path[b, t, 0..depth]."""
    b, t, e = path.shape
    root = path[:, :, :1]  # [B, T, 1] the root's slot == its position
    depth = positions[:, :, None] - root  # [B, T, 1]
    on_path = torch.arange(e, device=path.device)[None, None, :] <= depth  # [B, T, E]
    idx = torch.where(on_path, path, root)  # past a token's depth: the root again
    seen = torch.zeros((b, t, s), dtype=torch.bool, device=path.device).scatter_(2, idx, True)
    return (torch.arange(s, device=path.device)[None, None, :] < root) | seen


def decode_attention_ref(q, k_cache, v_cache, positions, scale, path=None):
    """q [B, T, hq, d]; caches [Bc, hkv, S, d]; positions [B, T]: query (b, t) sees slots 0..positions[b, t]
    of row b, or with path [B, T, E] (a tree) the slots `tree_slot_mask` gives. Returns [B, T, hq, d]."""
    b, t, hq, d = q.shape
    s = k_cache.shape[2]
    if path is None:
        mask = torch.arange(s, device=q.device)[None, None, None, :] <= positions[:, None, :, None]
    else:
        mask = tree_slot_mask(path, positions, s)[:, None]
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k_cache[:b], v_cache[:b], attn_mask=mask, scale=scale,
                                       enable_gqa=True)
    return o.transpose(1, 2)


def silu_mul_ref(gate_up: torch.Tensor) -> torch.Tensor:
    g, u = gate_up.chunk(2, dim=-1)
    return F.silu(g) * u
