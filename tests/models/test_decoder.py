"""Our decoder's logits equal transformers' (fp32, CPU) for llama, qwen2 and qwen3, through prefill and
ragged decode steps over the per-row static cache, including the fused q/k/v and gate/up projections."""

from __future__ import annotations

import time

import pytest
import torch
import torch.nn.functional as F

from specbench.models.decoder import DecoderRunner, masked_attention
from specbench.models.loading import load_model, resolve_spec


def tiny(name: str = "tiny-llama", seed: int = 0):
    """tests/conftest.py's tiny(): imported by name, `conftest` can resolve to another directory's."""
    return load_model(resolve_spec({"name": name, "init_seed": seed}, "target"), "cpu", torch.float32)

ATOL = 2e-5


def _hf_logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids, use_cache=False).logits.float()


def _check_runner_against_hf(hf, runner: DecoderRunner, vocab: int, lens=(5, 9, 3), steps=(1, 3, 2, 4), seed=0, atol=ATOL):
    g = torch.Generator().manual_seed(seed)
    bsz = len(lens)
    total = max(lens) + sum(steps) + 2
    seqs = torch.randint(0, vocab, (bsz, total), generator=g)
    runner.allocate(bsz, total + 4)
    pmax = max(lens)
    pos = torch.arange(pmax).expand(bsz, pmax)
    out = runner(seqs[:, :pmax], pos, attn_len=pmax, want_hidden=True)
    for b, n in enumerate(lens):
        ref = _hf_logits(hf, seqs[b : b + 1, :n])[0]
        torch.testing.assert_close(out.logits[b, :n], ref, atol=atol, rtol=1e-4)
    # ragged decode steps: row b continues at its own length with T new tokens
    lengths = list(lens)
    for t in steps:
        positions = torch.tensor(lengths)[:, None] + torch.arange(t)
        tokens = seqs.gather(1, positions)
        out = runner(tokens, positions, attn_len=max(lengths) + t)
        for b in range(bsz):
            full = _hf_logits(hf, seqs[b : b + 1, : lengths[b] + t])[0, lengths[b] :]
            torch.testing.assert_close(out.logits[b], full, atol=atol, rtol=1e-4)
        # rows accept different amounts: the stale slots above each new length must never be read
        lengths = [n + max(1, t - b % 2) for b, n in enumerate(lengths)]


@pytest.mark.parametrize("arch", ["tiny-llama", "tiny-qwen2", "tiny-qwen3"])
def test_decoder_matches_transformers(arch):
    m = tiny(arch)
    _check_runner_against_hf(m.model, DecoderRunner(m.model), m.model.config.vocab_size)


@pytest.mark.parametrize("hq", [6, 9, 3])
def test_folded_grouped_attention_equals_sdpa_gqa(hq):
    """masked_attention's fold (CUDA's form: each key/value head's group of queries on the query axis) against SDPA's
    enable_gqa, with a different causal mask per row and query, so a group tiled in the wrong order reads the wrong
    mask and fails."""
    g = torch.Generator().manual_seed(0)
    bsz, hkv, t, s, d = 2, 3, 5, 11, 8
    q = torch.randn(bsz, hq, t, d, generator=g, dtype=torch.float64)
    k, v = (torch.randn(bsz, hkv, s, d, generator=g, dtype=torch.float64) for _ in range(2))
    positions = torch.tensor([[2, 3, 4, 5, 6], [6, 7, 8, 9, 10]])
    mask = torch.arange(s)[None, None, None, :] <= positions[:, None, :, None]  # [B, 1, T, S]
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3, enable_gqa=hq != hkv)
    for fold in (True, False):
        got = masked_attention(q, k, v, mask, 0.3, fold=fold)
        assert got.shape == (bsz, hq, t, d)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    # the drafters train through it (eagle.py): the folded form's gradients are SDPA's too
    grads = []
    for fold in (True, False):
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        (masked_attention(*leaves, mask, 0.3, fold=fold) * torch.arange(d, dtype=torch.float64)).sum().backward()
        grads.append([x.grad for x in leaves])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.gpu
