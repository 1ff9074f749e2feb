"""The engine's job: one staged write of a plan, from the checkpoint's headers to a verified staging
directory. Orchestration, no math.

Data flows one way: checkpoint (read) -> architectures (which tensors) -> tokenizer (which ids)
-> init (which values) -> writer (bytes) -> verification.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from .._version import __version__
from ..checkpoint.staging import Stage
from ..checkpoint.writer import Syncer, copy_file, copy_old_bytes, final_layout, reserve_layout, write_rows
from ..errors import Cancelled, VocabSurgeonError, WriteError
from ..init.rows import StatsAhead, all_new_rows, fitted_rows, shrunk_rows
from ..progress import SILENT, Progress, Steps
from .record import record
from .outputs import copy_other_files, verify_checkpoint, verify_rows, write_metadata_files
from .target import Plan, Target

logger = logging.getLogger(__name__)

@dataclass
class AddResult:
    """What `add` did: the plan's view plus timings and bytes; `to_dict()` is the --json output."""

    out: Path  # where the output is published
    plan: Plan
    seconds: float
    bytes_written: int
    copy_methods: dict[str, str] = field(default_factory=dict)
    init_notes: dict[str, str] = field(default_factory=dict)
    fitted: dict | None = None  # --init fitted: what was fitted, on what, and the measured figures
    shrink: dict | None = None  # --init subword-mean-shrunk: the shrink factor, the limits, the held-out KL
    staged: Stage | None = field(default=None, repr=False)  # the proven output before it is published; None after

    def to_dict(self) -> dict:
        d = self.plan.to_dict()
        if self.fitted is not None:
            d["fitted"] = self.fitted
        if self.shrink is not None:
            d["shrink"] = self.shrink
        d.update({"output": str(self.out), "seconds": round(self.seconds, 3), "bytes_written": self.bytes_written,
                  "copy_methods": self.copy_methods, "tool": f"vocabsurgeon {__version__}"})
        return d


