"""On a GPU: is continuous batching's T=0 output static batch-1's, bit for bit, and does the answer depend on the
process? Runs the 8B + 0.6B pair (random weights) through the CLI: static batch 1 in this process (run()) and in a
subprocess, then continuous batching over 4 slots and over 1 slot with a stop token, and prints where outputs differ.
    python experiments/continuous/check_exact.py OUT"""

import json
import subprocess
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir

from specbench.run import CONF_DIR, run

out = Path(sys.argv[1])
COMMON = ["logger=none", "dataset=builtin", "max_new_tokens=32", "target=qwen3-8b-random", "draft=qwen3-0.6b-random",
          "strategy=draft_model", "strategy.k=3"]


def outputs(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "outputs.jsonl").read_text().splitlines()]


def cli(name: str, *overrides: str) -> list[dict]:
    proc = subprocess.run([sys.executable, "-m", "specbench", *COMMON, *overrides, f"hydra.run.dir={out / name}"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return outputs(out / name)


with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
    cfg = compose(config_name="config", overrides=[*COMMON, "engine.ignore_eos=true", f"+output_dir={out / 'inproc'}"])
inproc = run(cfg).outputs
sub = cli("sub", "engine.ignore_eos=true")
full = [o["baseline_output_token_ids"] for o in inproc]
same = sum(a["baseline_output_token_ids"] == b["baseline_output_token_ids"] for a, b in zip(inproc, sub))
print("static b1, in-process vs subprocess: baseline equal on", same, "of", len(sub))
counts: dict[int, int] = {}
for o in full:
    for t in set(o[1:-2]):
        counts[t] = counts.get(t, 0) + 1
stop = max(counts, key=counts.get)
expected = [o[: o.index(stop) + 1] if stop in o else o for o in full]
print("stop", stop, "expected lengths", [len(e) for e in expected])
for name, extra in (("cont-b4", ["engine.scheduler=continuous", "engine.batch_size=4"]),
                    ("cont-b1", ["engine.scheduler=continuous", "engine.batch_size=1"])):
    got = cli(name, f"engine.stop_token_ids=[{stop}]", *extra)
    for key, metrics in (("baseline_output_token_ids", "baseline_metrics"), ("output_token_ids", "metrics")):
        bad = [(i, e, o[key], o[metrics]["finished_by"]) for i, (e, o) in enumerate(zip(expected, got)) if o[key] != e]
        print(name, key, "equal on", len(got) - len(bad), "of", len(got), bad[:2])