@pytest.mark.parametrize("t", [1, 5])
def test_masked_attention_on_cuda_equals_enable_gqa(t):
    """On CUDA in float32 masked_attention folds by default (another kernel than SDPA's enable_gqa, whose output may
    come back laid out [B, G*T, Hkv, D]); queries laid out as the decoder's are ([B, T, Hq, D] transposed)."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    g = torch.Generator(device="cuda").manual_seed(0)
    bsz, hq, hkv, s, d = 3, 9, 3, 13, 64
    q = torch.randn(bsz, t, hq, d, generator=g, device="cuda").transpose(1, 2)
    k, v = (torch.randn(bsz, hkv, s, d, generator=g, device="cuda") for _ in range(2))
    positions = torch.arange(t, device="cuda")[None, :] + torch.tensor([[4], [7], [8]], device="cuda")
    mask = torch.arange(s, device="cuda")[None, None, None, :] <= positions[:, None, :, None]
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.125, enable_gqa=True)
    got = masked_attention(q, k, v, mask, 0.125)
    assert got.shape == (bsz, hq, t, d)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_masked_attention_folds_bfloat16_when_cudnn_is_off():
    """With cuDNN's attention off (bfloat16 training, train/loop.autocast) a bfloat16 call folds by default, as a
    float32 one does: the same output as the folded call, and close to SDPA's grouped one."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    g = torch.Generator(device="cuda").manual_seed(0)
    bsz, hq, hkv, t, s, d = 3, 9, 3, 5, 13, 64
    q = torch.randn(bsz, hq, t, d, generator=g, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(bsz, hkv, s, d, generator=g, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    positions = torch.arange(t, device="cuda")[None, :] + torch.tensor([[4], [7], [8]], device="cuda")
    mask = torch.arange(s, device="cuda")[None, None, None, :] <= positions[:, None, :, None]
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
        got = masked_attention(q, k, v, mask, 0.125)
        assert torch.equal(got, masked_attention(q, k, v, mask, 0.125, fold=True))
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.125, enable_gqa=True)
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)


def test_fused_weights_are_views_and_shared():
    m = tiny("tiny-qwen3")
    r1 = DecoderRunner(m.model)
    attn = m.model.model.layers[0].self_attn
    fused, _ = attn._specbench_qkv
    assert attn.q_proj.weight.data_ptr() == fused.data_ptr()
    r2 = DecoderRunner(m.model, num_layers=1)  # a second runner reuses the fused tensors
    assert r2._w[0]["qkv_w"] is r1._w[0]["qkv_w"]


def test_logits_at_and_hidden_layers():
    m = tiny("tiny-llama")
    r = DecoderRunner(m.model)
    r.allocate(2, 16)
    tok = torch.randint(0, 101, (2, 6), generator=torch.Generator().manual_seed(3))
    pos = torch.arange(6).expand(2, 6)
    full = r(tok, pos, attn_len=6, want_hidden=True, hidden_layers=(0,))
    at = torch.tensor([[5], [2]])
    part = r(tok, pos, attn_len=6, logits_at=at)
    torch.testing.assert_close(part.logits[:, 0], full.logits[torch.arange(2), at[:, 0]])
    assert full.hidden.shape == (2, 6, 48) and len(full.layer_hidden) == 1


def test_fewer_rows_than_the_cache():
    m = tiny("tiny-qwen3")
    r = DecoderRunner(m.model)
    r.allocate(4, 32)  # a graph bucket: the batch uses rows 0..1
    _check_runner_against_hf(m.model, r, 101, lens=(4, 7), steps=(1, 2))


@pytest.mark.slow
def test_decoder_matches_transformers_smollm2(smollm2):
    _check_runner_against_hf(smollm2.model, DecoderRunner(smollm2.model), smollm2.model.config.vocab_size,
                             lens=(12, 7), steps=(1, 4), atol=1e-3)
    # 30 layers, logits up to ~20: fp32 sums differ with the thread count (1.7e-4 seen at 2 threads, against
    # <1e-4 at 1), so logits get 1e-3; exactness is asserted where it belongs, on tokens (greedy equality tests)