class AddJob:
    """One staged write of a plan (add's and extend's), from the checkpoint's headers to a verified staging directory.

    Opening it starts copying into the stage (`out`: a `Stage`, or a path for which the job makes one), in a second thread:
    the old bytes of the vocabulary shards first (their places do not depend on how many tokens
    are added: see `writer.reserve_layout`), then the untouched shards. Meanwhile this thread plans
    the tokens (`plan`) and computes the new rows (`finish`), so the copy starts before the
    tokenizer is even read. Leaving the block without `finish()` (an error, an interrupt) stops the
    copy and removes the staging directory. Given a path, the job publishes the output when the block ends
    (the card says it was not validated); given a `Stage`, the engine validates it first (`finish.finish_add`).

        with AddJob(open_target("ckpt/"), "out/") as job:
            job.use(plan_tokens(job.target, ["Frodo", "Gandalf"]))
            result = job.finish()
    """

    def __init__(self, target: Target, out: str | os.PathLike | Stage, progress: Callable[[int], None] | None = None):
        self.target = target
        self._owns_stage = not isinstance(out, Stage)
        self.out = Path(out) if self._owns_stage else out.out
        self._progress, self._done, self._lock = progress or (lambda n: None), 0, threading.Lock()
        self._plan: Plan | None = None
        self._finished = False
        self.fit_progress: Steps | None = None  # --init fitted: (stage, done, total)
        self._t0 = time.perf_counter()
        ckpt = target.ckpt
        self._reserved = {f: reserve_layout(ckpt.shards[f], tuple(n for n in target.layout.all_tensors
                                                                   if ckpt.tensors[n].file == f))
                          for f in target.vocab_files}
        self._methods: dict[str, str] = {}
        self._cancel = threading.Event()
        self._interrupted = threading.Event()
        self._shard_copied = {f: threading.Event() for f in self._reserved}  # set by the copy thread
        self._stack = contextlib.ExitStack()
        try:
            self._stack.enter_context(write_errors(self.out))
            self._stack.enter_context(_noting_interrupts(self._interrupted))
            self.staged = (self._stack.enter_context(Stage.open(target.src, self.out, target.options.force))
                           if self._owns_stage else out)
            self.stage = self.staged.path
            self._syncer = Syncer(enabled=target.options.fsync)
            self._stack.callback(self._syncer.close)
            # Bytes move in a second thread (in the kernel: copy_file_range releases the GIL) while
            # this one plans and computes: on two cores the planning costs almost nothing extra.
            self._copying = _Worker(self._copy_shards, interrupted=self._interrupted)
            # And the old rows' statistics in a third (numpy and BLAS release the GIL): see StatsAhead.
            self._stats = StatsAhead(target, self._interrupted)
            self._stack.callback(self._stats.close)
        except BaseException:
            if not self._stack.__exit__(*sys.exc_info()):  # removes a staging directory of its own
                raise

    def __enter__(self) -> "AddJob":
        return self

    def __exit__(self, kind, error, tb) -> bool:
        if kind is None and not self._finished:
            kind, error, tb = ValueError, ValueError("AddJob left without finish(); nothing was published"), None
        if kind is not None:
            self._cancel.set()
            self._copying.join(timeout=5)
            return self._stack.__exit__(kind, error, tb)  # a stage of its own is removed
        with self._stack:  # a stage of its own: recorded as not validated, then published
            if self._owns_stage:
                record(self.stage, self._result.to_dict(), None, fsync=self.target.options.fsync)
                self.staged.publish()
                self._result.staged = None
        return False

    @property
    def progress(self) -> Callable[[int], None]:
        """Called with each number of bytes written. Assign a new one at any time (e.g. a progress bar
        shown once the plan is printed): it is first called with the bytes already written."""
        return self._progress

    @progress.setter
    def progress(self, fn: Callable[[int], None]) -> None:
        with self._lock:
            if self._done:
                fn(self._done)
            self._progress = fn

    @property
    def bytes_done(self) -> int:
        """The bytes copied and written so far (what `progress` has been told)."""
        with self._lock:
            return self._done

    def _report(self, n: int) -> None:
        with self._lock:
            self._done += n
            self._progress(n)

    def _checked(self, n: int) -> None:  # progress from the copying thread; stops it when the main thread failed
        if self._cancel.is_set():
            raise Cancelled
        self._report(n)

    def _copy_shards(self) -> None:
        """The vocabulary shards' old bytes (at their final places), then every other shard whole."""
        ckpt, stage = self.target.ckpt, self.stage
        for f, (layout, placed) in self._reserved.items():
            copy_old_bytes(ckpt.path / f, layout, stage / f, self._checked, names=placed)
            self._methods[f] = "rewrite"
            self._shard_copied[f].set()
            self._syncer.submit(stage / f)  # flushed while the next shard is copied
        for f in ckpt.shards:
            if f not in self._reserved:
                self._methods[f] = copy_file(ckpt.path / f, stage / f, link=self.target.options.link,
                                             progress=self._checked)
                self._syncer.submit(stage / f)

    def use(self, plan: Plan) -> Plan:
        """Take a plan made elsewhere for the same target (`apply`).

        Raises:
            InputError: no token of the plan is new (`Plan.nothing_to_add`): nothing is written.
        """
        if plan.target is not self.target:
            raise ValueError("the plan was made for another checkpoint or options")
        if not plan.tokens.new:
            raise plan.nothing_to_add()
        self._plan = plan
        return plan

    def write(self, plan, progress: Progress = SILENT, on_plan: Callable | None = None) -> AddResult:
        """Tell `on_plan` the plan, then compute and write the new rows (`finish`), counting on `progress`."""
        if on_plan is not None:
            on_plan(plan)
        self.fit_progress = progress.steps()
        # The total is the shards' size now; the headers are rewritten and the new rows come on top, so
        # once written the count's total is corrected to the bytes that were moved.
        self.progress = progress.count("writing", plan.bytes_to_write, "B")
        result = self.finish()
        progress.count("writing", self.bytes_done, "B")
        return result

    def finish(self) -> AddResult:
        """Compute and write the new rows and the metadata, verify, flush; the rename into place
        happens when the `with` block ends.

        Raises:
            InputError: nothing to add, or bad input discovered while reading values (NaN rows).
            VocabSurgeonError: the written checkpoint failed its own verification.
        """
        plan = self._plan
        if plan is None:
            raise ValueError("hand the job a plan first: job.use(plan)")
        ckpt, stage = plan.ckpt, self.stage
        notes: dict[str, str] = {}
        fit = fitted_rows(plan, self.fit_progress)
        shrunk = shrunk_rows(plan, self.fit_progress)
        fit_report = fit.report if fit is not None else None
        shrink_report = shrunk.report if shrunk is not None else None
        if shrunk is not None:  # the output rows (the tied ones too) are the shrunk ones, input rows may be fitted
            fit = replace(fit, output_rows=shrunk.output_rows) if fit is not None else shrunk
        grown = all_new_rows(plan, notes, self._stats.get, fit)
        # Nothing below needs the shards' bytes: done while they are still being copied.
        write_metadata_files(plan, stage, grown)
        copy_other_files(plan, stage)
        if plan.tokens.new:
            plan.verify_tokenizer(stage)
        # Each vocabulary shard is finished and checked as soon as its old bytes are in place: the
        # first one's check overlaps the copy of the next.
        for f, (reserved, placed) in self._reserved.items():
            self._copying.wait_for(self._shard_copied[f])
            mine = {n: g for n, g in grown.items() if ckpt.tensors[n].file == f}
            layout = final_layout(reserved, {n: g.shape for n, g in mine.items()})
            rest = tuple(n for n in reserved.last if n not in placed)
            if rest:  # a second vocabulary tensor in this shard: its place depended on the first one's rows
                copy_old_bytes(ckpt.path / f, layout, stage / f, self._report, names=rest)
            write_rows(stage / f, layout, mine, self._report)
            self._syncer.submit(stage / f)
            verify_rows(plan, stage, f, mine)
        self._copying.join()
        verify_checkpoint(plan, stage, grown)
        for p in sorted(stage.rglob("*"), reverse=True):  # files, then the directories that list them
            if p not in self._syncer.submitted:
                self._syncer.submit(p)
        self._syncer.submit(stage)
        self._syncer.wait(poll=self._copying.check_interrupt)
        written = sum(p.stat().st_size for p in (stage / f for f in ckpt.shards))
        seconds = time.perf_counter() - self._t0
        logger.info("wrote %s in %.2f s", self.out, seconds)
        self._finished = True
        self._result = AddResult(self.out, plan, seconds, written, dict(self._methods), notes, fit_report, shrink_report,
                                 staged=self.staged)
        return self._result


