"""metrics.summarize: what a tree's step is worth (AL per verified token) and what its verify costs (ms per step)."""

from __future__ import annotations

import pytest

from specbench.engine import BatchTiming, RowResult
from specbench.metrics import prompt_metrics, summarize


def _row(drafts: int, draft_tokens: int, accepted: int, accepted_at: list[int]) -> RowResult:
    return RowResult(output_ids=list(range(accepted + drafts)), drafts=drafts, draft_tokens=draft_tokens,
                     accepted_tokens=accepted, accepted_at=accepted_at, ttft_s=0.01, latency_s=0.5,
                     emissions=[(0.01, 1), (0.5, accepted + drafts - 1)], finished_by="length")


def test_tree_metrics_per_node_and_per_step():
    # two prompts, 16-node trees: 5 steps accepting 9 path tokens, 2 steps accepting 3
    rows = [_row(5, 5 * 16, 9, [5, 3, 1]), _row(2, 2 * 16, 3, [2, 1, 0])]
    timing = BatchTiming(prefill_s=0.1, draft_s=0.2, verify_s=0.35, total_s=0.7, steps=7, draft_forwards=21)
    out = summarize([prompt_metrics(r) for r in rows], [timing])
    assert out["nodes_per_step"] == 16.0
    assert out["acceptance_length"] == pytest.approx(1 + 12 / 7)
    assert out["al_per_verified_token"] == pytest.approx((1 + 12 / 7) / 17)  # 17 tokens per verify forward
    assert out["per_position_acceptance"] == pytest.approx([1.0, 4 / 7, 1 / 7])  # acceptance at depth 1, 2, 3
    assert out["verify_ms_per_step"] == pytest.approx(50.0)
    assert out["draft_forwards_per_step"] == pytest.approx(3.0)


def test_target_only_is_one_token_per_verified_token():
    out = summarize([prompt_metrics(_row(0, 0, 0, []))], [BatchTiming(total_s=1.0, verify_s=0.5, steps=4)])
    assert out["al_per_verified_token"] == 1.0 and out["verify_ms_per_step"] == pytest.approx(125.0)
