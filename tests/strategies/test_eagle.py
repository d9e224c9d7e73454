"""EAGLE: head shapes, feature alignment, cache rollback, T=0 losslessness and T>0 distribution."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from specbench_testing import chisquare_pvalue, resample_from_p, tiny
from specbench.engine import Engine
from specbench.models.decoder import onednn_bf16
from specbench.errors import ConfigError
from specbench.models.runner import make_runner
from specbench.strategies.base import BuildContext
from specbench.strategies.eagle import EagleConfig, EagleHead, EagleProposer
from specbench.verify import SamplingParams, Verdict, Verifier, rejection_sample, sample_from

CPU = torch.device("cpu")


def _head_checkpoint(model, path, fuse_layers=None, seed=0, num_layers=1):
    torch.manual_seed(seed)
    cfg = EagleConfig.for_target(model.model.config, fuse_layers, "test")
    cfg.num_layers = num_layers
    head = EagleHead(cfg, model.model)
    head.save(path)
    return str(path)


def _ctx(model, sampling=SamplingParams()):
    return BuildContext(target=model, target_runner=make_runner(model.model), draft=None, sampling=sampling, device=CPU)


def _prompts(n=8, seed=0, lengths=(5, 9, 3, 12, 7, 4, 10, 6)):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 101, (lengths[i % len(lengths)],), generator=g).tolist() for i in range(n)]


@pytest.fixture(scope="module")
def llama():
    return tiny("tiny-llama")


def test_head_shapes(llama, tmp_path):
    cfg = EagleConfig.for_target(llama.model.config, [0, 1])
    head = EagleHead(cfg, llama.model)
    b, t, h = 2, 5, llama.model.config.hidden_size
    layer_hidden = [torch.randn(b, t, h) for _ in range(2)]
    feature = head.features(None, layer_hidden)
    assert feature.shape == (b, t, h)
    out = head(feature, torch.randint(0, 101, (b, t)), torch.arange(t).expand(b, t))
    assert out.shape == (b, t, h)
    assert head.lm_head(out).shape == (b, t, 101)
    # only the head's own weights are saved: the target's embedding, norm and LM head are shared
    head.save(tmp_path)
    assert not any(k.startswith(("embed", "lm_head", "norm")) for k in head.state_dict())
    assert json.loads((tmp_path / "config.json").read_text())["fuse_layers"] == [0, 1]


@pytest.mark.parametrize("key,value", [("num_layers", 2.5), ("num_layers", True), ("draft_lm_head", "mine")])
def test_a_head_built_directly_refuses_an_unknown_layout_before_it_builds_a_layer(llama, key, value):
    cfg = EagleConfig.for_target(llama.model.config, None, "test")
    setattr(cfg, key, value)
    with pytest.raises(ConfigError, match=f"eagle config: {key}={value!r}; allowed: "):
        EagleHead(cfg, llama.model)


def test_missing_checkpoint_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="needs strategy.checkpoint"):
        EagleProposer.validate({"name": "eagle", "k": 3, "checkpoint": None})
    with pytest.raises(ConfigError, match="nope. does not exist.*specbench.train"):
        EagleProposer.validate({"name": "eagle", "k": 3, "checkpoint": str(tmp_path / "nope")})


def test_fuse_layers_must_match_checkpoint(llama, tmp_path):
    ckpt = _head_checkpoint(llama, tmp_path, fuse_layers=[0, 1])
    with pytest.raises(ConfigError, match="fuse_layers"):
        EagleProposer(_ctx(llama), k=2, checkpoint=ckpt, fuse_layers=[1])
    assert EagleProposer(_ctx(llama), k=2, checkpoint=ckpt).hidden_layers() == (0, 1)


def _record_catch_up(proposer):
    """Wrap the head: record the inputs of the prompt's ingestion (start) and of each step's first (catch-up)
    forward, with the pair index up to which each row's inputs are its own (right-padded prompts in start)."""
    calls, head, original = [], proposer.head, proposer.head.forward
    state = {"first": True, "limit": None}

    def forward(feature, tokens, positions, **kw):
        if kw.get("use_cache") and state["first"]:
            calls.append((feature.clone(), tokens.clone(), positions.clone(), state["limit"]))
        state["first"] = False
        return original(feature, tokens, positions, **kw)

    start = proposer.start

    def start_wrapped(s, hidden):
        state["first"], state["limit"] = True, [n - 1 for n in s.prompt_lengths]
        start(s, hidden)
        state["limit"] = None

    propose = proposer.propose

    def propose_wrapped(s):
        state["first"] = True
        return propose(s)

    head.forward = forward
    proposer.propose = propose_wrapped
    proposer.start = start_wrapped
    return calls


