"""Reading a corpus to count it with a tokenizer (`suggest`, `trim`, `extend`): a UTF-8 file streamed as
paragraph-sized texts in bounded batches, and the checkpoint's tokenizer set to encode whole texts.

Texts are cut at whitespace before a word, where the pre-tokenizers split anyway, so counting the pieces
gives the counts of the whole file.
"""

from __future__ import annotations

import codecs
import json
import os
from collections.abc import Iterator
from pathlib import Path

from tokenizers import Tokenizer

from .checkpoint.filenames import TOKENIZER_FILE
from .errors import InputError
from .tokenizer.editor import convert_slow_tokenizer
from .tokenizer.encoding import unpadded

DEFAULT_CHUNK_CHARS = 1 << 20  # characters encoded per batch
MAX_ITEM_CHARS = 8192  # one batch item (a paragraph, or part of a long one): encode_batch runs items in parallel
READ_BYTES = 1 << 16  # bytes per read: a file without newlines is still read in bounded pieces


def counting_tokenizer(directory: str | os.PathLike) -> Tokenizer:
    """The checkpoint's tokenizer, set to encode whole texts: no padding, no truncation, no post-processor.

    tokenizer.json may ship padding and truncation (sentence-transformers models do): truncation
    would drop the end of every paragraph from the counts. The post-processor only adds special
    tokens (not wanted here) and may trim offsets.
    """
    directory = Path(directory)
    file = directory / TOKENIZER_FILE
    try:
        if file.exists():
            tok = Tokenizer.from_file(str(file))
        else:  # a slow-only checkpoint: converted as `add` converts it (raises InputError when it cannot)
            tok = Tokenizer.from_str(json.dumps(convert_slow_tokenizer(directory)[0]))
    except InputError:
        raise
    except Exception as e:  # noqa: BLE001 (the Rust parser raises plain Exception subclasses)
        raise InputError(f"{file}: the tokenizers library cannot load it ({e}); re-download it") from None
    tok = unpadded(tok)
    tok.post_processor = None
    return tok


class Reader:
    """Streams a UTF-8 file as paragraph-sized texts; `pos` is the byte position reached."""

    def __init__(self, path: Path, item_chars: int):
        self.path = path
        self.item_chars = item_chars
        self.pos = 0
        self.bytes = 0  # UTF-8 bytes of text (BOM excluded), known at the end

    def __iter__(self) -> Iterator[str]:
        decoder = codecs.getincrementaldecoder("utf-8-sig")()
        buf = ""  # the current paragraph, not yet given out
        line = ""  # the current line so far (a long line arrives in pieces)
        has_text = False  # the current line has a non-whitespace character
        blank = False  # a blank line came last: the next line with text starts a paragraph
        try:
            f = open(self.path, "rb")  # noqa: SIM115 (closed by the with below; a missing file is an InputError)
        except OSError as e:
            raise InputError(f"{self.path}: cannot read the corpus ({e.strerror}); check the path") from None
        with f:
            while True:
                raw = f.readline(READ_BYTES)
                held = len(decoder.getstate()[0])
                try:
                    text = decoder.decode(raw, final=not raw)
                except UnicodeDecodeError as e:
                    raise InputError(f"{self.path}: invalid UTF-8 near byte {max(0, self.pos - held + e.start)}; "
                                     "save the corpus as UTF-8") from None
                if self.pos == 0 and raw.startswith(codecs.BOM_UTF8):
                    self.bytes -= len(codecs.BOM_UTF8)
                self.pos += len(raw)
                self.bytes += len(raw)
                if not raw:
                    break
                line += text
                if not has_text and line.strip():
                    has_text = True
                    if blank and buf:
                        yield buf
                        buf = ""
                    blank = False
                if line.endswith("\n"):
                    blank = not has_text
                    buf, line, has_text = buf + line, "", False
                elif len(line) > self.item_chars:  # a long line: its part so far joins the paragraph
                    buf, line = buf + line, ""
                while len(buf) > self.item_chars:
                    cut = _cut(buf, self.item_chars)
                    yield buf[:cut]
                    buf = buf[cut:]
        buf += line
        while len(buf) > self.item_chars:
            cut = _cut(buf, self.item_chars)
            yield buf[:cut]
            buf = buf[cut:]
        if buf:
            yield buf


def _cut(text: str, limit: int) -> int:
    """Where to cut `text` (at most `limit` characters before): at the last whitespace character that
    is followed by a non-whitespace one, so the next part starts with " word" (or "\\nword"), as the
    pre-tokenizers split. A run of `limit` characters without such a place is cut at `limit`."""
    for i in range(limit, 0, -1):
        if text[i - 1].isspace() and i < len(text) and not text[i].isspace():
            return i - 1 if i - 1 > 0 else limit
    return limit


def batches(reader: Reader, chunk_chars: int) -> Iterator[list[str]]:
    batch: list[str] = []
    size = 0
    for item in reader:
        batch.append(item)
        size += len(item)
        if size >= chunk_chars:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch
