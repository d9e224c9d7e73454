"""The parallel (PARD) trainer: cuts with their masks in one forward, the loss falls, the checkpoint loads."""

from __future__ import annotations

import json

import pytest
import torch

from specbench_testing import hf_greedy, ragged_prompts, tiny, train_cfg
from specbench.engine import Engine
from specbench.errors import ConfigError
from specbench.models.runner import make_runner
from specbench.strategies.base import BuildContext
from specbench.strategies.parallel import ParallelProposer
from specbench.train.drafters import Batch, TokenLoss
from specbench.train.loop import train
from specbench.train.parallel import ParallelTrainer, cut_inputs
from specbench.verify import SamplingParams, Verifier

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def target():
    return tiny("tiny-llama")


def test_each_cut_sees_its_prefix_and_its_own_earlier_masks(target):
    """Hidden states of the packed forward (sequence + every cut's masks, custom mask) equal separate causal
    forwards over x_0..x_t followed by j masks; the real tokens' equal a plain forward over the sequence."""
    trainer = ParallelTrainer(target, "tiny-llama", (), num_layers=2, k=4, mask_token_id=7)
    model = trainer.module.eval()
    tokens = torch.tensor(ragged_prompts(target.vocab_size, (9, 9), seed=2))  # [B=2, N=9]
    cols = torch.tensor([[2, 6, 4], [7, 0, 3]])  # [B, C=3] cut points
    ids, pos, sees, read = cut_inputs(tokens, cols, 4, 7)
    assert ids.shape == pos.shape == (2, 9 + 3 * 3) and read.shape == (2, 3, 4)
    additive = torch.zeros(sees.shape).masked_fill(~sees, torch.finfo(torch.float32).min)[:, None]
    with torch.no_grad():
        packed = model.model(input_ids=ids, position_ids=pos, attention_mask=additive).last_hidden_state
        torch.testing.assert_close(packed[:, :9], model.model(input_ids=tokens).last_hidden_state, rtol=1e-4, atol=1e-5)
        for b in range(2):
            for c, t in enumerate(cols[b].tolist()):
                alone = torch.cat([tokens[b, : t + 1], torch.full((3,), 7)])[None]  # x_0..x_t, 3 masks
                ref = model.model(input_ids=alone).last_hidden_state[0, t:]  # [K, H]
                torch.testing.assert_close(packed[b, read[b, c]], ref, rtol=1e-4, atol=1e-5)


def test_a_few_steps_reduce_the_loss_at_every_offset(target):
    torch.manual_seed(0)
    trainer = ParallelTrainer(target, "tiny-llama", (), num_layers=1, k=3, cuts=5)
    tokens = (torch.arange(12)[None] * 7 + torch.tensor([[0], [3], [5]])) % 90 + 10  # a learnable rule: x_{t+1} = x_t + 7
    batch = Batch(tokens=tokens[:, :11], lengths=torch.tensor([11, 8, 10]), hidden=torch.zeros(3, 10, 1), layer_hidden=None,
                  top1=tokens[:, 1:11])
    params = [p for p in trainer.module.parameters() if p.requires_grad]
    assert params and all(p is not target.model.lm_head.weight for p in params)  # the shared head stays frozen
    opt = torch.optim.AdamW(params, lr=3e-2)
    losses = []
    for step in range(40):
        loss, metrics = trainer.loss(batch, TokenLoss(None, None), 0, torch.Generator().manual_seed(0))  # the same cuts
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(metrics)
    for j in (1, 2, 3):
        assert losses[-1][f"token_loss_{j}"] < 0.8 * losses[0][f"token_loss_{j}"]  # ~0.65x (the frozen head is random)


def test_bad_settings_are_config_errors(target, tmp_path):
    for bad, match in (({"k": 1}, "strategy.k=1"), ({"num_layers": 3}, "num_layers=3"), ({"cuts": -1}, "cuts=-1"),
                       ({"mask_token_id": 101}, "mask_token_id=101"),
                       ({"init_from": str(tmp_path)}, "is not a draft model directory")):
        with pytest.raises(ConfigError, match=match):
            ParallelTrainer(target, "tiny-llama", (), **bad)


def _decodes_as_the_target(target, checkpoint: str, k: int) -> None:
    ctx = BuildContext(target=target, target_runner=make_runner(target.model), draft=None, sampling=SamplingParams(),
                       device=CPU)
    ParallelProposer.validate({"name": "parallel", "k": k, "checkpoint": checkpoint})
    engine = Engine(ctx.target_runner, ParallelProposer(ctx, k=k, checkpoint=checkpoint), Verifier(SamplingParams(), "cpu"),
                    max_new_tokens=6, eos_ids=set(), device=CPU)
    prompts = [[1, 2, 3], [4, 5, 6, 7]]
    rows, _ = engine.generate(prompts)
    assert [r.output_ids for r in rows] == hf_greedy(target.model, prompts, 6)


def test_trains_from_the_target_or_a_draft_model_and_loads_into_the_strategy(target, tmp_path, prompts_file):
    ckpt = train(train_cfg(tmp_path, prompts_file, "strategy=parallel", "strategy.num_layers=1", "strategy.k=3",
                           "train.steps=2", f"output_dir={tmp_path / 'run'}", "save_dtype=float16"))
    config = json.loads((ckpt / "config.json").read_text())
    assert config["kind"] == "parallel" and config["k"] == 3 and config["shares_embeddings"] is True
    _decodes_as_the_target(target, str(ckpt), 3)
    # from a distilled draft model (its own embedding and LM head, so they are stored)
    draft = train(train_cfg(tmp_path, prompts_file, "strategy=draft_model", "strategy.num_layers=1", "train.steps=1",
                            f"output_dir={tmp_path / 'draft'}"))
    ckpt = train(train_cfg(tmp_path, prompts_file, "strategy=parallel", f"strategy.init_from={draft}", "strategy.k=2",
                           "train.steps=1", f"output_dir={tmp_path / 'run2'}"))
    assert json.loads((ckpt / "config.json").read_text())["shares_embeddings"] is False
    _decodes_as_the_target(target, str(ckpt), 2)
