"""Image prompt sets and their encoding for vision-language targets.

Contract:
- `ImagePrompt` is a `Prompt` that carries images (PIL, in the order their placeholders come,
  before the text). A prompt with no images is an ordinary text request, so one batch can mix
  image and text-only prompts, and a prompt can hold several images.
- `dataset=images`: an offline set made here with Pillow (shapes, bar charts, rendered words and
  two-image comparisons, plus a few text-only questions), deterministic from a seed, each with a
  question about the picture and its answer. For tests and the offline demo.
- `dataset=mmstar`: MMStar (Chen et al. 2024, arXiv 2403.20330; HF `Lin-Chen/MMStar`, split
  `val`), for users with a hub; `datasets` is an optional import with a clear error.
- `encode_mm_prompt(prompt, tokenizer, image_processor, model_config)` -> (token ids, mm_inputs):
  the chat template with one placeholder per image, each expanded to the image's number of
  tokens (grid_t * grid_h * grid_w / merge^2), exactly as the Qwen-VL processors do; mm_inputs is
  {"pixel_values", "image_grid_thw"} for `Engine.generate(..., mm_inputs=...)`, or None for a
  text-only prompt.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specbench.data.base import Prompt, as_id_list, encode_prompt, hf_rows
from specbench.errors import ConfigError

if TYPE_CHECKING:  # annotations only: prompts.py's registry imports this module, never the reverse
    from specbench.data.prompts import DatasetConfig

MMSTAR_HF = ("Lin-Chen/MMStar", "val")
DEFAULT_NUM_IMAGE_PROMPTS = 24
IMAGE_SIZE = 112  # pixels per side: 8x8 patches of 14 -> 16 tokens for Qwen2.5-VL


@dataclass(frozen=True)
class ImagePrompt(Prompt):
    """A request with images. `images` are PIL images; their placeholders precede the text."""

    images: tuple[Any, ...] = ()
    answer: str | None = None  # the reference answer, where the set has one


def mm_images(prompt: Prompt) -> tuple[Any, ...]:
    """The images of any prompt (a plain Prompt has none)."""
    return tuple(getattr(prompt, "images", ()) or ())


# ---------------------------------------------------------------------------------------------
# The offline set: pictures drawn with Pillow, deterministic from a seed.

_COLORS = {"red": (220, 40, 40), "green": (40, 170, 60), "blue": (40, 80, 220), "yellow": (235, 200, 30),
           "purple": (140, 60, 170), "orange": (240, 130, 20)}
_SHAPES = ("circle", "square", "triangle")
_WORDS = ("cat", "tree", "blue", "seven", "river", "lamp", "stone", "cloud")
_TEXT_ONLY = ("What is 12 times 7?", "Name three primary colors.", "Write a haiku about the sea.",
              "What is the capital of France?")


def _draw_shape(draw: Any, kind: str, box: tuple[int, int, int, int], color: tuple[int, int, int]) -> None:
    x0, y0, x1, y1 = box
    if kind == "circle":
        draw.ellipse(box, fill=color)
    elif kind == "square":
        draw.rectangle(box, fill=color)
    else:
        draw.polygon([((x0 + x1) // 2, y0), (x1, y1), (x0, y1)], fill=color)


def shapes_image(rng: random.Random, size: int = IMAGE_SIZE) -> tuple[Any, list[tuple[str, str]]]:
    """1-3 coloured shapes on white, non-overlapping; returns the image and [(color, shape)]."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (size, size), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    n = rng.randint(1, 3)
    cell = size // 2
    cells = rng.sample([(0, 0), (1, 0), (0, 1), (1, 1)], n)
    drawn = []
    for cx, cy in cells:
        color = rng.choice(sorted(_COLORS))
        kind = rng.choice(_SHAPES)
        pad = rng.randint(4, cell // 5)
        _draw_shape(draw, kind, (cx * cell + pad, cy * cell + pad, (cx + 1) * cell - pad, (cy + 1) * cell - pad), _COLORS[color])
        drawn.append((color, kind))
    return img, drawn


def bar_chart_image(rng: random.Random, size: int = IMAGE_SIZE) -> tuple[Any, dict[str, int]]:
    """A bar chart of 3-4 labelled bars with distinct heights; returns the image and {label: value}."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (size, size), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    labels = "ABCD"[: rng.randint(3, 4)]
    values = rng.sample(range(1, 10), len(labels))
    width = (size - 10) // len(labels)
    base = size - 14
    draw.line([(4, base), (size - 4, base)], fill=(0, 0, 0))
    for i, (label, v) in enumerate(zip(labels, values)):
        x0 = 6 + i * width
        draw.rectangle((x0 + 2, base - v * (base - 8) // 9, x0 + width - 4, base), fill=_COLORS[sorted(_COLORS)[i]])
        draw.text((x0 + width // 2 - 3, base + 2), label, fill=(0, 0, 0))
    return img, dict(zip(labels, values))


def text_image(rng: random.Random, size: int = IMAGE_SIZE) -> tuple[Any, str]:
    """A word rendered in black on a pale background; returns the image and the word."""
    from PIL import Image, ImageDraw

    word = rng.choice(_WORDS)
    img = Image.new("RGB", (size, size), tuple(rng.randint(215, 255) for _ in range(3)))
    ImageDraw.Draw(img).text((rng.randint(4, size // 3), rng.randint(4, size // 2)), word, fill=(0, 0, 0))
    return img, word


def synthetic_image_prompts(n: int = DEFAULT_NUM_IMAGE_PROMPTS, seed: int = 0, size: int = IMAGE_SIZE) -> Iterator[ImagePrompt]:
    """`n` prompts cycling through shapes, bar chart, word, two-image comparison and text-only."""
    rng = random.Random(seed)
    for i in range(n):
        kind = ("shapes", "chart", "word", "compare", "shapes", "text")[i % 6]
        pid = f"images/{i}"
        if kind == "shapes":
            img, drawn = shapes_image(rng, size)
            if len(drawn) == 1:
                text, answer = "What shape is in the image, and what color is it?", f"a {drawn[0][0]} {drawn[0][1]}"
            else:
                text, answer = "How many shapes are in the image?", str(len(drawn))
            yield ImagePrompt(id=pid, text=text, category="shapes", images=(img,), answer=answer)
        elif kind == "chart":
            img, values = bar_chart_image(rng, size)
            yield ImagePrompt(id=pid, text="Which bar in the chart is the tallest?", category="chart", images=(img,),
                              answer=max(values, key=values.get))
        elif kind == "word":
            img, word = text_image(rng, size)
            yield ImagePrompt(id=pid, text="What word is written in the image?", category="text", images=(img,), answer=word)
        elif kind == "compare":
            (a, da), (b, db) = shapes_image(rng, size), shapes_image(rng, size)
            answer = "first" if len(da) > len(db) else "second" if len(db) > len(da) else "same"
            yield ImagePrompt(id=pid, text="Which of the two images has more shapes: the first or the second?",
                              category="compare", images=(a, b), answer=answer)
        else:
            yield ImagePrompt(id=pid, text=_TEXT_ONLY[(i // 6) % len(_TEXT_ONLY)], category="text-only")


def images_source(opts: DatasetConfig) -> Iterator[Prompt]:
    """`dataset=images`: the offline set (`num_prompts` of them, default 24; seed from dataset.seed when set)."""
    yield from synthetic_image_prompts(opts.num_prompts or DEFAULT_NUM_IMAGE_PROMPTS, seed=int(getattr(opts, "seed", 0) or 0))


def mmstar_source(opts: DatasetConfig) -> Iterator[Prompt]:
    """`dataset=mmstar`: MMStar's 1,500 multiple-choice questions, one image each (needs `datasets` and a hub)."""
    name = opts.hf_name or MMSTAR_HF[0]
    split = opts.split if opts.hf_name else MMSTAR_HF[1]
    for row, where, i in hf_rows(name, split):
        text, image = row.get(opts.hf_field or "question"), row.get("image")
        if not isinstance(text, str) or image is None:
            raise ConfigError(f"{where} has no question text under {opts.hf_field!r} or no 'image'; MMStar rows have both")
        yield ImagePrompt(id=f"mmstar/{row.get('index', i)}", text=text, category=row.get("category"),
                          images=(_as_pil(image),), answer=row.get("answer"))


def _as_pil(image: Any) -> Any:
    """A PIL RGB image from what `datasets` returns (a PIL image, or {"bytes": ..., "path": ...})."""
    from PIL import Image

    if isinstance(image, dict):
        import io

        image = Image.open(io.BytesIO(image["bytes"])) if image.get("bytes") else Image.open(image["path"])
    return image.convert("RGB")


# ---------------------------------------------------------------------------------------------
# Encoding with the target's tokenizer and image processor.


def encode_mm_prompt(prompt: Prompt, tokenizer: Any, image_processor: Any, model_config: Any) -> tuple[list[int], dict | None]:
    """Token ids of one request and its mm_inputs ({"pixel_values", "image_grid_thw"}; None without images).

    With a chat template (and `prompt.chat`): the user turn holds one image entry per image, then the
    text; a template that does not render image entries gets the placeholders prefixed to the text.
    Without one (the byte tokenizer of random presets): vision_start, the image's tokens, vision_end
    per image, then the text. Each image's single placeholder becomes grid_t*grid_h*grid_w/merge^2 tokens.
    """
    images = mm_images(prompt)
    if not images:
        return encode_prompt(prompt, tokenizer), None
    if image_processor is None:
        raise ConfigError(f"prompt {prompt.id!r} has images but the target has no image processor; use a vision-language target")
    pix = image_processor(images=list(images), return_tensors="pt")
    grid = pix["image_grid_thw"]  # [n_images, 3]
    merge = int(getattr(image_processor, "merge_size", None) or model_config.vision_config.spatial_merge_size)
    counts = [int(g.prod()) // merge**2 for g in grid]
    image_id, start_id, end_id = (int(model_config.image_token_id), int(model_config.vision_start_token_id),
                                  int(model_config.vision_end_token_id))
    if prompt.chat and getattr(tokenizer, "chat_template", None) and hasattr(tokenizer, "convert_ids_to_tokens"):
        pad, start, end = tokenizer.convert_ids_to_tokens([image_id, start_id, end_id])
        content = [{"type": "image"} for _ in images] + [{"type": "text", "text": prompt.text}]
        text = _render(tokenizer, content)
        if text.count(pad) != len(images):  # a template without image entries: placeholders before the text
            text = _render(tokenizer, (start + pad + end) * len(images) + prompt.text)
        pieces = text.split(pad)
        text = "".join(piece + pad * n for piece, n in zip(pieces, counts)) + pieces[-1]
        ids = as_id_list(tokenizer(text, add_special_tokens=False))
    else:
        ids = []
        for n in counts:
            ids += [start_id] + [image_id] * n + [end_id]
        ids += as_id_list(tokenizer(prompt.text, add_special_tokens=True))
    if ids.count(image_id) != sum(counts):
        raise ConfigError(
            f"prompt {prompt.id!r}: {ids.count(image_id)} image tokens after encoding, expected {sum(counts)} for "
            f"{len(images)} image(s) with grids {grid.tolist()}; the tokenizer must keep id {image_id} as one special token"
        )
    return ids, {"pixel_values": pix["pixel_values"], "image_grid_thw": grid}


def _render(tokenizer: Any, content: Any) -> str:
    out = tokenizer.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False)
    return out if isinstance(out, str) else out[0]


def encode_mm_prompts(prompts: Sequence[Prompt], tokenizer: Any, image_processor: Any, model_config: Any
                      ) -> tuple[list[list[int]], list[dict | None]]:
    """`encode_mm_prompt` over a list: (token ids per prompt, mm_inputs per prompt)."""
    pairs = [encode_mm_prompt(p, tokenizer, image_processor, model_config) for p in prompts]
    return [ids for ids, _ in pairs], [mm for _, mm in pairs]
