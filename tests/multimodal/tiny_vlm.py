"""Tiny random vision-language models, a tiny tokenizer with Qwen's special tokens and chat template,
and an image processor, all built offline from configs (no hub). Odd, distinct sizes: 3 query heads
over 1 KV head, head_dim 16, M-RoPE sections (2, 3, 3); target vocabulary 211, text draft 197."""

from __future__ import annotations

import copy
from functools import lru_cache

import torch
from PIL import Image, ImageDraw

from specbench.data.images import DEFAULT_NUM_IMAGE_PROMPTS, ImagePrompt, synthetic_image_prompts
from specbench.models.loading import LoadedModel, ModelSpec

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>",
            "<|video_pad|>"]
TARGET_VOCAB = 211
DRAFT_VOCAB = 197  # smaller than the target's, like Qwen3-0.6B (151936) for Qwen2.5-VL (152064)
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for c in message['content'] %}"
    "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>{% elif c['type'] == 'text' %}{{ c['text'] }}"
    "{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _words() -> list[str]:
    import re

    texts = [p.text for p in synthetic_image_prompts(DEFAULT_NUM_IMAGE_PROMPTS)] + ["user assistant system"]
    words = sorted({w for t in texts for w in re.findall(r"\w+|[^\w\s]+", t)})
    return words + [str(d) for d in range(10) if str(d) not in words]


@lru_cache(maxsize=None)
def tokenizer(swap: tuple[int, int] | None = None):
    """A WordLevel tokenizer: <unk>, Qwen's special tokens, then the words of the offline image set.
    `swap=(i, j)` exchanges two ids (a tokenizer that disagrees with the others)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tokens = ["<unk>"] + SPECIALS + _words()
    if swap:
        i, j = swap
        tokens[i], tokens[j] = tokens[j], tokens[i]
    tk = Tokenizer(models.WordLevel({t: i for i, t in enumerate(tokens)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                  additional_special_tokens=SPECIALS)
    tok.chat_template = CHAT_TEMPLATE
    return tok


def special_ids() -> dict[str, int]:
    tok = tokenizer()
    return dict(image_token_id=tok.convert_tokens_to_ids("<|image_pad|>"), video_token_id=tok.convert_tokens_to_ids("<|video_pad|>"),
                vision_start_token_id=tok.convert_tokens_to_ids("<|vision_start|>"),
                vision_end_token_id=tok.convert_tokens_to_ids("<|vision_end|>"))


def image_processor():
    """Qwen2-VL's image processor kept small: a 112x112 image becomes 56x56 = 4x4 patches of 14 = 4 tokens."""
    import transformers

    cls = getattr(transformers, "Qwen2VLImageProcessorPil", None) or transformers.Qwen2VLImageProcessor
    return cls(min_pixels=56 * 56, max_pixels=56 * 112, patch_size=14, merge_size=2, temporal_patch_size=2)


_TEXT = dict(bos_token_id=None, eos_token_id=len(SPECIALS) - 4, pad_token_id=1, hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=3, num_key_value_heads=1,
             head_dim=16, max_position_embeddings=1024, rms_norm_eps=1e-6, tie_word_embeddings=False)


def qwen25_vl_config(vocab: int = TARGET_VOCAB):
    from transformers import Qwen2_5_VLConfig

    text = dict(_TEXT, vocab_size=vocab, rope_parameters={"rope_type": "default", "rope_theta": 10_000.0, "mrope_section": [2, 3, 3]})
    vision = dict(depth=1, hidden_size=32, intermediate_size=40, num_heads=2, out_hidden_size=48, patch_size=14,
                  spatial_merge_size=2, temporal_patch_size=2, window_size=56, fullatt_block_indexes=[0])
    return Qwen2_5_VLConfig(text_config=text, vision_config=vision, **special_ids())


def qwen3_vl_config(vocab: int = TARGET_VOCAB):
    from transformers import Qwen3VLConfig

    text = dict(_TEXT, vocab_size=vocab,
                rope_parameters={"rope_type": "default", "rope_theta": 10_000.0, "mrope_section": [2, 3, 3], "mrope_interleaved": True})
    vision = dict(depth=2, hidden_size=32, intermediate_size=40, num_heads=2, out_hidden_size=48, patch_size=14,
                  spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=64, deepstack_visual_indexes=[0])
    return Qwen3VLConfig(text_config=text, vision_config=vision, **special_ids())


