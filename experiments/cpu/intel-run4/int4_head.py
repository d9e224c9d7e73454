"""The default job with the shipped EAGLE head's draft LM head (8192 x 576) on int4 weights in groups of GS (32 by
default; torch's `_weight_int4pack_mm_for_cpu`, asymmetric, bf16 scales and zeros) instead of main's int8 rows: half
the LM head's bytes, ~8% weight error. INT4=0 runs main's head through the same script. In turns:
    for i in 1 0 1 0; do INT4=$i python experiments/cpu/intel-run4/int4_head.py output_dir=/tmp/int4-$i; done"""
import functools
import os
import runpy
import sys
from pathlib import Path

import torch

import specbench.strategies.eagle as eagle

sys.path.insert(0, str(Path(__file__).parents[1]))  # experiments/cpu
from int4_weights import int4  # noqa: E402

GS = int(os.environ.get("GS", "32"))


class Int4Head(torch.nn.Module):
    def __init__(self, lin: torch.nn.Linear) -> None:
        super().__init__()
        self.packed, self.scales_zeros, _ = int4(lin.weight.detach(), GS)
        self.weight = lin.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch._weight_int4pack_mm_for_cpu(x.reshape(-1, x.shape[-1]).contiguous(), self.packed, GS, self.scales_zeros)
        return y.view(*x.shape[:-1], -1)


init = eagle.EagleProposer.__init__


@functools.wraps(init)  # the strategy's settings are read from __init__'s signature
def patched(self, *args, **kwargs):
    init(self, *args, **kwargs)
    if os.environ.get("INT4", "1") == "1":
        self.head.draft_lm_head = Int4Head(self.head.draft_lm_head)


eagle.EagleProposer.__init__ = patched
sys.argv = ["specbench", "logger=none"] + sys.argv[1:]
runpy.run_module("specbench", run_name="__main__")
