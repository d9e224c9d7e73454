"""Side by side, streaming weights from memory as a forward does: float32 GEMM forms for SmolLM2-135M's weight shapes at
1, 2, 4 and 5 rows, and their sum over one forward (30 layers' four products and the LM head), in ms.

    OMP_NUM_THREADS=2 python experiments/cpu/bench_packed_fp32.py

- transposed: `weight @ x.T` (decoder._transposed), transposed_pad: the same on one zero row more for an odd count
  (and on x itself for an even one);
- onednn: oneDNN's float32 linear (torch.ops.mkldnn._linear_pointwise) on the plain weight;
- onednn_packed: the same on the weight in oneDNN's packed layout for that many rows (_reorder_linear_weight), what
  decoder's "packed" form runs (packed for ONEDNN_FP32_PACK_ROWS rows there).
Each form runs over as many copies of the weight as fit in 64 MB (at most 64), best of 6 passes after one untimed.
"onednn==packed": whether the packed and the plain oneDNN product give the same bits.
"""

from __future__ import annotations

import time

import torch

SHAPES = ((960, 576), (3072, 576), (576, 1536), (576, 576), (49152, 576))  # qkv, gate/up, down, o, LM head
ROWS = (1, 2, 4, 5)
LAYERS = 30


def forms(ws: list[torch.Tensor], x: torch.Tensor) -> dict[str, object]:
    rows, k = x.shape
    xp = torch.cat([x, x.new_zeros(1, k)]) if rows % 2 else x
    packed = [torch.ops.mkldnn._reorder_linear_weight(w, rows) for w in ws]
    lin = torch.ops.mkldnn._linear_pointwise
    return {
        "transposed": lambda i: (ws[i] @ x.T).T.contiguous(),
        "transposed_pad": lambda i: (ws[i] @ xp.T)[:, :rows].T.contiguous(),
        "onednn": lambda i: lin(x, ws[i], None, "none", [], ""),
        "onednn_packed": lambda i: lin(x, packed[i], None, "none", [], ""),
    }


def main() -> None:
    total: dict[tuple[int, str], float] = {}
    for n, k in SHAPES:
        copies = max(1, min(64, (64 << 20) // (n * k * 4)))
        ws = [torch.randn(n, k) / 30 for _ in range(copies)]
        for rows in ROWS:
            fs = forms(ws, torch.randn(rows, k))
            times: dict[str, list[float]] = {name: [] for name in fs}
            for _ in range(7):
                for name, f in fs.items():
                    start = time.perf_counter()
                    for i in range(len(ws)):
                        f(i)
                    times[name].append((time.perf_counter() - start) / len(ws) * 1e6)
            best = {name: min(t[1:]) for name, t in times.items()}  # the first pass is untimed
            for name, us in best.items():
                total[(rows, name)] = total.get((rows, name), 0.0) + us * (1 if n == 49152 else LAYERS)
            same = torch.equal(fs["onednn"](0), fs["onednn_packed"](0))
            print((n, k, rows), {name: f"{us:.0f}" for name, us in best.items()}, "us; onednn==packed", same)
    print(f"torch {torch.__version__}, threads: {torch.get_num_threads()}")
    print("| rows | " + " | ".join(forms([torch.zeros(1, 1)], torch.zeros(1, 1))) + " |")
    print("|---" * 5 + "|")
    for rows in ROWS:
        names = [name for r, name in total if r == rows]
        print(f"| {rows} | " + " | ".join(f"{total[(rows, name)] / 1e3:.1f}" for name in names) + " |")


if __name__ == "__main__":
    main()
