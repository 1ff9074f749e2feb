"""How pieces are spelled: the byte-level alphabet both ways, and finding new forms inside existing pieces.

What the tokenizer families need to know about spelling, with no dependency on the editor: byte-level BPE
writes each UTF-8 byte as a printable character (`byte_level`, `text_of_bytes`), SentencePiece's byte
fallback writes a byte as `<0x52>` (BYTE_PIECE), and an added token for a form that is part of an existing
piece would split that piece (`FormIndex`, `parts_of`).
"""

from __future__ import annotations

import re

BYTE_PIECE = re.compile(r"<0x[0-9A-Fa-f]{2}>")  # SentencePiece byte fallback: one byte, not its spelling


def _byte_symbols() -> list[str]:
    """The character that byte-level BPE writes for each byte (GPT-2's bytes_to_unicode): printable
    Latin-1 bytes stand for themselves, the others are shifted past U+0100."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    out, extra = [""] * 256, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


BYTE_SYMBOLS = _byte_symbols()  # indexed by byte value
BYTE_OF = {ch: i for i, ch in enumerate(BYTE_SYMBOLS)}  # the other way: symbol -> byte value


def byte_level(text: str) -> str:
    """The byte-level BPE spelling of `text` ("Éowyn" -> "Ã\\x89owyn", " x" -> "Ġx").

    A table lookup per UTF-8 byte: the same as the ByteLevel pre-tokenizer without its regex
    (tests/add/test_surgery.py checks it), without a call into Rust per word.
    """
    return "".join([BYTE_SYMBOLS[b] for b in text.encode("utf-8", "surrogatepass")])


def bytes_of(piece: str) -> bytes | None:
    """The bytes a byte-level piece stands for ("Ġreturn" -> b" return"), or None when `piece` has a
    character outside the byte alphabet (an added token stored as text, "<|endoftext|>")."""
    try:
        return bytes(BYTE_OF[c] for c in piece)
    except KeyError:
        return None


PARTS_HEAD = 4  # FormIndex indexes forms by up to this many first characters


class FormIndex:
    """New forms indexed for finding them inside longer pieces (an added token for such a form,
    matched anywhere in raw text, would split that piece: "return" inside " return").

    Forms are indexed by their first g = min(length, PARTS_HEAD) characters; a piece's g-character
    windows are looked up in that index, and only hits are checked with `startswith`. Built once
    and queried per piece, so that planning stays linear in the number of words.
    """

    def __init__(self, forms: set[str]):
        self.by_g: dict[int, dict[str, list[str]]] = {}
        for f in sorted(forms):
            g = min(len(f), PARTS_HEAD)
            self.by_g.setdefault(g, {}).setdefault(f[:g], []).append(f)
        self.groups = sorted(self.by_g.items())

    def parts(self, pieces: list[str]) -> dict[str, str]:
        """Each indexed form that is a proper part of one of `pieces`, with the first such piece."""
        found: dict[str, str] = {}
        for g, by_head in self.groups:
            hits = [(p, i) for p in pieces if len(p) > g for i in range(len(p) - g + 1) if p[i:i + g] in by_head]
            for p, i in hits:
                for f in by_head[p[i:i + g]]:
                    if len(f) < len(p) and f not in found and p.startswith(f, i):
                        found[f] = p
        return found

    def holders(self, pieces: list[str]) -> dict[str, list[str]]:
        """Each indexed form that is a proper part of some of `pieces`, with all those pieces (in order)."""
        found: dict[str, list[str]] = {}
        for g, by_head in self.groups:
            hits = [(p, i) for p in pieces if len(p) > g for i in range(len(p) - g + 1) if p[i:i + g] in by_head]
            for p, i in hits:
                for f in by_head[p[i:i + g]]:
                    if len(f) < len(p) and p.startswith(f, i):
                        found.setdefault(f, []).append(p)
        return {f: list(dict.fromkeys(ps)) for f, ps in found.items()}

    def inside(self, piece: str) -> bool:
        """Whether some indexed form is a proper part of `piece`."""
        for g, by_head in self.groups:
            for i in range(len(piece) - g + 1):
                for f in by_head.get(piece[i:i + g], ()):
                    if len(f) < len(piece) and piece.startswith(f, i):
                        return True
        return False


def parts_of(pieces: list[str], forms: set[str]) -> dict[str, str]:
    """Each of `forms` that is a proper part of one of `pieces`, with the first such piece (see FormIndex)."""
    return FormIndex(forms).parts(pieces)
