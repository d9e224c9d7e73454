"""The Triton acceptance kernels equal the torch reference in specbench.verify, bit for bit.

On the CPU the kernels run in Triton's interpreter (tests/kernels/conftest.py sets
TRITON_INTERPRET=1 before the kernel module is imported); with a CUDA GPU they run compiled.
Sizes are small and odd (B=3, V=37/300) and block_v is smaller than V, so that every kernel loops
over several blocks and several chunks and V is never a multiple of the block.
"""


import pytest
import torch

pytest.importorskip("triton")
pytestmark = pytest.mark.gpu  # part of the GPU suite: compiled and exact there, interpreted here

from specbench import verify  # noqa: E402
from kernel_env import DEVICE, kernels  # noqa: E402

(rejection,) = kernels("rejection")

B = 3
SPLITS = {37: dict(block_v=8, num_chunks=2), 300: dict(block_v=64, num_chunks=2)}  # chunks of 3 blocks, the last short


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _greedy_case(seed: int, k: int, vocab: int, dtype: torch.dtype):
    g = _gen(seed)
    logits = (torch.randn(B, k + 1, vocab, generator=g) * 3).to(dtype)
    draft = logits[:, :k].argmax(-1)  # row 0 matches everywhere (bonus)
    if k > 0:
        draft[1, k // 2] = (draft[1, k // 2] + 1) % vocab  # row 1 stops in the middle
        draft[2] = torch.randint(0, vocab, (k,), generator=g)  # row 2: random tokens
    return draft.to(DEVICE), logits.to(DEVICE)


def _sampling_case(seed: int, k: int, vocab: int, dtype: torch.dtype, with_q: bool):
    """p and q close enough that rows accept some and reject some; row 0 has u = 0 (bonus row)."""
    g = _gen(seed)
    z = torch.randn(B, k + 1, vocab, generator=g) * 2
    p = torch.softmax(z, -1).to(dtype)
    q = torch.softmax(z[:, :k] + torch.randn(B, k, vocab, generator=g), -1).to(dtype)
    draft = torch.multinomial(q.float().reshape(-1, vocab), 1, generator=g).reshape(B, k)
    u = torch.rand(B, k, generator=g, dtype=torch.float64)
    u[0] = 0.0
    e = torch.empty(B, vocab).exponential_(generator=g)
    args = (draft, q if with_q else None, p, u, e)
    return tuple(None if a is None else a.to(DEVICE) for a in args)


def _mismatches(got: verify.Verdict, want: verify.Verdict) -> int:
    """Rows whose (accepted, next_token) differ; also checks dtypes and shapes."""
    assert got.accepted.dtype == got.next_token.dtype == torch.int64
    assert got.accepted.shape == got.next_token.shape == want.accepted.shape
    same = (got.accepted.cpu() == want.accepted.cpu()) & (got.next_token.cpu() == want.next_token.cpu())
    return int((~same).sum())


def _assert_same(got: verify.Verdict, want: verify.Verdict) -> None:
    assert _mismatches(got, want) == 0, f"kernel {got} != reference {want}"


def test_triton_available_on_the_test_device():
    assert rejection.triton_available(DEVICE)


VOCAB_DTYPES = [(37, torch.float32), (300, torch.float32), (300, torch.bfloat16)]  # bf16 logits tie often


@pytest.mark.parametrize(("vocab", "dtype"), VOCAB_DTYPES)
@pytest.mark.parametrize("k", [0, 1, 4])
def test_greedy_matches_reference(k, vocab, dtype):
    draft, logits = _greedy_case(10 * k + vocab, k, vocab, dtype)
    want = verify.greedy_verify(draft, logits)
    _assert_same(rejection.greedy_verify_triton(draft, logits, **SPLITS[vocab]), want)
    if k == 4:
        assert want.accepted.tolist()[:2] == [4, 2]  # the case covers a bonus row and a stop


def test_greedy_float64_logits_and_default_split():
    draft, logits = _greedy_case(7, 1, 37, torch.float64)
    _assert_same(rejection.greedy_verify_triton(draft, logits), verify.greedy_verify(draft, logits))


@pytest.mark.parametrize("with_q", [True, False], ids=["draft_probs", "one_hot"])
@pytest.mark.parametrize(("vocab", "dtype"), VOCAB_DTYPES)
@pytest.mark.parametrize("k", [0, 1, 4])
def test_rejection_matches_reference(k, vocab, dtype, with_q):
    case = _sampling_case(100 * k + vocab + int(with_q), k, vocab, dtype, with_q)
    want = verify.rejection_sample(*case)
    _assert_same(rejection.rejection_sample_triton(*case, **SPLITS[vocab]), want)
    if k > 0:
        assert want.accepted[0] == k  # u = 0 row: the bonus is drawn from p_K


def test_sampling_cases_stop_mid_draft():
    """The random cases are not all-accept or all-reject: rows stop at several draft positions."""
    counts = set()
    for seed in range(4):
        counts.update(verify.rejection_sample(*_sampling_case(seed, 4, 300, torch.float32, True)).accepted.tolist())
    assert len(counts & {0, 1, 2, 3}) >= 2 and 4 in counts


def test_all_accepted_rows_take_the_bonus_from_p_k():
    draft, q, p, u, e = _sampling_case(5, 4, 300, torch.float32, True)
    u.zero_()  # u * q < p holds for every draft token with p > 0
    want = verify.rejection_sample(draft, q, p, u, e)
    assert want.accepted.tolist() == [4] * B
    _assert_same(rejection.rejection_sample_triton(draft, q, p, u, e, **SPLITS[300]), want)


def test_zero_residual_mass_falls_back_to_p():
    """p == q exactly and d has p(d) = 0: rejected, max(0, p - q) is all zero, so sample from p."""
    g = _gen(3)
    k, vocab = 1, 300
    z = torch.randn(B, k + 1, vocab, generator=g)
    z[..., ::3] = float("-inf")  # every third token has probability 0, as after top-k
    p = torch.softmax(z, -1)
    q = p[:, :k].clone()
    draft = torch.zeros(B, k, dtype=torch.int64)  # token 0 has p = q = 0
    u = torch.rand(B, k, generator=g, dtype=torch.float64)
    e = torch.empty(B, vocab).exponential_(generator=g)
    case = tuple(t.to(DEVICE) for t in (draft, q, p, u, e))
    want = verify.rejection_sample(*case)
    assert want.accepted.tolist() == [0] * B
    assert torch.equal(want.next_token.cpu(), torch.argmax(p[:, 0] / e, -1))  # drawn from p_0 itself
    _assert_same(rejection.rejection_sample_triton(*case, **SPLITS[vocab]), want)


def test_argmax_ties_take_the_lowest_index():
    """Equal maxima in different chunks and in one block: torch returns the first; so must we."""
    vocab = 37  # block 8, 2 chunks of 24 and 13 entries
    logits = torch.zeros(B, 2, vocab)
    logits[0, :, [30, 5, 20]] = 1.0  # across chunks
    logits[1, :, [6, 3]] = 1.0  # within one block
    logits[2, :, [36, 35]] = 1.0  # in the last, partial block
    draft = torch.tensor([[5], [6], [36]])
    case = (draft.to(DEVICE), logits.to(DEVICE))
    want = verify.greedy_verify(*case)
    assert want.accepted.tolist() == [1, 0, 0] and want.next_token.tolist() == [5, 3, 35]
    _assert_same(rejection.greedy_verify_triton(*case, **SPLITS[vocab]), want)

    p = torch.full((B, 1, vocab), 1.0 / vocab)  # K = 0, uniform p, E = 1: every weight ties
    p[2, 0, [13, 29]] = 0.5
    e = torch.ones(B, vocab)
    case = (torch.zeros(B, 0, dtype=torch.int64), None, p, torch.zeros(B, 0, dtype=torch.float64), e)
    case = tuple(None if t is None else t.to(DEVICE) for t in case)
    want = verify.rejection_sample(*case)
    assert want.next_token.tolist() == [0, 0, 13]
    _assert_same(rejection.rejection_sample_triton(*case, **SPLITS[vocab]), want)


def test_nan_wins_the_argmax_like_torch():
    vocab = 37
    logits = torch.zeros(B, 1, vocab)
    logits[0, 0, 30] = float("nan")
    logits[1, 0, [9, 2]] = float("nan")
    logits[2, 0, 4] = float("inf")
    case = (torch.zeros(B, 0, dtype=torch.int64, device=DEVICE), logits.to(DEVICE))
    want = verify.greedy_verify(*case)
    assert want.next_token.tolist() == [30, 2, 4]
    _assert_same(rejection.greedy_verify_triton(*case, **SPLITS[vocab]), want)


def test_wrong_inputs_fail_fast():
    draft, q, p, u, e = _sampling_case(0, 1, 37, torch.float32, True)
    with pytest.raises(ValueError, match="exponentials"):
        rejection.rejection_sample_triton(draft, q, p, u, e.double())
    with pytest.raises(ValueError, match="draft_probs"):
        rejection.rejection_sample_triton(draft, q[..., :-1], p, u, e)
    with pytest.raises(ValueError, match=r"\[B, K\+1, V\]"):
        rejection.greedy_verify_triton(draft, p[:, :1])
    with pytest.raises(ValueError, match="power of two"):
        rejection.greedy_verify_triton(draft, p, block_v=24)


# ---- mutation check: the comparisons above catch a wrong acceptance step ------------------------


def _mutant(mutation: str, draft, q, p, u, e) -> verify.Verdict:
    """The reference with one deliberate mistake, standing in for a wrong kernel."""
    bsz, k = draft.shape
    rows = torch.arange(bsz, device=draft.device)
    p_d = p[:, :k].gather(2, draft[..., None]).squeeze(2).double()
    q_d = q.gather(2, draft[..., None]).squeeze(2).double()
    ok = (u * q_d < p_d).int()
    accepted = ok.sum(1) if mutation == "accept_any_not_prefix" else ok.cumprod(1).sum(1)
    p_next = p[rows, accepted].float()
    q_next = q[rows, accepted.clamp(max=k - 1)].float()
    residual = p_next - q_next if mutation == "no_clamp" else (p_next - q_next).clamp_min(0.0)
    residual = torch.where(residual.sum(-1, keepdim=True) > 0, residual, p_next)
    weights = torch.where((accepted < k)[:, None], residual, p_next)
    if mutation == "sample_from_p":
        weights = p_next
    return verify.Verdict(accepted=accepted.long(), next_token=(weights / e).argmax(-1))


@pytest.mark.parametrize("mutation", ["sample_from_p", "no_clamp", "accept_any_not_prefix"])
def test_a_wrong_sampler_is_caught(mutation):
    wrong = 0
    for seed, dtype in [(0, torch.float32), (1, torch.float32), (2, torch.bfloat16), (3, torch.bfloat16)]:
        case = _sampling_case(seed, 4, 300, dtype, True)
        want = verify.rejection_sample(*case)
        assert _mismatches(_mutant("none", *case), want) == 0  # the harness itself is faithful
        wrong += _mismatches(_mutant(mutation, *case), want)
    assert wrong > 0, f"mutant {mutation!r} agreed with the reference on every row"
