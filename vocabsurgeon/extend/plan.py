"""The plan of `extend`: learn merges from a corpus (learn.py), make them new vocabulary entries at ids after the
last token, and lay out the rows as `add` does (`add.plan.Plan`), with what the new merges do to old text.

The tokenizer edit is `add`'s editor with one difference: the new entries are the learned pieces, each with
the merge that makes it, appended after the old merges in the order learned (`ExtendEditor.edited`); the
SentencePiece .model, where the input has one, gets them as normal pieces scored below every old piece in
that order (`TokenizerEditor.slow_model`). The surgery (rows, init, writer, verification) is `add`'s.
"""

from __future__ import annotations

import json
import logging
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from tokenizers import Tokenizer

from ..engine.target import Plan, Target, padding_multiple
from ..checkpoint.architectures import check_text_ids
from ..corpus import PACKAGED_CORPUS, count_words, pre_tokens, read_lines, read_paragraphs, words_of
from ..checkpoint.filenames import STALE_SLOW_FILES, TOKENIZER_FILE
from ..errors import InputError, VocabSurgeonError
from ..tokenizer.chats import chat_samples
from ..tokenizer.gguf_check import CHECK_TEXT, HASHED_FAMILIES
from ..tokenizer import writing
from ..tokenizer.editor import BYTE_LEVEL_UNDER_LLAMA, NewToken, TokenizerEditor, TokenizerPlan
from ..tokenizer.opened import OpenedTokenizer
from ..tokenizer.encoding import encode_ids, merge_parts, unpadded
from ..tokenizer.families import ByteLevelBPE, MetaspaceBPE, SentencePieceBPE
from . import DEFAULT_MIN_COUNT
from .learn import BYTE_PIECE, Learned, learn_merges, word_split

logger = logging.getLogger(__name__)

MAX_NEW_TOKENS = 1 << 20
KEEP_TEXT = ("keep text", "--keep-text")  # how errors reading it name the file and its flag
_WHY_NOT = {
    "Unigram": "a Unigram model has no merges to continue: its pieces compete by probability over the whole text, "
               "so a new piece changes how old text splits wherever it could occur; retrain or use `add` for whole "
               "words",
    "WordPiece": "WordPiece matches the longest vocabulary entry from the left: a new piece changes every old word "
                 "that starts with it, so old text cannot be kept; use `add` for whole words",
}


@dataclass
class ExtendOptions:
    """What `extend` learns: the corpus, how many new tokens, and the old text that must keep its tokens."""

    corpus: str | os.PathLike
    new_tokens: int
    keep_text: str | os.PathLike | None = None  # text in this file's characters keeps its tokens
    min_count: int = DEFAULT_MIN_COUNT  # a merge's pair must occur at least this often in the corpus

    def check(self) -> ExtendOptions:
        if not 1 <= self.new_tokens <= MAX_NEW_TOKENS:
            raise InputError(f"--new-tokens {self.new_tokens}: pass a number of new tokens from 1 to {MAX_NEW_TOKENS:,}")
        if self.min_count < 1:
            raise InputError(f"--min-count {self.min_count}: must be at least 1")
        for flag, path in (("--corpus", self.corpus), ("--keep-text", self.keep_text)):
            if path is not None and not Path(path).is_file():
                raise InputError(f"{path}: no such file; pass a UTF-8 text file to {flag}")
        return self


class ExtendEditor(OpenedTokenizer):
    """An opened tokenizer whose edit is add's (`writing`) with each new entry carrying its learned merge
    (`merges`, in the order learned)."""

    merges: dict[str, tuple[str, str]]
    chars: set[str]

    def __init__(self, path):
        super().__init__(path)
        self.merges = {}
        self.chars = set()

    def edited(self, plan: TokenizerPlan) -> dict:
        # add's edit puts each entry in the vocabulary; the merges are appended here, in the order learned
        data = writing.edited(self, replace(plan, new=[replace(t, mechanism="vocab") for t in plan.new]))
        pairs = []
        for t in sorted(plan.new, key=lambda t: t.id):
            if t.piece in self.chars:  # a character the vocabulary lacked: an entry, no merge
                continue
            pair = self.merges.get(t.piece)
            if pair is None or "".join(pair) != t.piece:
                raise VocabSurgeonError(f"internal: piece {t.piece!r} has no learned merge; nothing was written")
            pairs.append(pair)
        writing.append_merges(data["model"], pairs)
        return data

    def edited_tokenizer(self, plan: TokenizerPlan) -> Tokenizer:
        return writing.tokenizer_of(self, self.edited(plan))

    def slow_model(self, plan: TokenizerPlan) -> tuple[str, bytes] | None:
        return writing.slow_model(self, plan)

    def write(self, plan: TokenizerPlan, out_dir: Path) -> list[str]:
        return writing.write(self, plan, out_dir, self.edited(plan))


