"""The decoder's Triton kernels equal their torch references (interpreter on the CPU, compiled on CUDA),
and the decoder's kernel path equals its torch path on tiny models."""

from __future__ import annotations


import pytest
import torch

pytest.importorskip("triton")
pytestmark = pytest.mark.gpu  # part of the GPU suite: compiled and exact there, interpreted here

from kernel_env import COMPILED as _COMPILED  # noqa: E402
from kernel_env import DEVICE, kernels  # noqa: E402
from specbench_testing import tree_ancestors, tree_path_nodes  # noqa: E402

(decode,) = kernels("decode")


def _g(seed):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("h", [48, 100])
@pytest.mark.parametrize("add", [False, True])
def test_add_rmsnorm(h, add):
    g = _g(h)
    x = torch.randn(5, h, generator=g).to(DEVICE)
    d = torch.randn(5, h, generator=g).to(DEVICE) if add else None
    w = torch.randn(h, generator=g).to(DEVICE)
    s, out = decode.add_rmsnorm(x, d, w, 1e-6)
    s_ref, out_ref = decode.add_rmsnorm_ref(x, d, w, 1e-6)
    torch.testing.assert_close(s, s_ref)
    torch.testing.assert_close(out, out_ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("qk_norm", [False, True])
def test_qkv_rope_cache(qk_norm):
    g = _g(1)
    bsz, t, hq, hkv, d, slots = 3, 2, 4, 2, 16, 12
    qkv = torch.randn(bsz * t, (hq + 2 * hkv) * d, generator=g).to(DEVICE)
    positions = torch.tensor([[0, 1], [5, 6], [9, 10]]).reshape(-1).to(DEVICE)
    cos = torch.randn(slots, d, generator=g).to(DEVICE)
    sin = torch.randn(slots, d, generator=g).to(DEVICE)
    nw = torch.randn(2, d, generator=g).to(DEVICE) if qk_norm else None
    caches = [torch.randn(4, hkv, slots, d, generator=g).to(DEVICE) for _ in range(2)]  # 4 rows: row 3 untouched
    ref_caches = [c.clone() for c in caches]
    q = decode.qkv_rope_cache(qkv, positions, bsz, cos, sin, nw, 1e-6, caches[0], caches[1], hq, hkv, d)
    q_ref = decode.qkv_rope_cache_ref(qkv, positions, bsz, cos, sin, nw, 1e-6, ref_caches[0], ref_caches[1], hq, hkv, d)
    torch.testing.assert_close(q, q_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(caches[0], ref_caches[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(caches[1], ref_caches[1])


@pytest.mark.parametrize("t,splits", [(1, 1), (3, 1), (1, 3), (4, 2)])
def test_decode_attention(t, splits):
    g = _g(t * 10 + splits)
    bsz, hq, hkv, d, slots = 3, 6, 2, 16, 150
    q = torch.randn(bsz, t, hq, d, generator=g).to(DEVICE)
    kc = torch.randn(4, hkv, slots, d, generator=g).to(DEVICE)
    vc = torch.randn(4, hkv, slots, d, generator=g).to(DEVICE)
    starts = torch.tensor([0, 40, 140 - t])
    positions = (starts[:, None] + torch.arange(t)).to(DEVICE)
    out = decode.decode_attention(q, kc, vc, positions, d**-0.5, num_splits=splits, block_n=32)
    ref = decode.decode_attention_ref(q, kc, vc, positions, d**-0.5)
    # compiled on a GPU, tl.dot rounds fp32 inputs to tf32 (the decoder runs bf16 there); exact in the interpreter
    torch.testing.assert_close(out, ref, **(dict(atol=5e-3, rtol=5e-3) if _COMPILED else dict(atol=2e-5, rtol=1e-4)))


def test_silu_mul():
    x = torch.randn(3, 2 * 70, generator=_g(2)).to(DEVICE)
    torch.testing.assert_close(decode.silu_mul(x), decode.silu_mul_ref(x), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("arch", ["tiny-llama", "tiny-qwen2", "tiny-qwen3"])
def test_decoder_kernel_path_equals_torch_path(arch):
    from specbench.models.decoder import DecoderRunner
    from specbench.models.loading import load_model, resolve_spec

    m = load_model(resolve_spec({"name": arch}, "target"), "cpu", torch.float32)
    m.model.to(DEVICE)
    ref, fast = DecoderRunner(m.model, use_kernels=False), DecoderRunner(m.model, use_kernels=True)
    g = _g(5)
    seq = torch.randint(0, 101, (2, 30), generator=g).to(DEVICE)
    for r in (ref, fast):
        r.allocate(3, 32)
    lengths = [7, 4]
    pos = torch.arange(7, device=DEVICE).expand(2, 7)
    outs = [r(seq[:, :7], pos, attn_len=7, want_hidden=True, hidden_layers=(0,)) for r in (ref, fast)]
    tol = dict(atol=2e-3, rtol=2e-3) if _COMPILED else dict(atol=1e-4, rtol=1e-4)  # tf32 attention when compiled
    torch.testing.assert_close(outs[1].logits, outs[0].logits, **tol)
    torch.testing.assert_close(outs[1].layer_hidden[0], outs[0].layer_hidden[0], **(tol if _COMPILED else dict(atol=1e-5, rtol=1e-4)))
    for t in (1, 3, 2):
        positions = torch.tensor(lengths, device=DEVICE)[:, None] + torch.arange(t, device=DEVICE)
        tokens = seq.gather(1, positions)
        outs = [r(tokens, positions, attn_len=max(lengths) + t) for r in (ref, fast)]
        torch.testing.assert_close(outs[1].logits, outs[0].logits, **tol)
        lengths = [n + t for n in lengths]


def test_decoder_mlp_in_one_launch_equals_three(monkeypatch):
    """engine.fused_mlp: the decoder's kernel path takes skinny_gemm.fused_mlp for forwards of up to 16 rows (and
    not above), and its logits equal the three-launch MLP's: bit for bit compiled (bf16), to rounding interpreted."""
    from specbench.kernels import skinny_gemm
    from specbench.models.decoder import DecoderRunner
    from specbench.models.loading import load_model, resolve_spec

    dtype = torch.bfloat16 if _COMPILED else torch.float32
    model = load_model(resolve_spec({"name": "tiny-qwen3"}, "target"), "cpu", torch.float32).model.to(DEVICE, dtype)
    real, fused = skinny_gemm.fused_mlp, []

    def counted(*args, **kwargs):
        y = real(*args, **kwargs)
        fused.append(y is not None)
        return y

    monkeypatch.setattr(skinny_gemm, "fused_mlp", counted)
    # compiled, the tuner may keep three launches for a model this small: this test's stand-in always takes one
    monkeypatch.setattr(skinny_gemm, "_MLP_TUNED", {})
    monkeypatch.setattr(skinny_gemm, "_tune_mlp", lambda *args: skinny_gemm._MLP_CANDIDATES[1])
    seq = torch.randint(0, 101, (3, 20), generator=_g(9)).to(DEVICE)

    def logits(on: bool) -> list[torch.Tensor]:
        skinny_gemm.use_fused_mlp(on)
        runner = DecoderRunner(model, use_kernels=True, batch_invariant=True)
        runner.allocate(3, 32)
        pos = torch.arange(20, device=DEVICE).expand(3, 20)
        outs = [runner(seq[:, :5], pos[:, :5].contiguous(), attn_len=5).logits]  # 15 rows: fused
        outs.append(runner(seq[:, 5:11], pos[:, 5:11].contiguous(), attn_len=11).logits)  # 18 rows: three launches
        outs += [runner(seq[:, t:t + 1], pos[:, t:t + 1].contiguous(), attn_len=t + 1).logits for t in (11, 12)]
        return outs

    try:
        on, off = logits(True), logits(False)
    finally:
        skinny_gemm.use_fused_mlp(True)
    layers = model.config.num_hidden_layers
    assert fused[: 4 * layers] == [True] * layers + [False] * layers + [True] * 2 * layers, fused
    for a, b in zip(on, off, strict=True):
        if _COMPILED:
            assert torch.equal(a, b)
        else:
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_qkv_rope_cache_writes_tree_nodes_at_their_slots():
    """A tree's nodes share rotary positions (siblings) but not cache slots: rope by position, write by slot."""
    g = _g(3)
    bsz, t, hq, hkv, d, slots = 2, 3, 4, 2, 16, 12
    qkv = torch.randn(bsz * t, (hq + 2 * hkv) * d, generator=g).to(DEVICE)
    positions = torch.tensor([[2, 3, 3], [6, 7, 7]]).reshape(-1).to(DEVICE)  # two siblings at depth 1
    slot_ids = torch.tensor([[2, 3, 4], [6, 7, 8]]).reshape(-1).to(DEVICE)
    cos = torch.randn(slots, d, generator=g).to(DEVICE)
    sin = torch.randn(slots, d, generator=g).to(DEVICE)
    caches = [torch.zeros(3, hkv, slots, d).to(DEVICE) for _ in range(2)]
    ref_caches = [c.clone() for c in caches]
    q = decode.qkv_rope_cache(qkv, positions, bsz, cos, sin, None, 1e-6, caches[0], caches[1], hq, hkv, d, slot_ids)
    q_ref = decode.qkv_rope_cache_ref(qkv, positions, bsz, cos, sin, None, 1e-6, ref_caches[0], ref_caches[1], hq, hkv, d,
                                      slot_ids)
    torch.testing.assert_close(q, q_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(caches[0], ref_caches[0], atol=1e-5, rtol=1e-5)
    assert caches[1][:2, :, [4, 8]].abs().sum() > 0 and caches[1][2].abs().sum() == 0  # slots 4 and 8 written, row 2 not


@pytest.mark.parametrize("arch", ["tiny-llama", "tiny-qwen3"])
def test_decoder_kernel_tree_forward(arch):
    """The kernel path's tree forward equals the torch path's, and (batch-invariant) each node's logits equal its
    root path fed as a chain on the kernel path, bit for bit."""
    from specbench.models.decoder import DecoderRunner
    from specbench.models.loading import load_model, resolve_spec

    m = load_model(resolve_spec({"name": arch}, "target"), "cpu", torch.float32)
    m.model.to(DEVICE)
    parents = [-1, -1, 0, 0, 1, 3]
    paths = [tree_path_nodes(parents, col - 1) for col in range(len(parents) + 1)]  # the nodes under the pending one
    t = len(parents) + 1
    mask = tree_ancestors(parents)
    g = _g(7)
    prompts = [torch.randint(0, 101, (n,), generator=g).tolist() for n in (5, 9)]
    nodes = torch.randint(0, 101, (2, len(parents)), generator=g)
    lengths = torch.tensor([len(p) for p in prompts])
    tokens = torch.cat([torch.tensor([[p[-1]] for p in prompts]), nodes], 1).to(DEVICE)
    depth = torch.tensor([len(p) for p in paths])
    positions = (lengths[:, None] - 1 + depth[None]).to(DEVICE)
    slot_ids = (lengths[:, None] - 1 + torch.arange(t)[None]).to(DEVICE)

    caches: dict[bool, tuple[torch.Tensor, torch.Tensor]] = {}

    def prefilled(kernels: bool) -> DecoderRunner:
        """A runner whose row b holds prompt b but its pending token, prefilled row by row once per path (the
        interpreter is slow) and copied into each runner asked for."""
        r = DecoderRunner(m.model, use_kernels=kernels)
        r.allocate(2, 32)
        if kernels not in caches:
            for b, p in enumerate(prompts):
                one = DecoderRunner(m.model, use_kernels=kernels)
                one.allocate(1, 32)
                one(torch.tensor([p[:-1]], device=DEVICE), torch.arange(len(p) - 1, device=DEVICE)[None])
                r.k_cache[:, b], r.v_cache[:, b] = one.k_cache[:, 0], one.v_cache[:, 0]
            caches[kernels] = r.k_cache.clone(), r.v_cache.clone()
        r.k_cache.copy_(caches[kernels][0])
        r.v_cache.copy_(caches[kernels][1])
        return r

    trees = [prefilled(k)(tokens, positions, attn_len=32, slots=slot_ids, tree_mask=mask.expand(2, t, t).to(DEVICE)).logits
             for k in (False, True)]
    tol = dict(atol=2e-3, rtol=2e-3) if _COMPILED else dict(atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(trees[1], trees[0], **tol)
    for b, p in enumerate(prompts):
        for col, path in enumerate(paths):
            chain = prefilled(True)
            toks = torch.tensor([[p[-1]] + [int(nodes[b, j]) for j in path]], device=DEVICE)
            pos = torch.arange(len(p) - 1, len(p) - 1 + toks.shape[1], device=DEVICE)[None]
            rows = chain.k_cache.shape[1]
            want = chain(toks.expand(rows, -1).contiguous(), pos.expand(rows, -1).contiguous(), attn_len=32).logits[b, -1]
            assert torch.equal(trees[1][b, col], want), f"row {b} column {col}: tree logits differ from its chain's"


def test_dependent_launch_is_off_where_kernels_are_not_compiled_for_hopper():
    """engine.pdl applies to compiled kernels on CUDA (sm90+) only: never on the CPU or in the interpreter."""
    from specbench.kernels import decode

    assert not decode.pdl(torch.device("cpu"))
    try:
        decode.use_pdl(False)
        assert decode.PDL is False
    finally:
        decode.use_pdl(True)
    assert decode.PDL is True and not decode.pdl(torch.device("cpu"))
