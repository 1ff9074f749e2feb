"""Which words to add: rank a domain corpus's words by the tokens they would save as one token each.

A word is one of the tokenizer's pre-tokens (or, where the family keeps the text in one pre-token, the
pieces between two word-start markers), read through the encoding's offsets. saving = sum over its
occurrences of (pieces - 1). Candidates go through `add`'s own plan, so a word `add` would skip is never
proposed. The corpus is streamed in bounded chunks. Details: docs/internals.md.
"""

from __future__ import annotations

import json
import logging
import os
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tokenizers import Tokenizer

from ..errors import InputError
from ..corpus import DEFAULT_CHUNK_CHARS, Stream, counting_tokenizer
from ..add.wordlist import MAX_TOKEN_CHARS

logger = logging.getLogger(__name__)

DEFAULT_TOP = 1000
DEFAULT_MIN_COUNT = 2
# A word counts at most this many times per paragraph when ranking: one list in one paragraph (a table of
# ALERT_DESCRIPTION_* names) does not make its words the corpus's most common
PER_PARAGRAPH = 3
IDENTIFIER = re.compile(r"\w+")  # a run of letters, digits and "_": a word or an identifier ("AF_INET6")
MANY_WORDS = 4  # candidates this many times --top: the note that points to `extend`


@dataclass(frozen=True)
class CorpusCounts:
    """What one pass over the corpus found."""

    path: Path
    bytes: int  # UTF-8 bytes read (a BOM excluded)
    tokens: int  # tokens of the whole corpus under the original tokenizer
    occurrences: Counter  # (span, pieces) -> count, for spans of 2+ pieces; span = the word, or " " + word
    # (span, pieces) -> occurrences counted at most PER_PARAGRAPH times per paragraph (`rank` orders by these)
    spread: Counter = field(default_factory=Counter)
    # identifier -> count, for each run of letters, digits and "_" (`IDENTIFIER`) that holds a counted span
    # and is longer than it ("AF_INET6" for "INET"): a word seen mostly there is a fragment (`fragments`)
    identifiers: Counter = field(default_factory=Counter)


@dataclass
class Candidate:
    """A word and what adding it would save on the corpus."""

    word: str
    count: int  # occurrences that are 2+ tokens today (bare or after one space)
    tokens: int  # the tokens those occurrences cost today

    @property
    def saving(self) -> int:
        """Tokens saved when each of these occurrences is one token: sum of (pieces - 1)."""
        return self.tokens - self.count

    @property
    def pieces(self) -> float:
        """Mean tokens per occurrence today."""
        return self.tokens / self.count

    def to_dict(self) -> dict:
        return {"word": self.word, "count": self.count, "pieces": round(self.pieces, 3), "saving": self.saving}


@dataclass
class Suggestion:
    """The proposed words, best first, and the corpus figures; `to_dict()` is the --json output."""

    checkpoint: str
    counts: CorpusCounts
    words: list[Candidate]
    skipped: list[dict] = field(default_factory=list)  # {"word", "reason", "count", "saving"}, as add would skip
    candidates: int = 0  # words with count >= min_count that would save a token, before planning
    top: int = DEFAULT_TOP
    min_count: int = DEFAULT_MIN_COUNT
    notes: list[str] = field(default_factory=list)  # what the plan of the proposed words says about them

    @property
    def tokens_after(self) -> int:
        """Corpus tokens if every proposed word were one token at each counted occurrence."""
        return self.counts.tokens - sum(c.saving for c in self.words)

    def to_dict(self) -> dict:
        n_bytes = self.counts.bytes
        return {
            "checkpoint": self.checkpoint,
            "corpus": str(self.counts.path),
            "corpus_bytes": n_bytes,
            "top": self.top,
            "min_count": self.min_count,
            "candidates": self.candidates,
            "tokens_before": self.counts.tokens,
            "tokens_after": self.tokens_after,
            "tokens_per_byte": {"before": self.counts.tokens / n_bytes, "after": self.tokens_after / n_bytes},
            "words": [c.to_dict() for c in self.words],
            "skipped": self.skipped,
            "notes": self.notes,
        }

    def describe(self) -> str:
        """The human summary (stderr): corpus size, projected tokens per byte, what was skipped."""
        d = self.to_dict()
        saved = d["tokens_before"] - d["tokens_after"]
        lines = [
            (f"{len(self.words)} words proposed (of {self.candidates} that save a token and occur at least "
             f"{self.min_count} times) from {self.counts.path}: {self.counts.bytes:,} bytes, "
             f"{self.counts.tokens:,} tokens"),
            (f"tokens per byte {d['tokens_per_byte']['before']:.4f} -> {d['tokens_per_byte']['after']:.4f} "
             f"(projected: {saved:,} tokens saved, {100 * saved / max(1, self.counts.tokens):.1f}%)"),
        ]
        if self.skipped:
            s = self.skipped[0]
            lines.append(f"{len(self.skipped)} candidate(s) skipped as `add` would skip them, e.g. {s['word']!r}: "
                         f"{s['reason']}")
        lines.extend(f"note: {n}" for n in self.notes)
        if self.many_words:
            lines.append(f"note: {self.candidates:,} words would each save a token, {self.candidates // self.top}x "
                         "--top: whole words cover little of a corpus of many word forms (a new language, a large "
                         "domain); `vocabsurgeon extend --corpus ... --new-tokens N` learns sub-word tokens that "
                         "combine inside any word (docs/extend.md)")
        return "\n".join(lines)

    @property
    def many_words(self) -> bool:
        """Whether whole words are a poor choice here: the words that would save a token are many times --top
        (each word form its own token), where `extend`'s sub-word tokens serve better."""
        return len(self.words) == self.top and self.candidates >= MANY_WORDS * self.top

    def tokens_file(self) -> str:
        """The proposed words as a tokens file for `add --tokens` (one per line; a word that starts
        with "#" is written "\\#word", since a tokens file reads "#" lines as comments)."""
        return "".join(("\\" if c.word.startswith("#") else "") + c.word + "\n" for c in self.words)


