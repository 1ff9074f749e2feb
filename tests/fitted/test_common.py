"""The fit's shared pieces (vocabsurgeon/fitted/common.py) that need no model."""

from __future__ import annotations

import logging

from vocabsurgeon.fitted.common import FitToken, Run, Window, contexts_found


def test_a_word_whose_bare_form_is_absent_is_named_by_that_form(caplog):
    """Issue 32: "never occur in the contexts, e.g. 'Gandalf'" named a word the corpus has; only its bare form
    was absent."""
    tokens = [FitToken("Gandalf", (1, 2)), FitToken(" Gandalf", (3, 2)), FitToken(" Frodo", (4, 5))]
    windows = [Window([9, 3, 2, 4, 5], [Run(1, 2, 1), Run(3, 2, 2)])]
    with caplog.at_level(logging.WARNING, logger="vocabsurgeon.fitted.common"):
        found = contexts_found(windows, tokens, "the sub-word mean")
    assert found["tokens_without_context"] == ["Gandalf"]
    assert caplog.messages == [
        "1 new token(s) never occur in the contexts, e.g. the bare form 'Gandalf' (at a text start or after "
        "punctuation); its form ' Gandalf' occurs: their rows stay at the sub-word mean"]


def test_a_word_absent_in_both_forms_is_named_by_the_form_without_the_other(caplog):
    tokens = [FitToken(" Frodo", (4, 5))]
    with caplog.at_level(logging.WARNING, logger="vocabsurgeon.fitted.common"):
        contexts_found([], tokens, "the sub-word mean")
    assert caplog.messages == ["1 new token(s) never occur in the contexts, e.g. the word-start form ' Frodo' "
                               "(after a space): their rows stay at the sub-word mean"]
