"""Distillation's prefix cache: each window's start (old ids only) is run once, and every step
runs the rest of the window on its keys and values. It must give what the full windows give, on
both fixture families (GPT-2: learned positions; Llama: rotary positions, a BOS prefix), and fall
back to full windows when it does not."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from vocabsurgeon.init.fitted import distill

from vocabsurgeon.init.fitted import common as fit_common

from vocabsurgeon.init.fitted import causal as fitted
from vocabsurgeon.init.fitted.prefix_cache import PrefixCache

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
FORMS = (" Frodo", " Gandalf", " Samwise", " Mordor")


pytestmark = pytest.mark.usefixtures("one_thread")


def _distill(fit_setup, steps=12):
    m, windows, teacher, _, sub = fit_setup
    return fitted.distill_input_rows(m, windows, teacher, sub, steps, 8, 0.1, 0, lambda *a: None, 3)


def test_the_rest_of_a_window_after_its_cached_start_reads_as_in_the_full_window(fit_setup):
    m, windows, *_ = fit_setup
    # starts of every length, 0 (nothing cached) included, in one batch: each left-padded to the longest
    cuts = {i: min(len(w.old) - 1, i * 3) for i, w in enumerate(windows[:6])}
    cache = PrefixCache.run(m.model.base_model, {i: windows[i].old[:c] for i, c in cuts.items()}, 4, m.device)
    part = list(cuts)
    rest = [windows[i].old[c:] for i, c in cuts.items()]
    ids, mask = fitted.pad_batch(rest, 0, m.device)
    with torch.no_grad():
        got = cache.hidden(part, m.E[ids], mask)
        for b, i in enumerate(part):
            full = m.hidden(torch.tensor([windows[i].old]))[0]
            want = full[cuts[i]:]
            assert PrefixCache.agrees(got[b, :len(rest[b])], want, tol=1e-5), (i, cuts[i])


def test_the_teacher_pass_keeps_the_prefixes_distillation_reads_so_they_are_not_run_again(fit_setup, monkeypatch):
    m, windows, _, _, sub = fit_setup
    first = {i: w.runs[0].start for i, w in enumerate(windows) if w.runs}
    teacher = fitted._teach(m, windows, 8, lambda *a: None, keep=first)
    assert set(teacher.prefix_kv) == set(first)
    ran = PrefixCache.run(m.model.base_model, {i: windows[i].old[:s] for i, s in first.items()}, 3, m.device)
    for i in first:  # in batches of other windows and lengths: the same keys and values
        for (k, v), (k2, v2) in zip(teacher.prefix_kv[i], ran.kv[i]):
            assert k.shape == k2.shape and k.shape[1] == first[i]
            assert torch.allclose(k, k2, atol=1e-5) and torch.allclose(v, v2, atol=1e-5)

    def no_run(*a, **k):
        raise AssertionError("the prefixes were run again")

    monkeypatch.setattr(PrefixCache, "run", no_run)
    rows, report = fitted.distill_input_rows(m, windows, teacher, sub, 4, 8, 0.1, 0, lambda *a: None, 3)
    assert report["prefix_cache"] is True and torch.isfinite(rows).all()


def test_distillation_runs_on_the_cache_and_gives_the_rows_of_full_windows(fit_setup, monkeypatch):
    # the same batches on both paths (length batching would group them by the lengths each path runs)
    plain = fit_common.length_batches
    monkeypatch.setattr(fit_common, "length_batches", lambda order, batch, lengths, rng: plain(order, batch, None, rng))
    rows, report = _distill(fit_setup)
    assert report["prefix_cache"] is True and report["steps"] >= 6
    monkeypatch.setattr(distill, "_checked_prefix_cache", lambda *a, **k: None)
    full_rows, full_report = _distill(fit_setup)
    assert full_report["prefix_cache"] is False
    # the same math in other matrix shapes: equal to float32 rounding, after the same Adam steps
    assert torch.allclose(rows, full_rows, rtol=0, atol=1e-5 * float(full_rows.abs().max()))
    assert full_report["held_out_loss"] == pytest.approx(report["held_out_loss"], rel=1e-4)


def test_a_cache_that_disagrees_with_full_windows_is_not_used(fit_setup, monkeypatch):
    monkeypatch.setattr(distill, "_checked_prefix_cache", lambda *a, **k: None)
    full_rows, _ = _distill(fit_setup, steps=4)
    monkeypatch.undo()
    real = PrefixCache.hidden
    monkeypatch.setattr(PrefixCache, "hidden", lambda self, *a: real(self, *a) + 1e-2)  # a wrong cache
    rows, report = _distill(fit_setup, steps=4)
    assert report["prefix_cache"] is False
    assert torch.equal(rows, full_rows)


def test_a_model_that_cannot_take_a_cache_distills_on_full_windows(fit_setup, monkeypatch):
    def broken(self, *a, **k):
        raise TypeError("unexpected keyword argument 'cache'")

    monkeypatch.setattr(PrefixCache, "__init__", broken)
    rows, report = _distill(fit_setup, steps=4)
    assert report["prefix_cache"] is False and torch.isfinite(rows).all()


def test_length_batches_hold_every_window_once_in_batches_of_similar_length():
    import numpy as np

    lengths = [int(x) for x in np.random.default_rng(1).integers(3, 33, size=203)]
    order = list(np.random.default_rng(2).permutation(203))
    plain = fit_common.length_batches(order, 8, None, np.random.default_rng(0))
    grouped = fit_common.length_batches(order, 8, lengths, np.random.default_rng(0))
    assert sorted(i for b in grouped for i in b) == list(range(203))
    assert all(1 <= len(b) <= 8 for b in grouped) and len(grouped) == len(plain) == 26  # only the last batch is short
    padded = lambda batches: sum(len(b) * max(lengths[i] for i in b) for b in batches)  # noqa: E731
    assert padded(grouped) < 0.8 * padded(plain)
    again = fit_common.length_batches(order, 8, lengths, np.random.default_rng(0))
    assert again == grouped  # seeded
