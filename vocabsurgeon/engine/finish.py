"""After the staged write: validate, record the card and report, publish, push; the options of those steps.

Every command that writes a checkpoint (add, extend, trim) ends here, in the same order and with the same
card. Every option is checked before any work.
"""
from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError, Interrupted, PushError, ValidationFailed
from ..checkpoint.filenames import REPORT_NAME
from ..validation.report import Report

logger = logging.getLogger(__name__)


@dataclass
class ValidationOptions:
    """How `add` validates what it wrote (the flags of `vocabsurgeon validate`)."""

    corpus: str | os.PathLike | None = None
    max_tokens: int | None = None  # None: validate.DEFAULT_MAX_TOKENS
    thresholds: object | None = None  # validate.Thresholds; None: the defaults
    seed: int = 0
    device: str = "auto"
    plot: str | os.PathLike | None = None
    dtype: str = "auto"  # what the models run in (devices.DTYPES)

    def check(self) -> ValidationOptions:
        """Raises InputError for a bad limit, device or --max-tokens, or --plot without matplotlib."""
        from ..init import check_seed
        from ..validation.validate import DEFAULT_MAX_TOKENS, check_options

        check_seed(self.seed)
        check_options(thresholds=self.thresholds, device=self.device, dtype=self.dtype,
                      max_tokens=self.max_tokens if self.max_tokens is not None else DEFAULT_MAX_TOKENS,
                      plot=self.plot)
        return self

    def kwargs(self) -> dict:
        from ..validation.validate import DEFAULT_MAX_TOKENS

        return {"thresholds": self.thresholds, "seed": self.seed, "device": self.device, "dtype": self.dtype,
                "plot": self.plot,
                "max_tokens": self.max_tokens if self.max_tokens is not None else DEFAULT_MAX_TOKENS}


DEFAULT_VALIDATION = ValidationOptions()  # never mutated


@dataclass
class PushOptions:
    """Where `add` pushes the output (the push flags of `vocabsurgeon add`)."""

    repo_id: str
    revision: str | None = None  # the branch to commit to
    private: bool | None = None
    create_pr: bool = False
    token: str | None = None
    message: str | None = None  # None: "Add N new tokens to BASE with vocabsurgeon VERSION"

    @classmethod
    def from_flags(cls, repo_id: str | None, **flags) -> PushOptions | None:
        """The push options of `add`'s flags: None without --push-to, which the other push flags need.

        Raises:
            InputError: a push flag without --push-to, or a repo id that is not one.
        """
        if not repo_id:
            given = [f"--{k.replace('_', '-')}" for k in ("revision", "private", "create_pr", "message") if flags.get(k)]
            if given:
                name = "--push-revision" if given[0] == "--revision" else given[0]
                raise InputError(f"{name} is a push option; pass --push-to REPO_ID too")
            return None
        return cls(repo_id, **flags).check()

    def check(self) -> PushOptions:
        from ..checkpoint.hub import REPO_ID

        if not REPO_ID.fullmatch(self.repo_id):
            raise InputError(f"--push-to {self.repo_id!r}: not a Hub repo id; pass it as org/name, e.g. me/gpt2-lotr")
        return self


@dataclass
class Finished:
    """What the pipeline did: the add result, the validation report (None when skipped), the push."""

    result: object  # surgery.AddResult
    report: Report | None = None
    pushed: object | None = None  # hub.PushResult

    def to_dict(self) -> dict:
        """`vocabsurgeon add --json`: the add summary, with `validation` and `push` when they ran."""
        d = self.result.to_dict()
        if self.report is not None:
            d["validation"] = self.report.brief(str(Path(self.result.out) / REPORT_NAME))
        if self.pushed is not None:
            d["push"] = self.pushed.to_dict()
        return d


def record(out: str | os.PathLike, summary: dict, report: Report | None, plot=None) -> None:
    """The one writer of an output's `vocabsurgeon_report.json` and model card once `add` wrote it: the
    report (when there is one) and the card with its figures."""
    from .modelcard import write_model_card

    if report is not None:
        report.write(Path(out) / REPORT_NAME)
    write_model_card(out, summary, report, plot=plot)


