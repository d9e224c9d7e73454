"""parallel (PARD): one draft forward over the catch-up and k-1 masks; its cache, settings and checkpoints."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from specbench_testing import hf_greedy, ragged_prompts, tiny
from specbench.engine import Engine
from specbench.errors import ConfigError
from specbench.models.runner import make_runner
from specbench.strategies.base import BuildContext, DecodeState
from specbench.strategies.checkpoints import RANDOM, resolve_checkpoint
from specbench.strategies.parallel import (ParallelConfig, ParallelProposer, default_mask_token_id, draft_from_target,
                                           save_parallel)
from specbench.verify import SamplingParams, Verifier

CPU = torch.device("cpu")
B, K, MAX_LEN = 2, 3, 40


@pytest.fixture(scope="module")
def target():
    return tiny("tiny-llama")


def _ctx(target, sampling=None):
    return BuildContext(target=target, target_runner=make_runner(target.model), draft=None,
                        sampling=sampling or SamplingParams(), device=CPU)


def _proposer(target, k=K, **kw):
    return ParallelProposer(_ctx(target), k=k, **{"checkpoint": RANDOM, "num_layers": 1, **kw})


def test_masks_leave_committed_logits_alone_and_match_a_full_causal_forward(target):
    """Column 0 equals a plain forward's last logits; the mask columns equal transformers' causal forward over the
    tokens followed by the masks at the next positions (the masks see the tokens and the masks before them)."""
    prop = _proposer(target, k=4)
    tokens = torch.tensor(ragged_prompts(target.vocab_size, (7, 7), seed=3))  # [B, 7]
    pos = torch.arange(7).expand(B, 7)
    prop.allocate(B, MAX_LEN)
    out = prop.draft_forward(tokens, pos, None, attn_len=7).logits  # [B, 4, V]
    assert out.shape == (B, 4, target.vocab_size)
    plain = make_runner(target.model, num_layers=1)
    plain.allocate(B, MAX_LEN)
    torch.testing.assert_close(out[:, 0], plain(tokens, pos).logits[:, -1], rtol=0, atol=1e-5)
    draft = draft_from_target(target.model, 1)
    full = torch.cat([tokens, torch.full((B, 3), prop.mask_id)], 1)
    with torch.no_grad():
        ref = draft(full).logits[:, 6:]  # [B, 4, V]: the last token and the three masks
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)


def _state(tokens: torch.Tensor, lengths: list[int], prompt_lengths: list[int]) -> DecodeState:
    return DecodeState(tokens=tokens, lengths=torch.tensor(lengths), lengths_host=list(lengths),
                       prompt_lengths=prompt_lengths, active=torch.ones(len(lengths), dtype=torch.bool), max_len=MAX_LEN)


def test_mask_entries_are_overwritten_by_the_next_catch_up(target):
    """After a step whose masks wrote slots above the committed length, the next catch-up leaves the cache over the
    committed tokens equal to one plain forward over them (the mask entries were overwritten, none read)."""
    prop = _proposer(target, k=4)
    g = torch.Generator().manual_seed(5)
    tokens = torch.randint(3, target.vocab_size - 1, (B, MAX_LEN), generator=g)
    prompts = [5, 8]
    state = _state(tokens, [p + 1 for p in prompts], prompts)  # the first token committed
    prop.start(state, None)
    prop.propose(state)  # masks at lengths .. lengths + 2
    assert prop.seen == state.lengths_host
    new = [n + 2 for n in state.lengths_host]  # one draft accepted + the bonus token
    state2 = _state(tokens, new, prompts)
    prop.commit(state2, None, [1, 1], state.lengths_host)
    assert prop.seen == state.lengths_host  # nothing past the committed tokens the draft read is kept
    prop.propose(state2)
    plain = make_runner(target.model, num_layers=1)
    plain.allocate(B, MAX_LEN)
    plain(tokens[:, : max(new)], torch.arange(max(new)).expand(B, -1))
    for b, n in enumerate(new):
        for cache, ref in ((prop.runner.k_cache, plain.k_cache), (prop.runner.v_cache, plain.v_cache)):
            torch.testing.assert_close(cache[:, b, :, :n], ref[:, b, :, :n], rtol=0, atol=1e-5)
            # the slots this step's masks wrote hold other entries than the (later) tokens would
            assert not torch.allclose(cache[:, b, :, n : n + 3], ref[:, b, :, n : n + 3], atol=1e-3)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_greedy_output_is_the_targets_and_samples_return_q(target, temperature):
    sampling = SamplingParams(temperature=temperature, seed=7)
    prop = ParallelProposer(_ctx(target, sampling), k=K, checkpoint=RANDOM, num_layers=1)
    prompts = ragged_prompts(target.vocab_size, (5, 9))
    if temperature == 0:
        engine = Engine(make_runner(target.model), prop, Verifier(sampling, "cpu"), max_new_tokens=10, eos_ids=set(),
                        device=CPU)
        steps = []
        propose = prop.propose
        prop.propose = lambda state: steps.append(1) or propose(state)
        rows, _ = engine.generate(prompts)
        assert [r.output_ids for r in rows] == hf_greedy(target.model, prompts, 10)
        assert prop.draft_forwards == len(steps) > 0  # one draft forward per step, whatever k
        return
    tokens = torch.tensor([p[:5] + [0] * (MAX_LEN - 5) for p in prompts])
    state = _state(tokens, [5, 5], [4, 4])
    prop.start(state, None)
    draft = prop.propose(state)
    assert draft.tokens.shape == (B, K) and draft.probs.shape == (B, K, target.vocab_size)
    torch.testing.assert_close(draft.probs.sum(-1), torch.ones(B, K))
    assert bool((draft.probs.gather(-1, draft.tokens[..., None]) > 0).all())


def test_bad_settings_are_config_errors(target, tmp_path):
    for bad, match in (({"k": 0}, "strategy.k=0"), ({"num_layers": 0}, "num_layers=0"),
                       ({"mask_token_id": -1}, "mask_token_id=-1"), ({"mask_token_id": "m"}, "mask_token_id='m'")):
        with pytest.raises(ConfigError, match=match):
            ParallelProposer.validate({"name": "parallel", "k": 3, "checkpoint": "auto", **bad})
    with pytest.raises(ConfigError, match="mask_token_id=101"):
        _proposer(target, mask_token_id=target.vocab_size)
    with pytest.raises(ConfigError, match="num_layers=5"):
        _proposer(target, num_layers=5)
    transformers_ctx = BuildContext(target=target, target_runner=make_runner(target.model), draft=None,
                                    sampling=SamplingParams(), device=CPU, backend="transformers")
    with pytest.raises(ConfigError, match="engine.backend='transformers'"):
        ParallelProposer(transformers_ctx, k=K, checkpoint=RANDOM, num_layers=1)
    with pytest.raises(ConfigError, match="tree=dynamic"):
        ParallelProposer.validate({"name": "parallel", "k": 3, "tree": "dynamic", "top_k": 2, "num_nodes": 4})
    with pytest.raises(ConfigError, match="one_extra_forward_pass"):
        ParallelProposer.validate({"name": "parallel", "k": 3, "one_extra_forward_pass": True,
                                   "drop_first_drafted_tokens": True})


def _checkpoint(target, path, k=4, layers=1, **cfg):
    save_parallel(draft_from_target(target.model, layers), ParallelConfig(
        num_layers=layers, k=k, mask_token_id=default_mask_token_id(target.tokenizer, target.vocab_size),
        hidden_size=target.model.config.hidden_size, vocab_size=target.vocab_size, target="tiny-llama", **cfg), path)
    return str(path)


def test_checkpoint_resolution_and_errors(target, tmp_path):
    random_target = SimpleNamespace(label="tiny-llama", source="random")
    assert resolve_checkpoint("auto", "parallel", random_target) == RANDOM
    with pytest.raises(ConfigError, match="no parallel checkpoint .* 'some-real-lm'"):
        resolve_checkpoint("auto", "parallel", SimpleNamespace(label="some-real-lm", source=None))
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError, match=f"strategy.checkpoint='{missing}' does not exist"):
        ParallelProposer.validate({"name": "parallel", "k": 3, "checkpoint": str(missing)})
    ckpt = _checkpoint(target, tmp_path / "ckpt", k=2)
    with pytest.raises(ConfigError, match="strategy.k=3 .* k <= 2"):
        ParallelProposer.validate({"name": "parallel", "k": 3, "checkpoint": ckpt})
    other = tmp_path / "medusa"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"kind": "medusa", "hidden_size": 48, "num_heads": 2, "vocab_size": 101}))
    (other / "model.safetensors").write_bytes((tmp_path / "ckpt" / "model.safetensors").read_bytes())
    with pytest.raises(ConfigError, match="holds a 'medusa' drafter"):
        ParallelProposer.validate({"name": "parallel", "k": 2, "checkpoint": str(other)})
    cfg = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps({**cfg, "hidden_size": 64}))
    with pytest.raises(ConfigError, match="trained for hidden size 64"):
        _proposer(target, k=2, checkpoint=ckpt)


def test_a_saved_checkpoint_drafts_as_the_untrained_draft_it_was_made_from(target, tmp_path):
    """Layers + norm stored, embedding and LM head shared: the loaded draft equals the target's first layer."""
    ckpt = _checkpoint(target, tmp_path / "ckpt")
    stored = set(__import__("safetensors.torch", fromlist=["load_file"]).load_file(f"{ckpt}/model.safetensors"))
    assert not stored & {"model.embed_tokens.weight", "lm_head.weight"} and "model.norm.weight" in stored
    loaded, untrained = _proposer(target, checkpoint=ckpt), _proposer(target)
    assert loaded.runner.embed.weight is target.model.model.embed_tokens.weight  # shared, not copied
    tokens = torch.tensor(ragged_prompts(target.vocab_size, (6, 6), seed=1))
    pos = torch.arange(6).expand(B, 6)
    for p in (loaded, untrained):
        p.allocate(B, MAX_LEN)
    torch.testing.assert_close(loaded.draft_forward(tokens, pos, None, 6).logits,
                               untrained.draft_forward(tokens, pos, None, 6).logits, rtol=0, atol=1e-5)
    record = ParallelProposer.checkpoint_record({"checkpoint": ckpt}, SimpleNamespace(label="tiny-llama", source="random"))
    assert record["trained_for"] == "tiny-llama" and len(record["weights_sha256"]) == 64
