"""KL(p_old || p_new) between a model and its edited copy: per position, the mean-init bound, the figures.

The one home of this calculation: fitting (which keeps it within limits) and validation (which measures it)
both call it. Why the bound holds: docs/init.md.
"""

from __future__ import annotations

import math

import numpy as np

KL_ROWS = 64  # positions per float64 block: a whole window's float64 temporaries (512 x 128k) would be GBs


def kl_bound(k: int, n: int) -> float:
    """The bound log(1 + k/n) that mean init guarantees on KL(p_old || p_new) at every position.

    Example:
        >>> round(kl_bound(1, 100), 6)
        0.00995
    """
    return math.log1p(k / n)


def kl_per_position(old_logits, new_logits) -> np.ndarray:
    """KL(p_old || p_new) at each position (float64, log-sum-exp), p_new over the full new vocabulary.

    Args:
        old_logits: (positions, n) torch tensor; new_logits: (positions, n + k), the old tokens first.
    """
    n = old_logits.shape[-1]
    out = []
    for i in range(0, old_logits.shape[0], KL_ROWS):
        lo = old_logits[i:i + KL_ROWS].double()
        ln = new_logits[i:i + KL_ROWS].double()
        lp_old = lo - lo.logsumexp(-1, keepdim=True)  # (rows, n)
        lp_new = ln[:, :n] - ln.logsumexp(-1, keepdim=True)  # (rows, n)
        out.append((lp_old.exp() * (lp_old - lp_new)).sum(-1).numpy())
    kl = np.concatenate(out) if out else np.zeros(0)
    return np.maximum(kl, 0.0)  # rounding can give -1e-17 for identical distributions


def kl_added_mass(excess):
    """KL(p_old || p_new) where the new tokens only add mass and the old logits stay: log(1 + exp(excess)).

    `excess` is log(sum_j exp(s_j)) - log Z_old, the new tokens' log-mass over the old partition (a numpy array
    or a torch tensor, which keeps its graph). Computed as softplus, without overflow.

    Example:
        >>> kl_added_mass(np.array([0.0]))  # as much new mass as old: log 2
        array([0.69314718])
    """
    if isinstance(excess, np.ndarray) or np.isscalar(excess):
        return np.logaddexp(0.0, excess)
    import torch

    return torch.logaddexp(excess.new_zeros(()), excess)


def kl_figures(kl) -> dict:
    """Positions, mean, 99th percentile and max of a per-position KL array (None when there is no position);
    NaN anywhere makes the three figures NaN.

    Example:
        >>> kl_figures(np.array([0.0, 0.5, 1.0]))["max"]
        1.0
    """
    kl = np.asarray(kl, dtype=np.float64)
    if kl.size == 0:
        return {"positions": 0, "mean": None, "p99": None, "max": None}
    if not np.isfinite(kl).all():
        nan = float("nan")
        return {"positions": int(kl.size), "mean": nan, "p99": nan, "max": nan}
    return {"positions": int(kl.size), "mean": float(kl.mean()), "p99": float(np.quantile(kl, 0.99)),
            "max": float(kl.max())}


def meets_limits(kl, limit_mean: float, limit_p99: float) -> bool:
    """True when the KL's mean and 99th percentile are within their limits (no position: True)."""
    kl = np.asarray(kl, dtype=np.float64)
    return kl.size == 0 or (float(kl.mean()) <= limit_mean and float(np.quantile(kl, 0.99)) <= limit_p99)


def within_bound(max_kl: float, bound: float) -> bool:
    """Whether a measured max KL is within the mean-init bound, up to float rounding."""
    return math.isfinite(max_kl) and max_kl <= bound * (1 + 1e-6) + 1e-12
