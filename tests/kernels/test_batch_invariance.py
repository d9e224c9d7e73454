"""Batch invariance of the decode kernels (interpreter on the CPU, compiled on a GPU): a row's GEMM
output and a query's attention output are bit-identical whatever else shares the launch (other rows,
the row's other tokens, the batch size), and still equal their torch references."""

from __future__ import annotations


import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")
pytestmark = pytest.mark.gpu  # part of the GPU suite: compiled and exact there, interpreted here

from kernel_env import DEVICE, DTYPE, kernels  # noqa: E402
from specbench_testing import tree_ancestors, tree_columns  # noqa: E402

decode, skinny_gemm = kernels("decode", "skinny_gemm")


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("split", [False, True])
def test_invariant_linear_rows_do_not_depend_on_m(split):
    g = _g(1)
    x = torch.randn(37, 128, generator=g).to(DEVICE, DTYPE)  # 37 rows: three 16-row tiles, the last ragged
    w = torch.randn(72, 128, generator=g).to(DEVICE, DTYPE)
    cfg = (16, 32, 4, 1, 2 if split else 1)

    def f(rows):
        return skinny_gemm.sum_partials(skinny_gemm.invariant_linear(rows, w, may_split=split, config=cfg), DTYPE)

    full = f(x)
    torch.testing.assert_close(full, F.linear(x, w), atol=1e-3, rtol=1e-3)
    for m in (1, 2, 5, 16, 17):
        assert torch.equal(f(x[:m].contiguous()), full[:m]), f"rows 0..{m} changed with M"
    assert torch.equal(f(x[20:23].contiguous()), full[20:23])  # rows from another tile, alone


def test_invariant_decode_attention_does_not_depend_on_other_queries():
    g = _g(2)
    bsz, hq, hkv, d, slots = 3, 6, 2, 16, 300  # G = 3: tiles of 16 (token, head) pairs split tokens unevenly
    kc = torch.randn(bsz, hkv, slots, d, generator=g).to(DEVICE, DTYPE)
    vc = torch.randn(bsz, hkv, slots, d, generator=g).to(DEVICE, DTYPE)
    t = 7
    q = torch.randn(bsz, t, hq, d, generator=g).to(DEVICE, DTYPE)
    starts = torch.tensor([0, 126, 250])  # the second row's window straddles the 128-slot split boundary
    positions = (starts[:, None] + torch.arange(t)).to(DEVICE)
    scale = d**-0.5
    full = decode.decode_attention(q, kc, vc, positions, scale, block_n=32, invariant=True)
    ref = decode.decode_attention_ref(q, kc, vc, positions, scale)
    torch.testing.assert_close(full, ref, atol=1e-2, rtol=1e-2)  # bf16 when compiled
    for b in range(bsz):
        for i in (0, 3, t - 1):  # one query alone (a 1-token forward of one row)
            alone = decode.decode_attention(q[b : b + 1, i : i + 1].contiguous(), kc[b : b + 1], vc[b : b + 1],
                                            positions[b : b + 1, i : i + 1].contiguous(), scale, block_n=32, invariant=True)
            assert torch.equal(alone[0, 0], full[b, i]), f"row {b} token {i} changed when computed alone"
    two = decode.decode_attention(q[1:, :2].contiguous(), kc[1:], vc[1:], positions[1:, :2].contiguous(), scale,
                                  block_n=32, invariant=True)
    assert torch.equal(two, full[1:, :2])


def test_fast_attention_path_still_matches_reference():
    g = _g(3)
    q = torch.randn(2, 3, 4, 16, generator=g).to(DEVICE, DTYPE)
    kc = torch.randn(2, 2, 200, 16, generator=g).to(DEVICE, DTYPE)
    vc = torch.randn(2, 2, 200, 16, generator=g).to(DEVICE, DTYPE)
    positions = (torch.tensor([10, 190])[:, None] + torch.arange(3)).to(DEVICE).clamp(max=199)
    out = decode.decode_attention(q, kc, vc, positions.contiguous(), 0.25, num_splits=3, block_n=32)
    torch.testing.assert_close(out, decode.decode_attention_ref(q, kc, vc, positions, 0.25), atol=2e-3, rtol=2e-3)


