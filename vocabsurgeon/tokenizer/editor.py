"""Adding tokens to a checkpoint's tokenizer so new words behave like native words, per family.

Every word gets its bare form and its word-start form by the mechanism its family (a record in
`families/`) and every loader honour. The editor is its data and rooms of functions over it: the opened
tokenizer (`opened.py`), the class transformers loads and its defaults (`loading.py`), drafting words into
numbered entries (`drafting.py`), the plan's checks and the output's verification (`checks.py`) and
writing (`writing.py`). `TokenizerEditor.plan` runs the loop: draft, number, check, and draft again without
the words that fail, each skipped with its reason. Details: docs/internals.md.
"""

from __future__ import annotations

import logging
from pathlib import Path

from tokenizers import Tokenizer

from . import checks, drafting, resplit, writing
from ..errors import InputError
from .chats import chat_samples
from .drafting import TokenizerPlan
from .opened import OpenedTokenizer

# Other modules import these from here.
from .checks import verify_tokenizer  # noqa: F401
from .drafting import NewToken  # noqa: F401
from .loading import BYTE_LEVEL_UNDER_LLAMA  # noqa: F401
from .opened import convert_slow_tokenizer, require_tokenizer_files  # noqa: F401

logger = logging.getLogger(__name__)


class TokenizerEditor(OpenedTokenizer):
    """A checkpoint's fast tokenizer, opened for adding tokens: the plan loop (`plan`) over the rooms."""

    def plan(self, words: list[str], *, special: bool = False, first_id: int | None = None,
             reuse: list[tuple[int, str | None]] | None = None, chat: list[str] | None = None,
             corpus: list[str] | None = None) -> TokenizerPlan:
        """Decide the new entries and their ids: first from `reuse` (see `reusable_ids`), then
        from `first_id` (default `size`) on.

        The edited tokenizer is built in memory and every word is checked in every context
        (`checks.failed_words`); a word that fails is skipped with its reason and the rest planned again,
        so that a dry run says exactly what the real run does. `chat`: old texts that must keep
        their ids (default: the rendered chat template, `chat_samples`). `corpus`: texts (the validation
        and fit corpora) whose words that hold a new word are checked with the vocabulary's (`holders`).

        Raises:
            InputError: new ids inside the tokenizer, or an unsupported tokenizer family.
        """
        size = self.size  # one scan of the ids
        start = size if first_id is None else first_id
        if start < size:
            raise InputError(f"new ids must start at or after {size}, the tokenizer's size; got {start}")
        new, skipped, notes = drafting.draft(self, words, special)
        chat = chat_samples(self.dir, self.config, self.as_loaded) if chat is None else chat
        corpus_index = resplit.Holders(resplit.corpus_words(corpus)) if corpus else None
        failed: dict[str, str] = {}
        while True:
            plan = drafting.numbered(self, new, skipped, notes, start, reuse)
            failures, plan.contexts, plan.file_only_contexts = checks.failed_words(self, plan, chat, corpus_index)
            if not failures:
                break
            failed.update(failures)
            new = [t for t in new if t.text not in failures]
            order = {w: i for i, w in enumerate(words)}  # reported in the user's order
            skipped = skipped + [{"token": w, "reason": failures[w]} for w in sorted(failures, key=order.__getitem__)]
        if failed:
            w = next(iter(failed))
            note = f"{len(failed)} token(s) skipped after checking the edited tokenizer (e.g. {w!r}): {failed[w]}"
            plan.notes.append(note)
        if plan.resplits:
            w, seen = next(iter(plan.resplits.items()))
            ex = seen[0]
            note = (f"{len(plan.resplits)} kept token(s) re-split longer words that hold them (e.g. {w!r}: {ex['text']!r} "
                    f"{ex['before']} -> {ex['after']}): "
                    + ("--gguf-parity writes merges and added tokens, which llama.cpp reads as transformers does"
                       if self.gguf_parity and self.family_name == "byte-level-bpe" else
                       "this tokenizer allows no entry that only the whole word reaches")
                    + " (docs/families.md: added tokens are matched anywhere in raw text, by every runtime); each word's "
                    "longer words: longer_words_resplit in --json")
            plan.notes.append(note)
        if plan.contexts:
            w, where = next(iter(plan.contexts.items()))
            note = (f"{len(plan.contexts)} kept token(s) are not one token in some contexts (e.g. {w!r} in {where[0]!r}), "
                    "which this tokenizer's entries cannot reach without changing how old text tokenizes: there the "
                    "word keeps its old pieces (each word's contexts: contexts_not_one_token in --json)")
            plan.notes.append(note)
        return plan

    def reusable_ids(self, rows: int) -> list[tuple[int, str | None]]:
        """`drafting.reusable_ids`: the rows --reuse-reserved may take, as (id, content)."""
        return drafting.reusable_ids(self, rows)

    def edited(self, plan: TokenizerPlan) -> dict:
        """`writing.edited`: the tokenizer.json object with the plan applied."""
        return writing.edited(self, plan)

    def edited_tokenizer(self, plan: TokenizerPlan) -> Tokenizer:
        """The tokenizer of `edited(plan)`, built in memory."""
        return writing.tokenizer_of(self, self.edited(plan))

    def edited_config(self, plan: TokenizerPlan) -> dict | None:
        """`writing.edited_config`: tokenizer_config.json with the plan applied, or None to leave it out."""
        return writing.edited_config(self, plan)

    def slow_model(self, plan: TokenizerPlan) -> tuple[str, bytes] | None:
        """`writing.slow_model`: the SentencePiece .model with the new pieces, or None."""
        return writing.slow_model(self, plan)

    def write(self, plan: TokenizerPlan, out_dir: Path) -> list[str]:
        """Write the edited tokenizer files into out_dir; returns the file names written."""
        return writing.write(self, plan, out_dir, self.edited(plan))
