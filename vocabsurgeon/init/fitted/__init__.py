"""Fitted init: new rows fitted to what the model itself predicts and reads in context.

One entry, `fit_rows`, picks the fit for the model's kind: `causal` (distilled input rows, convex new-logit
output rows) or `encoder` (distilled input rows; `mlm` fits a masked-LM head's rows). Both keep the held-out
old-text KL within its limit (`vocabsurgeon.kl`). The method: docs/init.md and docs/internals.md.
`shrink_rows` keeps only that last step, on the sub-word mean (`--init subword-mean-shrunk`, shrunk.py).
"""

from __future__ import annotations

import math
from pathlib import Path

from ...errors import InputError
from ...progress import Steps
from ...runtime import ModelKind, model_kind
from .common import OUTPUT_STARTS, FitOptions, FitResult, FitToken

__all__ = ["fit_rows", "shrink_rows", "check_kind", "FitOptions", "FitResult", "FitToken"]


def fit_rows(src: str | Path, tokens: list[FitToken], roles: set[str], options: FitOptions | None = None,
             progress: Steps | None = None) -> FitResult:
    """Fit the new rows of the checkpoint at `src` (the original) for `tokens`.

    Args:
        src: the original checkpoint directory: a causal LM transformers can build, or an encoder.
        tokens: the new tokens, in row order; tokens without pieces (special tokens) keep the
            sub-word mean / mean row.
        roles: {"input"}, {"output"} or both: which rows to fit.
        options: `FitOptions`.
        progress: called with (stage, done, total).

    Returns:
        FitResult with (k, hidden) float64 rows for each fitted role and a report (method, contexts,
        steps, seconds, the held-out old-text KL of the output rows).

    Raises:
        InputError: the model is a sequence-to-sequence model or cannot be loaded, its logits are not
            hidden . lm_head, an option is out of range, or the corpus cannot be read.

    Example:
        >>> r = fit_rows("fixtures/llama-tiny", [FitToken(" Frodo", (1, 2))], {"output"})  # doctest: +SKIP
        >>> r.output_rows.shape  # doctest: +SKIP
        (1, 64)
    """
    opts = options or FitOptions()
    if (opts.target or "corpus") not in ("corpus", "model"):
        raise InputError(f"fit target {opts.target!r} is not one of corpus, model")
    if opts.output_start not in OUTPUT_STARTS:
        raise InputError(f"fit output start {opts.output_start!r} is not one of {', '.join(OUTPUT_STARTS)}")
    _check_kl_limit(opts)
    say = progress or (lambda stage, done, total: None)
    src = Path(src)
    kind = check_kind(src)
    if kind.task == "causal":
        from .causal import fit_causal_rows

        return fit_causal_rows(src, kind, tokens, roles, opts, say)
    from .encoder import fit_encoder_rows

    return fit_encoder_rows(src, kind, tokens, roles, opts, say)


def shrink_rows(src: str | Path, tokens: list[FitToken], options: FitOptions | None = None,
                progress: Steps | None = None) -> FitResult:
    """The output rows of `--init subword-mean-shrunk` for `tokens` on the causal LM at `src` (the original):
    each token's mean of its pieces' output rows, shrunk toward the mean row until the held-out old-text KL
    meets fitted's limits (the mean-init bound, or `options.kl_limit`; see `fitted.shrunk`).

    Args:
        src: the original checkpoint directory, a causal LM transformers can build.
        tokens: the new tokens, in row order; a token without pieces starts from the mean row.
        options: `FitOptions` (kl_limit, old_text_tokens, batch_size, device, dtype are read).
        progress: called with (stage, done, total).

    Returns:
        FitResult with (k, hidden) float64 output rows and a report (the shrink factor a, the limits, the
        held-out old-text KL before and after the shrink).

    Raises:
        InputError: the model is not a causal LM, cannot be loaded, or its logits are not hidden . lm_head.

    Example:
        >>> r = shrink_rows("fixtures/gpt2-tiny", [FitToken(" Frodo", (1, 2))])  # doctest: +SKIP
        >>> r.report["output"]["shrink"]["a"]  # doctest: +SKIP
        1.0
    """
    opts = options or FitOptions()
    _check_kl_limit(opts)
    src = Path(src)
    kind = model_kind(src)
    if kind.task != "causal":
        what = kind.reason or f"{kind.class_name} is not a causal language model"
        raise InputError(f"{src}: --init subword-mean-shrunk measures the old-text KL of a causal language model; "
                         f"{what}: use --init subword-mean (or mean)")
    from .shrunk import shrink_subword_rows

    return shrink_subword_rows(src, kind, tokens, opts, progress or (lambda stage, done, total: None))


def _check_kl_limit(opts: FitOptions) -> None:
    """--fit-kl-limit, read by both the fit's shrink and subword-mean-shrunk's: a finite number of nats >= 0."""
    if opts.kl_limit is not None and not (math.isfinite(opts.kl_limit) and opts.kl_limit >= 0):
        raise InputError(f"--fit-kl-limit {opts.kl_limit}: must be a finite number of nats >= 0")


def check_kind(src: Path) -> ModelKind:
    """The checkpoint's kind, refused in one line unless fitted can run it: a causal LM, or an encoder
    (a masked-LM head, or a body without one such as a sentence-transformers checkpoint).

    Raises:
        InputError: naming the model kind, what fitted supports and what to use instead.
    """
    kind = model_kind(src)
    if kind.task in ("causal", "masked", "encoder"):
        return kind
    what = {"seq2seq": f"{kind.class_name} is a sequence-to-sequence model"}.get(kind.task or "", kind.reason)
    raise InputError(f"{src}: --init fitted supports causal language models and encoders (BERT-style, masked-LM "
                     f"or sentence-transformers); {what}: use --init subword-mean (or mean)")
