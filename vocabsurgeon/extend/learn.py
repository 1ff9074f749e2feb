"""Continuing a BPE tokenizer's training: the corpus's pre-tokenized words counted once, then merges learned
after the existing ones by the standard trainer's algorithm.

Each distinct word (a pre-token of the tokenizer's own normalizer and pre-tokenizer, in the model's spelling:
"Ġслово", "▁слово") is counted once and split by the existing model into its pieces: the pieces every old merge
leaves. Then, as the `tokenizers` and SentencePiece trainers do, the most frequent adjacent pair is merged in
every word, N times; pair counts are kept incrementally (an index pair -> words and a heap with lazy deletion),
so a merge costs the words that hold its pair, not the corpus. Memory is the distinct words and their pairs.

Every new merge ranks after all old merges, so encoding a word first runs every old merge (giving the pieces
counted here) and only then the new ones: text changes only where a new merge's pair occurs after the old
merges are done. Pairs are refused where the result would not be a new piece of that kind: a piece the
vocabulary has (an old merge could then apply after a new one), a byte-fallback or special piece, and, with
`forbidden` pairs (the words of --keep-text and of the chat template), any pair that would change those words.
"""

from __future__ import annotations

import heapq
import logging
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tokenizers import Tokenizer

from ..corpus import DEFAULT_CHUNK_CHARS, MAX_ITEM_CHARS, Reader, batches
from ..errors import InputError

logger = logging.getLogger(__name__)

_WORD = re.compile(r"(?<=\S)(?= )")  # before a space that follows a word: "a  b" is "a", "  b"
MAX_CHUNKS = 1 << 20  # distinct space-cut chunks held before they are pre-tokenized: bounds memory
BYTE_PIECE = re.compile(r"<0x[0-9A-Fa-f]{2}>")  # byte-fallback pieces: not text, never merged


def words_of(tok: Tokenizer, texts: Iterable[str], split: re.Pattern | None = None) -> Counter:
    """The pre-tokens of `texts` in the model's spelling, counted: the tokenizer's normalizer, then its
    pre-tokenizer, exactly as `encode` runs them before the model (added tokens are not split out first);
    with `split`, each pre-token is cut further there (`word_split`)."""
    norm, pre = tok.normalizer, tok.pre_tokenizer
    out: Counter = Counter()
    for text in texts:
        if norm is not None:
            text = norm.normalize_str(text)
        words = [text] if pre is None else [p for p, _ in pre.pre_tokenize_str(text)]
        if split is not None:
            words = [w for p in words for w in split.split(p) if w]
        out.update(words)
    return out


_BEFORE_SPACE = re.compile("(?<=[^▁])(?=▁)")  # before a run of "▁" that follows other text
_ACROSS_SPACE = re.compile("[^▁]▁")


def word_split(vocab: Iterable[str]) -> re.Pattern | None:
    """Where a SentencePiece layout that keeps a whole text in one pre-token (Llama 2: no pre-tokenizer) may be
    cut into words, as SentencePiece's trainer cuts it: before each run of "▁" after other text. Exact for
    encoding only where no piece spans such a place (none has "▁" after another character), which holds for
    the new pieces too since they are learned inside words; None where an old piece does (then whole texts)."""
    return None if any(_ACROSS_SPACE.search(p) for p in vocab) else _BEFORE_SPACE


def count_words(tok: Tokenizer, corpus, *, chunk_chars: int = DEFAULT_CHUNK_CHARS, split: re.Pattern | None = None,
                progress: Callable[[int], None] | None = None) -> tuple[Counter, int]:
    """(pre-token -> count, UTF-8 bytes read) of a corpus file, streamed.

    Most text is few distinct words used many times: each paragraph is cut before every space that follows
    a word, the distinct chunks counted, and each chunk pre-tokenized once. That is exact only where the
    pipeline gives a chunk the same pre-tokens alone as in its text (byte-level regexes do; a Metaspace that
    prepends to the first piece only does not): the first batch is counted both ways, and chunks are used
    only where they agree; otherwise every paragraph is pre-tokenized whole.

    Raises:
        InputError: the corpus cannot be read, is not UTF-8, or is empty.
    """
    from pathlib import Path

    path = Path(corpus)
    if path.is_dir():
        raise InputError(f"{path}: is a directory; pass a UTF-8 text file as --corpus")
    reader = Reader(path, min(chunk_chars, MAX_ITEM_CHARS))
    words: Counter = Counter()
    chunks: Counter = Counter()
    by_chunk = None
    reported = 0

    def flush() -> None:
        for chunk, n in chunks.items():
            for w, m in words_of(tok, [chunk], split).items():
                words[w] += n * m
        chunks.clear()

    for batch in batches(reader, chunk_chars):
        if by_chunk is None:
            whole = words_of(tok, batch, split)
            cut = Counter(c for text in batch for c in _WORD.split(text))
            by_chunk = _weighted(tok, cut, split) == whole
            words.update(whole)
            logger.info("counting words %s", "by distinct space-cut chunk" if by_chunk else "paragraph by paragraph")
        elif by_chunk:
            chunks.update(c for text in batch for c in _WORD.split(text))
            if len(chunks) > MAX_CHUNKS:
                flush()
        else:
            words.update(words_of(tok, batch, split))
        if progress:
            progress(reader.pos - reported)
            reported = reader.pos
    flush()
    if reader.bytes == 0:
        raise InputError(f"{path}: the corpus is empty; pass a UTF-8 text file in the new language or domain")
    return words, reader.bytes


