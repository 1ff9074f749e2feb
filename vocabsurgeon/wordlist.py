"""The new words a user asks for: a tokens file (one word per line) or words given inline."""

from __future__ import annotations

import unicodedata
from pathlib import Path

from .errors import InputError

MAX_TOKEN_CHARS = 256


def read_tokens_file(path: str | Path) -> list[str]:
    """Read new tokens: UTF-8, one per line. Every problem names the line and nothing is written.

    Raises:
        InputError: invalid UTF-8, an empty or whitespace-padded line, a control character, a
            duplicate, or a token longer than MAX_TOKEN_CHARS characters.
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise InputError(f"{p}: cannot read the tokens file ({e.strerror})") from None
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    tokens: list[str] = []
    seen: dict[str, int] = {}
    for no, bline in enumerate(lines, 1):
        if bline.endswith(b"\r"):
            bline = bline[:-1]
        try:
            tok = bline.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InputError(f"{p}:{no}: invalid UTF-8 at byte {e.start}; save the file as UTF-8") from None
        if not tok.strip():
            raise InputError(f"{p}:{no}: empty or whitespace-only token; remove the line")
        if tok != tok.strip():
            raise InputError(
                f"{p}:{no}: token {tok!r} has leading or trailing whitespace; remove it "
                "(word-start forms like ' Frodo' are added automatically)"
            )
        bad = [c for c in tok if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn") and c not in "\u200d"]
        if bad:
            raise InputError(f"{p}:{no}: token {tok!r} contains control character U+{ord(bad[0]):04X}; remove it")
        if len(tok) > MAX_TOKEN_CHARS:
            raise InputError(f"{p}:{no}: token is {len(tok)} characters, over the limit of {MAX_TOKEN_CHARS}; shorten it")
        if tok in seen:
            raise InputError(f"{p}:{no}: token {tok!r} duplicates line {seen[tok]}; remove one of them")
        seen[tok] = no
        tokens.append(tok)
    if not tokens:
        raise InputError(f"{p}: no tokens in the file; write one token per line")
    return tokens
