"""SentencePiece Unigram (T5): real pieces "▁Frodo" and "Frodo" with the score of the most likely piece."""

from __future__ import annotations

import logging

from .base import Entry, Family
from .shared import normalization

logger = logging.getLogger(__name__)


class Unigram(Family):
    """Scores are log probabilities (<= 0), so a whole-word piece with the best score beats any
    split of the word into two or more pieces, and the word is one token wherever it occurs, also
    through T5Tokenizer's rebuild. A word the pre-tokenizer splits ("Minas Tirith") falls back to
    added tokens (a "▁" may follow it). Skipped: a bare piece that would split an existing word-start
    piece ("▁" + "system" beating "▁system"), found by the in-memory check."""

    name = "unigram"
    special_score = 0.0

    @staticmethod
    def matches(data: dict) -> bool:
        return (data.get("model") or {}).get("type") == "Unigram"

    def prepare(self, words: list[str]) -> None:
        scores = [s for p, s in self.ed.model["vocab"] if p not in self.ed.added]
        self.score = max(scores) if scores else 0.0

    def normalization(self, w, claimed):
        return normalization(self.ed, w, claimed, existing_is_there=False)

    def entries(self, w: str) -> list[Entry]:
        pre = self.ed.pretokenize(" " + w)
        if len(pre) == 1 and not any(c.isspace() for c in pre[0]):
            spaced = pre[0]  # "▁Frodo"; the bare form follows punctuation inside a pre-token: "▁(Frodo"
            bare = spaced[1:] if spaced.startswith("▁") and len(spaced) > 1 else spaced
            return [Entry(w, bare, "vocab", score=self.score), Entry(" " + w, spaced, "vocab", score=self.score)]
        logger.warning("token %r: the pre-tokenizer splits it; it becomes added tokens, and a word-boundary "
                       "piece may follow it", w)
        return [Entry(w, w, "added"), Entry(" " + w, " " + w, "added")]
