"""Longer words that a new word would re-split: every old text that holds a new word as a proper part (each
vocabulary entry, decoded, and each word of the corpora), tokenized before and after the edit (issue 39).

A new word must leave every word that merely contains it ("REQUEST" holding "REQ", "unreadable" holding
"unread", "returned" holding "return") with its old pieces. Which entries can promise that differs per
family (docs/families.md); this module finds the texts to check and the ones that changed.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from tokenizers import Tokenizer

from .encoding import encode_ids
from .families.pieces import FormIndex

EXAMPLES = 3  # changed texts kept per word (for the report)
# The words of a corpus: runs of letters, digits and combining marks ("AF_INET6" is "AF" and "INET6").
WORD = re.compile(r"[^\W_]+")


def _kind(c: str) -> str:
    """"L" for a letter or combining mark, "N" for a digit, "" otherwise."""
    if not c:
        return ""
    cat = unicodedata.category(c)
    return "L" if cat[0] in "LM" else "N" if cat[0] == "N" else ""


def inside(text: str, word: str) -> bool:
    """Whether `word` occurs in `text` inside a longer word: the character right before or after it continues
    it, a letter next to its letter or a digit next to its digit ("REQ" in "REQUEST", "unread" in
    "unreadable"). Not where it occurs as a word: next to a space, punctuation or "_", or where letters meet
    digits ("REQ" in "REQ.", "REQ_ID" and "REQ2", "INET" in "INET6"), which byte-level pre-tokenizers split
    there too."""
    word = word.strip()
    if not word:
        return False
    first, last = _kind(word[0]), _kind(word[-1])
    i = text.find(word)
    while i >= 0:
        before, after = _kind(text[i - 1:i]), _kind(text[i + len(word):i + len(word) + 1])
        if (before and before == first) or (after and after == last):
            return True
        i = text.find(word, i + 1)
    return False


class Holders:
    """Old texts indexed for finding those that hold a word as a proper part (`FormIndex`: the words indexed
    by their first characters, each text's windows looked up once for all words: linear in the texts'
    length, where a scan of every text per word grows with words x texts)."""

    def __init__(self, texts: Iterable[str]):
        self.texts = list(dict.fromkeys(t for t in texts if t))

    def holding(self, words: Iterable[str]) -> dict[str, list[str]]:
        """Each word of `words` that some text holds as a proper part, with those texts (in index order)."""
        words = {w for w in words if w.strip()}
        if not words or not self.texts:
            return {}
        return FormIndex(words).holders(self.texts)


# Made-up longer words around a new word, by the kind of its edge character (letter, digit): no vocabulary or
# corpus need hold one, so a word whose entries reach inside longer words is reported even where none does.
SUFFIXES = {"L": ("s", "ed"), "N": ("0",)}
PREFIXES = {"L": ("un",), "N": ("1",)}


def made_up(word: str) -> list[str]:
    """Longer words that hold `word` inside them and that no text needs to have ("Frodos", "Frodoed", "unFrodo";
    "utf80" and "unutf8" for "utf8": a digit next to its last digit; none for a word with punctuation at both ends)."""
    w = word.strip()
    if not w:
        return []
    texts = [w + s for s in SUFFIXES.get(_kind(w[-1]), ())] + [p + w for p in PREFIXES.get(_kind(w[0]), ())]
    return [t for t in texts if inside(t, w)]


def variants(text: str) -> tuple[str, ...]:
    """A holder as the texts it stands for, whichever way its entry is spelled: the word alone, after a space
    and after a bracket ("returned", " returned", "(returned": SentencePiece keeps "▁(returned" one pre-token)."""
    bare = text.lstrip(" ")
    return (bare, " " + bare, "(" + bare) if bare else ()


def vocabulary_texts(tok: Tokenizer) -> list[str]:
    """Every model entry of `tok` decoded alone (one call into Rust), without added tokens."""
    added = set(tok.get_added_tokens_decoder())
    ids = [i for i in range(tok.get_vocab_size(with_added_tokens=False)) if i not in added]
    return tok.decode_batch([[i] for i in ids], skip_special_tokens=False)


def corpus_words(texts: Iterable[str]) -> list[str]:
    """The words of `texts` (runs of `WORD`), each once."""
    return list(dict.fromkeys(w for t in texts for w in WORD.findall(t)))


def changed(old: Tokenizer, new: Tokenizer, holders: dict[str, list[str]], owner: dict[int, str],
            made: dict[str, list[str]] | None = None) -> dict[str, list[dict]]:
    """The texts of `holders` (word -> texts that hold it) that `new` tokenizes otherwise than `old`, by the
    new word(s) whose ids (`owner`: id -> word) the new ids hold: word -> up to EXAMPLES
    {"text", "before", "after"} (pieces). `made`: word -> its `made_up` longer words, checked after a space only
    (one text shows what the word's entries do inside a longer word; every spelling of each costs more:
    bench/RESULTS.md)."""
    new_words = {w.strip() for w in owner.values()}  # a holder that is itself a new word is no old text
    texts = list(dict.fromkeys([v for ts in holders.values() for t in ts if t.strip() not in new_words
                                for v in variants(t)]
                               + [" " + t for ts in (made or {}).values() for t in ts if t not in new_words]))
    if made:  # for the culprits of a change that shows no new id
        holders = {w: holders.get(w, []) + made.get(w, []) for w in dict.fromkeys([*holders, *made])}
    if not texts:
        return {}
    out: dict[str, list[dict]] = {}
    for text, a, b in zip(texts, encode_ids(old, texts), encode_ids(new, texts)):
        if a == b:
            continue
        culprits = [owner[i] for i in dict.fromkeys(b) if i in owner] or [w for w, ts in holders.items()
                                                                            if any(text.strip() == t.strip() for t in ts)]
        # a new word that the text holds as a word ("sNaN" in "sNaN123") is no re-split: it is one token there
        for w in dict.fromkeys(w for w in culprits if inside(text, w)):
            seen = out.setdefault(w, [])
            if len(seen) < EXAMPLES:
                seen.append({"text": text, "before": [old.id_to_token(i) for i in a],
                             "after": [new.id_to_token(i) for i in b]})
    return out
