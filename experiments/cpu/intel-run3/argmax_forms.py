"""argmax over the last dim on the CPU: x.argmax(-1) against x.max(-1).indices (verify.argmax_last), us a call
(min of 5 rounds of 2000), at the shapes a SmolLM2-135M step meets: [1, T, 49152] for the target's 1..5-token
forwards, [4, 4, 49152] for a batch, [1, 1, 8192] for a reduced draft vocabulary. Run:
python experiments/cpu/intel-run3/argmax_forms.py"""
import time

import torch


def bench(f, n=2000):
    for _ in range(50):
        f()
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            f()
        best = min(best, (time.perf_counter() - t) / n * 1e6)
    return best


print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
for shape in [(1, 1, 49152), (1, 3, 49152), (1, 5, 49152), (4, 4, 49152), (1, 1, 8192), (1, 1, 101)]:
    x = torch.randn(shape)
    print(f"{str(shape):18s} argmax {bench(lambda: x.argmax(-1)):6.1f}  max(-1).indices {bench(lambda: x.max(-1).indices):6.1f}")
