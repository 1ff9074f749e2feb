"""SentencePiece-style BPE with byte fallback (Llama 2, Mistral, Gemma): two added tokens per word."""

from __future__ import annotations

import logging

from .base import Entry, Family
from .shared import has_node, split_risks, splitting_note

logger = logging.getLogger(__name__)


class SentencePieceBPE(Family):
    """Added tokens "Frodo" and " Frodo": Metaspace with prepend_scheme "first" puts no "▁" after
    them, so "Frodo, and" decodes as before. A form inside an existing token ("tion" of
    "▁function") splits that token where it occurs: reported, since this family has no other way."""

    name = "sentencepiece-bpe"
    why_not_entry = "SentencePiece BPE takes new words only as added tokens"

    @staticmethod
    def matches(data: dict) -> bool:
        return (data.get("model") or {}).get("type") == "BPE" and (
            has_node(data.get("pre_tokenizer"), "Metaspace") or has_node(data.get("normalizer"), "Prepend"))

    def prepare(self, words: list[str]) -> None:
        self.risks = split_risks(self.ed, words, lambda f: f.replace(" ", "▁"))

    def entries(self, w: str) -> list[Entry]:
        return [Entry(w, w, "added"), Entry(" " + w, " " + w, "added")]

    def finish(self, new, notes) -> None:
        note = splitting_note(self.ed, new, self.risks, lambda form: self.why_not_entry)
        if note:
            notes.append(note)
