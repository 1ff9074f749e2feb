"""`add` as a library call: plan the words while the shards start copying, write, then the engine's
validation, card, publication and push (`add_validate_push`); `add_tokens` writes without validating.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace

from ..engine.finish import DEFAULT_VALIDATION, Finished, PushOptions, ValidationOptions, run
from ..engine.job import AddJob, AddResult
from ..progress import SILENT, Progress, counting
from .plan import AddOptions, Plan, Target, open_target, plan_tokens

def add_validate_push(src: str | os.PathLike, out: str | os.PathLike, tokens: list[str], options=None, *,
                      validation: ValidationOptions | None = DEFAULT_VALIDATION, push: PushOptions | None = None,
                      revision: str | None = None, token: str | None = None, progress: Progress | None = None,
                      on_plan: Callable | None = None, on_step: Callable[[str, Finished], None] | None = None
                      ) -> Finished:
    """The whole `vocabsurgeon add` pipeline from Python: plan, write, validate, card, publish, push
    (`engine.finish.run`: nothing is published before it passed validation).

    Every option is checked before any work; the shards start copying while the tokens are planned.

    Args:
        src, out, tokens: as `add_tokens`.
        options: `AddOptions` (None: the defaults).
        validation, push: as `finish_add`.
        revision, token: the Hub revision and token of `src` when it is a repo id.
        progress: `progress.Progress` callbacks: the "writing" count (bytes), the fitted init's
            stages, the validation's stages and its "validating" count (tokens).
        on_plan: called with the `Plan` once the tokens are planned, before the new rows are
            computed and written (the CLI prints it).
        on_step: as `finish_add`.

    Raises:
        InputError: an option, the checkpoint or the tokens cannot be used (nothing is written);
            `plan.nothing_to_add()` when no token is new.
        ValidationFailed, PushError: as `finish_add`.

    Example:
        >>> from vocabsurgeon.add.pipeline import PushOptions, add_validate_push  # doctest: +SKIP
        >>> done = add_validate_push("ckpt/", "out/", ["Frodo"], push=PushOptions("me/gpt2-lotr"))  # doctest: +SKIP
        >>> done.report.passed, done.pushed.commit_url  # doctest: +SKIP
    """
    options = (options or AddOptions()).check()
    if validation is not None:
        validation.check()
        if validation.corpus is not None and options.check_corpus is None:  # the plan checks the corpus validation reads
            options = replace(options, check_corpus=str(validation.corpus))
    if push is not None:
        push.check()
    target = open_target(src, options, revision=revision, token=token)
    return run(target, out, lambda t: plan_tokens(t, tokens), validation, push, progress=progress or SILENT,
               on_plan=on_plan, on_step=on_step)


def add_tokens(
    src: str | os.PathLike,
    out: str | os.PathLike,
    tokens: list[str],
    *,
    progress: Callable[[int], None] | None = None,
    revision: str | None = None,
    token: str | None = None,
    **options,
) -> AddResult:
    """Add `tokens` to the checkpoint at `src` and write the result to `out`.

    Args:
        src: a Hugging Face checkpoint directory (config.json, safetensors, tokenizer.json), or a Hub
            repo id (`org/name`) whose safetensors checkpoint is downloaded into the Hub cache.
        out: the output directory; created atomically, must not exist or be empty (or force=True).
        tokens: the new tokens, e.g. from `read_tokens_file`.
        progress: called with the number of bytes written, as they are written.
        revision, token: the Hub revision and token when `src` is a repo id (token None: HF_TOKEN or
            the stored login).
        **options: fields of `AddOptions` (init_input, init_output, seed, eps, special, link, force,
            device, embedding_key, lm_head_key, pad_to_multiple_of, init, reuse_reserved, gguf_parity, strict).

    Returns:
        AddResult; `result.to_dict()` is what `vocabsurgeon add --json` prints.

    Example:
        >>> from vocabsurgeon import add_tokens
        >>> r = add_tokens("fixtures/gpt2-tiny", "/tmp/out", ["Frodo"], init="mean")  # doctest: +SKIP
        >>> r.to_dict()["rows_after"] - r.to_dict()["rows_before"]  # doctest: +SKIP
        2
    """
    target = open_target(src, AddOptions(**options), revision=revision, token=token)
    return run_job(target, out, tokens, counting("writing", progress) if progress else SILENT)


def run_job(target: Target, out: str | os.PathLike, tokens: list[str], progress: Progress = SILENT,
            on_plan: Callable[[Plan], None] | None = None) -> AddResult:
    """Plan `tokens` for `target` while its shards start copying, then write `out` (see `AddJob`):
    `add_tokens` and `pipeline.add_validate_push` both run this.

    Args:
        progress: the "writing" count (bytes) and the fitted init's stages.
        on_plan: called with the plan before the new rows are computed and written.

    Raises:
        InputError: no token is new, or bad input found while reading values; nothing is written.
    """
    with AddJob(target, out) as job:
        return job.write(job.use(plan_tokens(target, tokens)), progress, on_plan)
