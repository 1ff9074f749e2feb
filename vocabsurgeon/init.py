"""Initialization strategies for new rows: small pure functions over row statistics, by name.

The names in `STRATEGIES` are the names in the CLI (`--init`), the Python API and the README.
Statistics are accumulated over row chunks (`accumulate_stats`), so memory stays
O(hidden^2 + chunk), never O(vocab x hidden). The CPU path is NumPy (torch costs over a second to
import, more than the rest of a typical run); the CUDA path for the covariance uses torch.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from .errors import InputError

logger = logging.getLogger(__name__)

DEFAULT_EPS = 1e-5  # Hewitt's choice: N(mu, 1e-5 * Sigma) keeps new rows close to the mean


@dataclass
class RowStats:
    """Mean (and optionally covariance) of the old rows of one matrix, float64."""

    n: int
    mean: np.ndarray  # (hidden,)
    cov: np.ndarray | None = None  # (hidden, hidden), population covariance (divided by n)


def resolve_device(device: str):
    """"auto" picks CUDA when torch sees a GPU, else "cpu"; "cuda" without a GPU is a clear error.

    Returns a torch.device for CUDA, or the string "cpu" (without importing torch when it can).
    """
    if device == "cpu":
        return "cpu"
    if device not in ("auto",) and not device.startswith("cuda"):
        raise InputError(f"--device {device!r} is not one of auto, cpu, cuda")
    if device == "auto" and not os.path.exists("/proc/driver/nvidia") and not os.path.exists("/dev/nvidiactl"):
        return "cpu"  # no NVIDIA driver: skip importing torch (over a second) just to learn that
    import torch

    if torch.cuda.is_available():
        return torch.device("cuda" if device == "auto" else device)
    if device == "auto":
        return "cpu"
    raise InputError("--device cuda was asked for but no CUDA device is available; use --device cpu or auto")


def _is_cuda(device) -> bool:
    return getattr(device, "type", str(device).split(":")[0]) == "cuda"


def accumulate_stats(
    chunks: Iterable[np.ndarray], *, cov: bool, device="cpu", name: str = "matrix",
    strict: bool = True, precision: str | None = None,
) -> RowStats:
    """Stream row chunks (k_i, hidden) into the exact mean and, if asked, the covariance.

    The sum is kept in float64. The covariance is accumulated around a shift (the first chunk's
    mean) to avoid cancellation. `precision` is that of the per-chunk products: "float64"
    (default on CUDA, where FP64 matmul is fast) or "float32" (default on the CPU, several times
    faster on two cores); chunk products always add up in float64. The two agree to ~1e-6
    relative (see tests/test_init.py). On CUDA, chunks are streamed to the GPU one at a time.

    Raises:
        InputError: when a row holds NaN or Inf (it would poison every new row). With
            strict=False (strategies that do not average) such rows are left out with a warning.
    """
    cuda = _is_cuda(device)
    precision = precision or ("float64" if cuda else "float32")
    if cuda:
        import torch
    total = cross = shift = None
    n = seen = 0
    for chunk in chunks:
        chunk = np.asarray(chunk)
        finite = np.isfinite(chunk).reshape(chunk.shape[0], -1).all(axis=1)
        if not finite.all():
            bad = int(np.flatnonzero(~finite)[0]) + seen
            if strict:
                raise InputError(
                    f"tensor '{name}' row {bad} holds NaN or Inf; refusing to average it into new rows "
                    "(repair the checkpoint, or use --init zeros or random, which do not average)"
                )
            logger.warning("tensor '%s': %d rows hold NaN or Inf (first: row %d); left out of the statistics",
                           name, int((~finite).sum()), bad)
            chunk = chunk[finite]
        seen += finite.shape[0]
        if chunk.shape[0] == 0:
            continue
        if total is None:
            shift = chunk.mean(0, dtype=np.float64)
            total = np.zeros(chunk.shape[1], dtype=np.float64)
            if cov:
                cross = (torch.zeros((chunk.shape[1],) * 2, dtype=torch.float64, device=device) if cuda
                         else np.zeros((chunk.shape[1],) * 2, dtype=np.float64))
                shift_dev = torch.from_numpy(shift).to(device) if cuda else shift
        total += chunk.sum(0, dtype=np.float64)
        if cov:
            if cuda:
                x = torch.from_numpy(np.ascontiguousarray(chunk)).to(device, torch.float64) - shift_dev
                x = x if precision == "float64" else x.float()
                cross += (x.T @ x).double()
            else:
                xc = chunk - shift if precision == "float64" else (chunk - shift).astype(np.float32)
                cross += (xc.T @ xc).astype(np.float64)
        n += chunk.shape[0]
    if total is None or n == 0:
        raise InputError(f"tensor '{name}' has no rows to initialize from")
    mean = total / n
    c = None
    if cov:
        cross = cross.cpu().numpy() if cuda else cross
        d = mean - shift
        c = cross / n - np.outer(d, d)
        c = (c + c.T) / 2
    return RowStats(n, mean, c)


def factor_covariance(cov: np.ndarray) -> tuple[np.ndarray, str]:
    """A factor F with F @ F.T == cov: Cholesky when positive definite, else a clamped eigendecomposition.

    Embedding covariances are often rank deficient (fewer rows than dimensions, duplicated or
    dead rows), where Cholesky fails; the eigen fallback clamps tiny negative eigenvalues to 0.
    """
    try:
        L = np.linalg.cholesky(cov)
        if np.isfinite(L).all():
            return L, "cholesky"
    except np.linalg.LinAlgError:
        pass
    w, V = np.linalg.eigh(cov)
    return V * np.sqrt(np.clip(w, 0, None)), "eigh"


@dataclass
class InitContext:
    """Everything a strategy may use. Rows are float64; the caller casts to the tensor's dtype."""

    k: int  # number of new rows
    hidden: int
    stats: RowStats | None
    generator: np.random.Generator
    eps: float = DEFAULT_EPS
    initializer_range: float = 0.02
    pieces: list[list[int]] | None = None  # per new row: ids of its pieces under the old tokenizer
    rows_of: Callable[[list[int]], np.ndarray] | None = None  # ids -> (len, hidden) rows
    name: str = "matrix"


