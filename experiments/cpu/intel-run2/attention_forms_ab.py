"""The CPU's bit-invariant attention in place, three forms in one process: the pending per-query form (one SDPA call
per token, experiments/gpu/pending/0003) against two forms that put several tokens in one call (grouped-attention.patch
here: "grouped", a key-value head's query heads as the rows of one query block; "heads", each token's query heads as
heads of their own). SmolLM2-135M in bf16, a P-token prefix, a 1-token step, a 4-token chain and the default's 5-node
tree (root, two children, two grandchildren under the first), in turns; per forward, the median of 10 rounds of 3:
the whole forward, the attention (the runner's attention method) and the SDPA calls inside it.

    # a checkout of main with experiments/gpu/pending/*.patch applied and committed, then this folder's patch applied
    # (not committed): the revision is the pending patches' head, the working tree the patch's
    OMP_NUM_THREADS=2 python experiments/cpu/intel-run2/attention_forms_ab.py HEAD 200
"""

from __future__ import annotations

import statistics
import sys
import time
import types
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT), str(ROOT / "experiments" / "cpu" / "intel-run1")]  # this checkout's specbench first
import specbench.models.decoder as dec  # noqa: E402
from specbench.kernels.decode_ref import tree_paths  # noqa: E402
from specbench.models.loading import load_model, resolve_spec  # noqa: E402
from tree_attention_ab import other_decoder  # noqa: E402  (the decoder at a revision, as a module)


def main(revision: str, prefix: int) -> None:
    before = other_decoder(revision)
    spent = {"attention": 0.0, "sdpa": 0.0}

    def timed(fn: callable, key: str) -> callable:
        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            out = fn(*args, **kwargs)
            spent[key] += time.perf_counter() - t0
            return out
        return wrapper

    sdpa = timed(F.scaled_dot_product_attention, "sdpa")
    for module in (before, dec):  # each module's F, with SDPA timed
        module.F = types.SimpleNamespace(**{n: getattr(F, n) for n in dir(F) if not n.startswith("__")})
        module.F.scaled_dot_product_attention = sdpa
    model = load_model(resolve_spec({"name": "smollm2-135m"}, "target"), torch.device("cpu"), torch.bfloat16).model
    tokens = torch.randint(0, 40000, (1, prefix + 8), generator=torch.Generator().manual_seed(0))
    parents = [-1, 0, 0, 1, 1]
    sees = torch.eye(5, dtype=torch.bool)
    for i, parent in enumerate(parents):
        if parent >= 0:
            sees[i] |= sees[parent]
    slots = torch.arange(prefix, prefix + 5)[None]
    path, tree_pos = tree_paths(sees[None], slots), prefix + sees[None].sum(-1) - 1
    forwards = {}
    with torch.inference_mode():
        for name, cls, form, method in (("per-query (0003)", before.DecoderRunner, None, "_attend_per_query"),
                                        ("grouped", dec.DecoderRunner, "grouped", "_attend_planned"),
                                        ("heads", dec.DecoderRunner, "heads", "_attend_planned")):
            runner = cls(model)
            runner.allocate(1, prefix + 64)
            runner(tokens[:, :prefix], torch.arange(prefix)[None], attn_len=prefix)
            setattr(runner, method, timed(getattr(runner, method), "attention"))  # once a runner

            def step(call, form=form):
                if form:
                    dec.ATTENTION_FORM = form
                return call()
            r = runner
            forwards[f"{name}, 1 token"] = lambda r=r, s=step: s(
                lambda: r(tokens[:, prefix : prefix + 1], torch.tensor([[prefix]]), attn_len=prefix + 1))
            forwards[f"{name}, 4-token chain"] = lambda r=r, s=step: s(
                lambda: r(tokens[:, prefix : prefix + 4], torch.arange(prefix, prefix + 4)[None], attn_len=prefix + 4))
            forwards[f"{name}, 5-node tree"] = lambda r=r, s=step: s(
                lambda: r(tokens[:, prefix : prefix + 5], tree_pos, attn_len=prefix + 5, slots=slots, tree_path=path))
        for f in forwards.values():
            f(), f()
        ms: dict[str, list[tuple[float, float, float]]] = {name: [] for name in forwards}
        for _ in range(10):
            for name, f in forwards.items():
                spent.update(attention=0.0, sdpa=0.0)
                t0 = time.perf_counter()
                f(), f(), f()
                ms[name].append(((time.perf_counter() - t0) / 3e-3, spent["attention"] / 3e-3, spent["sdpa"] / 3e-3))
    print(f"prefix {prefix}, median of 10 rounds, ms a forward: whole / attention / SDPA calls")
    for name, m in ms.items():
        print(f"{name}: {statistics.median(x[0] for x in m):.2f} / {statistics.median(x[1] for x in m):.2f} / "
              f"{statistics.median(x[2] for x in m):.2f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "HEAD", int(sys.argv[2]) if len(sys.argv) > 2 else 200)
