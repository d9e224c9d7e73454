"""The shipped EAGLE head's six products (SmolLM2-135M: fc, fused q/k/v, o, fused gate/up, down, the 8192-id draft LM
head) for one row on the CPU, each form alone and in cache (best of 5 rounds of 300 calls, us a call: `best_us` of experiments/cpu/bench_attention_rows.py): bf16 F.linear,
float32 F.linear, oneDNN's bf16 product on a packed weight (what the head ran before; decoder._packed_linear),
torch's weight-only int8 product with bf16 and with float32 activations (decoder.Int8Linear takes the bf16 one), and
int4 with groups of 32 and 64 for three of them. Then the int8 product's rows and threads: the same bits for a row
whichever rows share the call (1..40) and at 1 and 2 threads. Run: python experiments/cpu/intel-run3/int8_products.py"""
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from specbench.models.decoder import int8_rows

sys.path.insert(0, str(Path(__file__).parents[1]))  # experiments/cpu
from bench_attention_rows import best_us  # noqa: E402  (best of 5 rounds, us a call)
from int4_weights import int4  # noqa: E402

SHAPES = {"fc": (576, 1152), "qkv": (960, 576), "o": (576, 576), "gate_up": (3072, 576), "down": (576, 1536),
          "lm_head": (8192, 576)}


torch.manual_seed(0)
total: dict[str, float] = {}
print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
for name, (n, k) in SHAPES.items():
    w = torch.randn(n, k) / k**0.5
    x = torch.randn(1, k)
    wb, xb = w.bfloat16(), x.bfloat16()
    packed = torch.ops.mkldnn._reorder_linear_weight(wb, 16)
    q, s = int8_rows(wb)
    row = {"bf16 F.linear": best_us(lambda: F.linear(xb, wb)),
           "fp32 F.linear": best_us(lambda: F.linear(x, w)),
           "bf16 packed (before)": best_us(lambda: torch.ops.mkldnn._linear_pointwise(xb, packed, None, "none", [], "")),
           "int8, bf16 x (now)": best_us(lambda: torch._weight_int8pack_mm(xb, q, s)),
           "int8, fp32 x": best_us(lambda: torch._weight_int8pack_mm(x, q, s.float()))}
    for key, v in row.items():
        total[key] = total.get(key, 0) + v
    print(f"{name:8s} {n:5d} x {k:4d} " + "  ".join(f"{key} {v:7.1f}" for key, v in row.items()))
    if name in ("lm_head", "gate_up", "down"):
        for gs in (32, 64):
            p4, sz, err = int4(w, gs)
            print(f"         int4 groups of {gs}: {best_us(lambda: torch._weight_int4pack_mm_for_cpu(xb, p4, gs, sz)):7.1f} us,"
                  f" relative weight error {err:.3f} (int8: "
                  f"{float((q.float() * s.float()[:, None] - w).norm() / w.norm()):.4f})")
print("a pass, the six products: " + "  ".join(f"{key} {v:.0f} us" for key, v in total.items()))

same_rows, same_threads = True, True
for name, (n, k) in SHAPES.items():
    q, s = int8_rows(torch.randn(n, k) / k**0.5)
    x = torch.randn(40, k).bfloat16()
    out = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        out[threads] = full = torch._weight_int8pack_mm(x, q, s)
        alone = torch.cat([torch._weight_int8pack_mm(x[i : i + 1], q, s) for i in range(40)])
        same_rows &= torch.equal(full, alone) and all(torch.equal(torch._weight_int8pack_mm(x[:m], q, s), full[:m])
                                                      for m in (2, 3, 5, 17, 33))
    same_threads &= torch.equal(out[1], out[2])
print(f"int8 product: a row's bits the same in calls of 1..40 rows: {same_rows}; at 1 and 2 threads: {same_threads}")
