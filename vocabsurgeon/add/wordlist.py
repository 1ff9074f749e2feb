"""The new words a user asks for: a tokens file (one word per line) or words given inline (-t).

Both go through the same checks, and every problem is reported at once (each bad line, each
duplicate), so that one rerun is enough. A tokens file may have `#` comment lines and blank lines;
`\\#` at the start of a line stands for a literal `#`. A file that looks like JSON or CSV is refused:
each of its lines would otherwise become one long token without a word of warning.
"""

from __future__ import annotations

import json
import logging
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError

logger = logging.getLogger(__name__)

MAX_TOKEN_CHARS = 256
MAX_LISTED = 10  # problems spelled out in the one-line error; the rest are counted
# The most words one run plans. The plan keeps a record per word (its forms, their pieces and ids,
# the contexts it is checked in), about PLAN_BYTES_PER_WORD of peak memory per word on a Llama-3-sized
# tokenizer (bench/memory_bench.py, bench/RESULTS.md); this bound keeps a dry run within a few GB and is
# more new words than Llama 3 has tokens. A list past it is refused before the tokenizer is read,
# instead of growing until the kernel kills the process.
MAX_WORDS = 200_000
PLAN_BYTES_PER_WORD = 11 * 1024
_HEAD_BYTES = 4096  # enough to see a BOM, a NUL pattern or an opening bracket
# A comment line that is more likely a token: '#' then a word with no space ("#include", "#hashtag").
_HASH_TOKEN = re.compile(r"#\w\S*")
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


def _raise(source: str, problems: list[Problem], *, line_numbers: bool, total: int | None = None) -> None:
    """One error for every problem: the first MAX_LISTED spelled out, the rest of `total` counted."""
    total = len(problems) if total is None else total
    if total == 1:
        p = problems[0]
        raise InputError(f"{source}:{p.where}: {p.message}" if line_numbers else f"{p.where}: {p.message}")
    listed = "; ".join(f"{'line ' if line_numbers else ''}{p.where}: {p.message}" for p in problems[:MAX_LISTED])
    more = f"; and {total - MAX_LISTED} more" if total > MAX_LISTED else ""
    raise InputError(f"{source}: {total} problems, fix them all and rerun: {listed}{more}")


def _utf16(head: bytes) -> str | None:
    """"UTF-16 LE"/"UTF-16 BE" (or UTF-32) when the first bytes of a file say so, else None.

    By the byte-order mark, or without one by the NUL pattern: text of mostly ASCII saved as UTF-16
    has a NUL in every other byte, which UTF-8 text never has.
    """
    for bom, name in ((b"\xff\xfe\x00\x00", "UTF-32 LE"), (b"\x00\x00\xfe\xff", "UTF-32 BE"),
                      (b"\xff\xfe", "UTF-16 LE"), (b"\xfe\xff", "UTF-16 BE")):
        if head.startswith(bom):
            return name
    even, odd = head[0::2], head[1::2]
    if len(head) >= 4 and head.count(0) * 4 >= len(head):
        if odd.count(0) * 2 >= len(odd) and even.count(0) * 8 < len(even):
            return "UTF-16 LE"
        if even.count(0) * 2 >= len(even) and odd.count(0) * 8 < len(odd):
            return "UTF-16 BE"
    return None


def check_word_count(n: int, where: str = "the tokens") -> None:
    """Refuse more than MAX_WORDS new words before any planning (see MAX_WORDS for why)."""
    if n > MAX_WORDS:
        raise InputError(
            f"{where}: {n:,} words, over the limit of {MAX_WORDS:,} words that one run can plan (the plan keeps "
            f"every word's forms and pieces in memory, about {PLAN_BYTES_PER_WORD // 1024} KB per word); split the "
            "list and add it in several runs, or keep the words that save the most tokens (`vocabsurgeon suggest`)"
        )