@dataclass
class OldText:
    """What the new merges do to a sample of old text: paragraphs whose ids changed."""

    source: str
    paragraphs: int
    changed: int
    example: str | None = None
    outside: int | None = None  # with --keep-text: paragraphs holding a character (byte) it lacks, the only ones
    # that can change
    inside_changed: int | None = None  # ... and those written in its characters alone that changed: 0, or a bug

    def to_dict(self) -> dict:
        return {"source": self.source, "paragraphs": self.paragraphs, "changed": self.changed,
                "example": self.example, "outside_keep_text": self.outside}


@dataclass
class ExtendPlan(Plan):
    """`add`'s plan of the rows and files, plus what was learned and what it does to old text."""

    learned: Learned | None = None
    extend: ExtendOptions | None = None
    corpus_bytes: int = 0
    old_text: list[OldText] = field(default_factory=list)
    keep_chars: set[str] | None = None  # --keep-text's characters in the model's spelling: a new piece holds another
    split: object = None  # where words are cut inside a pre-token (`word_split`), for `old_text_changes`

    new_pieces = True  # the new tokens are sub-word pieces, not words: validation checks no word is one token

    def verify_tokenizer(self, stage: Path) -> None:
        """Re-read the written tokenizer and check it as `extend` edits it: pieces and merges (`verify_extended`)."""
        verify_extended(stage, self)

    def fit_segment(self):
        """The fitted init's segmentation of its corpus: the edited tokenizer's own ids (new token j as -1 - j).
        The longest match of add's words gives other tokens where the merges leave pieces apart (on Russian,
        `включает|ся` where the merges give `включ|ается`): contexts that the tokenizer never writes."""
        tok = self.editor.edited_tokenizer(self.tokens)
        j_of = {t.id: j for j, t in enumerate(self.tokens.new)}

        def segment(texts: list[str]) -> list[list[int]]:
            return [[-1 - j_of[x] if x in j_of else x for x in ids] for ids in encode_ids(tok, texts)]

        return segment

    def to_dict(self) -> dict:
        d = super().to_dict()
        lr, n = self.learned, max(1, self.corpus_bytes)
        d["extend"] = {
            "corpus": str(self.extend.corpus), "corpus_bytes": self.corpus_bytes, "distinct_words": lr.words,
            "new_tokens_asked": self.extend.new_tokens, "new_tokens": len(lr.pieces), "new_characters": len(lr.chars),
            "merges_learned": len(lr.merges),
            "min_count": self.extend.min_count, "last_merge_count": lr.counts[-1] if lr.counts else None,
            "keep_text": str(self.extend.keep_text) if self.extend.keep_text else None,
            "pairs_refused": lr.refused,
            "corpus_tokens": {"before": lr.tokens_before, "after": lr.tokens_after},
            "tokens_per_byte": {"before": lr.tokens_before / n, "after": lr.tokens_after / n},
            "old_text": [o.to_dict() for o in self.old_text],
        }
        return d

    def describe(self) -> str:
        d = self.to_dict()
        e = d["extend"]
        lines = [
            f"{self.layout.kind} checkpoint, {d['tokenizer_family']} tokenizer: {e['merges_learned']:,} merges learned "
            + (f"and {e['new_characters']:,} characters it lacked added " if e["new_characters"] else "")
            + f"from {e['corpus']} ({e['corpus_bytes']:,} bytes, {e['distinct_words']:,} distinct words)",
            f"corpus tokens per byte {e['tokens_per_byte']['before']:.4f} -> {e['tokens_per_byte']['after']:.4f} "
            f"({100 * (1 - e['corpus_tokens']['after'] / max(1, e['corpus_tokens']['before'])):.1f}% fewer tokens)",
            f"rows {d['rows_before']} -> {d['rows_after']} ({len(d['added'])} tokens, {d['padding_rows']} padding "
            f"rows), init: input {d['init']['input']}, output {d['init']['output']}",
        ]
        if e["new_tokens"] < e["new_tokens_asked"]:
            lines.append(f"note: {e['new_tokens_asked']:,} asked, but no other pair occurs {e['min_count']}+ times "
                         "(or every other pair was refused)")
        shown = ", ".join(repr(a["form"]) for a in d["added"][:12])
        lines.append(f"  first new pieces: {shown}{', ...' if len(d['added']) > 12 else ''}")
        for why, k in e["pairs_refused"].items():
            lines.append(f"  refused {k:,} pair(s): {why}")
        for o in self.old_text:
            lines.append(f"old text {o.source}: {o.changed} of {o.paragraphs} paragraph(s) change tokens"
                         + (f", e.g. {o.example!r}" if o.example else "")
                         + (f" ({o.paragraphs - o.outside} written only in --keep-text's characters keep them by "
                            f"construction; {o.outside} hold a character it lacks)" if o.outside is not None else ""))
        lines.extend(f"note: {n}" for n in d["tokenizer_notes"])
        lines.append(f"rewrite {len(self.rewrite)} shard(s): {', '.join(self.rewrite)}")
        if d["kl_bound_covers"]:
            lines.append(d["kl_bound_covers"])
        return "\n".join(lines)