def _weighted(tok: Tokenizer, chunks: Counter, split: re.Pattern | None) -> Counter:
    out: Counter = Counter()
    for chunk, n in chunks.items():
        for w, m in words_of(tok, [chunk], split).items():
            out[w] += n * m
    return out


def _find(s: list[int], a: int, b: int, start: int, m: int) -> int:
    """The first k >= start with s[k], s[k + 1] == a, b, or -1."""
    k = start
    while True:
        try:
            k = s.index(a, k, m - 1)
        except ValueError:
            return -1
        if s[k + 1] == b:
            return k
        k += 1


@dataclass
class Learned:
    """The merges learned, in order, with the count of each when it was chosen, and what was refused."""

    merges: list[tuple[str, str]]
    counts: list[int]
    chars: list[str] = field(default_factory=list)  # characters the vocabulary lacked, added as pieces first
    refused: dict[str, int] = field(default_factory=dict)  # reason -> pairs refused for it
    words: int = 0  # distinct words the corpus has
    tokens_before: int = 0  # the corpus's tokens under the old merges (pre-token pieces, weighted)
    tokens_after: int = 0  # ... and after the new ones

    @property
    def pieces(self) -> list[str]:
        """Every new piece, in id order: the characters, then what each merge makes."""
        return self.chars + [a + b for a, b in self.merges]


class _Symbols:
    """Piece strings <-> small ints (ints hash and compare faster than strings in the pair index)."""

    def __init__(self):
        self.of: dict[str, int] = {}
        self.text: list[str] = []

    def __call__(self, piece: str) -> int:
        i = self.of.get(piece)
        if i is None:
            i = self.of[piece] = len(self.text)
            self.text.append(piece)
        return i