@pytest.mark.parametrize("rows", ["auto", None, (2, 8)])
def test_cpu_linear_equals_f_linear_for_every_row_count(monkeypatch, rows):
    import specbench.models.decoder as dec

    monkeypatch.setattr(dec, "LINEAR_WT_ROWS", rows)  # the default (timed per shape), F.linear, and weight @ x.T
    g = torch.Generator().manual_seed(0)
    w, b = torch.randn(7, 5, generator=g), torch.randn(7, generator=g)
    for shape in ((5,), (1, 5), (2, 3, 5), (2, 17, 5)):  # 1 row, 6 rows, 34 rows
        x = torch.randn(*shape, generator=g)
        with torch.inference_mode():
            got, got_nobias = dec._linear(x, w, b), dec._linear(x, w)
        assert got.shape == (*shape[:-1], 7)
        torch.testing.assert_close(got, F.linear(x, w, b), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got_nobias, F.linear(x, w), rtol=1e-5, atol=1e-5)


class _SlowFunctional:
    """A test double for decoder's `F` (torch.nn.functional): F.linear 3 ms slower, everything else as is."""

    def __getattr__(self, name):
        return getattr(F, name)

    @staticmethod
    def linear(*args, **kwargs):
        time.sleep(0.003)
        return F.linear(*args, **kwargs)


@pytest.mark.parametrize("slow", ["transposed", "linear"])
def test_auto_linear_takes_the_form_a_first_timing_finds_faster(monkeypatch, slow):
    """LINEAR_WT_ROWS="auto": for 1..8 rows each (weight shape, row count) takes whichever of F.linear, `weight @ x.T`
    and (odd rows) `weight @ x.T` on one zero row more its first timing found fastest, once per process (later calls
    reuse the choice); more than 64 rows take F.linear. The padded form's result is the unpadded rows'."""
    import specbench.models.decoder as dec

    monkeypatch.setattr(dec, "LINEAR_WT_ROWS", "auto")
    monkeypatch.setattr(dec, "_CPU_FORMS", {})
    monkeypatch.setattr(dec, "TIMING_BYTES", 0)  # one copy of the weight per timed pass
    monkeypatch.setattr(dec, "PACKED_FORM", False)  # the packed copy's form: its own test below
    monkeypatch.setattr(dec, "ROWS_FORM", False)  # our own product: its own test below
    calls = []
    real_transposed = dec._transposed

    def transposed(x, w, rows=None):
        calls.append(rows)
        if slow == "transposed" or rows != 4:  # the padded form (3 rows computed on 4) is the fast one...
            time.sleep(0.003)
        return real_transposed(x, w, rows)

    monkeypatch.setattr(dec, "_transposed", transposed)
    if slow == "linear":  # ...unless slow == "transposed", where F.linear is
        monkeypatch.setattr(dec, "F", _SlowFunctional())
    g = torch.Generator().manual_seed(0)
    w = torch.randn(11, 9, generator=g)
    x = torch.randn(3, 9, generator=g)
    with torch.inference_mode():
        got = dec._linear(x, w)
        chosen = ("transposed", 4) if slow == "linear" else ("linear", 3)
        assert dec._CPU_FORMS == {(11, 9, torch.float32, 3, False): chosen}
        assert sorted(calls) == [3] * 4 + [4] * (4 + (slow == "linear"))  # 4 passes of each, then the product
        n = len(calls)
        again = dec._linear(x, w)  # the choice is reused, not timed again
        assert len(calls) == n + (slow == "linear")
        expected = F.linear(x, w)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        assert torch.equal(got, again) and got.is_contiguous()
        if slow == "linear":  # the product of the padded form, zero row dropped
            assert torch.equal(got, real_transposed(x, w, 4)) and got.shape == (3, 11)
        n = len(calls)
        dec._linear(torch.randn(65, 9, generator=g), w)  # more than 64 rows: F.linear, nothing timed
        assert len(calls) == n and len(dec._CPU_FORMS) == 1


