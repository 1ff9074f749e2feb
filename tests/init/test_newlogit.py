"""The new-logit objective in chunks of positions (vocabsurgeon/init/fitted/newlogit.py) against the whole-matrix
objective the fits computed before (git 006d5a3): the same value, gradient and L-BFGS rows, and no (P, k) matrix."""

from __future__ import annotations

import pytest
import torch
from torch.overrides import TorchFunctionMode

from vocabsurgeon.init.fitted.causal import _OutputData, fit_output_rows
from vocabsurgeon.init.fitted.common import lbfgs
from vocabsurgeon.init.fitted.mlm import MaskedData, fit_head_rows, new_token_figures
from vocabsurgeon.init.fitted.newlogit import added_mass, chunk_rows, word_evidence
from vocabsurgeon.kl import kl_added_mass

P, HIDDEN, K = 53, 6, 5  # 53 positions: a prime, so no chunk size below it divides them


def _inputs(dtype, seed=0, P=P, k=K):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(P, HIDDEN, generator=g, dtype=torch.float64).to(dtype)
    logz = (torch.randn(P, generator=g, dtype=torch.float64) + 3.0).to(dtype)
    W = (0.5 * torch.randn(k, HIDDEN, generator=g, dtype=torch.float64)).to(dtype)
    weight = (torch.rand(P, generator=g, dtype=torch.float64) * 4).to(dtype)
    return x, logz, W, weight


def _whole(x, logz, W, b, weight):
    """The term as the fits computed it before: one (P, k) matrix and autograd through it."""
    kl = kl_added_mass((x @ W.T + b).logsumexp(-1) - logz)
    return (kl * weight).sum() if weight is not None else kl.sum()


