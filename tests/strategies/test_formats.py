"""Published drafter formats (EAGLE-1, EAGLE-3, Medusa, speculators eagle / eagle3): tiny random checkpoints written
in each format's exact layout load through strategy.checkpoint=<dir>, give the logits of a plain re-implementation of
the published forward, decode losslessly, and bad ones are ConfigErrors; our export loads back bit-identically."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

from specbench_testing import hf_greedy, ragged_prompts, tiny
from specbench.engine import Engine
from specbench.errors import ConfigError
from specbench.models.loading import ModelSpec, known_sizes, load_model
from specbench.models.presets import PRESETS
from specbench.models.runner import make_runner
from specbench.strategies.base import BuildContext
from specbench.strategies.checkpoints import read_weights
from specbench.strategies.eagle import EagleHead, EagleProposer, load_eagle_head
from specbench.strategies.formats import eagle3_default_layers, eagle_state, export_speculators
from specbench.strategies.medusa import MedusaProposer, load_medusa_heads
from specbench.verify import SamplingParams, Verifier

CPU = torch.device("cpu")
H, NH, NKV, D, I, V, VD = 48, 3, 1, 16, 80, 101, 37  # tiny-llama's sizes; VD: an EAGLE-3 draft vocabulary
THETA, EPS = 10_000.0, 1e-6


def _target(layers: int = 2):
    arch = {**PRESETS["tiny-llama"].arch, "num_hidden_layers": layers}
    spec = ModelSpec(name=f"tiny-llama-{layers}l", source="random", arch=arch, vocab_size=V, known=known_sizes(arch))
    return load_model(spec, "cpu", torch.float32)


@pytest.fixture(scope="module")
def llama():
    return tiny("tiny-llama")


@pytest.fixture(scope="module")
def deep():
    """7 layers: EAGLE-3's default fused inputs of layers (2, 3, 4) are distinct."""
    return _target(7)


def _ctx(model, sampling=SamplingParams()):
    return BuildContext(target=model, target_runner=make_runner(model.model), draft=None, sampling=sampling, device=CPU)


# -- checkpoints in the published layouts (names, shapes, dtypes and config keys of the projects' sources) ---------


def _llama_config(**extra):
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H, "intermediate_size": I,
            "num_attention_heads": NH, "num_key_value_heads": NKV, "num_hidden_layers": 1, "rms_norm_eps": EPS,
            "vocab_size": V, "rope_theta": THETA, "max_position_embeddings": 512, "hidden_act": "silu",
            "torch_dtype": "float16", **extra}


def _rand(g, *shape, scale=0.2, dtype=torch.float16):
    return (torch.randn(*shape, generator=g) * scale).to(dtype)


def _layer(g, prefix, q_in=H, input_layernorm=True, hidden_norm=False, dtype=torch.float16):
    w = {f"{prefix}self_attn.q_proj.weight": _rand(g, NH * D, q_in, dtype=dtype),
         f"{prefix}self_attn.k_proj.weight": _rand(g, NKV * D, q_in, dtype=dtype),
         f"{prefix}self_attn.v_proj.weight": _rand(g, NKV * D, q_in, dtype=dtype),
         f"{prefix}self_attn.o_proj.weight": _rand(g, H, NH * D, dtype=dtype),
         f"{prefix}mlp.gate_proj.weight": _rand(g, I, H, dtype=dtype),
         f"{prefix}mlp.up_proj.weight": _rand(g, I, H, dtype=dtype),
         f"{prefix}mlp.down_proj.weight": _rand(g, H, I, dtype=dtype),
         f"{prefix}post_attention_layernorm.weight": (1 + _rand(g, H, scale=0.1, dtype=torch.float32)).to(dtype)}
    if input_layernorm:
        w[f"{prefix}input_layernorm.weight"] = (1 + _rand(g, H, scale=0.1, dtype=torch.float32)).to(dtype)
    if hidden_norm:
        w[f"{prefix}hidden_norm.weight"] = (1 + _rand(g, H, scale=0.1, dtype=torch.float32)).to(dtype)
    return w