def test_auto_linear_decides_9_to_64_rows_per_bucket_timed_at_its_top(monkeypatch):
    """Above 8 rows "auto" times a form once per bucket (9-16, 17-32, 33-64) at the bucket's top row count, and every
    row count in the bucket takes it, on its own rows (no padding to the top); results.json names the bucket."""
    import specbench.models.decoder as dec

    monkeypatch.setattr(dec, "LINEAR_WT_ROWS", "auto")
    monkeypatch.setattr(dec, "_CPU_FORMS", {})
    monkeypatch.setattr(dec, "TIMING_BYTES", 0)
    monkeypatch.setattr(dec, "PACKED_FORM", False)
    monkeypatch.setattr(dec, "ROWS_FORM", False)
    monkeypatch.setattr(dec, "F", _SlowFunctional())  # `weight @ x.T` wins every timing
    calls = []
    real_transposed = dec._transposed

    def transposed(x, w, rows=None):
        calls.append((x.reshape(-1, x.shape[-1]).shape[0], rows))
        return real_transposed(x, w, rows)

    monkeypatch.setattr(dec, "_transposed", transposed)
    g = torch.Generator().manual_seed(0)
    w = torch.randn(11, 9, generator=g)
    with torch.inference_mode():
        x = torch.randn(3, 5, 9, generator=g)  # 15 rows: the 9-16 bucket, timed on 16
        got = dec._linear(x, w)
        assert set(dec._CPU_FORMS) == {(11, 9, torch.float32, 16, False)}
        assert calls[-1] == (15, 15) and {c for c in calls[:-1]} == {(16, 16)}
        assert torch.equal(got, real_transposed(x, w, 15)) and got.shape == (3, 5, 11)
        n = len(calls)
        dec._linear(torch.randn(9, 9, generator=g), w)  # the same bucket: nothing timed
        assert len(calls) == n + 1 and len(dec._CPU_FORMS) == 1
        dec._linear(torch.randn(17, 9, generator=g), w)  # the next bucket: timed on 32
        assert set(dec._CPU_FORMS) == {(11, 9, torch.float32, 16, False), (11, 9, torch.float32, 32, False)}
    assert dec.cpu_form_choices() == {"11x9 float32": {"9-16": "transposed", "17-32": "transposed"}}


class _SlowFloat32Functional:
    """A test double for decoder's `F`: F.linear on a float32 weight 3 ms slower; on a float16 one computed in float32
    and rounded to float16 (torch's own float16 product takes ~8 ms on tiny shapes on some CPUs)."""

    def __getattr__(self, name):
        return getattr(F, name)

    @staticmethod
    def linear(x, weight, *args, **kwargs):
        if weight.dtype == torch.float16:
            return F.linear(x.float(), weight.float(), *args, **kwargs).to(torch.float16)
        time.sleep(0.003)
        return F.linear(x, weight, *args, **kwargs)


def test_auto_linear_with_a_half_copy_may_take_it(monkeypatch):
    """With a float16 copy of the weight (a drafter's CpuLinear), "auto" also times F.linear on that copy, and takes
    it where it is fastest: the input rounded to float16, the result back in float32; the choice is cached apart
    from the same shape's without a copy (the target's own layers never round to float16)."""
    import specbench.models.decoder as dec

    monkeypatch.setattr(dec, "LINEAR_WT_ROWS", "auto")
    monkeypatch.setattr(dec, "_CPU_FORMS", {})
    monkeypatch.setattr(dec, "TIMING_BYTES", 0)
    monkeypatch.setattr(dec, "PACKED_FORM", False)
    monkeypatch.setattr(dec, "ROWS_FORM", False)
    monkeypatch.setattr(dec, "F", _SlowFloat32Functional())
    real_transposed = dec._transposed
    monkeypatch.setattr(dec, "_transposed", lambda *a: time.sleep(0.003) or real_transposed(*a))
    g = torch.Generator().manual_seed(1)
    w, b = torch.randn(11, 9, generator=g), torch.randn(11, generator=g)
    half = w.to(torch.float16)
    x = torch.randn(2, 3, 9, generator=g)
    with torch.inference_mode():
        got = dec._linear(x, w, b, half)
        assert dec._CPU_FORMS == {(11, 9, torch.float32, 6, True): ("half", 6)}
        assert got.dtype == torch.float32 and got.shape == (2, 3, 11)
        assert torch.equal(got, F.linear(x.to(torch.float16).float(), half.float()).to(torch.float16).float() + b)
        torch.testing.assert_close(got, F.linear(x, w, b), rtol=1e-2, atol=1e-2)  # float16's rounding, no more
        plain = dec._linear(x, w, b)  # no copy: timed on its own, never "half"
        assert dec._CPU_FORMS[(11, 9, torch.float32, 6, False)][0] != "half"
        torch.testing.assert_close(plain, F.linear(x, w, b), rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not __import__("specbench.models.decoder").models.decoder._onednn_fp32(torch.zeros(1, 1)),
                    reason="torch without oneDNN's linear over a packed weight")
