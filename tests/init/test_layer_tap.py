"""Distillation at a depth: the hidden states after a causal model's first layers, and a forward that
stops there. The tap must read what transformers itself reports for that layer, run no layer above
it, and give distillation the same rows on the prefix cache and on full windows."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from vocabsurgeon.init.fitted import distill

from vocabsurgeon.init.fitted import common as fit_common

from vocabsurgeon.init.fitted import causal as fitted
from vocabsurgeon.init.fitted import fit_rows
from vocabsurgeon.errors import InputError
from vocabsurgeon.init.fitted.causal import FitToken
from vocabsurgeon.engine.modelcard import model_card_text
from vocabsurgeon.init.fitted.layer_tap import LayerTap, decoder_layers, final_norm, layers_for
from vocabsurgeon.runtime import load_tokenizer

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
FORMS = (" Frodo", " Gandalf", " Samwise", " Mordor")

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_decoder_layers_are_found_and_a_share_of_them_chosen(fit_setup):
    m = fit_setup[0]
    base = m.model.base_model
    layers = decoder_layers(base)
    assert layers is not None and len(layers) == m.model.config.num_hidden_layers == 2
    assert layers_for(base, 0.2) == 1 and layers_for(base, 0.5) == 1 and layers_for(base, 1.0) is None
    with pytest.raises(InputError, match="fit depth 0"):
        layers_for(base, 0.0)


def test_the_tap_reads_the_layer_transformers_reports_and_stops_there(fit_setup):
    m, windows, *_ = fit_setup
    base = m.model.base_model
    ids, mask = fitted.pad_batch([w.old for w in windows[:4]], 0, m.device)
    with torch.no_grad():
        norm = final_norm(base)
        assert norm is (base.norm if hasattr(base, "norm") else base.ln_f)  # Llama's RMSNorm, GPT-2's ln_f
        want = norm(base(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[1])
        hooks = [len(layer._forward_hooks) for layer in decoder_layers(base)]  # transformers' own, once it records
        with LayerTap(base, 1, stop=False) as tap:
            out = tap.run(lambda: base(input_ids=ids, attention_mask=mask))
        assert out is not None and torch.allclose(tap.h, want, atol=1e-5)
        ran = []
        top = decoder_layers(base)[1].register_forward_hook(lambda *a: ran.append(1))
        try:
            with LayerTap(base, 1, stop=True) as tap:
                assert tap.run(lambda: base(input_ids=ids, attention_mask=mask)) is None
        finally:
            top.remove()
        assert ran == [] and torch.allclose(tap.h, want, atol=1e-5)
    assert [len(layer._forward_hooks) for layer in decoder_layers(base)] == hooks  # the tap leaves no hook behind


def test_distillation_at_a_depth_gives_the_same_rows_on_the_cache_and_on_full_windows(fit_setup, monkeypatch):
    m, windows, _, _, sub = fit_setup
    first = {i: w.runs[0].start for i, w in enumerate(windows) if w.runs}
    teacher = fitted._teach(m, windows, 8, lambda *a: None, keep=first, depth=1)
    assert all(t.shape == h.shape for t, h in zip(teacher.at_depth, teacher.h))
    plain = fit_common.length_batches  # the same batches on both paths
    monkeypatch.setattr(fit_common, "length_batches", lambda order, batch, lengths, rng: plain(order, batch, None, rng))

    def run():
        return fitted.distill_input_rows(m, windows, teacher, sub, 12, 8, 0.1, 0, lambda *a: None, 3, depth=1)

    rows, report = run()
    assert report["prefix_cache"] is True and report["skipped_steps"] == 0 and report["steps"] >= 6
    assert report["held_out_loss"][-1] < report["held_out_loss"][0]
    monkeypatch.setattr(distill, "_checked_prefix_cache", lambda *a, **k: None)
    full_rows, full_report = run()
    assert full_report["prefix_cache"] is False
    assert torch.allclose(rows, full_rows, rtol=0, atol=1e-5 * float(full_rows.abs().max()))


def test_fit_rows_reports_the_depth_it_distilled_at(tmp_path):
    src = FIXTURES / "llama-tiny"
    tok = load_tokenizer(src)
    tokens = [FitToken(f, tuple(tok(f, add_special_tokens=False).input_ids)) for f in FORMS]
    opts = fitted.FitOptions(corpus=str(FIXTURES / "corpus_lotr.txt"), input_steps=4)
    r = fit_rows(src, tokens, {"input"}, opts)
    assert r.report["input"]["depth"] == {"share": fitted.DISTILL_DEPTH, "layers": 1, "of": 2}
    card = model_card_text({"added": [], "input": "ckpt", "tool": "vocabsurgeon", "fitted": r.report})
    assert "hidden states matched after 1 of 2 layers" in card
    assert r.input_rows.shape == (len(tokens), 64) and r.report["input"]["skipped_steps"] == 0
    full = fit_rows(src, tokens, {"input"}, fitted.FitOptions(corpus=opts.corpus, input_steps=4, depth=1.0))
    assert full.report["input"]["depth"] == {"share": 1.0, "layers": 2, "of": 2}
    assert not (full.input_rows == r.input_rows).all()
