"""EAGLE (arXiv 2401.15077; EAGLE-3 fusion, arXiv 2503.01840): a one-layer head drafts from the target's features.

The head reads, at position i, the pair (target feature f_i, token x_{i+1}) and predicts token x_{i+2}:
fc([embed(x_{i+1}) ; f_i]) (2H -> H), one Llama-style decoder layer (RMSNorm, attention with RoPE,
SwiGLU MLP), then the target's own final norm and LM head (frozen, shared, like its embedding).
f_i is the target's final-norm hidden state at i, or with `fuse_layers: [low, mid, high]` a
learned fusion fc (3H -> H) of those target layers' outputs (EAGLE-3).

Per step as a chain (the loop is the proposer base's, with pass_hidden_states_to_model; `strategy.tree`
static and dynamic, EAGLE-1's and EAGLE-2's trees, feed a frontier of nodes per depth into scratch
slots, each seeing its ancestors' entries: see trees.py):
the target processed committed positions up to L-2 (the pending token at L-1 it has not seen), so
the head first catches up on every pair (f_i, x_{i+1}) with i <= L-2 it has not seen (the prompt's
pairs at the start of a batch), using the TRUE features of the target's forwards, and its output at
L-2 drafts d_1. Then it feeds (its own output feature, d_j) at L-2+j for j = 1..K-1 to draft
d_{j+1}: K head forwards per step. Its KV cache is per row with slot == position, so rejected drafts
are rolled back by overwriting (the catch-up of the next step rewrites those slots with true
features, as it does the accepted ones, which were written from the head's own). At T > 0 it samples
from its q and returns it.

Checkpoints: a directory (or its model.safetensors) holding `model.safetensors` and `config.json`
({"kind": "eagle", ...}); train one with `python -m specbench.train strategy=eagle target=<preset>`.
Published EAGLE-1/2, EAGLE-3 and speculators (eagle, eagle3) checkpoints load too, by directory or hub
id: formats.py maps them onto the EagleConfig switches below (fc_bias, input_layernorm, final_norm,
eagle3_layer with its reduced vocabulary d2t, own_embedding); `python -m specbench.export` writes ours as
speculators.
A path that does not exist is an error naming it (never another directory's files); the config and
the weights' header are read, and checked against the target's known sizes, before any model loads.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from specbench.errors import ConfigError
from specbench.kernels.decode_ref import tree_slot_mask
from specbench.models.decoder import fuse_linears, linear, masked_attention, pack_linears
from specbench.strategies import formats
from specbench.strategies.base import BuildContext, DraftOutput, Proposer
from specbench.strategies.checkpoints import (AUTO, RANDOM, HeadCheckpoint, checkpoint_files, load_head,
                                              raise_if_head_does_not_fit, random_head, read_checkpoint_config,
                                              resolve_checkpoint, save_head)


@dataclass
class EagleConfig:
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    vocab_size: int
    fuse_layers: list[int] | None = None  # target layers fused EAGLE-3 style; None = the final-norm feature
    target: str = ""  # label of the target it was trained for
    kind: str = "eagle"
    # switches for published layouts (formats.py converts them; the defaults are specbench's own head):
    fc_bias: bool = True  # fc([embed; feature]) has a bias (EAGLE-1's `bias` config key; speculators' fusion_bias)
    input_layernorm: bool = True  # False: the layer's attention reads fc's output unnormalised (EAGLE-1's first layer)
    final_norm: str = "target"  # target: the target's final norm, output fed back normalised (ours); none: no norm
    #                             (EAGLE-1); own: the head's own norm before its LM head, fed back before it (EAGLE-3)
    eagle3_layer: bool = False  # EAGLE-3's layer: no fc over [embed; f]; attention reads [norm(embed); norm(g)], residual g
    norm_before_residual: bool = False  # EAGLE-3 variant (speculators): the residual is hidden_norm(g), not g
    draft_vocab_size: int | None = None  # own LM head over a draft vocabulary (EAGLE-3, d2t); None: the target's
    own_embedding: bool = False  # the checkpoint carries its own embed_tokens (else the target's is shared)
    rope_theta: float | None = None  # the checkpoint's RoPE base when it states one (checked against the target's)
    format: str = "specbench"  # the layout it was read from (formats.FORMATS); specbench's own when trained here
    num_layers: int = 1  # decoder layers: the first reads fc's output (or EAGLE-3's pair), the rest are Llama's own
    # with draft_vocab_size: "own" = its own LM head, trained and saved (EAGLE-3's); "target" = the target's LM head's
    # rows at the draft ids, frozen and not saved (a checkpoint smaller by draft_vocab_size x hidden_size weights)
    draft_lm_head: str = "own"

    @classmethod
    def for_target(cls, hf_config: Any, fuse_layers: list[int] | None = None, target: str = "") -> EagleConfig:
        return cls(hidden_size=hf_config.hidden_size, num_heads=hf_config.num_attention_heads,
                   num_kv_heads=hf_config.num_key_value_heads,
                   head_dim=getattr(hf_config, "head_dim", None) or hf_config.hidden_size // hf_config.num_attention_heads,
                   intermediate_size=hf_config.intermediate_size, rms_norm_eps=hf_config.rms_norm_eps,
                   vocab_size=hf_config.vocab_size, fuse_layers=list(fuse_layers) if fuse_layers else None, target=target)


DRAFT_LM_HEADS = ("own", "target")  # EagleConfig.draft_lm_head's values


def is_layer_count(n: Any) -> bool:
    """EagleConfig.num_layers's values: an integer >= 1 (not a bool)."""
    return isinstance(n, int) and not isinstance(n, bool) and n >= 1


