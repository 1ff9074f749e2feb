"""Continuing a BPE tokenizer's training: the corpus's pre-tokenized words counted once (`corpus.count_words`),
then merges learned after the existing ones by the standard trainer's algorithm.

Each distinct word (a pre-token of the tokenizer's own normalizer and pre-tokenizer, in the model's spelling:
"Ġслово", "▁слово") is counted once and split by the existing model into its pieces: the pieces every old merge
leaves. Then, as the `tokenizers` and SentencePiece trainers do, the most frequent adjacent pair is merged in
every word, N times; pair counts are kept incrementally (an index pair -> words and a heap with lazy deletion),
so a merge costs the words that hold its pair, not the corpus. Memory is the distinct words and their pairs.
Among pairs of equal count, the one whose pieces occurred first in the corpus is merged.

Every new merge ranks after all old merges, so encoding a word first runs every old merge (giving the pieces
counted here) and only then the new ones: text changes only where a new merge's pair occurs after the old
merges are done. Pairs are refused where the result would not be a new piece of that kind: a piece the
vocabulary has (an old merge could then apply after a new one), a byte-fallback or special piece, and, with
`forbidden` pairs (the words of the chat template), any pair that would change those words.

With `keep_chars` (the characters of --keep-text in the model's spelling: bytes for byte-level BPE), a new piece
must hold a character outside them. Encoding joins pieces of the text itself, so a text whose spelling holds only
those characters never holds a new piece's string, and no new merge, new character or (with `ignore_merges`) new
whole-word entry can apply to it: it keeps its tokens, the keep file's and any other such text alike.
"""

from __future__ import annotations

import heapq
from array import array
import logging
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
from tokenizers import Tokenizer

from ..errors import InputError

logger = logging.getLogger(__name__)

BYTE_PIECE = re.compile(r"<0x[0-9A-Fa-f]{2}>")  # byte-fallback pieces: not text, never merged


_BEFORE_SPACE = re.compile("(?<=[^▁])(?=▁)")  # before a run of "▁" that follows other text
_ACROSS_SPACE = re.compile("[^▁]▁")


def word_split(vocab: Iterable[str]) -> re.Pattern | None:
    """Where a SentencePiece layout that keeps a whole text in one pre-token (Llama 2: no pre-tokenizer) may be
    cut into words, as SentencePiece's trainer cuts it: before each run of "▁" after other text. Exact for
    encoding only where no piece spans such a place (none has "▁" after another character), which holds for
    the new pieces too since they are learned inside words; None where an old piece does (then whole texts)."""
    return None if any(_ACROSS_SPACE.search(p) for p in vocab) else _BEFORE_SPACE


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




# Symbols are the characters of a str: a word is a str of its pieces' symbols, so finding a pair is `str.find` and
# merging it everywhere is `str.replace` (C speed, left to right and non-overlapping, as the trainers merge), and a
# pair is a 2-character str (hashed fast, and ordered as its two symbols are). Symbol k is the code point k, past
# the surrogates from 0xD800 on (a str holds them, but they would not survive the UTF-32 decode used to build it).
_SURROGATES = 0xD800
MAX_SYMBOLS = 0x110000 - 0x800


def _char(k: int) -> str:
    return chr(k if k < _SURROGATES else k + 0x800)


def _symbol(c: str) -> int:
    k = ord(c)
    return k if k < _SURROGATES else k - 0x800


def _text(symbols: np.ndarray) -> str:
    """The str whose characters are `symbols`."""
    cps = symbols.astype(np.uint32)
    cps[cps >= _SURROGATES] += 0x800
    return cps.astype("<u4").tobytes().decode("utf-32-le")


KEEP_CHARS = "a character of --keep-text"
KEEP_PIECE = "only --keep-text's characters (a text of them would change)"
CHAT_CHARS = "a character of the chat template"
CHAT_PAIR = "would change the chat template's text or llama.cpp's check text"
CHAT_WORD = "spells a word of the chat template or llama.cpp's check text (ignore_merges would take it whole)"


