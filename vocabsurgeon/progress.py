"""Progress of long runs: the one protocol through which the library reports work (it never prints).

A `Progress` is three callbacks: `stage(text)`, `count(name, total, unit)` (returns an `Advance`) and
`advance(n)`; the CLI draws the bars, a pipeline passes its own callbacks or none.

    >>> seen = []; add = seen.append
    >>> step = Progress(count=lambda name, total, unit="": add((name, total)) or add, advance=add).steps()
    >>> step("input rows", 2, 5); step("input rows", 5, 5); step("output rows", 1, 3); seen
    [('input rows', 5), 2, 3, ('output rows', 3), 1]
"""

from __future__ import annotations

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
