#!/usr/bin/env bash
# A device call carries the working tree (tracked and untracked-not-ignored files, counted in 4 KiB blocks) plus
# `carry`, at most 64 MiB. Since 2026-12-06 the tracked tree is ~66 MB, so a GPU suite call is refused. The suite
# needs specbench/, tests/, conf/ and experiments/gpu/ only; this moves the two largest experiment folders out of the
# checkout (to $STASH, default /tmp/specbench-carry-slim) for the calls, and back after. Run from the project root:
#   bash experiments/gpu/carry_slim.sh out     # before the first device call (prints the tree's size in MiB)
#   bash experiments/gpu/carry_slim.sh back    # after the last one (do not commit in between)
# On 2026-12-06 (thirty-sixth session) the tree was 47.2 MiB with them out, and both suites ran so.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
stash=${STASH:-/tmp/specbench-carry-slim}
dirs="experiments/drafters experiments/frontier"
size() { git ls-files -z | xargs -0 stat -c %s 2>/dev/null | awk '{t += int(($1 + 4095) / 4096) * 4096} END {printf "%.1f MiB\n", t / 1048576}'; }
case ${1:-} in
  out)
    mkdir -p "$stash"
    for d in $dirs; do [ -e "$stash/$(basename "$d")" ] && { echo "$stash/$(basename "$d") exists: run 'back' first" >&2; exit 1; }; done
    for d in $dirs; do mv "$d" "$stash/"; done
    echo "moved $dirs to $stash; tracked files still here: $(size)" ;;
  back)
    for d in $dirs; do mv "$stash/$(basename "$d")" "$d"; done
    git status --short -- $dirs | head -5
    echo "back: $(size)" ;;
  *) echo "usage: $0 out|back" >&2; exit 2 ;;
esac
