"""Distillation data (specbench.train.data) comes from the engine: greedy responses equal transformers' own
greedy decoding, the recorded features equal one full-sequence forward at every position, and sampled
responses are drawn by the Verifier's sampler (a fake sampler shows through; counts follow p at T)."""

from __future__ import annotations

import pytest
import torch

from specbench_testing import chisquare_pvalue, hf_greedy, ragged_prompts, tiny
from specbench import verify
from specbench.errors import ConfigError
from specbench.models.cuda_graphs import GraphedRunner
from specbench.models.runner import make_runner
from specbench.train.data import data_writer, generate_distillation, load_or_generate

PROMPTS = (5, 9, 3, 12)  # ragged; in batches of 3, so one batch is partial
NEW = 6


@pytest.fixture(scope="module")
def target():
    return tiny("tiny-llama")


def _distil(target, prompts, **overrides):
    opts = dict(max_new_tokens=NEW, samples=2, temperature=0.8, batch_size=3, layers=(0, 1), eos_ids=set(), seed=0,
                progress=False)
    return generate_distillation(target, make_runner(target.model), prompts, **{**opts, **overrides})


def _reference(model, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One forward over the whole sequence: final-norm hidden [N, H], each layer's output [N, L, H], logits [N, V]."""
    outputs = []
    hooks = [layer.register_forward_hook(lambda m, a, out: outputs.append(out[0] if isinstance(out, tuple) else out))
             for layer in model.model.layers]
    try:
        with torch.no_grad():
            out = model(tokens[None], output_hidden_states=True)
    finally:
        for h in hooks:
            h.remove()
    return out.hidden_states[-1][0], torch.stack([o[0] for o in outputs], 1), out.logits[0]


def test_greedy_responses_and_every_feature_match_a_plain_reference(target):
    prompts = ragged_prompts(target.vocab_size, PROMPTS)
    data = _distil(target, prompts)
    assert len(data) == 2 * len(prompts) and data.layers == (0, 1)
    assert [t[len(p):].tolist() for t, p in zip(data.tokens[:4], prompts)] == hf_greedy(target.model, prompts, NEW)
    assert [t[:len(p)].tolist() for t, p in zip(data.tokens[4:], prompts)] == prompts  # sample 1: the same prompts
    for tokens, plen, hidden, layer_hidden, top1 in zip(data.tokens, data.prompt_lengths, data.hidden, data.layer_hidden,
                                                        data.top1):
        n = len(tokens)
        assert n == plen + NEW and hidden.shape == (n - 1, 48) and layer_hidden.shape == (n - 1, 2, 48)
        assert hidden.dtype == layer_hidden.dtype == torch.float16
        ref_hidden, ref_layers, ref_logits = _reference(target.model, tokens)
        # fp16 storage: half an ulp is 2^-11 of the value
        torch.testing.assert_close(hidden.float(), ref_hidden[: n - 1], atol=1e-4, rtol=1e-3)
        torch.testing.assert_close(layer_hidden.float(), ref_layers[: n - 1], atol=1e-4, rtol=1e-3)
        assert torch.equal(top1, ref_logits[: n - 1].argmax(-1))  # prompt positions too (the engine's prefill gives one)


def test_a_response_ends_at_its_first_eos(target):
    prompts = ragged_prompts(target.vocab_size, PROMPTS)
    greedy = hf_greedy(target.model, prompts, NEW)
    eos = greedy[0][2]
    data = _distil(target, prompts, samples=1, eos_ids={eos})
    for tokens, plen, hidden, full in zip(data.tokens, data.prompt_lengths, data.hidden, greedy):
        cut = full[: full.index(eos) + 1] if eos in full else full
        assert tokens[plen:].tolist() == cut and len(hidden) == len(tokens) - 1


def test_sampled_responses_are_drawn_by_the_verifiers_sampler(target, monkeypatch):
    prompts = ragged_prompts(target.vocab_size, PROMPTS)
    monkeypatch.setattr(verify, "sample_from", lambda weights, noise: torch.full(weights.shape[:-1], 7))
    data = _distil(target, prompts)
    assert [t[len(p):].tolist() for t, p in zip(data.tokens[:4], prompts)] == hf_greedy(target.model, prompts, NEW)
    assert all(t[len(p):].tolist() == [7] * NEW for t, p in zip(data.tokens[4:], prompts))


@pytest.mark.parametrize("wrong", [False, True])
def test_sampled_first_tokens_follow_p_at_the_temperature(target, monkeypatch, wrong):
    """Counts of the first sampled token over 3000 rows against softmax(logits / T); the mutation (a sampler
    that ignores T, p at T = 1) must fail the same test."""
    prompt, temperature = [3, 14, 15, 92], 0.2
    with torch.no_grad():
        p = verify.logits_to_probs(target.model(torch.tensor([prompt])).logits[0, -1], verify.SamplingParams(temperature))
    if wrong:
        monkeypatch.setattr(verify, "logits_to_probs", lambda logits, params: torch.softmax(logits.float(), -1))
    data = _distil(target, [prompt] * 3000, max_new_tokens=1, samples=2, temperature=temperature, batch_size=3000,
                   layers=())
    first = torch.stack([t[len(prompt)] for t in data.tokens[3000:]])
    pvalue = chisquare_pvalue(torch.bincount(first, minlength=len(p)), p)
    assert (pvalue < 1e-4) if wrong else (pvalue > 1e-3), pvalue


# -- data.dtype: the set written by a bfloat16 copy, on the decode engine's path -------------------------------------

def test_a_bfloat16_writer_is_a_copy_and_records_through_the_graphed_runner_as_through_the_plain_one(target):
    """data.dtype=bfloat16: the writer is the target loaded again in bfloat16 (the one the trainer keeps stays
    float32), and on CUDA it decodes under GraphedRunner. That code path runs here eagerly over the graphs' static
    buffers (a batch of 3 padded to the bucket of 4): the recorder must see the same responses and features through it.
    The module's other tests built runners on the target first, as the trainer may."""
    writer, runner = data_writer(target, torch.bfloat16)
    assert writer.model is not target.model and next(writer.model.parameters()).dtype == torch.bfloat16
    assert next(target.model.parameters()).dtype == torch.float32
    prompts = ragged_prompts(target.vocab_size, PROMPTS)
    opts = dict(max_new_tokens=NEW, samples=2, temperature=0.8, batch_size=3, layers=(0, 1), eos_ids=set(), seed=0,
                progress=False)
    plain = generate_distillation(writer, runner, prompts, **opts)
    graphed = generate_distillation(writer, GraphedRunner(runner, capture=False), prompts, **opts)
    assert [t.tolist() for t in graphed.tokens] == [t.tolist() for t in plain.tokens]
    for name in ("hidden", "layer_hidden"):
        for a, b in zip(getattr(graphed, name), getattr(plain, name)):
            torch.testing.assert_close(a.float(), b.float(), atol=2e-2, rtol=2e-2)
    assert sum(int((a != b).sum()) for a, b in zip(graphed.top1, plain.top1)) <= 2  # a bf16 near-tie may flip


def test_each_data_dtype_keeps_its_own_shards_float32_where_it_was_and_a_bad_one_is_a_config_error(tmp_path, target):
    """A float32 set's cache key is the one it had before data.dtype existed (the sets made so far are found again);
    a bfloat16 set lives apart; an unknown dtype is refused before any data is made."""
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(f'{{"prompt": "request number {i}", "chat": false}}\n' for i in range(3)))
    cfg = dict(path=str(path), exclude_categories=[], max_new_tokens=3, samples=1, batch_size=4)
    dirs = []
    for dtype in (None, "float32", "bfloat16"):
        d = tmp_path / str(dtype)
        data = load_or_generate(d, target, "tiny-llama", {**cfg, "dtype": dtype}, (), set(), 0, progress=False)
        assert len(data) == 3
        dirs.append([p.name for p in d.glob("distill-*.shards")])
    assert dirs[0] == dirs[1] != dirs[2] and len(dirs[2]) == 1
    with pytest.raises(ConfigError, match=r"data.dtype='fp8'; allowed: float32, bfloat16"):
        load_or_generate(tmp_path / "bad", target, "tiny-llama", {**cfg, "dtype": "fp8"}, (), set(), 0, progress=False)
    assert not (tmp_path / "bad").exists() or not list((tmp_path / "bad").glob("distill-*"))


