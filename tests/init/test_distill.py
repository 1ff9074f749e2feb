"""Input distillation on a model whose embedding module does more than a lookup: a tiny tied
Gemma 3 (transformers' Gemma3ForCausalLM, built in code), whose embedding multiplies by
sqrt(hidden) in its own forward. Rows fed as `inputs_embeds` must be read as the model reads ids."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from builders import tiny_gemma3
from vocabsurgeon.init.fitted import causal as fitted
from vocabsurgeon.init.fitted.common import Run, Window
from vocabsurgeon.runtime import LoadedModel, ModelKind

pytestmark = pytest.mark.usefixtures("one_thread")

WORD = 300  # an old token: the "new" token is that token again, so its true row is known


def gemma3_windows(sliding_window: int = 64):
    """(frozen tiny Gemma 3, 24 windows of 20 ids each with WORD once, read as a new token with pieces (WORD,))."""
    model, tok = tiny_gemma3(sliding_window)
    m = fitted._Model(LoadedModel(model, ModelKind("causal", "Gemma3ForCausalLM")), tok)
    rng = np.random.default_rng(0)
    windows = []
    for _ in range(24):
        old = [int(x) for x in rng.integers(1, 600, size=20)]
        at = int(rng.integers(2, 12))
        old[at] = WORD
        windows.append(Window(old, [Run(at, 1, 0)]))
    return m, windows


def _raw_embeds(emb, ids, R):
    """The rows as they are on disk at each position, the new ones from R."""
    n = emb.weight.shape[0]
    out = emb.weight.detach()[ids.clamp(max=n - 1)].clone()
    where = ids >= n
    out[where] = R[ids[where] - n].to(out.dtype)
    return out


@pytest.fixture(scope="module")
def gemma3():
    return gemma3_windows()


@pytest.mark.parametrize("depth", [None, 1], ids=["last-layer", "first-layer"])
def test_a_new_token_given_an_old_tokens_row_reads_as_that_token_on_a_scaled_embedding(gemma3, depth):
    m, windows = gemma3
    assert float(m.model.get_input_embeddings().embed_scale) == 8.0  # sqrt(64): what is tested
    first = {i: w.runs[0].start for i, w in enumerate(windows)}
    teacher = fitted._teach(m, windows, 8, lambda *a: None, keep=first, depth=depth)
    true_row = m.E[WORD].double()[None]  # (1, hidden): the row the model reads as WORD, unscaled on disk
    rows, report = fitted.distill_input_rows(m, windows, teacher, true_row, None, 8, 0.1, 0, lambda *a: None, 1,
                                             depth)
    # the student reads the true row exactly as the teacher reads the id: nothing to distil
    assert report["held_out_windows"] == 3
    assert report["held_out_loss"][0] < 1e-8, report["held_out_loss"]
    assert torch.allclose(rows, true_row)
    # the cached prefixes (the teacher's, from ids) agree with the student's own full pass
    assert report["prefix_cache"] is True


def test_a_sliding_window_cache_is_not_read_as_the_prefixes_and_the_prefixes_are_run_alone(monkeypatch):
    from vocabsurgeon.init.fitted.prefix_cache import PrefixCache

    # Gemma 3's sliding-window layers keep only their last 15 positions of a 20-position teacher pass
    m, windows = gemma3_windows(sliding_window=16)
    first = {i: w.runs[0].start for i, w in enumerate(windows)}
    teacher = fitted._teach(m, windows, 8, lambda *a: None, keep=first)
    assert teacher.prefix_kv == {}
    ran = []
    plain = PrefixCache.run
    monkeypatch.setattr(PrefixCache, "run", lambda *a, **k: ran.append(1) or plain(*a, **k))
    _, report = fitted.distill_input_rows(m, windows, teacher, m.E[[WORD]].double(), 2, 8, 0.1, 0,
                                          lambda *a: None, 1)
    assert ran and report["prefix_cache"] is True


def test_a_model_that_reads_inputs_embeds_otherwise_than_ids_keeps_the_start_rows(gemma3, monkeypatch, caplog):
    from vocabsurgeon.init.fitted import distill

    m, windows = gemma3
    teacher = fitted._teach(m, windows, 8, lambda *a: None)
    # the rows as they are on disk, without the module's scale: what distillation fed Gemma before
    monkeypatch.setattr(distill, "new_token_embeds", lambda emb, ids, R: _raw_embeds(emb, ids, R))
    start = m.E[[WORD + 1]].double()
    rows, report = fitted.distill_input_rows(m, windows, teacher, start, None, 8, 0.1, 0, lambda *a: None, 1)
    assert torch.equal(rows, start) and report["steps"] == 0
    assert report["skipped"] == "the model reads inputs_embeds otherwise than its ids"
    assert "Gemma3ForCausalLM reads rows given as inputs_embeds otherwise than its ids" in caplog.text

