"""tests/train's shared fixture: a training prompt file."""

from __future__ import annotations

import json

import pytest


@pytest.fixture(scope="module")
def prompts_file(tmp_path_factory):
    """Six made-up training prompts, and one row of an MT-Bench category, which the training data must leave out."""
    path = tmp_path_factory.mktemp("data") / "train.jsonl"
    rows = [{"question_id": i, "category": "qa", "turns": [f"Question {i}: why is the sky blue? " * (i + 1)]}
            for i in range(6)]
    rows.append({"question_id": 99, "category": "writing", "turns": ["an MT-Bench category: excluded"]})
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return str(path)
