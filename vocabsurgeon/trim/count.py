"""How a corpus uses a vocabulary: every token id counted under the original fast tokenizer, streamed.

The corpus is read in bounded paragraph-sized pieces and encoded in batches (`suggest`'s reader: cut at
whitespace before a word, where the pre-tokenizers split anyway), so memory is one batch plus one count
per id, whatever the corpus size.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from ..errors import InputError
from ..explore.suggest import DEFAULT_CHUNK_CHARS, MAX_ITEM_CHARS, _batches, _Reader
from ..tokenizer.encoding import encode_batch


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
    """Count every token id of `corpus` under `tok` (from `suggest.counting_tokenizer`: no padding,
    truncation or special tokens); `size` is the number of ids.

    Raises:
        InputError: the corpus cannot be read, is not UTF-8, is empty, or tokenizes to nothing.
    """
    path = Path(corpus)
    if path.is_dir():
        raise InputError(f"{path}: is a directory; pass a UTF-8 text file as --corpus")
    reader = _Reader(path, min(chunk_chars, MAX_ITEM_CHARS))
    counts = np.zeros(size, dtype=np.int64)
    encode, reported = encode_batch(tok), 0
    for batch in _batches(reader, chunk_chars):
        ids = [i for enc in encode(batch, add_special_tokens=False) for i in enc.ids]
        if ids:  # one bincount per batch: a (size,) array per paragraph would cost more than the encoding
            counts += np.bincount(np.asarray(ids, dtype=np.int64), minlength=size)[:size]
        if progress:
            progress(reader.pos - reported)
            reported = reader.pos
    if reader.bytes == 0:
        raise InputError(f"{path}: the corpus is empty; pass a UTF-8 text file with the domain's text to --corpus")
    if not counts.any():
        raise InputError(f"{path}: the corpus tokenizes to no token at all; pass a file with the domain's text "
                         "to --corpus")
    return TokenCounts(path, reader.bytes, counts)
