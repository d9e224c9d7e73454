#!/usr/bin/env bash
# AMD EPYC (float32), one job at a time: the default with pending patch 0004 (eagle_auto: the tree here, its
# expansion stopping at 0.3) against main's default (eagle_adaptive) and main's eagle_tree (stopping at 0.4), in turns
cd /tmp
PY=/work/main/.venv/bin/python
for round in 1 2 3; do
  for side in auto adaptive tree; do
    case $side in
      auto) P=/work/wt-auto; extra="" ;;
      adaptive) P=/work/main; extra="" ;;
      tree) P=/work/main; extra="strategy=eagle_tree" ;;
    esac
    f=/tmp/amd/ab3-$side-$round.txt
    PYTHONPATH=$P $PY -m specbench logger=none $extra 2>&1 | tr '\r' '\n' | grep -vE "it/s\]|tok/s\]|^\s*$" > $f
    echo "$side $round: $(grep -E '^speedup \(|speed model|identical' $f | cut -c1-200 | tr '\n' ' ')"
  done
done
