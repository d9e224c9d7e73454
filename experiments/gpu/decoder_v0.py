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
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

# model_type -> whether attention has per-head q/k RMSNorm (Qwen3)
SUPPORTED_ARCHS: dict[str, bool] = {"llama": False, "qwen2": False, "qwen3": True}


@dataclass
class ForwardOutput:
    logits: torch.Tensor  # [B, T', V] float32: T' = T, or the number of `logits_at` columns
    hidden: torch.Tensor | None = None  # [B, T, H] final-norm hidden states, when asked
    layer_hidden: list[torch.Tensor] = field(default_factory=list)  # [B, T, H] each, outputs of asked layers


def _rms_norm(norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
    # the same computation as transformers' LlamaRMSNorm / Qwen3RMSNorm: normalise in fp32, scale in x's dtype
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    return norm.weight * xf.to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class DecoderRunner(nn.Module):
    """Forward over new tokens at given positions for one transformers decoder-only LM.

    `num_layers` < the model's depth gives a shallower model sharing the same weights (the
    layer-skip draft); it then has its own, smaller cache.
    """

    def __init__(self, hf_model: nn.Module, num_layers: int | None = None) -> None:
        super().__init__()
        cfg = hf_model.config
        if cfg.model_type not in SUPPORTED_ARCHS:
            raise ValueError(f"DecoderRunner supports {sorted(SUPPORTED_ARCHS)}, not {cfg.model_type!r}")
        self.config = cfg
        self.hf_model = hf_model
        base = hf_model.model
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
        self.qk_norm = SUPPORTED_ARCHS[cfg.model_type]
        self.scaling = self.head_dim**-0.5
        self.k_cache: torch.Tensor | None = None  # [L, B, Hkv, S, D]
        self.v_cache: torch.Tensor | None = None

    @property
    def vocab_size(self) -> int:
        return self.lm_head.out_features

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.weight.dtype

    def allocate(self, batch_size: int, max_len: int) -> None:
        """(Re)allocate the static cache for `batch_size` rows of `max_len` slots, reusing it when it fits."""
        shape = (self.num_layers, batch_size, self.num_kv_heads, max_len, self.head_dim)
        if self.k_cache is not None and self.k_cache.shape == shape:
            return
        self.k_cache = self.v_cache = None  # free before allocating the new one
        self.k_cache = torch.zeros(shape, device=self.device, dtype=self.dtype)
        self.v_cache = torch.zeros(shape, device=self.device, dtype=self.dtype)

    @property
    def max_len(self) -> int:
        return 0 if self.k_cache is None else self.k_cache.shape[3]

    @torch.inference_mode()
    def forward(
        self,
        tokens: torch.Tensor,  # [B, T] int64
        positions: torch.Tensor,  # [B, T] int64, each row's positions (need not be equal across rows)
        attn_len: int | None = None,  # attend over slots [0, attn_len): any bound > every position
        logits_at: torch.Tensor | None = None,  # [B, T'] int64 column indices into T; None = all
        want_hidden: bool = False,
        hidden_layers: tuple[int, ...] = (),
    ) -> ForwardOutput:
        assert self.k_cache is not None, "call allocate() first"
        bsz, t = tokens.shape
        s = self.max_len if attn_len is None else attn_len
        x = self.embed(tokens)  # [B, T, H]
        cos, sin = self.rotary(x, positions)  # [B, T, D]
        cos, sin = cos[:, None], sin[:, None]  # [B, 1, T, D]
        # 1) each query at position p sees its own row's slots 0..p
        slots = torch.arange(s, device=tokens.device)
        mask = slots[None, None, None, :] <= positions[:, None, :, None]  # [B, 1, T, S]
        write_idx = positions[:, None, :, None].expand(bsz, self.num_kv_heads, t, self.head_dim)
        layer_hidden: list[torch.Tensor] = []
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            h = _rms_norm(layer.input_layernorm, x)
            q = attn.q_proj(h).view(bsz, t, self.num_heads, self.head_dim).transpose(1, 2)  # [B, Hq, T, D]
            k = attn.k_proj(h).view(bsz, t, self.num_kv_heads, self.head_dim).transpose(1, 2)  # [B, Hkv, T, D]
            v = attn.v_proj(h).view(bsz, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
            if self.qk_norm:
                q, k = _rms_norm(attn.q_norm, q), _rms_norm(attn.k_norm, k)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            # 2) write this step's keys and values at their positions, then attend over the valid prefix
            self.k_cache[i].scatter_(2, write_idx, k)
            self.v_cache[i].scatter_(2, write_idx, v)
            keys, values = self.k_cache[i, :, :, :s], self.v_cache[i, :, :, :s]
            o = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=self.scaling, enable_gqa=True)
            x = x + attn.o_proj(o.transpose(1, 2).reshape(bsz, t, -1))
            mlp = layer.mlp
            h = _rms_norm(layer.post_attention_layernorm, x)
            x = x + mlp.down_proj(mlp.act_fn(mlp.gate_proj(h)) * mlp.up_proj(h))
            if i in hidden_layers:
                layer_hidden.append(x)
        x = _rms_norm(self.norm, x)
        out_x = x if logits_at is None else x.gather(1, logits_at[..., None].expand(-1, -1, x.shape[-1]))
        logits = self.lm_head(out_x).float()
        return ForwardOutput(logits=logits, hidden=x if want_hidden else None, layer_hidden=layer_hidden)
