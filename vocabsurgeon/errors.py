"""The exceptions vocabsurgeon raises; each message names the file/tensor/token and the next step.

Each class carries its exit status (`exit_code`); the CLI turns them into one line on stderr. The table of
exit codes (EXIT_CODES) is in docs/hub-and-pipelines.md.
"""

from __future__ import annotations


class VocabSurgeonError(Exception):
    """Base class: a failure with a message meant for the user."""

    exit_code = 1


class InputError(VocabSurgeonError):
    """The input (checkpoint, tokenizer, tokens file, options, output path) cannot be used."""

    exit_code = 2


class OutputExistsError(InputError):
    """The output directory exists and is not empty."""


class ValidationFailed(VocabSurgeonError):
    """The written checkpoint failed validation; `report` holds the figures (a `report.Report`)."""

    exit_code = 3

    def __init__(self, message: str, report=None):
        super().__init__(message)
        self.report = report


class PushError(VocabSurgeonError):
    """Uploading to the Hugging Face Hub failed."""

    exit_code = 4


class WriteError(VocabSurgeonError):
    """The output could not be written (disk full, EFBIG, EIO, permissions); nothing was published."""

    exit_code = 5


class UnsupportedVersion(VocabSurgeonError):
    """An installed library (transformers, tokenizers, ...) is older than vocabsurgeon supports (`_compat.MINIMUM`)."""

    exit_code = 2


class Interrupted(VocabSurgeonError):
    """Ctrl-C (or SIGTERM) after the output was written: the message says what is done and what is not."""

    exit_code = 130


EXIT_OK = 0
EXIT_INTERNAL = 1
EXIT_BAD_INPUT = InputError.exit_code
EXIT_VALIDATION = ValidationFailed.exit_code
EXIT_PUSH = PushError.exit_code
EXIT_WRITE = WriteError.exit_code
EXIT_INTERRUPTED = Interrupted.exit_code

# What each exit status means: the one table, which the README's exit-code table must equal.
EXIT_CODES = {
    EXIT_OK: "success",
    EXIT_INTERNAL: "unexpected internal error (a bug: please report it with VOCABSURGEON_DEBUG=1 output)",
    EXIT_BAD_INPUT: "bad input: checkpoint, tokens file, options or output directory; or a library older than supported",
    EXIT_VALIDATION: "validation failed (nothing is published; the output is kept as OUT.rejected)",
    EXIT_PUSH: "push to the Hugging Face Hub failed",
    EXIT_WRITE: "writing the output failed (disk full, file too large, I/O or permission error); nothing was published",
    EXIT_INTERRUPTED: "interrupted (SIGINT)",
}


class Cancelled(Exception):
    """Stops a worker thread (the copy, the statistics) after the main thread failed; never reaches a user."""
