"""Progress of long runs: the one protocol through which the library reports work (it never prints).

A `Progress` is three callbacks: `stage(text)`, `count(name, total, unit)` (returns an `Advance`) and
`advance(n)`; the CLI draws the bars, a pipeline passes its own callbacks or none.

    >>> seen = []; add = seen.append
    >>> step = Progress(count=lambda name, total, unit="": add((name, total)) or add, advance=add).steps()
    >>> step("input rows", 2, 5); step("input rows", 5, 5); step("output rows", 1, 3); seen
    [('input rows', 5), 2, 3, ('output rows', 3), 1]
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

Advance = Callable[[int], None]  # n more units of the one thing a step counts
Steps = Callable[[str, int, int], None]  # step(name, done, total): see Progress.steps


def _ignore(*_args) -> None:
    pass


def _count_nothing(name: str, total: int, unit: str = "") -> Advance:
    return _ignore


@dataclass
class Progress:
    """The callbacks of a long run; each defaults to doing nothing (see the module docstring)."""

    stage: Callable[[str], None] = _ignore
    count: Callable[..., Advance] = _count_nothing  # count(name, total, unit="") -> its Advance
    advance: Advance = _ignore

    def steps(self) -> Steps:
        """A `step(name, done, total)` callable: a new name starts a count of `total` units, `done` is
        the position within it (the form of the fitted init's loops)."""
        running = {"name": None, "done": 0, "advance": _ignore}

        def step(name: str, done: int, total: int) -> None:
            if name != running["name"]:
                running.update(name=name, done=0, advance=self.count(name, total))
            if done > running["done"]:
                running["advance"](done - running["done"])
                running["done"] = done

        return step


SILENT = Progress()  # never mutated


def counting(name: str, advance: Advance) -> Progress:
    """A Progress that gives the count `name` to `advance` and ignores everything else (how a call
    that takes a single callback, `add_tokens`' bytes, runs a step that reports through Progress).

        >>> seen = []
        >>> p = counting("writing", seen.append)
        >>> p.count("writing", 10, "B")(4); p.count("input rows", 3)(1)
        >>> seen
        [4]
    """
    return Progress(count=lambda n, total, unit="": advance if n == name else _ignore)


def amount(n: float, unit: str = "") -> str:
    """`n` units in words: bytes in KiB/MiB/GiB as a progress bar shows them, other units with thousands separators.

        >>> amount(3 * 1024 ** 2, "B"), amount(1891, "tok"), amount(7)
        ('3.0 MiB', '1,891 tok', '7 it')
    """
    if unit == "B":
        for scale, name in ((1024 ** 3, "GiB"), (1024 ** 2, "MiB"), (1024, "KiB")):
            if n >= scale:
                return f"{n / scale:.1f} {name}"
        return f"{int(n)} B"
    return f"{int(n):,} {unit or 'it'}"


class LogLines:
    """Progress as a few lines of text, for a log (stderr that is not a terminal), where bars would not show.

    A stage is one line (`running: text`). A count says when its work starts (`name: started, 1,891 tok`), then
    at most once per `1/parts` of its total and `min_gap` seconds or, while it moves slowly or has no total,
    once per `every` seconds (`name: 40% (760 of 1,891 tok), 12 s`), and when it reaches its total (`name: done, 1,891 tok
    in 24.0 s`). A count started again under its running name (or as the last count, after it ended) has its total
    corrected, not a second start.

        >>> out = []; clock = iter(range(100)).__next__
        >>> lines = LogLines(out.append, parts=4, clock=lambda: float(clock()))
        >>> advance = lines.count("validating", 100, "tok")
        >>> for _ in range(10): advance(10)
        >>> out  # doctest: +NORMALIZE_WHITESPACE
        ['validating: started, 100 tok', 'validating: 30% (30 of 100 tok), 3 s', 'validating: 50% (50 of 100 tok), 5 s',
         'validating: 80% (80 of 100 tok), 8 s', 'validating: done, 100 tok in 10.0 s']
    """

    def __init__(self, write: Callable[[str], None], *, parts: int = 10, every: float = 30.0, min_gap: float = 2.0,
                 clock: Callable[[], float] = time.monotonic):
        self.write, self.parts, self.every, self.min_gap, self.clock = write, parts, every, min_gap, clock
        self.counts: dict[str, dict] = {}
        self.latest: Advance = _ignore
        self.last: str | None = None  # the name of the count started last

    def stage(self, text: str) -> None:
        self.write(f"running: {text}")

    def count(self, name: str, total: int | None, unit: str = "") -> Advance:
        c = self.counts.get(name)
        if c is not None and (not c["ended"] or name == self.last):  # the running (or last) count: total corrected
            c["total"] = total
            if total and not c["ended"] and c["done"] >= total:
                self._end(name, c, self.clock())
        else:
            now = self.clock()
            c = self.counts[name] = {"total": total, "unit": unit, "done": 0, "start": now, "said_at": now,
                                     "said_step": 0, "ended": False, "started": False}
        self.last = name

        def advance(n: int) -> None:
            if n and not c["ended"]:
                if not c["started"]:  # said at its first work: a step refused before it starts says nothing
                    c["started"] = True
                    self.write(f"{name}: started" + (f", {amount(c['total'], c['unit'])}" if c["total"] else ""))
                c["done"] += n
                self._say(name, c)

        self.latest = advance
        return advance

    def advance(self, n: int) -> None:
        self.latest(n)

    def _say(self, name: str, c: dict) -> None:
        total, done, now = c["total"], c["done"], self.clock()
        if total and done >= total:
            self._end(name, c, now)
            return
        reached = done * self.parts // total if total else 0
        since = now - c["said_at"]
        if (reached > c["said_step"] and since >= self.min_gap) or since >= self.every:
            c["said_step"], c["said_at"] = reached, now
            unit = c["unit"]
            what = (f"{100 * done // total}% ({amount(done, unit).removesuffix(' ' + (unit or 'it'))} of "
                    f"{amount(total, unit)})" if total and unit != "B" else
                    f"{100 * done // total}% ({amount(done, unit)} of {amount(total, unit)})" if total else
                    amount(done, unit))
            self.write(f"{name}: {what}, {now - c['start']:.0f} s")

    def _end(self, name: str, c: dict, now: float) -> None:
        c["ended"] = True
        self.write(f"{name}: done, {amount(c['done'], c['unit'])} in {now - c['start']:.1f} s")

    def close(self, finished: bool = True) -> None:
        """End the counts still open: a count whose total was an estimate (or unknown) ends where it got to;
        after an error (`finished` False) they are left unsaid, and the error is the last line."""
        for name, c in self.counts.items():
            if finished and not c["ended"] and c["done"]:
                self._end(name, c, self.clock())
        self.counts.clear()
