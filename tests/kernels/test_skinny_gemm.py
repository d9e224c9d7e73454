"""The skinny decode GEMM equals F.linear (interpreter on the CPU), with and without split-K partials,
and add_rmsnorm consumes the partials like the rounded GEMM output."""

from __future__ import annotations


import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")
pytestmark = pytest.mark.gpu  # part of the GPU suite: compiled and exact there, interpreted here

from kernel_env import DEVICE, DTYPE, kernels  # noqa: E402

decode, skinny_gemm = kernels("decode", "skinny_gemm")


@pytest.mark.parametrize("m", [1, 3, 16])
@pytest.mark.parametrize("cfg", [(16, 32, 4, 1, 1), (16, 32, 4, 1, 3), (32, 64, 4, 1, 2), None])
def test_skinny_linear_matches_linear(m, cfg):
    g = torch.Generator().manual_seed(m)
    x = torch.randn(m, 96, generator=g).to(DEVICE, DTYPE)
    w = torch.randn(40, 96, generator=g).to(DEVICE, DTYPE)
    split = cfg is not None and cfg[4] > 1
    y = skinny_gemm.skinny_linear(x, w, may_split=split or cfg is None, config=cfg)
    if split:
        assert y.shape == (cfg[4], m, 40) and y.dtype == torch.float32
    y = skinny_gemm.sum_partials(y, DTYPE)
    torch.testing.assert_close(y, F.linear(x, w), atol=1e-4, rtol=1e-4)


def test_bias_and_fallback():
    g = torch.Generator().manual_seed(7)
    x = torch.randn(2, 64, generator=g).to(DEVICE, DTYPE)
    w = torch.randn(24, 64, generator=g).to(DEVICE, DTYPE)
    b = torch.randn(24, generator=g).to(DEVICE, DTYPE)
    torch.testing.assert_close(skinny_gemm.skinny_linear(x, w, b, may_split=True), F.linear(x, w, b), atol=1e-4, rtol=1e-4)
    big = torch.randn(20, 64, generator=g).to(DEVICE, DTYPE)  # more rows than MAX_M: F.linear
    assert not skinny_gemm.usable(big, w)
    torch.testing.assert_close(skinny_gemm.skinny_linear(big, w), F.linear(big, w))


