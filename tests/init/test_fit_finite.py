"""Input distillation stays finite on a model whose first position is a zero row.

transformers zeroes the pad_token_id row of a new model's embedding; where the pad token is also
the BOS, every window starts with a zero vector, which stays exactly 0 through every layer (no bias,
attention to itself only). Each norm's backward at 0 multiplies by 1/sqrt(eps), so that position's
gradient grows by that factor a layer, overflows float32 in a deep model, and the attention
backward spreads it as NaN (0 * inf) to every position. That made every distilled row NaN on a
random 30-layer SmolLM2-shaped model (bench/nan_repro.py). The positions before the first new
token never reach the new rows, so the backward now stops there (prefix_cache.full_hidden), as it
does on the prefix cache. The model here is tiny: 20 layers of width 32, weights at std 0.1 and eps
1e-6, so the gradient at the zero position grows ~300x a layer and overflows as on the 135M model.
"""

from __future__ import annotations

import pytest
import torch
from builders import bytelevel_tokenizer, save_checkpoint, training_text
from transformers import LlamaConfig, LlamaForCausalLM

from vocabsurgeon.init.fitted import distill

from vocabsurgeon.init.fitted import causal as fitted
from vocabsurgeon.init.fitted import check_kind
from vocabsurgeon.init.fitted.causal import FitToken, word_windows
from vocabsurgeon.init.fitted.prefix_cache import PrefixCache, full_hidden
from vocabsurgeon.runtime import load_tokenizer, loaded_model

FORMS = (" Vorathil", " Quenmor", " Eldarwyn")

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """(model, windows, teacher pass, sub-word mean rows) of a deep random Llama whose BOS row is 0."""
    tok = bytelevel_tokenizer(600)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=20,
                      num_attention_heads=2, num_key_value_heads=1, initializer_range=0.1, rms_norm_eps=1e-6,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.bos_token_id)
    src = save_checkpoint(LlamaForCausalLM(cfg).eval(), tok, tmp_path_factory.mktemp("zero-bos") / "llama")
    tok = load_tokenizer(src)
    tokens = [FitToken(f, tuple(tok(f, add_special_tokens=False).input_ids)) for f in FORMS]
    sentences = [s for t in training_text() for s in t.split(". ") if len(s) > 40][:24]
    text = "\n\n".join(f"{s}{FORMS[i % len(FORMS)]} and more of it." for i, s in enumerate(sentences))
    with loaded_model(src, "cpu", check_kind(src), remedy="") as lm:
        m = fitted._Model(lm, tok)
        assert m.prefix == [tok.bos_token_id] and float(m.E[m.prefix[0]].abs().max()) == 0.0
        windows = word_windows(text, tok, m.prefix, tokens, 32, 8)
        teacher = fitted._teach(m, windows, 8, lambda *a: None)
        yield m, windows, teacher, fitted.subword_mean(m.E, tokens)


def _batch(m, windows):
    """Eight windows in their new tokenization as embeddings (a leaf that takes a gradient), their
    mask, and each one's first new position."""
    part = [i for i, w in enumerate(windows) if w.runs][:8]
    ids, mask = fitted.pad_batch([windows[i].new_ids(m.n) for i in part], 0, m.device)
    emb = m.E[ids.clamp(max=m.n - 1)].clone().requires_grad_(True)
    return part, emb, mask, [windows[i].runs[0].start for i in part]


def _after(h, mask, starts):
    """Sum of the hidden states from each row's first new position to its end (what distillation matches)."""
    return sum(h[b, s:int(mask[b].sum())].sum() for b, s in enumerate(starts))


def test_the_zero_first_position_overflows_the_plain_backward_and_not_the_cut_one(setup):
    m, windows, _, _ = setup
    part, emb, mask, starts = _batch(m, windows)
    h = m.hidden(None, mask, embeds=emb)
    assert torch.isfinite(h).all()  # the forward is finite: only the backward overflows
    _after(h, mask, starts).backward()
    plain = emb.grad.clone()
    new = torch.stack([plain[b, s] for b, s in enumerate(starts)])
    assert not torch.isfinite(new).any()  # every first new position: what made every row NaN

    emb.grad = None
    _after(full_hidden(m.model.base_model, emb, mask, starts), mask, starts).backward()
    cut = emb.grad.clone()
    assert torch.isfinite(cut).all()
    # the cut changes no gradient that reaches a new row: the cached path (which never runs the
    # start backward) gives the same gradient at every position from the first new one on
    cache = PrefixCache.run(m.model.base_model, {i: windows[i].old[:s] for i, s in zip(part, starts)}, 8, m.device)
    rest = [emb[b, s:int(mask[b].sum())] for b, s in enumerate(starts)]
    R = max(len(r) for r in rest)
    tail = torch.zeros((len(rest), R, emb.shape[2]))
    tail_mask = torch.zeros((len(rest), R), dtype=mask.dtype)
    for b, r in enumerate(rest):
        tail[b, :len(r)] = r.detach()
        tail_mask[b, :len(r)] = 1
    tail.requires_grad_(True)
    cache.hidden(part, tail, tail_mask)[tail_mask.bool()].sum().backward()
    for b, r in enumerate(rest):
        got, want = cut[b, starts[b]:starts[b] + len(r)], tail.grad[b, :len(r)]
        assert torch.allclose(got, want, rtol=1e-3, atol=1e-4 * float(want.abs().max())), b


@pytest.mark.parametrize("cached", [False, True])
def test_distillation_on_a_zero_first_position_skips_no_step(setup, monkeypatch, cached):
    m, windows, teacher, sub = setup
    if not cached:
        monkeypatch.setattr(distill, "_checked_prefix_cache", lambda *a, **k: None)
    rows, report = fitted.distill_input_rows(m, windows, teacher, sub, 6, 8, 0.1, 0, lambda *a: None, 1)
    assert report["prefix_cache"] is cached
    assert report["steps"] >= 3 and report["skipped_steps"] == 0
    assert torch.isfinite(rows).all() and not torch.equal(rows, sub)
    assert report["held_out_loss"] == [] or report["held_out_loss"][-1] < report["held_out_loss"][0]

