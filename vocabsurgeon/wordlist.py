"""The new words a user asks for: a tokens file (one word per line) or words given inline (-t).

Both go through the same checks, and every problem is reported at once (each bad line, each
duplicate), so that one rerun is enough. A tokens file may have `#` comment lines and blank lines;
`\\#` at the start of a line stands for a literal `#`. A file that looks like JSON or CSV is refused:
each of its lines would otherwise become one long token without a word of warning.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError

MAX_TOKEN_CHARS = 256
MAX_LISTED = 10  # problems spelled out in the one-line error; the rest are counted
# A CSV line: two or more comma-separated fields that are each a plain word (letters, digits and
# ' . - _), at least one with a letter. Tokens with commas that users do add (`1,000`, `f(a,b)`,
# `std::map<K,V>`) do not match.
_CSV_FIELD = re.compile(r"\s*[\w'’.\-]+\s*")


@dataclass(frozen=True)
class Problem:
    """One bad line of a tokens file (or one bad -t value): where, and what to do."""

    where: str  # "3" (a line number) or "-t 'Frodo '"
    message: str


def token_problem(tok: str) -> str | None:
    """What is wrong with one token, as the end of an error message, or None when it is fine."""
    if not tok.strip():
        return "empty or whitespace-only token; remove it"
    if tok != tok.strip():
        return (f"token {tok!r} has leading or trailing whitespace; remove it "
                "(word-start forms like ' Frodo' are added automatically)")
    bad = [c for c in tok if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn") and c not in "\u200d"]
    if bad:
        return f"token {tok!r} contains control character U+{ord(bad[0]):04X}; remove it"
    if len(tok) > MAX_TOKEN_CHARS:
        return f"token is {len(tok)} characters, over the limit of {MAX_TOKEN_CHARS}; shorten it"
    return None


def _looks_like_csv(line: str) -> bool:
    fields = line.split(",")
    return (len(fields) >= 2 and all(_CSV_FIELD.fullmatch(f) for f in fields)
            and any(ch.isalpha() for ch in line))


def _looks_like_json(text: str) -> bool:
    body = text.strip()
    if not body.startswith(("[", "{")):
        return False
    try:
        return isinstance(json.loads(body), (list, dict))
    except ValueError:
        # Half-written JSON still reads as JSON to a person: `["Frodo",` on the first line.
        return bool(re.match(r'[\[{]\s*"', body))


def _raise(source: str, problems: list[Problem], *, line_numbers: bool) -> None:
    if len(problems) == 1:
        p = problems[0]
        raise InputError(f"{source}:{p.where}: {p.message}" if line_numbers else f"{p.where}: {p.message}")
    listed = "; ".join(f"{'line ' if line_numbers else ''}{p.where}: {p.message}" for p in problems[:MAX_LISTED])
    more = f"; and {len(problems) - MAX_LISTED} more" if len(problems) > MAX_LISTED else ""
    raise InputError(f"{source}: {len(problems)} problems, fix them all and rerun: {listed}{more}")


def read_tokens_file(path: str | Path) -> list[str]:
    """Read new tokens: UTF-8, one per line; `#` lines are comments, blank lines are ignored.

    Args:
        path: the tokens file.

    Returns:
        The tokens, in file order.

    Raises:
        InputError: one message listing every problem: invalid UTF-8, a whitespace-padded line, a
            control character, a duplicate, a token longer than MAX_TOKEN_CHARS characters, a file
            that looks like JSON or CSV, or a file without tokens.

    Example:
        >>> import tempfile, os
        >>> f = os.path.join(tempfile.mkdtemp(), "words.txt")
        >>> _ = open(f, "w").write("# names\\nFrodo\\n\\\\#hashtag\\n\\n")
        >>> read_tokens_file(f)
        ['Frodo', '#hashtag']
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise InputError(f"{p}: cannot read the tokens file ({e.strerror})") from None
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    problems: list[Problem] = []
    lines: list[tuple[int, str]] = []
    for no, bline in enumerate(raw.split(b"\n"), 1):
        try:
            lines.append((no, bline.removesuffix(b"\r").decode("utf-8")))
        except UnicodeDecodeError as e:
            problems.append(Problem(str(no), f"invalid UTF-8 at byte {e.start}; save the file as UTF-8"))
    if _looks_like_json("\n".join(line for _, line in lines)):
        raise InputError(f"{p}: looks like JSON; write one token per line (no brackets, quotes or commas)")
    csv = [no for no, line in lines if _looks_like_csv(line)]
    if csv:
        raise InputError(f"{p}:{csv[0]}: looks like comma-separated values; write one token per line"
                         + (f" ({len(csv)} such lines)" if len(csv) > 1 else ""))
    tokens: list[str] = []
    seen: dict[str, int] = {}
    for no, line in lines:
        if not line.strip() or line.startswith("#"):
            continue  # blank line or comment
        tok = "#" + line[2:] if line.startswith("\\#") else line
        why = token_problem(tok)
        if why is None and tok in seen:
            why = f"token {tok!r} duplicates line {seen[tok]}; remove one of them"
        if why:
            problems.append(Problem(str(no), why))
            continue
        seen[tok] = no
        tokens.append(tok)
    if problems:
        problems.sort(key=lambda q: int(q.where))
        _raise(str(p), problems, line_numbers=True)
    if not tokens:
        raise InputError(f"{p}: no tokens in the file; write one token per line")
    return tokens


def gather_tokens(tokens_file: str | Path | None, inline: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The tokens of a tokens file followed by the inline ones (-t), with the same checks for both.

    Raises:
        InputError: every bad or duplicate inline token (a duplicate of a file token included), or
            no tokens at all.
    """
    tokens = read_tokens_file(tokens_file) if tokens_file else []
    seen = set(tokens)
    problems = []
    for tok in inline:
        why = token_problem(tok)
        if why is None and tok in seen:
            why = f"token {tok!r} is given twice; remove one"
        if why:
            problems.append(Problem(f"-t {tok!r}", why))
            continue
        seen.add(tok)
        tokens.append(tok)
    if problems:
        _raise("-t", problems, line_numbers=False)
    if not tokens:
        raise InputError("no tokens given; pass --tokens FILE (one token per line) or -t TOKEN")
    return tokens
