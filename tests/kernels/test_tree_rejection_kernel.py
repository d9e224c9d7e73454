"""The Triton tree acceptance kernels equal the torch reference (verify.greedy_tree_verify and
verify.tree_rejection_sample) on the same noise.

On the CPU the kernels run in Triton's interpreter; with a CUDA GPU they run compiled, and there the T > 0 kernel
also passes the reference's chi-square test on 40,000 rows (too slow interpreted). Small odd sizes: B = 5, N = 7
nodes, V = 37 or 300, block_v below V so every pass loops over several blocks and the last one is partial.
"""

import pytest
import torch

pytest.importorskip("triton")
pytestmark = pytest.mark.gpu  # part of the GPU suite: compiled there, interpreted here

from specbench import verify  # noqa: E402
from kernel_env import COMPILED, DEVICE, kernels  # noqa: E402

rejection, tree_rejection = kernels("rejection", "tree_rejection")

B, N = 5, 7
BLOCKS = {37: 8, 300: 64}


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _random_tree(g: torch.Generator, bsz: int, n: int) -> torch.Tensor:
    """Random topological parents [B, N]: node i hangs under -1 or any j < i (so siblings are common)."""
    return torch.stack([torch.tensor([int(torch.randint(-1, max(i, 0), (1,), generator=g)) if i else -1
                                      for i in range(n)]) for _ in range(bsz)])


def _chain(bsz: int, n: int) -> torch.Tensor:
    return torch.arange(-1, n - 1).expand(bsz, n).clone()


def _assert_same(got: verify.TreeVerdict, want: verify.TreeVerdict) -> None:
    for name in ("path", "accepted", "next_token"):
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == torch.int64 and a.shape == b.shape, (name, a.dtype, a.shape, b.shape)
        assert torch.equal(a.cpu(), b.cpu()), f"{name}: kernel {a.tolist()} != reference {b.tolist()}"


def _greedy_case(seed: int, vocab: int, dtype: torch.dtype, chain: bool):
    """Logits and a tree whose nodes mostly carry the argmax after their parent, so paths run deep and branch."""
    g = _gen(seed)
    logits = (torch.randn(B, N + 1, vocab, generator=g) * 3).to(dtype)
    parents = _chain(B, N) if chain else _random_tree(g, B, N)
    argmax = logits.argmax(-1)
    tokens = argmax.gather(1, parents + 1)
    wrong = torch.rand(B, N, generator=g) < 0.3
    tokens = torch.where(wrong, torch.randint(0, vocab, (B, N), generator=g), tokens)
    return tokens.to(DEVICE), parents.to(DEVICE), logits.to(DEVICE)


@pytest.mark.parametrize("chain", [False, True], ids=["tree", "chain"])
@pytest.mark.parametrize(("vocab", "dtype"), [(37, torch.float32), (300, torch.float32), (300, torch.bfloat16)])
@pytest.mark.parametrize("seed", range(3))
def test_greedy_tree_matches_reference(seed, vocab, dtype, chain):
    tokens, parents, logits = _greedy_case(seed * 1000 + vocab, vocab, dtype, chain)
    want = verify.greedy_tree_verify(tokens, parents, logits)
    got = tree_rejection.greedy_tree_verify_triton(tokens, parents, logits, block_v=BLOCKS[vocab], num_chunks=2)
    _assert_same(got, want)


def test_greedy_tree_cases_go_deep_and_stop_early():
    lengths = set()
    for seed in range(3):
        for chain in (False, True):
            tokens, parents, logits = _greedy_case(seed * 1000 + 300, 300, torch.float32, chain)
            lengths.update(verify.greedy_tree_verify(tokens, parents, logits).accepted.tolist())
    assert 0 in lengths and len(lengths) >= 4, lengths


def _sampling_case(seed: int, vocab: int, with_q: bool, chain: bool):
    """p and q close so that children are accepted and rejected; siblings are independent draws from their
    parent's q (the rows of draft_probs of siblings are equal). Row 0 has u = 0: it accepts whatever has p > 0."""
    g = _gen(seed)
    parents = _chain(B, N) if chain else _random_tree(g, B, N)
    z = torch.randn(B, N + 1, vocab, generator=g) * 2
    p = torch.softmax(z, -1)
    q_after = torch.softmax(z + torch.randn(B, N + 1, vocab, generator=g), -1)  # the draft's q after each column
    q = q_after.gather(1, (parents + 1)[..., None].expand(-1, -1, vocab))  # node i was drawn from q after its parent
    tokens = torch.multinomial(q.reshape(-1, vocab), 1, generator=g).reshape(B, N)
    u = torch.rand(B, N, generator=g, dtype=torch.float64)
    u[0] = 0.0
    e = torch.empty(B, vocab).exponential_(generator=g)
    args = (tokens, parents, q if with_q else None, p, u, e)
    return tuple(None if a is None else a.to(DEVICE) for a in args)


