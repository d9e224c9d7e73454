"""Whole forwards of SmolLM2-135M (packaged weights, float32, batch 1, a 300-token prefix) at 1, 4, 6 and 8 tokens
under tables of CPU product forms, alternating forward by forward in one process: "auto" as chosen without the
"rows" form (our own product, kernels/cpu_rows.py), "auto" with it, and every product on "rows". Medians of ROUNDS rounds, best of 2 a round, and each width's ratio to
the same table's 1-token forward; whether each table's logits for a width equal the same table's logits for those
tokens computed one token at a time ("row-invariant").

    OMP_NUM_THREADS=2 python experiments/cpu/forward_rows.py
"""

from __future__ import annotations

import statistics
import time

import torch

import specbench.models.decoder as dec
from specbench.models.loading import load_model, resolve_spec

PREFIX, WIDTHS, ROUNDS = 300, (1, 4, 6, 8), 8


def main() -> None:
    model = load_model(resolve_spec({"name": "smollm2-135m"}, "target"), torch.device("cpu"), torch.float32).model
    runner = dec.DecoderRunner(model)
    runner.allocate(1, 512)
    g = torch.Generator().manual_seed(0)
    tables: dict[str, dict] = {}
    with torch.inference_mode():
        runner(torch.randint(0, 40000, (1, PREFIX), generator=g), torch.arange(PREFIX)[None], attn_len=PREFIX)
        inputs = {t: torch.randint(0, 40000, (1, t), generator=g) for t in WIDTHS}

        def forward(t: int) -> tuple[float, torch.Tensor]:
            start = time.perf_counter()
            out = runner(inputs[t], torch.arange(PREFIX, PREFIX + t)[None], attn_len=PREFIX + t)
            return time.perf_counter() - start, out.logits

        def one_at_a_time(t: int) -> torch.Tensor:  # the same tokens, each in its own 1-token forward
            return torch.cat([runner(inputs[t][:, i : i + 1], torch.tensor([[PREFIX + i]]), attn_len=PREFIX + i + 1)
                              .logits for i in range(t)], dim=1)

        for name, on in (("auto without", False), ("auto with", True)):
            dec.ROWS_FORM = on
            dec._CPU_FORMS = tables[name] = {}
            start = time.perf_counter()
            for t in WIDTHS:  # the forms are timed on first use
                forward(t)
            print(f"{name}: forms timed in {time.perf_counter() - start:.1f} s", flush=True)
        tables["all rows"] = {key[:3] + (r, False): ("rows", r) for key in tables["auto with"] for r in WIDTHS}
        times = {(t, name): [] for t in WIDTHS for name in tables}
        same = {}
        for name, table in tables.items():
            dec._CPU_FORMS = table
            for t in WIDTHS:
                same[t, name] = torch.equal(forward(t)[1], one_at_a_time(t))
        for _ in range(ROUNDS):
            for t in WIDTHS:
                for name, table in tables.items():
                    dec._CPU_FORMS = table
                    times[t, name].append(min(forward(t)[0] for _ in range(2)))
    for name, table in tables.items():
        print(name, {f"{n}x{k}": {r: f"{f}/{c}" for (n2, k2, _, r, _h), (f, c) in table.items() if (n2, k2) == (n, k)}
                     for n, k in sorted({key[:2] for key in table})})
    for t in WIDTHS:
        print(f"{t} tokens: " + "   ".join(
            f"{name} {statistics.median(times[t, name]) * 1e3:5.1f} ms "
            f"({statistics.median(times[t, name]) / statistics.median(times[1, name]):.2f}x"
            f"{', row-invariant' if same[t, name] else ''})" for name in tables))
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}")


if __name__ == "__main__":
    main()