def test_add_rmsnorm_sums_partials():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 48, generator=g).to(DEVICE, DTYPE)
    parts = torch.randn(4, 3, 48, generator=g).to(DEVICE)
    w = torch.randn(48, generator=g).to(DEVICE, DTYPE)
    s, out = decode.add_rmsnorm(x, parts, w, 1e-6)
    s_ref, out_ref = decode.add_rmsnorm_ref(x, skinny_gemm.sum_partials(parts, DTYPE), w, 1e-6)
    torch.testing.assert_close(s, s_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out, out_ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("cfg", [(16, 32, 4, 1, 1), (16, 32, 4, 1, 3), None])
def test_silu_prologue(cfg):
    g = torch.Generator().manual_seed(11)
    gu = torch.randn(3, 2 * 96, generator=g).to(DEVICE, DTYPE)
    w = torch.randn(40, 96, generator=g).to(DEVICE, DTYPE)
    skinny_gemm.FUSE_SILU = True
    try:
        y = skinny_gemm.skinny_linear(gu, w, may_split=cfg is None or cfg[4] > 1, config=cfg, silu=True)
    finally:
        skinny_gemm.FUSE_SILU = False
    ref = F.linear(decode.silu_mul_ref(gu), w)
    torch.testing.assert_close(skinny_gemm.sum_partials(y, DTYPE), ref, atol=1e-4, rtol=1e-4)
    y2 = skinny_gemm.skinny_linear(gu, w, silu=True)  # the unfused route (the default) gives the same
    torch.testing.assert_close(y2, ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("m", [1, 3, 16])
@pytest.mark.parametrize("i", [768, 1024])  # down's K in 1 part (768) or 4 (1024) at 132 SMs
@pytest.mark.parametrize("cfg", [0, 5])  # without and with the phase-2 prefetch
def test_fused_mlp_equals_the_three_launches(m, i, cfg):
    g = torch.Generator().manual_seed(20 + m)
    h = 256
    x = torch.randn(m, h, generator=g).to(DEVICE, DTYPE)
    gu_w = (torch.randn(2 * i, h, generator=g) / 16).to(DEVICE, DTYPE)
    down_w = (torch.randn(h, i, generator=g) / 32).to(DEVICE, DTYPE)
    # a given configuration: untuned, where the tuner may keep three launches for shapes this small (GPU, 2026-12-05)
    y = skinny_gemm.fused_mlp(x, gu_w, down_w, config=skinny_gemm._MLP_CANDIDATES[cfg])
    ref = skinny_gemm.three_launch_mlp(x, gu_w, down_w)
    assert y is not None and y.shape == ref.shape and y.dtype == ref.dtype
    if DEVICE.type == "cuda":  # compiled: the same sums, rounded at the same points
        assert torch.equal(y, ref)
    else:  # the interpreter's dot is numpy's: the same to rounding
        torch.testing.assert_close(y, ref, atol=1e-5, rtol=1e-5)
    gate, up = F.linear(x, gu_w).chunk(2, dim=-1)
    torch.testing.assert_close(skinny_gemm.sum_partials(y, DTYPE), F.linear(F.silu(gate) * up, down_w),
                               atol=2e-2 if DEVICE.type == "cuda" else 1e-4, rtol=2e-2 if DEVICE.type == "cuda" else 1e-4)


@pytest.mark.parametrize("cfg", skinny_gemm._MLP_CANDIDATES)
def test_fused_mlp_tiles_do_not_change_a_bit(cfg):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(5, 512, generator=g).to(DEVICE, DTYPE)
    gu_w = (torch.randn(2 * 1024, 512, generator=g) / 16).to(DEVICE, DTYPE)
    down_w = (torch.randn(512, 1024, generator=g) / 32).to(DEVICE, DTYPE)
    y = skinny_gemm.fused_mlp(x, gu_w, down_w, config=cfg)
    first = skinny_gemm.fused_mlp(x, gu_w, down_w, config=skinny_gemm._MLP_CANDIDATES[0])
    if DEVICE.type == "cuda":
        assert torch.equal(y, first)
        default = skinny_gemm.GRID_POLL
        try:
            for poll in (True, False):  # either way of waiting at the barrier (GRID_POLL)
                skinny_gemm.GRID_POLL = poll
                for _ in range(20):  # the barrier leaves its counter ready for the next launch
                    assert torch.equal(skinny_gemm.fused_mlp(x, gu_w, down_w, config=cfg), first)
        finally:
            skinny_gemm.GRID_POLL = default
    else:
        torch.testing.assert_close(y, first, atol=1e-5, rtol=1e-5)


def test_fused_mlp_declines_what_it_does_not_tile():
    g = torch.Generator().manual_seed(6)
    gu_w = torch.randn(2 * 768, 256, generator=g).to(DEVICE, DTYPE)
    down_w = torch.randn(256, 768, generator=g).to(DEVICE, DTYPE)
    assert skinny_gemm.fused_mlp(torch.randn(17, 256, generator=g).to(DEVICE, DTYPE), gu_w, down_w) is None  # rows
    odd = torch.randn(2 * 768, 40, generator=g).to(DEVICE, DTYPE)  # H not a multiple of 16
    assert skinny_gemm.fused_mlp(torch.randn(2, 40, generator=g).to(DEVICE, DTYPE), odd, down_w[:40]) is None
    x = torch.randn(2, 256, generator=g).to(DEVICE, DTYPE)
    assert skinny_gemm.fused_mlp(x, gu_w, down_w[:, :512].contiguous()) is None  # down's K is not gate/up's I
    skinny_gemm.FUSED_MLP = False
    try:
        assert skinny_gemm.fused_mlp(torch.randn(2, 256, generator=g).to(DEVICE, DTYPE), gu_w, down_w) is None
    finally:
        skinny_gemm.FUSED_MLP = True
