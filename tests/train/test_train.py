"""specbench.train end to end on a tiny random target: distil, train, save, resume, load into the strategy; and
EAGLE-3's reduced draft vocabulary (strategy.draft_vocab): how it is chosen, its loss, its checkpoint."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from safetensors.torch import load_file
from torch import nn

from specbench_testing import hf_greedy, ragged_prompts, tiny, train_cfg, train_overrides
from specbench.config import CONF_DIR
from specbench.engine import Engine
from specbench.errors import ConfigError
from specbench.models.runner import make_runner
from specbench.run import run
from specbench.strategies.base import BuildContext
from specbench.strategies.eagle import EagleConfig, EagleHead, EagleProposer
from specbench.strategies.medusa import MedusaProposer
from specbench.train.data import DistillData, load_or_generate
from specbench.train.drafters import DraftVocab, EagleTrainer, TokenLoss, unrolled_masks
from specbench.train.loop import make_batch, split_by_prompt, train
from specbench.verify import SamplingParams, Verifier

def test_eagle_trains_resumes_and_loads(tmp_path, prompts_file, capsys):
    ckpt = train(train_cfg(tmp_path, prompts_file, "strategy=eagle", "strategy.unroll=2", "train.steps=2",
                           "logger=wandb"))
    run = tmp_path / "run"
    run_id = json.loads((run / "last" / "state.json").read_text())["wandb_run_id"]
    assert [f"-{run_id}" in p.name for p in (run / "wandb").glob("offline-run-*")] == [True]
    # the closing table: the last batches' mean beside the last validation's figures, as metrics.jsonl holds them
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train_rows, val = [r for r in logged if "acc_1" in r], [r for r in logged if "val/acc_1" in r][-1]
    printed = capsys.readouterr().out
    assert "at step 2: mean of the last 2 training batches and the 1 held-out sequence" in printed
    assert f"decode with it (and this run's target): python -m specbench strategy=eagle strategy.checkpoint={ckpt.resolve()}\n" in printed
    assert f"curves: {run / 'curves.png'}" in printed and (run / "curves.png").read_bytes()[:4] == b"\x89PNG"
    for k in ("acc_1", "acc_2", "loss"):
        mean = sum(r[k] for r in train_rows) / len(train_rows)
        assert f"| {k} | {mean:.3f} | {val['val/' + k]:.3f} |" in printed
    for k in ("aligned_2", "acc_aligned_2"):  # measured on the held-out sequences only (a plain run)
        assert k not in train_rows[-1] and f"| {k} | - | {val['val/' + k]:.3f} |" in printed
    assert (ckpt / "model.safetensors").exists() and json.loads((run / "last" / "state.json").read_text())["step"] == 2
    shards = sorted((tmp_path / "data").glob("distill-*.shards/*.pt"))
    assert len(shards) == 2  # 6 prompts in batches of 4, cached: a rerun does not regenerate
    stamps = [s.stat().st_mtime_ns for s in shards]
    ckpt = train(train_cfg(tmp_path, prompts_file, "strategy=eagle", "strategy.unroll=2", "train.steps=4",
                           "resume=true", "logger=wandb"))
    assert [s.stat().st_mtime_ns for s in shards] == stamps  # the resumed run read the shards, wrote none
    # the same W&B run goes on (offline, each process writes a directory of its own under the run's id:
    # offline-run-<time>-<id>, with "-1" after it when both started in the same second)
    assert json.loads((run / "last" / "state.json").read_text())["wandb_run_id"] == run_id
    runs = [p.name for p in (run / "wandb").glob("offline-run-*")]
    assert len(runs) == 2 and all(f"-{run_id}" in name for name in runs), runs
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps[0] == 1 and max(steps) == 4 and 3 in steps  # the second run went on from step 2
    assert json.loads((run / "last" / "state.json").read_text())["step"] == 4

    target = tiny("tiny-llama")
    ctx = BuildContext(target=target, target_runner=make_runner(target.model), draft=None, sampling=SamplingParams(),
                       device=torch.device("cpu"))
    EagleProposer.validate({"name": "eagle", "k": 2, "checkpoint": str(ckpt)})
    engine = Engine(ctx.target_runner, EagleProposer(ctx, k=2, checkpoint=str(ckpt)), Verifier(SamplingParams(), "cpu"),
                    max_new_tokens=5, eos_ids=set(), device=torch.device("cpu"))
    rows, _ = engine.generate([[1, 2, 3], [4, 5, 6, 7]])
    assert all(len(r.output_ids) == 5 for r in rows)


def test_medusa_trains_and_loads(tmp_path, prompts_file):
    ckpt = train(train_cfg(tmp_path, prompts_file, "strategy=medusa", "strategy.num_heads=3", "train.steps=2",
                           "save_dtype=float16"))
    target = tiny("tiny-llama")
    ctx = BuildContext(target=target, target_runner=make_runner(target.model), draft=None, sampling=SamplingParams(),
                       device=torch.device("cpu"))
    assert MedusaProposer(ctx, k=3, checkpoint=str(ckpt)).heads.cfg.num_heads == 3


def test_draft_model_trains_to_a_loadable_directory(tmp_path, prompts_file, capsys):
    from transformers import AutoModelForCausalLM

    out = train(train_cfg(tmp_path, prompts_file, "strategy=draft_model", "strategy.num_layers=1", "train.steps=2"))
    assert f"python -m specbench strategy=draft_model draft.path={out.resolve()}\n" in capsys.readouterr().out
    # what draft.path=<dir> loads (a real target also saves its tokenizer there; tiny ones have none)
    assert AutoModelForCausalLM.from_pretrained(out).config.num_hidden_layers == 1


def test_resume_without_state_and_unknown_strategy_are_config_errors(tmp_path, prompts_file):
    with pytest.raises(ConfigError, match="resume=true"):
        train(train_cfg(tmp_path, prompts_file, "resume=true"))
    cfg = train_cfg(tmp_path, prompts_file)
    cfg.strategy._target_ = "specbench.strategies.eagle.EagleProposer"
    with pytest.raises(ConfigError, match="no trainer"):
        train(cfg)


def test_time_budgets_and_max_shards_cut_a_run_and_say_how_to_repeat_it(tmp_path, prompts_file, capsys):
    cfg = train_cfg(tmp_path, prompts_file, "strategy=medusa", "strategy.num_heads=2", "train.steps=5",
                    "train.time_budget_s=0", "data.max_shards=1")
    ckpt = train(cfg)
    printed = capsys.readouterr().out
    assert "train.steps=5 train.stop_after=1" in printed and "1 of 2 shards" in printed
    assert json.loads((tmp_path / "run" / "last" / "state.json").read_text())["step"] == 1
    assert (ckpt / "model.safetensors").exists()
    # a data budget of 0 makes no new shard: the one made above is all there is to train on
    train(train_cfg(tmp_path, prompts_file, "strategy=medusa", "strategy.num_heads=2", "train.steps=1",
                    "data.time_budget_s=0", f"output_dir={tmp_path / 'run2'}"))
    assert "data.time_budget_s=0 reached after 1 of 2 shards" in capsys.readouterr().out


def test_shards_cut_at_another_batch_size_are_never_mixed_in(tmp_path, prompts_file):
    """One cache dir, data.batch_size 4, then 2, then 4 again (shards of 4 + 2 prompts, then 2 + 2 + 2): each run's set
    holds every prompt once, since each batch size keeps its own shards (mixed, the second run would read the first
    run's two shards and make a third with two of their prompts again)."""
    target = tiny("tiny-llama")
    data_cfg = OmegaConf.to_container(train_cfg(tmp_path, prompts_file).data, resolve=True)
    prompts = []
    for rows in (4, 2, 4):
        data = load_or_generate(tmp_path / "data", target, "tiny-llama", {**data_cfg, "batch_size": rows}, (),
                                target.eos_ids, 0, progress=False)
        prompts.append(sorted(t[:n].tolist() for t, n in zip(data.tokens, data.prompt_lengths)))
    assert len(prompts[0]) == 6 and prompts[0] == prompts[1] == prompts[2]
    assert len({tuple(p) for p in prompts[0]}) == 6
    assert sorted(d.name.split("-rows")[1] for d in (tmp_path / "data").glob("distill-*.shards")) == ["2.shards", "4.shards"]


# -- EAGLE-3's reduced draft vocabulary: strategy.draft_vocab ------------------------------------------------------

V, H, CPU = 101, 48, torch.device("cpu")  # tiny-llama's vocabulary and hidden size


def _data(top1: list[list[int]], seed: int = 0) -> DistillData:
    """Hand-made distillation sequences with these top-1 rows (tokens and features random; prompt length 2)."""
    g = torch.Generator().manual_seed(seed)
    n = [len(t) + 1 for t in top1]
    return DistillData([torch.randint(0, V, (m,), generator=g) for m in n], [2] * len(n),
                       [torch.randn(m - 1, H, generator=g) for m in n], [torch.empty(m - 1, 0, H) for m in n],
                       [torch.tensor(t) for t in top1], ())


def test_the_draft_vocab_is_the_most_frequent_top1_of_the_training_split_ties_to_the_lower_id():
    # sequence 2 is held out: its 50s would lead the count
    data = _data([[5, 9, 9, 2, 7], [2, 5, 30, 9, 5, 5, 9], [50] * 9])
    vocab = DraftVocab.count(data, [0, 1], 4, V)  # 5 and 9: 4 times, 2: twice, 7 and 30 once each (7 is lower)
    assert vocab.ids == [2, 5, 7, 9] and vocab.counts == [2, 4, 1, 4]
    assert (vocab.labels, vocab.sequences, vocab.covered) == (12, 2, 11 / 12)
    assert vocab.d2t().tolist() == [2, 4, 5, 6]  # EAGLE-3's d2t: target id = draft id + d2t
    # more ids than were ever the top-1: the lowest unseen ids fill it, counted 0
    wide = DraftVocab.count(data, [0, 1], 7, V)
    assert wide.ids == [0, 1, 2, 5, 7, 9, 30] and wide.counts == [0, 0, 2, 4, 1, 4, 1]


def _three_class_head() -> tuple[nn.Linear, torch.Tensor]:
    """An identity draft head [Vd=3, H=5] whose draft ids 0, 1, 2 are target ids 1, 4, 6 of 7, and its index."""
    head = nn.Linear(5, 3, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.eye(3, 5))
    index = torch.full((7,), -100)
    index[torch.tensor([1, 4, 6])] = torch.arange(3)
    return head, index


def test_the_draft_vocab_loss_leaves_out_labels_outside_it_and_counts_them_wrong():
    head, index = _three_class_head()  # draft ids 0, 1, 2 are target ids 1, 4, 6 of 7
    loss = TokenLoss(None, index)
    hidden = torch.tensor([[0.0, 2, 0, 1, 0], [5, 0, 0, 0, 0], [0, 0, 3, 0, 1], [4, 1, 0, 0, 0]])  # argmax 1, 0, 2, 0
    labels = torch.tensor([4, 2, 6, 0])  # target 2 and 0 are outside
    ce, correct = loss(head, hidden, labels)
    torch.testing.assert_close(ce, F.cross_entropy(head(hidden)[[0, 2]], torch.tensor([1, 2])))
    assert loss.outside(labels).tolist() == [False, True, False, True]
    assert correct.tolist() == [True, False, True, False]  # rows 1 and 3 predict draft id 0, never their label
    ce, correct = loss(head, hidden[[1, 3]], labels[[1, 3]])  # only outside labels: no loss, no NaN
    assert float(ce.detach()) == 0 and ce.requires_grad and not correct.any()


def test_metrics_are_read_back_together_on_first_read(monkeypatch):
    """Metrics: tensors stay on the device until one is read; then all of them come back in one transfer (one
    torch.stack), as the floats float() gave; a value set after that is read again."""
    from specbench.train.drafters import Metrics

    stacks = []
    real_stack = torch.stack
    monkeypatch.setattr(torch, "stack", lambda *a, **k: stacks.append(1) or real_stack(*a, **k))
    m = Metrics()
    m["loss"], m["acc_1"], m["fixed"] = torch.tensor(1.25, requires_grad=True) * 1, torch.tensor([0.1]).sum(), 0.5
    assert not stacks and list(m) == ["loss", "acc_1", "fixed"]
    assert (m["acc_1"], m["loss"], dict(m)) == (float(torch.tensor(0.1)), 1.25, {"loss": 1.25, "acc_1": m["acc_1"],
                                                                                "fixed": 0.5})
    assert len(stacks) == 1
    m["grad_norm"] = torch.tensor(3.0)
    assert m["grad_norm"] == 3.0 and len(stacks) == 2


def test_an_eagle_loss_reads_no_metric_back_until_asked():
    """On a GPU each read-back waits for the device. A 3-step unrolled EAGLE loss reads back only its token loss's
    one check a step (whether any label is scored), never a metric (13 read-backs a call before Metrics)."""
    from torch.profiler import ProfilerActivity, profile

    target = tiny("tiny-llama")
    trainer = EagleTrainer(target, "tiny-llama", (), unroll=3)
    data = _data([[i % 7 for i in range(9)], [i % 5 for i in range(7)]])
    token_loss = trainer.prepare(data, [0, 1], 0, CPU, None)
    batch = make_batch(data, [0, 1], CPU, False)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        total, metrics = trainer.loss(batch, token_loss, 0, torch.Generator().manual_seed(0))
    items = sum(e.count for e in prof.key_averages() if e.key == "aten::item")
    assert items == 3, items
    assert metrics["loss"] == float(total.detach()) and 0 <= metrics["acc_3"] <= 1


def test_the_eagle_loss_with_a_draft_vocab_depends_on_inside_labels_only():
    target = tiny("tiny-llama")
    trainer = EagleTrainer(target, "tiny-llama", (), unroll=2, draft_vocab=5, soft_labels=False)  # labels matter
    inside = [3, 17, 42, 60, 88]
    top1 = [[inside[i % 5] for i in range(8)], [inside[i % 5] for i in range(6)]]  # [B=2, 8 and 6]
    top1[0][2], top1[0][5], top1[1][3] = 90, 95, 99  # outside (each once; 42 and 60 are left twice, once each)
    data = _data(top1)
    token_loss = trainer.prepare(data, [0, 1], 40, CPU, None)  # ce_vocab is not used: the draft vocab wins
    head = trainer.module
    assert trainer.vocab.ids == inside and head.d2t.tolist() == [3, 16, 40, 57, 84]
    assert torch.equal(head.draft_lm_head.weight, target.model.lm_head.weight[inside])  # from the target's rows
    params = [p for p in head.parameters() if p.requires_grad]
    assert any(p is head.draft_lm_head.weight for p in params)  # trained; the target's head is not a parameter
    assert not any(p is target.model.lm_head.weight for p in params)

    def loss(batch):
        return trainer.loss(batch, token_loss, 0, torch.Generator().manual_seed(0))

    batch = make_batch(data, [0, 1], CPU, False)
    total, metrics = loss(batch)
    assert metrics["outside_vocab"] == 3 / 12  # labels: top-1 at 1..n-2 of each sequence
    other = make_batch(data, [0, 1], CPU, False)
    other.top1[0, 2], other.top1[0, 5], other.top1[1, 3] = 91, 0, 100  # other outside ids: the same loss
    assert torch.equal(loss(other)[0], total)
    other.top1[0, 1] = 60  # an inside label changed: another loss
    assert not torch.equal(loss(other)[0], total)


def test_token_loss_predicts_is_the_heads_top1_over_its_classes_never_outside_them():
    head, index = _three_class_head()  # draft ids 0, 1, 2 are target ids 1, 4, 6 of 7
    hidden = torch.tensor([[[0.0, 2, 0, 1, 0], [5, 0, 0, 0, 0], [0, 0, 3, 0, 1]],
                           [[4, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 7, 0, 0, 0]]])  # [B=2, T=3, H]: argmax 1 0 2 / 0 2 1
    tokens = torch.tensor([[4, 1, 2], [1, 6, 1]])  # target 2 is outside; row 1's last is draft id 0, not 1
    for chunk in (1, 2, 4096):  # the same in any number of LM-head chunks
        hit = TokenLoss(None, index).predicts(head, hidden, tokens, chunk=chunk)
        assert hit.tolist() == [[True, True, False], [True, True, False]]
    full = nn.Linear(5, 7, bias=False)  # a shared head scored on rows 1, 4, 6 (train.ce_vocab) gives the same
    with torch.no_grad():
        full.weight.zero_()
        full.weight[[1, 4, 6]] = head.weight
    hit = TokenLoss.over(torch.tensor([1, 4, 6]), 7).predicts(full, hidden, tokens)
    assert hit.tolist() == [[True, True, False], [True, True, False]]
    assert TokenLoss(None, None).predicts(full, hidden[:, :0], tokens[:, :0]).shape == (2, 0)


@pytest.mark.parametrize("aligned", [False, True])
def test_aligned_unroll_trains_step_j_only_where_every_earlier_step_drafted_its_fed_token(monkeypatch, aligned):
    """GRIFFIN's token alignment: unrolled step j is scored at i only where step s's top-1 at i-(j-s) was the token
    fed after it (x at i-(j-s)+2), for every s < j. The earlier steps' hits are fixed patterns here (a fake
    `predicts`), so the test sees which rows each step scores, in row-major order, against those patterns."""
    target = tiny("tiny-llama")
    trainer = EagleTrainer(target, "tiny-llama", (), unroll=3, soft_labels=False, aligned_unroll=aligned)
    top1 = [[(7 * i + 3) % V for i in range(9)], [(5 * i + 1) % V for i in range(7)]]  # [B=2], 9 and 7 labels
    data = _data(top1)
    token_loss = trainer.prepare(data, [0, 1], 0, CPU, None)
    batch = make_batch(data, [0, 1], CPU, False)
    bsz, t = batch.hidden.shape[:2]
    g = torch.Generator().manual_seed(3)
    patterns = [torch.rand(bsz, t, generator=g) < 0.6 for _ in range(2)]  # steps 1 and 2's hits
    fed = []

    def fake_predicts(self, lm_head, hidden, tokens, chunk=4096):
        if hidden.dim() == 2:  # the agreement metric over scored rows [M, H]: the real one
            return real_predicts(self, lm_head, hidden, tokens, chunk)
        assert hidden.shape[:2] == tokens.shape == (bsz, t) and not hidden.requires_grad
        fed.append(tokens)
        return patterns[len(fed) - 1]

    seen = []
    real, real_predicts = TokenLoss.__call__, TokenLoss.predicts

    def record(self, lm_head, hidden, labels, soft=None):
        seen.append(labels)
        return real(self, lm_head, hidden, labels, soft)

    monkeypatch.setattr(TokenLoss, "predicts", fake_predicts)
    monkeypatch.setattr(TokenLoss, "__call__", record)
    _, metrics = trainer.loss(batch, token_loss, 0, torch.Generator().manual_seed(0))
    assert len(seen) == 3
    assert len(fed) == (2 if aligned else 0)
    for tokens in fed:  # the token fed after step s's output at i: x_{i+2}
        assert torch.equal(tokens[:, :-1], batch.tokens[:, 2:t + 1])
    pos = torch.arange(t).expand(bsz, t)
    valid = pos <= batch.lengths[:, None] - 3
    labels = F.pad(batch.top1[:, 1:], (0, 1))
    for j in (1, 2, 3):
        scored = valid & (pos >= j - 1)
        if aligned:
            for s in range(1, j):
                d = j - s
                shifted = torch.zeros(bsz, t, dtype=torch.bool)
                shifted[:, d:] = patterns[s - 1][:, :t - d]
                scored &= shifted
        assert torch.equal(seen[j - 1], labels[scored]), j
        if aligned and j > 1:
            assert metrics[f"aligned_{j}"] == pytest.approx(float(scored.sum() / (valid & (pos >= j - 1)).sum()))
    assert aligned or "aligned_2" not in metrics
    if aligned:  # acc_j stays the agreement at every position (a plain run's metric), not only the trained ones
        monkeypatch.setattr(TokenLoss, "predicts", real_predicts)
        plain = EagleTrainer(target, "tiny-llama", (), unroll=3, soft_labels=False)
        plain.module.load_state_dict(trainer.module.state_dict())
        _, plain_metrics = plain.loss(batch, token_loss, 0, torch.Generator().manual_seed(0))
        fed.clear()
        monkeypatch.setattr(TokenLoss, "predicts", fake_predicts)
        _, metrics = trainer.loss(batch, token_loss, 0, torch.Generator().manual_seed(0))
        for j in (1, 2, 3):
            assert metrics[f"acc_{j}"] == plain_metrics[f"acc_{j}"]


def test_validation_measures_every_heads_agreement_where_drafting_reaches_each_step(monkeypatch):
    """Under no_grad (validation) a plain head also gets the earlier steps' hits: aligned_j is the share of positions
    drafting reaches at step j and acc_aligned_j the agreement there, while its losses still count every position.
    With a grad (training) a plain head computes no hits."""
    target = tiny("tiny-llama")
    trainer = EagleTrainer(target, "tiny-llama", (), unroll=3, soft_labels=False)
    top1 = [[(3 * i + 2) % V for i in range(10)], [(11 * i + 5) % V for i in range(8)]]  # [B=2], 10 and 8 labels
    data = _data(top1, seed=1)
    token_loss = trainer.prepare(data, [0, 1], 0, CPU, None)
    batch = make_batch(data, [0, 1], CPU, False)
    bsz, t = batch.hidden.shape[:2]
    g = torch.Generator().manual_seed(5)
    patterns = [torch.rand(bsz, t, generator=g) < 0.7 for _ in range(2)]
    calls, seen = [], []
    real, real_predicts = TokenLoss.__call__, TokenLoss.predicts

    def fake_predicts(self, lm_head, hidden, tokens, chunk=4096):
        if hidden.dim() == 2:
            return real_predicts(self, lm_head, hidden, tokens, chunk)
        calls.append(1)
        return patterns[len(calls) - 1]

    def record(self, lm_head, hidden, labels, soft=None):
        ce, correct = real(self, lm_head, hidden, labels, soft)
        seen.append((labels, correct))
        return ce, correct

    monkeypatch.setattr(TokenLoss, "predicts", fake_predicts)
    monkeypatch.setattr(TokenLoss, "__call__", record)
    trainer.loss(batch, token_loss, 0, torch.Generator().manual_seed(0))
    assert calls == [] and len(seen) == 3  # training: no hits
    seen.clear()
    with torch.no_grad():
        _, metrics = trainer.loss(batch, token_loss, 0, torch.Generator().manual_seed(0))
    assert len(calls) == 2 and "acc_aligned_1" not in metrics
    pos = torch.arange(t).expand(bsz, t)
    valid = pos <= batch.lengths[:, None] - 3
    for j in (2, 3):
        step_valid = valid & (pos >= j - 1)
        reached = step_valid.clone()
        for s in range(1, j):
            shifted = torch.zeros(bsz, t, dtype=torch.bool)
            shifted[:, j - s:] = patterns[s - 1][:, :t - (j - s)]
            reached &= shifted
        labels, correct = seen[j - 1]
        assert len(labels) == int(step_valid.sum())  # the loss still counts every position
        at = reached[step_valid]  # row-major, as the scored rows
        assert reached.any() and metrics[f"aligned_{j}"] == pytest.approx(float(reached.sum() / step_valid.sum()))
        assert metrics[f"acc_aligned_{j}"] == pytest.approx(float(correct[at].float().mean()))


@pytest.mark.parametrize("num_layers", [1, 2])
def test_the_training_time_tests_unrolled_steps_are_what_cached_drafting_computes(num_layers):
    """Unrolled step j at position i (fed step j-1's output from i-1, attending through unrolled_masks) is the j-th
    draft of a step that starts at i-(j-1): a cached head that caught up on the true pairs 0..i-(j-1) and then fed its
    own outputs computes the same feature, in every layer. The masks of another step, or a layer reading another
    layer's keys, fail this."""
    target = tiny("tiny-llama")
    torch.manual_seed(3)
    cfg = EagleConfig.for_target(target.model.config, None, "tiny-llama")
    cfg.num_layers = num_layers
    head = EagleHead(cfg, target.model)
    t, h, unroll = 9, target.model.config.hidden_size, 3
    feature = torch.randn(1, t, h)
    tokens = torch.randint(0, V, (1, t))
    pos = torch.arange(t)[None]
    with torch.no_grad():
        outs, kvs = [], []
        for j in range(1, unroll + 1):
            if j == 1:
                out, kv = head(feature, tokens, pos, return_kv=True)
            else:
                earlier, own = unrolled_masks(t, j, CPU)
                fed = F.pad(outs[-1][:, :-1], (0, 0, 1, 0))
                extra = [(kvs[s - 1], mask) for s, mask in enumerate(earlier, start=1)]
                out, kv = head(fed, tokens, pos, extra_kv=extra, kv_mask=own, return_kv=True)
            outs.append(out)
            kvs.append(kv)
        head.allocate(1, t + 2, CPU, torch.float32)
        for start in range(t - unroll + 1):  # the step's first draft comes from the pair at `start`
            out = head(feature[:, : start + 1], tokens[:, : start + 1], pos[:, : start + 1], use_cache=True)[:, -1:]
            torch.testing.assert_close(out, outs[0][:, start : start + 1], atol=1e-5, rtol=1e-5)
            for j in range(2, unroll + 1):
                i = start + j - 1
                out = head(out, tokens[:, i : i + 1], pos[:, i : i + 1], use_cache=True)
                torch.testing.assert_close(out, outs[j - 1][:, i : i + 1], atol=1e-5, rtol=1e-5)


def test_a_deeper_head_trains_saves_its_layers_and_decodes_losslessly(tmp_path, prompts_file):
    """strategy.num_layers=2: a second decoder layer in config.json and the weights (layers.0.*); the CLI's
    strategy=eagle builds it, and T=0 output equals target-only decoding."""
    ckpt = train(train_cfg(tmp_path, prompts_file, "strategy=eagle", "strategy.num_layers=2", "strategy.unroll=3",
                           "train.steps=2"))
    assert json.loads((ckpt / "config.json").read_text())["num_layers"] == 2
    weights = load_file(str(ckpt / "model.safetensors"))
    assert weights["layers.0.q_proj.weight"].shape == weights["q_proj.weight"].shape
    assert "layers.0.input_layernorm.weight" in weights and not any(k.startswith("layers.1.") for k in weights)
    _decodes_losslessly_through_run(ckpt, tmp_path)


@pytest.mark.parametrize(("overrides", "match"), [
    *((("strategy=eagle", f"strategy.num_layers={n}"), r"strategy.num_layers=.*allowed: an integer >= 1")
      for n in ("0", "-1", "1.5", "two", "true")),
    (("strategy=eagle", "strategy.aligned_unroll=yes"), r"strategy.aligned_unroll='yes'; allowed: true .* or false"),
    (("strategy=eagle", "strategy.soft_labels=2"), r"strategy.soft_labels=2; allowed: true .* or false"),
    (("strategy=eagle", "strategy.unroll=0"), r"strategy.unroll=0; allowed: an integer >= 1"),
    (("strategy=eagle", "strategy.draft_lm_head=target"), r"draft_lm_head='target' with strategy.draft_vocab=None"),
    (("strategy=medusa", "strategy.num_heads=0"), r"strategy.num_heads=0; allowed: an integer >= 1"),
    (("strategy=parallel", "strategy.k=1"), r"strategy.k=1; allowed: an integer >= 2"),
    (("strategy=eagle", "strategy.init_from=nowhere"), r"strategy.init_from='nowhere' holds no model.safetensors"),
    (("strategy=medusa", "strategy.init_from=nowhere"), r"strategy.init_from='nowhere' holds no model.safetensors"),
    (("strategy=parallel", "strategy.init_from=nowhere"), r"strategy.init_from='nowhere' is not a draft model"),
])
def test_a_bad_strategy_setting_is_a_config_error_before_the_target_loads(tmp_path, prompts_file, monkeypatch,
                                                                         overrides, match):
    def fake_load(*args, **kwargs):  # a fake: the checks must come first, so the target is never loaded
        raise AssertionError("the target loaded before the strategy.* settings were checked")

    monkeypatch.setattr("specbench.train.loop.load_model", fake_load)
    with pytest.raises(ConfigError, match=match):
        train(train_cfg(tmp_path, prompts_file, *overrides))
    assert not (tmp_path / "data").exists()


def test_eagle_with_a_draft_vocab_trains_saves_its_counts_resumes_and_decodes_losslessly(tmp_path, prompts_file,
                                                                                      capsys, monkeypatch):
    n = 13
    opts = ("strategy=eagle", f"strategy.draft_vocab={n}", "strategy.unroll=2")
    cfg = train_cfg(tmp_path, prompts_file, *opts, "train.steps=2")
    ckpt = train(cfg)
    assert "train.ce_vocab=40 is not used" in capsys.readouterr().out
    # the n most frequent top-1 ids of the training split, counted here another way
    target = tiny("tiny-llama")
    data = load_or_generate(tmp_path / "data", target, "tiny-llama", OmegaConf.to_container(cfg.data, resolve=True), (),
                            target.eos_ids, 0, progress=False)
    train_ids, val_ids = split_by_prompt(data, 1, 0)
    assert val_ids and train_ids
    counts = torch.bincount(torch.cat([data.top1[i] for i in train_ids]), minlength=V)
    expected = torch.sort(-counts, stable=True).indices[:n].sort().values  # ties to the lower id
    config = json.loads((ckpt / "config.json").read_text())
    weights = load_file(str(ckpt / "model.safetensors"))
    assert config["draft_vocab_size"] == n and weights["draft_lm_head.weight"].shape == (n, H)
    assert torch.equal(weights["d2t"] + torch.arange(n), expected)
    saved = json.loads((ckpt / "vocab_counts.json").read_text())
    assert saved["target_ids"] == expected.tolist() and saved["counts"] == counts[expected].tolist()
    assert saved["labels"] == counts.sum()
    assert saved["covered"] == pytest.approx(float(counts[expected].sum() / counts.sum()))
    assert not torch.equal(weights["draft_lm_head.weight"], target.model.lm_head.weight[expected])  # it trained
    assert "outside_vocab" in json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])

    # resume: the vocabulary is read back, never recounted; another size is refused
    with pytest.raises(ConfigError, match=f"draft_vocab=12, but .* trained with draft_vocab={n}"):
        train(train_cfg(tmp_path, prompts_file, *opts, "strategy.draft_vocab=12", "train.steps=4", "resume=true"))
    with pytest.raises(ConfigError, match=f"draft_vocab=None, but .* trained with draft_vocab={n}"):
        train(train_cfg(tmp_path, prompts_file, "strategy=eagle", "strategy.unroll=2", "train.steps=4", "resume=true"))
    monkeypatch.setattr(DraftVocab, "count", classmethod(lambda *a: pytest.fail("recounted on resume")))
    ckpt = train(train_cfg(tmp_path, prompts_file, *opts, "train.steps=4", "resume=true"))
    assert torch.equal(load_file(str(ckpt / "model.safetensors"))["d2t"], weights["d2t"])
    assert json.loads((ckpt / "vocab_counts.json").read_text()) == saved

    # the CLI's path: strategy=eagle strategy.checkpoint=<dir>, T=0 output equal to target-only decoding
    _decodes_losslessly_through_run(ckpt, tmp_path)
    # every draft is inside the draft vocabulary, sampled (T=1) or greedy (T=0, equal to transformers' greedy)
    allowed = set(expected.tolist())
    prompts = ragged_prompts(V, (5, 9, 3))
    for sampling in (SamplingParams(), SamplingParams(temperature=1.0, seed=3)):
        ctx = BuildContext(target=target, target_runner=make_runner(target.model), draft=None, sampling=sampling,
                           device=CPU)
        proposer = EagleProposer(ctx, k=3, checkpoint=str(ckpt))
        drafted, propose = [], proposer.propose

        def record(state, propose=propose, drafted=drafted):
            draft = propose(state)
            drafted.extend(draft.tokens.flatten().tolist())
            return draft

        proposer.propose = record
        rows, _ = Engine(ctx.target_runner, proposer, Verifier(sampling, CPU), max_new_tokens=8, eos_ids=set(),
                         device=CPU).generate(prompts)
        assert drafted and set(drafted) <= allowed
        if sampling.temperature == 0:
            assert [r.output_ids for r in rows] == hf_greedy(target.model, prompts, 8)