def qwen2_vl_config(vocab: int = TARGET_VOCAB):
    from transformers import Qwen2VLConfig

    text = dict(_TEXT, vocab_size=vocab, rope_parameters={"rope_type": "default", "rope_theta": 10_000.0, "mrope_section": [2, 3, 3]})
    vision = dict(depth=1, embed_dim=32, hidden_size=48, mlp_ratio=2, num_heads=2, patch_size=14, spatial_merge_size=2,
                  temporal_patch_size=2)
    return Qwen2VLConfig(text_config=text, vision_config=vision, **special_ids())


def _loaded(model, name: str) -> LoadedModel:
    model = model.eval()
    model.requires_grad_(False)
    return LoadedModel(spec=ModelSpec(name=name, source="random"), model=model, tokenizer=tokenizer())


def vlm(kind: str = "qwen2_5_vl", seed: int = 0, vocab: int = TARGET_VOCAB) -> LoadedModel:
    """A tiny random VLM (fp32, CPU): kind qwen2_5_vl, qwen3_vl or qwen2_vl."""
    from transformers import Qwen2_5_VLForConditionalGeneration, Qwen2VLForConditionalGeneration, Qwen3VLForConditionalGeneration

    torch.manual_seed(seed)
    if kind == "qwen2_5_vl":
        return _loaded(Qwen2_5_VLForConditionalGeneration(qwen25_vl_config(vocab)), f"tiny-qwen2.5-vl-{seed}")
    if kind == "qwen2_vl":
        return _loaded(Qwen2VLForConditionalGeneration(qwen2_vl_config(vocab)), f"tiny-qwen2-vl-{seed}")
    return _loaded(Qwen3VLForConditionalGeneration(qwen3_vl_config(vocab)), f"tiny-qwen3-vl-{seed}")


