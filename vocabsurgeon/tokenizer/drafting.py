"""Drafting words into numbered entries: the plan's records (`NewToken`, `TokenizerPlan`), each word's entries by
its family's mechanisms (`draft`), and their ids with what else the plan changes (`numbered`).

Pure functions over an opened tokenizer (`opened.OpenedTokenizer`); the plan loop (`editor.TokenizerEditor.plan`)
checks what they draft (`checks.py`) and drafts again without the words that fail.
"""

from __future__ import annotations

import copy
import logging
import re
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from tokenizers import Tokenizer

from ..checkpoint.filenames import TOKENIZER_CONFIG, TOKENIZER_FILE
from ..errors import InputError
from .families import SUPPORTED_FAMILIES, Skip
from .loading import BYTE_LEVEL_UNDER_LLAMA, FILE_AS_WRITTEN_CLASSES, input_class_defaults

if TYPE_CHECKING:
    from .opened import OpenedTokenizer

logger = logging.getLogger(__name__)

# Placeholder tokens that models ship for later use (Llama 3, Gemma, BERT, Mistral's Tekken): --reuse-reserved
# takes them.
RESERVED_TOKEN = re.compile(r"<\|reserved_special_token_\d+\|>|<unused\d+>|\[unused\d+\]|<\|reserved_\d+\|>|<SPECIAL_\d+>")
GAP_PIECE = "<vocabsurgeon unused {}>"  # Unigram placeholders; the space makes them unreachable


@dataclass
class NewToken:
    """One new vocabulary entry (a row of every vocabulary matrix)."""

    text: str  # the word as the user gave it
    form: str  # the text this entry stands for: the word, or " " + word for the word-start form
    piece: str  # the string stored in the tokenizer (e.g. "Frodo", " Frodo", "▁Frodo", "Ã\x89owyn")
    id: int
    mechanism: str  # "vocab" (a real model entry), "merge" (an entry and the BPE merge that makes it), "added" or "special"
    pieces: list[int] = field(default_factory=list)  # ids of `form` under the original tokenizer
    normalized: bool = False  # added tokens only: matched on normalized text (uncased WordPiece)
    score: float | None = None  # Unigram only: the piece's log probability


@dataclass
class TokenizerPlan:
    """The new entries, the tokens skipped and why, and what else changes in the tokenizer files."""

    family: str
    new: list[NewToken]
    skipped: list[dict]  # {"token": ..., "reason": ...}
    set_ignore_merges: bool = False
    notes: list[str] = field(default_factory=list)  # what else was changed, for the report
    gap: tuple[int, int] | None = None  # Unigram ids [start, end) filled with placeholders
    original: Tokenizer | None = field(default=None, repr=False, compare=False)  # for verification
    freed: dict[int, str] = field(default_factory=dict)  # reserved tokens given up (--reuse-reserved): id -> content
    file_as_written: bool = False  # tokenizer_config names a class that loads tokenizer.json as written
    # Kept words that are not one token in some context, with those contexts: where the pre-tokenizer
    # joins the text around the word into one pre-token ("(striped" on Llama 3), no entry can be
    # produced there without changing how old text tokenizes; the word keeps its old pieces there.
    contexts: dict[str, list[str]] = field(default_factory=dict)
    # Soft contexts the file as written misses but the class transformers loads it with does not (GPT-4o's o200k
    # as GPT2Tokenizer): not reported, since users get one token there; the re-read of the file expects them.
    file_only_contexts: dict[str, list[str]] = field(default_factory=dict)
    # The input's SentencePiece .model with the new pieces appended (`writing.slow_model`): file name, bytes
    slow_model: tuple[str, bytes] | None = field(default=None, repr=False, compare=False)
    # Kept words whose entries re-split longer words that hold them (resplit.py: every old vocabulary entry and
    # corpus word that has the word inside it, tokenized before and after): word -> up to resplit.EXAMPLES
    # {"text", "before", "after"}. Added tokens and --special tokens are matched anywhere in raw text, by
    # every runtime; a merge inside a longer word where no entry that only the whole word reaches is allowed.
    resplits: dict[str, list[dict]] = field(default_factory=dict)
    checked_holders: int = 0  # old texts (vocabulary entries, corpus words) that hold a new word, checked

    def to_dict(self) -> dict:
        """The plan as plain data (the --json view)."""
        return {"family": self.family, "new": [asdict(t) for t in self.new], "skipped": self.skipped,
                "notes": self.notes, "contexts_not_one_token": self.contexts, "longer_words_resplit": self.resplits}