def write_eagle1(path, seed=0, embed=True, **config):
    """SafeAILab/EAGLE cnets1.py: fc (2H -> H, bias), layers.0 without input_layernorm, pytorch_model.bin."""
    g = torch.Generator().manual_seed(seed)
    w = {"fc.weight": _rand(g, H, 2 * H), "fc.bias": _rand(g, H), **_layer(g, "layers.0.", input_layernorm=False)}
    if embed:
        w["embed_tokens.weight"] = _rand(g, V, H, scale=1.0)
    path.mkdir(parents=True, exist_ok=True)
    torch.save(w, path / "pytorch_model.bin")
    (path / "config.json").write_text(json.dumps(_llama_config(bias=True, **config)))
    return str(path)


def _vocab_map(g, vocab=V, draft=VD):
    ids = torch.randperm(vocab, generator=g)[:draft].sort().values  # the draft vocabulary's target ids
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[ids] = True
    return ids - torch.arange(draft), t2d  # d2t: target id = i + d2t[i]


def write_eagle3(path, seed=0, **config):
    """SafeAILab/EAGLE cnets.py: fc (3H -> H), midlayer (hidden_norm, q/k/v over 2H), norm, lm_head [Vd, H], d2t, t2d."""
    g = torch.Generator().manual_seed(seed)
    d2t, t2d = _vocab_map(g)
    w = {"fc.weight": _rand(g, H, 3 * H), **_layer(g, "midlayer.", q_in=2 * H, hidden_norm=True),
         "norm.weight": (1 + _rand(g, H, scale=0.1, dtype=torch.float32)).half(), "lm_head.weight": _rand(g, VD, H),
         "d2t": d2t, "t2d": t2d}
    path.mkdir(parents=True, exist_ok=True)
    save_file(w, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps(_llama_config(draft_vocab_size=VD, **config)))
    return str(path)


def _speculators(algorithm, **fields):
    layer = {k: v for k, v in _llama_config().items() if k not in ("architectures", "torch_dtype")}
    return {"architectures": ["Eagle3Speculator" if algorithm == "eagle3" else "EagleSpeculator"],
            "speculators_model_type": algorithm, "speculators_version": "0.3.0",
            "speculators_config": {"algorithm": algorithm, "default_proposal_method": "greedy",
                                   "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": 3,
                                                         "verifier_accept_k": 1, "accept_tolerance": 0.0}],
                                   "verifier": {"name_or_path": "tiny-llama", "architectures": ["LlamaForCausalLM"]}},
            "transformer_layer_config": layer, **fields}


def write_speculators_eagle3(path, seed=0, aux=(1, 3, 5), **fields):
    """speculators Eagle3Speculator: embed_tokens, fc, layers.0.* (first layer: hidden_norm, 2H q/k/v), norm, lm_head,
    d2t, t2d; bf16 safetensors."""
    g = torch.Generator().manual_seed(seed)
    d2t, t2d = _vocab_map(g)
    bf = torch.bfloat16
    w = {"embed_tokens.weight": _rand(g, V, H, scale=1.0, dtype=bf), "fc.weight": _rand(g, H, 3 * H, dtype=bf),
         **_layer(g, "layers.0.", q_in=2 * H, hidden_norm=True, dtype=bf),
         "norm.weight": (1 + _rand(g, H, scale=0.1, dtype=torch.float32)).to(bf), "lm_head.weight": _rand(g, VD, H, dtype=bf),
         "d2t": d2t, "t2d": t2d}
    path.mkdir(parents=True, exist_ok=True)
    save_file(w, str(path / "model.safetensors"))
    cfg = _speculators("eagle3", draft_vocab_size=VD, norm_before_residual=True, target_hidden_size=None,
                       eagle_aux_hidden_state_layer_ids=list(aux) if aux else None, norm_before_fc=False, fc_norm=False,
                       norm_output=False, embed_requires_grad=False, **fields)
    (path / "config.json").write_text(json.dumps(cfg))
    return str(path)


def write_speculators_eagle(path, seed=0, **fields):
    """speculators EagleSpeculator (EAGLE-1, layernorms=false): fusion_fc (bias), transformer.* without input_layernorm."""
    g = torch.Generator().manual_seed(seed)
    w = {"fusion_fc.weight": _rand(g, H, 2 * H), "fusion_fc.bias": _rand(g, H),
         **_layer(g, "transformer.", input_layernorm=False)}
    path.mkdir(parents=True, exist_ok=True)
    save_file(w, str(path / "model.safetensors"))
    cfg = _speculators("eagle", transformer_layer_architecture="LlamaDecoderLayer", layernorms=False, fusion_bias=True)
    (path / "config.json").write_text(json.dumps({**cfg, **fields}))
    return str(path)


