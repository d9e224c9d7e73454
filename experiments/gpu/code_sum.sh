#!/usr/bin/env bash
# A fingerprint of the code a GPU suite ran: the sha1 of every *.py and *.c under specbench/ and tests/ (sorted by path,
# then the sha1 of that list), 12 hex digits. suite.sh writes it into its log's header, from the device's copy of the
# working tree, whose git HEAD may not be the commit that tree was (on 2026-12-06 the log of a branch with three
# patches applied named main's commit). To see which commit a log's code was:
#   bash experiments/gpu/code_sum.sh            # this working tree
#   bash experiments/gpu/code_sum.sh <commit>   # that commit's tree
set -euo pipefail
sum() { find specbench tests \( -name '*.py' -o -name '*.c' \) -type f | LC_ALL=C sort | xargs sha1sum | sha1sum | cut -c1-12; }
if [ $# -eq 0 ]; then
  sum
else
  tmp=$(mktemp -d)
  git archive "$1" specbench tests | tar -x -C "$tmp"
  (cd "$tmp" && sum)
  rm -rf "$tmp"
fi