def _mergeable(editor: TokenizerEditor):
    """Whether a piece may be merged: not a byte-fallback piece, an added or special token, or the unknown piece."""
    unk = editor.model.get("unk_token")
    special = set(editor.added)

    def ok(piece: str) -> bool:
        return piece not in special and piece != unk and not BYTE_PIECE.fullmatch(piece)

    return ok


def plan_extend(target: Target, options: ExtendOptions, progress=None) -> ExtendPlan:
    """Learn `options.new_tokens` merges from the corpus and plan every change to `target`.

    Raises:
        InputError: a tokenizer that cannot be extended (with the reason), a corpus that cannot be read, or
            no pair frequent enough to merge.
    """
    options = options.check()
    ckpt, layout = target.ckpt, target.layout
    editor = ExtendEditor(ckpt.path)
    if editor.size > layout.rows:
        raise InputError(
            f"{ckpt.path / TOKENIZER_FILE}: the tokenizer has ids up to {editor.size - 1}, but '{layout.embedding}' "
            f"has only {layout.rows} rows; tokenizer and weights disagree, refusing to guess")
    # before learning: multimodal Gemma 3n reads ids past its text tokens as image and audio tokens
    check_text_ids(ckpt, layout, list(range(editor.size, editor.size + options.new_tokens)),
                   "extend appends its tokens after the last one; `add --reuse-reserved` puts whole words on the "
                   "tokenizer's unused placeholder tokens instead")
    family = editor.family_name
    if family not in (ByteLevelBPE.name, SentencePieceBPE.name, MetaspaceBPE.name):
        kind = editor.model.get("type") or family
        why = _WHY_NOT.get(kind, f"only BPE tokenizers (byte-level or SentencePiece) can be extended; this one is "
                                 f"{family}")
        raise InputError(f"{editor.file}: cannot extend a {kind} tokenizer: {why}")
    if editor.model.get("continuing_subword_prefix") or editor.model.get("end_of_word_suffix"):
        raise InputError(f"{editor.file}: a BPE with a continuing-subword prefix or end-of-word suffix cannot be "
                         "extended yet; use `add` for whole words")
    tok = editor.tok
    byte_level = family == ByteLevelBPE.name
    split = None if byte_level else word_split(editor.vocab)
    words, n_bytes = count_words(tok, options.corpus, split=split, progress=progress, need="in the new language or domain")
    chats = chat_samples(editor.dir, editor.config, editor.as_loaded)
    keep = read_paragraphs(options.keep_text, *KEEP_TEXT) if options.keep_text else []
    # llama.cpp's converter recognises a byte-level BPE by its ids on one text: a merge that changed them would make
    # the output refuse to convert to GGUF (tokenizer/gguf_check.py)
    checked = [CHECK_TEXT] if family in HASHED_FAMILIES else []
    forbidden = words_of(tok, [*chats, *checked], split)
    # --keep-text by its characters, not its pairs: every new piece holds a character (byte) the file lacks, so any
    # text spelled in the file's characters alone keeps its tokens, not only the file (learn.py)
    keep_chars = spelling(tok, read_lines(options.keep_text, *KEEP_TEXT), split) if keep else None  # newlines too
    vocab = {**editor.vocab, **{c: t["id"] for c, t in editor.added.items()}}
    learned = learn_merges(tok, words, options.new_tokens, vocab=vocab, mergeable=_mergeable(editor),
                           forbidden_words=forbidden, keep_chars=keep_chars,
                           whole_words=bool(editor.model.get("ignore_merges")), min_count=options.min_count,
                           new_chars=not byte_level)
    if not learned.pieces:
        why = "; ".join(f"{k:,} {r}" for r, k in learned.refused.items())
        raise InputError(f"{options.corpus}: no pair of pieces occurs {options.min_count}+ times that a merge could "
                         "join" + (f" (refused: {why})" if why else "") + "; pass a larger corpus (or a lower "
                         "--min-count" + (", or a --keep-text without the new language's characters" if keep else "")
                         + ")")
    start = editor.size
    new = []
    model = tok.model
    editor.chars = set(learned.chars)
    editor.merges = {a + b: (a, b) for a, b in learned.merges}
    for i, piece in enumerate(learned.pieces):
        # the ids the old tokenizer gives the piece (a new character: its bytes): the sub-word mean's rows
        pieces = [t.id for t in model.tokenize(piece)]
        new.append(NewToken(piece, editor.text_of(piece), piece, start + i, "merge", pieces))
    tplan = TokenizerPlan(family, new, [], original=tok)
    if editor.llama_class_over_byte_level():  # merges need no class of their own, but this one loads them otherwise
        tplan.file_as_written = True
        tplan.notes.append(editor.class_note(BYTE_LEVEL_UNDER_LLAMA))
    if editor.rewritten or editor.adopted:
        tplan.notes.append(f"{TOKENIZER_FILE} is written in the layout transformers loads the input with (same ids)")
    tplan.slow_model = editor.slow_model(tplan)
    if tplan.slow_model is not None:
        tplan.notes.append(f"{tplan.slow_model[0]}: the new pieces appended, scored below every old piece in the "
                           "order learned (SentencePiece and llama.cpp merge them last, as tokenizer.json does)")
    kept = tplan.slow_model[0] if tplan.slow_model else None
    dropped = [f for f in STALE_SLOW_FILES if f != kept and (ckpt.path / f).is_file()]
    if dropped:
        tplan.notes.append(f"not copied: {', '.join(dropped)} (slow-tokenizer files without the new pieces; "
                           f"{TOKENIZER_FILE} has them)")
    rows_after = layout.rows + sum(t.id >= layout.rows for t in new)
    m = target.options.pad_to_multiple_of or padding_multiple(layout.rows, editor.size)
    if m:
        rows_after = math.ceil(rows_after / m) * m
    rewrite = target.vocab_files
    copy = [f for f in ckpt.shards if f not in rewrite]
    plan = ExtendPlan(target, editor, tplan, layout.rows, rows_after, rewrite, copy, dropped,
                      learned=learned, extend=options, corpus_bytes=n_bytes, keep_chars=keep_chars, split=split)
    edited = editor.edited_tokenizer(tplan)
    samples = [(str(options.keep_text), keep)] if keep else []
    samples.append(("(packaged sample)", read_paragraphs(PACKAGED_CORPUS)))
    for source, texts in samples:
        plan.old_text.append(old_text_changes(tok, edited, source, texts, keep_chars, split))
    for o in plan.old_text:
        if o.inside_changed:  # a paragraph in the keep file's characters changed: the guarantee broke
            raise VocabSurgeonError(f"internal: {o.inside_changed} paragraph(s) of {o.source} written in "
                                    "--keep-text's characters change tokens; nothing was written, please report it")
    if checked and old_text_changes(tok, edited, "llama.cpp", checked).changed:
        raise VocabSurgeonError("internal: the learned merges change the ids of llama.cpp's pre-tokenizer check text "
                                "(the output would not convert to GGUF); nothing was written, please report it")
    return plan