@pytest.mark.skipif(DEVICE.type != "cuda", reason="tuning and shared memory limits are a compiled-kernel matter")
def test_each_tile_height_is_tuned_on_tiles_that_launch_at_it(monkeypatch):
    """(32, 512, 4, 3) needs 288 KiB of shared memory at 64-row tiles, more than an H200 has, and a batch-64 job died
    on a configuration tuned on 16 rows (2026-12-01): each tile height is now tuned at its own height, so the 64-row
    tiles take a candidate that launches there."""
    monkeypatch.setattr(skinny_gemm, "_CANDIDATES", [(32, 512, 4, 3), (64, 256, 4, 3)])
    monkeypatch.setattr(skinny_gemm, "_TALL_CANDIDATES", [])
    monkeypatch.setattr(skinny_gemm, "_TUNED", {})
    g = _g(2)
    w = torch.randn(4096, 4096, generator=g).to(DEVICE, DTYPE)
    for m in (16, 64, 130):
        x = torch.randn(m, 4096, generator=g).to(DEVICE, DTYPE)
        torch.testing.assert_close(skinny_gemm.invariant_linear(x, w), F.linear(x, w), atol=0.5, rtol=2e-2)
    assert {key[:2] for key in skinny_gemm._TUNED} == {("inv", 16), ("inv", 64), ("inv-wide", 256)}
    chosen = skinny_gemm._TUNED[("inv", 64, 4096, 4096, False, False)]
    assert chosen[:4] == (64, 256, 4, 3), chosen


def test_tune_buckets_follow_the_tile_height_then_powers_of_rows():
    assert [skinny_gemm.tune_bucket(m) for m in (1, 16, 17, 33, 64, 65, 128, 129, 256, 257, 30000)] == [
        16, 16, 32, 64, 64, 128, 128, 256, 256, 1024, 1024]


# a 6-node tree under the pending token (column 0): node i (column i + 1) hangs under node PARENTS[i], -1 = pending
TREE_PARENTS = [-1, -1, 0, 0, 1, 3]


def _tree_attention_case(seed: int, base: list[int]):
    """TREE_PARENTS's tree in 2 rows whose pending tokens sit at `base`, nodes at the slots after them; G = 3.
    Returns (q, k cache, v cache, positions [2, T], ancestor paths [2, T, T], root path columns per column)."""
    g = _g(seed)
    bsz, hq, hkv, d, slots = 2, 6, 2, 16, 300
    columns = tree_columns(TREE_PARENTS)
    t = len(columns)
    rows = torch.tensor(base)
    positions = (rows[:, None] + torch.tensor([len(c) - 1 for c in columns])[None]).to(DEVICE).contiguous()
    slot_ids = (rows[:, None] + torch.arange(t)).to(DEVICE)
    path = decode.tree_paths(tree_ancestors(TREE_PARENTS).expand(bsz, t, t).to(DEVICE), slot_ids)
    q = torch.randn(bsz, t, hq, d, generator=g).to(DEVICE, DTYPE)
    kc = torch.randn(bsz, hkv, slots, d, generator=g).to(DEVICE, DTYPE)
    vc = torch.randn(bsz, hkv, slots, d, generator=g).to(DEVICE, DTYPE)
    return q, kc, vc, positions, path, columns


@pytest.mark.parametrize("invariant", [True, False])
def test_tree_attention_matches_reference(invariant):
    q, kc, vc, positions, path, _ = _tree_attention_case(4, [9, 125])  # row 1 straddles the 128-slot split boundary
    d = q.shape[-1]
    out = decode.decode_attention(q, kc, vc, positions, d**-0.5, block_n=32, invariant=invariant, path=path)
    ref = decode.decode_attention_ref(q, kc, vc, positions, d**-0.5, path=path)
    torch.testing.assert_close(out, ref, atol=1e-2, rtol=1e-2)


def test_tree_node_attention_is_its_chains_bit_for_bit():
    """Each node of a tree, attended in one launch, equals the same query over its root path laid out as a chain
    (its ancestors' keys copied to consecutive slots) computed alone: the batch-invariant contract, for trees."""
    base = torch.tensor([40, 124])
    q, kc, vc, positions, path, paths = _tree_attention_case(5, base.tolist())
    bsz, d = q.shape[0], q.shape[-1]
    out = decode.decode_attention(q, kc, vc, positions, d**-0.5, block_n=32, invariant=True, path=path)
    for b in range(bsz):
        for col, cols in enumerate(paths):
            kb, vb = kc[b : b + 1].clone(), vc[b : b + 1].clone()
            src = base[b] + torch.tensor(cols)
            dst = base[b] + torch.arange(len(cols))
            kb[:, :, dst], vb[:, :, dst] = kc[b : b + 1, :, src], vc[b : b + 1, :, src]
            pos = torch.tensor([[int(base[b]) + len(cols) - 1]], device=DEVICE)
            alone = decode.decode_attention(q[b : b + 1, col : col + 1].contiguous(), kb, vb, pos, d**-0.5, block_n=32,
                                            invariant=True)
            assert torch.equal(alone[0, 0], out[b, col]), f"row {b} node column {col} differs from its chain"


