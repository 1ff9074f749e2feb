"""The init strategies' math: exact means, streamed covariance, the non-PD fallback, the KL bound."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from vocabsurgeon.errors import InputError
from vocabsurgeon.init import (
    STRATEGIES, InitContext, accumulate_stats, factor_covariance, get_strategy, kl_bound, mean_noise,
)


def chunks(x, size):
    return [x[i:i + size] for i in range(0, x.shape[0], size)]


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 70), d=st.integers(1, 9), chunk=st.integers(1, 20), seed=st.integers(0, 10**6),
       offset=st.floats(-1e3, 1e3))
def test_streamed_stats_match_the_full_computation(n, d, chunk, seed, offset):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64) * 3 + offset
    for precision in ("float32", "float64"):
        s = accumulate_stats(chunks(x, chunk), cov=True, precision=precision)
        assert s.n == n
        assert torch.allclose(s.mean, x.mean(0), rtol=1e-12, atol=1e-9)
        ref = torch.cov(x.T, correction=0).reshape(d, d)
        tol = 1e-10 if precision == "float64" else 1e-5
        assert torch.allclose(s.cov, ref, rtol=tol, atol=tol * (1 + ref.abs().max().item()))


def test_mean_is_exact_in_float64_for_bf16_rows():
    x = (torch.randn(1000, 16) * 0.02).to(torch.bfloat16)
    s = accumulate_stats(chunks(x, 77), cov=False)
    assert torch.equal(s.mean, x.double().mean(0))


def test_cholesky_when_positive_definite():
    a = torch.randn(50, 6, dtype=torch.float64)
    cov = torch.cov(a.T, correction=0)
    f, how = factor_covariance(cov)
    assert how == "cholesky"
    assert torch.allclose(f @ f.T, cov, atol=1e-12)


def test_rank_deficient_covariance_falls_back_to_eigh_and_samples():
    # 3 rows in 8 dimensions: rank <= 2, Cholesky fails; duplicated rows make it worse.
    rows = torch.randn(3, 8, dtype=torch.float64)
    rows = torch.cat([rows, rows])
    stats = accumulate_stats([rows], cov=True, precision="float64")
    _, info = torch.linalg.cholesky_ex(stats.cov)
    assert int(info) != 0, "the test needs a covariance that Cholesky rejects"
    f, how = factor_covariance(stats.cov)
    assert how == "eigh"
    assert torch.allclose(f @ f.T, stats.cov, atol=1e-10)
    ctx = InitContext(k=500, hidden=8, stats=stats, generator=torch.Generator().manual_seed(0), eps=1.0)
    sample = mean_noise(ctx)
    assert torch.isfinite(sample).all()
    # Samples stay in the span of the old rows around the mean: no noise outside it.
    centered = sample - stats.mean
    basis = torch.linalg.svd(rows - stats.mean, full_matrices=False).Vh[:2]
    residual = centered - centered @ basis.T @ basis
    assert residual.abs().max() < 1e-6


def test_mean_noise_has_the_requested_covariance():
    a = torch.randn(400, 4, dtype=torch.float64) @ torch.randn(4, 4, dtype=torch.float64)
    stats = accumulate_stats([a], cov=True, precision="float64")
    ctx = InitContext(k=20000, hidden=4, stats=stats, generator=torch.Generator().manual_seed(1), eps=0.5)
    s = mean_noise(ctx)
    assert torch.allclose(s.mean(0), stats.mean, atol=0.05 * stats.cov.diag().sqrt().max().item())
    assert torch.allclose(torch.cov(s.T), 0.5 * stats.cov, rtol=0.1, atol=0.02 * stats.cov.abs().max().item())


def test_seeded_strategies_are_deterministic():
    stats = accumulate_stats([torch.randn(30, 5)], cov=True)
    for name in STRATEGIES:
        if name == "subword-mean":
            continue
        rows = [STRATEGIES[name].fn(InitContext(k=3, hidden=5, stats=stats, generator=torch.Generator().manual_seed(4)))
                for _ in range(2)]
        assert torch.equal(rows[0], rows[1]), name


def test_nan_rows_are_refused_when_averaging_and_skipped_otherwise():
    x = torch.randn(10, 3)
    x[7, 1] = float("nan")
    with pytest.raises(InputError, match="row 7 holds NaN or Inf"):
        accumulate_stats(chunks(x, 4), cov=False, name="emb")
    s = accumulate_stats(chunks(x, 4), cov=False, strict=False)
    assert s.n == 9 and torch.isfinite(s.mean).all()


def test_unknown_strategy_message():
    with pytest.raises(InputError) as e:
        get_strategy("magic")
    assert str(e.value) == "unknown init strategy 'magic'; choose one of mean, mean-noise, subword-mean, zeros, random"


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 40), k=st.integers(1, 10), d=st.integers(1, 6), seed=st.integers(0, 10**6),
       scale=st.floats(0.1, 20))
def test_mean_rows_obey_the_kl_bound_for_any_hidden_state(n, k, d, seed, scale):
    # Jensen: for any h, exp(h . mean(e)) <= mean(exp(h . e_j)), so KL(p_old||p_new) <= log(1 + k/n).
    g = torch.Generator().manual_seed(seed)
    e = torch.randn(n, d, generator=g, dtype=torch.float64) * scale
    h = torch.randn(d, generator=g, dtype=torch.float64) * scale
    stats = accumulate_stats([e], cov=False)
    new = STRATEGIES["mean"].fn(InitContext(k=k, hidden=d, stats=stats, generator=g))
    old_logits = e @ h
    all_logits = torch.cat([old_logits, new @ h])
    kl = torch.logsumexp(all_logits, 0) - torch.logsumexp(old_logits, 0)  # KL reduces to log(Z'/Z)
    assert kl.item() <= kl_bound(k, n) + 1e-12
    assert kl_bound(k, n) == pytest.approx(math.log(1 + k / n))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_covariance_matches_cpu():
    x = torch.randn(5000, 64) * 0.02 + 0.01
    cpu = accumulate_stats(chunks(x, 700), cov=True, device="cpu")
    gpu = accumulate_stats(chunks(x, 700), cov=True, device="cuda")
    assert torch.allclose(cpu.mean, gpu.mean, rtol=1e-12, atol=1e-15)
    assert torch.allclose(cpu.cov, gpu.cov, rtol=1e-5, atol=1e-5 * cpu.cov.abs().max().item())