def read_tokens_file(path: str | Path) -> list[str]:
    """Read new tokens: UTF-8, one per line; `#` lines are comments, blank lines are ignored.

    The file is streamed line by line: memory grows with the words kept, not with the file's size,
    and a file with more than MAX_WORDS words is counted to its end (nothing kept) and refused.

    Args:
        path: the tokens file.

    Returns:
        The tokens, in file order.

    Raises:
        InputError: one message listing every problem: invalid UTF-8, a whitespace-padded line, a
            control character, a duplicate, a token longer than MAX_TOKEN_CHARS characters, a file
            that looks like JSON or CSV, or a file without tokens; or, alone: a UTF-16 file, or more
            than MAX_WORDS words.

    Example:
        >>> import tempfile, os
        >>> f = os.path.join(tempfile.mkdtemp(), "words.txt")
        >>> _ = open(f, "w").write("# names\\nFrodo\\n\\\\#hashtag\\n\\n")
        >>> read_tokens_file(f)
        ['Frodo', '#hashtag']
    """
    p = Path(path)
    try:
        with open(p, "rb") as f:
            return _read_lines(p, f)
    except OSError as e:
        raise InputError(f"{p}: cannot read the tokens file ({e.strerror})") from None


def _read_lines(p: Path, f) -> list[str]:
    head = f.read(_HEAD_BYTES)
    encoding = _utf16(head)
    if encoding:
        raise InputError(f"{p}: the file is {encoding}; save it as UTF-8")
    # JSON is judged on the first bytes (the whole of a small file; a big one by its opening `["`).
    if _looks_like_json(head.removeprefix(b"\xef\xbb\xbf").decode("utf-8", "replace")):
        raise InputError(f"{p}: looks like JSON; write one token per line (no brackets, quotes or commas)")
    # Kept bounded whatever the file holds: the first few of each kind of finding, and counts.
    problems: list[Problem] = []  # the first MAX_LISTED, in line order
    n_problems = 0
    tokens: list[str] = []
    seen: dict[str, int] = {}
    csv: list[int] = []  # the first CSV-looking line
    n_csv = 0
    hashed: list[str] = []  # the first comment lines that look like a token ("#include")
    n_hashed = 0
    counted = 0  # words past MAX_WORDS: counted, not kept

    def problem(no: int, why: str) -> None:
        nonlocal n_problems
        n_problems += 1
        if len(problems) < MAX_LISTED:
            problems.append(Problem(str(no), why))

    f.seek(0)
    for no, bline in enumerate(f, 1):  # the file's own buffered line reader: one line in memory at a time
        if no == 1 and bline.startswith(b"\xef\xbb\xbf"):
            bline = bline[3:]
        try:
            line = bline.removesuffix(b"\n").removesuffix(b"\r").decode("utf-8")
        except UnicodeDecodeError as e:
            problem(no, f"invalid UTF-8 at byte {e.start}; save the file as UTF-8")
            continue
        if not line.strip():
            continue  # blank line
        if line.startswith("#"):  # a comment
            if _HASH_TOKEN.fullmatch(line):
                n_hashed += 1
                hashed += [line] if len(hashed) < 3 else []
            continue
        if counted or len(tokens) >= MAX_WORDS:
            counted += 1
            continue
        if _looks_like_csv(line):
            n_csv += 1
            csv += [no] if not csv else []
        tok = "#" + line[2:] if line.startswith("\\#") else line
        why = token_problem(tok)
        if why is None and tok in seen:
            why = f"token {tok!r} duplicates line {seen[tok]}; remove one of them"
        if why:
            problem(no, why)
            continue
        seen[tok] = no
        tokens.append(tok)
    if counted:
        check_word_count(len(tokens) + counted, str(p))
    if csv:
        raise InputError(f"{p}:{csv[0]}: looks like comma-separated values; write one token per line"
                         + (f" ({n_csv} such lines)" if n_csv > 1 else ""))
    if problems:
        _raise(str(p), problems, line_numbers=True, total=n_problems)
    if not tokens:
        raise InputError(f"{p}: no tokens in the file; write one token per line")
    if hashed:
        n = n_hashed
        logger.warning("%s: %d line%s starting with '#' read as %s (%s); write \\%s for the token", p, n,
                       "" if n == 1 else "s", "a comment" if n == 1 else "comments",
                       ", ".join(hashed) + (", ..." if n > len(hashed) else ""), hashed[0])
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
    check_word_count(len(tokens))
    return tokens
