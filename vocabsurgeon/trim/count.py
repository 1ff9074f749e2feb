"""How a corpus uses a vocabulary: every token id counted under the original fast tokenizer, streamed.

The corpus is read in bounded paragraph-sized pieces (`corpus.Reader`: cut at whitespace before a
word, where the pre-tokenizers split anyway). Most text is few distinct words used many times, so the
pieces are cut further before each space that follows a word, the distinct words counted, and each
encoded once, its ids weighted by its count. That is exact only where the tokenizer gives a word the
same ids alone as in its text: the first batch is encoded both ways, with the word led by its space
(byte-level BPE, Metaspace) or without it (a normalizer that prepends "▁", Llama 2's), and the words are
used only where one way reproduces that batch's counts exactly; otherwise every piece is encoded whole.
Memory is one batch, the distinct words (flushed past `MAX_WORDS`) and one count per id.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from ..errors import InputError
from ..corpus import DEFAULT_CHUNK_CHARS, Stream, space_chunks
from ..tokenizer.encoding import encode_batch

logger = logging.getLogger(__name__)

MAX_WORDS = 1 << 20  # distinct words held before they are encoded and counted: bounds memory on a large corpus
ENCODE_WORDS = 1 << 15  # words encoded at a time: an Encoding holds offsets and strings besides its ids


@dataclass(frozen=True)
class TokenCounts:
    """What one pass over the corpus found: bytes read, tokens, and the count of each id."""

    path: Path
    bytes: int
    counts: np.ndarray  # (ids,) int64: how often each id occurs in the corpus

    @property
    def tokens(self) -> int:
        return int(self.counts.sum())

    def coverage(self, kept: np.ndarray) -> float:
        """The share of the corpus's tokens that are kept tokens (ids `kept`)."""
        return float(self.counts[kept].sum() / max(1, self.tokens))


def count_tokens(tok: Tokenizer, corpus: str | os.PathLike, size: int, *, chunk_chars: int = DEFAULT_CHUNK_CHARS,
                 progress: Callable[[int], None] | None = None) -> TokenCounts:
    """Count every token id of `corpus` under `tok` (from `corpus.counting_tokenizer`: no padding,
    truncation or special tokens); `size` is the number of ids.

    Raises:
        InputError: the corpus cannot be read, is not UTF-8, is empty, or tokenizes to nothing.
    """
    stream = Stream(corpus, chunk_chars, progress)
    counts = np.zeros(size, dtype=np.int64)
    encode = encode_batch(tok)
    words: Counter[str] = Counter()
    split = None  # how a piece becomes words, once the first batch has shown which way is exact
    for batch in stream:
        if split is None:
            whole = _count_ids(encode, batch, size)
            split = next((f for f in (_space_led, _bare) if np.array_equal(
                _count_word_ids(encode, Counter(w for text in batch for w in f(text)), size), whole)), False)
            counts += whole
            logger.info("counting %s", f"each distinct word once ({split.__name__[1:]})" if split else "every piece whole")
        elif split:
            words.update(w for text in batch for w in split(text))
            if len(words) > MAX_WORDS:
                counts += _count_word_ids(encode, words, size)
                words.clear()
        else:
            counts += _count_ids(encode, batch, size)
    if words:
        counts += _count_word_ids(encode, words, size)
    if not counts.any():
        raise InputError(f"{stream.path}: the corpus tokenizes to no token at all; pass a file with the domain's text "
                         "to --corpus")
    return TokenCounts(stream.path, stream.bytes, counts)


def _space_led(text: str) -> list[str]:
    return space_chunks(text)


def _bare(text: str) -> list[str]:
    first, *rest = space_chunks(text)  # every part but the first starts with the space it was cut before
    return [first, *(w[1:] for w in rest)]


def _count_ids(encode, texts: list[str], size: int) -> np.ndarray:
    """(size,) counts of the ids of `texts`, each encoded whole."""
    ids = np.fromiter(itertools.chain.from_iterable(e.ids for e in encode(texts, add_special_tokens=False)), np.int64)
    return np.bincount(ids, minlength=size)[:size]


def _count_word_ids(encode, words: Counter, size: int) -> np.ndarray:
    """(size,) counts of the ids of `words`, each distinct word encoded once and weighted by its count."""
    keys = [w for w in words if w]
    total = np.zeros(size, dtype=np.float64)  # exact below 2**53
    for lo in range(0, len(keys), ENCODE_WORDS):
        part = keys[lo:lo + ENCODE_WORDS]
        ids = [e.ids for e in encode(part, add_special_tokens=False)]
        flat = np.fromiter(itertools.chain.from_iterable(ids), np.int64)
        weights = np.repeat(np.fromiter((words[w] for w in part), np.int64, len(part)),
                            np.fromiter(map(len, ids), np.int64, len(ids)))
        total += np.bincount(flat, weights=weights, minlength=size)[:size]
    return total.astype(np.int64)