def test_a_draft_vocab_of_the_whole_vocabulary_loads_back(tmp_path, prompts_file):
    ckpt = train(train_cfg(tmp_path, prompts_file, "strategy=eagle", f"strategy.draft_vocab={V}", "strategy.unroll=1",
                           "train.steps=1"))
    assert json.loads((ckpt / "vocab_counts.json").read_text())["target_ids"] == list(range(V))
    assert "d2t" not in load_file(str(ckpt / "model.safetensors"))  # draft id == target id
    target = tiny("tiny-llama")
    ctx = BuildContext(target=target, target_runner=make_runner(target.model), draft=None, sampling=SamplingParams(),
                       device=CPU)
    proposer = EagleProposer(ctx, k=2, checkpoint=str(ckpt))
    assert proposer.head.cfg.draft_vocab_size == V and proposer.head.d2t is None
    prompts = ragged_prompts(V, (4, 7))
    rows, _ = Engine(ctx.target_runner, proposer, Verifier(SamplingParams(), CPU), max_new_tokens=6, eos_ids=set(),
                     device=CPU).generate(prompts)
    assert [r.output_ids for r in rows] == hf_greedy(target.model, prompts, 6)


def _decodes_losslessly_through_run(ckpt, tmp_path):
    """The CLI's strategy=eagle job on the checkpoint: T=0 output equals target-only decoding on every prompt."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        run_cfg = compose("config", overrides=[
            "target=tiny-llama", "strategy=eagle", f"strategy.checkpoint={ckpt}", "strategy.k=3", "dataset=builtin",
            "dataset.num_prompts=3", "max_new_tokens=8", "logger=none", "engine.warmup=false",
            f"+output_dir={tmp_path / 'job'}"])
    result = run(run_cfg).results
    assert result["exact_match"]["all_equal"] and result["strategy"]["acceptance_length"] >= 1


def _inference_head(ckpt, target):
    """The EagleHead that strategy=eagle builds from the checkpoint for the target (k=2, fp32 products)."""
    ctx = BuildContext(target=target, target_runner=make_runner(target.model), draft=None, sampling=SamplingParams(),
                       device=CPU)
    return EagleProposer(ctx, k=2, checkpoint=str(ckpt), cpu_half_weights=False).head


def test_a_wider_head_mlp_trains_saves_its_width_and_decodes_losslessly(tmp_path, prompts_file):
    """strategy.intermediate_size: the head's MLP width, another than the target's, in config.json and the weights;
    the CLI's strategy=eagle builds the head from it, and T=0 output equals target-only decoding."""
    target = tiny("tiny-llama")
    width = target.model.config.intermediate_size * 2 + 3
    ckpt = train(train_cfg(tmp_path, prompts_file, "strategy=eagle", f"strategy.intermediate_size={width}",
                           "strategy.unroll=2", "train.steps=2"))
    assert json.loads((ckpt / "config.json").read_text())["intermediate_size"] == width
    weights = load_file(str(ckpt / "model.safetensors"))
    assert weights["gate_proj.weight"].shape == (width, H)
    assert weights["down_proj.weight"].shape == (H, width)
    _decodes_losslessly_through_run(ckpt, tmp_path)


