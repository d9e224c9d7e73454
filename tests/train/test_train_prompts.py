"""specbench.train.prompts: training prompt sources and the contamination check; data.path as several files."""

from __future__ import annotations

import ast
import gzip
import json

import pytest
import torch

from specbench_testing import tiny
from specbench.data import Prompt
from specbench.errors import ConfigError
from specbench.models.loading import LoadedModel
from specbench.train.data import training_prompts
from specbench.train.prompts import (
    OPENERS,
    clean_query,
    drop_contaminated,
    magpie_prefix,
    stdlib_code_prompts,
    synthesize_magpie,
    write_prompt_set,
)

EVAL = ["Compose an engaging travel blog post about a recent trip to Hawaii, highlighting cultural experiences "
        "and must-see attractions.", "def add(a, b):\n    \"\"\"Return the sum of a and b.\"\"\"\n"]


def _p(text: str) -> Prompt:
    return Prompt(id=text[:10], text=text)


def test_a_shared_13_word_run_is_dropped_and_a_paraphrase_is_kept():
    copied = _p("Please help: compose an engaging travel blog post about a recent trip to Hawaii, highlighting "
                "cultural experiences, thanks")
    paraphrase = _p("Write a travel blog post on my Hawaii holiday and the culture I saw there, with the sights to see.")
    short_inside = _p("must-see attractions")  # fewer than 13 words, and inside an evaluation text
    short_outside = _p("a trip to Mars")
    kept, dropped = drop_contaminated([copied, paraphrase, short_inside, short_outside], EVAL)
    assert dropped == [copied, short_inside] and kept == [paraphrase, short_outside]
    # the shared run is 15 words long: a 30-gram test lets the copy through
    assert drop_contaminated([copied], EVAL, n=30)[0] == [copied]


def test_stdlib_code_prompts_are_raw_signatures_with_docstrings_in_seeded_order():
    first = stdlib_code_prompts(7, seed=3)
    assert [p.id for p in first] == [p.id for p in stdlib_code_prompts(7, seed=3)]
    assert [p.id for p in first] != [p.id for p in stdlib_code_prompts(7, seed=4)]
    for p in first:
        assert not p.chat and p.category == "code" and p.text.startswith(("def ", "@")) and p.text.endswith("\n")
        (node,) = ast.parse(p.text).body  # a whole def whose body, so far, is its docstring
        assert isinstance(node, ast.FunctionDef) and ast.get_docstring(node)


def test_clean_query_drops_short_and_looping_text():
    assert clean_query("  Why is the sky blue at noon?  ") == "Why is the sky blue at noon?"
    assert clean_query("Hi there") is None
    assert clean_query(" ".join(["the cat"] * 30)) is None


class _CharTokenizer:
    """A scripted chat tokenizer over the tiny models' 101 ids: 0-9 special (they end a turn), 10-66 one
    character each, 67-100 a space (so random ids read as words)."""

    chat_template = "scripted"
    eos_token_id = 0
    ALPHA = " abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ<>|+"

    def apply_chat_template(self, messages, tokenize=False, **_):
        assert not tokenize
        return "".join(f"<{m['role']}>{m['content']}|" for m in messages)

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [10 + self.ALPHA.index(c) for c in text]}

    def decode(self, ids, skip_special_tokens=True):
        return "".join(self.ALPHA[i - 10] if i < 67 else " " for i in ids if i >= 10)


def test_magpie_prefix_is_the_template_up_to_the_user_text():
    tok = _CharTokenizer()
    assert magpie_prefix(tok) == tok("<user>")["input_ids"]
    class NoTemplate:
        chat_template = None
    with pytest.raises(ConfigError, match="chat template"):
        magpie_prefix(NoTemplate())


def test_synthesize_magpie_samples_distinct_requests_and_steers_them_with_openers():
    base = tiny("tiny-llama")
    model = base.model
    model.generation_config.eos_token_id = list(range(10))  # ids 0-9 end a request
    target = LoadedModel(spec=base.spec, model=model, tokenizer=_CharTokenizer())
    torch.manual_seed(0)
    plain = synthesize_magpie(target, 5, max_new_tokens=40, batch_size=8, seed=0, progress=False)
    assert len(plain) == 5 and len({p.text for p in plain}) == 5
    assert all(p.category == "magpie" and p.chat for p in plain)
    steered = synthesize_magpie(target, 5, max_new_tokens=40, batch_size=8, seed=0, openers=("Write", "Solve"),
                                progress=False)
    assert all(p.text.startswith(("Write", "Solve")) and p.category == "magpie-steered" for p in steered)
    assert synthesize_magpie(target, 5, max_new_tokens=40, batch_size=8, seed=0, time_budget_s=0, progress=False) == []
    assert "Write" in OPENERS


def test_training_prompts_reads_several_files_gzip_and_the_chat_flag(tmp_path):
    spec = tmp_path / "spec.jsonl"
    spec.write_text("\n".join(json.dumps(r) for r in [
        {"question_id": 1, "category": "qa", "turns": ["Why?", "And then?"]},
        {"question_id": 2, "category": "writing", "turns": ["an MT-Bench category: left out"]}]))
    mine = tmp_path / "mine.jsonl.gz"
    write_prompt_set(mine, [Prompt("a", "Solve x + 1 = 3.", "magpie"), Prompt("b", "def f():\n", "code", chat=False)])
    with gzip.open(mine, "rt") as f:
        assert len(f.read().splitlines()) == 2
    got = training_prompts([str(spec), str(mine)])
    assert [(p.text, p.chat) for p in got] == [("Why?", True), ("Solve x + 1 = 3.", True), ("def f():\n", False)]
    assert len({p.id for p in got}) == 3
    with pytest.raises(ConfigError, match="does not exist"):
        training_prompts([str(spec), str(tmp_path / "missing.jsonl")])
