#!/usr/bin/env bash
# Why did two EAGLE trainings side by side on one H100 run at 1.9 steps a second each, against 20-24 for one alone
# (experiments/drafters/README.md, "GRIFFIN's token alignment")? Times the same training (wide's recipe: k-unroll 3,
# draft vocabulary 8192, soft labels, batch 32) on a random-weight SmolLM2-135M (the same shapes; no GGUF to carry)
# alone, then two at once, then two at once with 8 torch threads each (OMP_NUM_THREADS), each for TRAIN_S seconds,
# and prints each run's steps a second from its metrics.jsonl. On the device (carry .whl):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
#   PYTHONPATH=/tmp/site:$PWD bash experiments/drafters/probe_concurrent.sh "$OUT"
# SMOKE=1 runs it on the CPU at toy sizes.
set -u
out=${1:-/tmp/probe_concurrent}; mkdir -p "$out"
R=${R:-/tmp/probe_concurrent_run}; rm -rf "$R/solo" "$R/a1" "$R/a2" "$R/b1" "$R/b2"; mkdir -p "$R"
export PYTHONUNBUFFERED=1 WANDB_MODE=disabled
if [ "${SMOKE:-0}" = 1 ]; then dev=cpu; n=16; bs=4; tb=4; steps=20; T=${TRAIN_S:-20}; else dev=cuda; n=1536; bs=384; tb=32; steps=100000; T=${TRAIN_S:-45}; fi
args="strategy=eagle target=smollm2-135m-random device=$dev logger=none seed=0 strategy.unroll=3 strategy.draft_vocab=8192
  strategy.soft_labels=true data.path=experiments/drafters/prompts/magpie_smollm2-135m.jsonl.gz data.num_prompts=$n
  data.batch_size=$bs data.max_new_tokens=128 data.samples=2 data.temperature=0.7 data.cache_dir=$R/data
  train.batch_size=$tb train.ce_vocab=0 train.ce_positions=0 train.val_sequences=8 train.save_every=1000000 train.lr=6e-4
  train.warmup=100 data.time_budget_s=0"
[ "$dev" = cuda ] && args="$args data.dtype=bfloat16"
one() { python3 -m specbench.train $args train.steps=$steps train.time_budget_s=$T output_dir=$R/$1 > "$R/$1.log" 2>&1; }
start=$SECONDS
python3 -m specbench.train ${args/data.time_budget_s=0/} train.steps=1 output_dir=$R/data-run > "$R/data.log" 2>&1 \
  || { tail -20 "$R/data.log"; exit 1; }
echo "data: $((SECONDS - start)) s; $(grep -h '^distillation set' "$R/data.log" | tail -1)"
one solo
one a1 & p=$!; one a2; wait $p
OMP_NUM_THREADS=8 one b1 & p=$!; OMP_NUM_THREADS=8 one b2; wait $p
python3 - "$R" <<'PY' | tee "$out/probe_concurrent.txt"
import json, sys
from pathlib import Path
R = Path(sys.argv[1])
print("run | threads | steps | seconds | steps/s")
for name, what in (("solo", "alone, default threads"), ("a1", "two at once, default threads"), ("a2", "(its twin)"),
                   ("b1", "two at once, OMP_NUM_THREADS=8"), ("b2", "(its twin)")):
    f = R / name / "metrics.jsonl"
    rows = [json.loads(l) for l in f.read_text().splitlines() if '"elapsed_s"' in l] if f.exists() else []
    if len(rows) < 2:  # from the first logged step to the last (the first's elapsed time holds the start-up)
        print(f"{name} | {what} | {rows[-1]['step'] if rows else 0} | - | -")
        continue
    (s0, t0), (s1, t1) = (rows[0]["step"], rows[0]["elapsed_s"]), (rows[-1]["step"], rows[-1]["elapsed_s"])
    print(f"{name} | {what} | {s1} | {t1:.1f} | {(s1 - s0) / max(t1 - t0, 1e-9):.1f}")
PY
nproc; python3 -c "import torch; print('torch threads', torch.get_num_threads())"
