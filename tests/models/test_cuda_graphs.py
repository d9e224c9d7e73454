"""GraphedRunner's code path (static buffers, batch buckets, scratch slot, logits_at, trees) gives the
wrapped DecoderRunner's results; on the CPU it runs eagerly, capture happens only on CUDA."""

from __future__ import annotations

import pytest
import torch

from specbench_testing import tree_ancestors, tree_depth
from specbench.engine import Engine
from specbench.kernels.decode_ref import tree_paths
from specbench.models.cuda_graphs import GraphedRunner, bucket, cuda_graphs_default, maybe_graphed
from specbench.models.decoder import DecoderRunner
from specbench.models.loading import load_model, resolve_spec
from specbench.strategies.base import BuildContext
from specbench.strategies.draft_model import DraftModelProposer
from specbench.strategies.none import TargetOnly
from specbench.verify import SamplingParams, Verifier


def tiny(name: str = "tiny-llama", seed: int = 0):
    """tests/conftest.py's tiny(): imported by name, `conftest` can resolve to another directory's."""
    return load_model(resolve_spec({"name": name, "init_seed": seed}, "target"), "cpu", torch.float32)


def test_bucket_and_defaults():
    assert [bucket(b) for b in (1, 3, 5, 9, 33, 64, 65)] == [1, 4, 8, 12, 40, 64, 80]
    assert cuda_graphs_default("auto", torch.device("cpu")) is False
    assert cuda_graphs_default(None, torch.device("cuda")) is True
    assert cuda_graphs_default(False, torch.device("cuda")) is False
    m = tiny("tiny-llama")
    r = DecoderRunner(m.model)
    assert maybe_graphed(r, False) is r
    assert isinstance(maybe_graphed(r, True), GraphedRunner)
    assert maybe_graphed(maybe_graphed(r, True), True).runner is r


@pytest.mark.parametrize("arch", ["tiny-llama", "tiny-qwen3"])
def test_graphed_runner_equals_runner(arch):
    m = tiny(arch)
    plain = DecoderRunner(m.model)
    graphed = GraphedRunner(DecoderRunner(m.model))
    g = torch.Generator().manual_seed(0)
    bsz, plen = 3, 10
    seq = torch.randint(0, 101, (bsz, 40), generator=g)
    plain.allocate(bsz, 30)
    graphed.allocate(bsz, 30)
    assert graphed.rows == 4 and graphed.max_len >= 31  # bucket 4, slots rounded with a scratch slot
    pos = torch.arange(plen).expand(bsz, plen)
    a = plain(seq[:, :plen], pos, attn_len=plen)  # T=10 > max_graph_tokens: eager in both
    b = graphed(seq[:, :plen], pos, attn_len=plen)
    torch.testing.assert_close(a.logits, b.logits)
    lengths = torch.tensor([plen, plen - 2, plen - 5])
    for step, t in enumerate([1, 4, 2, 4, 1]):
        positions = lengths[:, None] + torch.arange(t)
        tokens = seq.gather(1, positions)
        at = torch.full((bsz, 1), t - 1) if step % 2 else None
        a = plain(tokens, positions, attn_len=int(lengths.max()) + t, logits_at=at)
        b = graphed(tokens, positions, attn_len=int(lengths.max()) + t, logits_at=at)
        torch.testing.assert_close(a.logits, b.logits, atol=1e-5, rtol=1e-5)
        lengths = lengths + torch.tensor([t, 1, max(1, t - 1)])
    assert len(graphed.graphs) == 4  # (4, 1, None), (4, 4, 1), (4, 2, None), (4, 1, 1)... keyed by T and logits_at


@pytest.mark.parametrize("form", ["mask", "path"])
def test_graphed_tree_forward_equals_runner(form):
    """A tree forward (distinct slots, a mask or ancestor paths) through the static buffers gives the plain runner's
    logits, for a batch that fills its bucket and then for a smaller one in the same bucket (a padding row);
    one graph per (bucket, T, tree form and width)."""
    parents = [-1, -1, 0, 0, 1, 3, 2]  # 7 nodes, depth 3
    n = len(parents)
    m = tiny("tiny-llama")
    plain, graphed = DecoderRunner(m.model), GraphedRunner(DecoderRunner(m.model))
    g = torch.Generator().manual_seed(1)
    seq = torch.randint(0, 101, (4, 20), generator=g)
    for r in (plain, graphed):
        r.allocate(4, 40)
        r(seq, torch.arange(20).expand(4, 20), attn_len=20)
    depth = torch.tensor([0] + [tree_depth(parents, i) for i in range(n)])
    for bsz, lengths in ((4, [20, 17, 12, 15]), (3, [14, 9, 20])):
        lengths = torch.tensor(lengths)
        tokens = torch.randint(0, 101, (bsz, n + 1), generator=g)
        positions = lengths[:, None] - 1 + depth
        slots = lengths[:, None] - 1 + torch.arange(n + 1)
        mask = tree_ancestors(parents).expand(bsz, -1, -1)
        tree = dict(tree_mask=mask) if form == "mask" else dict(tree_path=tree_paths(mask, slots)[:, :, :4].contiguous())
        a = plain(tokens, positions, attn_len=40, slots=slots, **tree)
        b = graphed(tokens, positions, attn_len=40, slots=slots, **tree)
        torch.testing.assert_close(a.logits, b.logits, atol=1e-5, rtol=1e-5)
    width = n + 1 if form == "mask" else 4
    assert (4, n + 1, None, False, (), (form, width)) in graphed.graphs and len(graphed.graphs) == 1


@pytest.mark.parametrize("tree", [dict(), dict(tree="topk", top_k=2), dict(tree="dynamic", top_k=2, num_nodes=5)],
                         ids=["chain", "topk", "dynamic"])
