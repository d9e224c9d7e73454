#!/usr/bin/env bash
# engine.fused_mlp on the device machine (carry .whl; the pip line of experiments/gpu/suite.sh first), in parts that
# fit one device command each:
#   bash experiments/gpu/ab_fused_mlp.sh probe "$OUT"   # probe_mlp.py on the 0.6B, 1.7B and 8B      (~3 min)
#   bash experiments/gpu/ab_fused_mlp.sh cli "$OUT"     # frontdoor.sh block 1 (8B + 0.6B, batch 1), on then off,
#                                                       # each a fresh process                        (~5 min)
#   bash experiments/gpu/ab_fused_mlp.sh cli32 "$OUT"   # block 2 (32B + 1.7B), on then off
# Each part leaves one archive, $OUT/fused-<part>.tgz (the device tool brings back only a few files), and prints the
# CLI's tables.
set -u
part=${1:?usage: ab_fused_mlp.sh probe|cli|cli32 OUT}
out=${2:-/tmp}
work=$(mktemp -d)
case $part in
  probe) PROBE_MODELS=qwen3-0.6b-random,qwen3-1.7b-random,qwen3-8b-random timeout 300 \
           python3 experiments/gpu/probe_mlp.py 2>&1 | tee "$work/probe_mlp.txt" ;;
  cli|cli32)
    blocks=$([ "$part" = cli ] && echo 1 || echo 2)
    echo "== engine.fused_mlp=true (the default)"; BLOCKS=$blocks bash experiments/gpu/frontdoor.sh "$work/on"
    echo "== engine.fused_mlp=false"; EXTRA=engine.fused_mlp=false BLOCKS=$blocks bash experiments/gpu/frontdoor.sh "$work/off" ;;
  *) echo "usage: ab_fused_mlp.sh probe|cli|cli32 OUT"; exit 1 ;;
esac
tar czf "$out/fused-$part.tgz" -C "$work" .
