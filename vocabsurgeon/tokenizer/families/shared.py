"""Helpers that more than one family record uses."""

from __future__ import annotations

import logging
from collections.abc import Callable

from .pieces import FormIndex, text_pieces

logger = logging.getLogger(__name__)


def has_node(node, kind: str) -> bool:
    """Whether a tokenizer.json component is `kind` or a Sequence that has one."""
    if not isinstance(node, dict):
        return False
    if node.get("type") == kind:
        return True
    return any(has_node(n, kind) for n in node.get("pretokenizers") or node.get("normalizers")
               or node.get("decoders") or [])


def split_risks(ed, words: list[str], spell: Callable[[str], str], extra: list[str] = ()) -> dict[str, str]:
    """The new forms (" return") that are part of an existing token (or of one of `extra`), each
    with one such piece: an added token for such a form, matched anywhere, would split it."""
    # Byte-fallback pieces ("<0x52>") stand for one byte, not for their spelling: "52" is not inside "<0x52>".
    old = text_pieces(ed.vocab, ed.added)
    spelled = {spell(f): f for w in words for f in (w, " " + w)}
    found = FormIndex(set(spelled)).holders(old + list(extra))
    remember = getattr(ed, "remember_holders", None)
    if remember is not None:  # the same scan finds every old piece that holds a form (issue 39: `holders`)
        new = set(extra)
        remember(set(spelled), {e: [p for p in ps if p not in new] for e, ps in found.items()})
    return {spelled[e]: ps[0] for e, ps in found.items()}


def splitting_note(ed, new, risks: dict[str, str], why_not_entry: Callable[[str], str]) -> str | None:
    """The note for added tokens that are part of existing tokens, which now split where they occur."""
    splitting = [t for t in new if t.mechanism == "added" and t.form in risks]
    if not splitting:
        return None
    t = splitting[0]
    note = (f"{len(splitting)} added token(s) (e.g. {t.form!r}) are also part of existing tokens (e.g. "
            f"{ed.text_of(risks[t.form])!r}), which now split where they occur; they cannot be "
            f"vocabulary entries here ({why_not_entry(t.form)})")
    return note


def normalization(ed, w: str, claimed: dict[str, str], existing_is_there: bool) -> tuple[str | None, str | None]:
    """For families whose entries are matched on normalized text: (the normalized form when it
    differs from `w`, None), or (None, why `w` is skipped): its normalized form is that of another
    new word, or (`existing_is_there`) already a token: an uncased "Hello" is "hello", already
    there, so that one list works on cased and uncased models."""
    norm = ed.normalize(w)
    if norm == w:
        return None, None
    key = norm.strip()
    if key in claimed:
        return None, f"the tokenizer normalizes it to {key!r}, the same as token {claimed[key]!r}"
    if existing_is_there and ed.has(key) and not ed.has(w):
        return None, (f"already in the vocabulary as {key!r} (the tokenizer normalizes text, e.g. lowercases, "
                      "before lookup)")
    claimed[key] = w
    return key, None


def model_pieces(ed, piece: str) -> list[str]:
    """The pieces the BPE model alone (no normalizer, no pre-tokenizer) splits `piece` into."""
    return [t.value for t in ed.tok.model.tokenize(piece)]


def model_pair(ed, piece: str) -> tuple[str, str] | None:
    """The two existing pieces of `model_pieces`, if two: the pair one merge appended last joins into `piece`."""
    pieces = model_pieces(ed, piece)
    if len(pieces) != 2 or any(p in ed.added or p not in ed.vocab for p in pieces):
        return None
    return pieces[0], pieces[1]
