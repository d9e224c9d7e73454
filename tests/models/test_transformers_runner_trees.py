"""Trees in the transformers fallback runner (TransformersRunner): every node of a tree, verified in one forward, gets
the logits (and features) its root path gets fed to transformers as a chain; move_kv puts an accepted path into the
slots of its positions so the chain goes on; a dynamic tree's frontier sees ancestors fed in earlier calls; sliding
windows hold over the slots' positions; a chain alone still runs transformers' forward untouched.

Mirrors tests/models/test_tree_attention.py (our decoder). Tiny models, fp32, B = 2 rows with different prompt
lengths, odd cache sizes.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch

from specbench_testing import tiny, tree_ancestors, tree_depth, tree_path_nodes
from specbench.errors import ConfigError
from specbench.models.runner import TransformersRunner, _raise_if_no_custom_masks

PARENTS = [-1, -1, 0, 0, 1, 3]  # node i under node PARENTS[i] (-1: the pending token)
V = 101


def _hf(model, ids: list[int]):
    """transformers' own forward over one chain: (last logits [V], last final hidden [H], last layer-0 output [H])."""
    with torch.no_grad():
        out = model(torch.tensor([ids]), use_cache=False, output_hidden_states=True)
    return out.logits[0, -1], out.hidden_states[-1][0, -1], out.hidden_states[1][0, -1]


def _prefill(runner: TransformersRunner, prompts: list[list[int]], upto: int = 0) -> None:
    """Feed each row's prompt but its last `upto` tokens as one right-padded chain (as the engine's prefill)."""
    n = max(len(p) - upto for p in prompts)
    tokens = torch.tensor([p[: len(p) - upto] + [0] * (n - len(p) + upto) for p in prompts])
    runner(tokens, torch.arange(n).expand(len(prompts), n), attn_len=n)


def _eager(name: str):
    model = copy.deepcopy(tiny(name).model)
    model.set_attn_implementation("eager")
    return model


MODELS = {
    "llama": lambda: tiny("tiny-llama").model,
    "qwen3": lambda: tiny("tiny-qwen3").model,
    "llama-eager": lambda: _eager("tiny-llama"),  # the additive mask is added to the scores by hand there
}


