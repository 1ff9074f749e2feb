"""The `extend` pipeline as a library call: learn the merges, then `add`'s surgery, validation, card and push.

The shards start copying while the corpus is counted and the merges learned (`engine.job.AddJob`); the
new rows are `add`'s (`--init`; `DEFAULT_INIT`: the sub-word mean from the pieces the old merges give each new
piece, its output rows shrunk until old text keeps its KL limits), and so are the writer, the re-read of every
tensor, the validation and the push.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path


from ..engine.finish import DEFAULT_VALIDATION, Finished, PushOptions, ValidationOptions, run
from ..engine.job import AddJob, AddResult
from ..engine.target import AddOptions, open_target
from ..progress import SILENT, Progress
from . import DEFAULT_INIT
from .plan import ExtendOptions, ExtendPlan, plan_extend


def run_extend(target, out: str | os.PathLike, options: ExtendOptions, progress: Progress = SILENT,
               on_plan: Callable[[ExtendPlan], None] | None = None) -> AddResult:
    """Learn the merges while `target`'s shards start copying, then write `out` (the engine's `AddJob`)."""
    with AddJob(target, out) as job:
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
    target = open_target(src, add_options, revision=revision, token=token)
    reading = progress.count("reading corpus", _size(options.corpus), "B")
    return run(target, out, lambda t: plan_extend(t, options, progress=reading), validation, push, progress=progress,
               on_plan=on_plan, on_step=on_step)