def reusable_ids(opened: OpenedTokenizer, rows: int) -> list[tuple[int, str | None]]:
    """Rows that --reuse-reserved may take, in order: rows no token maps to, then reserved
    placeholder tokens (`<|reserved_special_token_N|>`, `<unusedN>`, `[unusedN]`, Tekken's `<SPECIAL_N>`),
    as (id, content)."""
    if not isinstance(opened.model.get("vocab"), dict):
        raise InputError(
            f"{opened.dir / TOKENIZER_FILE}: --reuse-reserved needs a BPE or WordPiece vocabulary; "
            f"this {opened.family_name} tokenizer's ids are list positions. Drop --reuse-reserved"
        )
    used = set(opened.vocab.values()) | {t["id"] for t in opened.added.values()}
    unused = [(i, None) for i in range(rows) if i not in used]
    reserved = {t["id"]: c for c, t in opened.added.items() if RESERVED_TOKEN.fullmatch(c)}
    reserved.update({i: c for c, i in opened.vocab.items() if RESERVED_TOKEN.fullmatch(c) and c not in opened.added})
    return unused + sorted((i, c) for i, c in reserved.items() if i < rows)


def draft(opened: OpenedTokenizer, words: list[str], special: bool) -> tuple[list[NewToken], list[dict], list[str]]:
    """The entries of each word by its family's mechanisms (ids not yet given: -1), the words
    skipped and why, and notes for the report."""
    new: list[NewToken] = []
    skipped: list[dict] = []
    notes: list[str] = []
    claimed: dict[str, str] = {}
    planned: dict[str, str] = {}  # piece -> the word that took it
    family = opened.family
    if family is None and not special:
        raise InputError(f"{opened.file}: {opened.family_name} tokenizers are not supported (supported: "
                         f"{', '.join(SUPPORTED_FAMILIES)}); open an issue with the model name")
    opened.prefetch([f for w in words for f in ((w,) if special else (w, " " + w))])
    if not special:
        family.prepare(words)
    for w in words:
        existing = opened.added.get(w)
        if existing is not None and existing.get("special"):
            skipped.append({"token": w, "reason": "already a special token"})
            continue
        if special:
            if opened.has(w):
                skipped.append({"token": w, "reason": "already in the vocabulary (not promoted to special)"})
                continue
            new.append(NewToken(w, w, w, -1, "special", opened.encode(w),
                                score=family.special_score if family is not None else None))
            continue
        norm, why = family.normalization(w, claimed)
        if why is None and any(c.isdigit() for c in w) and opened.splits_numbers:
            why = ("it has digits, and this tokenizer splits numbers into single digits or short groups before the "
                   "vocabulary is looked up; a token with digits would change how other numbers tokenize")
        if why is None:
            mine: list[NewToken] = []
            taken_by = None
            try:
                for e in family.entries(w):
                    if e.piece in planned:
                        taken_by = planned[e.piece]
                        continue
                    if opened.has(e.piece) or (e.mechanism == "added" and len(opened.encode(e.form)) == 1):
                        continue  # this form is one token already
                    if family.admit(w, e):
                        mine.append(NewToken(w, e.form, e.piece, -1, e.mechanism, opened.encode(e.form),
                                             e.normalized, e.score))
            except Skip as e:
                why = str(e)
            else:
                earlier = (f"the same token as {taken_by!r}, earlier in the list (this tokenizer "
                           f"{'normalizes' if opened.normalize(w) != w else 'stores'} it as that token's piece)"
                           if taken_by is not None else None)
                why = None if mine else family.skip_reason(w) or earlier or "already in the vocabulary"
        if why is not None:
            skipped.append({"token": w, "reason": why})
            continue
        planned.update((t.piece, w) for t in mine)
        new.extend(mine)
        if norm is not None and any(t.piece == norm for t in mine):
            note = f"token {w!r} is stored as {norm!r}: the tokenizer normalizes text (e.g. lowercases) before lookup"
            notes.append(note)
    if not special:
        family.finish(new, notes)
    return new, skipped, notes


