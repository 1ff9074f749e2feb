"""Encoding text for vocabsurgeon's own checks: with padding and truncation off, in batches.

Every module that encodes text to check it (the tokenizer plan, validation, suggest, compare) uses these,
so that a tokenizer.json shipped with `"padding": {"strategy": {"Fixed": 128}}` never pads a check.
"""

from __future__ import annotations

from tokenizers import Tokenizer


def unpadded(tok: Tokenizer) -> Tokenizer:
    """`tok` with padding and truncation off: every encode vocabsurgeon does for its own checks
    must see the text's own ids (a tokenizer.json may ship `"padding": {"strategy": {"Fixed": 128}}`);
    the written tokenizer.json keeps the user's settings."""
    tok.no_padding()
    tok.no_truncation()
    return tok


def encode_ids(tok: Tokenizer, texts: list[str]) -> list[list[int]]:
    """Ids of each text without special tokens, in one batched call (parallel in Rust)."""
    return [e.ids for e in encode_batch(tok)(texts, add_special_tokens=False)] if texts else []


def encode_batch(tok: Tokenizer):
    """encode_batch_fast (ids without offsets, tokenizers >= 0.21) where there is one."""
    return getattr(tok, "encode_batch_fast", tok.encode_batch)


def merge_parts(merge) -> tuple[str, str]:
    """The two parts of a merge as tokenizer.json writes it: "a b" (older files) or ["a", "b"].

        >>> merge_parts("Ġ t"), merge_parts(["Ġ", "t"])
        (('Ġ', 't'), ('Ġ', 't'))
    """
    if isinstance(merge, str):
        a, _, b = merge.partition(" ")
        return a, b
    return merge[0], merge[1]
