#!/usr/bin/env bash
# twenty-eighth session: does the W&B logger (the README's first command runs it, offline) cost the default speed on
# 2 cores? The default job with the default logger and with logger=none, in turns, one process at a time
# (ORDER="none wandb" ROUNDS="4 5 6": the same with logger=none first)
cd "$(git rev-parse --show-toplevel)"
out=experiments/cpu/amd-run13
for round in ${ROUNDS:-1 2 3}; do
  for lg in ${ORDER:-wandb none}; do
    .venv/bin/python -m specbench logger=$lg 2>&1 | tr '\r' '\n' | grep -vE "it/s\]|tok/s\]|^\s*$|^wandb:" \
      > $out/wandb-ab-$lg-$round.txt
    echo "logger=$lg $round: $(grep -E '^speedup \(|speed model' $out/wandb-ab-$lg-$round.txt | tr '\n' ' ')"
  done
done