def _new_characters(words: Counter, n: int, vocab: dict[str, int], forbidden_words: list[str], keep_chars: set[str],
                    min_count: int, refused: dict[str, int]) -> list[str]:
    """The characters the vocabulary lacks that occur `min_count` times, most frequent first, at most `n`."""
    counts: Counter = Counter()
    for w, c in words.items():
        for ch in w:
            if ch not in vocab:
                counts[ch] += c
    kept = {ch for w in forbidden_words for ch in w}
    chars = []
    for ch, c in counts.most_common():
        if c < min_count or len(chars) >= n:
            break
        why = KEEP_CHARS if ch in keep_chars else CHAT_CHARS if ch in kept else None
        if why is not None:
            refused[why] = refused.get(why, 0) + 1
        else:
            chars.append(ch)
    return chars


def learn_merges(tok: Tokenizer, words: Counter, n: int, *, vocab: dict[str, int], mergeable: Callable[[str], bool],
                 forbidden_words: Iterable[str] = (), keep_chars: Iterable[str] | None = None,
                 whole_words: bool = False, min_count: int = 2, new_chars: bool = False) -> Learned:
    """Learn up to `n` merges after the old ones of `tok`'s BPE model from pre-token counts `words`.

    Among pairs of equal count, the one whose pieces came first wins: pieces are numbered in the order they
    first occur in `words` (in its order, each word left to right; from `count_words`, the corpus's order),
    then the pieces of `forbidden_words`, then the new pieces as they are made; the pair with the lower
    (first, second) numbers is taken.

    Args:
        tok: the tokenizer (its model splits each word into the pieces the old merges leave).
        words: pre-token (model spelling) -> count, from `count_words`.
        n: merges to learn at most (fewer when no pair occurs `min_count` times).
        vocab: the model's piece -> id (added tokens too): a merge never makes a piece it has.
        mergeable: whether a piece may take part in a merge (False: byte-fallback, special, unknown pieces).
        forbidden_words: pre-tokens that must keep their pieces (the chat template's): no merge takes a pair
            they hold.
        keep_chars: the characters (model spelling) of the text that must keep its tokens (--keep-text): every
            new piece holds a character outside them, so no text spelled in them alone can change.
        whole_words: the model has `ignore_merges` (a word that is a vocabulary entry is taken whole): no
            merge makes a piece that spells a forbidden word.
        min_count: the least count a merge (or a new character) must have.
        new_chars: the model spells characters it lacks as bytes or the unknown piece (SentencePiece BPE): each
            that occurs `min_count` times becomes a piece first (as SentencePiece's trainer covers the
            characters of its corpus), most frequent first, then merges fill the rest of the `n`.

    Raises:
        InputError: the corpus has more distinct pieces than `n` new symbols leave room for (over a million).
    """
    forbidden_words = list(forbidden_words)
    keep_chars = set(keep_chars or ())
    refused: dict[str, int] = {}
    chars = _new_characters(words, n, vocab, forbidden_words, keep_chars, min_count, refused) if new_chars else []
    tokenize = tok.model.tokenize
    # ids of the pieces: the model's, and after them one per new character
    base = max(max(vocab.values(), default=0), tok.get_vocab_size(with_added_tokens=True)) + 1
    char_id = {ch: base + j for j, ch in enumerate(chars)}
    split_chars = re.compile("([" + "".join(map(re.escape, chars)) + "])") if chars else None

    def piece_ids(w: str) -> list[int]:
        """`w`'s pieces after the old merges, with the new characters as pieces: merges never span a character
        the vocabulary lacks, so the runs between new characters split as they do in the word."""
        if split_chars is None or char_id.keys().isdisjoint(w):
            return [t.id for t in tokenize(w)]
        out: list[int] = []
        for part in split_chars.split(w):
            if part in char_id:
                out.append(char_id[part])
            elif part:
                out += [t.id for t in tokenize(part)]
        return out

    flat = array("q")  # every word's piece ids, one after the other (8 bytes each, not a Python int)
    lengths = array("q")
    before = 0
    for w, c in words.items():
        ids = piece_ids(w)
        flat.extend(ids)
        lengths.append(len(ids))
        before += c * (len(ids) if split_chars is None or char_id.keys().isdisjoint(w) else len(tokenize(w)))
    n_flat = len(flat)
    blocked_words = [piece_ids(w) for w in forbidden_words]
    for ids in blocked_words:
        flat.extend(ids)
    # symbols numbered by first occurrence
    uniq, first, inverse = np.unique(np.frombuffer(flat, dtype=np.int64), return_index=True, return_inverse=True)
    del flat
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[order] = np.arange(len(uniq))
    symbols = rank[inverse.reshape(-1)]  # (pieces,) the symbol of each piece, in order
    del inverse, first
    n0 = len(uniq)
    if n0 + n > MAX_SYMBOLS:
        raise InputError(f"--new-tokens {n}: the corpus has {n0:,} distinct pieces; at most {MAX_SYMBOLS - n0:,} new "
                         "tokens can be learned from it")
    piece = tok.model.id_to_token  # the model's own spelling of the id, as `tokenize` gives it
    text = [chars[i - base] if i >= base else piece(i) for i in uniq[order].tolist()]  # symbol -> piece
    ok_symbol = [mergeable(t) for t in text]
    # whether a symbol's piece holds a character outside keep_chars (every piece does without --keep-text)
    foreign = [not keep_chars or not keep_chars.issuperset(t) for t in text]
    whole = _text(symbols)
    lengths = np.frombuffer(lengths, dtype=np.int64)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    seqs = [whole[a:b] for a, b in zip(starts.tolist(), ends.tolist())]
    freqs = list(words.values())
    blocked: set[str] = set()
    at = n_flat
    for ids in blocked_words:
        s = whole[at:at + len(ids)]
        at += len(ids)
        blocked.update(s[k:k + 2] for k in range(len(s) - 1))
    keep_spellings = set(forbidden_words) if whole_words else set()
    del whole, starts, ends
    pair_count, index = _pairs(symbols[:n_flat], lengths, np.array(freqs, dtype=np.int64),
                               n0 + n, min_count)
    learned = Learned([], [], chars, refused, words=len(seqs), tokens_before=before)
    _merge(learned, n, seqs, freqs, text, ok_symbol, foreign, pair_count, index, n0, blocked, keep_spellings,
           vocab, min_count)
    learned.tokens_after = sum(len(s) * f for s, f in zip(seqs, freqs))
    return learned