def test_a_head_on_the_targets_rows_trains_saves_no_lm_head_and_decodes_losslessly(tmp_path, prompts_file):
    """strategy.draft_lm_head=target: the draft vocabulary's logits are the target's LM head rows at its ids, frozen and
    left out of the checkpoint (d2t is in it); the CLI's strategy=eagle drafts through them and T=0 output equals
    target-only decoding."""
    n = 13
    ckpt = train(train_cfg(tmp_path, prompts_file, "strategy=eagle", f"strategy.draft_vocab={n}",
                           "strategy.draft_lm_head=target", "strategy.unroll=2", "train.steps=2"))
    assert json.loads((ckpt / "config.json").read_text())["draft_lm_head"] == "target"
    weights = load_file(str(ckpt / "model.safetensors"))
    assert "draft_lm_head.weight" not in weights and weights["d2t"].shape == (n,)
    target = tiny("tiny-llama")
    head = _inference_head(ckpt, target)
    ids = torch.arange(n) + weights["d2t"]
    assert torch.equal(head.vocab_ids, ids)
    out = torch.randn(3, H)
    torch.testing.assert_close(head.draft_logits(out), out @ target.model.lm_head.weight[ids].T, atol=1e-5, rtol=1e-5)
    _decodes_losslessly_through_run(ckpt, tmp_path)


