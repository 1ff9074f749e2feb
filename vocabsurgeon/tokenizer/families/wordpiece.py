"""WordPiece (BERT), cased or uncased: one real entry per word, stored as the normalizer writes it."""

from __future__ import annotations

from .base import Entry, Family, Skip
from .shared import normalization


class WordPiece(Family):
    """One entry: after a space and at a start are the same word. On an uncased tokenizer "Frodo"
    is stored as "frodo" (reported); a word whose normalized form is already a token ("Hello" as
    "hello") is already there and skipped. A word the pre-tokenizer splits ("C++") is one added
    token matched on normalized text; one the normalizer puts spaces into (CJK: "東京大学") is an
    added token matched on the raw text."""

    name = "wordpiece"

    @staticmethod
    def matches(data: dict) -> bool:
        return (data.get("model") or {}).get("type") == "WordPiece"

    def normalization(self, w, claimed):
        return normalization(self.ed, w, claimed, existing_is_there=True)

    def entries(self, w: str) -> list[Entry]:
        norm = self.ed.normalize(w)
        limit = self.ed.model.get("max_input_chars_per_word", 100)
        if len(norm.strip()) > limit:
            raise Skip(f"it has {len(norm.strip())} characters, more than this WordPiece's max_input_chars_per_word "
                       f"({limit}): the tokenizer reads any longer word as {self.ed.model.get('unk_token', '[UNK]')}")
        if self.ed.pretokenize(w) == [norm]:
            return [Entry(w, norm, "vocab")]
        if any(c.isspace() for c in norm.strip()) and not any(c.isspace() for c in w):
            # the normalizer puts spaces inside it (around CJK characters): matched on the raw text
            return [Entry(w, w, "added")]
        return [Entry(w, norm.strip(), "added", normalized=norm != w)]