def _sliding(kind: str):
    """A tiny model whose sliding-window layers (window 3) matter at these lengths: gemma3 mixes sliding and full
    layers (config.layer_types: a mask per layer type), mistral slides in every layer (no layer_types)."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig, MistralConfig, MistralForCausalLM

    torch.manual_seed(0)
    common = dict(vocab_size=V, hidden_size=48, intermediate_size=40, num_hidden_layers=2, num_attention_heads=3,
                  num_key_value_heads=1, sliding_window=3, max_position_embeddings=64)
    if kind == "gemma3":
        cfg = Gemma3TextConfig(head_dim=16, layer_types=["sliding_attention", "full_attention"], **common)
        model = Gemma3ForCausalLM(cfg)
    else:
        model = MistralForCausalLM(MistralConfig(**common))
    model.set_attn_implementation("sdpa")
    return model.eval()


def _check_tree_then_move(model, lengths=(5, 8), s=29):
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, V, (n,), generator=g).tolist() for n in lengths]
    nodes = torch.randint(0, V, (2, len(PARENTS)), generator=g)
    bsz, n = 2, len(PARENTS)
    runner = TransformersRunner(model)
    runner.allocate(bsz, s)
    _prefill(runner, prompts, upto=1)  # each row holds its prompt but the last (pending) token
    lengths_t = torch.tensor(lengths)  # L: the pending token sits at L-1
    tokens = torch.cat([torch.tensor([[p[-1]] for p in prompts]), nodes], 1)  # [B, 1+N]
    depth = torch.tensor([0] + [tree_depth(PARENTS, i) for i in range(n)])
    positions = lengths_t[:, None] - 1 + depth[None]  # RoPE positions: L-1 + depth
    slots = lengths_t[:, None] - 1 + torch.arange(n + 1)[None]  # distinct slots: L-1 + column
    mask = tree_ancestors(PARENTS).expand(bsz, -1, -1)
    out = runner(tokens, positions, attn_len=max(lengths) + n, slots=slots, tree_mask=mask, want_hidden=True,
                 hidden_layers=(0,))
    assert out.logits.shape == (bsz, n + 1, V) and out.hidden.shape[:2] == (bsz, n + 1)

    for b, p in enumerate(prompts):
        for i in range(-1, n):  # the pending token, then each node
            chain = p + [int(nodes[b, j]) for j in tree_path_nodes(PARENTS, i)]
            logits, hidden, layer0 = _hf(model, chain)
            torch.testing.assert_close(out.logits[b, i + 1], logits, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(out.hidden[b, i + 1], hidden, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(out.layer_hidden[0][b, i + 1], layer0, atol=1e-4, rtol=1e-4)

    # accept pending -> node 1 -> node 4 in row 0, pending -> node 0 -> node 3 -> node 5 in row 1 (node 0 already sits
    # in the slot of its position: a move onto itself); node j sits at slot L + j and moves to L, L+1, ...
    accepted = [[1, 4], [0, 3, 5]]
    width = max(len(a) for a in accepted)
    pad = lambda a: a + a[-1:] * (width - len(a))  # noqa: E731 - ragged paths repeat their last move
    src = torch.stack([lengths_t[b] + torch.tensor(pad(a)) for b, a in enumerate(accepted)])
    dst = torch.stack([lengths_t[b] + torch.tensor(pad(list(range(len(a))))) for b, a in enumerate(accepted)])
    runner.move_kv(src, dst)
    # then the chain goes on, one token, then two at once (each row at its own positions)
    after = lengths_t + torch.tensor([len(a) for a in accepted])  # the next token's position
    chains = [p + [int(nodes[b, j]) for j in accepted[b]] for b, p in enumerate(prompts)]
    for new in ([[7], [9]], [[11, 2], [13, 4]]):
        t = len(new[0])
        got = runner(torch.tensor(new), after[:, None] + torch.arange(t), attn_len=int(after.max()) + t).logits
        for b in range(bsz):
            chains[b] += new[b]
            for j in range(t):
                torch.testing.assert_close(got[b, j], _hf(model, chains[b][: len(chains[b]) - t + j + 1])[0],
                                           atol=1e-4, rtol=1e-4)
        after = after + t


@pytest.mark.parametrize("name", list(MODELS))
def test_each_tree_node_gets_its_root_paths_logits_and_move_kv_continues_the_chain(name):
    _check_tree_then_move(MODELS[name]())


@pytest.mark.parametrize("kind", ["gemma3", "mistral"])
def test_sliding_windows_hold_over_the_slots_positions(kind):
    _check_tree_then_move(_sliding(kind), lengths=(6, 9), s=31)


@pytest.mark.parametrize("name", ["llama", "qwen3"])
def test_a_dynamic_trees_frontier_sees_ancestors_fed_in_earlier_calls(name):
    """As the proposer base's _draft_dynamic: the root (pending token) fed as a chain, then one forward per depth over
    the frontier at scratch slots past each row's tokens, with tree_path naming the ancestors' slots from the root.
    Row 1's depth-2 nodes hang under the other depth-1 nodes than row 0's, so a row mix-up fails."""
    model = MODELS[name]()
    g = torch.Generator().manual_seed(1)
    lengths = [6, 9]
    prompts = [torch.randint(0, V, (n,), generator=g).tolist() for n in lengths]
    runner = TransformersRunner(model)
    runner.allocate(2, 27)
    _prefill(runner, prompts)  # the catch-up: every row's prompt, its pending token included
    L = torch.tensor(lengths)[:, None]  # [B, 1]
    root = L - 1
    # depth 1: two nodes at slots L, L+1; depth 2: two at L+2, L+3; depth 3: one at L+4. [depth][row][node]: the
    # node's parent among the depth before's nodes (row 0's depth-3 node sees slots L-1, L, L+3, L+4, not L+1, L+2)
    depth_parents = [[[0, 0], [0, 0]], [[0, 0], [1, 0]], [[1], [0]]]
    path = root[..., None]  # [B, 1, 1] the root's slot
    fed = [[[]], [[]]]  # [row][node] the tokens after the root down to the node
    next_slot = L.clone()
    for depth, parents in enumerate(depth_parents, start=1):
        parent = torch.tensor(parents)  # [B, w]
        w = parent.shape[1]
        slots = next_slot + torch.arange(w)  # [B, w]
        path = torch.cat([path.gather(1, parent[..., None].expand(-1, -1, path.shape[-1])), slots[..., None]], -1)
        tok = torch.randint(0, V, (2, w), generator=g)
        fed = [[fed[b][int(parent[b, j])] + [int(tok[b, j])] for j in range(w)] for b in range(2)]
        out = runner(tok, (root + depth).expand(2, w), attn_len=max(lengths) + 5, slots=slots,
                     tree_path=path.contiguous()).logits  # [B, w, V]
        for b in range(2):
            for j in range(w):
                torch.testing.assert_close(out[b, j], _hf(model, prompts[b] + fed[b][j])[0], atol=1e-4, rtol=1e-4)
        next_slot = next_slot + w


def test_a_chain_alone_runs_transformers_forward_untouched():
    """No tree arguments, no tree before in the batch: no mask, no position_ids, no visibility table, as before trees;
    after a tree (until the next allocate) chains get the mask too."""
    model = tiny("tiny-llama").model
    runner = TransformersRunner(model)
    calls = []
    forward = model.forward
    model.forward = lambda *a, **k: calls.append(sorted(k)) or forward(*a, **k)
    try:
        runner.allocate(2, 13)
        _prefill(runner, [[5, 6, 7], [8, 9, 10, 11]])
        runner(torch.tensor([[1], [2]]), torch.tensor([[3], [4]]), attn_len=5)
        assert runner.sees is None
        assert all("attention_mask" not in k and "position_ids" not in k for k in calls), calls
        runner(torch.tensor([[1, 2], [3, 4]]), torch.tensor([[4, 5], [5, 6]]), attn_len=7, slots=torch.tensor([[4, 5], [5, 6]]),
               tree_mask=torch.ones(2, 2, 2, dtype=torch.bool).tril())
        runner(torch.tensor([[1], [2]]), torch.tensor([[6], [7]]), attn_len=8)
        assert "attention_mask" in calls[-1] and "position_ids" in calls[-1]
        runner.allocate(2, 13)
        assert runner.sees is None
    finally:
        del model.forward


def test_trees_need_a_custom_4d_mask():
    base = dict(model_type="toy", layer_types=None)
    _raise_if_no_custom_masks(SimpleNamespace(_attn_implementation="sdpa", **base))
    with pytest.raises(ConfigError, match="attn_implementation='flash_attention_2'.*allowed: eager, sdpa"):
        _raise_if_no_custom_masks(SimpleNamespace(_attn_implementation="flash_attention_2", **base))
    with pytest.raises(ConfigError, match="linear_attention layers; allowed: full_attention, sliding_attention"):
        _raise_if_no_custom_masks(SimpleNamespace(_attn_implementation="sdpa", model_type="toy",
                                                  layer_types=["full_attention", "linear_attention"]))
