#!/usr/bin/env bash
# thirty-sixth session (2026-12-06), after 79267e9 (the "rows" product form): the default (eagle_auto, the tree here)
# and the chain (eagle_adaptive) in turns, one process at a time, nothing else running; then the README's first
# command exactly, on a fresh clone with an empty cache (the row product is compiled there on first use).
cd "$(git rev-parse --show-toplevel)"
out=experiments/cpu/intel-noamx-run2
for round in 1 2; do
  for s in eagle_adaptive eagle_auto; do  # the chain first this time (before_after.sh ran the tree first)
    .venv/bin/python -m specbench logger=none strategy=$s 2>&1 | tr '\r' '\n' | grep -vE "it/s\]|tok/s\]|^\s*$" \
      > $out/turns-$s-$round.txt
    echo "$s $round: $(grep -E '^speedup \(|speed model|identical' $out/turns-$s-$round.txt | tr '\n' ' ')"
  done
done
tmp=$(mktemp -d)
git clone -q . "$tmp/specbench" && cd "$tmp/specbench" && export SPECBENCH_CACHE=$tmp/cache
sed -n 10p README.md | sed 's/^ *//' > "$tmp/first.sh"  # the README's first command (line 10)
echo "first command: $(cat "$tmp/first.sh") at $(git rev-parse --short HEAD)"
{ echo "# $(date -u +%F), a fresh clone of $(git rev-parse --short HEAD), SPECBENCH_CACHE an empty mktemp dir, the README's first command exactly (time bash -c \"<line 10 of README.md>\")"
  { time bash "$tmp/first.sh"; } 2>&1 | tr '\r' '\n' | grep -vE "it/s\]|tok/s\]|^\s*$"; echo "rc ${PIPESTATUS[0]}"; } \
  > "$OLDPWD/$out/first-default.txt"
echo "fresh clone: $(grep -E '^speedup \(|speed model|identical|^real' "$OLDPWD/$out/first-default.txt" | tr '\n' ' ')"
