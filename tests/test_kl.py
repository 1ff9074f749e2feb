"""KL in one place: the full-softmax KL agrees with the added-mass form that fitting uses, figures and limits."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from vocabsurgeon.kl import kl_added_mass, kl_bound, kl_figures, kl_per_position, meets_limits, within_bound


def test_the_added_mass_form_is_the_full_kl_when_only_new_tokens_are_added():
    g = torch.Generator().manual_seed(0)
    old = torch.randn(200, 50, generator=g, dtype=torch.float64) * 3
    new_cols = torch.randn(200, 7, generator=g, dtype=torch.float64) * 3 - 2
    full = kl_per_position(old, torch.cat([old, new_cols], 1))
    excess = new_cols.logsumexp(-1) - old.logsumexp(-1)
    assert np.allclose(kl_added_mass(excess).numpy(), full, rtol=1e-10, atol=1e-14)
    assert np.allclose(kl_added_mass(excess.numpy()), full, rtol=1e-10, atol=1e-14)  # numpy and torch alike


def test_the_added_mass_form_keeps_its_gradient_and_does_not_overflow():
    x = torch.tensor([-800.0, 0.0, 800.0], dtype=torch.float64, requires_grad=True)
    y = kl_added_mass(x)
    y.sum().backward()
    assert torch.isfinite(y).all() and y[2].item() == pytest.approx(800.0)
    assert x.grad.tolist() == pytest.approx([0.0, 0.5, 1.0])


def test_mean_init_meets_the_bound_at_every_position():
    # new rows equal to the mean row: exp(h . mean) <= Z / n by Jensen, so KL <= log(1 + k/n)
    g = torch.Generator().manual_seed(1)
    W = torch.randn(300, 16, generator=g, dtype=torch.float64)
    h = torch.randn(64, 16, generator=g, dtype=torch.float64) * 4
    k = 5
    old = h @ W.T
    new = torch.cat([old, (h @ W.mean(0)).unsqueeze(1).expand(-1, k)], 1)
    kl = kl_per_position(old, new)
    assert kl.max() <= kl_bound(k, 300) * (1 + 1e-9)
    assert within_bound(float(kl.max()), kl_bound(k, 300))


def test_figures_and_limits():
    kl = np.array([0.0, 0.01, 0.02, 0.5])
    f = kl_figures(kl)
    assert f["positions"] == 4 and f["max"] == 0.5 and f["mean"] == pytest.approx(0.1325)
    assert f["p99"] == pytest.approx(np.quantile(kl, 0.99))
    assert kl_figures(np.zeros(0)) == {"positions": 0, "mean": None, "p99": None, "max": None}
    assert all(math.isnan(f[key]) for key in ("mean", "p99", "max") for f in [kl_figures(np.array([0.1, np.nan]))])
    assert meets_limits(kl, 0.2, 0.5) and not meets_limits(kl, 0.1, 0.5) and not meets_limits(kl, 0.2, 0.4)
    assert meets_limits(np.zeros(0), 0.0, 0.0)
    assert not meets_limits(np.array([np.nan]), 1.0, 1.0)  # a NaN figure never meets a limit
    assert not within_bound(float("nan"), 1.0) and within_bound(0.1, 0.1)
