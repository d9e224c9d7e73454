#!/usr/bin/env bash
# The README's first command exactly (line 10), on a fresh clone of this checkout's HEAD with an empty cache
# (SPECBENCH_CACHE a new temporary directory: the wheels are downloaded and the row product compiled there).
#   bash experiments/cpu/intel-noamx-run2/first.sh <name>    -> experiments/cpu/intel-noamx-run2/<name>.txt
root=$(git rev-parse --show-toplevel)
out=$root/experiments/cpu/intel-noamx-run2/$1.txt
tmp=$(mktemp -d)
git clone -q "$root" "$tmp/specbench" && cd "$tmp/specbench" && export SPECBENCH_CACHE=$tmp/cache
sed -n 10p README.md | sed 's/^ *//' > "$tmp/first.sh"
{ echo "# $(date -u +%F), a fresh clone of $(git rev-parse --short HEAD), SPECBENCH_CACHE an empty mktemp dir, the README's first command exactly (time bash -c \"<line 10 of README.md>\")"
  { time bash "$tmp/first.sh"; } 2>&1 | tr '\r' '\n' | grep -vE "it/s\]|tok/s\]|^\s*$"; echo "rc ${PIPESTATUS[0]}"; } > "$out"
echo "$1: $(grep -E '^speedup \(|speed model|identical|^real|^rc' "$out" | tr '\n' ' ')"