@pytest.mark.parametrize("opts", [("strategy.draft_lm_head=target",), ("strategy.draft_lm_head=mine",
                                                                        "strategy.draft_vocab=11")])
def test_a_bad_draft_lm_head_is_a_config_error_before_any_data_is_made(tmp_path, prompts_file, opts):
    with pytest.raises(ConfigError, match=r"strategy.draft_lm_head=.*allowed: own .* or target .*needs strategy.draft_vocab"):
        train(train_cfg(tmp_path, prompts_file, "strategy=eagle", *opts))
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("size", ["0", "-3", "2.5", "ten", "true"])
def test_a_bad_head_mlp_width_is_a_config_error_before_any_data_is_made(tmp_path, prompts_file, size):
    with pytest.raises(ConfigError, match=r"strategy.intermediate_size=.*allowed: null .* integer >= 1"):
        train(train_cfg(tmp_path, prompts_file, "strategy=eagle", f"strategy.intermediate_size={size}"))
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("size", ["0", "-3", "102", "2.5", "ten", "true"])
def test_a_bad_draft_vocab_is_a_config_error_before_any_data_is_made(tmp_path, prompts_file, size):
    with pytest.raises(ConfigError, match=r"strategy.draft_vocab=.*allowed: null .* integer 1\.\.101"):
        train(train_cfg(tmp_path, prompts_file, "strategy=eagle", f"strategy.draft_vocab={size}"))
    assert not (tmp_path / "data").exists()