def raise_if_layout_unknown(cfg: EagleConfig, where: str) -> None:
    """A head's num_layers and draft_lm_head, checked where they are read (a checkpoint's config.json, before the
    target loads) and where a head is built."""
    if not is_layer_count(cfg.num_layers):
        raise ConfigError(f"{where}: num_layers={cfg.num_layers!r}; allowed: an integer >= 1")
    if cfg.draft_lm_head not in DRAFT_LM_HEADS:
        raise ConfigError(f"{where}: draft_lm_head={cfg.draft_lm_head!r}; allowed: 'own' or 'target'")


def _rms_norm(norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
    # transformers' LlamaRMSNorm: normalise in fp32, scale in x's dtype
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
    return norm.weight * xf.to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class _RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _rms_norm(self, x)


class _Layer(nn.Module):
    """A deeper head's further decoder layer (num_layers > 1): Llama's (RMSNorm, attention with RoPE, SwiGLU MLP), with
    its own cache. The head's first layer has the same attributes on the head itself (its checkpoint names)."""

    def __init__(self, cfg: EagleConfig) -> None:
        super().__init__()
        self.input_layernorm = _RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        _attention_and_mlp(self, cfg, cfg.hidden_size)


def _attention_and_mlp(layer: nn.Module, cfg: EagleConfig, a: int) -> None:
    """A decoder layer's projections, norm and cache on `layer` (the head for its first layer, or a _Layer); its
    attention reads `a` features."""
    h, d = cfg.hidden_size, cfg.head_dim
    layer.q_proj = nn.Linear(a, cfg.num_heads * d, bias=False)
    layer.k_proj = nn.Linear(a, cfg.num_kv_heads * d, bias=False)
    layer.v_proj = nn.Linear(a, cfg.num_kv_heads * d, bias=False)
    layer.o_proj = nn.Linear(cfg.num_heads * d, h, bias=False)
    layer.post_attention_layernorm = _RMSNorm(h, cfg.rms_norm_eps)
    layer.gate_proj = nn.Linear(h, cfg.intermediate_size, bias=False)
    layer.up_proj = nn.Linear(h, cfg.intermediate_size, bias=False)
    layer.down_proj = nn.Linear(cfg.intermediate_size, h, bias=False)
    layer.k_cache = None  # [B, Hkv, S, D]
    layer.v_cache = None
    # inference only: q/k/v and gate/up as one product each (EagleHead.prepare_inference); a tuple keeps them out of
    # parameters() and state_dict(), so training and checkpoints see the separate projections
    layer.fused = ()


class EagleHead(nn.Module):
    """The draft head. Its own weights are fc (and fuse), its decoder layers (one unless num_layers says more);
    embedding, final norm, rotary embedding and LM head are the target's, held by reference (not in its
    state_dict)."""

    def __init__(self, cfg: EagleConfig, target_model: nn.Module) -> None:
        super().__init__()
        raise_if_layout_unknown(cfg, "eagle config")
        self.cfg = cfg
        h = cfg.hidden_size
        base = target_model.model
        # the target's modules, frozen and shared: a tuple keeps them out of parameters() and state_dict()
        self.shared = (base.embed_tokens, base.norm, base.rotary_emb, target_model.get_output_embeddings())
        self.fuse = nn.Linear(len(cfg.fuse_layers) * h, h, bias=False) if cfg.fuse_layers else None
        self.embed_tokens = nn.Embedding(cfg.vocab_size, h) if cfg.own_embedding else None
        self.fc = None if cfg.eagle3_layer else nn.Linear(2 * h, h, bias=cfg.fc_bias)
        self.input_layernorm = _RMSNorm(h, cfg.rms_norm_eps) if cfg.input_layernorm else None
        self.hidden_norm = _RMSNorm(h, cfg.rms_norm_eps) if cfg.eagle3_layer else None
        _attention_and_mlp(self, cfg, 2 * h if cfg.eagle3_layer else h)  # EAGLE-3's attention reads [embedding; feature]
        self.layers = nn.ModuleList(_Layer(cfg) for _ in range(cfg.num_layers - 1))  # no state_dict keys for one layer
        self.norm = _RMSNorm(h, cfg.rms_norm_eps) if cfg.final_norm == "own" else None
        own_rows = bool(cfg.draft_vocab_size) and cfg.draft_lm_head == "own"
        self.draft_lm_head = nn.Linear(h, cfg.draft_vocab_size, bias=False) if own_rows else None
        if cfg.draft_vocab_size and cfg.draft_vocab_size != cfg.vocab_size:
            # EAGLE-3's reduced vocabulary: draft id i is target id i + d2t[i]
            self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long))
        else:
            self.d2t = None
        # inference only (EagleProposer): the rotary tables of the cache's slots (allocate), and the draft
        # vocabulary's target ids (prepare_inference)
        self.rope_cos: torch.Tensor | None = None  # [S, D] in the head's dtype, the target's rotary's own values
        self.rope_sin: torch.Tensor | None = None
        self.vocab_ids: torch.Tensor | None = None  # [Vd] target id of each draft id (d2t applied)
        self.rows: torch.Tensor | None = None  # draft_lm_head=target: the target's LM head rows at them (prepare_inference)

    @property
    def lm_head(self) -> nn.Module:
        return self.draft_lm_head if self.draft_lm_head is not None else self.shared[3]

    @property
    def on_target_rows(self) -> bool:
        """draft_lm_head=target with a reduced vocabulary: the draft logits use the target's LM head rows at the
        draft ids (without d2t the target's whole LM head is the head's own lm_head already)."""
        return self.draft_lm_head is None and self.d2t is not None

    @property
    def dtype(self) -> torch.dtype:
        return self.q_proj.weight.dtype

    def logits(self, out: torch.Tensor) -> torch.Tensor:
        """[..., H] output features (forward's) -> [..., V] logits over the target's vocabulary; a reduced draft
        vocabulary's logits land at their target ids (i + d2t[i]), every other token at -inf (q = 0 there)."""
        small = DraftOutput(self.draft_logits(out), vocab_ids=self.target_ids(), vocab_size=self.cfg.vocab_size)
        return small.full().logits

    def draft_output(self, out: torch.Tensor) -> DraftOutput:
        """[B, N, H] output features -> what a draft forward gives the base: fp32 logits over the draft vocabulary,
        each column's target id, and the features (fed back while drafting)."""
        return DraftOutput(logits=self.draft_logits(out).float(), hidden=out, vocab_ids=self.target_ids(),
                           vocab_size=self.cfg.vocab_size)

    def draft_logits(self, out: torch.Tensor) -> torch.Tensor:
        """[..., H] output features -> [..., V_draft] logits over the draft vocabulary (draft id i is target id
        i + d2t[i]; the target's whole vocabulary without d2t)."""
        if self.norm is not None:
            out = self.norm(out)
        head = self.lm_head  # the target's own (held by reference) takes the target's CPU products
        if head is self.draft_lm_head:
            return head(out)
        if self.on_target_rows:
            return linear(out, self.target_rows(), None)
        return linear(out, head.weight, head.bias)

    def target_rows(self) -> torch.Tensor:
        """[V_draft, H] the target's LM head rows of the draft vocabulary (draft_lm_head=target): gathered once by
        prepare_inference, on each call before it (training, where d2t is set after the head is built)."""
        if self.rows is not None:
            return self.rows
        return self.shared[3].weight[self.target_ids()]

    def target_ids(self) -> torch.Tensor | None:
        """[V_draft] the target id of each draft column (i + d2t[i]); None without a reduced vocabulary. Computed
        once by prepare_inference, on each call before it (training, conversions)."""
        if self.d2t is None or self.vocab_ids is not None:
            return self.vocab_ids
        return torch.arange(self.d2t.shape[0], device=self.d2t.device) + self.d2t

    def decoder_layers(self) -> tuple[nn.Module, ...]:
        """The head's decoder layers in order: the head itself holds the first one's weights and cache."""
        return (self, *self.layers)

    def prepare_inference(self) -> nn.ModuleList:
        """For drafting after the weights are loaded (never trained after): each layer's q/k/v and gate/up as one
        product each (three products fewer per pass, and one rotary over q and k together), and the draft vocabulary's
        target ids computed once. The separate projections' weights become views of the fused ones (`fuse_linears`:
        no second copy). Returns each layer's fused linears, also kept in its `fused` (a tuple: not submodules, so
        parameters() and state_dict() still see the separate projections); `unfused_linears` lists what inference no
        longer runs."""
        def fused(*parts: nn.Linear) -> nn.Linear:
            weight, _ = fuse_linears(list(parts))
            lin = nn.Linear(weight.shape[1], weight.shape[0], bias=False, device="meta")
            lin.weight = nn.Parameter(weight, requires_grad=False)
            return lin

        per_layer = nn.ModuleList()
        for layer in self.decoder_layers():
            modules = nn.ModuleDict(dict(qkv=fused(layer.q_proj, layer.k_proj, layer.v_proj),
                                         gate_up=fused(layer.gate_proj, layer.up_proj)))
            layer.fused = (modules,)
            per_layer.append(modules)
        self.vocab_ids = self.target_ids()
        if self.on_target_rows:
            self.rows = self.target_rows().detach().contiguous()
        return per_layer

    def unfused_linears(self) -> tuple[nn.Linear, ...]:
        """The projections a prepared head's inference runs through `fused` instead (the CPU need not pack them)."""
        return tuple(lin for layer in self.decoder_layers() if layer.fused
                     for lin in (layer.q_proj, layer.k_proj, layer.v_proj, layer.gate_proj, layer.up_proj))

    def features(self, hidden: torch.Tensor | None, layer_hidden: list[torch.Tensor] | None) -> torch.Tensor:
        """The head's input feature from one target forward: [B, T, H] final-norm hidden, or the fused layers."""
        if self.fuse is None:
            assert hidden is not None
            return hidden
        assert layer_hidden, "fuse_layers needs the target's layer outputs (hidden_layers())"
        return self.fuse(torch.cat(layer_hidden, dim=-1))

    @contextmanager
    def narrow(self, lo: int, hi: int) -> Iterator[EagleHead]:
        """Within the block the caches hold rows lo..hi-1 only (views), as DecoderRunner.narrow."""
        layers = self.decoder_layers()
        saved = [(layer.k_cache, layer.v_cache) for layer in layers]
        assert saved[0][0] is not None, "call allocate() first"
        for layer, (k, v) in zip(layers, saved):
            layer.k_cache, layer.v_cache = k[lo:hi], v[lo:hi]
        try:
            yield self
        finally:
            for layer, (k, v) in zip(layers, saved):
                layer.k_cache, layer.v_cache = k, v

    def allocate(self, batch_size: int, max_len: int, device: torch.device, dtype: torch.dtype) -> None:
        shape = (batch_size, self.cfg.num_kv_heads, max_len, self.cfg.head_dim)
        if self.k_cache is None or self.k_cache.shape != shape or self.k_cache.dtype != dtype:
            for layer in self.decoder_layers():
                layer.k_cache = torch.zeros(shape, device=device, dtype=dtype)
                layer.v_cache = torch.zeros(shape, device=device, dtype=dtype)
            with torch.inference_mode():  # the rotary at every slot: transformers' values, looked up per pass
                cos, sin = self.shared[2](self.k_cache.new_empty(1), torch.arange(max_len, device=device)[None])
            self.rope_cos, self.rope_sin = cos[0].to(dtype).contiguous(), sin[0].to(dtype).contiguous()  # [S, D]

    def forward(
        self,
        feature: torch.Tensor,  # [B, T, H] f_i (true, fused, or the head's own previous output)
        tokens: torch.Tensor,  # [B, T] int64 x_{i+1}
        positions: torch.Tensor,  # [B, T] int64 i
        use_cache: bool = False,  # write keys/values at `positions` into the per-row cache, attend over it
        attn_len: int | None = None,  # with use_cache: a bound > every position
        # training-time test: earlier unrolled steps' (return_kv's per-layer keys and values, their [B, 1, T, T] mask)
        extra_kv: list[tuple[list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor]] | None = None,
        kv_mask: torch.Tensor | None = None,  # [B, 1, T, S] without cache: which keys each query sees
        return_kv: bool = False,
        slots: torch.Tensor | None = None,  # with use_cache, a tree: [B, T] slots to write (default: the positions)
        tree_path: torch.Tensor | None = None,  # [B, T, E] the slots of each one's ancestors (decode_ref.tree_paths)
    ) -> torch.Tensor | tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """Output feature [B, T, H], fed back at the next position: logits(out) gives token x_{i+2} (with the default
        final_norm=target, out is after the target's final norm and lm_head(out) is the same). With return_kv also
        each layer's keys and values of these positions ([B, Hkv, T, D] each)."""
        embed, norm, rotary, _ = self.shared
        bsz, t = tokens.shape
        nh, nkv, d = self.cfg.num_heads, self.cfg.num_kv_heads, self.cfg.head_dim
        e = (embed if self.embed_tokens is None else self.embed_tokens)(tokens).to(feature.dtype)  # [B, T, H]
        if self.hidden_norm is not None:  # EAGLE-3: attention reads [norm(e); norm(g)], the residual stream is g
            g = self.hidden_norm(feature)
            h = torch.cat([self.input_layernorm(e), g], dim=-1)  # [B, T, 2H]
            x = g if self.cfg.norm_before_residual else feature
        else:
            x = self.fc(torch.cat([e, feature], dim=-1))  # [B, T, H]
            h = x if self.input_layernorm is None else self.input_layernorm(x)
        if use_cache and self.rope_cos is not None and self.rope_cos.dtype == x.dtype:  # slot == position < S
            cos, sin = self.rope_cos[positions][:, None], self.rope_sin[positions][:, None]  # [B, 1, T, D]
        else:
            cos, sin = rotary(x, positions)
            cos, sin = cos[:, None].to(x.dtype), sin[:, None].to(x.dtype)  # [B, 1, T, D]
        if use_cache:  # slot == position: each query at p sees slots 0..p of its row (a tree: its ancestors' too)
            assert self.k_cache is not None, "call allocate() first"
            s = self.k_cache.shape[2] if attn_len is None else attn_len
            if tree_path is None:
                mask = torch.arange(s, device=x.device)[None, None, None, :] <= positions[:, None, :, None]
            else:  # a tree's frontier: the slots below its root's, then its ancestors'
                mask = tree_slot_mask(tree_path, positions, s)[:, None]
        else:
            mask = positions[:, None, None, :] <= positions[:, None, :, None] if kv_mask is None else kv_mask
            if extra_kv:  # earlier unrolled steps' keys (EAGLE-3 training-time test), with their own masks
                mask = torch.cat([e[1] for e in extra_kv] + [mask], dim=3)
        kvs = []
        for n, layer in enumerate(self.decoder_layers()):
            if n:
                h = layer.input_layernorm(x)
            fused = layer.fused[0] if layer.fused and not torch.is_grad_enabled() else None
            if fused is not None:  # one product, and one rotary over q and k: [B, Hq + Hkv, T, D]
                qkv = fused["qkv"](h).view(bsz, t, nh + 2 * nkv, d).transpose(1, 2)
                qk = qkv[:, : nh + nkv]
                qk = qk * cos + _rotate_half(qk) * sin
                q, k, v = qk[:, :nh], qk[:, nh:], qkv[:, nh + nkv :]
            else:
                q = layer.q_proj(h).view(bsz, t, nh, d).transpose(1, 2)  # [B, Hq, T, D]
                k = layer.k_proj(h).view(bsz, t, nkv, d).transpose(1, 2)  # [B, Hkv, T, D]
                v = layer.v_proj(h).view(bsz, t, nkv, d).transpose(1, 2)
                q = q * cos + _rotate_half(q) * sin
                k = k * cos + _rotate_half(k) * sin
            if use_cache:  # overwrite this call's slots, then attend over the cache
                idx = (positions if slots is None else slots)[:, None, :, None].expand(bsz, nkv, t, d)
                layer.k_cache.scatter_(2, idx, k)
                layer.v_cache.scatter_(2, idx, v)
                keys, values = layer.k_cache[:, :, :s], layer.v_cache[:, :, :s]
            elif extra_kv:
                keys = torch.cat([e[0][n][0] for e in extra_kv] + [k], dim=2)
                values = torch.cat([e[0][n][1] for e in extra_kv] + [v], dim=2)
            else:
                keys, values = k, v
            o = masked_attention(q, keys, values, mask, d**-0.5)
            x = x + layer.o_proj(o.transpose(1, 2).reshape(bsz, t, nh * d))
            h = layer.post_attention_layernorm(x)
            if fused is not None:
                gate, up = fused["gate_up"](h).chunk(2, dim=-1)
            else:
                gate, up = layer.gate_proj(h), layer.up_proj(h)
            x = x + layer.down_proj(F.silu(gate) * up)
            kvs.append((k, v))
        out = _rms_norm(norm, x) if self.cfg.final_norm == "target" else x
        return (out, kvs) if return_kv else out

    # -- checkpoints: config.json + model.safetensors ----------------------------------------------

    def save(self, directory: str | Path) -> None:
        save_head(self, asdict(self.cfg), directory)


