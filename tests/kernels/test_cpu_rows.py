"""specbench.kernels.cpu_rows: our float32 product for a few rows on the CPU, against a float64 reference; each row's
bits its own whatever the row count or thread count; clear errors; and what happens where it cannot build."""

from __future__ import annotations

import pytest
import torch

from specbench.kernels import cpu_rows

needs_build = pytest.mark.skipif(not cpu_rows.available(),
                                 reason=f"cpu_rows does not build here: {cpu_rows.unavailable_reason()}")


def test_pack_puts_sixteen_columns_side_by_side_for_each_k():
    w = torch.arange(37 * 3, dtype=torch.float32).view(37, 3)
    p = cpu_rows.pack(w)
    assert p.shape == (3, 3, 16) and p.is_contiguous()
    for n in range(37):
        assert torch.equal(p[n // 16, :, n % 16], w[n])
    assert torch.equal(p[2, :, 37 % 16 :], torch.zeros(3, 16 - 37 % 16))  # the last block's padding


@needs_build
@pytest.mark.parametrize("n,k", [(1, 1), (37, 19), (16, 32), (129, 576), (5, 1537)])
def test_product_is_the_reference_and_each_row_gets_its_bits_alone(n, k):
    g = torch.Generator().manual_seed(n * 1000 + k)
    w = torch.randn(n, k, generator=g)
    x = torch.randn(37, k, generator=g)  # more than a pass takes (16 with AVX-512, else 8): 16 + 16 + 5
    p = cpu_rows.pack(w)
    y = cpu_rows.linear(x, p, n)
    assert y.shape == (37, n) and y.dtype == torch.float32
    torch.testing.assert_close(y.double(), x.double() @ w.double().T, rtol=1e-5, atol=1e-4 * k**0.5)
    alone = torch.cat([cpu_rows.linear(x[i : i + 1], p, n) for i in range(37)])
    for m in range(1, 38):
        assert torch.equal(cpu_rows.linear(x[:m], p, n), alone[:m]), m
    # leading axes kept
    assert torch.equal(cpu_rows.linear(x[:18].view(2, 9, k), p, n), alone[:18].view(2, 9, n))


@needs_build
def test_product_bits_do_not_depend_on_the_thread_count():
    g = torch.Generator().manual_seed(7)
    w, x = torch.randn(300, 67, generator=g), torch.randn(6, 67, generator=g)
    p = cpu_rows.pack(w)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = cpu_rows.linear(x, p, 300)
        torch.set_num_threads(3)
        three = cpu_rows.linear(x, p, 300)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, three)


@needs_build
def test_bad_input_is_refused_with_what_was_given():
    w = torch.randn(37, 19)
    p = cpu_rows.pack(w)
    with pytest.raises(ValueError, match="float32"):
        cpu_rows.linear(torch.randn(2, 19, dtype=torch.float64), p, 37)
    with pytest.raises(ValueError, match="inner size 18"):
        cpu_rows.linear(torch.randn(2, 18), p, 37)
    with pytest.raises(ValueError, match="for 50 columns"):
        cpu_rows.linear(torch.randn(2, 19), p, 50)
    with pytest.raises(ValueError, match="2-d float32"):
        cpu_rows.pack(torch.randn(3, 4, 5))


def test_without_a_compiler_it_is_unavailable_and_says_why(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))  # no library built earlier to find
    monkeypatch.setenv("CC", "")
    monkeypatch.setattr(cpu_rows, "_lib", None)
    monkeypatch.setattr(cpu_rows, "_reason", None)
    monkeypatch.setattr(cpu_rows.shutil, "which", lambda name: None)
    assert not cpu_rows.available()
    assert "no C compiler" in cpu_rows.unavailable_reason()
    with pytest.raises(RuntimeError, match="unavailable: no C compiler"):
        cpu_rows.linear(torch.randn(1, 3), cpu_rows.pack(torch.randn(2, 3)), 2)


@needs_build
def test_build_goes_to_the_cache_once(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(cpu_rows, "_lib", None)
    monkeypatch.setattr(cpu_rows, "_reason", None)
    assert cpu_rows.available()
    built = list((tmp_path / "kernels").glob("cpu_rows-*.so"))
    assert len(built) == 1 and not list((tmp_path / "kernels").glob(".build-*"))
    stamp = built[0].stat().st_mtime_ns
    monkeypatch.setattr(cpu_rows, "_lib", None)
    assert cpu_rows.available() and built[0].stat().st_mtime_ns == stamp  # found, not built again


@needs_build
@pytest.mark.skipif("avx2" not in cpu_rows._cpu_flags().split(), reason="an x86 CPU with AVX2 is needed to run an AVX2-only build")
def test_an_avx2_only_build_gives_the_native_builds_bits(tmp_path):
    """Built for AVX2 alone (-march=haswell: 8-float vectors, two a block of 16 columns) the product sums every output
    in the same order as the native build, so the bits are the same, at every row count (and its 8 rows a pass
    against the native build's 16 with AVX-512 change nothing either)."""
    fn = cpu_rows.entry(cpu_rows.compile_to(tmp_path / "k.so", march="haswell"))
    g = torch.Generator().manual_seed(11)
    n, k = 45, 37
    w, x = torch.randn(n, k, generator=g), torch.randn(37, k, generator=g)
    p = cpu_rows.pack(w)
    for m in range(1, 38):
        out = torch.empty(m, n)
        fn(x.data_ptr(), p.data_ptr(), out.data_ptr(), m, n, k)
        assert torch.equal(out, cpu_rows.linear(x[:m], p, n)), m
