"""bench/names.py, the made-up names of the encoder bench: words of 3 to 6 pieces, held-out sentences
apart from the fit corpus, the same files on every run (a tiny uncased WordPiece tokenizer, tests/builders.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import names


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory) -> Path:
    from builders import make_tokenizer

    path = tmp_path_factory.mktemp("tok") / "wordpiece"
    make_tokenizer("wordpiece-uncased").save_pretrained(path)
    return path


def _paragraphs(path: Path) -> list[str]:
    return [p for p in path.read_text(encoding="utf-8").split("\n\n") if p.strip()]


def test_names_split_into_three_to_six_pieces_and_are_not_in_the_vocabulary(ckpt):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ckpt)
    got = names.choose_names(ckpt, 12)
    assert len(set(got)) == 12
    for w in got:
        assert 3 <= names.pieces(tok, w) <= 6, w
        assert w.lower() not in tok.get_vocab(), w


def test_held_out_sentences_are_not_in_the_fit_corpus_and_each_name_has_its_share(ckpt, tmp_path):
    fit, held, tokens = names.build(tmp_path, ckpt, 12)
    words = tokens.read_text(encoding="utf-8").split()
    fit_s, held_s = _paragraphs(fit), _paragraphs(held)
    assert not set(fit_s) & set(held_s)
    fit_w, held_w = ([set(re.findall(r"\w+", s)) for s in part] for part in (fit_s, held_s))
    for w in words:
        assert sum(w in s for s in fit_w) >= names.FIT_PER_NAME, w
        assert sum(w in s for s in held_w) >= names.HELD_PER_NAME, w
    # the known names' sentences (no new word): one per held-out frame
    assert sum(not s & set(words) for s in held_w) == sum(len(f) for f in names.HELD.values())


def test_the_set_is_the_same_on_every_run(ckpt, tmp_path):
    a = names.build(tmp_path / "a", ckpt, 12)
    b = names.build(tmp_path / "b", ckpt, 12)
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
