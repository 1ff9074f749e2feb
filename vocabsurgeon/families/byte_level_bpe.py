"""Byte-level BPE (GPT-2, Llama 3, Qwen): added tokens "Frodo" and " Frodo", real entries where those would break."""

from __future__ import annotations

import logging

from tokenizers import pre_tokenizers

from ..errors import InputError
from .base import Entry, Family, Skip
from .pieces import FormIndex, byte_level
from .shared import has_node, split_risks, splitting_note

logger = logging.getLogger(__name__)

_BYTE_ALPHABET = set(pre_tokenizers.ByteLevel.alphabet())
UNSAFE_FORM = ("its bare form, as an added token, would decode garbled (ByteLevel), and cannot be a vocabulary "
               "entry: ignore_merges would change how this tokenizer splits existing text")


class ByteLevelBPE(Family):
    """Two added tokens per word (the space is part of " Frodo"). A form that an added token would
    break is a real entry with ignore_merges instead, produced only for a whole pre-token: a bare
    form the ByteLevel decoder would garble ("Éowyn" -> "Ã\\x89owyn"), or a form inside an existing
    token ("return" inside " return": added tokens match anywhere). Where ignore_merges would change
    existing tokenization, such a form that BPE splits into two pieces gets one merge, appended
    last, instead. Skipped: a garbled bare form the pre-tokenizer splits ("°C"), a word whose bare
    form would split its own word-start token, or whose garbled bare form can be neither."""

    name = "byte-level-bpe"

    @staticmethod
    def matches(data: dict) -> bool:
        return (data.get("model") or {}).get("type") == "BPE" and has_node(data.get("pre_tokenizer"), "ByteLevel")

    def __init__(self, editor):
        super().__init__(editor)
        self._redundant: bool | None = None
        self.blocked: dict[str, str] = {}  # word -> why its bare form can be neither an added token nor an entry
        self.unsafe: list[str] = []  # words whose garbled bare form cannot be an entry here (UNSAFE_FORM)
        self.risks: dict[str, str] = {}

    # --- what this family knows about its tokenizer

    def merges_are_redundant(self) -> bool:
        """True when ignore_merges cannot change how existing text tokenizes.

        With ignore_merges a pre-token that is a whole vocabulary entry maps to that entry; that
        only differs from plain BPE for an entry that BPE does not rebuild as itself. Computed once.
        """
        if self._redundant is None:
            self._redundant = bool(self.ed.model.get("ignore_merges")) or self._all_rebuilt()
        return self._redundant

    def _all_rebuilt(self) -> bool:
        bpe = self.ed.tok.model
        for piece in self.ed.vocab:
            if piece in self.ed.added:
                continue
            if [t.value for t in bpe.tokenize(piece)] != [piece]:
                logger.info("vocabulary entry %r is not rebuilt by its merges", piece)
                return False
        return True

    @staticmethod
    def garbled(form: str) -> bool:
        """Whether the ByteLevel decoder would read an added token `form` as bytes ("Éowyn" as
        "\\ufffdowyn"): all its characters are byte symbols, not all ASCII (ASCII ones stand for themselves)."""
        return not form.isascii() and all(c in _BYTE_ALPHABET for c in form)

    def whole(self, form: str) -> bool:
        """Whether `form` is one pre-token, so a vocabulary entry for it can be produced."""
        return self.ed.pretokenize(form) == [byte_level(form)]

    def merge_pair(self, form: str) -> tuple[str, str] | None:
        """The two model pieces the original tokenizer splits `form` into, if two."""
        ids = self.ed.encode(form)
        if len(ids) != 2:
            return None
        a, b = (self.ed.tok.id_to_token(i) for i in ids)
        if any(x is None or x in self.ed.added or x not in self.ed.vocab for x in (a, b)):
            return None
        return a, b

    def splits_word_start(self, w: str) -> bool:
        """Whether the original tokenizer has " w" as one model token, which an added token `w` would
        split (added tokens are matched in raw text before pre-tokenization)."""
        ids = self.ed.encode(" " + w)
        return len(ids) == 1 and ids[0] == self.ed.vocab.get(byte_level(" " + w))

    def why_not_entry(self, form: str) -> str:
        """Why `form` cannot be a vocabulary entry (one with ignore_merges)."""
        if not self.whole(form):
            return f"the pre-tokenizer splits {form!r}"
        return "ignore_merges would change how this tokenizer splits existing text"

    # --- the hooks of the plan loop

    def prepare(self, words: list[str]) -> None:
        garbled_entries = [byte_level(w) for w in words if self.garbled(w) and self.whole(w)]
        self.risks = split_risks(self.ed, words, byte_level, garbled_entries)

    def entries(self, w: str) -> list[Entry]:
        out = []
        for form in (w, " " + w):
            garbled = self.garbled(form)
            whole = (garbled or form in self.risks) and self.whole(form)
            # A vocabulary entry with ignore_merges is produced only for a whole pre-token, never
            # inside " return" or "returned". Where ignore_merges would change existing text, a
            # form BPE splits into two existing pieces gets one merge instead, at the lowest
            # priority: it applies only where BPE would otherwise stop at those two pieces, so
            # never inside " return" (already one token), only where the text has the form
            # ("returned" -> "return" + "ed"), and loaders that rebuild the tokenizer from vocab +
            # merges keep it. A word whose garbled bare form can be neither is skipped (admit).
            if whole and self.merges_are_redundant():
                out.append(Entry(form, byte_level(form), "vocab"))
            elif whole and self.merge_pair(form):
                out.append(Entry(form, byte_level(form), "merge"))
            elif whole and garbled:
                out.append(Entry(form, byte_level(form), "vocab"))
            elif garbled:
                parts = " | ".join(self.ed.text_of(p) for p in self.ed.pretokenize(form))
                raise Skip(f"the pre-tokenizer splits it ({parts}), so it can only be an added token, which the "
                           "ByteLevel decoder would garble (all its characters are byte symbols)")
            else:
                out.append(Entry(form, form, "added"))
        return out

    def admit(self, w: str, entry: Entry) -> bool:
        if entry.mechanism == "added" and entry.form == w and self.splits_word_start(w):
            self.blocked[w] = self.why_not_entry(w)
            return False
        if entry.mechanism == "vocab" and not self.merges_are_redundant():
            self.unsafe.append(w)  # a garbled bare form: neither an added token nor an entry is safe
            raise Skip(UNSAFE_FORM)  # the word is skipped whole (its word-start form alone would not be one word)
        return True

    def skip_reason(self, w: str) -> str | None:
        if w in self.blocked:
            return (f"already one token after a space ({' ' + w!r}); its bare form would split that token as an "
                    f"added token, and cannot be a vocabulary entry: {self.blocked[w]}")
        return None

    def finish(self, new, notes) -> None:
        self._demote_shadowed(new)
        if self.blocked:
            w = next(iter(self.blocked))
            note = (f"{len(self.blocked)} token(s) skipped (e.g. {w!r}): already one token after a space; the bare "
                    f"form would split that token as an added token, and cannot be a vocabulary entry "
                    f"({self.blocked[w]})")
            notes.append(note)
            logger.warning("%s", note)
        if self.unsafe:
            note = f"{len(self.unsafe)} token(s) skipped (e.g. {self.unsafe[0]!r}): {UNSAFE_FORM}"
            notes.append(note)
            logger.warning("%s", note)
        note = splitting_note(self.ed, new, self.risks, self.why_not_entry)
        if note:
            notes.append(note)

    def _demote_shadowed(self, new) -> None:
        """A new entry (vocab or merge) that contains a new added token (" Resto" and an added
        "Resto", "tion" and an added "tio") would be split by it, since added tokens are matched
        first: make the entry an added token too (the longer one is then matched first), until no
        entry contains one."""
        while True:
            added = {byte_level(t.form) for t in new if t.mechanism == "added"}
            if not added:
                return
            index = FormIndex(added)  # once per round, not per entry: linear in the number of words
            shadowed = [t for t in new if t.mechanism in ("vocab", "merge") and index.inside(t.piece)]
            if not shadowed:
                return
            for t in shadowed:
                logger.info("token %r: %r contains a new added token; it becomes an added token", t.text, t.form)
                t.mechanism, t.piece = "added", t.form

    def needs_ignore_merges(self, new) -> bool:
        needs = any(t.mechanism == "vocab" for t in new) and not self.ed.model.get("ignore_merges")
        if needs and not self.merges_are_redundant():
            words = sorted({t.text for t in new if t.mechanism == "vocab"})
            raise InputError(
                f"{self.ed.file}: this BPE vocabulary has entries its merges do not rebuild, so ignore_merges would "
                f"change existing tokenization; tokens {words} cannot be added safely. Open an issue with the model name"
            )
        return needs
