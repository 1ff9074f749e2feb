"""The one table of contexts (vocabsurgeon/tokenizer/contexts.py) on Llama 3's published tokenizer: every
context is checked by the plan, by the re-read of the written file and by validation, and a word that keeps
its old pieces in one is reported there (issue 32: `[w]`, `'w'`, `x=w` were neither checked nor reported)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer
from transformers import AutoTokenizer

from vocabsurgeon.errors import VocabSurgeonError
from vocabsurgeon.tokenizer import contexts
from vocabsurgeon.tokenizer.editor import TokenizerEditor, verify_tokenizer
from vocabsurgeon.validation.validate import tokenization_check

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures"))
from published import fetch  # noqa: E402

WORDS = ["striped", "pathlib", "Björk", "Frodo"]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """Llama 3's published tokenizer with WORDS added: (the original's directory, the output's, the plan)."""
    src = fetch("llama3")
    plan = TokenizerEditor(src).plan(WORDS)
    out = tmp_path_factory.mktemp("out")
    TokenizerEditor(src).write(plan, out)
    return src, out, plan


def test_each_context_of_the_docs_is_one_token_or_reported_and_keeps_its_old_ids_there(written):
    src, out, plan = written
    old, new = (Tokenizer.from_file(str(d / "tokenizer.json")) for d in (src, out))
    ids = {w: {t.id for t in plan.new if t.text == w} for w in WORDS}
    assert set(ids) == set(WORDS) and all(ids.values())
    for w in WORDS:  # a form that was one token already (" striped") counts too
        ids[w] |= {e.ids[0] for e in old.encode_batch([w, " " + w], add_special_tokens=False) if len(e.ids) == 1}
    reported = plan.contexts
    for name in ("square brackets", "single quotes", "after an equals sign", "possessive at a sentence start"):
        assert name in contexts.BY_NAME
    # "striped" is a merge of its two pieces: it applies wherever BPE stops at them ("[striped", "=striped" are one
    # pre-token each), so the word keeps its old pieces only where BPE stops elsewhere
    assert {"'striped'", "(striped)"} <= set(reported["striped"])
    for case in contexts.cases(WORDS):
        got = new.encode(case.text, add_special_tokens=False).ids
        for w, n in case.expect.items():
            if case.text in reported.get(w, ()):  # the word keeps the pieces it had
                assert got == old.encode(case.text, add_special_tokens=False).ids, case.text
            else:
                assert sum(i in ids[w] for i in got) == n, (case.text, [new.id_to_token(i) for i in got])


def test_the_re_read_of_the_written_file_fails_on_a_context_the_plan_did_not_report(written):
    src, out, plan = written
    verify_tokenizer(out, plan)
    dropped = {w: [t for t in texts if t != "(striped)"] for w, texts in plan.contexts.items()}
    with pytest.raises(VocabSurgeonError, match=r"token 'striped': '\(striped\)' encodes to \[.*\], not one token \(a "
                                                r"context the plan did not report in contexts_not_one_token\)"):
        verify_tokenizer(out, dataclasses.replace(plan, contexts=dropped))


@pytest.mark.slow  # transformers loads two 128k-entry tokenizers: ~20 s on 2 loaded cores
def test_validation_reports_the_contexts_where_a_word_keeps_its_old_pieces_as_the_plan_does(written):
    src, out, plan = written
    old, new = AutoTokenizer.from_pretrained(src), AutoTokenizer.from_pretrained(out)
    ids = [t.id for t in plan.new]
    check = tokenization_check(old, new, "The striped cat.\n\nOld text.", set(ids), ids)
    assert check.passed
    assert check.contexts_not_one_token == plan.contexts