def write_medusa(path, seed=0, heads=3, layers=2, differ=False):
    """FasterDecoding/Medusa: medusa_lm_head.pt of nn.ModuleList([Sequential(*[ResBlock] * layers, Linear(H, V))]):
    {i}.{j}.linear.* repeat ONE block; {i}.{layers}.weight is head i's own LM head."""
    g = torch.Generator().manual_seed(seed)
    w = {}
    for i in range(heads):
        block = {"linear.weight": _rand(g, H, H, scale=0.3), "linear.bias": _rand(g, H, scale=0.3)}
        for j in range(layers):
            for name, t in block.items():
                w[f"{i}.{j}.{name}"] = t + (j if differ else 0)
        w[f"{i}.{layers}.weight"] = _rand(g, V, H, scale=0.5)
    path.mkdir(parents=True, exist_ok=True)
    torch.save(w, path / "medusa_lm_head.pt")
    (path / "config.json").write_text(json.dumps({"medusa_num_heads": heads, "medusa_num_layers": layers,
                                                  "base_model_name_or_path": "tiny-llama", "transformers_version": "4.34.0"}))
    return str(path)


# -- the published forwards, re-implemented plainly over one sequence (no cache) ------------------------------------


def _rms(x, w):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS))


def _rope(x, pos):  # x [1, n, T, D]
    inv = 1.0 / (THETA ** (torch.arange(0, D, 2).float() / D))
    f = pos[:, None].float() * inv[None]
    emb = torch.cat([f, f], -1)
    x1, x2 = x.chunk(2, -1)
    return x * emb.cos() + torch.cat([-x2, x1], -1) * emb.sin()


