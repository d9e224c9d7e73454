#!/usr/bin/env bash
# forty-seventh session (2026-12-07, AMD EPYC): the README's first command on a fresh clone of main (fresh venv; the
# cache ~/.cache/specbench was already filled), then the same job three more times in that clone, one at a time with
# nothing else running; the CLI's output with progress bars and pip's index warnings filtered.
set -e
git clone -q /work/main /tmp/fresh1 && cd /tmp/fresh1
(python3 -m venv .venv && . .venv/bin/activate && pip install -q torch==2.13.0 && pip install -q -e . && python -m specbench) \
  > /tmp/fresh1.log 2>&1
. .venv/bin/activate
for i in 1 2 3; do python -m specbench > /tmp/fresh1-run$i.log 2>&1; done
# later, fresh-clone-2.txt: the same first command on a fresh clone of 7da1344 (/tmp/fresh2)
