"""The CPU's batch-invariant bf16 path (decoder.py: oneDNN packed GEMMs, attention per query): a token's logits
are bit-identical whether computed in a 1-token forward, inside a verify forward of several tokens, at another
batch size, or as a node of a tree. Needs a CPU with oneDNN bf16 (AMX / AVX512-BF16); skipped elsewhere."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from specbench.models.decoder import DecoderRunner, onednn_bf16
from specbench.models.loading import load_model, resolve_spec

pytestmark = pytest.mark.skipif(not onednn_bf16(), reason="this CPU has no oneDNN bf16 GEMMs")


def tiny_bf16(name: str, seed: int = 0):
    """A small random bf16 model whose GEMM inner sizes are multiples of 64 (decoder.ONEDNN_INVARIANT_K): 3 query
    heads of 64, 1 KV head, hidden 192, MLP 320, vocab 101, 2 layers; `name` picks the architecture."""
    from transformers import AutoConfig, AutoModelForCausalLM

    arch = {"tiny-llama": "llama", "tiny-qwen2": "qwen2", "tiny-qwen3": "qwen3"}[name]
    cfg = AutoConfig.for_model(arch, hidden_size=192, intermediate_size=320, num_hidden_layers=2, num_attention_heads=3,
                               num_key_value_heads=1, head_dim=64, vocab_size=101, max_position_embeddings=256,
                               rope_theta=10_000.0, tie_word_embeddings=False)
    torch.manual_seed(seed)
    return SimpleNamespace(model=AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).eval())


def _one_token_logits(runner: DecoderRunner, seqs: list[list[int]], starts: list[int]) -> list[torch.Tensor]:
    """Row b's logits at positions starts[b].. len-1, each from a 1-token forward of that row alone (after a
    prefill of its first starts[b] tokens)."""
    out = []
    for seq, start in zip(seqs, starts):
        runner.allocate(1, 64)
        runner(torch.tensor([seq[:start]]), torch.arange(start)[None], attn_len=start)
        rows = []
        for p in range(start, len(seq)):
            rows.append(runner(torch.tensor([[seq[p]]]), torch.tensor([[p]]), attn_len=p + 1).logits[0, 0])
        out.append(torch.stack(rows))
    return out


@pytest.mark.parametrize("arch", ["tiny-llama", "tiny-qwen2", "tiny-qwen3"])
def test_a_tokens_logits_do_not_depend_on_the_forward_it_is_in(arch):
    m = tiny_bf16(arch)
    runner = DecoderRunner(m.model)
    assert runner.cpu_invariant and not runner.kernels_on()
    g = torch.Generator().manual_seed(1)
    starts = [5, 9]  # ragged rows: B=2
    seqs = [torch.randint(0, m.model.config.vocab_size, (n + 7,), generator=g).tolist() for n in starts]
    alone = _one_token_logits(runner, seqs, starts)
    # both rows together, prefilled at their own lengths, then windows of 3 and 4 tokens
    runner.allocate(2, 64)
    n0 = max(starts)
    toks = torch.tensor([s[:n0] for s in seqs])
    runner(toks, torch.arange(n0).expand(2, n0), attn_len=n0)  # row 0's slots past 5 are rewritten below
    lengths = list(starts)
    for t in (3, 4):
        positions = torch.tensor(lengths)[:, None] + torch.arange(t)
        tokens = torch.tensor([[seqs[b][p] for p in positions[b].tolist()] for b in range(2)])
        logits = runner(tokens, positions, attn_len=max(lengths) + t).logits
        for b in range(2):
            want = alone[b][lengths[b] - starts[b] : lengths[b] - starts[b] + t]
            assert torch.equal(logits[b], want), f"row {b}, window of {t}"
        lengths = [n + t for n in lengths]


def test_a_tree_nodes_logits_equal_its_paths_chain():
    """Node logits from one tree forward equal, bit for bit, a chain forward over the node's own path."""
    m = tiny_bf16("tiny-qwen3", seed=2)
    runner = DecoderRunner(m.model)
    vocab = m.model.config.vocab_size
    g = torch.Generator().manual_seed(3)
    prompt = torch.randint(0, vocab, (1, 7), generator=g)
    parents = [-1, 0, 0, 1, 1, 2, 3]  # root, then 6 nodes (depths 1, 1, 2, 2, 2, 3)
    nodes = torch.randint(0, vocab, (1, len(parents)), generator=g)
    depth = [0]
    for p in parents[1:]:
        depth.append(depth[p] + 1)
    n = len(parents)
    mask = torch.zeros(1, n, n, dtype=torch.bool)
    for i in range(n):
        j = i
        while j >= 0:
            mask[0, i, j] = True
            j = parents[j]
    root = prompt.shape[1]
    runner.allocate(1, 32)
    runner(prompt, torch.arange(root)[None], attn_len=root)
    before = runner.k_cache[:, 0].clone(), runner.v_cache[:, 0].clone()
    verify = lambda: runner(nodes, root + torch.tensor([depth]), attn_len=root + n,  # noqa: E731
                            slots=root + torch.arange(n)[None], tree_mask=mask).logits[0]
    tree = verify()
    for cache, old in zip((runner.k_cache[:, 0], runner.v_cache[:, 0]), before):  # the prompt's slots untouched
        assert torch.equal(cache[:, :, :root], old[:, :, :root]) and torch.equal(cache[:, :, root + n :], old[:, :, root + n :])
    assert torch.equal(verify(), tree)  # a second verify of the same tree, over what the first left: the same
    for i in range(n):
        path = []
        j = i
        while j >= 0:
            path.insert(0, j)
            j = parents[j]
        chain = DecoderRunner(m.model)
        chain.allocate(1, 32)
        chain(prompt, torch.arange(root)[None], attn_len=root)
        logits = chain(nodes[:, path], root + torch.arange(len(path))[None], attn_len=root + len(path)).logits[0]
        assert torch.equal(tree[i], logits[-1]), f"node {i} (path {path})"
        for tree_cache, chain_cache in ((runner.k_cache, chain.k_cache), (runner.v_cache, chain.v_cache)):
            # the tree's slot root + i holds node i's key and value, as the chain's slot of its depth does
            assert torch.equal(tree_cache[:, 0, :, root + i], chain_cache[:, 0, :, root + depth[i]]), f"node {i}'s slot"