def test_auto_linear_may_take_a_packed_onednn_copy(monkeypatch):
    """Where the other forms are slower, "auto" takes oneDNN's float32 product on a packed copy of the weight: the
    copy is made once, read again by later calls, made again after an in-place change to the weight, and dropped
    with the weight; the result is F.linear's up to float32 rounding, bias added."""
    import gc

    import specbench.models.decoder as dec

    monkeypatch.setattr(dec, "LINEAR_WT_ROWS", "auto")
    monkeypatch.setattr(dec, "_CPU_FORMS", {})
    monkeypatch.setattr(dec, "_COPIES", {})
    monkeypatch.setattr(dec, "TIMING_BYTES", 0)
    monkeypatch.setattr(dec, "ROWS_FORM", False)
    monkeypatch.setattr(dec, "F", _SlowFunctional())
    real_transposed = dec._transposed
    monkeypatch.setattr(dec, "_transposed", lambda *a: time.sleep(0.003) or real_transposed(*a))
    packs = []
    real_pack = dec._pack_onednn
    monkeypatch.setattr(dec, "_pack_onednn", lambda w, rows: packs.append(w.shape) or real_pack(w, rows))
    g = torch.Generator().manual_seed(3)
    w, b = torch.randn(11, 9, generator=g), torch.randn(11, generator=g)
    x = torch.randn(2, 3, 9, generator=g)
    with torch.inference_mode():
        got = dec._linear(x, w, b)
    assert dec._CPU_FORMS == {(11, 9, torch.float32, 6, False): ("packed", 6)}
    assert got.shape == (2, 3, 11) and got.is_contiguous()
    torch.testing.assert_close(got, F.linear(x, w, b), rtol=1e-5, atol=1e-5)
    timed = len(packs)  # the timing packed its own copies of the weight
    with torch.inference_mode():
        again = dec._linear(x, w, b)
    assert torch.equal(again, got) and len(packs) == timed and len(dec._COPIES) == 1
    with torch.no_grad():
        w.mul_(2)  # an in-place change (a training step): the copy is stale
    with torch.inference_mode():
        doubled = dec._linear(x, w, b)
    assert len(packs) == timed + 1
    torch.testing.assert_close(doubled, F.linear(x, w, b), rtol=1e-5, atol=1e-5)
    del w
    gc.collect()
    assert dec._COPIES == {}  # gone with its weight


@pytest.mark.skipif(not __import__("specbench.kernels.cpu_rows").kernels.cpu_rows.available(),
                    reason="specbench's CPU row product does not build here (no C compiler?)")