# ---------------------------------------------------------------------------------------------
# Reading and counting


def word_start_marker(tok: Tokenizer) -> str | None:
    """The Metaspace replacement ("▁") when the tokenizer uses one: a piece that starts with it starts
    a word, also where the pre-tokenizer keeps the whole text together (split false, Llama 2)."""
    data = json.loads(tok.to_str())

    def find(node) -> str | None:
        if isinstance(node, dict):
            if node.get("type") == "Metaspace":
                return node.get("replacement", "▁")
            if node.get("type") == "Replace" and node.get("content") == "▁":  # legacy Llama 2 normalizer
                return "▁"
            for child in node.get("pretokenizers") or node.get("normalizers") or []:
                found = find(child)
                if found:
                    return found
        return None

    return find(data.get("pre_tokenizer")) or find(data.get("normalizer"))


def _class(c: str) -> int:
    return 0 if c.isalnum() else 1 if c.isspace() else 2


def _words(text: str, enc, marker: str | None) -> Iterator[tuple[int, int, int]]:
    """(start, end, pieces) of each word of one encoding: its pre-tokens; with a Metaspace marker, also
    split where a piece starts with the marker or where letters meet punctuation or whitespace (so
    "Frodo," is "Frodo" and ","), since SentencePiece keeps whole text, or "Frodo,", in one pre-token."""
    wids, offs = enc.word_ids, enc.offsets
    pieces = enc.tokens if marker else None
    n = len(wids)
    start = 0
    for i in range(1, n + 1):
        if i < n and wids[i] == wids[start]:
            if not pieces:
                continue
            s, w = offs[i][0], offs[start][0]
            if not pieces[i].startswith(marker):
                if s <= w or s >= len(text):  # a piece inside the word's first character ("▁" + "F")
                    continue
                a, b = _class(text[s - 1]), _class(text[s])
                if a == b or (a == 1 and not text[w:s].strip()):  # same class, or a word after its "▁" piece
                    continue
        yield offs[start][0], offs[i - 1][1], i - start
        start = i


def count_split_words(tok: Tokenizer, corpus: str | os.PathLike, *, chunk_chars: int = DEFAULT_CHUNK_CHARS,
                      progress: Callable[[int], None] | None = None) -> CorpusCounts:
    """Stream `corpus` through `tok` and count the words it splits into 2+ pieces, each with its piece count
    (see the module docstring), and the corpus's tokens. Not `corpus.count_words`, which counts every
    pre-token and encodes nothing: a word here is read from the encoding's offsets.

        >>> c = count_split_words(counting_tokenizer("fixtures/gpt2-tiny"), "fixtures/corpus_lotr.txt")
        >>> c.occurrences[" Frodo", 4] > 0
        True

    Args:
        tok: the tokenizer, from `counting_tokenizer` (padding and truncation off).
        corpus: a UTF-8 text file.
        chunk_chars: characters encoded per `encode_batch` call; also bounds one batch item.
        progress: called with the bytes read after each batch.

    Raises:
        InputError: the corpus cannot be read, is not UTF-8, or is empty.
    """
    stream = Stream(corpus, chunk_chars, progress)
    marker = word_start_marker(tok)
    occurrences: Counter = Counter()
    spread: Counter = Counter()
    identifiers: Counter = Counter()
    tokens = 0
    for batch in stream:
        for text, enc in zip(batch, tok.encode_batch(batch, add_special_tokens=False)):
            tokens += len(enc.ids)
            here: Counter = Counter()
            for start, end, n in _words(text, enc, marker):
                if n >= 2:
                    span = text[start:end]
                    if marker and not (span[-1].isalnum() and span.lstrip()[:1].isalnum()):
                        continue  # a piece that holds letters and punctuation ("s." of "days."): not one word
                    here[span, n] += 1
            occurrences.update(here)
            spread.update({k: min(v, PER_PARAGRAPH) for k, v in here.items()})
            identifiers.update(IDENTIFIER.findall(text))
    return CorpusCounts(stream.path, stream.bytes, tokens, occurrences, spread, identifiers)


