"""What every tokenizer family record has: the named entry, the skip signal, and the default hooks."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal, NamedTuple, Protocol

Mechanism = Literal["vocab", "merge", "added", "special"]


class TokenizerView(Protocol):
    """What a family reads of the tokenizer it plans for (TokenizerEditor provides it): the parsed
    tokenizer.json and its parts, and the original tokenizer's answers. Families never change it."""

    data: dict  # the parsed tokenizer.json
    model: dict  # its "model" object
    vocab: dict[str, int]  # piece -> id (Unigram: the list, as a dict)
    added: dict[str, dict]  # content -> the added_tokens entry
    tok: Any  # the original `tokenizers.Tokenizer`
    file: Path  # tokenizer.json, for messages

    def has(self, piece: str) -> bool: ...
    def encode(self, text: str) -> list[int]: ...
    def normalize(self, text: str) -> str: ...
    def pretokenize(self, text: str) -> list[str]: ...
    def text_of(self, piece: str) -> str: ...


class Drafted(Protocol):
    """A new entry as the plan drafted it (tokenizer.NewToken): families may turn one into an added token."""

    text: str
    form: str
    piece: str
    mechanism: str


class Entry(NamedTuple):
    """One entry that a family makes for one form of a word."""

    form: str  # the text it stands for: the word, or " " + word
    piece: str  # the string stored in the tokenizer ("Frodo", " Frodo", "▁Frodo", "Ã\x89owyn")
    mechanism: Mechanism  # "vocab": a model entry; "merge": an entry and the BPE merge that makes it; "added"
    normalized: bool = False  # added tokens only: matched on normalized text
    score: float | None = None  # Unigram only: the piece's log probability


class Skip(Exception):
    """A word that its family's mechanisms cannot make one token; the message says why."""


class Family:
    """A tokenizer family: how a word becomes entries (`entries`), or why it is skipped (`Skip`).

    The shared plan loop (TokenizerEditor.plan) asks `entries` for each word, leaves out forms that
    are one token already, gives ids, builds the edited tokenizer in memory and checks every word
    in every context. A family holds only what differs between families.
    """

    name: ClassVar[str]
    special_score: ClassVar[float | None] = None  # the score of a --special piece (Unigram: a list entry)

    def __init__(self, editor: TokenizerView):
        self.ed = editor

    @staticmethod
    def matches(data: dict) -> bool:
        """Whether a parsed tokenizer.json is of this family."""
        raise NotImplementedError

    def prepare(self, words: list[str]) -> None:
        """Look at the whole list once before `entries` is asked per word (e.g. forms inside existing tokens)."""

    def normalization(self, w: str, claimed: dict[str, str]) -> tuple[str | None, str | None]:
        """(the normalized form when entries are matched on normalized text and it differs, why `w`
        is skipped or None); `claimed` maps normalized forms to the new words that took them.

        By default entries are stored as the word is written, so a word that the normalizer changes
        (Qwen's NFC folds a decomposed "Müller") is skipped: as written it would never be looked up.
        """
        key = self.ed.normalize(w).replace("▁", " ").strip()  # Llama 2 and Gemma write spaces as "▁"
        if key == w:
            claimed.setdefault(w, w)
            return None, None
        if key in claimed:
            return None, f"the tokenizer normalizes it to {key!r} (e.g. Unicode NFC), the same as {claimed[key]!r}"
        return None, (f"the tokenizer normalizes it to {key!r} (e.g. Unicode NFC) before the vocabulary is looked up; "
                      f"add {key!r} instead")

    def entries(self, w: str) -> list[Entry]:
        """The entries that make `w` one token, or Skip."""
        raise NotImplementedError

    def admit(self, w: str, entry: Entry) -> bool:
        """Called for each entry not already a token, in order: False leaves the entry out (the
        family remembers why); Skip drops the whole word."""
        return True

    def skip_reason(self, w: str) -> str | None:
        """Why `w` ended with no entries, when not because they all exist already."""
        return None

    def finish(self, new: list[Drafted], notes: list[str]) -> None:
        """Adjust the drafted entries of all words together, and add the family's notes."""

    def needs_ignore_merges(self, new: list[Drafted]) -> bool:
        """Whether the entries rely on the BPE model's ignore_merges option."""
        return False

    def rebuild_breaks(self, new: list[Drafted]) -> str | None:
        """Why transformers' model-specific class (which rebuilds the tokenizer on load) would break
        the entries, so that the output must be loaded as written; None when it would not."""
        return None

    def decoder(self, new: list[Drafted], decoder: dict | None) -> dict | None:
        """tokenizer.json's "decoder" for the output: the input's, unless the new entries need a step more."""
        return decoder

    def merge_pair(self, form: str) -> tuple[str, str] | None:
        """The two existing pieces a "merge" entry for `form` joins."""
        return None