def test_auto_linear_prefers_our_row_product_from_two_rows(monkeypatch):
    """From 2 rows on, "auto" takes our own product ("rows", kernels/cpu_rows) unless another form is faster by more
    than ROWS_MARGIN; at 1 row it is one candidate among the others. Its copy of the weight is made once and dropped
    with the weight; the result is F.linear's up to float32 rounding, bias added, each row's bits its own."""
    import gc

    import specbench.models.decoder as dec

    monkeypatch.setattr(dec, "LINEAR_WT_ROWS", "auto")
    monkeypatch.setattr(dec, "_CPU_FORMS", {})
    monkeypatch.setattr(dec, "_COPIES", {})
    monkeypatch.setattr(dec, "TIMING_BYTES", 0)
    monkeypatch.setattr(dec, "PACKED_FORM", False)
    monkeypatch.setattr(dec, "F", _SlowFunctional())  # every other form takes 3 ms a call
    real_transposed = dec._transposed
    monkeypatch.setattr(dec, "_transposed", lambda *a: time.sleep(0.003) or real_transposed(*a))
    real_rows = dec.cpu_rows.linear
    slowdown = {"s": 0.004}  # slower than the others, but within ROWS_MARGIN = 1.5

    def rows_linear(x, packed, n):  # a test double around the real product: as slow as the test asks
        time.sleep(slowdown["s"])
        return real_rows(x, packed, n)

    monkeypatch.setattr(dec.cpu_rows, "linear", rows_linear)
    g = torch.Generator().manual_seed(4)
    w, b = torch.randn(37, 19, generator=g), torch.randn(37, generator=g)
    x = torch.randn(5, 19, generator=g)
    with torch.inference_mode():
        got = dec._linear(x, w, b)
        assert dec._CPU_FORMS[(37, 19, torch.float32, 5, False)] == ("rows", 5)
        torch.testing.assert_close(got, F.linear(x, w, b), rtol=1e-5, atol=1e-5)
        alone = torch.cat([real_rows(x[i : i + 1], dec._copy(w, "rows"), 37)
                           for i in range(5)]) + b
        assert torch.equal(got, alone)
        assert len(dec._COPIES) == 1
        slowdown["s"] = 0.02  # far slower than ROWS_MARGIN allows: another form wins at 3 rows
        dec._linear(x[:3], w)
        assert dec._CPU_FORMS[(37, 19, torch.float32, 3, False)][0] != "rows"
    del w
    gc.collect()
    assert dec._COPIES == {}  # gone with its weight


def test_time_cpu_forms_packs_every_weight_whose_form_is_packed(monkeypatch):
    """When the warm-up's timing picks the packed form for a shape, it packs every weight of that shape (all the
    layers, not only the one it timed), so no product of the run packs one."""
    import specbench.models.decoder as dec

    monkeypatch.setattr(dec, "LINEAR_WT_ROWS", "auto")
    monkeypatch.setattr(dec, "_CPU_FORMS", {})
    monkeypatch.setattr(dec, "_COPIES", {})
    monkeypatch.setattr(dec, "onednn_bf16", lambda: False)

    def fake_timing(weight, row_counts, half):  # a test double: "packed" wins at 4 rows, for the MLP's down shape only
        for rows in row_counts:
            packed = rows == 4 and weight.shape[1] == cfg.intermediate_size
            dec._CPU_FORMS[dec._form_key(weight, rows, half)] = ("packed", rows) if packed else ("linear", rows)

    model = tiny()
    cfg = model.model.config
    runner = DecoderRunner(model.model)
    monkeypatch.setattr(dec, "_time_forms", fake_timing)
    monkeypatch.setattr(dec, "_pack_onednn", lambda w, rows: w.detach().clone())  # the layout does not matter here
    dec.time_cpu_forms(runner)
    downs = [w["down_w"] for w in runner._w]
    assert len(downs) == cfg.num_hidden_layers > 1
    assert set(dec._COPIES) == {(id(d), "packed") for d in downs}


def test_pack_linears_half_weights_keep_a_float16_copy(monkeypatch):
    """pack_linears(half_weights=True) on a CPU without oneDNN bf16: each float32 linear becomes a CpuLinear with a
    float16 copy of its weight (the Parameter unchanged), except a weight outside float16's range (no copy)."""
    import specbench.models.decoder as dec

    monkeypatch.setattr(dec, "onednn_bf16", lambda: False)
    g = torch.Generator().manual_seed(2)
    net = torch.nn.Sequential(torch.nn.Linear(9, 7), torch.nn.Linear(7, 5, bias=False))
    with torch.no_grad():
        net[1].weight[2, 3] = 1e6  # overflows float16
    assert dec.pack_linears(net, half_weights=True) == 2
    assert all(type(m) is dec.CpuLinear for m in net)
    assert net[0].half.dtype == torch.float16 and torch.equal(net[0].half, net[0].weight.detach().to(torch.float16))
    assert net[1].half is None and net[0].weight.dtype == torch.float32
    x = torch.randn(3, 9, generator=g)
    with torch.inference_mode():
        torch.testing.assert_close(net(x), F.linear(F.linear(x, net[0].weight, net[0].bias), net[1].weight),
                                   rtol=1e-2, atol=1e-2)