def spelling(tok: Tokenizer, texts: list[str], split=None) -> set[str]:
    """The characters of `texts` as the model spells them (`pre_tokens`: bytes as byte-level characters)."""
    run = pre_tokens(tok, split)
    return {ch for t in texts for w in run(t) for ch in w}


def outside_keep_text(tok: Tokenizer, texts: list[str], keep_chars: set[str], split=None) -> list[bool]:
    """For each of `texts`, whether it holds a character (byte) outside `keep_chars`: only such text can change."""
    run = pre_tokens(tok, split)
    return [not keep_chars.issuperset("".join(run(t))) for t in texts]


def old_text_changes(old: Tokenizer, new: Tokenizer, source: str, texts: list[str], keep_chars: set[str] | None = None,
                     split=None) -> OldText:
    """How many of `texts` get other ids from `new` than from `old`; with `keep_chars` (--keep-text's), also how many
    hold a character (byte) outside them: only those can change."""
    a, b = encode_ids(old, texts), encode_ids(new, texts)
    changed = [t for t, x, y in zip(texts, a, b) if x != y]
    outside = inside_changed = None
    if keep_chars is not None:
        out = outside_keep_text(old, texts, keep_chars, split)
        outside = sum(out)
        inside_changed = sum(x != y and not o for x, y, o in zip(a, b, out))
    return OldText(source, len(texts), len(changed), changed[0][:60] if changed else None, outside, inside_changed)


