"""Initialization strategies for new rows: small pure functions over row statistics, by name.

The names in `STRATEGIES` are the names in the CLI (`--init`), the Python API and the README.
Statistics are accumulated over row chunks (`accumulate_stats`), so memory stays
O(hidden^2 + chunk), never O(vocab x hidden) in float32.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Callable, Iterable

import torch

from .errors import InputError

logger = logging.getLogger(__name__)

DEFAULT_EPS = 1e-5  # Hewitt's choice: N(mu, 1e-5 * Sigma) keeps new rows close to the mean


@dataclass
class RowStats:
    """Mean (and optionally covariance) of the old rows of one matrix, in float64 on the CPU."""

    n: int
    mean: torch.Tensor  # (hidden,)
    cov: torch.Tensor | None = None  # (hidden, hidden), population covariance (divided by n)


def resolve_device(device: str) -> torch.device:
    """`auto` picks CUDA when present; `cuda` without a GPU is a clear error."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError("--device cuda was asked for but no CUDA device is available; use --device cpu or auto")
    return torch.device(device)


def accumulate_stats(
    chunks: Iterable[torch.Tensor], *, cov: bool, device: str | torch.device = "cpu", name: str = "matrix",
    strict: bool = True, precision: str | None = None,
) -> RowStats:
    """Stream row chunks (k_i, hidden) into the exact mean and, if asked, the covariance.

    The sum is kept in float64. The covariance is accumulated around a shift (the first chunk's
    mean) to avoid cancellation. `precision` is that of the per-chunk products: "float64"
    (default on CUDA, where FP64 matmul is fast) or "float32" (default on the CPU, several times
    faster on two cores); chunk products always add up in float64. The two agree to ~1e-6
    relative (see tests/test_init.py).

    Raises:
        InputError: when a row holds NaN or Inf (it would poison every new row). With
            strict=False (strategies that do not average) such rows are left out with a warning.
    """
    dev = torch.device(device) if not isinstance(device, torch.device) else device
    precision = precision or ("float32" if dev.type == "cpu" else "float64")
    total = None
    cross = None
    shift = None
    n = 0
    seen = 0
    for chunk in chunks:
        finite = torch.isfinite(chunk).reshape(chunk.shape[0], -1).all(dim=-1)
        if not finite.all():
            bad = (~finite).nonzero()[0, 0].item() + seen
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
        x = chunk.to(dev, torch.float64)  # (k, hidden)
        if total is None:
            total = torch.zeros(x.shape[1], dtype=torch.float64, device=dev)
            shift = x.mean(0)
            if cov:
                cross = torch.zeros(x.shape[1], x.shape[1], dtype=torch.float64, device=dev)
        total += x.sum(0)
        if cov:
            xc = x - shift
            if precision == "float32":
                xc32 = xc.float()
                cross += (xc32.T @ xc32).double()
            else:
                cross += xc.T @ xc
        n += x.shape[0]
    if total is None or n == 0:
        raise InputError(f"tensor '{name}' has no rows to initialize from")
    mean = total / n
    c = None
    if cov:
        d = (mean - shift)
        c = (cross / n - torch.outer(d, d)).cpu()
        c = (c + c.T) / 2
    return RowStats(n, mean.cpu(), c)


def factor_covariance(cov: torch.Tensor) -> tuple[torch.Tensor, str]:
    """A factor F with F @ F.T == cov: Cholesky when positive definite, else a clamped eigendecomposition.

    Embedding covariances are often rank deficient (fewer rows than dimensions, duplicated or
    dead rows), where Cholesky fails; the eigen fallback clamps tiny negative eigenvalues to 0.
    """
    L, info = torch.linalg.cholesky_ex(cov)
    if int(info) == 0 and torch.isfinite(L).all():
        return L, "cholesky"
    w, V = torch.linalg.eigh(cov)
    w = w.clamp(min=0)
    return V * w.sqrt(), "eigh"


@dataclass
class InitContext:
    """Everything a strategy may use. Rows are float64; the caller casts to the tensor's dtype."""

    k: int  # number of new rows
    hidden: int
    stats: RowStats | None
    generator: torch.Generator
    eps: float = DEFAULT_EPS
    initializer_range: float = 0.02
    pieces: list[list[int]] | None = None  # per new row: ids of its pieces under the old tokenizer
    rows_of: Callable[[list[int]], torch.Tensor] | None = None  # ids -> (len, hidden) rows
    name: str = "matrix"


def zeros(ctx: InitContext) -> torch.Tensor:
    return torch.zeros(ctx.k, ctx.hidden, dtype=torch.float64)


def random(ctx: InitContext) -> torch.Tensor:
    return torch.randn(ctx.k, ctx.hidden, generator=ctx.generator, dtype=torch.float64) * ctx.initializer_range


def mean(ctx: InitContext) -> torch.Tensor:
    return ctx.stats.mean.expand(ctx.k, -1).clone()


def mean_noise(ctx: InitContext) -> torch.Tensor:
    factor, how = factor_covariance(ctx.stats.cov * ctx.eps)
    logger.info("%s: covariance factored by %s", ctx.name, how)
    # Noise is drawn on the CPU from the seeded generator, so results do not depend on the device.
    z = torch.randn(ctx.k, ctx.hidden, generator=ctx.generator, dtype=torch.float64)
    return ctx.stats.mean + z @ factor.T


def subword_mean(ctx: InitContext) -> torch.Tensor:
    out = torch.empty(ctx.k, ctx.hidden, dtype=torch.float64)
    for i, ids in enumerate(ctx.pieces or [[]] * ctx.k):
        if ids:
            out[i] = ctx.rows_of(ids).to(torch.float64).mean(0)
        else:  # a padding row or a token with no pieces: the safe default
            out[i] = ctx.stats.mean
    return out


@dataclass(frozen=True)
class Strategy:
    name: str
    fn: Callable[[InitContext], torch.Tensor]
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


def kl_bound(k: int, n: int) -> float:
    """The bound log(1 + k/n) that mean init guarantees on KL(p_old || p_new) at every position."""
    return math.log1p(k / n)