def read_eagle_config(path: str | Path | None, target_layers: int | None = None) -> tuple[Path, EagleConfig]:
    """(weights, EagleConfig) of a checkpoint in our format or a published one (formats.py); target_layers, when
    known, completes EAGLE-3's default fused layers."""
    weights, config = checkpoint_files(path, "eagle")
    published = formats.detect(weights, config, str(path))
    if published is not None:
        return weights, formats.eagle_config(published, target_layers)
    cfg = read_checkpoint_config(config, str(path), "eagle", EagleConfig)[1]
    raise_if_layout_unknown(cfg, f"strategy.checkpoint={str(path)!r} ({config})")
    return weights, cfg


def raise_if_rope_differs(cfg: EagleConfig, tc: Any, path: str | Path, target_label: str) -> None:
    """The head uses the target's rotary embedding: a checkpoint stating another RoPE base is refused."""
    theta = getattr(tc, "rope_theta", None) or (getattr(tc, "rope_parameters", None) or {}).get("rope_theta")
    if cfg.rope_theta is not None and theta is not None and abs(float(theta) - cfg.rope_theta) > 1e-6 * float(theta):
        raise ConfigError(f"eagle checkpoint {str(path)!r} uses RoPE base {cfg.rope_theta}; target {target_label!r} has "
                          f"{theta} (the head shares the target's rotary embedding); allowed: a checkpoint for this target")


