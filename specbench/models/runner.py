"""Runners: a forward over [B, T] new tokens at per-row positions, over a per-row static cache.

`make_runner` picks our own decoder (specbench.models.decoder) for the Llama / Qwen2 / Qwen3 family
and falls back to `TransformersRunner` for any other causal LM. Every runner, these two, the
CUDA-graphed decoder (models.cuda_graphs), the VLM runner (models.multimodal) and the draft's
guarded runner (models.draft_runner), has the one interface the engine and the strategies call:
`Runner`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol, runtime_checkable

import torch
from torch import nn

from specbench.errors import ConfigError, unknown
from specbench.kernels.decode_ref import tree_paths, tree_slot_mask
from specbench.models.decoder import SUPPORTED_ARCHS, DecoderRunner, ForwardOutput

BACKENDS = ("auto", "native", "transformers")


@runtime_checkable
class Runner(Protocol):
    """A forward over [B, T] new tokens at per-row positions, over a per-row static cache (slot == position).

    A multimodal runner also has `begin_batch(prompts, mm_inputs)`, which the engine calls when present. A runner
    with `narrow(lo, hi)` (a context manager: rows lo..hi-1 seen as the whole batch) can take continuous batching.
    """

    @property
    def vocab_size(self) -> int: ...

    @property
    def device(self) -> torch.device: ...

    @property
    def max_len(self) -> int:
        """Cache slots per row (0 before the first allocate)."""
        ...

    def allocate(self, batch_size: int, max_len: int) -> None:
        """Size the cache for `batch_size` rows of `max_len` slots (reused when it already fits)."""

    def __call__(
        self,
        tokens: torch.Tensor,  # [B, T] int64
        positions: torch.Tensor,  # [B, T] int64, each row's own positions
        attn_len: int | None = None,  # attend over slots [0, attn_len): any bound > every position
        logits_at: torch.Tensor | None = None,  # [B, T'] columns of T to return logits for; None = all
        want_hidden: bool = False,  # return the final-norm hidden states [B, T, H]
        hidden_layers: tuple[int, ...] = (),  # and these layers' outputs [B, T, H] each
    ) -> ForwardOutput: ...


class RunnerWrapper:
    """A Runner around another (`self.runner`): the interface delegated, spelled out as class attributes because
    isinstance(_, Runner) looks them up statically on Python >= 3.12; anything else (config, k_cache,
    begin_batch when the wrapped runner has it, ...) falls through to the wrapped runner."""

    runner: Runner

    def __getattr__(self, name: str) -> Any:
        if name == "runner":  # not set yet (unpickling, a failed __init__): no recursion
            raise AttributeError(name)
        return getattr(self.runner, name)

    @property
    def vocab_size(self) -> int:
        return self.runner.vocab_size

    @property
    def device(self) -> torch.device:
        return self.runner.device

    @property
    def max_len(self) -> int:
        return self.runner.max_len

    def allocate(self, batch_size: int, max_len: int) -> None:
        self.runner.allocate(batch_size, max_len)


class TransformersRunner(nn.Module):
    """Fallback for architectures our decoder does not cover: transformers' own forward, no KV cache of ours.

    It keeps each row's tokens by slot in `history` and recomputes the whole prefix on every call. A chain
    (slot == position, no tree arguments) runs transformers' forward as it is: causal attention makes slot p
    depend only on slots 0..p, so stale slots above a row's length never matter. Exact, and slow: O(length)
    work per forward. Use it for correctness on new architectures, not for speed figures.

    One row at a time (batch 1, a chain: what engine.batch_size=1 and a cross-tokenizer draft's catch-ups feed), it
    keeps transformers' own KV cache instead (a DynamicCache of full-attention layers: a sliding-window layer's mask
    is the model's own, over the full cache): a call at positions p0..p0+T-1 cuts the cache back to p0 (or to what it
    holds, feeding the history from there) and feeds the new tokens, O(T) work; logits come out for them only.

    Trees (`slots`, `tree_mask` / `tree_path`, `move_kv`: DecoderRunner's meanings). Since every call
    recomputes every slot, each slot keeps what it was fed with: its RoPE position (`slot_pos`, fed as
    position_ids) and the slots it sees (`sees`, a [B, S, S] bool table made at the first tree call): a
    chain token at position p sees slots 0..p, a tree node what `tree_slot_mask` gives (the slots below its
    root, then its ancestors' slots). The forward then gets transformers' custom 4-D mask over the history:
    an additive float mask [B, 1, S, S] (0 = seen, dtype min = hidden), which transformers' masking_utils
    returns as-is (neither combined with a causal mask nor sliced; transformers 5.17 and 5.24), and which
    eager and SDPA attention both add to the scores. A model with sliding-window layers gets a mask per
    layer type (config.layer_types), the window applied over the slots' positions. Costs B * S^2 bytes
    for the table and a dense mask per forward; it needs eager or SDPA attention and attention-only layers.
    """

    def __init__(self, hf_model: nn.Module, num_layers: int | None = None) -> None:
        super().__init__()
        if num_layers is not None:
            raise ValueError("TransformersRunner cannot run a truncated model (num_layers)")
        self.hf_model = hf_model
        self.config = hf_model.config
        self.history: torch.Tensor | None = None  # [B, S] int64 tokens by slot
        self.slot_pos: torch.Tensor | None = None  # [B, S] int64 RoPE position by slot
        self.sees: torch.Tensor | None = None  # [B, S, S] bool: slot q sees slot k; None = causal (a chain only)
        self.cache: Any = None  # batch 1 chains: transformers' DynamicCache over slots [0, cached)
        self.cached = 0

    @property
    def vocab_size(self) -> int:
        return int(self.hf_model.get_output_embeddings().weight.shape[0])

    @property
    def device(self) -> torch.device:
        return next(self.hf_model.parameters()).device

    @property
    def max_len(self) -> int:
        return 0 if self.history is None else self.history.shape[1]

    def allocate(self, batch_size: int, max_len: int) -> None:
        self.history = torch.zeros((batch_size, max_len), dtype=torch.long, device=self.device)
        self.slot_pos = torch.arange(max_len, device=self.device).repeat(batch_size, 1)
        self.sees = None
        self.cache, self.cached = None, 0

    @contextmanager
    def narrow(self, lo: int, hi: int) -> Iterator[TransformersRunner]:
        """Within the block, rows lo..hi-1 are this runner's rows 0..hi-lo-1 (views of the history, its positions and
        its tree table): continuous batching prefills a request admitted into a slot this way. A batch-1 KV cache made
        inside is kept only when the rows are the whole batch (the only case in which the batch uses it)."""
        assert self.history is not None and 0 <= lo < hi <= self.history.shape[0], "narrow() rows outside the cache"
        whole = (lo, hi) == (0, self.history.shape[0])
        saved = self.history, self.slot_pos, self.sees, self.cache, self.cached
        self.history, self.slot_pos = saved[0][lo:hi], saved[1][lo:hi]
        self.sees = None if saved[2] is None else saved[2][lo:hi]
        self.cache, self.cached = (saved[3], saved[4]) if whole else (None, 0)
        try:
            yield self
        finally:
            cache = (self.cache, self.cached) if whole else saved[3:]
            self.history, self.slot_pos, self.sees = saved[:3]
            self.cache, self.cached = cache

    @torch.inference_mode()
    def forward(
        self,
        tokens: torch.Tensor,  # [B, T] int64
        positions: torch.Tensor,  # [B, T] int64 RoPE positions
        attn_len: int | None = None,  # recompute slots [0, attn_len): any bound > every slot written
        logits_at: torch.Tensor | None = None,  # [B, T'] int64 column indices into T; None = all
        want_hidden: bool = False,
        hidden_layers: tuple[int, ...] = (),
        slots: torch.Tensor | None = None,  # [B, T] int64 slots to write (a tree); None = the positions
        tree_mask: torch.Tensor | None = None,  # [B, T, T] bool: query t sees new token u (its ancestors and itself)
        tree_path: torch.Tensor | None = None,  # [B, T, E] int64, instead of tree_mask: the slots of each token's
        # ancestors from the tree's root (depth 0, in the slot of its position) down to itself (see tree_paths)
    ) -> ForwardOutput:
        assert self.history is not None, "call allocate() first"
        s = self.max_len if attn_len is None else attn_len
        at = positions if slots is None else slots  # [B, T] the slots this call writes
        self.history.scatter_(1, at, tokens)
        if tokens.shape[0] == 1 and slots is None and tree_mask is None and tree_path is None and self.sees is None:
            out = self._cached_forward(positions, logits_at, want_hidden, hidden_layers)
            if out is not None:
                return out
        kwargs: dict[str, Any] = {}
        if slots is not None or tree_mask is not None or tree_path is not None or self.sees is not None:
            # 1) a tree (now or earlier in this batch): record what each written slot is fed with, then mask
            self._start_trees()
            if tree_mask is not None:
                tree_path = tree_paths(tree_mask, at)
            sees = (torch.arange(self.max_len, device=at.device) <= positions[..., None] if tree_path is None
                    else tree_slot_mask(tree_path, positions, self.max_len))  # [B, T, S]
            self.sees.scatter_(1, at[..., None].expand_as(sees), sees)
            self.slot_pos.scatter_(1, at, positions)
            kwargs = {"position_ids": self.slot_pos[:, :s], "attention_mask": self._masks(s)}
        out = self.hf_model(self.history[:, :s], use_cache=False, output_hidden_states=want_hidden or bool(hidden_layers),
                            **kwargs)
        # 2) read out at the slots written (a chain's slots are its positions)
        cols = at if logits_at is None else at.gather(1, logits_at)  # [B, T']
        logits = out.logits.gather(1, cols[..., None].expand(-1, -1, out.logits.shape[-1])).float()
        hidden = layer_hidden = None
        if out.hidden_states is not None:
            pick = lambda h: h.gather(1, at[..., None].expand(-1, -1, h.shape[-1]))  # noqa: E731
            hidden = pick(out.hidden_states[-1]) if want_hidden else None
            layer_hidden = [pick(out.hidden_states[i + 1]) for i in hidden_layers]
        return ForwardOutput(logits=logits, hidden=hidden, layer_hidden=layer_hidden or [])

    def _cached_forward(self, positions: torch.Tensor, logits_at: torch.Tensor | None, want_hidden: bool,
                        hidden_layers: tuple[int, ...]) -> ForwardOutput | None:
        """Batch 1, a chain at positions [1, T]: feed history[start:end] over the KV cache cut back to start; None when
        the positions are not consecutive (the caller recomputes)."""
        from transformers import DynamicCache

        pos = positions[0].tolist()  # one small host copy per forward (this fallback runner only)
        p0, end = pos[0], pos[-1] + 1
        if pos != list(range(p0, end)):
            self.cache, self.cached = None, 0
            return None
        if self.cache is None:
            self.cache, self.cached = DynamicCache(), 0
        start = min(self.cached, p0)
        for layer in self.cache.layers:  # roll back: the slots from `start` on are fed again
            if getattr(layer, "keys", None) is not None and layer.keys.dim() == 4:
                layer.keys, layer.values = layer.keys[..., :start, :], layer.values[..., :start, :]
        span = torch.arange(start, end, device=positions.device)
        out = self.hf_model(self.history[:, start:end], position_ids=span[None], cache_position=span,
                            past_key_values=self.cache, use_cache=True,
                            output_hidden_states=want_hidden or bool(hidden_layers))
        self.cached = end
        cols = positions - start if logits_at is None else (positions - start).gather(1, logits_at)  # [1, T']
        logits = out.logits.gather(1, cols[..., None].expand(-1, -1, out.logits.shape[-1])).float()
        hidden, layer_hidden = None, []
        if out.hidden_states is not None:
            pick = lambda h: h.gather(1, (positions - start)[..., None].expand(-1, -1, h.shape[-1]))  # noqa: E731
            hidden = pick(out.hidden_states[-1]) if want_hidden else None
            layer_hidden = [pick(out.hidden_states[i + 1]) for i in hidden_layers]
        return ForwardOutput(logits=logits, hidden=hidden, layer_hidden=layer_hidden)

    @torch.inference_mode()
    def move_kv(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        """Move each row's tokens and their positions from slots src [B, n] to slots dst [B, n] (sources read before
        any write). A moved token lands in the slot of its position after its ancestors (the engine moves an
        accepted root path to L, L+1, ...), so from now on it sees slots 0..its position, as if fed as a chain."""
        assert self.history is not None, "call allocate() first"
        self._start_trees()
        bsz = src.shape[0]
        tokens, pos = self.history[:bsz].gather(1, src), self.slot_pos[:bsz].gather(1, src)  # [B, n] each
        self.history[:bsz].scatter_(1, dst, tokens)
        self.slot_pos[:bsz].scatter_(1, dst, pos)
        sees = torch.arange(self.max_len, device=src.device) <= pos[..., None]  # [B, n, S]
        self.sees[:bsz].scatter_(1, dst[..., None].expand_as(sees), sees)

    def _start_trees(self) -> None:
        """The first tree call of a batch: every slot so far was a chain token at its own position."""
        self.cache, self.cached = None, 0  # trees recompute every slot from here on
        if self.sees is None:
            _raise_if_no_custom_masks(self.config)
            s = self.max_len
            self.sees = torch.arange(s, device=self.device) <= self.slot_pos[..., None]  # [B, S, S]

    def _masks(self, s: int) -> torch.Tensor | dict[str, torch.Tensor]:
        """transformers' custom 4-D attention mask over slots [0, s) [B, 1, s, s]: additive, in the model's dtype; a
        dict by layer type where the model has sliding-window layers (the window over the slots' positions)."""
        sees = self.sees[:, :s, :s]  # [B, s, s]
        dtype = self.hf_model.dtype
        additive = lambda seen: torch.zeros(seen.shape, dtype=dtype, device=seen.device).masked_fill(  # noqa: E731
            ~seen, torch.finfo(dtype).min)[:, None]
        window = _sliding_window(self.config)
        if window is None:
            return additive(sees)
        pos = self.slot_pos[:, :s]
        near = pos[:, None, :] > pos[:, :, None] - window  # [B, s, s] key within the window of the query
        layer_types = getattr(self.config, "layer_types", None)
        if not layer_types:  # one mask for every layer, as the model's own create_sliding_window_causal_mask
            return additive(sees & near)
        return {"full_attention": additive(sees), "sliding_attention": additive(sees & near)}


TREE_MASK_ATTENTION = ("eager", "sdpa")  # attention implementations that add a custom 4-D mask to the scores
TREE_LAYER_TYPES = ("full_attention", "sliding_attention")


def _sliding_window(config: Any) -> int | None:
    """The window of the model's sliding-window layers, or None when it has none."""
    layer_types = getattr(config, "layer_types", None)
    if layer_types:
        return config.sliding_window if "sliding_attention" in layer_types else None
    if getattr(config, "use_sliding_window", True) is False:
        return None
    return getattr(config, "sliding_window", None)


def _raise_if_no_custom_masks(config: Any) -> None:
    """Trees on TransformersRunner pass transformers a custom 4-D attention mask: only attention layers of the
    full or sliding-window kind, under eager or SDPA attention, take it as it is."""
    impl = getattr(config, "_attn_implementation", None)
    if impl not in TREE_MASK_ATTENTION:
        raise ConfigError(f"tree drafting on engine.backend=transformers with attn_implementation={impl!r} "
                          f"({config.model_type}); allowed: {', '.join(TREE_MASK_ATTENTION)} (the tree is a custom 4-D "
                          f"attention mask); load the model with attn_implementation='sdpa', or use strategy.tree=chain")
    other = sorted(set(getattr(config, "layer_types", None) or ()) - set(TREE_LAYER_TYPES))
    if other:
        raise ConfigError(f"tree drafting on engine.backend=transformers for a {config.model_type!r} model with "
                          f"{', '.join(other)} layers; allowed: {', '.join(TREE_LAYER_TYPES)} layers (a tree is an attention "
                          f"mask, which other layers do not take); use strategy.tree=chain")


def make_runner(hf_model: nn.Module, backend: str = "auto", num_layers: int | None = None,
                batch_invariant: bool = True, tp: Any = None, float32_invariant: bool = False
                ) -> DecoderRunner | TransformersRunner:
    """Our decoder where it covers the architecture (backend auto/native), else transformers' forward.
    `batch_invariant` selects our decoder's batch-invariant kernels on CUDA and bf16 oneDNN path on the CPU, and with
    `float32_invariant` its float32 one on the CPU (DecoderRunner); `tp` (a tensor_parallel.TPGroup of more than one
    rank) splits our decoder over the ranks."""
    if backend not in BACKENDS:
        raise unknown("engine.backend", backend, BACKENDS)
    native = hf_model.config.model_type in SUPPORTED_ARCHS
    if backend == "native" and not native:
        raise unknown("architecture for engine.backend=native", hf_model.config.model_type, SUPPORTED_ARCHS,
                      hint="use engine.backend=auto or transformers")
    if backend == "transformers" or not native:
        if tp is not None and tp.world > 1 and getattr(hf_model, "_specbench_hf_tp", None) != tp.world:
            raise ConfigError(f"engine.tensor_parallel={tp.world} with {hf_model.config.model_type!r} on transformers' "
                              f"forward, but the model was loaded whole; allowed: a model loaded with "
                              f"load_model(hf_tp=True) (transformers' tp_plan), as run() does")
        return TransformersRunner(hf_model, num_layers)
    return DecoderRunner(hf_model, num_layers, batch_invariant=batch_invariant, tp=tp,
                         float32_invariant=float32_invariant)