def test_a_set_made_from_exported_responses_is_the_decoded_set(tmp_path, target, capsys):
    """data.export_responses, then data.responses in an empty cache: a shard the file holds is made by one prefill of
    its sequences (same tokens and prompt lengths, features within fp16 rounding, the same top-1), a shard it lacks
    is decoded, and a head recording other layers reads the same file. A file of another set is refused."""
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(f'{{"prompt": "{"word " * (3 + 2 * i)}{i}", "chat": false}}\n' for i in range(7)))
    cfg = dict(path=str(path), exclude_categories=[], max_new_tokens=5, samples=2, temperature=0.9, batch_size=3)
    decoded = load_or_generate(tmp_path / "a", target, "tiny-llama", cfg, (0, 1), set(), 0, progress=False)
    two = tmp_path / "two.npz"  # the responses of the first two shards (of three) only
    load_or_generate(tmp_path / "a", target, "tiny-llama", {**cfg, "max_shards": 2, "export_responses": str(two)},
                     (0, 1), set(), 0, progress=False)
    capsys.readouterr()
    rebuilt = load_or_generate(tmp_path / "b", target, "tiny-llama", {**cfg, "responses": str(two)}, (1,), set(), 0,
                               progress=False)
    printed = capsys.readouterr().out
    assert printed.count("(from two.npz's responses)") == 2 and printed.count("(decoded)") == 1
    assert len(rebuilt) == len(decoded) == 14
    assert [t.tolist() for t in rebuilt.tokens] == [t.tolist() for t in decoded.tokens]
    assert rebuilt.prompt_lengths == decoded.prompt_lengths
    for name in ("hidden", "top1"):
        for mine, theirs in zip(getattr(rebuilt, name), getattr(decoded, name)):
            torch.testing.assert_close(mine.float(), theirs.float(), atol=2e-3, rtol=2e-3)
    for mine, theirs in zip(rebuilt.layer_hidden, decoded.layer_hidden):  # layer 1 alone, recorded as (0, 1) there
        torch.testing.assert_close(mine.float(), theirs[:, 1:].float(), atol=2e-3, rtol=2e-3)
    with pytest.raises(ConfigError, match=r"data.responses=.*two.npz.* holds the responses of another set"):
        load_or_generate(tmp_path / "c", target, "tiny-llama", {**cfg, "temperature": 0.5, "responses": str(two)},
                         (1,), set(), 0, progress=False)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the CUDA-graph path of the writer needs CUDA")
