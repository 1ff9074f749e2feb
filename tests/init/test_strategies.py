"""The init strategies' math: streamed means and covariance, the non-PD fallback, the KL bound."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from vocabsurgeon.init import strategies as init
from vocabsurgeon.errors import InputError
from vocabsurgeon.kl import kl_bound
from vocabsurgeon.init.strategies import (
    F32_SUM_ROWS, STRATEGIES, InitContext, accumulate_stats, encode_rows, factor_covariance, get_strategy,
    mean_noise,
)


def chunks(x, size):
    return [x[i:i + size] for i in range(0, x.shape[0], size)]


def rng(seed=0):
    return np.random.default_rng(seed)


U32 = 2.0**-24  # unit roundoff of float32


def mean_bound(x):
    """Worst-case error of `accumulate_stats`'s mean of float32 rows x, per column: float32 block sums of at
    most F32_SUM_ROWS rows are each off by at most (F32_SUM_ROWS - 1) * u * (their column's absolute sum), the
    float64 total of the block sums by less than rows * 2**-53 of it. Rigorous, so it never flakes; loose (1.5e-5)."""
    a = np.abs(np.asarray(x, dtype=np.float64)).mean(0)
    return ((F32_SUM_ROWS - 1) * U32 + len(x) * 2.0**-53) * a + 1e-300


def assert_mean_close(got, x, want=None):
    """The mean of float32 rows within 1e-6 of the mean absolute value of each column: 15x tighter than the
    worst case (`mean_bound`), since rounding errors of a block sum are not all of one sign: on zero-centred
    rows like embeddings they stay near u * sqrt(rows per block) <= 1e-6 (measured 2e-9 on a 128256 x 4096
    bf16 matrix). Still far below the rounding of the new row to bf16 (up to 2**-8 relative)."""
    x = np.asarray(x, dtype=np.float64)
    want = x.mean(0) if want is None else want
    err = np.abs(got - want)
    tol = 1e-6 * np.abs(x).mean(0) + 1e-300
    assert (err <= tol).all(), f"max error {(err / tol).max():.3g} x the tolerance"


@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 70), d=st.integers(1, 9), chunk=st.integers(1, 20), seed=st.integers(0, 10**6),
       offset=st.floats(-1e3, 1e3))
def test_streamed_stats_match_the_full_computation(n, d, chunk, seed, offset):
    x = rng(seed).standard_normal((n, d)) * 3 + offset
    x32 = x.astype(np.float32)
    for precision in ("float32", "float64"):
        s = accumulate_stats(chunks(x, chunk), cov=True, precision=precision)
        assert s.n == n
        np.testing.assert_allclose(s.mean, x.mean(0), rtol=1e-12, atol=1e-9)  # float64 rows: float64 sums
        s32 = accumulate_stats(chunks(x32, chunk), cov=False, precision=precision)
        assert s32.n == n
        assert (np.abs(s32.mean - x32.astype(np.float64).mean(0)) <= mean_bound(x32)).all()
        ref = np.cov(x.T, bias=True).reshape(d, d)
        tol = 1e-10 if precision == "float64" else 1e-5
        np.testing.assert_allclose(s.cov, ref, rtol=tol, atol=tol * (1 + np.abs(ref).max()))


@pytest.mark.parametrize("chunk", [77, 1000, 3 * F32_SUM_ROWS + 5])
def test_mean_of_bf16_rows_matches_torch_float64(chunk):
    # Chunks longer than F32_SUM_ROWS are summed in blocks (and a remainder) of float32.
    g = torch.Generator().manual_seed(chunk)
    x = (torch.randn(3000, 16, generator=g) * 0.02).to(torch.bfloat16)
    as_f32 = x.float().numpy()
    s = accumulate_stats(chunks(as_f32, chunk), cov=False)
    assert s.n == 3000
    assert_mean_close(s.mean, as_f32, x.double().mean(0).numpy())


def test_float32_block_sums_stay_within_the_worst_case_bound_on_adversarial_rows():
    # Many equal values with low bits: once a float32 running sum passes 2**13 its ulp (2**-10) swallows their
    # 2**-12, so one float32 sum over a long chunk drifts far; blocks of F32_SUM_ROWS never grow that large.
    x = np.full((1 << 16, 2), 1 + 2**-12, dtype=np.float32)
    want = x.astype(np.float64).mean(0)
    s = accumulate_stats([x], cov=False)
    assert (np.abs(s.mean - want) <= mean_bound(x)).all()
    assert np.abs(x.sum(0, dtype=np.float32) / x.shape[0] - want).max() > 10 * mean_bound(x).max()  # unblocked


def test_stats_are_deterministic():
    # Same rows, same chunks: the same bits (what `add --seed` relies on for byte-identical outputs).
    x = (rng(11).standard_normal((2000, 33)) * 0.02).astype(np.float32)
    a = [accumulate_stats(chunks(x, c), cov=True) for c in (300, 300)]
    assert np.array_equal(a[0].mean, a[1].mean) and np.array_equal(a[0].cov, a[1].cov)


@pytest.mark.parametrize("st_dtype,torch_dtype", [("BF16", torch.bfloat16), ("F16", torch.float16),
                                                  ("F32", torch.float32), ("F64", torch.float64)])
def test_encode_rows_rounds_like_torch(st_dtype, torch_dtype):
    rows = rng(3).standard_normal((64, 33)) * np.logspace(-8, 3, 33)
    rows[0, 0] = np.nan
    ours = encode_rows(rows, st_dtype)
    theirs = torch.from_numpy(rows).to(torch_dtype).contiguous().view(torch.uint8).numpy().tobytes()
    if st_dtype in ("BF16", "F16"):  # NaN payloads may differ; compare the rest
        a = np.frombuffer(ours, np.uint16).copy()
        b = np.frombuffer(theirs, np.uint16).copy()
        a[0] = b[0] = 0
        assert np.array_equal(a, b)
    else:
        assert ours[8:] == theirs[8:]


def test_cholesky_when_positive_definite():
    a = rng(1).standard_normal((50, 6))
    cov = np.cov(a.T, bias=True)
    f, how = factor_covariance(cov)
    assert how == "cholesky"
    np.testing.assert_allclose(f @ f.T, cov, atol=1e-12)


def test_rank_deficient_covariance_falls_back_to_eigh_and_samples():
    # 3 distinct rows in 8 dimensions (each twice): rank <= 2, so Cholesky fails.
    rows = rng(2).standard_normal((3, 8))
    rows = np.concatenate([rows, rows])
    stats = accumulate_stats([rows], cov=True, precision="float64")
    with pytest.raises(np.linalg.LinAlgError):
        np.linalg.cholesky(stats.cov)
    f, how = factor_covariance(stats.cov)
    assert how == "eigh"
    np.testing.assert_allclose(f @ f.T, stats.cov, atol=1e-10)
    ctx = InitContext(k=500, hidden=8, stats=stats, generator=rng(0), eps=1.0)
    sample = mean_noise(ctx)
    assert np.isfinite(sample).all()
    # Samples stay in the span of the old rows around the mean: no noise outside it.
    centered = sample - stats.mean
    basis = np.linalg.svd(rows - stats.mean, full_matrices=False)[2][:2]
    residual = centered - centered @ basis.T @ basis
    assert np.abs(residual).max() < 1e-6


def test_mean_noise_has_the_requested_covariance():
    a = rng(4).standard_normal((400, 4)) @ rng(5).standard_normal((4, 4))
    stats = accumulate_stats([a], cov=True, precision="float64")
    s = mean_noise(InitContext(k=20000, hidden=4, stats=stats, generator=rng(1), eps=0.5))
    np.testing.assert_allclose(s.mean(0), stats.mean, atol=0.05 * np.sqrt(np.diag(stats.cov)).max())
    np.testing.assert_allclose(np.cov(s.T), 0.5 * stats.cov, rtol=0.1, atol=0.02 * np.abs(stats.cov).max())


def test_mean_noise_rows_from_a_factor_prepared_beforehand_are_the_same_bits():
    # add factors eps * Sigma while the tokens are planned (Strategy.prepare), before the rows are asked for
    stats = accumulate_stats([rng(7).standard_normal((200, 6)) + 3.0], cov=True)
    strategy = get_strategy("mean-noise")
    memo = strategy.prepare(stats, 0.3, "emb")
    ahead = strategy.fn(InitContext(k=9, hidden=6, stats=stats, generator=rng(2), eps=0.3, memo=memo))
    inline = strategy.fn(InitContext(k=9, hidden=6, stats=stats, generator=rng(2), eps=0.3))
    assert np.array_equal(ahead, inline)
    assert all(s.prepare is None for s in STRATEGIES.values() if not s.needs_cov)


def test_seeded_strategies_are_deterministic():
    stats = accumulate_stats([rng(6).standard_normal((30, 5))], cov=True)
    for name in STRATEGIES:
        if name == "subword-mean" or STRATEGIES[name].needs_model:  # needs pieces / a model
            continue
        rows = [STRATEGIES[name].fn(InitContext(k=3, hidden=5, stats=stats, generator=rng(4))) for _ in range(2)]
        assert np.array_equal(rows[0], rows[1]), name


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_rows_are_refused_when_averaging_and_skipped_otherwise(dtype, bad):
    x = rng(7).standard_normal((1000, 3)).astype(dtype)
    x[7, 1] = x[700, 2] = x[701, 0] = bad
    for size in (4, 600, 1000):  # chunks of fewer and more rows than F32_SUM_ROWS
        with pytest.raises(InputError, match="tensor 'emb' row 7 holds NaN or Inf"):
            accumulate_stats(chunks(x, size), cov=False, name="emb")
        with pytest.raises(InputError, match="tensor 'emb' row 600 holds NaN or Inf"):  # counted across chunks
            accumulate_stats(chunks(x[100:], size), cov=False, name="emb")
        s = accumulate_stats(chunks(x, size), cov=False, strict=False)
        keep = np.ones(1000, bool)
        keep[[7, 700, 701]] = False
        assert s.n == 997 and np.isfinite(s.mean).all()
        assert_mean_close(s.mean, x[keep])


def test_a_float32_sum_that_overflows_on_finite_rows_is_redone_in_float64(caplog):
    # Rows near float32's maximum: every row is finite, but a float32 sum of two of them overflows to Inf.
    # That is neither an error nor a dropped row: the chunk is summed again in float64.
    big = np.finfo(np.float32).max
    x = (rng(12).standard_normal((1000, 5)) * 0.02).astype(np.float32)
    x[300:310] = big * np.sign(rng(13).standard_normal((10, 5))).astype(np.float32)
    x[305, 0] = x[306, 0] = big  # at least one column overflows
    x[900, :] = -big
    x[901, :] = -big
    for size in (64, 256, 1000):
        with np.errstate(over="ignore"):
            assert any(np.isinf(c.sum(0)).any() for c in chunks(x, size)), "the case under test: a float32 overflow"
        with caplog.at_level("WARNING"):
            s = accumulate_stats(chunks(x, size), cov=False, name="emb")
        assert not caplog.records
        assert s.n == 1000 and np.isfinite(s.mean).all()
        assert (np.abs(s.mean - x.astype(np.float64).mean(0)) <= mean_bound(x)).all()
    # And a NaN in a chunk that also overflows is still found by its row.
    x[302, 3] = np.nan
    with pytest.raises(InputError, match="tensor 'emb' row 302 holds NaN or Inf"):
        accumulate_stats(chunks(x, 256), cov=False, name="emb")
    s = accumulate_stats(chunks(x, 256), cov=False, strict=False)
    keep = np.arange(1000) != 302
    assert s.n == 999 and np.isfinite(s.mean).all()
    assert (np.abs(s.mean - x[keep].astype(np.float64).mean(0)) <= mean_bound(x[keep])).all()


def test_unknown_strategy_message():
    with pytest.raises(InputError) as e:
        get_strategy("magic")
    assert str(e.value) == ("unknown init strategy 'magic'; choose one of mean, mean-noise, subword-mean, "
                          "subword-mean-shrunk, fitted, zeros, random")


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 40), k=st.integers(1, 10), d=st.integers(1, 6), seed=st.integers(0, 10**6),
       scale=st.floats(0.1, 20))
def test_mean_rows_obey_the_kl_bound_for_any_hidden_state(n, k, d, seed, scale):
    # Jensen: for any h, exp(h . mean(e)) <= mean(exp(h . e_j)), so KL(p_old||p_new) <= log(1 + k/n).
    g = rng(seed)
    e = g.standard_normal((n, d)) * scale
    h = g.standard_normal(d) * scale
    stats = accumulate_stats([e], cov=False)
    new = STRATEGIES["mean"].fn(InitContext(k=k, hidden=d, stats=stats, generator=g))
    old_logits = e @ h
    all_logits = np.concatenate([old_logits, new @ h])
    lse = lambda v: v.max() + np.log(np.exp(v - v.max()).sum())  # noqa: E731
    kl = lse(all_logits) - lse(old_logits)  # with p_old on the old vocabulary, KL reduces to log(Z'/Z)
    assert kl <= kl_bound(k, n) + 1e-12
    assert kl_bound(k, n) == pytest.approx(math.log(1 + k / n))


def _far_rows(n=6000, d=48, offset=30.0, seed=3):
    """float32 rows far from 0 (offset), whose first 300 (bytes, specials: first in a vocabulary) sit apart
    from the rest: the shape that cancels when products are taken around the first rows' mean."""
    r = rng(seed)
    x = r.standard_normal((n, d)) * 0.02 + offset
    x[:300] += 0.5 * r.standard_normal(d)
    return x.astype(np.float32)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("precision,tol", [("float32", 5e-6), ("float64", 1e-8)])
@pytest.mark.parametrize("block_rows", [1000, 10_000])  # blocks that split chunks; one block for all rows
def test_covariance_of_rows_far_from_zero_matches_float64(monkeypatch, backend, precision, tol, block_rows):
    # Products around the first chunk's mean lost ~5e-5 of the largest entry here (in either precision): the
    # offset between the first rows and the rest cancelled. Centred per block on float64 means: ~5e-7 / 1e-10.
    x = _far_rows()
    monkeypatch.setattr(init, "COV_BLOCK_BYTES", block_rows * x.shape[1] * 4)
    if backend == "torch":  # the CUDA code path, on the CPU's torch
        monkeypatch.setattr(init, "_is_cuda", lambda device: True)
    s = accumulate_stats(chunks(x, 256), cov=True, precision=precision, device="cpu")
    ref = np.cov(x.astype(np.float64).T, bias=True)
    assert s.n == len(x)
    assert np.abs(s.cov - ref).max() <= tol * np.abs(ref).max()
    np.testing.assert_array_equal(s.cov, s.cov.T)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(2, 300), d=st.integers(1, 6), chunk=st.integers(1, 40), block=st.integers(1, 50),
       seed=st.integers(0, 10**6), offset=st.floats(-1e3, 1e3), f32=st.booleans())