def test_float32_small_inner_sizes_and_batch_invariant_false_keep_the_plain_path():
    preset = resolve_spec({"name": "tiny-qwen3"}, "target")
    assert not DecoderRunner(load_model(preset, "cpu", torch.float32).model).cpu_invariant
    # hidden 48: oneDNN's bf16 product is not row-invariant for that inner size (ONEDNN_INVARIANT_K)
    assert not DecoderRunner(load_model(preset, "cpu", torch.bfloat16).model).cpu_invariant
    m = tiny_bf16("tiny-qwen3")
    plain = DecoderRunner(m.model, batch_invariant=False)
    assert not plain.cpu_invariant
    # the invariant path computes the same function: close to the plain bf16 path
    inv = DecoderRunner(m.model)
    tokens = torch.randint(0, m.model.config.vocab_size, (2, 6), generator=torch.Generator().manual_seed(0))
    for r in (plain, inv):
        r.allocate(2, 16)
    pos = torch.arange(6).expand(2, 6)
    a = plain(tokens[:, :4], pos[:, :4], attn_len=4).logits
    b = inv(tokens[:, :4], pos[:, :4], attn_len=4).logits
    torch.testing.assert_close(F.softmax(a, -1), F.softmax(b, -1), atol=2e-2, rtol=0)


@pytest.mark.parametrize("sizes", [dict(hidden_size=192, intermediate_size=320, num_attention_heads=3, head_dim=64),
                                   dict(hidden_size=192, intermediate_size=288, num_attention_heads=3, head_dim=64),
                                   dict(hidden_size=192, intermediate_size=320, num_attention_heads=3, head_dim=48)])