@pytest.mark.parametrize("chain", [False, True], ids=["tree", "chain"])
@pytest.mark.parametrize("with_q", [True, False], ids=["draft_probs", "one_hot"])
@pytest.mark.parametrize("vocab", [37, 300])
@pytest.mark.parametrize("seed", range(3))
def test_tree_rejection_matches_reference(seed, vocab, with_q, chain):
    case = _sampling_case(seed * 1000 + vocab + int(with_q), vocab, with_q, chain)
    want = verify.tree_rejection_sample(*case)
    _assert_same(tree_rejection.tree_rejection_sample_triton(*case, block_v=BLOCKS[vocab]), want)


def test_sampling_cases_accept_and_reject():
    lengths, rejected = set(), 0
    for seed in range(3):
        case = _sampling_case(seed * 1000 + 301, 300, True, False)
        out = verify.tree_rejection_sample(*case)
        lengths.update(out.accepted.tolist())
        rejected += int((out.accepted < 2).sum())
    assert len(lengths) >= 3 and rejected > 0, lengths


def test_a_chain_equals_the_chain_kernel():
    """One child per node: the tree kernel's verdict is the chain kernel's (rejection_sample_triton)."""
    tokens, parents, q, p, u, e = _sampling_case(11, 300, True, chain=True)
    tree = tree_rejection.tree_rejection_sample_triton(tokens, parents, q, p, u, e, block_v=64)
    chain = rejection.rejection_sample_triton(tokens, q, p, u, e, block_v=64, num_chunks=2)
    assert torch.equal(tree.accepted.cpu(), chain.accepted.cpu())
    assert torch.equal(tree.next_token.cpu(), chain.next_token.cpu())


def test_zero_residual_mass_keeps_r():
    """A child with p = q = 0 at its token and q = p elsewhere: rejected, nothing left, so r stays p."""
    g = _gen(5)
    vocab = 37
    z = torch.randn(B, 2, vocab, generator=g)
    z[..., ::3] = float("-inf")
    p = torch.softmax(z, -1)
    q = p[:, :1].clone()
    tokens = torch.zeros(B, 1, dtype=torch.int64)  # token 0 has p = q = 0
    parents = torch.full((B, 1), -1)
    u = torch.rand(B, 1, generator=g, dtype=torch.float64)
    e = torch.empty(B, vocab).exponential_(generator=g)
    case = tuple(t.to(DEVICE) for t in (tokens, parents, q, p, u, e))
    want = verify.tree_rejection_sample(*case)
    assert want.accepted.tolist() == [0] * B
    assert torch.equal(want.next_token.cpu(), torch.argmax(p[:, 0] / e, -1))
    _assert_same(tree_rejection.tree_rejection_sample_triton(*case, block_v=8), want)


def test_no_nodes():
    g = _gen(6)
    p = torch.softmax(torch.randn(B, 1, 37, generator=g), -1)
    e = torch.empty(B, 37).exponential_(generator=g)
    empty = torch.zeros((B, 0), dtype=torch.int64)
    case = (empty, empty, None, p, torch.zeros((B, 0), dtype=torch.float64), e)
    case = tuple(None if t is None else t.to(DEVICE) for t in case)
    _assert_same(tree_rejection.tree_rejection_sample_triton(*case), verify.tree_rejection_sample(*case))
    logits = torch.randn(B, 1, 37, generator=g).to(DEVICE)
    _assert_same(tree_rejection.greedy_tree_verify_triton(case[0], case[1], logits),
                 verify.greedy_tree_verify(case[0], case[1], logits))


def test_bad_shapes_are_named():
    tokens, parents, logits = _greedy_case(0, 37, torch.float32, False)
    with pytest.raises(ValueError, match=r"parents has shape \(5, 6\)"):
        tree_rejection.greedy_tree_verify_triton(tokens, parents[:, :6], logits)
    with pytest.raises(ValueError, match=r"target tensor has shape \(5, 7, 37\)"):
        tree_rejection.greedy_tree_verify_triton(tokens, parents, logits[:, :7])


@pytest.mark.skipif(not COMPILED, reason="40,000 rows: fast compiled, minutes in the interpreter")
def test_compiled_kernel_keeps_the_target_distribution():
    """The reference's two-level chi-square test (tests/test_verify_tree.py) on the compiled kernel."""
    from test_verify_tree import V, _emitted, _pvalues, _two_level

    g = torch.Generator().manual_seed(3)
    p1, p2, tokens, parents, qs, target = _two_level(g, sampled=True)
    rows = tokens.shape[0]
    u = torch.rand(rows, 6, dtype=torch.float64, generator=g)
    e = torch.empty(rows, V).exponential_(generator=g)
    out = tree_rejection.tree_rejection_sample_triton(*(t.to(DEVICE) for t in (tokens, parents, qs, target, u, e)))
    out = verify.TreeVerdict(path=out.path.cpu(), accepted=out.accepted.cpu(), next_token=out.next_token.cpu())
    pv = _pvalues(p1, p2, *_emitted(tokens, out))
    assert len(pv) >= 3 and min(pv) > 1e-4, pv
