"""The default's tree at T > 0 with pending patch 0003 (trees draw over the head's 8192 draft-vocabulary columns), its
Exp(1) noise drawn over all 49,152 target ids and gathered at the columns, as main draws it: then the patched code
draws exactly main's nodes, so its output must be main's token for token (the arithmetic is the same, only the noise
differs). Run with the patched checkout on PYTHONPATH, then compare outputs.jsonl with main's run of the same command:
    python experiments/cpu/intel-run4/same_noise.py strategy=eagle_tree dataset=mt-bench dataset.num_prompts=null \
      max_new_tokens=64 baseline=false logger=none engine.warmup=false sampling.temperature=1 engine.batch_size=8 \
      sampling.seed=0 output_dir=<dir>
2026-12-05 (twenty-fifth session): 80 of 80 outputs identical to main's, AL 1.8040 both."""
import runpy
import sys

import specbench.strategies.trees as trees
from specbench.verify import exp_noise

IDS: dict = {}
expand = trees.expand_dynamic_sampled


def expand_recording_ids(feed, root, *args, **kwargs):
    IDS["ids"], IDS["V"] = root.vocab_ids, root.vocab_size
    return expand(feed, root, *args, **kwargs)


def draw_order(q, n, generator):  # trees.draw_order, its noise drawn over every target id
    ids = IDS.get("ids")
    if ids is not None and q.shape[-1] == ids.shape[0]:
        e = exp_noise(q.shape[:-1] + (IDS["V"],), generator, q.device)[..., ids]
    else:
        e = exp_noise(q.shape, generator, q.device)
    return (q.log() - e.log()).topk(n, dim=-1).indices


trees.expand_dynamic_sampled = expand_recording_ids
trees.draw_order = draw_order
sys.argv = ["specbench"] + sys.argv[1:]
runpy.run_module("specbench", run_name="__main__")
