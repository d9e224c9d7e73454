"""On a float32 target (the AMD EPYC, which has AVX512-BF16 but whose bf16 row-invariance probe fails, so the target
runs float32): the shipped EAGLE head in bfloat16 with main's int8 products (decoder.Int8Linear), its input feature
cast to bf16 and its output feature kept in bf16. A drafter's numbers only shape its proposals, so the output stays
the target's; what changes is the draft's cost and, through its rounding, its acceptance. BF16=0 runs main's float32
head (its float16 weight copies) through the same script. In turns, one at a time:
    for i in 1 0 1 0; do BF16=$i python experiments/cpu/amd-run13/bf16_head.py logger=none strategy=eagle_tree; done"""
import functools
import os
import runpy
import sys

import torch

import specbench.strategies.eagle as eagle

BF16 = os.environ.get("BF16", "1") == "1"
pack = eagle.pack_linears


def pack_in_bf16(module, **kwargs):  # the head's own parameters, then the fused q/k/v and gate/up (its second call)
    module.to(torch.bfloat16)  # the target's embedding, norm, rotary and LM head sit in a tuple: they stay float32
    return pack(module, **{**kwargs, "int8": True})


forward = eagle.EagleHead.forward


@functools.wraps(forward)
def forward_in_bf16(self, feature, *args, **kwargs):
    out = forward(self, feature.to(self.dtype), *args, **kwargs)  # the target's final norm returns float32
    return (out[0].to(self.dtype), out[1]) if isinstance(out, tuple) else out.to(self.dtype)


if BF16:
    eagle.pack_linears = pack_in_bf16
    eagle.EagleHead.forward = forward_in_bf16
sys.argv = ["specbench"] + sys.argv[1:]
runpy.run_module("specbench", run_name="__main__")