def test_block_wise_covariance_matches_the_full_computation(n, d, chunk, block, seed, offset, f32):
    x = rng(seed).standard_normal((n, d)) * 3 + offset
    x = x.astype(np.float32) if f32 else x
    ref = np.cov(x.astype(np.float64).T, bias=True).reshape(d, d)
    old, init.COV_BLOCK_BYTES = init.COV_BLOCK_BYTES, block * d * x.itemsize
    try:
        # float64: exact up to a few hundred ulps of the offset's square over the variance (hypothesis found
        # 3.9e-10 for two rows at offset 129); float32: its own resolution. Float32 rows are also summed in
        # float32 per chunk (accumulate_stats' documented bound: (rows - 1) * 2**-24 * sum|x|), so the mean
        # is off by up to e = chunk * 2**-24 * max|x|, and the covariance by e**2 (two rows at offset 513 in
        # one chunk: 9.3e-10 of a variance of 0.15, hypothesis found it)
        mean_err = chunk * 2.0**-24 * np.abs(x).max() if f32 else 0.0
        for precision, tol in (("float32", 1e-5), ("float64", 1e-9)):
            s = accumulate_stats(chunks(x, chunk), cov=True, precision=precision)
            np.testing.assert_allclose(s.cov, ref, rtol=tol, atol=tol * np.abs(ref).max() + mean_err**2 + 1e-300)
    finally:
        init.COV_BLOCK_BYTES = old


