"""What the fits share: new rows read through the model's own input embedding module, and the messages
about contexts."""

from __future__ import annotations

import logging

import pytest
import torch

from vocabsurgeon.init.fitted.common import FitToken, Run, Window, contexts_found, embedding_read, new_token_embeds


def _gemma3_embedding():
    from transformers.models.gemma3.modeling_gemma3 import Gemma3TextScaledWordEmbedding

    torch.manual_seed(0)
    emb = Gemma3TextScaledWordEmbedding(10, 16, padding_idx=7, embed_scale=16 ** 0.5)
    torch.nn.init.normal_(emb.weight)
    return emb


def test_rows_read_through_a_scaled_embedding_are_what_it_gives_for_their_ids():
    emb = _gemma3_embedding()
    ids = torch.tensor([[1, 7, 3], [9, 0, 2]])
    got = embedding_read(emb, emb.weight.detach()[ids])
    assert torch.allclose(got, emb(ids))
    assert torch.allclose(got, 4.0 * emb.weight.detach()[ids])
    assert emb.padding_idx == 7  # restored after the call


def test_a_plain_embedding_reads_rows_as_they_are():
    emb = torch.nn.Embedding(10, 8, padding_idx=3)
    rows = torch.randn(2, 5, 8)
    assert torch.equal(embedding_read(emb, rows), rows)


def test_new_rows_read_where_new_ids_stand_and_get_their_gradient_through_the_scale():
    emb = _gemma3_embedding()
    R = torch.randn(2, 16, requires_grad=True)
    ids = torch.tensor([[1, 11, 7], [10, 2, 11]])  # 10, 11: new tokens 0 and 1; 7 is the padding index
    out = new_token_embeds(emb, ids, R)
    assert torch.allclose(out[0, 0], 4.0 * emb.weight[1])
    assert torch.allclose(out[0, 1], 4.0 * R[1]) and torch.allclose(out[1, 0], 4.0 * R[0])
    out[:, :, 0].sum().backward()
    # R[1] is read twice, R[0] once, each times the scale
    assert R.grad[:, 0].tolist() == pytest.approx([4.0, 8.0])
    assert float(R.grad[:, 1:].abs().max()) == 0.0


def test_a_word_whose_bare_form_is_absent_is_named_by_that_form(caplog):
    """Issue 32: "never occur in the contexts, e.g. 'Gandalf'" named a word the corpus has; only its bare form
    was absent."""
    tokens = [FitToken("Gandalf", (1, 2)), FitToken(" Gandalf", (3, 2)), FitToken(" Frodo", (4, 5))]
    windows = [Window([9, 3, 2, 4, 5], [Run(1, 2, 1), Run(3, 2, 2)])]
    with caplog.at_level(logging.WARNING, logger="vocabsurgeon.init.fitted.common"):
        found = contexts_found(windows, tokens, "the sub-word mean")
    assert found["tokens_without_context"] == ["Gandalf"]
    assert caplog.messages == [
        "1 new token(s) never occur in the contexts, e.g. the bare form 'Gandalf' (at a text start or after "
        "punctuation); its form ' Gandalf' occurs: their rows stay at the sub-word mean"]


def test_a_word_absent_in_both_forms_is_named_by_the_form_without_the_other(caplog):
    tokens = [FitToken(" Frodo", (4, 5))]
    with caplog.at_level(logging.WARNING, logger="vocabsurgeon.init.fitted.common"):
        contexts_found([], tokens, "the sub-word mean")
    assert caplog.messages == ["1 new token(s) never occur in the contexts, e.g. the word-start form ' Frodo' "
                               "(after a space): their rows stay at the sub-word mean"]
