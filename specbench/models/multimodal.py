"""Vision-language targets and drafts: a runner that keeps images and 3-D M-RoPE positions per row.

The engine stays text-only: its positions are slot indices (0..len-1 per row) and it sees only
token ids, image placeholders included as ordinary ids. What a VLM needs beyond that lives here.
`VLMRunner.begin_batch(prompts, mm_inputs)` runs the vision encoder once per image-bearing row and
keeps, per row, (1) which prompt slots hold image placeholder tokens and their image embeddings,
and (2) the row's M-RoPE position ids [3, L] from the model's own rope-index function, computed for
that row alone (never broadcast from row 0), plus its rope delta. A token at slot s past the
prompt (generated or drafted) sits at position s + delta in all three components, as in
transformers' generate. Text-only rows get plain sequential positions in all three.

VLMRunner (the reference, engine.backend=transformers): every forward embeds the row's slot history
and overwrites the image slots with the cached image embeddings (by slot, not by token id: a
generated id equal to the image token id is an ordinary token), then runs the language model over
the prefix (recompute, like TransformersRunner: exact and O(length) per call).

FastVLMRunner (the default, engine.backend=auto): the prefill is the reference's forward over the
prompts, run once with transformers' cache, whose keys and values are copied into our decoder's
static cache; every later forward (verify, draft steps, trees) runs on our decoder (models/decoder.py,
its kernels and CUDA graphs) over that cache. A token past its row's prompt has all three M-RoPE
components equal to slot + rope delta, where M-RoPE is the plain 1-D rotary: the decoder takes it as a
per-row rotary offset (DecoderRunner.rope_offset) while slots and attention stay by slot. So a step
costs what a text model's step costs, O(1) in the generated length, not O(length).

Traps avoided (the vLLM draft-model pull request for multimodal targets): whether a model is
multimodal is decided from its own config (`make_vlm_aware_runner` over the draft's own model),
positions are per row, a text draft keeps its own sequential 1-D positions (it never goes through
this runner), and a VLM draft gets the images and its own 3-D positions, height/width included.

Covered: Qwen2-VL, Qwen2.5-VL and Qwen3-VL (whose DeepStack features are re-added to the image
slots' hidden states in the first decoder layers, as transformers does).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from specbench.errors import ConfigError, unknown
from specbench.models.cuda_graphs import maybe_graphed
from specbench.models.decoder import ForwardOutput
from specbench.models.runner import BACKENDS, DecoderRunner, TransformersRunner, make_runner

# model_type of the M-RoPE VLMs this runner drives (their rope index and image features)
MROPE_VLMS = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")


def is_multimodal(config: Any) -> bool:
    """Whether a model is a VLM, from ITS OWN config (a draft is judged by the draft's config)."""
    return getattr(config, "vision_config", None) is not None


def raise_if_unsupported_vlm(config: Any) -> None:
    if is_multimodal(config) and config.model_type not in MROPE_VLMS:
        raise ConfigError(
            f"model_type {config.model_type!r} is a vision-language model that specbench's VLMRunner does not cover; "
            f"allowed: {', '.join(MROPE_VLMS)}. Use one of those, or a text-only model"
        )


def make_vlm_aware_runner(hf_model: nn.Module, backend: str = "auto", num_layers: int | None = None,
                          batch_invariant: bool = True, tp: Any = None, graphs: bool = False,
                          float32_invariant: bool = False) -> VLMRunner | DecoderRunner | TransformersRunner:
    """For a VLM (judged by the model's own config): FastVLMRunner (backend auto / native; its decoder under CUDA
    graphs when `graphs`), or the reference VLMRunner (backend transformers). Else `runner.make_runner`."""
    if not is_multimodal(hf_model.config):
        return make_runner(hf_model, backend, num_layers, batch_invariant=batch_invariant, tp=tp,
                           float32_invariant=float32_invariant)
    raise_if_unsupported_vlm(hf_model.config)
    if tp is not None and tp.world > 1:
        raise ConfigError(f"engine.tensor_parallel={tp.world} with a vision-language target "
                          f"({hf_model.config.model_type!r}); allowed: tensor_parallel=1 (VLMRunner is not split)")
    if backend not in BACKENDS:
        raise unknown("engine.backend", backend, BACKENDS)
    if num_layers is not None:
        raise ConfigError("a truncated vision-language model (num_layers) is not supported; use a text model for layer-skip")
    if backend == "transformers":
        return VLMRunner(hf_model)
    return FastVLMRunner(hf_model, batch_invariant=batch_invariant, graphs=graphs)


def image_processor_for(model: Any) -> Any | None:
    """The image processor of a loaded model (specbench.models.loading.LoadedModel); None for a text model.

    Hub ids and local directories load their own (AutoImageProcessor); random-weight presets get
    Qwen2-VL's processor with the config's patch and merge sizes, at most 256 patches per image.
    """
    config = model.model.config
    if not is_multimodal(config):
        return None
    spec = model.spec
    if spec.source in ("hub", "local"):
        from transformers import AutoImageProcessor

        return AutoImageProcessor.from_pretrained(spec.path, trust_remote_code=spec.trust_remote_code, revision=spec.revision)
    import transformers

    vision = config.vision_config
    cls = getattr(transformers, "Qwen2VLImageProcessorPil", None) or transformers.Qwen2VLImageProcessor  # no torchvision needed
    side = vision.patch_size * vision.spatial_merge_size
    return cls(patch_size=vision.patch_size, merge_size=vision.spatial_merge_size, temporal_patch_size=vision.temporal_patch_size,
               min_pixels=side * side, max_pixels=256 * vision.patch_size**2)


@dataclass
class _RowVision:
    """One image-bearing row: where its image tokens sit and what they are."""

    slots: torch.Tensor  # [N] int64, prompt slots holding image placeholder tokens (ascending)
    embeds: torch.Tensor  # [N, H] image embeddings, in placeholder order
    deepstack: list[torch.Tensor] = field(default_factory=list)  # Qwen3-VL: [N, H] per injected layer


class VLMRunner(TransformersRunner):
    """A transformers M-RoPE VLM behind the runner interface (allocate, forward, vocab_size, device,
    max_len: TransformersRunner's slot history) plus `begin_batch(prompts, mm_inputs)`. Slot ==
    position index, as everywhere."""

    verifies_trees = False  # forward takes no slots / tree mask (run() refuses strategy.tree for a VLM target)

    def __init__(self, hf_model: nn.Module) -> None:
        raise_if_unsupported_vlm(hf_model.config)
        super().__init__(hf_model)
        self.core = hf_model.model  # Qwen*VLModel: visual, language_model, get_rope_index, get_image_features
        self.language_model = self.core.language_model
        self.image_token_id = int(self.config.image_token_id)
        self.position_ids: torch.Tensor | None = None  # [3, B, S] int64 M-RoPE positions by slot
        self.rope_deltas: list[int] = []  # [B] position - slot past each row's prompt
        self.rows: list[_RowVision | None] = []
        self.encoder_calls = 0  # vision-encoder forwards since construction (one per distinct image input)

    def allocate(self, batch_size: int, max_len: int) -> None:
        super().allocate(batch_size, max_len)
        dev = self.device
        self.position_ids = torch.arange(max_len, device=dev).expand(3, batch_size, max_len).clone()
        self.rope_deltas = [0] * batch_size
        self.rows = [None] * batch_size

    # -- per batch: images and positions ----------------------------------------------------------

    @torch.inference_mode()
    def begin_batch(self, prompts: list[list[int]], mm_inputs: list[dict | None] | None) -> None:
        """Encode each image-bearing row's images once and fix every row's M-RoPE positions."""
        assert self.history is not None and len(prompts) == self.history.shape[0], "allocate(batch_size, ...) first"
        if mm_inputs is None:
            mm_inputs = [None] * len(prompts)
        if len(mm_inputs) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(mm_inputs)} mm_inputs (one dict or None per prompt)")
        dev, s = self.device, self.max_len
        encoded: dict[int, tuple[torch.Tensor, list[torch.Tensor]]] = {}  # id(mm) -> features: rows sharing inputs encode once
        for b, (ids, mm) in enumerate(zip(prompts, mm_inputs)):
            self.rows[b] = None
            self.rope_deltas[b] = 0
            self.position_ids[:, b] = torch.arange(s, device=dev)
            if not mm or mm.get("pixel_values") is None:
                continue  # text-only row: sequential positions in all three components
            grid = torch.as_tensor(mm["image_grid_thw"], device=dev).reshape(-1, 3)  # [n_images, 3]
            ids_t = torch.tensor(ids, dtype=torch.long, device=dev)  # [L]
            slots = (ids_t == self.image_token_id).nonzero()[:, 0]  # [N]
            if id(mm) not in encoded:
                encoded[id(mm)] = self._encode_images(mm["pixel_values"], grid)
            embeds, deepstack = encoded[id(mm)]
            if slots.numel() != embeds.shape[0]:
                raise ConfigError(
                    f"row {b}: the prompt has {slots.numel()} image placeholder tokens (id {self.image_token_id}) but its "
                    f"{grid.shape[0]} image(s) (grid_thw {grid.tolist()}) give {embeds.shape[0]} embeddings; encode "
                    f"prompts with specbench.data.images.encode_mm_prompt and the target's own image processor"
                )
            positions, delta = self.rope_index(ids_t, grid)
            plen = len(ids)
            self.position_ids[:, b, :plen] = positions
            self.position_ids[:, b, plen:] = torch.arange(plen, s, device=dev) + delta  # text continuation
            self.rope_deltas[b] = delta
            self.rows[b] = _RowVision(slots=slots, embeds=embeds, deepstack=deepstack)

    def _encode_images(self, pixel_values: torch.Tensor, grid: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Image embeddings [N, H] of one row's images (concatenated in order) and DeepStack features."""
        self.encoder_calls += 1
        out = self.core.get_image_features(torch.as_tensor(pixel_values, device=self.device), grid)
        if isinstance(out, tuple):  # older transformers: (embeds, deepstack) or embeds
            pooled, deepstack = (out[0], out[1]) if len(out) == 2 and isinstance(out[1], list) else (out, [])
        else:
            pooled, deepstack = out.pooler_output, getattr(out, "deepstack_features", None) or []
        cat = lambda x: torch.cat(list(x), dim=0) if isinstance(x, (list, tuple)) else x  # noqa: E731
        return cat(pooled), [cat(f) for f in deepstack]

    def rope_index(self, ids: torch.Tensor, grid: torch.Tensor) -> tuple[torch.Tensor, int]:
        """One row's M-RoPE positions [3, L] and rope delta, from the model's own get_rope_index."""
        fn = self.core.get_rope_index
        kwargs: dict[str, Any] = {"image_grid_thw": grid, "attention_mask": torch.ones_like(ids)[None]}
        if "mm_token_type_ids" in inspect.signature(fn).parameters:  # transformers >= 5: modality per token
            kwargs["mm_token_type_ids"] = (ids == self.image_token_id).int()[None]
        positions, deltas = fn(ids[None], **kwargs)
        return positions[:, 0], int(deltas.reshape(-1)[0])

    # -- forward ---------------------------------------------------------------------------------

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, attn_len: int | None = None,
                logits_at: torch.Tensor | None = None, want_hidden: bool = False,
                hidden_layers: tuple[int, ...] = ()) -> ForwardOutput:
        """tokens, positions: [B, T] (positions are slots); logits [B, T', V] at `logits_at` columns [B, T']."""
        assert self.history is not None, "call allocate() first"
        s = self.max_len if attn_len is None else attn_len
        self.history.scatter_(1, positions, tokens)
        return self._outputs(self._language(s, bool(hidden_layers)), positions, logits_at, want_hidden, hidden_layers)

    def _outputs(self, out: Any, positions: torch.Tensor, logits_at: torch.Tensor | None, want_hidden: bool,
                 hidden_layers: tuple[int, ...]) -> ForwardOutput:
        """The language model's output at the forward's slots: logits at `logits_at` columns, hidden states."""
        cols = positions if logits_at is None else positions.gather(1, logits_at)  # [B, T']
        last = out.last_hidden_state  # [B, S, H] after the final norm
        pick = lambda h, c: h.gather(1, c[..., None].expand(-1, -1, h.shape[-1]))  # noqa: E731
        logits = self.hf_model.lm_head(pick(last, cols)).float()
        hidden = pick(last, positions) if want_hidden else None
        layer_hidden = [pick(out.hidden_states[i + 1], positions) for i in hidden_layers]
        return ForwardOutput(logits=logits, hidden=hidden, layer_hidden=layer_hidden)

    def _language(self, s: int, all_hidden: bool, cache: Any = None) -> Any:
        """The language model over slots [0, s) of every row: the slot history embedded, image slots overwritten by
        their image embeddings, DeepStack features, M-RoPE positions (`cache`: transformers' cache to fill)."""
        embeds = self.language_model.get_input_embeddings()(self.history[:, :s])  # [B, S, H]
        extra: dict[str, Any] = {}
        visual_mask = torch.zeros(embeds.shape[:2], dtype=torch.bool, device=embeds.device)  # [B, S]
        deep: list[list[torch.Tensor]] = []
        for b, row in enumerate(self.rows):
            if row is None:
                continue
            keep = row.slots < s
            embeds[b, row.slots[keep]] = row.embeds[keep].to(embeds.dtype)
            visual_mask[b, row.slots[keep]] = True
            deep.append([f[keep] for f in row.deepstack])
        if deep and deep[0]:  # Qwen3-VL DeepStack: features added to image slots after the first layers
            extra = {"visual_pos_masks": visual_mask,
                     "deepstack_visual_embeds": [torch.cat(per_layer, dim=0) for per_layer in zip(*deep)]}
        if cache is not None:  # transformers >= 5.24 names it `cache` (past_key_values deprecated), earlier past_key_values
            key = "cache" if "cache" in inspect.signature(self.language_model.forward).parameters else "past_key_values"
            extra[key] = cache
        return self.language_model(inputs_embeds=embeds, position_ids=self.position_ids[:, :, :s], use_cache=cache is not None,
                                   output_hidden_states=all_hidden, **extra)