@pytest.mark.parametrize("fuse_layers", [None, [0, 1]])
def test_feature_alignment(llama, tmp_path, fuse_layers):
    """The head's input at position i is (target feature at i, token at i+1), from the true target features."""
    proposer = EagleProposer(_ctx(llama), k=3, checkpoint=_head_checkpoint(llama, tmp_path, fuse_layers))
    calls = _record_catch_up(proposer)
    engine = Engine(make_runner(llama.model), proposer, Verifier(SamplingParams(), CPU), max_new_tokens=12,
                    eos_ids=set(), device=CPU)
    prompts = _prompts(3)
    rows, _ = engine.generate(prompts)
    assert len(calls) >= 4
    # reference features: one plain forward of the target over each final sequence
    for b, (prompt, row) in enumerate(zip(prompts, rows)):
        seq = torch.tensor([prompt + row.output_ids])
        outs = {}
        hooks = [llama.model.model.layers[i].register_forward_hook(
            lambda mod, args, out, i=i: outs.__setitem__(i, out[0] if isinstance(out, tuple) else out)) for i in (0, 1)]
        with torch.no_grad():
            final = llama.model(seq, output_hidden_states=True).hidden_states[-1]  # after the final norm
            ref = proposer.head.features(final, [outs[i] for i in fuse_layers] if fuse_layers else None)[0]
        for h in hooks:
            h.remove()
        for feature, tokens, positions, limit in calls:
            for j, i in enumerate(positions[b].tolist()):
                if i + 1 < seq.shape[1] and (limit is None or i < limit[b]):
                    assert tokens[b, j] == seq[0, i + 1], (b, i)
                    torch.testing.assert_close(feature[b, j], ref[i], atol=2e-4, rtol=2e-4)


@pytest.mark.parametrize("num_layers", [1, 2])
def test_prepare_inference_drafts_as_the_separate_projections(llama, tmp_path, num_layers):
    """prepare_inference (each layer's fused q/k/v and gate/up, the rotary from allocate's table) gives the separate
    projections' output features on a cached pass; the fused copies stay out of parameters() and state_dict()."""
    torch.manual_seed(1)
    cfg = EagleConfig.for_target(llama.model.config, None, "test")
    cfg.num_layers = num_layers
    head = EagleHead(cfg, llama.model)
    layers = head.decoder_layers()
    assert len(layers) == num_layers
    keys, params = set(head.state_dict()), len(list(head.parameters()))
    q_weights = [layer.q_proj.weight.detach().clone() for layer in layers]
    fused = head.prepare_inference()
    assert len(fused) == num_layers
    assert set(head.state_dict()) == keys and len(list(head.parameters())) == params
    for layer, f, q_weight in zip(layers, fused, q_weights, strict=True):
        assert f["qkv"].weight.shape[0] == sum(m.out_features for m in (layer.q_proj, layer.k_proj, layer.v_proj))
        # no second copy: the separate projections are views of the fused weights, with their own values
        assert layer.q_proj.weight.untyped_storage().data_ptr() == f["qkv"].weight.untyped_storage().data_ptr()
        assert layer.up_proj.weight.untyped_storage().data_ptr() == f["gate_up"].weight.untyped_storage().data_ptr()
        assert torch.equal(layer.q_proj.weight, q_weight)
    assert head.unfused_linears() == tuple(lin for layer in layers for lin in (
        layer.q_proj, layer.k_proj, layer.v_proj, layer.gate_proj, layer.up_proj))
    head.save(tmp_path / "saved")  # shared storage is copied out for safetensors
    saved = load_file(str(tmp_path / "saved" / "model.safetensors"))
    assert torch.equal(saved["q_proj.weight"], q_weights[0])
    assert [torch.equal(saved[f"layers.{i}.q_proj.weight"], w) for i, w in enumerate(q_weights[1:])] == [True] * (
        num_layers - 1)
    b, h = 2, llama.model.config.hidden_size
    head.allocate(b, 21, CPU, torch.float32)
    positions = torch.tensor([[3, 4, 5], [11, 12, 13]])
    rotary = head.shared[2]
    cos, sin = rotary(torch.zeros(1), positions)
    assert torch.equal(head.rope_cos[positions], cos) and torch.equal(head.rope_sin[positions], sin)
    feature, tokens = torch.randn(b, 3, h), torch.randint(0, 101, (b, 3))
    outs = {}
    for prepared in (False, True):
        for layer, f in zip(layers, fused):
            layer.fused = (f,) if prepared else ()
        with torch.inference_mode():
            outs[prepared] = head(feature, tokens, positions, use_cache=True, attn_len=16)
    torch.testing.assert_close(outs[True], outs[False], atol=1e-6, rtol=1e-5)


