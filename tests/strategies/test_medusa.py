"""Medusa: head shapes, alignment to the last committed position, k > heads and checkpoint errors, T=0 losslessness."""

from __future__ import annotations

import pytest
import torch

from specbench_testing import tiny
from specbench.engine import Engine
from specbench.errors import ConfigError
from specbench.models.runner import make_runner
from specbench.strategies.base import BuildContext, DecodeState
from specbench.strategies.medusa import MedusaConfig, MedusaHeads, MedusaProposer
from specbench.verify import SamplingParams, Verifier

CPU = torch.device("cpu")


def _checkpoint(model, path, num_heads=4, seed=0, scale=0.2):
    torch.manual_seed(seed)
    heads = MedusaHeads(MedusaConfig(model.model.config.hidden_size, num_heads, model.model.config.vocab_size), model.model)
    for block in heads.blocks:  # not the identity: every head drafts something different
        torch.nn.init.normal_(block.weight, std=scale)
    heads.save(path)
    return str(path)


def _ctx(model):
    return BuildContext(target=model, target_runner=make_runner(model.model), draft=None, sampling=SamplingParams(), device=CPU)


@pytest.fixture(scope="module")
def llama():
    return tiny("tiny-llama")


def test_head_shapes_and_identity_init(llama):
    heads = MedusaHeads(MedusaConfig(48, 3, 101), llama.model)
    h = torch.randn(2, 5, 48)
    assert heads(h).shape == (2, 5, 3, 101)
    assert heads(h, 2).shape == (2, 5, 2, 101)
    # zero-initialised blocks: every head starts as the target's own LM head
    torch.testing.assert_close(heads(h)[:, :, 1], llama.model.lm_head(h))
    assert not any(k.startswith("lm_head") for k in heads.state_dict())


def test_k_larger_than_heads_is_a_config_error(llama, tmp_path):
    ckpt = _checkpoint(llama, tmp_path, num_heads=2)
    with pytest.raises(ConfigError, match="k=3.*2 trained heads"):
        MedusaProposer.validate({"name": "medusa", "k": 3, "checkpoint": ckpt})
    with pytest.raises(ConfigError, match="2 trained heads"):
        MedusaProposer(_ctx(llama), k=3, checkpoint=ckpt)
    MedusaProposer.validate({"name": "medusa", "k": 2, "checkpoint": ckpt})


def test_missing_checkpoint_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="needs strategy.checkpoint"):
        MedusaProposer.validate({"name": "medusa", "k": 2, "checkpoint": None})
    MedusaProposer.validate({"name": "medusa", "k": 2})  # absent = auto, resolved against the target later
    with pytest.raises(ConfigError, match="missing. does not exist"):
        MedusaProposer.validate({"name": "medusa", "k": 2, "checkpoint": str(tmp_path / "missing")})


def test_reads_the_hidden_state_at_the_last_committed_position(llama, tmp_path):
    """After a verify over positions L_old-1.. (commit() keeps its features), the heads read the column of position
    L-2 of each row."""
    proposer = MedusaProposer(_ctx(llama), k=3, checkpoint=_checkpoint(llama, tmp_path))
    bsz, t, h = 2, 4, 48
    hidden = torch.randn(bsz, t, h)
    positions = torch.tensor([[6, 7, 8, 9], [3, 4, 5, 6]])
    lengths = torch.tensor([9, 5])  # row 0 accepted 1 draft (L-2 = 7), row 1 accepted none (L-2 = 3)
    state = DecodeState(tokens=torch.zeros(bsz, 20, dtype=torch.long), lengths=lengths, lengths_host=lengths.tolist(),
                        prompt_lengths=[3, 3], active=torch.ones(bsz, dtype=torch.bool), max_len=20,
                        target_hidden=hidden, target_positions=positions)
    proposer.commit(state, None, accepted=[1, 0], old_lengths=[7, 4])
    draft = proposer.propose(state)
    expected = proposer.heads(torch.stack([hidden[0, 1], hidden[1, 0]]), 3).argmax(-1)
    assert draft.tokens.shape == (bsz, 3) and draft.probs is None
    assert torch.equal(draft.tokens, expected)


@pytest.mark.parametrize("arch", ["tiny-llama", "tiny-qwen3"])
def test_lossless_greedy(arch, tmp_path):
    model = tiny(arch)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 101, (n,), generator=g).tolist() for n in (5, 9, 3, 12, 7, 4, 10, 6)]
    ref = [model.model.generate(torch.tensor([p]), max_new_tokens=12, do_sample=False, eos_token_id=None,
                                pad_token_id=0)[0, len(p):].tolist() for p in prompts]
    ckpt = _checkpoint(model, tmp_path)
    for k, bs in ((3, 1), (4, 4)):
        engine = Engine(make_runner(model.model), MedusaProposer(_ctx(model), k=k, checkpoint=ckpt),
                        Verifier(SamplingParams(), CPU), max_new_tokens=12, eos_ids=set(), device=CPU)
        rows = []
        for s in range(0, len(prompts), bs):
            rows += engine.generate(prompts[s : s + bs])[0]
        assert [r.output_ids for r in rows] == ref, (arch, k, bs)


def test_on_the_cpu_the_shared_lm_head_takes_the_targets_products(llama, tmp_path, monkeypatch):
    """At inference on the CPU the heads multiply by the target's LM head (held by reference, so pack_linears leaves it
    a plain nn.Linear) through the decoder's product forms, as the target's own LM head does (`decoder.linear`), and
    their own blocks are CpuLinear; the logits are the plain module's up to float32 rounding. In training (grad on)
    the same call is F.linear."""
    import specbench.models.decoder as dec

    proposer = MedusaProposer(_ctx(llama), k=3, checkpoint=_checkpoint(llama, tmp_path / "m", num_heads=3))
    heads, lm = proposer.heads, llama.model.lm_head
    assert all(type(b) is dec.CpuLinear for b in heads.blocks) and type(lm) is torch.nn.Linear
    seen = []
    real = dec._linear
    monkeypatch.setattr(dec, "_linear", lambda x, w, b=None, half=None: seen.append((w is lm.weight, x.shape)) or
                        real(x, w, b, half))
    h = torch.randn(2, 48)
    with torch.inference_mode():
        got = heads(h, 3)
    assert (True, (2, 3, 48)) in seen  # the 3 heads' 2 x 3 rows through the target's forms
    outs = [h + torch.nn.functional.silu(torch.nn.functional.linear(h, b.weight, b.bias)) for b in heads.blocks]
    torch.testing.assert_close(got, torch.nn.functional.linear(torch.stack(outs, dim=-2), lm.weight), rtol=1e-5,
                               atol=1e-5)
