"""How pieces are spelled: the byte-level alphabet both ways, and finding new forms inside existing pieces.

What the tokenizer families need to know about spelling, with no dependency on the editor: byte-level BPE
writes each UTF-8 byte as a printable character (`byte_level`, `text_of_bytes`), SentencePiece's byte
fallback writes a byte as `<0x52>` (BYTE_PIECE), and an added token for a form that is part of an existing
piece would split that piece (`FormIndex`, `parts_of`).
"""

from __future__ import annotations

import itertools
import re

BYTE_PIECE = re.compile(r"<0x[0-9A-Fa-f]{2}>")  # SentencePiece byte fallback: one byte, not its spelling
_BYTE_LINE = re.compile(r"^<0x[0-9A-Fa-f]{2}>$", re.MULTILINE)


def text_pieces(vocab: dict[str, int], added: dict) -> list[str]:
    """The model's pieces that stand for their spelling, in vocabulary order: not added tokens, and not
    byte-fallback pieces ("<0x52>" is one byte, "52" is not inside it). The byte pieces are found by one regex
    scan of the pieces end to end (a line that looks like one and is a piece is one), not a match per piece."""
    byte = {p for p in _BYTE_LINE.findall("\n".join(vocab)) if p in vocab}
    skip = added.keys() | byte if byte else added
    return list(itertools.filterfalse(skip.__contains__, vocab))  # the loop over 128k pieces in C


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
_BYTE_TABLE = str.maketrans({chr(b): s for b, s in enumerate(BYTE_SYMBOLS)})  # Latin-1 character -> symbol


def byte_level(text: str) -> str:
    """The byte-level BPE spelling of `text` ("Éowyn" -> "Ã\\x89owyn", " x" -> "Ġx").

    A table lookup per UTF-8 byte: the same as the ByteLevel pre-tokenizer without its regex
    (tests/add/test_surgery.py checks it), without a call into Rust per word.
    """
    # each byte as the Latin-1 character of its value, then that character as its symbol: both in C
    return text.encode("utf-8", "surrogatepass").decode("latin-1").translate(_BYTE_TABLE)


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

    def hits(self, pieces: list[str]) -> list[tuple[int, list[tuple[str, int]]]]:
        """For each index group (g, its heads): every (piece, start) of `pieces` whose g characters from there
        are a head, in the order of `pieces` and of the starts, for pieces longer than g.

        In numpy where there are many pieces (a vocabulary, 128k on Llama 3): every window of every piece is
        looked up, and the loop over them in Python took 0.15-0.45 s for 1,000 words (issue 38). Each
        character a head has gets a number below 2**16 (the others 0), so a window of up to PARTS_HEAD = 4 is one
        exact 64-bit key: a window that matches a head's key is that head, nothing is hashed."""
        if len(pieces) < 1000:
            return [(g, self._hits_in_python(pieces, g, by_head)) for g, by_head in self.groups]
        import numpy as np

        chars = sorted({c for _, by_head in self.groups for h in by_head for c in h})
        if not chars or len(chars) >= 1 << 16:
            return [(g, self._hits_in_python(pieces, g, by_head)) for g, by_head in self.groups]
        text = "\n".join(pieces)  # the pieces end to end; a window across two is dropped below (i + g > len)
        codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        number = {c: n for n, c in enumerate(chars, 1)}
        table = np.zeros(max(int(codes.max(initial=0)), ord(chars[-1])) + 1, dtype=np.uint64)
        table[[ord(c) for c in chars]] = np.arange(1, len(chars) + 1, dtype=np.uint64)
        mapped = table[codes]
        starts = np.zeros(len(pieces), dtype=np.int64)  # where each piece starts in `text`
        np.cumsum(np.fromiter(map(len, pieces[:-1]), dtype=np.int64, count=len(pieces) - 1) + 1, out=starts[1:])
        width = len(chars) + 1
        out = []
        for g, by_head in self.groups:
            n = len(mapped) - g + 1
            if n <= 0:
                out.append((g, []))
                continue
            # the windows whose first one or two characters start some head, looked up in a table (exact for
            # g <= 2), then only those keyed and searched among the heads
            if g == 1 or width * width > 1 << 24:
                first = np.zeros(width, dtype=bool)
                first[[number[h[0]] for h in by_head]] = True
                found = np.flatnonzero(first[mapped[:n]])
            else:
                pair = np.zeros(width * width, dtype=bool)
                pair[[number[h[0]] * width + number[h[1]] for h in by_head]] = True
                found = np.flatnonzero(pair[mapped[:n] * np.uint64(width) + mapped[1:n + 1]])
            if g > 2 or (g == 2 and width * width > 1 << 24):
                keys = mapped[found]
                for j in range(1, g):
                    keys = (keys << np.uint64(16)) | mapped[found + j]
                heads = np.array(sorted({_key(h, number) for h in by_head}), dtype=np.uint64)
                at = np.searchsorted(heads, keys).clip(max=len(heads) - 1)
                found = found[heads[at] == keys]
            owner = np.searchsorted(starts, found, side="right") - 1
            hits = []
            for k, o in zip(found.tolist(), owner.tolist()):
                p, i = pieces[o], k - int(starts[o])
                if len(p) > g and i + g <= len(p):
                    hits.append((p, i))
            out.append((g, hits))
        return out

    @staticmethod
    def _hits_in_python(pieces: list[str], g: int, by_head: dict[str, list[str]]) -> list[tuple[str, int]]:
        """`hits` of one group, window by window (the definition; the numpy path gives the same list)."""
        return [(p, i) for p in pieces if len(p) > g for i in range(len(p) - g + 1) if p[i:i + g] in by_head]

    def parts(self, pieces: list[str]) -> dict[str, str]:
        """Each indexed form that is a proper part of one of `pieces`, with the first such piece."""
        found: dict[str, str] = {}
        for g, hits in self.hits(pieces):
            by_head = self.by_g[g]
            for p, i in hits:
                for f in by_head[p[i:i + g]]:
                    if len(f) < len(p) and f not in found and p.startswith(f, i):
                        found[f] = p
        return found

    def holders(self, pieces: list[str]) -> dict[str, list[str]]:
        """Each indexed form that is a proper part of some of `pieces`, with all those pieces (in order)."""
        found: dict[str, list[str]] = {}
        for g, hits in self.hits(pieces):
            by_head = self.by_g[g]
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


def _key(head: str, number: dict[str, int]) -> int:
    """The 64-bit key of a head of up to 4 characters: their numbers (`FormIndex.hits`), 16 bits each."""
    key = 0
    for c in head:
        key = key << 16 | number[c]
    return key


def parts_of(pieces: list[str], forms: set[str]) -> dict[str, str]:
    """Each of `forms` that is a proper part of one of `pieces`, with the first such piece (see FormIndex)."""
    return FormIndex(forms).parts(pieces)
