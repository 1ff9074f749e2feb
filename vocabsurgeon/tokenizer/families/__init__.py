"""Tokenizer families, one small record each (as architectures.py has one per model family):
how a word becomes entries, or why it is skipped. The shared plan loop is TokenizerEditor.plan."""

from __future__ import annotations

from .base import Entry, Family, Mechanism, Skip
from .byte_level_bpe import ByteLevelBPE
from .metaspace_bpe import MetaspaceBPE
from .sentencepiece_bpe import SentencePieceBPE
from .unigram import Unigram
from .wordpiece import WordPiece

# In detection order: Metaspace BPE with prepend "always" before the SentencePiece BPE it also matches.
FAMILIES: tuple[type[Family], ...] = (ByteLevelBPE, MetaspaceBPE, SentencePieceBPE, Unigram, WordPiece)
SUPPORTED_FAMILIES = tuple(f.name for f in FAMILIES)


def family_of(data: dict) -> type[Family] | None:
    """The family record of a parsed tokenizer.json, or None."""
    return next((f for f in FAMILIES if f.matches(data)), None)


def detect_family(data: dict) -> str:
    """Name the tokenizer family of a parsed tokenizer.json."""
    fam = family_of(data)
    return fam.name if fam else f"other ({(data.get('model') or {}).get('type')})"


__all__ = ["FAMILIES", "SUPPORTED_FAMILIES", "ByteLevelBPE", "Entry", "Family", "Mechanism", "MetaspaceBPE",
           "SentencePieceBPE", "Skip", "Unigram", "WordPiece", "detect_family", "family_of"]
