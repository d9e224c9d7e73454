"""The AL gates of tests/al_gate.json at several sampling seeds, one process, each seed a run() of the gate's own
overrides plus sampling.seed (what tests/test_al_gate.py does for a gate with `seeds`). Prints each seed's AL and the
mean. Twenty-sixth session: the T=1 gates at seeds 0-7, main and pending 0002-0003, at 1 and 2 threads:
    for tree in <main checkout> <checkout with the patches>; do for t in 1 2; do
      OMP_NUM_THREADS=$t PYTHONPATH=$tree python experiments/cpu/amd-run13/gate_seeds.py tests/al_gate.json \
        tree-t1,default-t1 0,1,2,3,4,5,6,7; done; done          (gate_seeds.log: those four runs)"""
import json
import sys
import tempfile
import time
from pathlib import Path

from hydra import compose, initialize_config_dir

from specbench.config import CONF_DIR
from specbench.run import run

gates = json.loads(Path(sys.argv[1]).read_text())["gates"]
names = sys.argv[2].split(",")
seeds = [int(s) for s in sys.argv[3].split(",")]
for g in gates:
    if g["name"] not in names:
        continue
    als = []
    for seed in seeds:
        t = time.time()
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="config",
                          overrides=[*g["overrides"], f"sampling.seed={seed}", f"+output_dir={tempfile.mkdtemp()}"])
        als.append(run(cfg).results["strategy"]["acceptance_length"])
        print(g["name"], seed, f"AL {als[-1]:.4f}", f"{time.time() - t:.0f}s", flush=True)
    print(g["name"], "MEAN", f"{sum(als) / len(als):.4f}", " ".join(f"{a:.4f}" for a in als), flush=True)