# Qwen3-8B's products (N, K, may_split): the split ones feed add_rmsnorm
SHAPES_8B = [(6144, 4096, False), (4096, 4096, True), (4096, 12288, True), (24576, 4096, False)]


@pytest.mark.parametrize("n,k,may_split", SHAPES_8B + [(1024, 2048, True), (1536, 1536, True)])
def test_invariant_candidates_share_one_summation_order(n, k, may_split):
    """Timing picks among these, so they must all add the same partials: one split, `invariant_split`'s (a function
    of the shape and the SM count only), in parts of equal width that each candidate's BLOCK_K divides."""
    for sms in (78, 132):
        split = skinny_gemm.invariant_split(n, k, sms, may_split)
        # 16-, 32- and 64-row tiles, and the 128-row tiles above 64 rows: one order for all
        for wide, height in ((False, 16), (False, 32), (False, 64), (True, skinny_gemm.WIDE_BLOCK_M)):
            cands = skinny_gemm._candidates(n, k, sms, may_split, invariant=True, wide=wide, height=height)
            assert cands and {c[4] for c in cands} == {split}
            assert all(split == 1 or k % (split * c[1]) == 0 for c in cands)
            assert skinny_gemm._invariant_default(n, k, sms, may_split, wide)[4] == split
        assert may_split or split == 1
    assert skinny_gemm.invariant_split(4096, 4096, 132, True) == 2  # 256 tiles of 16 rows: two waves at split 2
    assert skinny_gemm.invariant_split(1024, 2048, 132, True) == 8  # parts of 256 columns


@pytest.mark.skipif(DEVICE.type != "cuda", reason="the summation order of compiled MMA chains is what is checked")
@pytest.mark.parametrize("n,k,may_split", SHAPES_8B)
def test_every_invariant_candidate_gives_the_same_bits(n, k, may_split):
    """Two processes may time the candidates differently and pick different ones (a sweep's jobs, a test and the
    CLI): that must not change one bit. Every candidate of every tile height that launches at 16 and 64 rows, at 5
    and 64 rows."""
    g = _g(4)
    w = (torch.randn(n, k, generator=g) * 0.02).to(DEVICE, DTYPE)
    x = torch.randn(256, k, generator=g).to(DEVICE, DTYPE)
    sms = skinny_gemm._sms(DEVICE)
    outs = {}
    for cfg in skinny_gemm._candidates(n, k, sms, may_split, invariant=True, height=64):  # the 16-row ones, and more
        try:
            outs[cfg] = [skinny_gemm._launch(x[:m], w, None, cfg, may_split, block_m=skinny_gemm.invariant_block_m(m))
                         for m in (5, 64)]
        except Exception:  # noqa: BLE001 - shared memory: _tune skips it the same way
            continue
    assert len(outs) >= 2, outs.keys()
    first = next(iter(outs.values()))
    for cfg, (y5, y64) in outs.items():
        assert torch.equal(y5, first[0]) and torch.equal(y64, first[1]), cfg
        assert torch.equal(y5, y64[..., :5, :]), cfg  # rows (of each partial sum [S, M, N] when split)
    wide = 0
    for cfg in skinny_gemm._candidates(n, k, sms, may_split, invariant=True, wide=True):  # 128-row tiles, 256 rows
        try:
            y = skinny_gemm._launch(x, w, None, cfg, may_split, block_m=skinny_gemm.WIDE_BLOCK_M)
        except Exception:  # noqa: BLE001
            continue
        wide += 1
        assert torch.equal(y[..., :64, :], first[1]), cfg
    assert wide >= 2


@pytest.mark.parametrize("split", [False, True])
def test_wide_tiles_keep_rows_and_match_linear(split):
    """Above 64 rows invariant_linear takes 128-row tiles (their own configuration, the same split): rows do not depend
    on M among such calls, and the product is F.linear's."""
    g = _g(5)
    x = torch.randn(150, 128, generator=g).to(DEVICE, DTYPE)  # two 128-row tiles, the second ragged
    w = torch.randn(72, 128, generator=g).to(DEVICE, DTYPE)

    def f(rows):
        return skinny_gemm.sum_partials(skinny_gemm.invariant_linear(rows, w, may_split=split), DTYPE)

    full = f(x)
    torch.testing.assert_close(full, F.linear(x, w), atol=1e-3, rtol=1e-3)
    for m in (65, 100, 129):
        assert torch.equal(f(x[:m].contiguous()), full[:m]), f"rows 0..{m} changed with M"
    assert {("inv-wide", 128, 72, 128, split, False), ("inv-wide", 256, 72, 128, split, False)} <= set(skinny_gemm._TUNED)
