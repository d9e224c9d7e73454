"""Tree verification forwards in our decoder (torch path): every node of a tree, verified in one forward, gets the
logits it would get at the end of its own root path fed as a chain; move_kv puts an accepted path's entries into
the slots of their positions so decoding goes on as if the path had been fed as a chain.

Tiny llama, fp32, B = 2 rows with different prompt lengths, a 6-node tree of depth 3.
"""

from __future__ import annotations

import torch

from specbench_testing import tiny, tree_ancestors, tree_depth, tree_path_nodes
from specbench.models.decoder import DecoderRunner

PARENTS = [-1, -1, 0, 0, 1, 3]  # node i under node PARENTS[i] (-1: the pending token)


def test_each_tree_node_gets_its_root_paths_logits_and_move_kv_continues_the_chain():
    model = tiny("tiny-llama")
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 101, (n,), generator=g).tolist() for n in (5, 8)]
    nodes = torch.randint(0, 101, (2, len(PARENTS)), generator=g)
    bsz, n, s = 2, len(PARENTS), 32
    tree = DecoderRunner(model.model)
    tree.allocate(bsz, s)
    for b, p in enumerate(prompts):  # row b's cache holds prompt b but its last (pending) token
        one = DecoderRunner(model.model)
        one.allocate(1, s)
        one(torch.tensor([p[:-1]]), torch.arange(len(p) - 1)[None])
        tree.k_cache[:, b] = one.k_cache[:, 0]
        tree.v_cache[:, b] = one.v_cache[:, 0]
    lengths = torch.tensor([len(p) for p in prompts])  # L: the pending token sits at L-1
    tokens = torch.cat([torch.tensor([[p[-1]] for p in prompts]), nodes], 1)  # [B, 1+N]
    depth = torch.tensor([0] + [tree_depth(PARENTS, i) for i in range(n)])
    positions = lengths[:, None] - 1 + depth[None]  # RoPE positions: L-1 + depth
    slots = lengths[:, None] - 1 + torch.arange(n + 1)[None]  # distinct cache slots: L-1 + column
    mask = tree_ancestors(PARENTS).expand(bsz, -1, -1)
    out = tree(tokens, positions, attn_len=s, slots=slots, tree_mask=mask).logits  # [B, 1+N, V]

    for b, p in enumerate(prompts):
        for i in range(-1, n):  # the pending token, then each node
            chain = [p[-1]] + [int(nodes[b, j]) for j in tree_path_nodes(PARENTS, i)]
            ref = DecoderRunner(model.model)
            ref.allocate(1, s)
            ref(torch.tensor([p[:-1]]), torch.arange(len(p) - 1)[None])
            want = ref(torch.tensor([chain]), torch.arange(len(p) - 1, len(p) - 1 + len(chain))[None]).logits[0, -1]
            torch.testing.assert_close(out[b, i + 1], want, atol=1e-4, rtol=1e-4)

    # accept the path pending -> node 1 -> node 4 in row 0 and pending -> node 0 -> node 3 -> node 5 in row 1: their
    # entries move from slots L-1+1+node to L, L+1, ...; then one more token continues each chain exactly
    accepted = [[1, 4], [0, 3, 5]]
    width = max(len(a) for a in accepted)
    pad = lambda a: a + a[-1:] * (width - len(a))  # noqa: E731 - ragged paths repeat their last move
    src = torch.stack([lengths[b] + torch.tensor(pad(a)) for b, a in enumerate(accepted)])  # node j sits at L + j
    dst = torch.stack([lengths[b] + torch.tensor(pad(list(range(len(a))))) for b, a in enumerate(accepted)])
    tree.move_kv(src, dst)
    nxt = torch.tensor([[7], [9]])
    after = lengths + torch.tensor([len(a) for a in accepted])  # the next token's position
    got = tree(nxt, after[:, None]).logits[:, 0]
    for b, p in enumerate(prompts):
        chain = p + [int(nodes[b, j]) for j in accepted[b]] + [int(nxt[b, 0])]
        ref = DecoderRunner(model.model)
        ref.allocate(1, s)
        want = ref(torch.tensor([chain]), torch.arange(len(chain))[None]).logits[0, -1]
        torch.testing.assert_close(got[b], want, atol=1e-4, rtol=1e-4)
