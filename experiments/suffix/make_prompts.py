"""Writes the two prompt files of experiments/suffix/README.md from the Spec-Bench question file (not committed:
the prompts stay in ../shared/data/spec_bench/question.jsonl).

outputs/suffix/spec-bench-2x13.jsonl: the first 2 prompts of each of Spec-Bench's 13 categories (26 prompts).
outputs/suffix/repeat-13x2.jsonl: the first prompt of each category, then the same 13 again (26 prompts, category
pass1 / pass2), so that the second pass meets requests the run has already answered.

    python experiments/suffix/make_prompts.py [path/to/question.jsonl]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

src = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/data/spec_bench/question.jsonl")
rows = [json.loads(line) for line in src.read_text().splitlines() if line.strip()]
by_category: dict[str, list[dict]] = {}
for row in rows:
    by_category.setdefault(row["category"], []).append(row)
out = Path("outputs/suffix")
out.mkdir(parents=True, exist_ok=True)
with open(out / "spec-bench-2x13.jsonl", "w") as f:
    for group in by_category.values():
        for row in group[:2]:
            f.write(json.dumps({"id": row["question_id"], "category": row["category"], "turns": row["turns"][:1]}) + "\n")
with open(out / "repeat-13x2.jsonl", "w") as f:
    for rep in ("pass1", "pass2"):
        for group in by_category.values():
            row = group[0]
            f.write(json.dumps({"id": f"{row['question_id']}-{rep}", "category": rep, "turns": row["turns"][:1]}) + "\n")
