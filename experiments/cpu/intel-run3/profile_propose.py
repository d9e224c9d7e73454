"""The default job's drafting by op, in situ: each propose() (one step's drafting: the catch-up pass and the chain's
passes, with their picks and confidence stops) from the 50th on under torch's profiler, self CPU time summed per op
and divided by the calls profiled. The profiler's own cost inflates the small ops; the ranking is what to read.
Run: python experiments/cpu/intel-run3/profile_propose.py [overrides]"""
import sys
import time
import torch
from hydra import compose, initialize_config_dir
from specbench.config import CONF_DIR
from specbench.run import run
import specbench.strategies.base as base
overrides = sys.argv[1:]
prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
acc = {}
state = {"n": 0, "t": 0.0, "on": False}
real = base.Proposer.propose
def propose(self, st):
    if not torch.is_inference_mode_enabled() or self.name == "none":
        return real(self, st)
    state["n"] += 1
    if state["n"] < 50:
        return real(self, st)
    t = time.perf_counter()
    with torch.autograd.profiler.profile() as p:
        out = real(self, st)
    state["t"] += time.perf_counter() - t
    for e in p.key_averages():
        a = acc.setdefault(e.key, [0.0, 0])
        a[0] += e.self_cpu_time_total
        a[1] += e.count
    return out
base.Proposer.propose = propose
with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
    cfg = compose(config_name="config", overrides=["logger=none", "baseline=false", "+output_dir=/tmp/prof/out", *overrides])
run(cfg)
n = state["n"] - 49
print("profiled propose calls", n, "ms per call (under the profiler)", 1e3 * state["t"] / n)
tot = sum(v[0] for v in acc.values()) / n
print("sum of self times per call us", round(tot, 1))
for k, (t, c) in sorted(acc.items(), key=lambda kv: -kv[1][0])[:30]:
    print(f"{k:50s} {t / n:8.1f} us/call  n/call={c / n:.1f}")