def _budget(rows, dtype, k=K):
    """A budget that makes `chunk_rows` give `rows` positions a chunk."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    assert chunk_rows(k, itemsize, rows * k * itemsize) == rows
    return rows * k * itemsize


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
@pytest.mark.parametrize("rows", [1, 7, P, 4 * P])
@pytest.mark.parametrize("weighting", ["none", "per position", "number"])
def test_chunked_value_and_gradient_equal_the_whole_matrix(dtype, tol, rows, weighting):
    x, logz, W0, w = _inputs(dtype)
    weight = {"none": None, "per position": w, "number": 16.0}[weighting]
    b0 = torch.linspace(-1, 1, K, dtype=dtype)
    got_W, want_W = W0.clone().requires_grad_(True), W0.clone().requires_grad_(True)
    got_b, want_b = b0.clone().requires_grad_(True), b0.clone().requires_grad_(True)
    got = added_mass(x, logz, got_W, got_b, weight, _budget(rows, dtype))
    want = _whole(x, logz, want_W, want_b, weight)
    (2 * got).backward()  # the backward scales by its incoming gradient
    (2 * want).backward()
    assert got.dtype == dtype
    assert got.item() == pytest.approx(want.item(), rel=tol)
    torch.testing.assert_close(got_W.grad, want_W.grad, rtol=tol, atol=tol * float(want_W.grad.abs().max()))
    torch.testing.assert_close(got_b.grad, want_b.grad, rtol=tol, atol=tol * float(want_b.grad.abs().max()))


def test_a_number_bias_and_no_grad():
    x, logz, W, _ = _inputs(torch.float64)
    want = _whole(x, logz, W, 0.7, None)
    with torch.no_grad():
        got = added_mass(x, logz, W.clone().requires_grad_(True), 0.7, budget=_budget(7, torch.float64))
    assert not got.requires_grad
    assert float(got) == pytest.approx(float(want), rel=1e-12)
    assert float(added_mass(x[:0], logz[:0], W)) == 0.0  # no position: nothing added


def test_word_evidence_is_the_linear_terms_gradient():
    x, _, W, _ = _inputs(torch.float64)
    q_pos, q_tok = torch.tensor([3, 10, 50, 51, 10]), torch.tensor([0, 0, 1, 4, 2])
    q = torch.tensor([1.0, 0.5, 0.25, 1.0, 0.75], dtype=torch.float64)
    b = torch.linspace(-1, 1, K, dtype=torch.float64)
    A, c = word_evidence(x, q_pos, q_tok, q, K, budget=2 * HIDDEN * 8)  # 2 words a chunk: 3 chunks
    want = (q * (x @ W.T + b)[q_pos, q_tok]).sum()
    assert float((W * A).sum() + (b * c).sum()) == pytest.approx(float(want), rel=1e-12)


def test_the_chunk_is_chosen_from_a_memory_budget():
    assert chunk_rows(8000, 8) == 2097  # 8,000 new rows in float64: 2,097 positions in the default 128 MiB
    assert chunk_rows(8000, 4) == 4194  # float32 on a GPU: twice as many
    assert chunk_rows(8000, 8, budget=2**20) == 16
    assert chunk_rows(10**9, 8) == 1  # never none


# ------------------------------------------------------------------ the fits against their code before


def _old_fit_output_rows(data, prior, b_new, l2, steps, dtype=torch.float64):
    """causal.fit_output_rows as of git 006d5a3: the (P, k) objective through autograd."""
    h, logz = data.h.to(dtype), data.logz.to(dtype)
    prior = prior.to(dtype)
    q, q_pos, q_tok = data.q.to(dtype), data.q_pos, data.q_tok
    weight = data.weight.to(dtype) if data.weight is not None else None
    lam = l2 * float((h ** 2).mean()) * h.shape[1]
    W = prior.clone().requires_grad_(True)

    def objective():
        s = h @ W.T + b_new  # (P, k)
        kl = kl_added_mass(s.logsumexp(-1) - logz)
        obj = (kl * weight).sum() if weight is not None else kl.sum()
        return obj - (q * s[q_pos, q_tok]).sum() + 0.5 * lam * ((W - prior) ** 2).sum()

    calls = lbfgs([W], objective, steps, lambda *a: None, "output rows")
    return W.detach().double(), calls


def _output_data(weighted: bool, P=200, k=8, seed=0):
    x, logz, _, w = _inputs(torch.float64, seed, P, k)
    q_pos = torch.tensor([3, 10, 50, 51, 70, 90, 91, 150])
    q_tok = torch.tensor([0, 1, 2, 3, 4, 5, 6, 7]) % k
    q = torch.linspace(0.2, 1.0, len(q_pos), dtype=torch.float64)
    return _OutputData(x, logz + 2.0, q_pos, q_tok, q, w if weighted else None)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("steps", [1, 8])
def test_output_rows_after_lbfgs_steps_equal_the_whole_matrix_fit(weighted, steps):
    data = _output_data(weighted)
    prior = torch.randn(8, HIDDEN, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * 0.1
    want, want_calls = _old_fit_output_rows(data, prior, 0.3, 0.1, steps)
    got, calls = fit_output_rows(data, prior, 0.3, 0.1, steps, lambda *a: None, budget=_budget(7, torch.float64, 8))
    assert calls == want_calls  # the same line searches
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9 * float(want.abs().max()))


def test_output_rows_in_float32_the_gpus_dtype_follow_the_float64_fit():
    data = _output_data(True)
    prior = torch.zeros(8, HIDDEN, dtype=torch.float64)
    want, _ = _old_fit_output_rows(data, prior, 0.0, 0.1, 5, torch.float32)
    got, _ = fit_output_rows(data, prior, 0.0, 0.1, 5, lambda *a: None, device="cpu",
                             budget=_budget(7, torch.float32, 8), dtype=torch.float32)
    assert got.dtype == torch.float64  # rows come back in float64 on the CPU whatever the fit ran in
    assert float((got - want).norm() / want.norm()) < 1e-4


def _old_fit_head_rows(masked, old_t, old_logz, prior, b0, l2, old_weight, steps):
    """mlm.fit_head_rows as of git 006d5a3 (fit_bias=True)."""
    t, logz, q, j = masked.t.double(), masked.logz.double(), masked.q.double(), masked.j
    ot, oz, ow = old_t.double(), old_logz.double(), torch.as_tensor(old_weight, dtype=torch.float64)
    both = torch.cat([t, ot])
    lam = l2 * float((both ** 2).mean()) * both.shape[1]
    W, b = prior.clone().requires_grad_(True), b0.clone().requires_grad_(True)
    rows = torch.arange(len(j))

    def objective():
        s = t @ W.T + b
        obj = kl_added_mass(s.logsumexp(-1) - logz).sum() - (q * s[rows, j]).sum()
        so = ot @ W.T + b
        obj = obj + (ow * kl_added_mass(so.logsumexp(-1) - oz)).sum()
        return obj + 0.5 * lam * ((W - prior) ** 2).sum() + 0.5 * l2 * ((b - b0) ** 2).sum()

    calls = lbfgs([W, b], objective, steps, lambda *a: None, "masked-LM head")
    return W.detach(), b.detach(), calls


@pytest.mark.parametrize("old_weight", ["number", "per position"])
def test_head_rows_after_lbfgs_steps_equal_the_whole_matrix_fit(old_weight):
    t, logz, _, _ = _inputs(torch.float64, 3, 40, 6)
    ot, oz, _, w = _inputs(torch.float64, 4, 90, 6)
    j = torch.arange(40) % 6
    masked = MaskedData(t, logz, torch.zeros(40, dtype=torch.float64), j, torch.linspace(0.1, 1, 40, dtype=torch.float64))
    ow = 16.0 if old_weight == "number" else w
    prior, b0 = torch.zeros(6, HIDDEN, dtype=torch.float64), torch.full((6,), -1.0, dtype=torch.float64)
    want_W, want_b, want_calls = _old_fit_head_rows(masked, ot, oz, prior, b0, 0.1, ow, 8)
    W, b, calls = fit_head_rows(masked, ot, oz, prior, b0, 0.1, ow, 8, lambda *a: None)
    assert calls == want_calls
    torch.testing.assert_close(W, want_W, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(b, want_b, rtol=1e-9, atol=1e-9)


def test_head_figures_in_chunks_equal_the_whole_matrix():
    t, logz, W, _ = _inputs(torch.float64, 5, 40, 6)
    j = torch.arange(40) % 6
    b = torch.linspace(-1, 1, 6, dtype=torch.float64)
    top = logz - 2.0 + torch.linspace(-3, 3, 40, dtype=torch.float64)  # the old tokens' best logit: some above
    masked = MaskedData(t, logz, top, j, torch.ones(40, dtype=torch.float64))
    s = t @ W.T + b  # the figures as computed before: one (Q, k) matrix
    mine = s[torch.arange(40), j]
    lp = mine - torch.logaddexp(logz, s.logsumexp(-1))
    share = float((mine >= torch.maximum(s.max(-1).values, top)).double().mean())
    assert 0 < share < 1
    got = new_token_figures(masked, W, b, budget=_budget(7, torch.float64, 6))
    assert got["positions"] == 40 and got["top1"] == share
    assert got["p_mean"] == pytest.approx(float(lp.exp().mean()), rel=1e-12)
    assert got["logp_mean"] == pytest.approx(float(lp.mean()), rel=1e-12)


# ------------------------------------------------------------------ memory


class _Largest(TorchFunctionMode):
    """The most elements of any tensor a torch function returns while active."""

    def __init__(self):
        super().__init__()
        self.most = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.most = max(self.most, t.numel())
        return out


def test_the_output_fit_never_builds_a_positions_by_rows_matrix():
    P, k, rows = 400, 30, 16
    data = _output_data(True, P, k)
    prior = torch.zeros(k, HIDDEN, dtype=torch.float64)
    with _Largest() as seen:
        fit_output_rows(data, prior, 0.0, 0.1, 3, lambda *a: None, budget=_budget(rows, torch.float64, k))
    # the inputs (P, hidden) and one chunk's logits (rows, k); before, (P, k) matrices through autograd
    assert seen.most <= max(P * HIDDEN, rows * k, k * HIDDEN) < P * k
    with _Largest() as seen:
        _old_fit_output_rows(data, prior, 0.0, 0.1, 3)
    assert seen.most >= P * k  # what the check above would catch


def test_the_head_fit_never_builds_a_positions_by_rows_matrix():
    Q, P, k, rows = 300, 400, 30, 16
    t, logz, _, _ = _inputs(torch.float64, 6, Q, k)
    ot, oz, _, w = _inputs(torch.float64, 7, P, k)
    masked = MaskedData(t, logz, logz - 1.0, torch.arange(Q) % k, torch.ones(Q, dtype=torch.float64))
    prior, b0 = torch.zeros(k, HIDDEN, dtype=torch.float64), torch.zeros(k, dtype=torch.float64)
    with _Largest() as seen:
        fit_head_rows(masked, ot, oz, prior, b0, 0.1, w, 3, lambda *a: None, budget=_budget(rows, torch.float64, k))
        new_token_figures(masked, prior, b0, budget=_budget(rows, torch.float64, k))
    assert seen.most <= max((Q + P) * HIDDEN, rows * k, k * HIDDEN) < Q * k  # the inputs (both, for the scale), one chunk