def test_the_plans_prediction_matches_the_runner(sizes):
    """engine.dtype=auto decides before loading (cpu_bf16_invariant on the spec's known sizes) what the loaded runner
    then does (cpu_invariant): MLP 288, or 3 heads of 48 (o's inner 144), is not a multiple of 64."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from specbench.models.decoder import cpu_bf16_invariant
    from specbench.models.loading import known_sizes

    cfg = AutoConfig.for_model("qwen3", num_hidden_layers=1, num_key_value_heads=1, vocab_size=101,
                               max_position_embeddings=64, **sizes)
    model = AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).eval()
    assert cpu_bf16_invariant(known_sizes(cfg.to_dict())) == DecoderRunner(model).cpu_invariant
    inner_ok = sizes["intermediate_size"] % 64 == 0 and sizes["num_attention_heads"] * sizes["head_dim"] % 64 == 0
    assert DecoderRunner(model).cpu_invariant == inner_ok


def test_a_packed_product_the_probe_passes_keeps_every_rows_bits():
    """decoder._packed_linear at SmolLM2-135M's shapes (inner 576 and 1536, where oneDNN's kernel changes from 33 rows
    on with weights packed for 16): where this CPU's probe (onednn_row_invariant) passes a shape, every row of a
    1..100-row call equals that row alone, bit for bit. Where it fails one (K = 1536 on an AMD EPYC with AVX512-BF16
    and no AMX), a row does differ somewhere, which is what the probe is for; the runner then stays off the path."""
    import specbench.models.decoder as dec

    g = torch.Generator().manual_seed(0)
    for n, k in ((1728, 576), (576, 1536)):
        weight = torch.randn(n, k, generator=g).bfloat16()
        packed = dec._pack_onednn(weight)
        x = torch.randn(100, k, generator=g).bfloat16()
        alone = torch.cat([dec._packed_linear(x[i : i + 1], packed) for i in range(100)])
        equal = [torch.equal(dec._packed_linear(x[:m], packed), alone[:m]) for m in (2, 31, 32, 33, 40, 64, 100)]
        equal.append(torch.equal(dec._packed_linear(x.view(4, 25, k), packed), alone.view(4, 25, n)))  # [B, T, K]
        if dec.onednn_row_invariant([weight]):
            assert all(equal), (n, k, equal)


def test_a_shape_that_fails_the_probe_keeps_plan_and_runner_off_the_bf16_path(monkeypatch):
    """engine.dtype=auto (cpu_bf16_invariant) and DecoderRunner.cpu_invariant both follow this CPU's probe: with one
    GEMM shape recorded as not row-invariant here (as K = 1536 is on an AMD EPYC with AVX512-BF16), neither takes
    the bf16 path; the same sizes take it where every shape passes."""
    import specbench.models.decoder as dec
    from specbench.models.loading import known_sizes

    m = tiny_bf16("tiny-qwen3")
    known = known_sizes(m.model.config.to_dict())
    if not (dec.cpu_bf16_invariant(known) and DecoderRunner(m.model).cpu_invariant):
        pytest.skip("this CPU's probe fails the tiny model's own shapes")
    monkeypatch.setitem(dec._ROW_INVARIANT, (192, 320, torch.bfloat16), False)  # the down projection's [N, K]
    assert not dec.cpu_bf16_invariant(known)
    assert not DecoderRunner(m.model).cpu_invariant


@pytest.mark.skipif(not onednn_bf16(), reason="needs oneDNN bf16 on this CPU (AMX / AVX512-BF16)")
def test_pack_linears_keeps_parameters_and_products():
    """A drafter's own linears on packed weights: the same Parameters (state_dict unchanged), the product F.linear's up
    to bf16 rounding, rows independent of how many share the call, and training (grad on) on the plain weight."""
    from specbench.models.decoder import PackedLinear, pack_linears

    g = torch.Generator().manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Linear(192, 72), torch.nn.ReLU(), torch.nn.Linear(72, 64, bias=False),
                              torch.nn.Linear(48, 16)).to(torch.bfloat16)  # in_features 48: not a multiple of 64, left
    keys = {k: v.data_ptr() for k, v in net.state_dict().items()}
    assert pack_linears(net) == 1  # 72 and 48 inner sizes are not multiples of 64 either
    assert isinstance(net[0], PackedLinear) and type(net[2]) is torch.nn.Linear and type(net[3]) is torch.nn.Linear
    assert {k: v.data_ptr() for k, v in net.state_dict().items()} == keys
    x = torch.randn(5, 3, 192, generator=g).to(torch.bfloat16)
    with torch.inference_mode():
        y = net[0](x)
        torch.testing.assert_close(y, F.linear(x, net[0].weight, net[0].bias), atol=2e-2, rtol=2e-2)
        assert torch.equal(net[0](x[1:2, :1]), y[1:2, :1])
    net[0](x).float().sum().backward()  # grad on: the plain weight's F.linear
    assert net[0].weight.grad is not None and net[0].weight.grad.shape == (72, 192)


def test_pack_linears_routes_float32_through_the_decoders_cpu_product(monkeypatch):
    """A float32 drafter's own linears become CpuLinear (the decoder's `_linear`, whose form is chosen per shape and
    row count), with or without oneDNN bf16 (a CPU whose bf16 product the probe refused runs float32): the same
    Parameters, the product F.linear's up to float rounding, grad on the plain product."""
    import specbench.models.decoder as dec

    for onednn in (False, True):
        monkeypatch.setattr(dec, "onednn_bf16", lambda onednn=onednn: onednn)
        g = torch.Generator().manual_seed(5)
        net = torch.nn.Sequential(torch.nn.Linear(9, 7), torch.nn.Linear(7, 5, bias=False))
        keys = {k: v.data_ptr() for k, v in net.state_dict().items()}
        assert dec.pack_linears(net) == 2
        assert all(type(m) is dec.CpuLinear for m in net)
        assert {k: v.data_ptr() for k, v in net.state_dict().items()} == keys
        x = torch.randn(2, 3, 9, generator=g)
        with torch.inference_mode():
            torch.testing.assert_close(net(x), F.linear(F.linear(x, net[0].weight, net[0].bias), net[1].weight),
                                       rtol=1e-5, atol=1e-5)
        net(x).sum().backward()  # training takes F.linear
        assert net[0].weight.grad is not None