def zeros(ctx: InitContext) -> np.ndarray:
    return np.zeros((ctx.k, ctx.hidden))


def random(ctx: InitContext) -> np.ndarray:
    return ctx.generator.standard_normal((ctx.k, ctx.hidden)) * ctx.initializer_range


def mean(ctx: InitContext) -> np.ndarray:
    return np.tile(ctx.stats.mean, (ctx.k, 1))


def mean_noise(ctx: InitContext) -> np.ndarray:
    factor, how = factor_covariance(ctx.stats.cov * ctx.eps)
    logger.info("%s: covariance factored by %s", ctx.name, how)
    # Noise comes from the seeded CPU generator, so results do not depend on the device.
    z = ctx.generator.standard_normal((ctx.k, ctx.hidden))
    return ctx.stats.mean + z @ factor.T


def subword_mean(ctx: InitContext) -> np.ndarray:
    out = np.empty((ctx.k, ctx.hidden))
    for i, ids in enumerate(ctx.pieces or [[]] * ctx.k):
        if ids:
            out[i] = ctx.rows_of(ids).astype(np.float64).mean(0)
        else:  # a padding row or a token with no pieces: the safe default
            out[i] = ctx.stats.mean
    return out


@dataclass(frozen=True)
class Strategy:
    name: str
    fn: Callable[[InitContext], np.ndarray]
    needs_cov: bool
    help: str
    averages: bool = True  # uses the old rows' values (so NaN/Inf rows are an error)


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy("mean", mean, False,
                 "the exact mean of the old rows; bounds KL(p_old||p_new) <= log(1 + k/n) for every prefix"),
        Strategy("mean-noise", mean_noise, True,
                 "N(mu, eps*Sigma), Sigma the old rows' covariance (Hewitt); rows differ, KL stays near the bound"),
        Strategy("subword-mean", subword_mean, False,
                 "the mean of the rows of the word's pieces under the original tokenizer (FVT)"),
        Strategy("zeros", zeros, False,
                 "all zeros: logit 0, dangerous when the model's logits are large and negative", averages=False),
        Strategy("random", random, False,
                 "N(0, initializer_range), what transformers does by default; as risky as zeros", averages=False),
    )
}


def get_strategy(name: str) -> Strategy:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise InputError(f"unknown init strategy {name!r}; choose one of {', '.join(STRATEGIES)}") from None


def encode_rows(rows: np.ndarray, dtype: str) -> bytes:
    """float64 rows -> the bytes of a safetensors float dtype (round to nearest even, as torch does)."""
    if dtype == "F64":
        return rows.astype("<f8").tobytes()
    if dtype == "F32":
        return rows.astype("<f4").tobytes()
    if dtype == "F16":
        return rows.astype("<f2").tobytes()
    if dtype == "BF16":
        u = rows.astype(np.float32).view(np.uint32)
        nan = np.isnan(rows)
        bf = ((u + (0x7FFF + ((u >> 16) & 1))) >> 16).astype("<u2")
        bf[nan] = 0x7FC0
        return bf.tobytes()
    raise InputError(f"cannot write new rows as {dtype}; vocabulary tensors must be F16, BF16, F32 or F64")


def kl_bound(k: int, n: int) -> float:
    """The bound log(1 + k/n) that mean init guarantees on KL(p_old || p_new) at every position."""
    return math.log1p(k / n)
