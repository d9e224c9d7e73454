"""argmax over the last dim on the CPU: x.argmax(-1) against x.max(-1).indices (verify.argmax_last), us a call
(best of 5 rounds of 2000, `best_us` of experiments/cpu/bench_attention_rows.py), at the shapes a SmolLM2-135M step meets: [1, T, 49152] for the target's 1..5-token
forwards, [4, 4, 49152] for a batch, [1, 1, 8192] for a reduced draft vocabulary. Run:
python experiments/cpu/intel-run3/argmax_forms.py"""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parents[1]))  # experiments/cpu
from bench_attention_rows import best_us  # noqa: E402  (best of 5 rounds, us a call)


print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
for shape in [(1, 1, 49152), (1, 3, 49152), (1, 5, 49152), (4, 4, 49152), (1, 1, 8192), (1, 1, 101)]:
    x = torch.randn(shape)
    print(f"{str(shape):18s} argmax {best_us(lambda: x.argmax(-1), 2000):6.1f}  max(-1).indices {best_us(lambda: x.max(-1).indices, 2000):6.1f}")