def test_int8_rows_quantize_each_row_to_its_own_scale():
    """decoder.int8_rows: q in [-127, 127], each row's largest weight near +-127, every weight within half a step of
    q * scale (the bf16 scale the product uses), a zero row kept zero."""
    from specbench.models.decoder import int8_rows

    g = torch.Generator().manual_seed(4)
    w = torch.randn(7, 48, generator=g) * torch.logspace(-3, 1, 7)[:, None]  # rows of very different sizes
    w[3] = 0
    q, scales = int8_rows(w)
    assert q.dtype == torch.int8 and q.shape == (7, 48) and scales.dtype == torch.bfloat16 and scales.shape == (7,)
    assert int(q.abs().max()) <= 127 and bool((q.abs().amax(1)[[0, 1, 2, 4, 5, 6]] >= 126).all())
    assert not q[3].any()
    err = (q.float() * scales.float()[:, None] - w).abs()
    assert bool((err <= 0.51 * scales.float()[:, None]).all())


@pytest.mark.skipif(not hasattr(torch, "_weight_int8pack_mm"), reason="this torch has no CPU int8 product")
def test_pack_linears_int8_for_a_drafters_bf16_layers(monkeypatch):
    """pack_linears(int8=True) where oneDNN bf16 is taken: a bf16 linear whose inner size is a multiple of 16 becomes
    an Int8Linear (the same Parameters), whose product is x times its dequantized weight up to bf16 rounding, a row's
    bits the same whichever rows share the call, and grad on takes the plain bf16 weight; inner sizes 24 and 40 (the
    int8 product returns garbage there) keep their bf16 linear; int8=False, or a torch whose int8 product fails the
    probe, makes none."""
    import specbench.models.decoder as dec

    monkeypatch.setattr(dec, "onednn_bf16", lambda: True)
    monkeypatch.setattr(dec, "_pack_onednn", lambda w, rows=None: w.detach().clone())  # only the int8 ones run here
    g = torch.Generator().manual_seed(6)

    def net() -> torch.nn.Sequential:
        return torch.nn.Sequential(torch.nn.Linear(48, 24), torch.nn.Linear(24, 40, bias=False),
                                   torch.nn.Linear(40, 16), torch.nn.Linear(16, 3)).to(torch.bfloat16)

    m = net()
    keys = {k: v.data_ptr() for k, v in m.state_dict().items()}
    assert dec.pack_linears(m, int8=True) == 2
    assert [type(x).__name__ for x in m] == ["Int8Linear", "Linear", "Linear", "Int8Linear"]
    assert {k: v.data_ptr() for k, v in m.state_dict().items()} == keys
    x = torch.randn(5, 3, 48, generator=g).to(torch.bfloat16)
    with torch.inference_mode():
        y = m[0](x)
        want = F.linear(x.float(), m[0].qweight.float() * m[0].scales.float()[:, None], m[0].bias.float())
        torch.testing.assert_close(y.float(), want, rtol=2e-2, atol=2e-2)
        torch.testing.assert_close(y, F.linear(x, m[0].weight, m[0].bias), rtol=5e-2, atol=5e-2)  # near the bf16 one
        assert torch.equal(m[0](x[1:2, 2:3]), y[1:2, 2:3])
        assert m(x).shape == (5, 3, 3)
    m[0](x).float().sum().backward()
    assert m[0].weight.grad is not None and m[0].weight.grad.shape == (24, 48)

    m = net()
    dec.pack_linears(m, int8=False)
    assert not any(isinstance(x, dec.Int8Linear) for x in m)
    monkeypatch.setattr(dec, "int8_product_works", lambda: False)
    m = net()
    dec.pack_linears(m, int8=True)
    assert not any(isinstance(x, dec.Int8Linear) for x in m)