def raise_if_fuse_layers_out_of_range(cfg: Any, num_layers: int, target_label: str) -> None:
    if cfg.fuse_layers and max(cfg.fuse_layers) >= num_layers:
        raise ConfigError(f"eagle checkpoint fuses target layers {cfg.fuse_layers}; target {target_label!r} has "
                          f"{num_layers} layers")


def load_eagle_head(path: str | Path, target_model: nn.Module, target_label: str = "") -> EagleHead:
    """An EagleHead from a checkpoint, checked against the target it will read, on its device and dtype."""
    tc = target_model.config
    weights, cfg = read_eagle_config(path, tc.num_hidden_layers)
    raise_if_head_does_not_fit("eagle", path, cfg, tc, target_label)
    raise_if_fuse_layers_out_of_range(cfg, tc.num_hidden_layers, target_label)
    raise_if_rope_differs(cfg, tc, path, target_label)
    published = formats.detect(weights, weights.parent / "config.json", str(path))
    state = None if published is None else formats.eagle_state(published, cfg)
    return load_head(EagleHead(cfg, target_model), weights, path, "eagle", target_model, state)


def raise_if_fuse_layers_differ(fuse_layers: list[int] | None, trained: list[int] | None, checkpoint: Any) -> None:
    if fuse_layers is not None and list(fuse_layers) != (trained or []):
        raise ConfigError(f"strategy.fuse_layers={list(fuse_layers)} but checkpoint {checkpoint!r} was trained with "
                          f"fuse_layers={trained}; leave strategy.fuse_layers=null to use the checkpoint's")