@contextlib.contextmanager
def write_errors(out: Path):
    """An OSError while writing becomes one line naming the output and the next step."""
    try:
        yield
    except OSError as e:
        where = f" ({e.filename})" if e.filename else ""
        raise WriteError(
            f"{out}: writing failed: {e.strerror or e}{where}; nothing was published. Free space, check "
            "permissions, or choose another output directory"
        ) from e


def apply(plan: Plan, out: str | os.PathLike, progress: Callable[[int], None] | None = None) -> AddResult:
    """Write the planned checkpoint to `out` atomically and verify it; returns what was done.
    (`add_tokens` and the CLI start copying before planning: see `AddJob`.)

    Raises:
        InputError: bad input discovered while reading values (e.g. NaN rows), or an output conflict.
        VocabSurgeonError: the written checkpoint failed its own verification.
    """
    with AddJob(plan.target, out, progress) as job:
        job.use(plan)
        result = job.finish()
    return result


@contextlib.contextmanager
def _noting_interrupts(event: threading.Event):
    """While in the block, SIGINT/SIGTERM also set `event`, then act as the installed handler does.

    A KeyboardInterrupt raised inside a C extension's module init can vanish (seen: it hit
    numpy.random's lazy import under `np.random.default_rng` and the run went on), so the wait for
    the copy checks `event` too. Handlers that ignore the signal, and threads other than the main
    one (which cannot set handlers), are left alone.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}

    def note(signum, frame):
        event.set()
        previous[signum](signum, frame)

    for sig in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(sig)
        if callable(handler):
            previous[sig] = handler
            signal.signal(sig, note)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class _Worker(threading.Thread):
    """Runs fn(*args) in a daemon thread; join() re-raises its exception in the caller, or raises
    KeyboardInterrupt once `interrupted` is set."""

    def __init__(self, fn, *args, interrupted: threading.Event | None = None):
        super().__init__(name="vocabsurgeon-copy", daemon=True)
        self._fn, self._args, self._error = fn, args, None
        self._interrupted = interrupted or threading.Event()
        self.start()

    def run(self) -> None:
        try:
            self._fn(*self._args)
        except BaseException as e:  # handed to the main thread by join()
            self._error = e

    def check_interrupt(self) -> None:
        if self._interrupted.is_set():
            raise KeyboardInterrupt

    def wait_for(self, event: threading.Event) -> None:
        """Wait until `event` is set by fn, or fn ends (re-raising its exception); see join()."""
        while not event.is_set() and self.is_alive():
            self.check_interrupt()
            event.wait(0.1)
        if not event.is_set():
            self.join()
            if not event.is_set():
                raise VocabSurgeonError("internal: the copy ended early; nothing was published")

    def join(self, timeout: float | None = None) -> None:
        if timeout is None:
            # Poll instead of one blocking wait: Linux may deliver SIGINT/SIGTERM to this worker
            # thread, and a main thread blocked in a lock never wakes to run the handler, so an
            # interrupt would wait for the whole copy (seen as a hang in the interrupt test).
            while self.is_alive():
                self.check_interrupt()
                super().join(0.1)
            if self._error is not None:
                raise self._error
        else:
            super().join(timeout)
