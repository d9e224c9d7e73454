#!/usr/bin/env bash
# The default job (`python -m specbench`, engine.dtype=auto) against the same job in float32 (engine.dtype=float32), in
# turns, one process at a time, nothing else running on the CPU. Written on 2026-12-06 (thirty-seventh session) for
# the Intel Xeon with AMX: there auto picks bfloat16 on the bit-invariant path and eagle_auto drafts the chain
# (1.44x-1.50x in the README's table), while float32 would draft the tree on the CPU's row product
# (kernels/cpu_rows.c, 16 rows a pass with AVX-512), which reads 1.55x-1.63x on the Intel Xeon without AMX. Not yet
# run on the AMX Xeon. On a CPU where auto already picks float32 both sides run the same job.
#   bash experiments/cpu/dtype_turns.sh <output folder> [rounds, default 3]
set -u
cd "$(git rev-parse --show-toplevel)"
out=${1:?usage: dtype_turns.sh <output folder> [rounds]}; mkdir -p "$out"
lscpu | grep -E "Model name|L3" > "$out/cpu.txt"
grep -o 'amx[a-z_0-9]*\|avx512_bf16' /proc/cpuinfo | sort -u >> "$out/cpu.txt"
run() {  # name, overrides...
  local name=$1; shift
  .venv/bin/python -m specbench logger=none "$@" 2>&1 | tr '\r' '\n' | grep -vE "it/s\]|tok/s\]|^\s*$" > "$out/$name.txt"
  echo "$name: $(grep -E '^speedup \(|speed model|identical|^strategy ' "$out/$name.txt" | tr '\n' ' ')"
}
for round in $(seq 1 "${2:-3}"); do
  run auto-$round
  run float32-$round engine.dtype=float32
done