@pytest.mark.skipif(not hasattr(torch, "_weight_int8pack_mm"), reason="this torch has no CPU int8 product")
def test_the_int8_product_probe_passes_here_and_fails_a_wrong_product(monkeypatch):
    """decoder.int8_product_works: True with this torch's product, False for one that is off by a factor or raises."""
    import specbench.models.decoder as dec

    assert dec.int8_product_works()
    real = torch._weight_int8pack_mm
    monkeypatch.setattr(torch, "_weight_int8pack_mm", lambda x, q, s: real(x, q, s) * 1.5)
    assert not dec.int8_product_works()

    def raises(x, q, s):
        raise RuntimeError("no kernel")

    monkeypatch.setattr(torch, "_weight_int8pack_mm", raises)
    assert not dec.int8_product_works()


def test_time_cpu_forms_covers_every_row_count_before_the_run(monkeypatch):
    """decoder.time_cpu_forms (the CPU warm-up): every weight shape a DecoderRunner and the CpuLinear layers of a
    proposer-like object multiply through `_linear` gets its form for each of 1..8 rows and each bucket above them now,
    so no forward after it times anything; a second call times nothing; with LINEAR_WT_ROWS other than "auto" it does
    nothing."""
    import types

    import specbench.models.decoder as dec

    monkeypatch.setattr(dec, "LINEAR_WT_ROWS", "auto")
    monkeypatch.setattr(dec, "_CPU_FORMS", {})
    monkeypatch.setattr(dec, "TIMING_BYTES", 0)
    monkeypatch.setattr(dec, "onednn_bf16", lambda: False)
    model = tiny()
    runner = DecoderRunner(model.model)
    head = torch.nn.Sequential(torch.nn.Linear(9, 7), torch.nn.Linear(7, 5, bias=False))
    dec.pack_linears(head, half_weights=True)
    proposer = types.SimpleNamespace(head=head, k=3, name="fake")  # a stand-in for a proposer holding a head
    cfg = model.model.config
    shapes = {(w[n].shape[0], w[n].shape[1]) for w in runner._w for n in ("qkv_w", "o_w", "gu_w", "down_w")}
    shapes.add((cfg.vocab_size, cfg.hidden_size))
    timed = [*range(1, 9), 16, 32, 64]
    assert dec.time_cpu_forms(runner, proposer) == len(timed) * (len(shapes) + 2)
    assert set(dec._CPU_FORMS) == ({(n, k, torch.float32, r, False) for n, k in shapes for r in timed}
                                   | {(n, k, torch.float32, r, True) for n, k in ((7, 9), (5, 7)) for r in timed})
    assert dec.time_cpu_forms(runner, proposer) == 0

    def no_timing(*args):
        raise AssertionError("a product form was timed after the warm-up")

    monkeypatch.setattr(dec, "_time_forms", no_timing)
    runner.allocate(3, 16)
    with torch.inference_mode():
        for t in (1, 2, 5):  # 3, 6 and 15 rows
            runner(torch.ones(3, t, dtype=torch.long), torch.arange(t).expand(3, t), attn_len=t)
        head(torch.randn(2, 9))
    monkeypatch.setattr(dec, "LINEAR_WT_ROWS", None)
    assert dec.time_cpu_forms(runner, proposer) == 0


def test_cpu_form_choices_name_each_shape_and_row_count(monkeypatch):
    """results.json's record of the forms "auto" chose: per shape (drafter copies apart), row count -> form, "+pad"
    where odd rows ran on one zero row more."""
    import specbench.models.decoder as dec

    monkeypatch.setattr(dec, "_CPU_FORMS", {(11, 9, torch.float32, 3, False): ("transposed", 4),
                                            (11, 9, torch.float32, 1, False): ("packed", 1),
                                            (11, 9, torch.float32, 1, True): ("half", 1),
                                            (5, 7, torch.float32, 2, False): ("linear", 2)})
    assert dec.cpu_form_choices() == {"5x7 float32": {"2": "linear"},
                                      "11x9 float32": {"1": "packed", "3": "transposed+pad"},
                                      "11x9 float32 drafter": {"1": "half"}}