def validate_output(result, options: ValidationOptions, progress=None) -> Report:
    """Validate what `add` wrote, store the report in it and rewrite its model card with the figures.

    The report and card are written on failure too (they record it: the output is kept for inspection).

    Raises:
        ValidationFailed: a check failed; `.report` holds the figures.
    """
    from ..validation.validate import next_step, validate_checkpoint

    out = Path(result.out)
    ids = [t.id for t in result.plan.tokens.new]
    report = validate_checkpoint(result.plan.src, out, options.corpus, new_token_ids=ids, progress=progress,
                                 base_checkpoint=result.plan.ckpt, base_tokenizer=result.plan.editor.as_loaded(),
                                 resplit_reported=set(result.plan.tokens.resplits),
                                 new_pieces=getattr(result.plan, "new_pieces", False), **options.kwargs())
    report.init = result.plan.to_dict()["init"]
    record(out, result.to_dict(), report, plot=options.plot)
    if not report.passed:
        raise ValidationFailed(
            f"{out}: validation failed: {'; '.join(report.failures)}. The output is kept for inspection; "
            f"see {out / REPORT_NAME}. {next_step(report, (report.init or {}).get('input'))}", report)
    return report


def push_output(result, options: PushOptions):
    """Push the output of `add` as one commit, with a default message naming what was added.

    Raises:
        PushError: the push failed; the message says how to retry the push alone.
    """
    from .._version import __version__
    from ..checkpoint.hub import push
    from .modelcard import public_base_name

    summary = result.to_dict()
    n_words = len({a["token"] for a in summary["added"]})
    message = options.message or (f"Add {n_words} new token{'s' if n_words != 1 else ''} to "
                                  f"{public_base_name(summary)} with vocabsurgeon {__version__}")
    try:
        return push(result.out, options.repo_id, private=options.private, revision=options.revision,
                    create_pr=options.create_pr, token=options.token, message=message)
    except PushError as e:  # the checkpoint is written: say how to retry the push alone
        raise PushError(f"{e}. {result.out} is written; retry with `vocabsurgeon push {result.out} "
                        f"{options.repo_id}`") from None


def finish_add(result, validation: ValidationOptions | None = DEFAULT_VALIDATION, push: PushOptions | None = None,
               *, progress=None, on_step: Callable[[str, Finished], None] | None = None) -> Finished:
    """After `add` wrote `result.out`: validate it (unless `validation` is None), rewrite the model card
    with the figures, then push it (when `push` is given and validation passed).

    Args:
        result: the `AddResult` of `add_tokens` or `AddJob.finish()`.
        validation: the validation options; None skips validation (the card says so).
        push: where to push; None keeps the output local.
        progress: `progress.Progress` callbacks of the validation.
        on_step: called with "validate" or "push" and what is done so far, as each step starts.

    Raises:
        ValidationFailed: validation failed (exit 3 in the CLI); nothing is pushed.
        PushError: the push failed (exit 4).
        Interrupted: Ctrl-C during validation or the push.
        Each of them holds in `.finished` what was done before it (`Finished`).
    """
    step = on_step or (lambda name, done: None)
    done = Finished(result)
    if validation is not None:
        step("validate", done)
        try:
            done.report = validate_output(result, validation, progress)
        except ValidationFailed as e:
            e.finished = Finished(result, e.report)  # the add summary with the figures, for `add --json`
            raise
        except KeyboardInterrupt:  # the output is complete: say so, in the card, the report and the message
            record_interrupted_validation(result)
            base = result.to_dict()["input"]
            stop = Interrupted(
                f"Interrupted during validation: {result.out} is written and complete but not validated (its model "
                f"card and {REPORT_NAME} say so); run `vocabsurgeon validate {base} {result.out}` to check it and "
                "fill them in")
            stop.finished = done
            raise stop from None
    if push is not None:
        step("push", done)
        try:
            done.pushed = push_output(result, push)
        except PushError as e:
            e.finished = done  # the validation figures, for a summary printed with the error
            raise
        except KeyboardInterrupt:
            stop = Interrupted(
                f"Interrupted during the push: {result.out} is written{' and validated' if done.report else ''}; a "
                f"Hub commit is all or nothing, so {push.repo_id} is as it was. Retry with `vocabsurgeon push "
                f"{result.out} {push.repo_id}`")
            stop.finished = done
            raise stop from None
    return done


def record_interrupted_validation(result) -> None:
    """The card and report of an output whose validation was interrupted: they say so, and the report
    keeps the add summary so that a later `vocabsurgeon validate` can fill both in (`record_validation`)."""
    summary = result.to_dict()
    record(result.out, summary, Report.pending(summary))


def record_validation(new: str | os.PathLike, report: Report, plot: str | os.PathLike | None = None) -> bool:
    """After `vocabsurgeon validate BASE NEW`: when NEW is an `add` output whose report holds its add
    summary (its validation was interrupted), store the new report there and rewrite its card with the
    figures. Returns whether it did; any other NEW (a Hub repo, a validated output) is left as it is.
    """
    path = Path(new) / REPORT_NAME
    try:
        pending = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(pending, dict) or not isinstance(pending.get("add"), dict):
        return False
    summary = pending["add"]
    record(new, summary, report.with_add(summary), plot=plot)
    return True