def _attention(w, p, hs, pos):
    t = hs.shape[1]
    q = (hs @ w[p + "self_attn.q_proj.weight"].T).view(1, t, NH, D).transpose(1, 2)
    k = (hs @ w[p + "self_attn.k_proj.weight"].T).view(1, t, NKV, D).transpose(1, 2)
    v = (hs @ w[p + "self_attn.v_proj.weight"].T).view(1, t, NKV, D).transpose(1, 2)
    q, k = _rope(q, pos), _rope(k, pos)
    k, v = k.repeat_interleave(NH // NKV, 1), v.repeat_interleave(NH // NKV, 1)
    scores = q @ k.transpose(2, 3) / math.sqrt(D) + torch.full((t, t), float("-inf")).triu(1)
    o = (scores.softmax(-1) @ v).transpose(1, 2).reshape(1, t, NH * D)
    return o @ w[p + "self_attn.o_proj.weight"].T


def _mlp(w, p, x):
    return (F.silu(x @ w[p + "mlp.gate_proj.weight"].T) * (x @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T


def ref_eagle1(w, p, fc, feature, tokens, embed, lm_head):
    """cnets1.py Model.forward + ea_model: fc(cat(emb, f)), layer 0 without input_layernorm, target's lm_head."""
    w = {k: v.float() for k, v in w.items()}
    x = torch.cat([embed[tokens], feature], -1) @ w[fc + ".weight"].T + w[fc + ".bias"]
    pos = torch.arange(tokens.shape[1])
    x = x + _attention(w, p, x, pos)
    x = x + _mlp(w, p, _rms(x, w[p + "post_attention_layernorm.weight"]))
    return x, x @ lm_head.T  # fed-back feature, logits


def ref_eagle3(w, p, aux, tokens, embed, norm_before_residual=False):
    """cnets.py Model.forward + topK_genrate: fc(cat(aux)), midlayer, lm_head(norm(x)), token = i + d2t[i]."""
    w = {k: v.float() if v.is_floating_point() else v for k, v in w.items()}
    g = torch.cat(aux, -1) @ w["fc.weight"].T
    hn = _rms(g, w[p + "hidden_norm.weight"])
    hs = torch.cat([_rms(embed[tokens], w[p + "input_layernorm.weight"]), hn], -1)
    x = (hn if norm_before_residual else g) + _attention(w, p, hs, torch.arange(tokens.shape[1]))
    x = x + _mlp(w, p, _rms(x, w[p + "post_attention_layernorm.weight"]))
    small = _rms(x, w["norm.weight"]) @ w["lm_head.weight"].T  # [1, T, Vd]
    full = torch.full((*small.shape[:-1], V), float("-inf"))
    full[..., torch.arange(VD) + w["d2t"]] = small
    return x, full


def _inputs(seed=1, t=7):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, V, (1, t), generator=g), [torch.randn(1, t, H, generator=g) for _ in range(3)]


# -- the converted head gives the published forward's logits ---------------------------------------------------------


def test_eagle1_logits_equal_the_published_forward(llama, tmp_path):
    ckpt = write_eagle1(tmp_path)
    head = load_eagle_head(ckpt, llama.model, "tiny-llama")
    assert not head.cfg.input_layernorm and head.cfg.final_norm == "none" and head.cfg.own_embedding
    tokens, (f, _, _) = _inputs()
    out = head(f, tokens, torch.arange(tokens.shape[1])[None])
    w = torch.load(tmp_path / "pytorch_model.bin", weights_only=True)
    ref_out, ref_logits = ref_eagle1(w, "layers.0.", "fc", f, tokens[0][None], w["embed_tokens.weight"].float(),
                                     llama.model.lm_head.weight)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(head.logits(out), ref_logits, atol=1e-5, rtol=1e-5)


def test_speculators_eagle_logits_equal_the_published_forward(llama, tmp_path):
    ckpt = write_speculators_eagle(tmp_path)
    head = load_eagle_head(ckpt, llama.model, "tiny-llama")
    tokens, (f, _, _) = _inputs(2)
    out = head(f, tokens, torch.arange(tokens.shape[1])[None])
    w = load_file(str(tmp_path / "model.safetensors"))
    ref_out, ref_logits = ref_eagle1(w, "transformer.", "fusion_fc", f, tokens, llama.model.model.embed_tokens.weight,
                                     llama.model.lm_head.weight)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(head.logits(out), ref_logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("fmt", ["eagle3", "speculators-eagle3"])
def test_eagle3_logits_equal_the_published_forward(fmt, deep, tmp_path):
    ckpt = write_eagle3(tmp_path) if fmt == "eagle3" else write_speculators_eagle3(tmp_path)
    head = load_eagle_head(ckpt, deep.model, "tiny-llama-7l")
    # SafeAILab: inputs of layers (2, L//2, L-3) = outputs of 1, 2, 3; speculators: ids (1, 3, 5) -> outputs 0, 2, 4
    assert head.cfg.fuse_layers == ([1, 2, 3] if fmt == "eagle3" else [0, 2, 4])
    assert head.cfg.draft_vocab_size == VD and head.cfg.eagle3_layer
    tokens, aux = _inputs(3)
    out = head(head.features(None, aux), tokens, torch.arange(tokens.shape[1])[None])
    w = {k: v for k, v in (load_file(str(tmp_path / "model.safetensors"))).items()}
    embed = w["embed_tokens.weight"].float() if "embed_tokens.weight" in w else deep.model.model.embed_tokens.weight
    prefix = "midlayer." if fmt == "eagle3" else "layers.0."
    ref_out, ref_logits = ref_eagle3(w, prefix, aux, tokens, embed, norm_before_residual=fmt != "eagle3")
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-5)
    logits = head.logits(out)
    assert torch.equal(logits.isinf(), ref_logits.isinf())  # only the draft vocabulary's target ids are finite
    torch.testing.assert_close(logits, ref_logits, atol=1e-5, rtol=1e-5)


def test_medusa_logits_equal_the_published_forward(llama, tmp_path):
    ckpt = write_medusa(tmp_path)
    heads = load_medusa_heads(ckpt, llama.model, "tiny-llama")
    assert heads.cfg.num_layers == 2 and heads.cfg.own_lm_heads and heads.cfg.num_heads == 3
    h = torch.randn(2, 5, H, generator=torch.Generator().manual_seed(4))
    w = {k: v.float() for k, v in torch.load(tmp_path / "medusa_lm_head.pt", weights_only=True).items()}
    ref = []
    for i in range(3):  # Sequential(ResBlock, ResBlock (the same one), Linear)
        x = h
        for j in range(2):
            x = x + F.silu(x @ w[f"{i}.{j}.linear.weight"].T + w[f"{i}.{j}.linear.bias"])
        ref.append(x @ w[f"{i}.2.weight"].T)
    torch.testing.assert_close(heads(h), torch.stack(ref, dim=-2), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(heads(h, 2), torch.stack(ref[:2], dim=-2), atol=1e-5, rtol=1e-5)


# -- end to end through strategy.checkpoint=<dir>: T=0 output equals the target's greedy decoding ---------------------


def _generate(model, proposer, prompts, sampling=SamplingParams(), bs=4, max_new=10):
    engine = Engine(make_runner(model.model), proposer, Verifier(sampling, CPU), max_new_tokens=max_new, eos_ids=set(),
                    device=CPU)
    rows = []
    for s in range(0, len(prompts), bs):
        rows += engine.generate(prompts[s : s + bs])[0]
    return rows


WRITERS = {"eagle1": (write_eagle1, False), "speculators-eagle": (write_speculators_eagle, False),
           "eagle3": (write_eagle3, True), "speculators-eagle3": (write_speculators_eagle3, True)}


@pytest.mark.parametrize("fmt", list(WRITERS))
def test_eagle_formats_decode_losslessly(fmt, llama, deep, tmp_path):
    write, needs_depth = WRITERS[fmt]
    model = deep if needs_depth else llama
    ckpt = write(tmp_path / fmt)
    cfg = {"name": "eagle", "k": 3, "checkpoint": ckpt}
    EagleProposer.validate(cfg)  # before any model loads: the config and the weights' header
    EagleProposer.validate_for_target(cfg, model.spec, "torch")
    prompts = ragged_prompts(V)
    ref = hf_greedy(model.model, prompts, 10)
    rows = _generate(model, EagleProposer(_ctx(model), k=3, checkpoint=ckpt), prompts)
    assert [r.output_ids for r in rows] == ref, fmt
    record = EagleProposer.checkpoint_record(cfg, model.spec)
    assert record["trained_for"] in ("tiny-llama", "") or record["trained_for"] is None
    assert len(record["weights_sha256"]) == 64


@pytest.mark.parametrize("tree", [dict(tree="dynamic", top_k=3, num_nodes=7), dict(tree="topk", top_k=2)])
def test_eagle3_trees_decode_losslessly(tree, deep, tmp_path):
    """EAGLE-3's own drafting is a dynamic tree; with a reduced vocabulary only its ids can branch."""
    ckpt = write_speculators_eagle3(tmp_path)
    prompts = ragged_prompts(V, lengths=(5, 9, 3, 12))
    rows = _generate(deep, EagleProposer(_ctx(deep), k=3, checkpoint=ckpt, **tree), prompts)
    assert [r.output_ids for r in rows] == hf_greedy(deep.model, prompts, 10)


def test_eagle3_samples_only_its_draft_vocabulary(deep, tmp_path):
    """T > 0: q is zero outside the draft vocabulary (logits -inf there), and decoding runs."""
    ckpt = write_eagle3(tmp_path)
    sampling = SamplingParams(temperature=1.0, seed=5)
    proposer = EagleProposer(_ctx(deep, sampling), k=2, checkpoint=ckpt)
    allowed = set((torch.arange(VD) + proposer.head.d2t).tolist())
    drafted = []
    propose = proposer.propose

    def record(state):
        d = propose(state)
        drafted.extend(d.tokens.flatten().tolist())
        assert d.probs is not None and torch.isfinite(d.probs).all()
        outside = torch.ones(V, dtype=torch.bool)
        outside[list(allowed)] = False
        assert d.probs[..., outside].abs().sum() == 0
        return d

    proposer.propose = record
    rows = _generate(deep, proposer, ragged_prompts(V, lengths=(5, 8)), sampling, max_new=8)
    assert drafted and set(drafted) <= allowed and all(len(r.output_ids) == 8 for r in rows)


def test_medusa_format_decodes_losslessly(llama, tmp_path):
    ckpt = write_medusa(tmp_path)
    cfg = {"name": "medusa", "k": 3, "checkpoint": ckpt}
    MedusaProposer.validate(cfg)
    MedusaProposer.validate_for_target(cfg, llama.spec, "torch")
    with pytest.raises(ConfigError, match="k=4.*3 trained heads"):
        MedusaProposer.validate({**cfg, "k": 4})
    prompts = ragged_prompts(V)
    rows = _generate(llama, MedusaProposer(_ctx(llama), k=3, checkpoint=ckpt), prompts)
    assert [r.output_ids for r in rows] == hf_greedy(llama.model, prompts, 10)
    record = MedusaProposer.checkpoint_record(cfg, llama.spec)
    assert record["trained_for"] == "tiny-llama" and record["format"] == "medusa"


def test_strategy_checkpoint_takes_a_published_directory_through_run(tmp_path):
    """python -m specbench strategy=eagle target=tiny-llama strategy.checkpoint=<EAGLE-1 dir>: lossless, recorded."""
    from hydra import compose, initialize_config_dir

    from specbench.config import CONF_DIR
    from specbench.run import run

    ckpt = write_eagle1(tmp_path / "eagle1")
    overrides = ["strategy=eagle", "target=tiny-llama", f"strategy.checkpoint={ckpt}", "dataset=builtin",
                 "dataset.num_prompts=2", "max_new_tokens=8", "logger=none", f"+output_dir={tmp_path / 'out'}"]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    results = run(cfg).results
    assert results["exact_match"]["all_equal"] and results["exact_match"]["n"] == 2
    assert results["run"]["checkpoint"]["format"] == "eagle1"
    assert results["run"]["checkpoint"]["weights"].endswith("pytorch_model.bin")


# -- refused checkpoints: ConfigErrors naming what differs, before any model loads --------------------------------------


def test_a_mismatched_hidden_size_or_vocabulary_is_a_config_error(llama, tmp_path):
    ckpt = write_eagle1(tmp_path / "e1", embed=False)
    cfg = json.loads((tmp_path / "e1" / "config.json").read_text())
    (tmp_path / "e1" / "config.json").write_text(json.dumps({**cfg, "vocab_size": 500}))
    with pytest.raises(ConfigError, match="vocab 500.*has 48, 101"):
        EagleProposer.validate_for_target({"name": "eagle", "k": 2, "checkpoint": ckpt}, llama.spec, "torch")
    (tmp_path / "e1" / "config.json").write_text(json.dumps({**cfg, "vocab_size": 64}))  # smaller: another tokenizer
    with pytest.raises(ConfigError, match="vocab 64.*has 48, 101"):
        EagleProposer.validate_for_target({"name": "eagle", "k": 2, "checkpoint": ckpt}, llama.spec, "torch")
    arch = {**PRESETS["tiny-llama"].arch, "num_hidden_layers": 7, "hidden_size": 96}
    wide_spec = ModelSpec(name="wide", source="random", arch=arch, known=known_sizes(arch))
    ckpt = write_eagle3(tmp_path / "e3")
    with pytest.raises(ConfigError, match="hidden size 48.*has 96"):
        EagleProposer.validate_for_target({"name": "eagle", "k": 2, "checkpoint": ckpt}, wide_spec, "torch")
    ckpt = write_medusa(tmp_path / "m")
    with pytest.raises(ConfigError, match="hidden size 48.*has 96"):
        MedusaProposer.validate_for_target({"name": "medusa", "k": 2, "checkpoint": ckpt}, wide_spec, "torch")


def test_an_unknown_format_is_a_config_error(tmp_path):
    save_file({"w": torch.zeros(3)}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 48}))
    with pytest.raises(ConfigError, match="not a drafter config this version reads.*EAGLE-1/2 or EAGLE-3.*Medusa.*speculators"):
        EagleProposer.validate({"name": "eagle", "k": 2, "checkpoint": str(tmp_path)})
    (tmp_path / "config.json").write_text(json.dumps({"speculators_model_type": "mlp_speculator"}))
    with pytest.raises(ConfigError, match="speculators 'mlp_speculator' model; allowed speculators types: eagle, eagle3"):
        EagleProposer.validate({"name": "eagle", "k": 2, "checkpoint": str(tmp_path)})


@pytest.mark.parametrize("write,change,message", [
    (write_speculators_eagle3, {"norm_output": True}, "norm_output=true; allowed: false"),
    (write_speculators_eagle3, {"target_hidden_size": 96}, "target_hidden_size=96 differs"),
    (write_speculators_eagle, {"layernorms": True}, "layernorms=true"),
    (write_eagle3, {"num_hidden_layers": 2}, "2 decoder layers; allowed: 1"),
    (write_eagle1, {"rope_theta": 500_000.0}, "RoPE base 500000.0; target 'tiny-llama' has 10000.0"),
])
def test_published_variants_our_head_lacks_are_refused(write, change, message, llama, tmp_path):
    ckpt = write(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    if "transformer_layer_config" in cfg and "num_hidden_layers" in change:
        cfg["transformer_layer_config"].update(change)
    else:
        cfg.update(change)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match=message):
        EagleProposer.validate({"name": "eagle", "k": 2, "checkpoint": ckpt})
        EagleProposer(_ctx(llama), k=2, checkpoint=ckpt)


def test_a_bad_vocabulary_map_or_medusa_blocks_are_refused(llama, deep, tmp_path):
    ckpt = write_eagle3(tmp_path / "e3")
    w = load_file(str(tmp_path / "e3" / "model.safetensors"))
    save_file({**w, "d2t": w["d2t"] + V}, str(tmp_path / "e3" / "model.safetensors"))  # target ids past the vocabulary
    with pytest.raises(ConfigError, match="d2t maps draft ids to target ids outside 0..100"):
        EagleProposer(_ctx(deep), k=2, checkpoint=ckpt)
    ckpt = write_medusa(tmp_path / "m", differ=True)
    with pytest.raises(ConfigError, match="head 0's ResBlocks 0 and 1 differ"):
        MedusaProposer(_ctx(llama), k=2, checkpoint=ckpt)


@pytest.mark.parametrize("write", [write_medusa, write_eagle1])
def test_a_truncated_published_weights_file_is_named(write, tmp_path):
    write(tmp_path)
    weights = next(p for p in tmp_path.iterdir() if p.name != "config.json")
    weights.write_bytes(weights.read_bytes()[:-100])
    cls = MedusaProposer if write is write_medusa else EagleProposer
    with pytest.raises(ConfigError, match=f"checkpoint weights {weights.resolve()} could not be read"):
        cls.validate({"name": "x", "k": 2, "checkpoint": str(tmp_path)})


def test_a_checkpoint_of_the_other_kind_is_a_config_error(tmp_path):
    med, eag = write_medusa(tmp_path / "m"), write_eagle1(tmp_path / "e")
    with pytest.raises(ConfigError, match="holds a medusa drafter .medusa., not an eagle one; use strategy=medusa"):
        EagleProposer.validate({"name": "eagle", "k": 2, "checkpoint": med})
    with pytest.raises(ConfigError, match="holds an eagle drafter .eagle1., not a medusa one; use strategy=eagle"):
        MedusaProposer.validate({"name": "medusa", "k": 2, "checkpoint": eag})


def test_eagle3_needs_three_distinct_target_layers(llama, tmp_path):
    assert eagle3_default_layers(32) == [1, 15, 28]  # Llama-3.1-8B: inputs of layers 2, 16, 29
    ckpt = write_eagle3(tmp_path)
    with pytest.raises(ConfigError, match="target of 2 layers gives"):
        EagleProposer(_ctx(llama), k=2, checkpoint=ckpt)


def test_a_hub_id_that_cannot_be_fetched_is_a_config_error(monkeypatch):
    import huggingface_hub

    def offline(*args, **kwargs):  # a fake: this machine has no hub
        raise OSError("offline")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(ConfigError, match="'no-such-org/no-such-head' does not exist locally, and as a hub id it could not be downloaded .OSError: offline"):
        EagleProposer.validate({"name": "eagle", "k": 2, "checkpoint": "no-such-org/no-such-head"})


def test_a_hub_id_resolves_to_its_snapshot(monkeypatch, llama, tmp_path):
    import huggingface_hub

    snapshot = write_eagle3(tmp_path / "snap")
    seen = {}

    def fake_snapshot(repo_id, allow_patterns=None):  # a fake hub holding one EAGLE-3 repository
        seen["repo"], seen["patterns"] = repo_id, allow_patterns
        return snapshot

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot)
    EagleProposer.validate({"name": "eagle", "k": 2, "checkpoint": "yuhuili/EAGLE3-tiny"})
    assert seen["repo"] == "yuhuili/EAGLE3-tiny" and "config.json" in seen["patterns"]