def test_train_seed_changes_the_head_and_batches_not_the_set_or_its_held_out_sequences(tmp_path, prompts_file,
                                                                                        monkeypatch):
    """train.seed: null trains as the run's seed does, bit for bit; another value starts from other weights and
    batches on the same cached set, validated on the same held-out sequences."""
    import specbench.train.loop as loop

    loop_split = loop.split_by_prompt
    held_out, data = [], []

    def recording_split(*args):
        ids = loop_split(*args)
        held_out.append(ids[1])
        data.append(args[0])
        return ids

    monkeypatch.setattr(loop, "split_by_prompt", recording_split)

    def run_with(name, *extra):
        out = tmp_path / name
        ckpt = train(train_cfg(tmp_path, prompts_file, "strategy=eagle", "strategy.unroll=2", "train.steps=3",
                               f"output_dir={out}", "seed=3", *extra))
        return load_file(str(ckpt / "model.safetensors"))

    default = run_with("default")
    shards = sorted((tmp_path / "data").glob("distill-*.shards/*.pt"))
    stamps = [s.stat().st_mtime_ns for s in shards]
    # another seed whose split would differ from seed 3's, so a split by train.seed would show below
    other_seed = next(n for n in range(4, 40) if loop_split(data[0], 1, n)[1] != held_out[0])
    same, other = run_with("same", "train.seed=3"), run_with("other", f"train.seed={other_seed}")
    assert default.keys() == same.keys() == other.keys()
    assert all(torch.equal(default[k], same[k]) for k in default)
    assert not all(torch.equal(default[k], other[k]) for k in default)
    assert [s.stat().st_mtime_ns for s in shards] == stamps  # one set, made once and read by all three
    assert len(held_out) == 3 and held_out[0] == held_out[1] == held_out[2] and held_out[0]


