"""`add`'s word planning: which of the user's words become which entries and ids (`plan_tokens`), on the
engine's `Target`. Reads the tokenizer only; the engine applies the plan.
"""

from __future__ import annotations

import math
import os

from ..checkpoint.architectures import check_text_ids, text_id_limit
from ..checkpoint.filenames import STALE_SLOW_FILES, TOKENIZER_FILE
from ..corpus import read_corpus
from ..engine.target import AddOptions, Plan, Target, open_target, padding_multiple  # noqa: F401 (add's names)
from ..errors import InputError
from ..tokenizer.editor import TokenizerEditor
from .wordlist import check_word_count

def plan_tokens(target: Target, tokens: list[str]) -> Plan:
    """Read the tokenizer and decide every change `tokens` make to `target`.

    Raises:
        InputError: a tokenizer that cannot be used, or tokens that cannot be added.
    """
    ckpt, layout, options = target.ckpt, target.layout, target.options
    check_word_count(len(tokens))  # before the tokenizer is read: a list too long to plan is refused at once
    editor = TokenizerEditor(ckpt.path, gguf_parity=options.gguf_parity, model_config=ckpt.config)
    size = editor.size  # once: the property scans every id, too slow to ask per new token
    if size > layout.rows:
        raise InputError(
            f"{ckpt.path / TOKENIZER_FILE}: the tokenizer has ids up to {size - 1}, but '{layout.embedding}' "
            f"has only {layout.rows} rows; tokenizer and weights disagree, refusing to guess"
        )
    # New ids start right after the last token, as transformers' add_tokens numbers them, so that
    # resize_token_embeddings(len(tokenizer)) keeps every new row: the padding rows past the tokenizer
    # are taken first (their values replaced), rows are appended only past them. --reuse-reserved hands
    # out every unused row and the reserved placeholders first, then appends.
    limit = text_id_limit(ckpt.config, layout)  # multimodal Gemma 3n: ids from its vision offset on are not text
    reuse = editor.reusable_ids(min(layout.rows, limit[0]) if limit else layout.rows) if options.reuse_reserved else None
    tplan = editor.plan(tokens, special=options.special, first_id=layout.rows if reuse else size, reuse=reuse,
                        corpus=_check_texts(options))
    check_text_ids(ckpt, layout, [t.id for t in tplan.new],
                   "it has too few unused placeholder tokens below that for them: add fewer tokens" if reuse else
                   "pass --reuse-reserved to put them on the tokenizer's unused placeholder tokens below it")
    if options.strict and tplan.skipped:
        first = tplan.skipped[0]
        raise InputError(f"--strict: {len(tplan.skipped)} token(s) would be skipped, e.g. {first['token']!r}: "
                         f"{first['reason']}; nothing was written (drop --strict or remove them; see --dry-run)")
    if options.strict and tplan.contexts:
        w, where = next(iter(tplan.contexts.items()))
        raise InputError(f"--strict: {len(tplan.contexts)} token(s) would not be one token in every context, e.g. {w!r} "
                         f"in {where[0]!r}; nothing was written (drop --strict to keep them; see --dry-run --json)")
    tplan.slow_model = editor.slow_model(tplan)
    if tplan.slow_model is not None:
        tplan.notes.append(f"{tplan.slow_model[0]}: the new tokens appended as pieces at their ids (llama.cpp's "
                           "converter reads it first; SentencePiece users get them too)")
    kept = tplan.slow_model[0] if tplan.slow_model else None
    dropped = [f for f in STALE_SLOW_FILES if f != kept and (ckpt.path / f).is_file()] if tplan.new else []
    if dropped:
        tplan.notes.append(
            f"not copied: {', '.join(dropped)} (slow-tokenizer files without the new tokens; {TOKENIZER_FILE} has them)"
        )
    on_padding = [t.id for t in tplan.new if size <= t.id < layout.rows]
    if on_padding and reuse is None:
        tplan.notes.append(
            f"{len(on_padding)} new token(s) took padding rows {on_padding[0]}..{on_padding[-1]} (ids right after the "
            "tokenizer's last, as transformers' add_tokens numbers them, so resize_token_embeddings(len(tokenizer)) "
            "keeps them); their old values are replaced")
    rows_after = layout.rows + sum(t.id >= layout.rows for t in tplan.new)
    m = options.pad_to_multiple_of or padding_multiple(layout.rows, size)
    if tplan.new and m:
        rows_after = math.ceil(rows_after / m) * m
    rewrite = target.vocab_files if tplan.new else []
    copy = [f for f in ckpt.shards if f not in rewrite]
    return Plan(target, editor, tplan, layout.rows, rows_after, rewrite, copy, dropped)


def _check_texts(options: AddOptions) -> list[str]:
    """The corpora whose words that hold a new word the plan checks (issue 39): the validation corpus and
    the fit corpus, as validation and the fit read them."""
    texts = [read_corpus(options.check_corpus)[0]]
    if options.fit_corpus is not None:
        texts.append(read_corpus(options.fit_corpus, "fit corpus", "--fit-corpus")[0])
    return texts


def plan_add(src: str | os.PathLike, tokens: list[str], options: AddOptions | None = None, *,
             revision: str | None = None, token: str | None = None) -> Plan:
    """Open the checkpoint and tokenizer and decide every change; reads headers only. `src`,
    `revision` and `token` as in `open_target`.

    Raises:
        InputError: for anything about the input that cannot be used, before any byte is written.
    """
    return plan_tokens(open_target(src, options, revision=revision, token=token), tokens)