# -- export: our heads as speculators, loaded back bit-identically ------------------------------------------------------


def _trained_like(model, path, fuse_layers=None, num_layers=1):
    """Our head with random (non-default) weights everywhere, saved in specbench's format."""
    from specbench.strategies.eagle import EagleConfig

    torch.manual_seed(7)
    cfg = EagleConfig.for_target(model.model.config, fuse_layers, "tiny-llama")
    cfg.num_layers = num_layers
    head = EagleHead(cfg, model.model)
    with torch.no_grad():
        for p in head.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    head.save(path)
    return str(path)


@pytest.mark.parametrize("fuse_layers", [None, [0, 1]])
def test_export_loads_back_bit_identically(fuse_layers, llama, tmp_path):
    ours = _trained_like(llama, tmp_path / "ours", fuse_layers)
    out = export_speculators(ours, tmp_path / "spec", verifier="org/tiny-llama")
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["speculators_model_type"] == "eagle" and cfg["speculators_config"]["algorithm"] == "eagle"
    assert cfg["speculators_config"]["verifier"]["name_or_path"] == "org/tiny-llama"
    assert cfg["fusion_bias"] is True and cfg["layernorms"] is False and cfg["specbench"]["final_norm"] == "target"
    assert "fusion_fc.weight" in load_file(str(out / "model.safetensors"))
    a = EagleProposer(_ctx(llama), k=3, checkpoint=ours).head
    b = EagleProposer(_ctx(llama), k=3, checkpoint=str(out)).head
    assert a.cfg.fuse_layers == b.cfg.fuse_layers == fuse_layers
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    tokens, aux = _inputs(5)
    feat = a.features(aux[0], aux[:2])
    assert torch.equal(a.logits(a(feat, tokens, torch.arange(7)[None])), b.logits(b(feat, tokens, torch.arange(7)[None])))
    prompts = ragged_prompts(V, lengths=(5, 9, 3))
    assert ([r.output_ids for r in _generate(llama, EagleProposer(_ctx(llama), k=3, checkpoint=str(out)), prompts)]
            == hf_greedy(llama.model, prompts, 10))


