"""The `vocabsurgeon` command line: the click group `cli`, which registers the commands (one module each:
add.py, extend.py, trim.py, validate.py, inspect.py, compare.py, suggest.py, push.py), and `main`.

This is the one place that turns library errors into exit codes and one-line messages (see
`errors.py` for the codes). Human output and progress go to stderr, `--json` output to stdout. Set
VOCABSURGEON_DEBUG=1 to see tracebacks.
"""

from __future__ import annotations

import os
import signal
import traceback

import click

from .._compat import check_versions
from .._version import __version__
from ..errors import EXIT_INTERNAL, EXIT_INTERRUPTED, Interrupted, VocabSurgeonError
from .add import add_command
from .compare import compare_command, neighbors_command
from .extend import extend_command
from .inspect import inspect_command
from .options import restoring_library_settings, setup_logging
from .push import push_command
from .suggest import suggest_command
from .trim import trim_command
from .validate import validate_command


class _Group(click.Group):
    """Turns library exceptions into one line on stderr and a documented exit status."""

    def invoke(self, ctx):
        debug = os.environ.get("VOCABSURGEON_DEBUG") not in (None, "", "0")
        try:
            with restoring_library_settings():
                return super().invoke(ctx)
        except VocabSurgeonError as e:
            if debug:
                traceback.print_exc()
            click.echo(str(e) if isinstance(e, Interrupted) else f"Error: {e}", err=True)
            ctx.exit(e.exit_code)
        except KeyboardInterrupt:
            click.echo("Interrupted; nothing was written.", err=True)
            ctx.exit(EXIT_INTERRUPTED)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as e:  # a bug: one line by default, the traceback on request
            if debug:
                traceback.print_exc()
            click.echo(
                f"Error: internal error {type(e).__name__}: {e}. Please report it; rerun with "
                "VOCABSURGEON_DEBUG=1 for the traceback.",
                err=True,
            )
            ctx.exit(EXIT_INTERNAL)


def _sigterm(signum, frame):  # run cleanups (staging removal) on `kill`, as on Ctrl-C
    raise KeyboardInterrupt


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="vocabsurgeon")
@click.option("-q", "--quiet", is_flag=True, help="Only errors on stderr; no progress bars.")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging on stderr.")
@click.pass_context
def cli(ctx, quiet, verbose):
    """Add new tokens to a Hugging Face checkpoint on disk, streaming, safely and fast.

    \b
    Examples:
      vocabsurgeon add --tokens lotr.txt --init mean ckpt/ out/
      vocabsurgeon add --tokens lotr.txt --dry-run ckpt/ out/
      vocabsurgeon add -t Frodo -t Gandalf --init subword-mean --json ckpt/ out/
      vocabsurgeon add --tokens lotr.txt --push-to me/gpt2-lotr --create-pr openai-community/gpt2 out/
      vocabsurgeon push out/ me/gpt2-lotr --private
      vocabsurgeon trim --corpus en.txt --vocab-size 32000 ckpt/ out/

    Exit status: 0 success, 1 internal error, 2 bad input, 3 validation failed,
    4 push failed, 5 write failed, 130 interrupted.
    """
    ctx.ensure_object(dict)
    ctx.obj.update(quiet=quiet, verbose=verbose)
    setup_logging(quiet, verbose)
    check_versions()  # before anything runs: an older transformers or tokenizers would write something different
    signal.signal(signal.SIGTERM, _sigterm)


for command in (add_command, compare_command, neighbors_command, suggest_command, trim_command, extend_command,
                push_command, validate_command, inspect_command):
    cli.add_command(command)


def main() -> None:
    cli(prog_name="vocabsurgeon")


if __name__ == "__main__":
    main()
