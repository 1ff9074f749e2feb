"""The body `add` and `extend` share over `options.surgery_options`: their flags checked into options
records before any work (`surgery_of`), then the plan or the run, reported (`run_and_report`).

What a user reads: the plan on stderr (with --dry-run too), each step and the validation's figures
once, then one "Wrote" line; with --json only the JSON on stdout (a --dry-run's plan, else the
summary, also when validation, the push or an interrupt stopped the run); progress on stderr unless -q.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from ..errors import InputError, Interrupted
from .options import check_plot_dir, echo_pushed, emit, is_quiet, progress_bars, quiet_hub, take_fields, \
    validation_options_of


@dataclass
class Surgery:
    """The checked options of one add or extend run (from `surgery_options`' flags)."""

    src: str
    out: str
    options: Any  # engine.target.AddOptions
    validation: Any  # engine.finish.ValidationOptions, checked also with --no-validate
    push: Any  # engine.finish.PushOptions; None without --push-to
    no_validate: bool
    dry_run: bool
    as_json: bool
    revision: str | None
    token: str | None

    @property
    def validate(self):
        """The validation the pipeline runs: None with --no-validate."""
        return None if self.no_validate else self.validation


def surgery_of(ctx, src: str, out: str, flags: dict) -> Surgery:
    """The options records of `surgery_options`' flags (`flags`: click's parameters, the command's own
    options among them, which go to the AddOptions field of their name), checked before any work."""
    from ..engine.finish import PushOptions
    from ..engine.target import AddOptions

    dry_run, as_json, no_validate = flags.pop("dry_run"), flags.pop("as_json"), flags.pop("no_validate")
    revision, token = flags.pop("revision"), flags.pop("hf_token")
    push = PushOptions.from_flags(flags.pop("push_to"), revision=flags.pop("push_revision"),
                                  private=flags.pop("private"), create_pr=flags.pop("create_pr"), token=token,
                                  message=flags.pop("message"))
    # The one place the flags become the options record: each AddOptions field is the flag of its name
    # (--no-fsync is fsync=False); the flags left are the validation's.
    flags["fsync"] = not flags.pop("no_fsync")
    options = AddOptions(**take_fields(AddOptions, flags)).check()
    validation = validation_options_of(flags, seed=options.seed, device=options.device, dtype=options.dtype)
    if no_validate and validation.plot:
        raise InputError("--plot draws the validation's KL histogram; drop --no-validate or --plot")
    check_plot_dir(validation.plot, created=out)
    validation.check()
    quiet_hub(ctx, as_json)
    return Surgery(src, out, options, validation, push, no_validate, dry_run, as_json, revision, token)


def run_and_report(ctx, s: Surgery, *, plan: Callable, run: Callable, wrote: Callable[[dict], str]) -> None:
    """With --dry-run, make the plan, `plan(progress)`, and print it; else run the pipeline,
    `run(progress, on_plan, on_step)`, printing as it calls back: the plan, each step, the validation's
    figures once, then `wrote(summary)` and the push. See the module docstring for where each goes."""
    from ..errors import PushError, ValidationFailed

    quiet = is_quiet(ctx) or s.as_json
    if s.dry_run:
        with progress_bars(ctx) as progress:
            planned = plan(progress)
        if s.as_json:
            emit({"dry_run": True, **planned.to_dict()})
        elif not quiet:
            click.echo(planned.describe(), err=True)
        return

    shown = []

    def on_plan(p) -> None:
        if not quiet:
            click.echo(p.describe(), err=True)

    def on_step(name: str, done) -> None:
        if quiet:
            return
        if done.report is not None and not shown:  # the validation's figures, once, before the next step
            shown.append(True)
            click.echo("\n".join(done.report.summary_lines()), err=True)
        if name == "validate":
            click.echo(f"Validating {done.result.out} against {done.result.plan.src} (--no-validate skips this)",
                       err=True)
        elif name == "push":
            click.echo(f"Pushing {s.out} to {s.push.repo_id}", err=True)

    try:
        with progress_bars(ctx) as progress:
            done = run(progress, on_plan, on_step)
    except ValidationFailed as e:
        if s.as_json:
            emit(e.finished.to_dict())
        elif not quiet and e.report:
            click.echo("\n".join(e.report.summary_lines()[:-1]), err=True)
        raise
    except PushError as e:
        if s.as_json and getattr(e, "finished", None) is not None:
            emit({**e.finished.to_dict(), "push": {"error": str(e)}})
        raise
    except Interrupted as e:
        if s.as_json and getattr(e, "finished", None) is not None:  # interrupted after the output was written
            emit({**e.finished.result.to_dict(), "interrupted": str(e)})
        raise
    on_step("done", done)
    summary = done.to_dict()
    if s.as_json:
        emit(summary)
    elif not quiet:
        click.echo(wrote(summary), err=True)
        if s.push is not None:
            echo_pushed(summary["push"])