class _Index:
    """Pair -> the words that held it before any new merge, from one sort (a pair of old pieces is never made
    again: every pair a merge makes has the new piece in it)."""

    def __init__(self, codes: np.ndarray, offsets: np.ndarray, word: np.ndarray, size: int):
        self.codes, self.offsets, self.word, self.size = codes, offsets, word, size

    def words(self, pair: str) -> list[int]:
        code = _symbol(pair[0]) * self.size + _symbol(pair[1])
        u = int(np.searchsorted(self.codes, code))
        if u == len(self.codes) or self.codes[u] != code:
            return []
        return self.word[self.offsets[u]:self.offsets[u + 1]].tolist()


def _pairs(symbols: np.ndarray, lengths: np.ndarray, freqs: np.ndarray, size: int,
           min_count: int) -> tuple[dict[str, int], _Index]:
    """(pair -> count over the corpus, for the pairs that occur `min_count` times; the index pair -> words)."""
    word = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)  # (pieces,) the word of each piece
    inside = word[:-1] == word[1:]  # a piece and the next one are in the same word
    codes = (symbols[:-1] * size + symbols[1:])[inside]
    holder = word[:-1][inside]
    del word, inside
    uniq, inverse = np.unique(codes, return_inverse=True)
    del codes
    counts = np.bincount(inverse, weights=freqs[holder], minlength=len(uniq))  # float64: exact below 2**53
    n_words = max(1, len(lengths))
    keys = inverse.astype(np.int64) * n_words + holder  # (pair, word)
    del inverse, holder
    keys.sort()
    keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))[:len(keys)]]  # each once
    offsets = np.searchsorted(keys // n_words, np.arange(len(uniq) + 1))
    index = _Index(uniq, offsets, (keys % n_words).astype(np.int32), size)
    del keys
    kept = counts >= min_count
    a, b = uniq[kept] // size, uniq[kept] % size
    both = np.empty(2 * len(a), dtype=np.int64)
    both[0::2], both[1::2] = a, b
    pairs = _text(both)
    pair_count = dict(zip((pairs[k:k + 2] for k in range(0, len(pairs), 2)), counts[kept].astype(np.int64).tolist()))
    return pair_count, index


def _merge(learned: Learned, n: int, seqs: list[str], freqs: list[int], text: list[str], ok_symbol: list[bool],
           foreign: list[bool], pair_count: dict[str, int], index: _Index, n0: int, blocked: set[str],
           keep_spellings: set[str], vocab: dict[str, int], min_count: int) -> None:
    """The trainer's loop: merge the most frequent pair in every word that holds it, until `n` new pieces."""
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)
    made: set[str] = set(learned.chars)
    refused = learned.refused
    made_pairs: dict[str, list[int]] = {}  # a pair a merge made -> the words it was made in
    get = pair_count.get
    pop, push = heapq.heappop, heapq.heappush
    first_new = _char(n0)
    created: list[str] = []  # the pairs the current merge makes (each has its new piece in it)

    def made_in(q: str, i: int, f: int) -> None:
        """Pair `q` made in word `i` (frequency `f`) by the current merge: counted, and the word indexed under it."""
        pair_count[q] = get(q, 0) + f
        words = made_pairs.get(q)
        if words is None:
            made_pairs[q] = [i]
            created.append(q)
        elif words[-1] != i:  # a word's pairs are made while it is merged: its repeats are together
            words.append(i)

    while len(learned.chars) + len(learned.merges) < n and heap:
        negc, p = pop(heap)
        c = get(p, 0)
        if c != -negc:  # stale: the count fell since it was pushed; push it again with its count
            if c > 0:
                push(heap, (-c, p))
            continue
        if c < min_count:
            break
        a, b = p
        sa, sb = _symbol(a), _symbol(b)
        piece = text[sa] + text[sb]
        why = None
        if p in blocked:
            why = CHAT_PAIR
        elif not (ok_symbol[sa] and ok_symbol[sb]):
            why = "a byte-fallback or special piece"
        elif piece in vocab or piece in made:
            why = "the vocabulary has the piece already"
        elif not (foreign[sa] or foreign[sb]):
            why = KEEP_PIECE
        elif piece in keep_spellings:
            why = CHAT_WORD
        if why is not None:
            refused[why] = refused.get(why, 0) + 1
            del pair_count[p]  # never chosen again (no merge makes it again); the words keep the pair
            made_pairs.pop(p, None)
            continue
        new = _char(len(text))
        text.append(piece)
        ok_symbol.append(True)
        foreign.append(True)
        made.add(piece)
        learned.merges.append((text[sa], text[sb]))
        learned.counts.append(c)
        holders = made_pairs.pop(p) if a >= first_new or b >= first_new else index.words(p)
        del pair_count[p]
        created.clear()

        # Only the pairs beside each occurrence change: (x, a) becomes (x, new) and (b, y) becomes (new, y). A
        # word that no longer holds the pair stays in the index (found empty by `find`), as in the Rust trainer.
        for i in holders:
            s = seqs[i]
            k = s.find(p)
            if k < 0:
                continue
            f = freqs[i]
            m = len(s)
            end = -1  # where the last occurrence ended: a neighbour there is `new`, not `b`
            while k >= 0:
                if k:
                    if k == end:  # "a b a b": the (b, a) between was counted off at the occurrence before
                        made_in(new + new, i, f)
                    else:
                        x = s[k - 1]
                        q = x + a
                        if q != p and q in pair_count:
                            pair_count[q] -= f
                        made_in(x + new, i, f)
                end = k + 2
                if end < m:
                    y = s[end]
                    q = b + y
                    if q != p and q in pair_count:
                        pair_count[q] -= f
                    if not (y == a and s.startswith(p, end)):  # else: (new, new), counted there
                        made_in(new + y, i, f)
                k = s.find(p, end)
            seqs[i] = s.replace(p, new)
        for q in created:
            push(heap, (-pair_count[q], q))