def test_export_through_the_cli_keeps_every_tensor_and_refuses_what_has_no_speculators_form(llama, tmp_path, capsys):
    """`python -m specbench.export`: a full-vocabulary head's tensors come back unchanged under speculators' names;
    the shipped head (a reduced draft vocabulary on an EAGLE-1 layer) and Medusa heads are refused, saying why."""
    from specbench.export import main
    from specbench.strategies.eagle import read_eagle_config
    from specbench.strategies.formats import detect

    ours = _trained_like(llama, tmp_path / "ours", None)
    assert main([ours, str(tmp_path / "spec")]) == 0
    original = read_weights(Path(ours) / "model.safetensors")
    weights, cfg = read_eagle_config(str(tmp_path / "spec"))
    converted = eagle_state(detect(weights, tmp_path / "spec" / "config.json", str(tmp_path / "spec")), cfg)
    assert converted.keys() == original.keys()
    assert all(converted[k].dtype == original[k].dtype and torch.equal(converted[k], original[k]) for k in original)
    capsys.readouterr()
    assert main(["eagle-smollm2-135m", str(tmp_path / "shipped")]) == 2
    assert "reduced vocabulary (draft_vocab_size=8192" in capsys.readouterr().err
    assert not (tmp_path / "shipped").exists()
    assert main(["medusa-smollm2-135m", str(tmp_path / "m")]) == 2  # speculators has no Medusa format
    capsys.readouterr()
    assert main([_trained_like(llama, tmp_path / "deeper", None, num_layers=2), str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert "one-layer EAGLE heads" in err and "num_layers=2" in err
    assert not (tmp_path / "d").exists()
