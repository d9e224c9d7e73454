"""What a draft pass spends on the shipped head's logits outside its products, one row (us a call, best of rounds):
the 8192 draft-vocabulary logits spread over the 49,152 target ids, then argmax and the confidence softmax there
(main's chain), against the same on the 8192 columns with the pick mapped to its target id (pending patch 0002);
at T=1, q over all ids then Exp(1) noise and the draw, against q and the draw over the columns, q put back on the ids.
Run: python experiments/cpu/intel-run4/logits_forms.py"""
import sys
from pathlib import Path

import torch

from specbench.verify import SamplingParams, exp_noise, logits_to_probs, sample_from

sys.path.insert(0, str(Path(__file__).parents[1]))  # experiments/cpu
from bench_attention_rows import best_us  # noqa: E402

torch.manual_seed(0)
V, VD = 49152, 8192
ids = torch.randperm(V)[:VD].sort().values
small = torch.randn(1, 1, VD, dtype=torch.bfloat16)
sp = SamplingParams(temperature=1.0)
g = torch.Generator().manual_seed(0)


def greedy_full():
    full = small.new_full((1, 1, V), float("-inf")).index_copy_(-1, ids, small).float()
    d = full.max(-1).indices
    return d, torch.softmax(full, -1).gather(-1, d[..., None])


def greedy_columns():
    s = small.float()
    col = s.max(-1).indices
    return ids[col], torch.softmax(s, -1).gather(-1, col[..., None])


def sampled_full():
    full = small.new_full((1, 1, V), float("-inf")).index_copy_(-1, ids, small).float()
    q = logits_to_probs(full, sp)
    return sample_from(q, exp_noise(q.shape, g, "cpu")), q


def sampled_columns():
    qs = logits_to_probs(small.float(), sp)
    col = sample_from(qs, exp_noise(qs.shape, g, "cpu"))
    return ids[col], qs.new_zeros((1, 1, V)).index_copy_(-1, ids, qs)


a, b = greedy_full(), greedy_columns()
print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; greedy picks equal: {torch.equal(a[0], b[0])}, "
      f"confidence max difference {float((a[1] - b[1]).abs().max()):.2e}")
for name, f in [("T=0, over the 49,152 ids", greedy_full), ("T=0, over the 8192 columns", greedy_columns),
                ("T=1, over the 49,152 ids", sampled_full), ("T=1, over the 8192 columns", sampled_columns)]:
    print(f"{name:28s} {best_us(f):7.1f} us")
