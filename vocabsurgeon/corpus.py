"""Reading a corpus to count it with a tokenizer (`suggest`, `trim`, `extend`): a UTF-8 file streamed as
paragraph-sized texts in bounded batches, and the checkpoint's tokenizer set to encode whole texts.

Texts are cut at whitespace before a word, where the pre-tokenizers split anyway, so counting the pieces
gives the counts of the whole file.
"""

from __future__ import annotations

import codecs
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

from tokenizers import Tokenizer

from .checkpoint.filenames import TOKENIZER_FILE
from .errors import InputError
from .tokenizer.opened import convert_slow_tokenizer
from .tokenizer.encoding import unpadded

DEFAULT_CHUNK_CHARS = 1 << 20  # characters encoded per batch
MAX_ITEM_CHARS = 8192  # one batch item (a paragraph, or part of a long one): encode_batch runs items in parallel
READ_BYTES = 1 << 20  # bytes per read: memory is a block, whatever the lines


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
    """Streams a UTF-8 file as paragraph-sized texts; `pos` is the byte position reached.

    A paragraph starts at a line with text that follows a blank line (whitespace only); the blank lines end the
    paragraph before (leading ones are an item of their own). A paragraph longer than `item_chars` is given in
    pieces cut by `_cut`, each as long as it can be. The file is read in blocks and paragraphs found by one
    regex over each (not line by line in Python: reading was a fifth of `extend`'s counting).
    """

    def __init__(self, path: Path, item_chars: int):
        self.path = path
        self.item_chars = item_chars
        self.pos = 0
        self.bytes = 0  # UTF-8 bytes of text (BOM excluded), known at the end

    def __iter__(self) -> Iterator[str]:
        decoder = codecs.getincrementaldecoder("utf-8-sig")()
        limit = self.item_chars
        pending = ""  # the current paragraph's text not yet given out
        before = ""  # the line's text before `pending`, given out already ("x" for any with text)
        try:
            f = open(self.path, "rb")  # noqa: SIM115 (closed by the with below; a missing file is an InputError)
        except OSError as e:
            raise InputError(f"{self.path}: cannot read the corpus ({e.strerror}); check the path") from None
        with f:
            bom = f.read(len(codecs.BOM_UTF8)) == codecs.BOM_UTF8
            f.seek(0)
            while True:
                raw = f.read(READ_BYTES)
                held = len(decoder.getstate()[0])
                try:
                    text = decoder.decode(raw, final=not raw)
                except UnicodeDecodeError as e:
                    raise InputError(f"{self.path}: invalid UTF-8 near byte {max(0, self.pos - held + e.start)}; "
                                     "save the corpus as UTF-8") from None
                if self.pos == 0 and bom:
                    self.bytes -= len(codecs.BOM_UTF8)
                self.pos += len(raw)
                self.bytes += len(raw)
                if not raw:
                    break
                if not text:
                    continue
                text = before + pending + text
                start = len(before)
                for m in _PARAGRAPH.finditer(text):  # each ends a paragraph (`before` has no "\n")
                    end = m.end()
                    if end - start <= limit:
                        yield text[start:end]
                    else:
                        yield from _pieces(text[start:end], limit)
                    start = end
                # The start of the last line is a paragraph start or not once that line has text; until then
                # only the text before it is known to be in this paragraph.
                line = text.rfind("\n", start) + 1  # 0: the last line starts in `before` or is the first
                known = len(text) if text[line:].strip() else line
                while known - start > limit:
                    cut = start + _cut(text[start:start + limit + 1], limit)
                    yield text[start:cut]
                    start = cut
                # a blank line may have been cut: its part already given out still counts for the regex
                before = text[text.rfind("\n", 0, start) + 1:start]
                before, pending = ("x" if before.strip() else before), text[start:]
        yield from _pieces(pending, limit)


# a blank line (whitespace only, "\n" ended) followed by a line with text: the paragraph before ends here
_PARAGRAPH = re.compile(r"^[^\S\n]*\n(?=[^\S\n]*\S)", re.MULTILINE)


def _pieces(paragraph: str, limit: int) -> Iterator[str]:
    while len(paragraph) > limit:
        cut = _cut(paragraph, limit)
        yield paragraph[:cut]
        paragraph = paragraph[cut:]
    if paragraph:
        yield paragraph


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