class FastVLMRunner(VLMRunner):
    """VLMRunner's images and M-RoPE positions, with the language model on our decoder past the prefill (see the
    module docstring). The prefill is the first forward after allocate() or begin_batch() (the engine's, or a
    draft's first catch-up: slots 0.. of every row); every later forward goes to the decoder."""

    verifies_trees = True  # past the prefill the decoder verifies trees

    def __init__(self, hf_model: nn.Module, batch_invariant: bool = True, graphs: bool = False) -> None:
        super().__init__(hf_model)
        self.decoder = DecoderRunner(hf_model, batch_invariant=batch_invariant)
        self.step = maybe_graphed(self.decoder, graphs)  # the decoder, or it under CUDA graphs
        self.prefilled = False

    def allocate(self, batch_size: int, max_len: int) -> None:
        super().allocate(batch_size, max_len)
        self.step.allocate(batch_size, max_len)
        self.prefilled = False
        rows = self.decoder.k_cache.shape[1]  # CUDA graphs round the rows up to a bucket
        if self.decoder.rope_offset is None or self.decoder.rope_offset.shape[0] != rows:
            self.decoder.rope_offset = torch.zeros(rows, dtype=torch.long, device=self.device)

    def begin_batch(self, prompts: list[list[int]], mm_inputs: list[dict | None] | None) -> None:
        super().begin_batch(prompts, mm_inputs)
        self.prefilled = False
        offset = self.decoder.rope_offset
        offset.zero_()
        offset[: len(prompts)] = torch.tensor(self.rope_deltas, dtype=torch.long)
        most = max(self.rope_deltas, default=0)
        if self.decoder.max_len + most > self.decoder.rope_cos.shape[0]:  # rotary positions past the cache's slots
            self.decoder.rope_table(self.decoder.max_len + most)  # (rare: image rows' deltas are <= 0)
            if self.step is not self.decoder:  # graphs captured over the old tables are dropped, with their pool
                self.step.drop_graphs()

    def move_kv(self, src: torch.Tensor, dst: torch.Tensor) -> None:
        self.decoder.move_kv(src, dst)

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, attn_len: int | None = None,
                logits_at: torch.Tensor | None = None, want_hidden: bool = False, hidden_layers: tuple[int, ...] = (),
                slots: torch.Tensor | None = None, tree_mask: torch.Tensor | None = None,
                tree_path: torch.Tensor | None = None) -> ForwardOutput:
        """tokens, positions [B, T] (positions are slots). A prefill (every row from slot 0) runs the reference forward
        and fills the decoder's cache with its keys and values; anything else runs on the decoder."""
        if not self.prefilled:
            return self._prefill(tokens, positions, attn_len, logits_at, want_hidden, hidden_layers)
        return self.step(tokens, positions, attn_len=attn_len, logits_at=logits_at, want_hidden=want_hidden,
                         hidden_layers=hidden_layers, slots=slots, tree_mask=tree_mask, tree_path=tree_path)

    def _prefill(self, tokens, positions, attn_len, logits_at, want_hidden, hidden_layers) -> ForwardOutput:
        from transformers import DynamicCache

        bsz, t = tokens.shape
        self.history.scatter_(1, positions, tokens)
        cache = DynamicCache()
        out = self._language(t, bool(hidden_layers), cache)
        for i, (k, v) in enumerate(_cache_layers(cache)):  # [B, Hkv, T, D] each, after q/k-norm and rotary
            self.decoder.k_cache[i, :bsz, :, :t] = k
            self.decoder.v_cache[i, :bsz, :, :t] = v
        self.prefilled = True
        return self._outputs(out, positions, logits_at, want_hidden, hidden_layers)


def _cache_layers(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(keys, values) per layer of a transformers DynamicCache (its `layers` in transformers 5; key_cache before)."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache))