def learn_merges(tok: Tokenizer, words: Counter, n: int, *, vocab: dict[str, int], mergeable: Callable[[str], bool],
                 forbidden_words: Iterable[str] = (), whole_words: bool = False, min_count: int = 2,
                 new_chars: bool = False) -> Learned:
    """Learn up to `n` merges after the old ones of `tok`'s BPE model from pre-token counts `words`.

    Args:
        tok: the tokenizer (its model splits each word into the pieces the old merges leave).
        words: pre-token (model spelling) -> count, from `count_words`.
        n: merges to learn at most (fewer when no pair occurs `min_count` times).
        vocab: the model's piece -> id (added tokens too): a merge never makes a piece it has.
        mergeable: whether a piece may take part in a merge (False: byte-fallback, special, unknown pieces).
        forbidden_words: pre-tokens that must keep their pieces (--keep-text, the chat template): no merge
            takes a pair they hold.
        whole_words: the model has `ignore_merges` (a word that is a vocabulary entry is taken whole): no
            merge makes a piece that spells a forbidden word.
        min_count: the least count a merge (or a new character) must have.
        new_chars: the model spells characters it lacks as bytes or the unknown piece (SentencePiece BPE): each
            that occurs `min_count` times becomes a piece first (as SentencePiece's trainer covers the
            characters of its corpus), most frequent first, then merges fill the rest of the `n`.
    """
    sym = _Symbols()
    model = tok.model
    forbidden_words = list(forbidden_words)
    refused: dict[str, int] = {}
    chars: list[str] = []
    if new_chars:
        counts: Counter = Counter()
        for w, c in words.items():
            for ch in w:
                if ch not in vocab:
                    counts[ch] += c
        kept = {ch for w in forbidden_words for ch in w}
        for ch, c in counts.most_common():
            if c < min_count or len(chars) >= n:
                break
            if ch in kept:
                refused["a character of --keep-text or the chat template"] = refused.get(
                    "a character of --keep-text or the chat template", 0) + 1
            else:
                chars.append(ch)
    added = set(chars)

    def pieces(w: str) -> list[str]:
        """`w`'s pieces after the old merges, with the new characters as pieces: merges never span a character
        the vocabulary lacks, so the runs between new characters split as they do in the word."""
        if not added or added.isdisjoint(w):
            return [t.value for t in model.tokenize(w)]
        out, start = [], 0
        for i, ch in enumerate(w):
            if ch in added:
                out += [t.value for t in model.tokenize(w[start:i])] if i > start else []
                out.append(ch)
                start = i + 1
        return out + ([t.value for t in model.tokenize(w[start:])] if start < len(w) else [])

    seqs: list[list[int]] = []
    freqs: list[int] = []
    before = 0
    for w, c in words.items():
        seqs.append([sym(t) for t in pieces(w)])
        freqs.append(c)
        before += c * (len(model.tokenize(w)) if added else len(seqs[-1]))
    blocked: set[tuple[int, int]] = set()
    keep_spellings: set[str] = set()
    for w in forbidden_words:
        s = [sym(t) for t in pieces(w)]
        blocked.update(zip(s, s[1:]))
        if whole_words:
            keep_spellings.add(w)
    ok_symbol = [mergeable(t) for t in sym.text]
    pair_count: dict[tuple[int, int], int] = {}
    where: dict[tuple[int, int], set[int]] = {}
    for i, (s, f) in enumerate(zip(seqs, freqs)):
        for p in zip(s, s[1:]):
            pair_count[p] = pair_count.get(p, 0) + f
            ws = where.get(p)
            if ws is None:
                where[p] = {i}
            else:
                ws.add(i)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)
    made: set[str] = set(chars)
    learned = Learned([], [], chars, refused, words=len(seqs), tokens_before=before)
    touched: set[tuple[int, int]] = set()

    def inc(q: tuple[int, int], i: int, f: int) -> None:
        pair_count[q] = pair_count.get(q, 0) + f
        ws = where.get(q)
        if ws is None:
            where[q] = {i}
        else:
            ws.add(i)
        touched.add(q)

    while len(chars) + len(learned.merges) < n and heap:
        negc, p = heapq.heappop(heap)
        c = pair_count.get(p, 0)
        if c != -negc:  # stale: the count fell since it was pushed; push it again with its count
            if c > 0:
                heapq.heappush(heap, (-c, p))
            continue
        if c < min_count:
            break
        a, b = p
        piece = sym.text[a] + sym.text[b]
        why = None
        if p in blocked:
            why = "would change --keep-text or the chat template"
        elif not (ok_symbol[a] and ok_symbol[b]):
            why = "a byte-fallback or special piece"
        elif piece in vocab or piece in made:
            why = "the vocabulary has the piece already"
        elif piece in keep_spellings:
            why = "spells a word of --keep-text (ignore_merges would take it whole)"
        if why is not None:
            refused[why] = refused.get(why, 0) + 1
            pair_count.pop(p, None)  # never chosen again; the words keep the pair
            where.pop(p, None)
            continue
        new = sym(piece)
        ok_symbol.append(True)
        made.add(piece)
        learned.merges.append((sym.text[a], sym.text[b]))
        learned.counts.append(c)
        # Only the pairs beside each occurrence change: (x, a) becomes (x, new) and (b, y) becomes (new, y).
        # A word that no longer holds a pair stays in its index entry (scanned for nothing later), as the
        # Rust trainer's index does; occurrences are found with list.index (C speed), left to right.
        for i in where.pop(p, ()):
            s, f = seqs[i], freqs[i]
            m = len(s)
            out: list[int] = []
            j = 0
            prev_end = -1  # where the last merge of this word ended: a neighbour there is `new`, not `b`
            while True:
                k = _find(s, a, b, j, m)
                if k < 0:
                    out.extend(s[j:])
                    break
                out.extend(s[j:k])
                if out:
                    if k == prev_end:  # "a b a b": the (b, a) between was counted off by the merge before
                        inc((new, new), i, f)
                    else:
                        q = (s[k - 1], a)
                        if q != p and q in pair_count:
                            pair_count[q] -= f
                        inc((out[-1], new), i, f)
                if k + 2 < m:
                    y = s[k + 2]
                    q = (b, y)
                    if q != p and q in pair_count:
                        pair_count[q] -= f
                    if not (y == a and k + 3 < m and s[k + 3] == b):  # else: (new, new), counted there
                        inc((new, y), i, f)
                out.append(new)
                j = prev_end = k + 2
            if len(out) != m:
                seqs[i] = out
        pair_count.pop(p, None)
        for q in touched:
            heapq.heappush(heap, (-pair_count[q], q))
        touched.clear()
    learned.tokens_after = sum(len(s) * f for s, f in zip(seqs, freqs))
    return learned