def test_cuda_code_path_runs_on_cpu():
    # The CUDA branch (torch tensors on the device) run on the CPU's torch gives what the NumPy branch gives.
    x = (rng(8).standard_normal((5000, 64)) * 0.02 + 0.01).astype(np.float32)
    a = accumulate_stats(chunks(x, 700), cov=True, precision="float32")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(init, "_is_cuda", lambda device: True)
        b = accumulate_stats(chunks(x, 700), cov=True, device="cpu")  # float64 products, as on CUDA
        c = accumulate_stats(chunks(x, 700), cov=True, device="cpu", precision="float32")
    np.testing.assert_array_equal(a.mean, b.mean)
    np.testing.assert_allclose(a.cov, b.cov, rtol=1e-5, atol=1e-5 * np.abs(b.cov).max())
    np.testing.assert_allclose(c.cov, b.cov, rtol=1e-5, atol=1e-5 * np.abs(b.cov).max())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_covariance_matches_cpu():
    x = (rng(9).standard_normal((5000, 64)) * 0.02 + 0.01).astype(np.float32)
    cpu = accumulate_stats(chunks(x, 700), cov=True, device="cpu")
    gpu = accumulate_stats(chunks(x, 700), cov=True, device=torch.device("cuda"))
    np.testing.assert_allclose(cpu.mean, gpu.mean, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(cpu.cov, gpu.cov, rtol=1e-5, atol=1e-5 * np.abs(cpu.cov).max())


# ------------------------------------------------------------------------------------------------
# New rows block by block (NewRows / EncodedRows): the same bytes as materializing every row at once


def _one_shot(strategy, ctx, n_tok, fill, seed):
    """What add computed before rows were streamed: every row in float64, padding set to `fill`."""
    from dataclasses import replace

    rows = np.asarray(STRATEGIES[strategy].fn(replace(ctx, k=ctx.k, generator=rng(seed))), dtype=np.float64)
    rows[n_tok:] = fill
    return rows


@settings(max_examples=40, deadline=None)
@given(strategy=st.sampled_from(sorted(STRATEGIES)), dtype=st.sampled_from(["BF16", "F16", "F32", "F64"]),
       k=st.integers(1, 40), pad=st.integers(0, 9), d=st.integers(1, 7), block=st.integers(1, 17),
       seed=st.integers(0, 10**6), cut=st.integers(0, 60))
def test_block_wise_rows_give_the_bytes_of_the_one_shot_path(strategy, dtype, k, pad, d, block, seed, cut):
    from vocabsurgeon.init import NewRows

    old = rng(seed).standard_normal((50, d)) * 0.5 + 0.1
    stats = accumulate_stats(chunks(old, 16), cov=True)
    n = k + pad
    pieces = [[int(i) for i in rng(seed + j).integers(0, 50, size=j % 3)] for j in range(k)] + [[]] * pad
    ctx = InitContext(k=n, hidden=d, stats=stats, generator=rng(0), pieces=pieces,
                      rows_of=lambda ids: old[ids].astype(np.float32), eps=0.3,
                      fitted=rng(seed + 1).standard_normal((n, d)))  # what fitted.fit_rows gave
    rows = NewRows(n, d, get_strategy(strategy), ctx, seed, stats.mean, from_strategy=k)
    want = _one_shot(strategy, ctx, k, stats.mean, seed)
    noisy = strategy == "mean-noise"  # a matmul per block may round differently in the last bit
    if noisy:
        np.testing.assert_allclose(rows.array(), want, rtol=1e-12, atol=1e-15)
        want = np.concatenate([np.asarray(b) for b in rows.blocks(block)])  # the blocks `encoded` computes
    else:
        assert np.array_equal(rows.array(), want)
    encoded = rows.encoded(dtype, block_rows=block)
    assert len(encoded) == len(encode_rows(want, dtype)) and encoded.tobytes() == encode_rows(want, dtype)
    # A slice (the rows patched in place, then the appended ones) gives the same bytes as slicing.
    start, stop = min(cut, n), min(cut + 5, n)
    part = rows.encoded(dtype, start=start, stop=stop, block_rows=block)
    assert part.tobytes() == encode_rows(want[start:stop], dtype) and len(part) == len(part.tobytes())
    # Every pass gives the same rows (a tied alias is written from a second pass, with the same blocks).
    assert rows.encoded(dtype, block_rows=block).tobytes() == encoded.tobytes()
    if not noisy:
        assert rows.encoded(dtype, block_rows=block + 1).tobytes() == encoded.tobytes()


def test_constant_rows_are_encoded_once_and_repeated(monkeypatch):
    import vocabsurgeon.init.strategies as init

    calls = []
    orig = init.encode_rows
    monkeypatch.setattr(init, "encode_rows", lambda rows, dtype: calls.append(rows.shape[0]) or orig(rows, dtype))
    mean = np.array([0.5, -1.25, 3.0])
    rows = init.NewRows.constant(mean, 10_000)
    data = rows.encoded("BF16", block_rows=64).tobytes()
    assert data == orig(np.tile(mean, (10_000, 1)), "BF16")
    assert calls == [1]


def test_many_new_rows_stay_in_blocks(monkeypatch):
    # 100,000 rows of hidden 256 would be 195 MiB in float64; blocks never exceed BLOCK_BYTES.
    import vocabsurgeon.init.strategies as init

    biggest = []
    orig = init.encode_rows
    monkeypatch.setattr(init, "encode_rows", lambda rows, dtype: biggest.append(rows.nbytes) or orig(rows, dtype))
    stats = accumulate_stats([rng(1).standard_normal((300, 256))], cov=False)
    ctx = InitContext(k=100_000, hidden=256, stats=stats, generator=rng(0))
    rows = init.NewRows(100_000, 256, get_strategy("random"), ctx, 3, stats.mean, from_strategy=90_000)
    total = sum(len(b) for b in rows.encoded("BF16"))
    assert total == 100_000 * 256 * 2
    assert max(biggest) <= init.BLOCK_BYTES


def test_stats_of_streamed_bf16_rows_are_close_and_non_finite_rows_are_found_in_the_raw_bits(tmp_path):
    from safetensors.torch import save_file

    from vocabsurgeon.checkpoint.reader import Checkpoint

    x = (torch.randn(3000, 24, generator=torch.Generator().manual_seed(0)) * 0.02).to(torch.bfloat16)
    (tmp_path / "config.json").write_text("{}")
    save_file({"w": x}, str(tmp_path / "model.safetensors"))
    ck = Checkpoint.open(tmp_path)
    for chunk_bytes in (1000, 1 << 20):  # 20 rows a chunk, and every row in one chunk (blocks of F32_SUM_ROWS)
        s = accumulate_stats(ck.stream_rows("w", chunk_bytes=chunk_bytes), cov=False)
        assert_mean_close(s.mean, x.float().numpy(), x.double().mean(0).numpy())
    # bf16 NaN and Inf are "exponent all ones": quiet and signalling NaN payloads, both signs.
    raw = x.view(torch.int16).numpy().view(np.uint16).copy()
    for bits, row in ((0x7FC0, 2999), (0x7F81, 1234), (0xFFC1, 17), (0x7F80, 600), (0xFF80, 0)):
        poisoned = raw.copy()
        poisoned[row, 5] = bits
        save_file({"w": torch.from_numpy(poisoned.view(np.int16)).view(torch.bfloat16)},
                  str(tmp_path / "model.safetensors"))
        ck = Checkpoint.open(tmp_path)
        with pytest.raises(InputError, match=f"tensor 'w' row {row} holds NaN or Inf"):
            accumulate_stats(ck.stream_rows("w", chunk_bytes=4096), cov=False, name="w")
        s = accumulate_stats(ck.stream_rows("w", chunk_bytes=4096), cov=False, strict=False)
        keep = np.ones(3000, bool)
        keep[row] = False
        assert s.n == 2999
        assert_mean_close(s.mean, x.float().numpy()[keep])


def test_huge_finite_values_are_not_mistaken_for_inf(tmp_path):
    # float32 sums of two rows at float32's maximum overflow; such a chunk is summed again in float64.
    big = np.finfo(np.float32).max
    x = np.full((4, 3), big, dtype=np.float32)
    s = accumulate_stats([x], cov=False)
    assert s.n == 4 and np.allclose(s.mean, big, rtol=1e-15)
    # The same through `stream_rows` of a bf16 checkpoint: bf16's maximum is near float32's.
    from safetensors.torch import save_file

    from vocabsurgeon.checkpoint.reader import Checkpoint

    w = torch.full((600, 8), torch.finfo(torch.bfloat16).max, dtype=torch.bfloat16)
    w[::2] *= -1
    w[1::4] = 0.5
    (tmp_path / "config.json").write_text("{}")
    save_file({"w": w}, str(tmp_path / "model.safetensors"))
    s = accumulate_stats(Checkpoint.open(tmp_path).stream_rows("w"), cov=False, name="w")
    assert s.n == 600 and np.isfinite(s.mean).all()
    np.testing.assert_allclose(s.mean, w.double().mean(0).numpy(), rtol=1e-12)