class EagleProposer(HeadCheckpoint, Proposer):
    head_kind = "eagle"
    pass_hidden_states_to_model = True
    owns_kv_cache = True
    samples = True

    def __init__(self, ctx: BuildContext, k: int, name: str = "eagle", checkpoint: str | None = AUTO,
                 fuse_layers: list[int] | None = None, cpu_half_weights: bool = True, cpu_int8_weights: bool = True,
                 **options: Any) -> None:
        super().__init__(ctx, k, name, **options)
        target = ctx.target.model
        checkpoint = resolve_checkpoint(checkpoint, "eagle", ctx.target.spec)
        if checkpoint == RANDOM:
            raise_if_fuse_layers_out_of_range(EagleConfig.for_target(target.config, fuse_layers),
                                              target.config.num_hidden_layers, ctx.target.spec.label)
            self.head = random_head(lambda: EagleHead(EagleConfig.for_target(target.config, fuse_layers,
                                                                             ctx.target.spec.label), target), target)
        else:
            self.head = load_eagle_head(checkpoint, target, ctx.target.spec.label)
            raise_if_fuse_layers_differ(fuse_layers, self.head.cfg.fuse_layers, checkpoint)
        fused = self.head.prepare_inference()
        if self.device.type == "cpu":  # the decoder's CPU products (bf16 on oneDNN: weights packed once)
            packing = dict(half_weights=cpu_half_weights, int8=cpu_int8_weights)
            pack_linears(self.head, skip=self.head.unfused_linears(), **packing)
            pack_linears(fused, **packing)

    @classmethod
    def validate(cls, cfg: Mapping[str, Any]) -> None:
        fl = cfg.get("fuse_layers")
        if fl is not None and (not isinstance(fl, (list, tuple)) or not all(isinstance(i, int) and i >= 0 for i in fl)):
            raise ConfigError(f"strategy.fuse_layers={fl!r}; allowed: null or a list of target layer indices, e.g. [2, 15, 27]")
        for flag in ("cpu_half_weights", "cpu_int8_weights"):
            if not isinstance(cfg.get(flag, True), bool):
                raise ConfigError(f"strategy.{flag}={cfg.get(flag)!r}; allowed: true or false")
        super().validate(cfg)

    @classmethod
    def read_head_config(cls, path: str | Path | None, target_layers: int | None = None) -> tuple[Path, EagleConfig]:
        return read_eagle_config(path, target_layers)

    @classmethod
    def check_head(cls, cfg: Mapping[str, Any], head_cfg: EagleConfig, given: str) -> None:
        if head_cfg.eagle3_layer and head_cfg.fuse_layers is None:  # EAGLE-3's layers follow the target's depth
            return
        raise_if_fuse_layers_differ(cfg.get("fuse_layers"), head_cfg.fuse_layers, given)

    @classmethod
    def check_head_for_target(cls, cfg: Mapping[str, Any], head_cfg: EagleConfig | None, target: Any) -> None:
        layers = (target.known or {}).get("num_hidden_layers")
        fuse = head_cfg if head_cfg is not None else SimpleNamespace(fuse_layers=cfg.get("fuse_layers"))
        if head_cfg is not None and head_cfg.eagle3_layer and head_cfg.fuse_layers:
            raise_if_fuse_layers_differ(cfg.get("fuse_layers"), head_cfg.fuse_layers, target.label)
        if layers and fuse.fuse_layers:
            raise_if_fuse_layers_out_of_range(fuse, layers, target.label)

    def hidden_layers(self) -> tuple[int, ...]:
        return tuple(self.head.cfg.fuse_layers or ())

    def target_features(self, hidden: torch.Tensor | None, layers: list[torch.Tensor] | None) -> torch.Tensor:
        return self.head.features(hidden, layers).to(self.head.dtype)

    def allocate(self, batch_size: int, max_len: int) -> None:
        self.head.allocate(batch_size, max_len, self.device, self.head.dtype)

    def draft_cache(self) -> EagleHead:
        return self.head

    def draft_forward(self, tokens: torch.Tensor, positions: torch.Tensor, hidden: torch.Tensor | None,
                      attn_len: int, slots: torch.Tensor | None = None,
                      tree_path: torch.Tensor | None = None) -> DraftOutput:
        # token x_p with the feature before it (true f_{p-1} from the target, or the head's own output while
        # drafting) is the pair the head holds at slot p-1 (a tree's scratch slots shift the same way)
        out = self.head(hidden, tokens, positions - 1, use_cache=True, attn_len=attn_len,
                        slots=None if slots is None else slots - 1, tree_path=None if tree_path is None else tree_path - 1)
        out = out if tree_path is not None else out[:, -1:]  # [B, T or 1, H]
        return self.head.draft_output(out)