def test_the_bfloat16_writer_records_the_same_features_under_cuda_graphs_as_eagerly():
    """On CUDA the bfloat16 writer decodes under CUDA graphs, its next forward run ahead of each step's sync: the
    set it records (responses, final-norm and layer features, top-1) equals, bit for bit, the same writer's without
    the graphs (the engine keeps the step's hidden states from the run-ahead's replay; before it did, an H100 recorded
    the next position's, experiments/drafters/bf16-data/)."""
    from specbench.models.loading import load_model, resolve_spec

    dev = torch.device("cuda")
    target = load_model(resolve_spec({"name": "smollm2-135m-random"}, "target"), dev, torch.float32)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(300, 40000, (int(n),), generator=g).tolist() for n in torch.randint(20, 60, (37,), generator=g)]
    writer, runner = data_writer(target, torch.bfloat16)
    assert isinstance(runner, GraphedRunner)
    opts = dict(max_new_tokens=16, samples=2, temperature=0.7, batch_size=37, layers=(2, 15), eos_ids=set(), seed=0,
                progress=False)
    eager = generate_distillation(writer, runner.runner, prompts, **opts)
    graphed = generate_distillation(writer, runner, prompts, **opts)
    assert runner.captures > 0
    for name in ("tokens", "hidden", "layer_hidden", "top1"):
        assert all(torch.equal(a, b) for a, b in zip(getattr(graphed, name), getattr(eager, name))), name
