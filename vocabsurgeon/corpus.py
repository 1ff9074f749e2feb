"""Reading text: every command reads a corpus, a keep file or a fit corpus through this module.

Whole files (validation, the fitted init, `add`'s checks, `extend`'s keep text) are read at once
(`read_text`, `read_corpus`, `read_paragraphs`, `read_lines`) and cut into `paragraphs`. A corpus that
`suggest`, `trim` or `extend` counts is streamed (`Stream`) as paragraph-sized texts in bounded batches,
and `count_words` counts its words as the tokenizer's pre-tokenizer cuts them. Every error names the
file and what to do next: a directory, an unreadable file, bytes that are not UTF-8, a file with no text.

Streamed texts are cut at whitespace before a word, where the pre-tokenizers split anyway, so counting the
pieces gives the counts of the whole file.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import logging
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from importlib import resources
from pathlib import Path

from tokenizers import Tokenizer

from .checkpoint.filenames import TOKENIZER_FILE
from .errors import InputError
from .tokenizer.opened import convert_slow_tokenizer
from .tokenizer.encoding import unpadded

logger = logging.getLogger(__name__)

DEFAULT_CHUNK_CHARS = 1 << 20  # characters encoded per batch
MAX_ITEM_CHARS = 8192  # one batch item (a paragraph, or part of a long one): encode_batch runs items in parallel
READ_BYTES = 1 << 20  # bytes per read: memory is a block, whatever the lines
MAX_CHUNKS = 1 << 20  # distinct space-cut chunks held before they are pre-tokenized: bounds memory
PACKAGED_CORPUS = Path(__file__).resolve().parent / "data" / "corpus.txt"


# ---------------------------------------------------------------- whole files


def check_path(path: str | os.PathLike, flag: str = "--corpus") -> Path:
    """`path` as a Path, refused when it is a directory (the one check every reader of text makes first).

        >>> check_path("fixtures")
        Traceback (most recent call last):
        vocabsurgeon.errors.InputError: fixtures: is a directory; pass a UTF-8 text file to --corpus
    """
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{p}: is a directory; pass a UTF-8 text file to {flag}")
    return p


def read_text(path: str | os.PathLike, what: str = "corpus", flag: str = "--corpus") -> tuple[str, str]:
    """A user's UTF-8 text file (`what`, given to `flag`): its text, as is (a BOM kept), and the sha256 of its bytes.

        >>> read_text("fixtures/corpus_lotr.txt")[0][:5]
        'Frodo'

    Raises:
        InputError: a directory, a file that cannot be read or is not UTF-8 (naming the byte).
    """
    p = check_path(path, flag)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise InputError(f"{p}: cannot read the {what} ({e.strerror}); pass a UTF-8 text file to {flag}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _not_utf8(p, e.start, what) from None
    return text, hashlib.sha256(data).hexdigest()


def read_corpus(path: str | os.PathLike | None = None, what: str = "corpus", flag: str = "--corpus") -> tuple[str, str]:
    """A corpus read whole and its name: the file at `path`, or the packaged default corpus ("default").

        >>> read_corpus()[1]
        'default'

    Raises:
        InputError: as `read_text`, or the file holds no text.
    """
    if path is None:
        return resources.files("vocabsurgeon").joinpath("data/corpus.txt").read_text(encoding="utf-8"), "default"
    text, _ = read_text(path, what, flag)
    if not text.strip():
        raise _empty(path, what, flag, "with some text")
    return text, str(path)


def paragraphs(text: str) -> list[str]:
    """The paragraphs of a text (blank-line separated, blank ones dropped): the unit every reader of a corpus
    windows, and the packaged corpus's even/odd split (fitted on / held out) counts.

        >>> paragraphs("a b\\n\\n \\n\\nc\\nd\\n")
        ['a b', 'c\\nd\\n']
    """
    return [p for p in text.split("\n\n") if p.strip()]


def read_paragraphs(path: str | os.PathLike, what: str = "corpus", flag: str = "--corpus") -> list[str]:
    """The `paragraphs` of a small UTF-8 file (a BOM dropped), or its non-blank lines when it has one paragraph.

        >>> len(read_paragraphs(PACKAGED_CORPUS)) > 1
        True

    Raises:
        InputError: as `read_text`.
    """
    text = read_text(path, what, flag)[0].removeprefix("\ufeff")
    parts = paragraphs(text)
    return parts if len(parts) > 1 else [p for p in text.splitlines() if p.strip()]


def read_lines(path: str | os.PathLike, what: str = "corpus", flag: str = "--corpus") -> list[str]:
    """The lines of a UTF-8 file (a BOM dropped) with their ends: every character of it, blank lines too.

        >>> read_lines(PACKAGED_CORPUS)[0].endswith("\\n")
        True
    """
    return read_text(path, what, flag)[0].removeprefix("\ufeff").splitlines(keepends=True)


def _not_utf8(path: Path, at: int, what: str = "corpus") -> InputError:
    return InputError(f"{path}: invalid UTF-8 at byte {at}; save the {what} as UTF-8")


def _empty(path, what: str, flag: str, need: str) -> InputError:
    return InputError(f"{path}: the {what} is empty; pass a UTF-8 text file {need} to {flag}")


# ---------------------------------------------------------------- streamed files


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
        decoder = codecs.getincrementaldecoder("utf-8")()
        limit = self.item_chars
        pending = ""  # the current paragraph's text not yet given out
        before = ""  # the line's text before `pending`, given out already ("x" for any with text)
        try:
            f = open(self.path, "rb")  # noqa: SIM115 (closed by the with below; a missing file is an InputError)
        except OSError as e:
            raise InputError(f"{self.path}: cannot read the corpus ({e.strerror}); pass a UTF-8 text file to "
                             "--corpus") from None
        with f:
            # the BOM skipped here, not by a utf-8-sig decoder: error positions stay file offsets
            if f.read(len(codecs.BOM_UTF8)) == codecs.BOM_UTF8:
                self.pos = len(codecs.BOM_UTF8)
            else:
                f.seek(0)
            while True:
                raw = f.read(READ_BYTES)
                held = len(decoder.getstate()[0])
                try:
                    text = decoder.decode(raw, final=not raw)
                except UnicodeDecodeError as e:
                    raise _not_utf8(self.path, self.pos - held + e.start) from None
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


class Stream:
    """A corpus file streamed for counting: batches (lists) of paragraph-sized texts of about `chunk_chars`
    characters in all, the bytes read reported to `progress` after each; `bytes` is its UTF-8 bytes (a BOM
    excluded), known at the end. `need` says what a file must hold, in the error for one without text.

        >>> s = Stream("fixtures/corpus_lotr.txt")
        >>> sum(len(t) for batch in s for t in batch) > 0 and s.bytes > 0
        True

    Raises (iterating):
        InputError: a directory, a file that cannot be read, is not UTF-8 (naming the byte) or is empty.
    """

    def __init__(self, corpus: str | os.PathLike, chunk_chars: int = DEFAULT_CHUNK_CHARS,
                 progress: Callable[[int], None] | None = None, need: str = "with the domain's text"):
        self.path = check_path(corpus)
        if chunk_chars < 1:
            raise InputError(f"chunk size must be positive, got {chunk_chars}")
        self.chunk_chars = chunk_chars
        self.progress = progress
        self.need = need
        self.reader = Reader(self.path, min(chunk_chars, MAX_ITEM_CHARS))

    @property
    def bytes(self) -> int:
        return self.reader.bytes

    def __iter__(self) -> Iterator[list[str]]:
        reader, reported = self.reader, 0
        for batch in batches(reader, self.chunk_chars):
            yield batch
            if self.progress:
                self.progress(reader.pos - reported)
                reported = reader.pos
        if self.progress and reader.pos > reported:
            self.progress(reader.pos - reported)
        if reader.bytes == 0:
            raise _empty(self.path, "corpus", "--corpus", self.need)


# ---------------------------------------------------------------- words

_SPACE_CUT = re.compile(r"(?<=\S)(?= )")  # before a space that follows a word: "a  b" is "a", "  b"


def space_chunks(text: str) -> list[str]:
    """`text` cut before every space that follows a word: what the counters count once per distinct chunk.

        >>> space_chunks("a  b c")
        ['a', '  b', ' c']
    """
    return _SPACE_CUT.split(text)


def pre_tokens(tok: Tokenizer, split: re.Pattern | None = None) -> Callable[[str], list[str]]:
    """A text -> its pre-tokens in the model's spelling: the tokenizer's normalizer, then its pre-tokenizer,
    exactly as `encode` runs them before the model (added tokens are not split out first); with `split`, each
    pre-token is cut further there (`extend.learn.word_split`)."""
    norm = tok.normalizer.normalize_str if tok.normalizer is not None else None
    pre = tok.pre_tokenizer.pre_tokenize_str if tok.pre_tokenizer is not None else None
    cut = split.split if split is not None else None

    def run(text: str) -> list[str]:
        if norm is not None:
            text = norm(text)
        words = [text] if pre is None else [p for p, _ in pre(text)]
        return words if cut is None else [w for p in words for w in cut(p) if w]

    return run


def words_of(tok: Tokenizer, texts: Iterable[str], split: re.Pattern | None = None) -> Counter:
    """The pre-tokens of `texts` (`pre_tokens`), counted, in the order they first occur."""
    run = pre_tokens(tok, split)
    out: Counter = Counter()
    for text in texts:
        out.update(run(text))
    return out


def count_words(tok: Tokenizer, corpus: str | os.PathLike, *, chunk_chars: int = DEFAULT_CHUNK_CHARS,
                split: re.Pattern | None = None, progress: Callable[[int], None] | None = None,
                need: str = "with the domain's text") -> tuple[Counter, int]:
    """(pre-token -> count, UTF-8 bytes read) of a corpus file, streamed: `words_of` the whole file, in the
    order words first occur.

    Most text is few distinct words used many times: each paragraph is cut before every space that follows
    a word (`space_chunks`), the distinct chunks counted, and each chunk pre-tokenized once. That is exact only
    where the pipeline gives a chunk the same pre-tokens alone as in its text (byte-level regexes do; a
    Metaspace that prepends to the first piece only does not): the first batch is counted both ways, and
    chunks are used only where they agree; otherwise every paragraph is pre-tokenized whole.

        >>> from vocabsurgeon.corpus import counting_tokenizer
        >>> words, _ = count_words(counting_tokenizer("fixtures/gpt2-tiny"), "fixtures/corpus_lotr.txt")
        >>> words["ĠFrodo"] > 0
        True

    Raises:
        InputError: as `Stream`.
    """
    stream = Stream(corpus, chunk_chars, progress, need)
    run = pre_tokens(tok, split)
    words: Counter = Counter()
    chunks: Counter = Counter()
    by_chunk = None

    def add(counts: Counter, into: Counter) -> Counter:
        """Each distinct chunk pre-tokenized once (the Rust pre-tokenizer is the cost), its words weighted."""
        get = into.get
        if tok.normalizer is None and tok.pre_tokenizer is not None and split is None:  # byte-level: no wrapper
            pre = tok.pre_tokenizer.pre_tokenize_str
            for chunk, n in counts.items():
                for w, _ in pre(chunk):
                    into[w] = get(w, 0) + n
            return into
        for chunk, n in counts.items():
            for w in run(chunk):
                into[w] = get(w, 0) + n
        return into

    for batch in stream:
        if by_chunk is None:
            words = words_of(tok, batch, split)
            by_chunk = add(Counter([c for text in batch for c in space_chunks(text)]), Counter()) == words
            logger.info("counting words %s", "by distinct space-cut chunk" if by_chunk else "paragraph by paragraph")
        elif by_chunk:
            chunks.update([c for text in batch for c in space_chunks(text)])
            if len(chunks) > MAX_CHUNKS:
                add(chunks, words)
                chunks.clear()
        else:
            for text in batch:
                words.update(run(text))
    add(chunks, words)
    return words, stream.bytes
