"""After the staged write: validate, record the card and report, publish, push; the options of those steps.

Every command that writes a checkpoint (add, extend, trim) ends here, in the same order and with the same
card. Every option is checked before any work.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError, Interrupted, PushError, ValidationFailed
from ..checkpoint.filenames import REPORT_NAME
from ..progress import SILENT, Progress
from ..validation.report import Report
from .record import record, record_validation  # noqa: F401 (the validate command's)

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


def validate_output(result, options: ValidationOptions, progress=None, where: Path | None = None,
                    plot: Path | None = None) -> Report:
    """Validate what the job wrote in `where` (its staging directory; default: the published output), drawing
    the plot at `plot` (default: `options.plot`). The report names the output by where it will be published.
    """
    from ..validation.validate import validate_checkpoint

    where = where if where is not None else Path(result.out)
    kwargs = options.kwargs()
    if plot is not None:
        kwargs["plot"] = plot
    ids = [t.id for t in result.plan.tokens.new]
    report = validate_checkpoint(result.plan.src, where, options.corpus, new_token_ids=ids, progress=progress,
                                 base_checkpoint=result.plan.ckpt, base_tokenizer=result.plan.editor.as_loaded(),
                                 resplit_reported=set(result.plan.tokens.resplits),
                                 new_pieces=getattr(result.plan, "new_pieces", False),
                                 remedy="Pass --no-validate to skip the checks", new_name=str(result.out), **kwargs)
    report.init = result.plan.to_dict()["init"]
    return report


def _inside(path: Path, out: Path, stage: Path) -> Path:
    """`path` moved from `out` into `stage` when it lies inside `out`; else `path`."""
    try:
        return stage / path.resolve().relative_to(out.resolve())
    except ValueError:
        return path


def push_output(out: Path, options: PushOptions, default_message: str):
    """Push a published output as one commit (`options.message`, else `default_message`).

    Raises:
        PushError: the push failed; the message says how to retry the push alone.
    """
    from ..checkpoint.hub import push

    try:
        return push(out, options.repo_id, private=options.private, revision=options.revision,
                    create_pr=options.create_pr, token=options.token, message=options.message or default_message)
    except PushError as e:  # the checkpoint is written: say how to retry the push alone
        raise PushError(f"{e}. {out} is written; retry with `vocabsurgeon push {out} {options.repo_id}`") from None


def _add_message(summary: dict) -> str:
    from .._version import __version__
    from .modelcard import public_base_name

    n_words = len({a["token"] for a in summary["added"]})
    return (f"Add {n_words} new token{'s' if n_words != 1 else ''} to {public_base_name(summary)} with "
            f"vocabsurgeon {__version__}")


def finish_add(result, validation: ValidationOptions | None = DEFAULT_VALIDATION, push: PushOptions | None = None,
               *, progress=None, on_step: Callable[[str, Finished], None] | None = None) -> Finished:
    """After the job wrote and verified `result`: validate it, record its card and report, publish it, push it.

    While `result.staged` holds the output (the engine's own runs), nothing reaches the target name before the
    card and report describe these very weights: a failed validation leaves the target as it was and keeps the
    output beside it as `OUT.rejected`. On an output already published (`add_tokens`), it validates and
    records in place.

    Args:
        result: the `AddResult` of the job.
        validation: the validation options; None skips validation (the card and report say so).
        push: where to push once published; None keeps the output local.
        progress: `progress.Progress` callbacks of the validation.
        on_step: called with "validate" or "push" and what is done so far, as each step starts.

    Raises:
        ValidationFailed: validation failed (exit 3); nothing is published or pushed.
        PushError: the push failed (exit 4); the output is published.
        Interrupted: Ctrl-C during validation (nothing published) or the push.
        Each of them holds in `.finished` what was done before it (`Finished`).
    """
    from .job import write_errors

    step = on_step or (lambda name, done: None)
    done = Finished(result)
    staged = result.staged
    where = staged.path if staged is not None else Path(result.out)
    plot = validation.plot if validation is not None else None
    if plot is not None and staged is not None:  # a plot inside the output is drawn in the stage, published with it
        plot = _inside(Path(plot), Path(result.out), where)
    if validation is not None:
        step("validate", done)
        try:
            done.report = validate_output(result, validation, progress, where, plot)
        except KeyboardInterrupt:
            stop = Interrupted(f"Interrupted during validation: nothing was published; {result.out} is as it was")
            stop.finished = done
            raise stop from None
    with write_errors(Path(result.out)):
        record(where, result.to_dict(), done.report, plot=plot, fsync=result.plan.options.fsync)
        if done.report is not None and not done.report.passed:
            kept = staged.reject() if staged is not None else Path(result.out)
            result.staged = None
            _fail(result, done.report, kept)
        if staged is not None:
            staged.publish()
            result.staged = None
    if push is not None:
        step("push", done)
        try:
            done.pushed = push_output(Path(result.out), push, _add_message(result.to_dict()))
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


def _fail(result, report: Report, kept: Path) -> None:
    from ..validation.validate import next_step

    out = Path(result.out)
    where = (f"{out} is as it was; the output is kept for inspection in {kept}" if kept != out
             else "the output is kept for inspection")
    error = ValidationFailed(f"{out}: validation failed: {'; '.join(report.failures)}. {where}; see "
                             f"{kept / REPORT_NAME}. {next_step(report, (report.init or {}).get('input'))}", report)
    error.finished = Finished(result, report)  # the add summary with the figures, for `add --json`
    error.kept = kept
    raise error


def run(target, out: str | os.PathLike, make_plan: Callable, validation: ValidationOptions | None = DEFAULT_VALIDATION,
        push: PushOptions | None = None, *, progress: Progress = SILENT, on_plan: Callable | None = None,
        on_step: Callable[[str, Finished], None] | None = None) -> Finished:
    """The one order every output goes through: stage, write (while `make_plan(target)` plans), verify,
    validate, record, publish, push. `target` is an engine `Target`; `make_plan` returns its `Plan`.

    Raises:
        InputError: the output path, the plan or the input cannot be used; nothing is written.
        ValidationFailed, PushError, Interrupted: as `finish_add`.
    """
    from ..checkpoint.staging import Stage
    from .job import AddJob, write_errors

    with write_errors(Path(out)):
        stage = Stage.open(target.src, out, target.options.force)
    with stage:
        with AddJob(target, stage) as job:
            result = job.write(job.use(make_plan(target)), progress, on_plan)
        return finish_add(result, validation, push, progress=progress, on_step=on_step)
