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


def qkv_rope_cache_ref(qkv, positions, batch, cos_table, sin_table, norm_w, eps, k_cache, v_cache, hq, hkv, d):
    """qkv [N, (hq+2hkv)*d] (N = batch*T, row-major over [batch, T]); positions [N]; tables [S, d];
    norm_w [2, d] (q_norm, k_norm) or None; k_cache/v_cache [Bc, hkv, S, d] (rows >= batch untouched).
    Writes k, v at their positions and returns q [N, hq, d] (normed, rotated)."""
    n = qkv.shape[0]
    t = n // batch
    q, k, v = qkv.view(n, hq + 2 * hkv, d).split([hq, hkv, hkv], dim=1)
    if norm_w is not None:
        q, k = rmsnorm_ref(q, norm_w[0], eps), rmsnorm_ref(k, norm_w[1], eps)
    cos, sin = cos_table[positions][:, None], sin_table[positions][:, None]  # [N, 1, d]
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    idx = positions.view(batch, 1, t, 1).expand(batch, hkv, t, d)
    k_cache[:batch].scatter_(2, idx, k.reshape(batch, t, hkv, d).transpose(1, 2))
    v_cache[:batch].scatter_(2, idx, v.reshape(batch, t, hkv, d).transpose(1, 2))
    return q.contiguous()


def decode_attention_ref(q, k_cache, v_cache, positions, scale):
    """q [B, T, hq, d]; caches [Bc, hkv, S, d]; positions [B, T]: query (b, t) sees slots 0..positions[b, t]
    of row b. Returns [B, T, hq, d]."""
    b, t, hq, d = q.shape
    s = k_cache.shape[2]
    mask = torch.arange(s, device=q.device)[None, None, None, :] <= positions[:, None, :, None]
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k_cache[:b], v_cache[:b], attn_mask=mask, scale=scale,
                                       enable_gqa=True)
    return o.transpose(1, 2)


def silu_mul_ref(gate_up: torch.Tensor) -> torch.Tensor:
    g, u = gate_up.chunk(2, dim=-1)
    return F.silu(g) * u
