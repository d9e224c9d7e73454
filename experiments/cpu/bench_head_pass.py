"""One EAGLE draft pass of the CPU default (the shipped head over SmolLM2-135M, float32, its float16 weight copies, one
token at a 300-token prefix, batch 1): the head's forward and logits as EagleProposer runs them, with and without
`EagleHead.prepare_inference` (q/k/v and gate/up as one product each, the rotary looked up in a table made by
allocate, the draft vocabulary's target ids computed once), alternating call by call in one process; prints the
median and p10 ms per pass of each, and whether their logits are equal.

    OMP_NUM_THREADS=2 python experiments/cpu/bench_head_pass.py
"""

from __future__ import annotations

import time

import torch

from specbench.models import decoder as dec
from specbench.models.loading import load_model, resolve_spec
from specbench.strategies.checkpoints import resolve_checkpoint
from specbench.strategies.eagle import load_eagle_head

PREFIX, PASSES, ROUNDS = 300, 600, 3


def main() -> None:
    torch.manual_seed(0)
    torch.set_grad_enabled(False)
    spec = resolve_spec({"name": "smollm2-135m"}, "target")
    model = load_model(spec, torch.device("cpu"), torch.float32).model
    head = load_eagle_head(resolve_checkpoint("auto", "eagle", spec), model, spec.label)
    fused = head.prepare_inference()
    for module in (head, fused):
        dec.pack_linears(module, half_weights=True)
    head.allocate(1, PREFIX + 16, torch.device("cpu"), torch.float32)
    dec.time_cpu_forms(head, fused)
    head(torch.randn(1, PREFIX, 576), torch.randint(0, 40000, (1, PREFIX)), torch.arange(PREFIX)[None],
         use_cache=True, attn_len=PREFIX + 4)
    feature, token, pos = torch.randn(1, 1, 576), torch.randint(0, 40000, (1, 1)), torch.tensor([[PREFIX]])
    tables = head.rope_cos, head.rope_sin, head.vocab_ids

    def one(prepared: bool) -> torch.Tensor:
        head.fused = (fused,) if prepared else ()
        head.rope_cos, head.rope_sin, head.vocab_ids = tables if prepared else (None, None, None)
        out = head(feature, token, pos, use_cache=True, attn_len=PREFIX + 4)
        return head.logits(out[:, -1:]).float()

    a, b = one(False), one(True)
    finite = torch.isfinite(a)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; logits equal: "
          f"{bool(torch.equal(finite, torch.isfinite(b)) and torch.equal(a[finite], b[finite]))}")
    print("| round | separate: median / p10 ms | prepared: median / p10 ms | ratio of medians |")
    print("| --- | --- | --- | --- |")
    for r in range(ROUNDS):
        times: dict[bool, list[float]] = {False: [], True: []}
        for i in range(PASSES):
            for prepared in ((False, True) if i % 2 else (True, False)):
                start = time.perf_counter()
                one(prepared)
                times[prepared].append((time.perf_counter() - start) * 1e3)
        stats = {p: (sorted(t)[len(t) // 2], sorted(t)[len(t) // 10]) for p, t in times.items()}
        (a, a10), (b, b10) = stats[False], stats[True]
        print(f"| {r + 1} | {a:.3f} / {a10:.3f} | {b:.3f} / {b10:.3f} | {a / b:.2f} |")


if __name__ == "__main__":
    main()