def _proposable(word: str) -> bool:
    """A word that a tokens file can hold and that is a word: no whitespace or control character,
    not too long, with at least one letter or digit (runs of punctuation are not proposed), and not
    starting with "\\#" (a tokens file reads it as an escaped "#"; "#include" is written "\\#include")."""
    return (0 < len(word) <= MAX_TOKEN_CHARS and any(c.isalnum() for c in word) and not word.startswith("\\#")
            and not any(c.isspace() or unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn") for c in word))


def rank(counts: CorpusCounts, tok: Tokenizer | None = None, *, min_count: int = DEFAULT_MIN_COUNT) -> list[Candidate]:
    """The candidates, most tokens saved first (then most frequent, then alphabetical).

    Spellings that the tokenizer's normalizer makes equal ("Frodo" and "frodo" on an uncased
    tokenizer) are one candidate, named by the most frequent spelling: `add` refuses two tokens
    that normalize alike.
    """
    words: dict[str, Candidate] = {}
    spread: Counter = Counter()
    for (span, pieces), n in counts.occurrences.items():
        word = span.removeprefix(" ")
        if not _proposable(word):
            continue  # also: a span after other whitespace ("\t", two spaces) that add would not make one token
        c = words.setdefault(word, Candidate(word, 0, 0))
        c.count += n
        c.tokens += n * pieces
        spread[word] += counts.spread.get((span, pieces), n) * (pieces - 1)
    fragment = fragments(counts, list(words))
    words = {w: c for w, c in words.items() if w not in fragment}
    normalizer = tok.normalizer if tok is not None else None
    if normalizer is not None:
        groups: dict[str, list[Candidate]] = {}
        for c in words.values():
            groups.setdefault(normalizer.normalize_str(c.word), []).append(c)
        merged = []
        for group in groups.values():
            group.sort(key=lambda c: (-c.count, c.word))
            merged.append(Candidate(group[0].word, sum(c.count for c in group), sum(c.tokens for c in group)))
    else:
        merged = list(words.values())
    kept = [c for c in merged if c.count >= min_count and c.saving > 0]
    # ranked by the saving spread over paragraphs (each paragraph counts a word at most PER_PARAGRAPH times)
    kept.sort(key=lambda c: (-spread.get(c.word, c.saving), -c.saving, -c.count, c.word))
    return kept


def fragments(counts: CorpusCounts, words: list[str]) -> set[str]:
    """The words that the corpus shows mostly inside longer identifiers or words: more occurrences of
    identifiers that hold the word inside them ("REQ" in "REQUEST", "INET" in "AF_INET6", "BAD" in "BADGE" and
    "ALERT_BAD_CERT") than of the word standing alone. Such a word is a fragment, not a word of the domain;
    and once added it would be one token in few places (a new word never re-splits a longer word)."""
    from ..tokenizer.resplit import Holders

    inside: Counter = Counter()
    for w, holders in Holders(counts.identifiers).holding(words).items():
        inside[w] += sum(counts.identifiers[h] for h in holders)
    return {w for w in words if inside[w] > counts.identifiers.get(w, 0)}


# ---------------------------------------------------------------------------------------------
# Choosing what add would take


def _planned(target, words: list[str]):
    """The plan `add --dry-run` makes of `words` and the words it skips, with its reasons."""
    from ..add.plan import plan_tokens

    plan = plan_tokens(target, words)
    return plan, {s["token"]: s["reason"] for s in plan.tokens.skipped}


def word_notes(plan) -> list[str]:
    """What the plan of the proposed words says about them that a user should know before `add`: the words
    that keep their old pieces in some contexts, and those that re-split longer words."""
    t, notes = plan.tokens, []
    if t.contexts:
        w, where = next(iter(t.contexts.items()))
        notes.append(f"{len(t.contexts)} proposed word(s) keep their old pieces in some contexts (e.g. {w!r} in "
                     f"{where[0]!r}): no entry of this tokenizer reaches them there without changing how old text "
                     "tokenizes (`add --dry-run --json`: contexts_not_one_token)")
    if t.resplits:
        w, seen = next(iter(t.resplits.items()))
        notes.append(f"{len(t.resplits)} proposed word(s) re-split longer words that hold them (e.g. {w!r}: "
                     f"{seen[0]['text']!r} {seen[0]['before']} -> {seen[0]['after']}; `add --dry-run --json`: "
                     "longer_words_resplit)")
    return notes


def choose(target, ranked: list[Candidate], top: int) -> tuple[list[Candidate], list[dict], list[str]]:
    """The first `top` candidates that `add` would take, planned together as `add` will plan them, the
    candidates skipped, and the notes of the final plan (`word_notes`).

    Plans the best candidates, a margin more than are still needed at a time, so a large corpus
    never plans all its words; a final plan of exactly the chosen words confirms none is skipped
    (a word can depend on the others: two spellings that end up as the same piece).
    """
    chosen: list[Candidate] = []
    skipped: list[dict] = []
    i = 0
    while len(chosen) < top and i < len(ranked):
        need = top - len(chosen)
        batch = ranked[i:i + need + need // 4 + 8]
        i += len(batch)
        _, skips = _planned(target, [c.word for c in chosen + batch])
        for c in chosen + batch:
            if c.word in skips:
                skipped.append({"word": c.word, "reason": skips[c.word], "count": c.count, "saving": c.saving})
        chosen = [c for c in chosen + batch if c.word not in skips][:top]
    for _ in range(8):  # removing words only lowers what the others depend on; bounded anyway
        plan, skips = _planned(target, [c.word for c in chosen]) if chosen else (None, {})
        if not skips:
            return chosen, skipped, word_notes(plan) if plan is not None else []
        skipped += [{"word": c.word, "reason": skips[c.word], "count": c.count, "saving": c.saving}
                    for c in chosen if c.word in skips]
        chosen = [c for c in chosen if c.word not in skips]
    raise InputError(f"{target.src}: the add plan keeps skipping words of the suggestion; please report it")


def suggest_tokens(ckpt: str | os.PathLike, corpus: str | os.PathLike, *, top: int = DEFAULT_TOP,
                   min_count: int = DEFAULT_MIN_COUNT, chunk_chars: int = DEFAULT_CHUNK_CHARS,
                   progress: Callable[[int], None] | None = None, embedding_key: str | None = None,
                   lm_head_key: str | None = None, revision: str | None = None,
                   token: str | None = None) -> Suggestion:
    """Rank the words of `corpus` by the tokens they would save as new tokens of `ckpt`.

    Args:
        ckpt: a checkpoint directory or Hub repo id (as `add` takes it, at `revision` with `token`).
        corpus: a UTF-8 text file, streamed (any size).
        top: how many words to propose at most.
        min_count: ignore words with fewer occurrences.
        chunk_chars: characters per encoded batch (bounds memory; does not change the result).
        progress: called with the bytes read after each batch.

    Returns:
        The proposed words, best first, none of them a word `add` would skip.

    Raises:
        InputError: the checkpoint, its tokenizer or the corpus cannot be used.

    Example:
        >>> s = suggest_tokens("fixtures/gpt2-tiny", "fixtures/corpus_lotr.txt", top=3)
        >>> [c.word for c in s.words]
        ['Frodo', 'Gollum', 'Aragorn']
    """
    from ..engine.target import AddOptions, open_target
    from ..tokenizer.editor import require_tokenizer_files

    if top < 1:
        raise InputError(f"--top must be at least 1, got {top}")
    if min_count < 1:
        raise InputError(f"--min-count must be at least 1, got {min_count}")
    target = open_target(ckpt, AddOptions(embedding_key=embedding_key, lm_head_key=lm_head_key), revision=revision,
                         token=token)
    require_tokenizer_files(target.ckpt.path)  # as `add`: a checkpoint without one is refused before counting
    tok = counting_tokenizer(target.ckpt.path)
    counts = count_split_words(tok, corpus, chunk_chars=chunk_chars, progress=progress)
    ranked = rank(counts, tok, min_count=min_count)
    logger.info("%d candidate words save a token and occur at least %d times", len(ranked), min_count)
    words, skipped, notes = choose(target, ranked, top)
    return Suggestion(str(ckpt), counts, words, skipped, len(ranked), top, min_count, notes)