def test_a_sweep_of_train_seeds_through_the_cli_keeps_each_jobs_checkpoint(tmp_path, prompts_file):
    """`python -m specbench.train -m ... train.seed=1,2` without output_dir: each job trains into its own sweep
    folder (the default output_dir would hold only the last job's checkpoint)."""
    import subprocess
    import sys

    sweep = tmp_path / "sweep"
    args = [*train_overrides(tmp_path, prompts_file), "strategy=eagle", "strategy.unroll=2", "train.steps=2",
            "device=cpu", "train.seed=1,2", f"hydra.sweep.dir={sweep}"]
    done = subprocess.run([sys.executable, "-m", "specbench.train", "-m", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    heads = [load_file(str(sweep / job / "checkpoint" / "model.safetensors")) for job in ("0", "1")]
    assert not all(torch.equal(heads[0][k], heads[1][k]) for k in heads[0])
    assert not (tmp_path / "outputs" / "train" / "eagle-tiny-llama").exists()


@pytest.mark.parametrize("override, match", [
    ("data.samples=0", r"data.samples=0; allowed: an integer >= 1"),
    ("data.max_new_tokens=-2", r"data.max_new_tokens=-2; allowed: an integer >= 1"),
    ("data.batch_size=2.5", r"data.batch_size=2.5; allowed: an integer >= 1"),
    ("data.temperature=-1", r"data.temperature=-1; allowed: a number >= 0"),
    ("data.dtype=float17", r"data.dtype='float17'; allowed: float32, bfloat16"),
    ("data.path=/nowhere/p.jsonl", r"data.path='/nowhere/p.jsonl' does not exist"),
    ("train.steps=0", r"train.steps=0; allowed: an integer >= 1"),
    ("train.batch_size=0", r"train.batch_size=0; allowed: an integer >= 1"),
    ("train.seed=-1", r"train.seed=-1; allowed: an integer >= 0"),
    ("train.seed=1.5", r"train.seed=1.5; allowed: an integer >= 0"),
    ("train.prefetch=2", r"train.prefetch=2; allowed: true .* or false"),
    ("train.precision=float16", r"train.precision='float16'; allowed: auto, float32, bfloat16"),
    ("data.num_prompts=0", r"data.num_prompts=0; allowed: an integer >= 1"),
    ("data.max_shards=-1", r"data.max_shards=-1; allowed: an integer >= 0"),
    ("data.time_budget_s=-5", r"data.time_budget_s=-5; allowed: a number >= 0 \(seconds"),
    ("train.lr=-1", r"train.lr=-1; allowed: a number >= 0 \(AdamW's peak learning rate"),
    ("train.lr=fast", r"train.lr='fast'; allowed: a number >= 0"),
    ("train.weight_decay=-0.1", r"train.weight_decay=-0.1; allowed: a number >= 0"),
    ("train.warmup=-1", r"train.warmup=-1; allowed: an integer >= 0"),
    ("train.grad_clip=-1", r"train.grad_clip=-1; allowed: a number >= 0"),
    ("train.ce_positions=2.5", r"train.ce_positions=2.5; allowed: an integer >= 0"),
    ("train.ce_vocab=-3", r"train.ce_vocab=-3; allowed: an integer >= 0"),
    ("train.val_sequences=-1", r"train.val_sequences=-1; allowed: an integer >= 0"),
    ("train.log_every=0", r"train.log_every=0; allowed: an integer >= 1"),
    ("train.save_every=0", r"train.save_every=0; allowed: an integer >= 1"),
    ("train.stop_after=0", r"train.stop_after=0; allowed: an integer >= 1"),
    ("train.time_budget_s=-1", r"train.time_budget_s=-1; allowed: a number >= 0"),
    ("seed=-2", r"seed=-2; allowed: an integer >= 0"),
    ("threads=0", r"threads=0; allowed: an integer >= 1"),
    ("save_dtype=float8", r"save_dtype='float8'; allowed: null \(float32\), float32"),
    ("device=gpu", r"device='gpu'; allowed: auto .*, cpu, cuda, cuda:<n>"),
])
def test_bad_data_and_train_settings_are_config_errors_before_the_target_loads(tmp_path, prompts_file, monkeypatch,
                                                                               override, match):
    import specbench.train.loop as loop

    def no_load(*args, **kwargs):
        raise AssertionError("the target was loaded before the settings were checked")

    monkeypatch.setattr(loop, "load_model", no_load)
    with pytest.raises(ConfigError, match=match):
        train(train_cfg(tmp_path, prompts_file, override))


def test_the_default_prompts_are_the_checkouts_sets_or_the_env_var(tmp_path, monkeypatch):
    """data.path: null reads $SPECBENCH_SPEC_BENCH when set, else the checkout's committed magpie and python-stdlib
    sets; with neither, a ConfigError that says how to give prompts."""
    import specbench.train.data as data_mod
    from specbench.train.data import training_prompts

    monkeypatch.delenv("SPECBENCH_SPEC_BENCH", raising=False)
    with initialize_config_dir(config_dir=str(CONF_DIR / "train"), version_base="1.3"):
        assert compose("config").data.path is None
    prompts = training_prompts(None)
    assert {p.id.split("/")[1] for p in prompts} == {"magpie_smollm2-135m.jsonl.gz", "python_stdlib.jsonl.gz"}
    assert len(prompts) == 7500
    mine = tmp_path / "mine.jsonl"
    mine.write_text(json.dumps({"question_id": 1, "category": "qa", "turns": ["why?"]}) + "\n")
    monkeypatch.setenv("SPECBENCH_SPEC_BENCH", str(mine))
    assert [p.id for p in training_prompts(None)] == ["train/mine.jsonl/1"]
    monkeypatch.delenv("SPECBENCH_SPEC_BENCH")
    monkeypatch.setattr(data_mod, "CHECKOUT_PROMPTS", tmp_path / "not-a-checkout")
    with pytest.raises(ConfigError, match=r"data.path is not set.*python -m specbench.train.prompts"):
        training_prompts(None)


def test_a_soft_label_loss_is_the_cross_entropy_to_the_given_distribution_over_scored_rows():
    """TokenLoss with soft labels: a one-hot distribution gives the top-1 loss, a uniform one the mean negative
    log-probability over the classes; rows whose label is outside the classes are left out either way."""
    g = torch.Generator().manual_seed(4)
    head = nn.Linear(5, 3, bias=False)  # draft ids 0, 1, 2 are target ids 1, 4, 6 of 7
    ids = torch.tensor([1, 4, 6])
    index = torch.full((7,), -100)
    index[ids] = torch.arange(3)
    loss = TokenLoss(None, index, ids)
    hidden, labels = torch.randn(5, 5, generator=g), torch.tensor([4, 2, 6, 1, 0])  # rows 1 and 4 outside
    hard, correct = loss(head, hidden, labels)
    one_hot = F.one_hot(index[labels].clamp(min=0), 3).float()
    torch.testing.assert_close(loss(head, hidden, labels, one_hot)[0], hard)
    uniform = torch.full((5, 3), 1 / 3)
    inside = torch.tensor([0, 2, 3])
    torch.testing.assert_close(loss(head, hidden, labels, uniform)[0],
                               -F.log_softmax(head(hidden[inside]), -1).mean(-1).mean())
    assert torch.equal(loss(head, hidden, labels, uniform)[1], correct)  # top-1 correctness is the label's
    # the target's distribution over the classes: its LM head's rows of them, renormalised
    weight = torch.randn(7, 5, generator=g)
    torch.testing.assert_close(loss.target_probs(weight, hidden), torch.softmax(hidden @ weight[ids].T, -1))
    torch.testing.assert_close(TokenLoss(None, None).target_probs(weight, hidden), torch.softmax(hidden @ weight.T, -1))


@pytest.mark.parametrize("vocab", ["draft_vocab", "ce_vocab", "full"])
def test_eagle_soft_labels_are_the_targets_distribution_at_the_labels_position(tmp_path, prompts_file, monkeypatch,
                                                                                 vocab):
    """strategy.soft_labels=true trains and saves; at every unrolled step each scored row's soft label is the target's
    distribution there: its argmax is the row's top-1 label (fp32 features), and it sums to 1 over the classes."""
    opts = {"draft_vocab": ("strategy.draft_vocab=13",), "ce_vocab": ("train.ce_vocab=40",),
            "full": ("train.ce_vocab=0",)}[vocab]
    seen = []
    real = TokenLoss.__call__

    def record(self, lm_head, hidden, labels, soft=None):
        classes = V if self.classes is None else len(self.classes)
        assert soft is not None and soft.shape == (labels.shape[0], classes)
        seen.append((self.index, labels, soft))
        return real(self, lm_head, hidden, labels, soft)

    monkeypatch.setattr(TokenLoss, "__call__", record)
    ckpt = train(train_cfg(tmp_path, prompts_file, "strategy=eagle", "strategy.unroll=3", "strategy.soft_labels=true",
                           "train.steps=2", *opts))
    assert (ckpt / "model.safetensors").exists()
    assert len(seen) >= 2 * 3  # every step of every unrolled position
    for index, labels, soft in seen:
        target = labels if index is None else index[labels]
        scored = target >= 0
        assert scored.any()
        assert torch.equal(soft[scored].argmax(-1), target[scored])
        torch.testing.assert_close(soft.sum(-1), torch.ones(len(labels)))


def test_a_bad_soft_labels_value_is_a_config_error(tmp_path, prompts_file):
    with pytest.raises(ConfigError, match=r"strategy.soft_labels='yes'; allowed: true .* or false"):
        train(train_cfg(tmp_path, prompts_file, "strategy=eagle", "strategy.soft_labels=yes"))
    assert not (tmp_path / "data").exists()


def test_an_eagle_fine_tune_starts_from_the_checkpoints_weights_and_vocabulary(tmp_path, prompts_file, monkeypatch):
    n = 11
    opts = ("strategy=eagle", f"strategy.draft_vocab={n}", "strategy.unroll=2")
    start = train(train_cfg(tmp_path / "a", prompts_file, *opts, "train.steps=2"))
    before = load_file(str(start / "model.safetensors"))
    monkeypatch.setattr(DraftVocab, "count", classmethod(lambda *a: pytest.fail("recounted for a fine-tune")))
    # at a learning rate of 0 the fine-tune's head is the checkpoint it started from, bit for bit
    tuned = train(train_cfg(tmp_path / "b", prompts_file, *opts, f"strategy.init_from={start}", "train.steps=1",
                            "train.lr=0"))
    after = load_file(str(tuned / "model.safetensors"))
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert (tuned / "vocab_counts.json").read_text() == (start / "vocab_counts.json").read_text()
    # and it trains from there
    tuned = train(train_cfg(tmp_path / "c", prompts_file, *opts, f"strategy.init_from={start}", "train.steps=1"))
    moved = load_file(str(tuned / "model.safetensors"))
    assert not torch.equal(moved["fc.weight"], before["fc.weight"]) and torch.equal(moved["d2t"], before["d2t"])


def test_a_fine_tune_grows_a_head_to_more_layers_starting_as_its_function(tmp_path, prompts_file):
    """strategy.init_from with a larger strategy.num_layers: the checkpoint's weights as they were, the new layer's
    o_proj and down_proj zero, so at a learning rate of 0 the grown head computes the checkpoint's output features; a
    head of fewer layers than its checkpoint is refused."""
    opts = ("strategy=eagle", "strategy.draft_vocab=11", "strategy.unroll=2")
    start = train(train_cfg(tmp_path / "a", prompts_file, *opts, "train.steps=2"))
    grown = train(train_cfg(tmp_path / "b", prompts_file, *opts, "strategy.num_layers=3", f"strategy.init_from={start}",
                            "train.steps=1", "train.lr=0"))
    before, after = load_file(str(start / "model.safetensors")), load_file(str(grown / "model.safetensors"))
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert {k.split(".")[1] for k in after if k.startswith("layers.")} == {"0", "1"}
    assert all(not after[f"layers.{i}.{p}.weight"].any() for i in (0, 1) for p in ("o_proj", "down_proj"))
    assert after["layers.1.q_proj.weight"].any()  # the rest of a new layer is drawn as a fresh head's
    target = tiny("tiny-llama")
    heads = [_inference_head(ckpt, target) for ckpt in (start, grown)]
    assert len(heads[1].decoder_layers()) == 3
    g = torch.Generator().manual_seed(2)
    feature, tokens = torch.randn(2, 5, H, generator=g), torch.randint(0, V, (2, 5), generator=g)
    with torch.no_grad():
        outs = [head(feature, tokens, torch.arange(5).expand(2, 5)) for head in heads]
    torch.testing.assert_close(outs[1], outs[0], atol=0, rtol=0)
    with pytest.raises(ConfigError, match=r"its weights do not fit the head .*Unexpected key"):
        train(train_cfg(tmp_path / "c", prompts_file, *opts, f"strategy.init_from={grown}"))


def test_a_fine_tune_from_a_missing_or_other_checkpoint_is_a_config_error(tmp_path, prompts_file):
    opts = ("strategy=eagle", "strategy.draft_vocab=11", "strategy.unroll=2")
    start = train(train_cfg(tmp_path / "a", prompts_file, *opts, "train.steps=1"))
    with pytest.raises(ConfigError, match=r"strategy.init_from='nowhere' holds no model.safetensors"):
        train(train_cfg(tmp_path / "b", prompts_file, *opts, "strategy.init_from=nowhere"))
    with pytest.raises(ConfigError, match=r"strategy.init_from with strategy.draft_vocab=12, but .* draft_vocab=11"):
        train(train_cfg(tmp_path / "b", prompts_file, "strategy=eagle", "strategy.draft_vocab=12",
                        f"strategy.init_from={start}"))
    with pytest.raises(ConfigError, match=r"its weights do not fit the head .*size mismatch"):
        train(train_cfg(tmp_path / "b", prompts_file, *opts, "strategy.intermediate_size=7",
                        f"strategy.init_from={start}"))
    (start / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"strategy.init_from=.* could not be read as JSON"):
        train(train_cfg(tmp_path / "b", prompts_file, *opts, f"strategy.init_from={start}"))
    medusa = train(train_cfg(tmp_path / "m", prompts_file, "strategy=medusa", "strategy.num_heads=2", "train.steps=1"))
    with pytest.raises(ConfigError, match=r"holds a drafter of kind 'medusa' .* allowed: one of kind 'eagle' trained"):
        train(train_cfg(tmp_path / "b", prompts_file, *opts, f"strategy.init_from={medusa}"))


def test_a_medusa_fine_tune_starts_from_the_checkpoints_heads(tmp_path, prompts_file):
    opts = ("strategy=medusa", "strategy.num_heads=3")
    start = train(train_cfg(tmp_path / "a", prompts_file, *opts, "train.steps=2"))
    before = load_file(str(start / "model.safetensors"))
    tuned = train(train_cfg(tmp_path / "b", prompts_file, *opts, f"strategy.init_from={start}", "train.steps=1",
                            "train.lr=0"))
    after = load_file(str(tuned / "model.safetensors"))
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    with pytest.raises(ConfigError, match=r"its weights do not fit the head .*(Missing|Unexpected)"):
        train(train_cfg(tmp_path / "c", prompts_file, "strategy=medusa", "strategy.num_heads=2",
                        f"strategy.init_from={start}"))
    with pytest.raises(ConfigError, match=r"holds no model.safetensors .* strategy=medusa"):
        train(train_cfg(tmp_path / "c", prompts_file, *opts, f"strategy.init_from={tmp_path}"))
