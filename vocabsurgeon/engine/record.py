"""What an output says about itself: its model card and `vocabsurgeon_report.json` (the validation figures,
the summary of what was done, and the list of the files vocabsurgeon wrote), written whole or not at all.

`record` writes both into a staged output before it is published; `record_validation` fills them in when a
later `vocabsurgeon validate` checks an output that was published without validation; `pushable` says
whether a folder is a validated output, for `push`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..checkpoint.filenames import REPORT_NAME
from ..checkpoint.staging import FILES_KEY, listed_files, written_files
from ..checkpoint.writer import write_text_atomic
from ..validation.report import Report
from .modelcard import write_model_card

NOT_VALIDATED = "--no-validate"


def record(out: str | os.PathLike, summary: dict, report: Report | None, *, plot=None, card: bool = True,
           fsync: bool = True, files: set[str] | None = None) -> None:
    """Write the model card (unless `card` is False: trim writes its own) and the report into `out`.

    `report` None: validation did not run (`--no-validate`). The report lists every file under `out` (itself
    included) as what vocabsurgeon wrote, or `files` when given: `--force` replaces such an output only when it
    holds no other file.
    """
    out = Path(out)
    report = report if report is not None else Report.not_run(summary, NOT_VALIDATED)
    if report.add is None and report.pending is None:
        report = report.with_add(summary)
    if card:
        write_model_card(out, summary, report, plot=plot, fsync=fsync)
    listed = sorted((set(listed_files(out)) if files is None else files) | {REPORT_NAME})
    write_text_atomic(out / REPORT_NAME, json.dumps({**report.to_dict(), FILES_KEY: listed}, indent=2,
                                                    ensure_ascii=False) + "\n", fsync=fsync)


def record_validation(new: str | os.PathLike, report: Report, plot: str | os.PathLike | None = None) -> bool:
    """After `vocabsurgeon validate BASE NEW`: when NEW is an output published without validation (its report
    is pending and holds the summary), store the new report there and rewrite its card with the figures.
    Returns whether it did; any other NEW (a Hub repo, a validated output) is left as it is.
    """
    stored = _stored(Path(new))
    if stored is None or stored.get("pending") is None or not isinstance(stored.get("add"), dict):
        return False
    summary = stored["add"]
    record(new, summary, report.with_add(summary), plot=plot, files=written_files(Path(new)))
    return True


def _stored(folder: Path) -> dict | None:
    try:
        data = json.loads((folder / REPORT_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def pushable(folder: str | os.PathLike) -> tuple[bool, str]:
    """Whether `folder` is a vocabsurgeon output that passed validation (or a trim output, which has no model
    validation), and what it is, in words for `push`'s refusal."""
    stored = _stored(Path(folder))
    if stored is None:
        return False, f"{folder} is not a vocabsurgeon output (no {REPORT_NAME})"
    if stored.get("passed") is True:
        return True, "a validated vocabsurgeon output"
    if stored.get("pending") == "trim":
        return True, "a trim output (verified; trim runs no model validation)"
    if stored.get("pending") is not None:
        return False, f"{folder} was not validated ({stored['pending']})"
    return False, f"{folder} failed validation: {'; '.join(stored.get('failures') or [])}"
