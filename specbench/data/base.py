"""What every prompt source shares: the `Prompt` record, its encoding with a tokenizer, and the row
readers (jsonl files, HF datasets).

Text sets (`specbench.data.prompts`), image sets (`specbench.data.images`) and training prompts
(`specbench.train`) build on this module; it imports none of them, so the sources never import
each other to reach a shared helper.
"""

from __future__ import annotations

import gzip
import importlib
import json
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbench.errors import ConfigError


@dataclass(frozen=True)
class Prompt:
    """One request of a prompt set."""

    id: str  # stable across runs, e.g. "mt-bench/81", "humaneval/HumanEval/0"
    text: str  # the user turn fed to the model
    category: str | None = None  # MT-Bench / Spec-Bench category; "code" for HumanEval
    chat: bool = True  # apply the tokenizer's chat template when it has one (HumanEval: raw completion)


def encode_prompt(prompt: Prompt, tokenizer: Any) -> list[int]:
    """Token ids of one request: chat-templated (with the assistant's generation prompt) when
    `prompt.chat` and the tokenizer has a chat template, else plain with the tokenizer's special tokens."""
    if prompt.chat and getattr(tokenizer, "chat_template", None):
        out = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt.text}], add_generation_prompt=True, tokenize=True
        )
    else:
        out = tokenizer(prompt.text, add_special_tokens=True)
    return as_id_list(out)


def as_id_list(out: Any) -> list[int]:
    """Plain list[int] from what a tokenizer returns: BatchEncoding/dict, tensor, list, or [[...]]."""
    if isinstance(out, Mapping) or hasattr(out, "keys"):
        out = out["input_ids"]
    if hasattr(out, "tolist"):
        out = out.tolist()
    out = list(out)
    if out and isinstance(out[0], (list, tuple)):
        if len(out) != 1:
            raise ValueError(f"expected the ids of one sequence, got a batch of {len(out)}")
        out = list(out[0])
    return [int(i) for i in out]


def read_jsonl(path: Path) -> Iterator[tuple[dict[str, Any], str, int]]:
    """(row, "file:line", line number) for each non-blank line; gzip when the name ends in .gz. Every failure to
    read the file (not UTF-8, a broken gzip stream, unreadable) is a ConfigError naming the file and the line."""
    opener = gzip.open if path.suffix == ".gz" else open
    lineno = 0
    try:
        with opener(path, "rb") as f:
            for lineno, raw in enumerate(f, start=1):
                where = f"{path}:{lineno}"
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise ConfigError(f"{where} is not UTF-8 text (byte {raw[e.start]:#04x} at column {e.start + 1}); a jsonl "
                                      f"prompt file holds one JSON object per line, UTF-8 encoded: re-save it as UTF-8") from None
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ConfigError(f"{where} is not valid JSON ({e.msg}); a jsonl file holds one JSON object per line") from e
                if not isinstance(row, dict):
                    raise ConfigError(f"{where} holds a {type(row).__name__}, not a JSON object")
                yield row, where, lineno
    except (OSError, EOFError, zlib.error) as e:  # unreadable, or a broken/truncated gzip stream (BadGzipFile is an OSError)
        gz = " gzip-compressed" if path.suffix == ".gz" else ""
        raise ConfigError(f"{path} could not be read after line {lineno} ({type(e).__name__}: {e}); allowed: a{gz} jsonl "
                          f"file, one UTF-8 JSON object per line") from None


def hf_rows(hf_name: str, split: str) -> Iterator[tuple[dict[str, Any], str, int]]:
    """(row, "name[split]:index", index) for each row. Loads eagerly, so errors raise here."""
    try:
        datasets = importlib.import_module("datasets")  # optional: not a dependency of specbench
    except ModuleNotFoundError as e:
        raise ConfigError(f"loading the HF dataset {hf_name!r} needs the `datasets` package: pip install datasets") from e
    try:
        ds = datasets.load_dataset(hf_name, split=split)
    except Exception as e:  # no network, no such dataset or split: say which setting to check
        raise ConfigError(f"could not load the HF dataset {hf_name!r} split {split!r} (dataset.hf_name, dataset.split): {e}") from e
    return ((dict(row), f"{hf_name}[{split}]:{i}", i) for i, row in enumerate(ds))
