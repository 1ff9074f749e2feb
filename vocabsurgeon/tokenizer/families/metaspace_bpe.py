"""SentencePiece BPE with a Metaspace pre-tokenizer that prepends "▁" to every stretch of text: as the tokenizers
library trains it, and transformers 5's re-save of Llama 2 (byte fallback, split off)."""

from __future__ import annotations

from .base import Entry, Family, Skip
from .shared import has_node, model_pair, model_pieces


def _metaspace_always(node) -> bool:
    """Whether a pre-tokenizer is (or has) Metaspace with prepend_scheme "always"."""
    if not isinstance(node, dict):
        return False
    if node.get("type") == "Metaspace":
        return node.get("prepend_scheme", "always") == "always" and node.get("add_prefix_space", True)
    return any(_metaspace_always(n) for n in node.get("pretokenizers") or [])


class MetaspaceBPE(Family):
    """Text after an added token gets a "▁" too (prepend_scheme "always"), so added tokens would
    decode "Frodo, and" as "Frodo , and": a new form is a real entry and one BPE merge of the two
    existing pieces BPE splits it into, appended last. Skipped: a form of more than two pieces, or
    one the merge does not reach in context ("s." already a piece after "objects")."""

    name = "sentencepiece-bpe-metaspace"

    @staticmethod
    def matches(data: dict) -> bool:
        return (data.get("model") or {}).get("type") == "BPE" and (
            _metaspace_always(data.get("pre_tokenizer")) or has_node(data.get("decoder"), "Metaspace"))

    def merge_pair(self, form: str) -> tuple[str, str] | None:
        """The two pieces BPE splits the form's piece into ("Frodo" inside "▁(Frodo"), if two."""
        return model_pair(self.ed, form.replace(" ", "▁"))

    def entries(self, w: str) -> list[Entry]:
        out = []
        for form in (w, " " + w):
            piece = form.replace(" ", "▁")
            if self.ed.has(piece):
                continue
            if self.merge_pair(form) is None:
                pieces = model_pieces(self.ed, piece)
                raise Skip(f"this SentencePiece BPE (Metaspace with prepend_scheme 'always') takes a new word only as "
                           f"one merge of two existing pieces, and {piece!r} is {len(pieces)} pieces {pieces}; "
                           "added tokens would decode with a space before the punctuation after them")
            out.append(Entry(form, piece, "merge"))
        return out
