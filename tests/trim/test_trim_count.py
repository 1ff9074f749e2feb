"""Counting a corpus: each distinct word encoded once gives exactly the counts of encoding every piece whole,
per tokenizer family and on published files, or the count falls back to whole pieces."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from builders import family_tokenizer, tiny_checkpoint, training_text
from published_models import FIXTURES

from vocabsurgeon.corpus import MAX_ITEM_CHARS, Reader, batches, counting_tokenizer
from vocabsurgeon.tokenizer.encoding import encode_batch
from vocabsurgeon.trim import count
from vocabsurgeon.trim.count import _count_ids, count_tokens

FAMILIES = ["byte-level", "byte-level-gpt2", "sp-bpe", "sp-bpe-meta", "sp-bpe-gemma", "metaspace-bpe", "unigram",
            "wordpiece-uncased", "wordpiece-cased"]
PUBLISHED = ["gpt2", "llama2", "llama3", "mistral-v0.1", "minilm", "t5-small"]
CHUNK = 1 << 14  # characters per batch: the corpus spans many batches, the first one decides


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """About 200 kB: the fixture prose, then stdlib docstrings (code, numbers, doubled spaces, newlines)."""
    path = tmp_path_factory.mktemp("count") / "corpus.txt"
    prose = [(FIXTURES / f).read_text(encoding="utf-8") for f in ("corpus.txt", "corpus_lotr.txt")]
    path.write_text("\n\n".join(prose + list(training_text()))[:200_000] + "  a \t b\n\n\nend", encoding="utf-8")
    return path


def _whole(tok, path, size) -> np.ndarray:
    encode = encode_batch(tok)
    return sum(_count_ids(encode, b, size) for b in batches(Reader(path, MAX_ITEM_CHARS), CHUNK))


def _check(directory, corpus, caplog) -> str:
    tok = counting_tokenizer(directory)
    size = tok.get_vocab_size(with_added_tokens=True)
    with caplog.at_level(logging.INFO, logger=count.__name__):
        counts = count_tokens(tok, corpus, size, chunk_chars=CHUNK).counts
    np.testing.assert_array_equal(counts, _whole(tok, corpus, size))
    return next(r.getMessage() for r in caplog.records if r.name == count.__name__)


@pytest.mark.parametrize("family", FAMILIES)
def test_word_counts_equal_whole_counts(family, corpus, tmp_path, caplog):
    how = _check(tiny_checkpoint(tmp_path / "ckpt", family_tokenizer(family)), corpus, caplog)
    # Meta's layout prepends "▁" to every text it is given: a word is encoded without its space
    assert how == f"counting each distinct word once ({'bare' if family == 'sp-bpe-meta' else 'space_led'})", how


@pytest.mark.parametrize("name", PUBLISHED)
def test_word_counts_equal_whole_counts_on_published_files(name, corpus, published, caplog):
    how = _check(published(name), corpus, caplog)  # the counts equal whole counts (in _check)
    # and each distinct word is counted once (how a word is split from its space depends on how the installed
    # transformers builds the file: Meta's Llama 2 file prepends "▁" to every text as it loads in some versions)
    assert how.startswith("counting each distinct word once ("), how


def test_a_tokenizer_that_encodes_words_otherwise_is_counted_whole(corpus, tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(count, "space_chunks", __import__("re").compile(r"(?<=\S)(?=\S)").split)  # inside words: not exact
    how = _check(tiny_checkpoint(tmp_path / "ckpt", family_tokenizer("byte-level")), corpus, caplog)
    assert how == "counting every piece whole"


def test_distinct_words_are_flushed_past_max_words_and_encoded_in_parts(corpus, tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(count, "MAX_WORDS", 100)
    monkeypatch.setattr(count, "ENCODE_WORDS", 7)
    _check(tiny_checkpoint(tmp_path / "ckpt", family_tokenizer("byte-level")), corpus, caplog)