def verify_extended(out_dir: Path, plan: ExtendPlan) -> None:
    """Re-read the written tokenizer.json and check: every old entry keeps its id, the old merges come first
    and unchanged, each new piece has its row's id and its merge in the order learned, --keep-text keeps its
    ids, and old text decodes as before.

    Raises:
        VocabSurgeonError: any check fails (a bug: the output is not published).
    """
    file = out_dir / TOKENIZER_FILE
    data = json.loads(file.read_text(encoding="utf-8"))
    tok = unpadded(Tokenizer.from_file(str(file)))
    editor = plan.editor
    vocab = data["model"]["vocab"]
    moved = next((p for p, i in editor.vocab.items() if vocab.get(p) != i), None)
    if moved is not None:
        raise VocabSurgeonError(f"internal: old piece {moved!r} changed id in {file}; nothing was published")
    old = [merge_parts(m) for m in editor.model.get("merges") or []]
    merges = [merge_parts(m) for m in data["model"]["merges"]]
    if merges[:len(old)] != old or merges[len(old):] != plan.learned.merges:
        raise VocabSurgeonError(f"internal: the merges of {file} are not the old ones then the learned ones")
    for t in plan.tokens.new:
        if tok.token_to_id(t.piece) != t.id:
            raise VocabSurgeonError(f"internal: piece {t.piece!r} reloads as id {tok.token_to_id(t.piece)}, "
                                    f"not its row {t.id}; nothing was published")
    original = plan.tokens.original
    texts = read_paragraphs(PACKAGED_CORPUS)
    keep = read_paragraphs(plan.extend.keep_text, *KEEP_TEXT) if plan.extend.keep_text else []
    for text, a, b in zip(texts + keep, encode_ids(original, texts + keep), encode_ids(tok, texts + keep)):
        # where the original decodes the text faithfully (not an unknown piece): so must the edit
        if tok.decode(b) != original.decode(a) and original.decode(a) == text:
            raise VocabSurgeonError(f"internal: {text[:40]!r} decodes otherwise after the edit; nothing was published")
    for text, a, b in zip(keep, encode_ids(original, keep), encode_ids(tok, keep)):
        if a != b:
            raise VocabSurgeonError(f"internal: --keep-text {text[:40]!r} changed ids; nothing was published")