def text_draft(seed: int = 1, vocab: int = DRAFT_VOCAB, arch: str = "qwen3") -> LoadedModel:
    """A tiny random text LM (our decoder's family) with a vocabulary smaller than the target's."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(arch, vocab_size=vocab, rope_theta=10_000.0, **_TEXT)
    torch.manual_seed(seed)
    return _loaded(AutoModelForCausalLM.from_config(cfg, dtype=torch.float32), f"tiny-{arch}-draft-{seed}")


def perturbed_vlm(model: LoadedModel, scale: float, seed: int = 1) -> LoadedModel:
    """A VLM draft that agrees with `model` often but not always: its weights plus Gaussian noise."""
    hf = copy.deepcopy(model.model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale * p.abs().mean())
    return LoadedModel(spec=ModelSpec(name=model.spec.name + "-perturbed", source="random"), model=hf, tokenizer=model.tokenizer)


def wide_image(seed: int, width: int = 112, height: int = 56) -> Image.Image:
    """A non-square picture (grid h != w), so a swapped height/width M-RoPE component shows."""
    img = Image.new("RGB", (width, height), (250, 250, 250))
    d = ImageDraw.Draw(img)
    g = torch.Generator().manual_seed(seed)
    for _ in range(3):
        x, y = (torch.rand(2, generator=g) * torch.tensor([width - 20, height - 20])).int().tolist()
        d.rectangle((x, y, x + 18, y + 18), fill=tuple(torch.randint(0, 255, (3,), generator=g).tolist()))
    return img


def mixed_prompts() -> list[ImagePrompt]:
    """An image prompt, a two-image prompt (one of them non-square) and a text-only prompt."""
    one = next(p for p in synthetic_image_prompts(6) if len(p.images) == 1)
    two = ImagePrompt(id="two", text="Which of the two images has more shapes: the first or the second?",
                      images=(one.images[0], wide_image(3)))
    text = ImagePrompt(id="text", text="What is the capital of France?")
    return [one, two, text]


def text_draft_from(target: LoadedModel, vocab: int = DRAFT_VOCAB, noise: float = 0.0, seed: int = 1) -> LoadedModel:
    """A text-only draft made of the VLM's own language model, its vocabulary cut to `vocab` ids
    (qwen2 for Qwen2.5-VL, qwen3 for Qwen3-VL), plus optional Gaussian noise. It runs on our decoder
    with plain 1-D positions; with no image in a prompt it agrees with the target on most tokens."""
    from transformers import AutoConfig, AutoModelForCausalLM

    arch = "qwen2" if target.model.config.model_type == "qwen2_5_vl" else "qwen3"
    cfg = AutoConfig.for_model(arch, vocab_size=vocab, rope_theta=10_000.0, **_TEXT)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    src = {k.replace("model.language_model.", "model."): v for k, v in target.model.state_dict().items()
           if k.startswith("model.language_model.") or k == "lm_head.weight"}
    for key in ("model.embed_tokens.weight", "lm_head.weight"):
        src[key] = src[key][:vocab]
    model.load_state_dict(src, strict=True)
    loaded = _loaded(model, f"tiny-{arch}-from-{target.spec.name}")
    if noise:
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn(p.shape, generator=g) * noise * p.abs().mean())
    return loaded


# --- driving the engine ---------------------------------------------------------------------------

CPU = torch.device("cpu")


def encoded(target: LoadedModel, prompts: list[ImagePrompt]) -> tuple[list[list[int]], list[dict | None]]:
    from specbench.data.images import encode_mm_prompts

    return encode_mm_prompts(prompts, target.tokenizer, image_processor(), target.model.config)


def hf_greedy(model, ids: list[int], mm: dict | None, max_new: int) -> list[int]:
    """transformers' own greedy generate at batch 1, with the row's pixel values and grid sizes."""
    x = torch.tensor([ids])
    kw = {"mm_token_type_ids": (x == model.config.image_token_id).int()}
    if mm:
        kw.update(pixel_values=mm["pixel_values"], image_grid_thw=mm["image_grid_thw"])
    out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=max_new, min_new_tokens=max_new,
                         do_sample=False, eos_token_id=None, pad_token_id=0, **kw)
    return out[0, len(ids):].tolist()


def hf_greedy_no_cache(model, ids: list[int], mm: dict | None, max_new: int) -> list[int]:
    """Greedy decoding by full forwards (no KV cache): the model's own definition of the next token.

    Used where transformers' cached generate departs from it: for Qwen3-VL, generate continues each
    M-RoPE component from its own last value + 1, which differs when a prompt ends inside an image
    (no processor makes such prompts; the regression test does)."""
    out = list(ids)
    for _ in range(max_new):
        x = torch.tensor([out])
        kw = {"mm_token_type_ids": (x == model.config.image_token_id).int() * (torch.arange(x.shape[1]) < len(ids))}
        if mm:
            kw.update(pixel_values=mm["pixel_values"], image_grid_thw=mm["image_grid_thw"])
        with torch.no_grad():
            out.append(int(model(input_ids=x, **kw).logits[0, -1].argmax()))
    return out[len(ids):]


def context(target: LoadedModel, draft: LoadedModel | None, params=None, backend: str = "auto", graphs: bool = False):
    """backend auto: FastVLMRunner (graphs: its decoder through GraphedRunner's code path); transformers: VLMRunner."""
    from specbench.models.multimodal import make_vlm_aware_runner
    from specbench.strategies.base import BuildContext
    from specbench.verify import SamplingParams

    return BuildContext(target=target, target_runner=make_vlm_aware_runner(target.model, backend, graphs=graphs), draft=draft,
                        sampling=params or SamplingParams(), device=CPU)


def draft_proposer(ctx, k: int):
    """DraftModelProposer whose runner is chosen from the draft's own config (make_draft_runner).

    Until draft_model.py calls make_draft_runner itself, the test sets it here (the same one line)."""
    from specbench.models.draft_runner import make_draft_runner
    from specbench.strategies.draft_model import DraftModelProposer

    prop = DraftModelProposer(ctx, k=k)
    prop.runner = make_draft_runner(ctx.draft.model, ctx.backend)
    return prop


def decode(ctx, proposer, ids, mms, batch_size: int, max_new: int, params=None, rule=None):
    from specbench.engine import Engine
    from specbench.verify import SamplingParams, Verifier

    params = params or SamplingParams()
    engine = Engine(ctx.target_runner, proposer, Verifier(params, CPU, rule=rule), max_new_tokens=max_new,
                    eos_ids=set(), device=CPU)
    rows = []
    for s in range(0, len(ids), batch_size):
        rows += engine.generate(ids[s : s + batch_size], mm_inputs=mms[s : s + batch_size])[0]
    return rows


def acceptance_length(rows) -> float:
    return 1 + sum(r.accepted_tokens for r in rows) / max(1, sum(r.drafts for r in rows))