def numbered(opened: OpenedTokenizer, new: list[NewToken], skipped: list[dict], notes: list[str], start: int,
             reuse: list[tuple[int, str | None]] | None) -> TokenizerPlan:
    """The plan of the entries `new` with their ids: `reuse` first, then counting from `start`."""
    pool = list(reuse or [])
    freed: dict[int, str] = {}
    counter = iter(range(start, 1 << 62))
    given = []
    for t in new:
        if pool:
            i, content = pool.pop(0)
            if content is not None:
                freed[i] = content
        else:
            i = next(counter)
        t = copy.copy(t)  # dataclasses.replace re-runs __init__, per entry
        t.id = i
        given.append(t)
    new, notes = given, list(notes)
    set_ignore = opened.family is not None and opened.family.needs_ignore_merges(new)
    why_as_written = ("model-specific classes rebuild it from vocab and merges and would drop ignore_merges"
                      if set_ignore else opened.family.rebuild_breaks(new) if opened.family is not None else None)
    if not why_as_written and opened.llama_class_over_byte_level():
        why_as_written = BYTE_LEVEL_UNDER_LLAMA
    if why_as_written and (opened.config or {}).get("tokenizer_class") not in FILE_AS_WRITTEN_CLASSES:
        notes.append(opened.class_note(why_as_written))
    gap = None
    if isinstance(opened.model.get("vocab"), list) and new and start > len(opened.model["vocab"]):  # Unigram
        gap = (len(opened.model["vocab"]), start)
        taken = {t["id"] for t in opened.added.values()}
        free = [i for i in range(*gap) if i not in taken]
        if free:
            notes.append(f"Unigram ids {free[0]}..{free[-1]} (rows already in the checkpoint) hold placeholder "
                         f"pieces {GAP_PIECE.format('N')!r} that are never produced, so new ids match their rows")
    if opened.adopted and new:
        notes.append(f"{TOKENIZER_FILE} written with the pipeline transformers' {opened.adopted} builds on load, not "
                     "the file's own normalizer and pre-tokenizer, which tokenize some text otherwise (e.g. text that "
                     "starts with a space): the output gives text without new words the ids AutoTokenizer gave it")
    elif opened.rewritten and new:
        notes.append(f"{TOKENIZER_FILE}'s Metaspace pre-tokenizer (prepend_scheme 'always') written as normalizer "
                     "steps that give every text the same ids, so that new words are added tokens matched on "
                     "normalized text (as in Meta's Llama 2 layout)")
    if opened.converted_from:
        # with no tokenizer_config.json, only the converting class knew the BOS, EOS, UNK and special tokens
        written = (f"; {TOKENIZER_CONFIG} written with tokenizer_class PreTrainedTokenizerFast"
                   + "".join(f", {k} {f'({len(v)} tokens)' if isinstance(v, list) else repr(v)}"
                             for k, v in input_class_defaults(opened).items())
                   if opened.config is None and not why_as_written else "")
        notes.append(f"{opened.slow_file} converted to {TOKENIZER_FILE} with transformers' {opened.converted_from}{written}")
    if reuse is not None:
        taken = [t.id for t in new if t.id < start]
        notes.append(
            f"--reuse-reserved: {len(taken)} new tokens took existing rows"
            + (f" ({len(freed)} of them reserved tokens, e.g. {next(iter(freed.values()))!r})" if freed else "")
            + f"; {len(new) - len(taken)} rows appended"
        )
    return TokenizerPlan(opened.family_name, new, list(skipped), set_ignore, notes, gap, opened.tok, freed,
                         file_as_written=bool(why_as_written))