def test_engine_with_graphed_runners_is_lossless(tree):
    """Greedy draft_model through GraphedRunners (target and draft) emits target-only greedy tokens, as a chain and
    as trees (the target's tree verify and the dynamic tree's frontier forwards go through the static buffers)."""
    t = tiny("tiny-qwen3")
    d = tiny("tiny-qwen3", seed=1)
    sp = SamplingParams()
    target = maybe_graphed(DecoderRunner(t.model), True)
    ctx = BuildContext(target=t, target_runner=target, draft=d, sampling=sp, device=torch.device("cpu"))
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 101, (n,), generator=g).tolist() for n in (5, 9, 3)]
    ref = Engine(DecoderRunner(t.model), TargetOnly(ctx), Verifier(sp, "cpu"), max_new_tokens=12, eos_ids=set(),
                 device=torch.device("cpu")).generate(prompts)[0]
    prop = DraftModelProposer(ctx, k=3, **tree)
    prop.runner = maybe_graphed(prop.runner, True)
    rows = Engine(target, prop, Verifier(sp, "cpu"), max_new_tokens=12, eos_ids=set(),
                  device=torch.device("cpu")).generate(prompts)[0]
    assert [r.output_ids for r in rows] == [r.output_ids for r in ref]


def test_a_one_row_prefill_is_padded_replayed_and_lands_in_its_row():
    """A prefill of one row (batch 1, or an admission under narrow()) longer than max_graph_tokens runs padded to a
    PREFILL_BUCKETS length on a scratch row (here eagerly, as on the CPU; captured on CUDA), then its K and V are
    copied into its own row: the logits and cache entries are the unpadded prefill's (fp32: up to summation order),
    the other rows are untouched, and decoding after it matches."""
    m = tiny("tiny-qwen3")
    plain, graphed = DecoderRunner(m.model), GraphedRunner(DecoderRunner(m.model), prefill_graphs=True)
    plain.allocate(3, 300)
    graphed.allocate(3, 300)
    plain.allocate(3, graphed.max_len)  # the same slots in both
    g = torch.Generator().manual_seed(4)
    seq = torch.randint(0, 101, (1, 90), generator=g)
    p = 70
    with plain.narrow(1, 2), graphed.narrow(1, 2):
        a = plain(seq[:, :p], torch.arange(p)[None], attn_len=p, logits_at=torch.tensor([[p - 1]]), want_hidden=True)
        b = graphed(seq[:, :p], torch.arange(p)[None], attn_len=p, logits_at=torch.tensor([[p - 1]]), want_hidden=True)
    assert ("prefill", 128, 1, True, ()) in graphed.graphs
    assert b.logits.shape == (1, 1, 101) and b.hidden.shape == a.hidden.shape == (1, p, 48)
    torch.testing.assert_close(b.logits, a.logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(b.hidden, a.hidden, atol=1e-5, rtol=1e-5)
    kc = graphed.runner.k_cache
    torch.testing.assert_close(kc[:, 1, :, :p], plain.k_cache[:, 1, :, :p], atol=1e-5, rtol=1e-5)
    assert not kc[:, 0].any() and not kc[:, 2].any()  # the other rows: untouched
    # decoding the row on: its cache past the prompt (the pad tokens' slots) is rewritten before it is read
    for pos in range(p, p + 6):
        tok, at = seq[:, pos:pos + 1], torch.tensor([[pos]])
        with plain.narrow(1, 2), graphed.narrow(1, 2):
            a, b = plain(tok, at, attn_len=pos + 1), graphed(tok, at, attn_len=pos + 1)
        torch.testing.assert_close(b.logits, a.logits, atol=1e-5, rtol=1e-5)
    # no logits_at: every real position's logits, not the pads'
    full = graphed(seq[:, :20], torch.arange(20)[None], attn_len=20)
    assert full.logits.shape == (1, 20, 101) and ("prefill", 64, None, False, ()) in graphed.graphs


@pytest.mark.parametrize("concurrency", [None, 2])
def test_engine_with_padded_prefills_is_lossless(concurrency):
    """Greedy draft_model with both runners' one-row prefills padded and replayed (static batch 1, and continuous
    batching over 2 slots, whose admissions are one-row prefills into their rows) emits target-only greedy tokens."""
    t, d = tiny("tiny-qwen3"), tiny("tiny-qwen3", seed=1)
    sp = SamplingParams()
    target = GraphedRunner(DecoderRunner(t.model), prefill_graphs=True)
    ctx = BuildContext(target=t, target_runner=target, draft=d, sampling=sp, device=torch.device("cpu"))
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 101, (n,), generator=g).tolist() for n in (40, 17, 70, 23)]
    ref = Engine(DecoderRunner(t.model), TargetOnly(ctx), Verifier(sp, "cpu"), max_new_tokens=12, eos_ids=set(),
                 device=torch.device("cpu"))
    expected = [ref.generate([p])[0][0].output_ids for p in prompts]
    prop = DraftModelProposer(ctx, k=3)
    prop.runner = GraphedRunner(prop.runner, prefill_graphs=True)
    engine = Engine(target, prop, Verifier(sp, "cpu"), max_new_tokens=12, eos_ids=set(), device=torch.device("cpu"))
    if concurrency is None:
        rows = [engine.generate([p])[0][0] for p in prompts]
    else:
        rows = engine.generate(prompts, concurrency=concurrency)[0]
    assert [r.output_ids for r in rows] == expected
    assert any(key[0] == "prefill" for key in target.graphs) and any(key[0] == "prefill" for key in prop.runner.graphs)
