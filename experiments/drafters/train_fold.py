"""A probe, not a change: `python -m specbench.train <overrides>` with the EAGLE head's masked attention folded on CUDA
in every dtype (decoder.masked_attention folds only float32 there). Under `train.precision=bfloat16` the head's q, k
and v are bfloat16, so the call goes unfolded to SDPA with enable_gqa and a boolean mask; with cuDNN left out
(train/loop.autocast) only the math backend takes that, and the fifty-first session's profile
(train_speed/bf16-run2/) spent 70 of 79 GPU ms a step in its bmm and softmax. Folded, the memory-efficient kernel
takes it, as in float32. train_speed.sh's side `bf16-fold` runs this.

Since af5881e main folds so itself while cuDNN's attention is off, as under train.precision=bfloat16, so this probe
now trains as `python -m specbench.train` does (train_speed/main-bf16-run1/); it stays to rerun fold-run1's command.

    python3 experiments/drafters/train_fold.py <the overrides of python -m specbench.train>
"""

from __future__ import annotations

import functools
import runpy
import sys

from specbench.models import decoder
from specbench.strategies import eagle


@functools.wraps(decoder.masked_attention)
def _folded(q, k, v, mask, scale, fold=None):
    return decoder.masked_attention(q, k, v, mask, scale, fold=q.device.type == "cuda" if fold is None else fold)


eagle.masked_attention = _folded
sys.argv = ["specbench.train", *sys.argv[1:]]
runpy.run_module("specbench.train", run_name="__main__", alter_sys=True)
