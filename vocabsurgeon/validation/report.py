"""The validation report as a record: what `validate_checkpoint` returns and `vocabsurgeon_report.json` holds.

Read by attribute (`report.passed`, `report.check("kl")`) or, like transformers' `ModelOutput`, as the
dict (`report["kl"]["mean"]`); `to_dict()` is the JSON, `from_dict()` reads a stored report back.

    >>> r = Report.not_run({"input": "ckpt/"}, "--no-validate")
    >>> r.pending, r.passed, r.to_dict()["add"]
    ('--no-validate', None, {'input': 'ckpt/'})
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

from ..checkpoint.writer import write_text_atomic
from .checks import Check, read_checks
from .checks import failures as check_failures

# The keys before the checks' keys, in the JSON's order.
_HEAD = ("passed", "failures", "complete", "skipped", "method", "method_reason", "base", "new", "sources", "model",
         "corpus", "device", "dtype", "vocab")


@dataclass(eq=False)
class Report(Mapping):
    """What validation measured and decided (README: "The validation report")."""

    passed: bool | None  # None: validation did not run (`pending` says why)
    failures: list[str] = field(default_factory=list)
    complete: bool = True  # every check ran (`skipped` is empty)
    skipped: list[str] = field(default_factory=list)  # checks a model of this kind cannot run, with the reason
    method: str | None = None  # "one-pass" or "two-pass"; None when no model ran
    method_reason: str = ""
    base: str = ""  # the repo id, else the directory
    new: str = ""
    sources: dict = field(default_factory=dict)  # {"base"|"new": hub.Source.to_dict()}
    model: dict = field(default_factory=dict)  # kind, class, missing_weights
    corpus: dict = field(default_factory=dict)  # name, bytes, tokens, positions, chat_samples
    device: str | None = None
    dtype: str | None = None
    vocab: dict = field(default_factory=dict)  # old_rows, new_rows, k, new_tokens
    checks: list[Check] = field(default_factory=list)  # in checks.CHECKS order
    thresholds: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)  # stage -> wall seconds
    plot: str | None = None
    init: dict | None = None  # the add summary's init, when the checkpoint is an add output
    add: dict | None = None  # the whole add summary: kept while validation is pending, and once filled in
    pending: str | None = None  # why validation did not run ("--no-validate"); None once it ran

    @classmethod
    def decide(cls, checks: list[Check], skipped: list[str], **figures) -> Report:
        """The report of measured checks: passed when no check fails."""
        fails = check_failures(checks)
        return cls(passed=not fails, failures=fails, complete=not skipped, skipped=skipped, checks=checks, **figures)

    @classmethod
    def not_run(cls, summary: dict, why: str) -> Report:
        """The report of an output that was not validated (`why`: "--no-validate"): it keeps the summary, so
        that a later `vocabsurgeon validate` can fill the report and the card in."""
        return cls(passed=None, pending=why, add=summary)

    def check(self, key: str) -> Check | None:
        """The check record stored under `key` ("kl", "sampling", ...), or None when it is not in the report."""
        return next((c for c in self.checks if c.KEY == key), None)

    def with_add(self, summary: dict) -> Report:
        """This report recording the add summary it validated (`init` and the whole summary)."""
        from dataclasses import replace

        return replace(self, init=summary.get("init"), add=summary)

    def to_dict(self) -> dict:
        """The JSON of `vocabsurgeon_report.json` and `vocabsurgeon validate --json`."""
        if self.pending is not None:
            return {"passed": None, "pending": self.pending, "failures": list(self.failures), "add": self.add}
        d = {k: getattr(self, k) for k in _HEAD}
        d.update({c.KEY: c.to_dict() for c in self.checks})
        d["thresholds"] = self.thresholds
        d["seconds"] = self.seconds
        for k in ("plot", "init", "add"):
            if getattr(self, k) is not None:
                d[k] = getattr(self, k)
        return d

    def write(self, path: str | os.PathLike) -> None:
        """Store the report as `vocabsurgeon_report.json` stores it (indented UTF-8, a final newline)."""
        write_text_atomic(Path(path), json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n")

    @classmethod
    def from_dict(cls, d: dict) -> Report:
        """A stored report read back; keys it does not know are ignored, missing ones take the defaults."""
        names = {f.name for f in fields(cls)} - {"checks"}
        return cls(**{k: v for k, v in d.items() if k in names}, checks=read_checks(d))

    def summary_lines(self) -> list[str]:
        """The report in a few human-readable lines (what the CLI prints on stderr)."""
        lines = [line for c in self.checks for line in c.summary()]
        if self.method:
            lines.append(f"method: {self.method} ({self.method_reason})")
        lines += [f"WARNING: {w}" for w in self.skipped]
        lines.append("PASSED" if self.passed else "FAILED: " + "; ".join(self.failures))
        return lines

    def brief(self, path: str) -> dict:
        """The few figures that the add summary (`add --json`) carries; `path` is where the report is stored."""
        kl, sampling = self.check("kl"), self.check("sampling")
        return {"passed": self.passed, "failures": self.failures, "report": path, "method": self.method,
                "kl": {k: getattr(kl, k) for k in ("mean", "p99", "max", "bound")},
                "new_token_fraction": sampling.new_token_fraction}

    # The dict view (read-only), for code written against the JSON.
    def __getitem__(self, key: str):
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())


def as_report(report: Report | dict | None) -> Report | None:
    """A report given as the record or as its JSON (a `vocabsurgeon_report.json` read back)."""
    return report if report is None or isinstance(report, Report) else Report.from_dict(report)
