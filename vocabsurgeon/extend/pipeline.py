"""The `extend` pipeline as a library call: learn the merges, then `add`'s surgery, validation, card and push.

The shards start copying while the corpus is counted and the merges learned (`add.surgery.AddJob`); the
new rows are `add`'s (`--init`; `DEFAULT_INIT`: the sub-word mean from the pieces the old merges give each new
piece, its output rows shrunk until old text keeps its KL limits), and so are the writer, the re-read of every
tensor, the validation and the push.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from tokenizers import Tokenizer

from ..add.pipeline import DEFAULT_VALIDATION, Finished, PushOptions, ValidationOptions, finish_add
from ..add.plan import AddOptions, open_target
from ..add.surgery import AddJob, AddResult
from ..checkpoint.filenames import TOKENIZER_FILE
from ..errors import VocabSurgeonError
from ..progress import SILENT, Progress
from . import DEFAULT_INIT
from ..tokenizer.encoding import encode_ids, unpadded
from .plan import PACKAGED_CORPUS, ExtendOptions, ExtendPlan, paragraphs, plan_extend
from ..trim.tokenizer import merge_parts


class ExtendJob(AddJob):
    """`add`'s job, checking the written tokenizer as `extend` edits it (pieces, not words)."""

    def verify_tokenizer(self, stage: Path, plan: ExtendPlan) -> None:
        verify_extended(stage, plan)


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
    texts = paragraphs(PACKAGED_CORPUS)
    keep = paragraphs(plan.extend.keep_text) if plan.extend.keep_text else []
    for text, a, b in zip(texts + keep, encode_ids(original, texts + keep), encode_ids(tok, texts + keep)):
        # where the original decodes the text faithfully (not an unknown piece): so must the edit
        if tok.decode(b) != original.decode(a) and original.decode(a) == text:
            raise VocabSurgeonError(f"internal: {text[:40]!r} decodes otherwise after the edit; nothing was published")
    for text, a, b in zip(keep, encode_ids(original, keep), encode_ids(tok, keep)):
        if a != b:
            raise VocabSurgeonError(f"internal: --keep-text {text[:40]!r} changed ids; nothing was published")


def run_extend(target, out: str | os.PathLike, options: ExtendOptions, progress: Progress = SILENT,
               on_plan: Callable[[ExtendPlan], None] | None = None) -> AddResult:
    """Learn the merges while `target`'s shards start copying, then write `out` (`add`'s `AddJob`)."""
    with ExtendJob(target, out) as job:
        plan = job.use(plan_extend(target, options, progress=progress.count("reading corpus", _size(options.corpus),
                                                                             "B")))
        return job.write(plan, progress, on_plan)


def _size(path) -> int:
    try:
        return Path(path).stat().st_size
    except OSError:
        return 0


def extend_validate_push(src: str | os.PathLike, out: str | os.PathLike, options: ExtendOptions,
                         add_options: AddOptions | None = None, *,
                         validation: ValidationOptions | None = DEFAULT_VALIDATION, push: PushOptions | None = None,
                         revision: str | None = None, token: str | None = None, progress: Progress | None = None,
                         on_plan: Callable | None = None, on_step: Callable[[str, Finished], None] | None = None
                         ) -> Finished:
    """The whole `vocabsurgeon extend` pipeline from Python: learn, write, validate, card, push.

    Args:
        src, out: as `add_tokens`.
        options: the corpus, how many new tokens and the --keep-text file (`ExtendOptions`).
        add_options: the surgery's options (`AddOptions`: init, seed, device, ...; None: `DEFAULT_INIT`, the
            sub-word mean with its output rows shrunk to keep old text). With
            `--init fitted` and no fit corpus, the fit reads `options.corpus`.
        validation, push, revision, token, progress, on_plan, on_step: as `add.pipeline.add_validate_push`.

    Raises:
        InputError: an option, the checkpoint, its tokenizer (with why it cannot be extended) or the corpus
            cannot be used; nothing is written.
        ValidationFailed, PushError: as `finish_add`.

    Example:
        >>> from vocabsurgeon.extend.pipeline import ExtendOptions, extend_validate_push  # doctest: +SKIP
        >>> done = extend_validate_push("ckpt/", "out/", ExtendOptions("ru.txt", 8000))  # doctest: +SKIP
        >>> done.to_dict()["extend"]["tokens_per_byte"]  # doctest: +SKIP
    """
    options = options.check()
    add_options = (add_options or AddOptions(init=DEFAULT_INIT)).check()
    if add_options.fit_corpus is None and "fitted" in {add_options.init, add_options.init_input,
                                                       add_options.init_output}:
        # the new pieces' contexts are the corpus they were learned from, not contexts generated after prompts
        # made for whole words ("The{}")
        add_options = replace(add_options, fit_corpus=str(options.corpus))
    if validation is not None:
        validation.check()
    if push is not None:
        push.check()
    progress = progress or SILENT
    result = run_extend(open_target(src, add_options, revision=revision, token=token), out, options, progress, on_plan)
    return finish_add(result, validation, push, progress=progress, on_step=on_step)