def _scripted_rule(draft_tokens, draft_probs, target_probs, u, e):
    """Accept a random number of drafts (0..K) whatever they are: ragged partial acceptance."""
    k = draft_tokens.shape[1]
    if k == 0:  # the prefill's first token
        return rejection_sample(draft_tokens, draft_probs, target_probs, u, e)
    accepted = (u[:, 0] * (k + 1)).floor().long().clamp(max=k)
    rows = torch.arange(draft_tokens.shape[0])
    return Verdict(accepted=accepted, next_token=sample_from(target_probs[rows, accepted], e))


@pytest.mark.parametrize("num_layers", [1, 2])
def test_cache_rollback_after_partial_acceptance(llama, tmp_path, num_layers):
    """After each catch-up, every layer's cache slots 0..L-2 equal a fresh head pass over the true (feature, token)
    pairs."""
    sampling = SamplingParams(temperature=1.0, seed=3)
    # float32 products only: with the head's float16 copies (cpu_half_weights, the default) the form of a 1..8-row
    # product is timed per process, so under load a cached pass could take float16 where the fresh pass of more rows
    # does not (a CI run on 2026-12-04 failed so: 6e-4 apart). That choice shapes proposals only; here the cache is.
    proposer = EagleProposer(_ctx(llama, sampling), k=3,
                             checkpoint=_head_checkpoint(llama, tmp_path, num_layers=num_layers), cpu_half_weights=False)
    checked = []
    propose = proposer.propose

    def propose_checked(state):
        draft = propose(state)
        for b, length in enumerate(state.lengths_host):
            n = length - 1  # pairs 0..L-2
            pos = torch.arange(n)[None]
            feats = proposer.features[b : b + 1, :n]
            toks = state.tokens[b : b + 1, 1 : n + 1]
            _, kvs = proposer.head(feats, toks, pos, return_kv=True)
            for layer, (k, v) in zip(proposer.head.decoder_layers(), kvs, strict=True):
                torch.testing.assert_close(layer.k_cache[b : b + 1, :, :n], k, atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(layer.v_cache[b : b + 1, :, :n], v, atol=1e-5, rtol=1e-5)
        checked.append(draft)
        return draft

    proposer.propose = propose_checked
    engine = Engine(make_runner(llama.model), proposer, Verifier(sampling, CPU, rule=_scripted_rule),
                    max_new_tokens=14, eos_ids=set(), device=CPU)
    rows, _ = engine.generate(_prompts(4, seed=5))
    accepted = [r.accepted_tokens for r in rows]
    assert len(checked) > 3 and 0 < sum(accepted) < sum(r.draft_tokens for r in rows)  # partial acceptance


@pytest.mark.parametrize("arch,fuse,num_layers", [("tiny-llama", None, 1), ("tiny-qwen3", None, 1),
                                                  ("tiny-llama", [0, 1], 1), ("tiny-qwen3", None, 3)])
def test_lossless_greedy(arch, fuse, num_layers, tmp_path):
    """An untrained head: acceptance is low, the output is still the target's greedy decoding, token for token."""
    model = tiny(arch)
    prompts = _prompts(8)
    ref = [model.model.generate(torch.tensor([p]), max_new_tokens=12, do_sample=False, eos_token_id=None,
                                pad_token_id=0)[0, len(p):].tolist() for p in prompts]
    ckpt = _head_checkpoint(model, tmp_path, fuse, num_layers=num_layers)
    for k, bs in ((3, 1), (2, 4)):
        proposer = EagleProposer(_ctx(model), k=k, checkpoint=ckpt)
        engine = Engine(make_runner(model.model), proposer, Verifier(SamplingParams(), CPU), max_new_tokens=12,
                        eos_ids=set(), device=CPU)
        rows = []
        for s in range(0, len(prompts), bs):
            rows += engine.generate(prompts[s : s + bs])[0]
        assert [r.output_ids for r in rows] == ref, (arch, fuse, num_layers, k, bs)


@pytest.mark.parametrize("num_layers", [1, 2])
def test_a_tree_frontier_in_scratch_slots_sees_its_ancestors_only_in_every_layer(llama, num_layers):
    """A tree's nodes fed into scratch slots (slots, tree_path, as trees.py feeds them) give each node the output
    feature of a cache-free pass over its own chain (the true pairs, then its ancestors): siblings and cousins stay
    out of every layer's attention."""
    torch.manual_seed(4)
    cfg = EagleConfig.for_target(llama.model.config, None, "test")
    cfg.num_layers = num_layers
    head = EagleHead(cfg, llama.model).eval()
    h, p = llama.model.config.hidden_size, 5  # true pairs 0..p; the tree's root is the pair at p
    feature, tokens = torch.randn(1, p + 1, h), torch.randint(0, 101, (1, p + 1))
    node_feature, node_token = torch.randn(1, 3, h), torch.randint(0, 101, (1, 3))  # a, b (children of the root), c (of a)
    with torch.no_grad():
        head.allocate(1, 32, CPU, torch.float32)
        head(feature, tokens, torch.arange(p + 1)[None], use_cache=True)
        ab = head(node_feature[:, :2], node_token[:, :2], torch.tensor([[p + 1, p + 1]]), use_cache=True,
                  slots=torch.tensor([[20, 21]]), tree_path=torch.tensor([[[p, 20, 0], [p, 21, 0]]]))
        c = head(node_feature[:, 2:], node_token[:, 2:], torch.tensor([[p + 2]]), use_cache=True,
                 slots=torch.tensor([[22]]), tree_path=torch.tensor([[[p, 20, 22]]]))

        def chain(*nodes):
            f = torch.cat([feature] + [node_feature[:, n : n + 1] for n in nodes], dim=1)
            t = torch.cat([tokens] + [node_token[:, n : n + 1] for n in nodes], dim=1)
            return head(f, t, torch.arange(f.shape[1])[None])[:, -1]

        torch.testing.assert_close(ab[:, 0], chain(0), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ab[:, 1], chain(1), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(c[:, 0], chain(0, 2), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("tree", [dict(tree="dynamic", top_k=3, num_nodes=7), dict(tree="topk", top_k=2)])
def test_a_deeper_heads_trees_decode_losslessly(tree, tmp_path):
    """A head of 2 layers drafting a tree: every layer's scratch slots see their ancestors' entries only, and T = 0
    output equals target-only decoding at batch 1 and a ragged batch 3."""
    model = tiny("tiny-qwen3")
    prompts = _prompts(6)
    ref = [model.model.generate(torch.tensor([p]), max_new_tokens=12, do_sample=False, eos_token_id=None,
                                pad_token_id=0)[0, len(p):].tolist() for p in prompts]
    ckpt = _head_checkpoint(model, tmp_path, num_layers=2)
    for bs in (1, 3):
        proposer = EagleProposer(_ctx(model), k=3, checkpoint=ckpt, **tree)
        engine = Engine(make_runner(model.model), proposer, Verifier(SamplingParams(), CPU), max_new_tokens=12,
                        eos_ids=set(), device=CPU)
        rows = []
        for s in range(0, len(prompts), bs):
            rows += engine.generate(prompts[s : s + bs])[0]
        assert [r.output_ids for r in rows] == ref, (tree, bs)


@pytest.mark.slow
@pytest.mark.skipif(not onednn_bf16(), reason="needs oneDNN bf16 on this CPU (AMX / AVX512-BF16)")
def test_cpu_int8_weights_keep_the_bf16_default_lossless(monkeypatch, tmp_path):
    """strategy.cpu_int8_weights (default true) on a CPU with oneDNN bf16: the default job (the shipped head on the
    packaged SmolLM2-135M in bf16) drafts through Int8Linear products and its output is still target-only decoding's
    on every prompt; with false no int8 product runs, and the output is the same. Both heads are accepted (AL > 1.3).
    A value that is not a bool is refused before any model loads."""
    import specbench.models.decoder as dec
    from hydra import compose, initialize_config_dir

    from specbench.config import CONF_DIR
    from specbench.run import plan, run

    with pytest.raises(ConfigError, match=r"strategy.cpu_int8_weights=1; allowed: true or false"):
        EagleProposer.validate({"name": "eagle", "k": 3, "checkpoint": "random", "cpu_int8_weights": 1})
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        dtype = plan(compose(config_name="config", overrides=["engine.device=cpu"])).dtype
    if dtype != torch.bfloat16:  # oneDNN bf16 without a row-invariant bf16 GEMM (the AMD EPYC): the default is float32
        pytest.skip(f"the default job runs {dtype} on this CPU (engine.dtype=auto), so its head takes no int8 product")
    calls = []
    real = dec.Int8Linear.forward
    monkeypatch.setattr(dec.Int8Linear, "forward", lambda self, x: calls.append(1) or real(self, x))
    outputs, als = [], []
    for flag in ("true", "false"):
        calls.clear()
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            cfg = compose(config_name="config", overrides=[
                "dataset.num_prompts=3", "max_new_tokens=24", "logger=none", "engine.warmup=false", "engine.device=cpu",
                f"strategy.cpu_int8_weights={flag}", f"+output_dir={tmp_path / flag}"])
        report = run(cfg)
        assert report.results["run"]["dtype"] == "bfloat16"
        assert report.results["exact_match"]["all_equal"], report.results["exact_match"]
        assert (len(calls) > 0) == (flag == "true")
        outputs.append([o["output_token_ids"] for o in report.outputs])
        als.append(report.results["strategy"]["acceptance_length"])
    assert outputs[0] == outputs[1] and min(als) > 1.3, als


def test_cpu_half_weights_keep_the_output_the_targets(monkeypatch, tmp_path):
    """strategy.cpu_half_weights on a CPU without oneDNN bf16: the head's linears keep float16 copies of their weights
    (false: none); with every head product forced onto those copies the output is still the target's greedy decoding.
    The separate q/k/v and gate/up, which a prepared head runs fused, are not packed (no unused copies). A value that
    is not a bool is refused before any model loads."""
    import specbench.models.decoder as dec

    with pytest.raises(ConfigError, match=r"strategy.cpu_half_weights='yes'; allowed: true or false"):
        EagleProposer.validate({"name": "eagle", "k": 3, "checkpoint": "random", "cpu_half_weights": "yes"})
    monkeypatch.setattr(dec, "onednn_bf16", lambda: False)
    model = tiny("tiny-llama")
    ckpt = _head_checkpoint(model, tmp_path)
    off = EagleProposer(_ctx(model), k=3, checkpoint=ckpt, cpu_half_weights=False)
    qkv = off.head.fused[0]["qkv"]
    assert type(qkv) is dec.CpuLinear and qkv.half is None and type(off.head.o_proj) is dec.CpuLinear
    proposer = EagleProposer(_ctx(model), k=3, checkpoint=ckpt)  # the default: true
    head = proposer.head
    assert head.fused[0]["qkv"].half.dtype == torch.float16 and head.fused[0]["gate_up"].half is not None
    assert head.fc.half is not None and head.down_proj.half is not None
    assert all(type(m) is torch.nn.Linear for m in head.unfused_linears())  # run fused: neither packed nor copied
    monkeypatch.setattr(dec, "LINEAR_WT_ROWS", "auto")
    monkeypatch.setattr(dec, "_CPU_FORMS", {})
    monkeypatch.setattr(dec, "TIMING_BYTES", 0)
    dec.time_cpu_forms(proposer)  # the warm-up finds the tuple-held fused linears (gate_up's shape is theirs alone)
    assert tuple(head.fused[0]["gate_up"].weight.shape) in {k[:2] for k in dec._CPU_FORMS}
    forms = []
    real_form = dec._cpu_form
    monkeypatch.setattr(dec, "_cpu_form", lambda w, rows, half=None: forms.append(half is not None) or (
        ("half", rows) if half is not None else real_form(w, rows)))
    prompts = _prompts(4)
    ref = [model.model.generate(torch.tensor([p]), max_new_tokens=10, do_sample=False, eos_token_id=None,
                                pad_token_id=0)[0, len(p):].tolist() for p in prompts]
    engine = Engine(make_runner(model.model), proposer, Verifier(SamplingParams(), CPU), max_new_tokens=10,
                    eos_ids=set(), device=CPU)
    with torch.inference_mode():
        rows = engine.generate(prompts[:1])[0] + engine.generate(prompts[1:])[0]
    assert [r.output_ids for r in rows] == ref
    assert any(forms) and not all(forms)  # the head took its float16 copies; the target never did


def _first_two_counts(model, ckpt, sampling, rule, prompt, n):
    proposer = EagleProposer(_ctx(model, sampling), k=2, checkpoint=ckpt)
    engine = Engine(make_runner(model.model), proposer, Verifier(sampling, CPU, rule=rule), max_new_tokens=2,
                    eos_ids=set(), device=CPU)
    rows, _ = engine.generate([prompt] * n)
    return np.array([r.output_ids[:2] for r in rows])


def _exact_marginals(model, prompt, temperature):
    with torch.no_grad():
        p1 = torch.softmax(model.model(torch.tensor([prompt])).logits[0, -1].double() / temperature, -1)  # [V]
        v = p1.shape[0]
        seqs = torch.cat([torch.tensor([prompt]).expand(v, -1), torch.arange(v)[:, None]], 1)
        p2_given = torch.softmax(model.model(seqs).logits[:, -1].double() / temperature, -1)  # [V, V]
    return p1.numpy(), (p1[:, None] * p2_given).sum(0).numpy()


def test_sampling_matches_target_distribution_and_catches_a_wrong_rule(tmp_path):
    model = tiny("tiny-llama", seed=2)
    with torch.no_grad():  # sharpen the random target so that q and p differ visibly
        model.model.lm_head.weight.mul_(6.0)
    ckpt = _head_checkpoint(model, tmp_path, seed=4)
    sampling = SamplingParams(temperature=1.0, seed=11)
    prompt = [7, 3, 55, 20]
    p1, p2 = _exact_marginals(model, prompt, 1.0)
    good = _first_two_counts(model, ckpt, sampling, rejection_sample, prompt, 3000)
    v = len(p1)
    assert chisquare_pvalue(np.bincount(good[:, 0], minlength=v), p1) > 1e-4
    assert chisquare_pvalue(np.bincount(good[:, 1], minlength=v), p2) > 1e-4
    bad = _first_two_counts(model, ckpt, sampling, resample_from_p, prompt, 3000)
    assert chisquare_pvalue(np.bincount(bad[:, 1], minlength=v), p2) < 1e-6


def test_a_head_without_a_draft_vocabulary_takes_the_targets_lm_head_products_on_the_cpu(tmp_path, monkeypatch):
    """A head over the target's whole vocabulary multiplies by the target's LM head (held by reference, a plain
    nn.Linear) through the decoder's CPU product forms at inference (`decoder.linear`), not plain F.linear; the
    logits are the module's up to float32 rounding."""
    import specbench.models.decoder as dec

    model = tiny("tiny-llama")
    proposer = EagleProposer(_ctx(model), k=2, checkpoint=_head_checkpoint(model, tmp_path / "h"))
    head, lm = proposer.head, model.model.lm_head
    assert head.draft_lm_head is None and type(lm) is torch.nn.Linear
    seen = []
    real = dec._linear
    monkeypatch.setattr(dec, "_linear", lambda x, w, b=None, half=None: seen.append(w is lm.weight) or real(x, w, b, half))
    out = torch.randn(1, 3, model.model.config.hidden_size)
    with torch.inference_mode():
        got = head.logits(out)
    assert any(seen)
    expected = lm(head.norm(out) if head.norm is not None else out)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
