"""The surgery: apply a plan (plan.py): copy, compute the new rows, write, verify. Orchestration, no math.

Data flows one way: checkpoint (read) -> architectures (which tensors) -> tokenizer (which ids)
-> init (which values) -> writer (bytes) -> verification.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np

from ..progress import SILENT, Progress, Steps, counting
from .._version import __version__
from ..checkpoint.architectures import text_config
from ..checkpoint.reader import FLOAT_DTYPES, Checkpoint, read_header, rows_kept
from ..errors import InputError, VocabSurgeonError, WriteError
from .modelcard import write_model_card
from ..devices import resolve_device
from ..init import InitContext, NewRows, RowStats, Strategy, accumulate_stats, get_strategy
from ..checkpoint.filenames import CONFIG_NAME, INDEX_NAME, SLOW_TOKENIZER_FILES, TOKENIZER_CONFIG, TOKENIZER_FILE
from ..tokenizer.editor import verify_tokenizer
from ..checkpoint.writer import (
    GrownTensor, Syncer, check_output_path, copy_file, copy_old_bytes, final_layout, reserve_layout, staging,
    write_json, write_rows,
)

from .plan import AddOptions, Plan, Target, open_target, plan_tokens

logger = logging.getLogger(__name__)

@dataclass
class AddResult:
    """What `add` did: the plan's view plus timings and bytes; `to_dict()` is the --json output."""

    out: Path
    plan: Plan
    seconds: float
    bytes_written: int
    copy_methods: dict[str, str] = field(default_factory=dict)
    init_notes: dict[str, str] = field(default_factory=dict)
    fitted: dict | None = None  # --init fitted: what was fitted, on what, and the measured figures
    shrink: dict | None = None  # --init subword-mean-shrunk: the shrink factor, the limits, the held-out KL

    def to_dict(self) -> dict:
        d = self.plan.to_dict()
        if self.fitted is not None:
            d["fitted"] = self.fitted
        if self.shrink is not None:
            d["shrink"] = self.shrink
        d.update({"output": str(self.out), "seconds": round(self.seconds, 3), "bytes_written": self.bytes_written,
                  "copy_methods": self.copy_methods, "tool": f"vocabsurgeon {__version__}"})
        return d


def _matrices(layout) -> list[str]:
    """The vocabulary tensors whose new rows are computed; the others (aliases, a tied lm_head) repeat the
    embedding's."""
    return [n for n in layout.all_tensors if not (n in layout.aliases or (layout.tied and n == layout.lm_head))]


def row_stats(target: Target, name: str, device, stop: threading.Event | None = None) -> tuple[RowStats, dict]:
    """The old rows' statistics of vocabulary tensor `name` (a covariance when its strategy needs one), and
    its strategy's work shared by all its new rows (`Strategy.prepare`: mean-noise's factor of the covariance).

    A bias gets its mean only (a fitted bias, a masked-LM head's, too). Nothing here depends on the tokens:
    `AddJob` runs it in a thread while the tokens are planned (`_StatsAhead`). `stop` set: stops between chunks.
    """
    ckpt = target.ckpt
    strategy = _stats_strategy(target, name)
    chunks = ckpt.stream_rows(name)
    if stop is not None:
        chunks = _until(stop, chunks)
    stats = accumulate_stats(chunks, cov=strategy.needs_cov, device=device, name=name, strict=strategy.averages)
    memo = strategy.prepare(stats, target.options.eps, name) if strategy.prepare is not None else {}
    return stats, memo


def _stats_strategy(target: Target, name: str) -> Strategy:
    """The strategy whose statistics `name` needs: a bias's are its mean's, else its init's."""
    return get_strategy("mean" if len(target.ckpt.tensors[name].shape) == 1 else target.strategy_for(name))


def _until(stop: threading.Event, chunks):
    for chunk in chunks:
        if stop.is_set():
            raise _Cancelled
        yield chunk


class _StatsAhead:
    """`row_stats` of every computed vocabulary matrix, in a thread started when the job opens.

    The statistics depend on the checkpoint and the options, not on the tokens, so they are computed while
    the main thread plans the tokens (and the copy thread moves bytes), not after. For `mean` that hides one
    read of each matrix; for `mean-noise` it hides the covariance and its factorization, two syrks of
    128,256 x 2048 and two Cholesky factorizations on the 1B-class checkpoint, most of that init's cost on a
    CPU (bench/RESULTS.md, "Covariance at GEMM speed"). The arithmetic is the same as in the main thread, so
    the results are the same bits. Errors (a NaN row, no CUDA for --device cuda) are raised by `get`, in the
    main thread, where the rows are asked for: where they were raised before.
    """

    def __init__(self, target: Target, interrupted: threading.Event):
        self.target, self._interrupted = target, interrupted
        self._names = _matrices(target.layout)
        self._results: dict[str, tuple[RowStats, dict] | BaseException] = {}
        self._ready = {n: threading.Event() for n in self._names}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vocabsurgeon-stats", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        device = "cpu"  # only the covariance runs on a GPU
        for name in self._names:
            if self._stop.is_set():
                break
            try:
                if _stats_strategy(self.target, name).needs_cov and device == "cpu":
                    device = resolve_device(self.target.options.device)
                self._results[name] = row_stats(self.target, name, device, self._stop)
            except BaseException as e:  # handed to the main thread by get()
                self._results[name] = e
            finally:
                self._ready[name].set()

    def get(self, name: str) -> tuple[RowStats, dict]:
        """`row_stats` of `name`, once computed (raising its error); raises KeyboardInterrupt on an interrupt."""
        ready = self._ready.get(name)
        if ready is None:
            raise VocabSurgeonError(f"internal: no statistics for '{name}'; nothing was written")
        while not ready.wait(0.1):  # polled: see _Worker.join
            if self._interrupted.is_set():
                raise KeyboardInterrupt
        got = self._results[name]
        if isinstance(got, BaseException):
            raise got
        return got

    def close(self) -> None:
        """Stop the thread (between chunks) and wait for it."""
        self._stop.set()
        self._thread.join(timeout=10)


def _new_rows(plan: Plan, name: str, gen_seed: int, notes: dict, stats: tuple[RowStats, dict],
              fitted: np.ndarray | None = None) -> NewRows:
    """The appended rows of one vocabulary tensor, (k, row_size), produced block by block; `stats`: its
    `row_stats`."""
    ckpt = plan.ckpt
    info = ckpt.tensors[name]
    if info.dtype not in FLOAT_DTYPES:
        raise InputError(f"tensor '{name}' has dtype {info.dtype}; vocabulary tensors must be floating point")
    k = len(plan.row_ids)  # rows to compute, in row_ids order
    stats, memo = stats
    if len(info.shape) == 1 and fitted is None:  # a bias: the mean bias keeps the KL bound
        return NewRows.constant(stats.mean, k)
    # A bias with fitted entries: a masked-LM head's, lowered to keep the KL bound (fitted.mlm.bias_shrink)
    strategy = get_strategy("fitted" if len(info.shape) == 1 else plan.strategy_for(name))
    role = "output" if (plan.layout.tied or name == plan.layout.lm_head) else "input"
    if strategy.needs_model and fitted is None and role in strategy.model_roles:
        raise VocabSurgeonError(f"internal: no fitted rows for '{name}'; nothing was written")
    n_tok = len(plan.tokens.new)
    pieces = [t.pieces for t in plan.tokens.new] + [[]] * (k - n_tok)
    ctx = InitContext(
        k=k, hidden=stats.mean.shape[0], stats=stats, generator=np.random.default_rng(gen_seed),
        eps=plan.options.eps, initializer_range=float(text_config(ckpt.config).get("initializer_range", 0.02)),
        pieces=pieces, rows_of=lambda ids: np.concatenate([ckpt.rows_np(name, i, i + 1) for i in ids]), name=name,
        fitted=fitted, memo=memo,
    )
    notes[name] = strategy.name
    # Padding rows (past the new tokens), never reachable from the tokenizer, hold the mean (keeps the KL bound).
    return NewRows(k, ctx.hidden, strategy, ctx, gen_seed, stats.mean, from_strategy=n_tok)


class AddJob:
    """One `add` under way, from the checkpoint's headers to the renamed output directory.

    Opening it creates the staging directory beside `out` and starts copying, in a second thread:
    the old bytes of the vocabulary shards first (their places do not depend on how many tokens
    are added: see `writer.reserve_layout`), then the untouched shards. Meanwhile this thread plans
    the tokens (`plan`) and computes the new rows (`finish`), so the copy starts before the
    tokenizer is even read. Leaving the block without `finish()` (an error, an interrupt) stops the
    copy and removes the staging directory: `out` appears complete or not at all.

        with AddJob(open_target("ckpt/"), "out/") as job:
            job.plan(["Frodo", "Gandalf"])
            result = job.finish()
    """

    def __init__(self, target: Target, out: str | os.PathLike, progress: Callable[[int], None] | None = None):
        self.target, self.out = target, Path(out)
        self._progress, self._done, self._lock = progress or (lambda n: None), 0, threading.Lock()
        self._plan: Plan | None = None
        self._finished = False
        self.fit_progress: Steps | None = None  # --init fitted: (stage, done, total)
        self._t0 = time.perf_counter()
        check_output_path(target.src, self.out, target.options.force)
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
            self._stack.enter_context(_write_errors(self.out))
            self._stack.enter_context(_noting_interrupts(self._interrupted))
            self.stage = self._stack.enter_context(staging(self.out, force=target.options.force))
            self._syncer = Syncer(enabled=target.options.fsync)
            self._stack.callback(self._syncer.close)
            # Bytes move in a second thread (in the kernel: copy_file_range releases the GIL) while
            # this one plans and computes: on two cores the planning costs almost nothing extra.
            self._copying = _Worker(self._copy_shards, interrupted=self._interrupted)
            # And the old rows' statistics in a third (numpy and BLAS release the GIL): see _StatsAhead.
            self._stats = _StatsAhead(target, self._interrupted)
            self._stack.callback(self._stats.close)
        except BaseException:
            if not self._stack.__exit__(*sys.exc_info()):  # removes the staging directory
                raise

    def __enter__(self) -> "AddJob":
        return self

    def __exit__(self, kind, error, tb) -> bool:
        if kind is None and not self._finished:
            kind, error, tb = ValueError, ValueError("AddJob left without finish(); nothing was published"), None
        if kind is not None:
            self._cancel.set()
            self._copying.join(timeout=5)
        # The staging directory is renamed into place, or removed when there was an error.
        return self._stack.__exit__(kind, error, tb)

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
            raise _Cancelled
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

    def verify_tokenizer(self, stage: Path, plan: Plan) -> None:
        """Re-read the tokenizer files written into `stage` and check them (`extend` checks its own edit)."""
        verify_tokenizer(stage, plan.tokens)

    def plan(self, tokens: list[str]) -> Plan:
        """Plan `tokens` (see `plan_tokens`) while the copy runs."""
        return self.use(plan_tokens(self.target, tokens))

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
            raise ValueError("plan the tokens first: job.plan(tokens)")
        ckpt, stage = plan.ckpt, self.stage
        notes: dict[str, str] = {}
        fit = _fit(plan, self.fit_progress)
        shrunk = _shrink(plan, self.fit_progress)
        fit_report = fit.report if fit is not None else None
        shrink_report = shrunk.report if shrunk is not None else None
        if shrunk is not None:  # the output rows (the tied ones too) are the shrunk ones, input rows may be fitted
            fit = replace(fit, output_rows=shrunk.output_rows) if fit is not None else shrunk
        grown = _all_new_rows(plan, notes, self._stats.get, fit)
        # Nothing below needs the shards' bytes: done while they are still being copied.
        _write_metadata_files(plan, stage, grown)
        _copy_other_files(plan, stage)
        card = {**plan.to_dict(), "tool": f"vocabsurgeon {__version__}"}
        if fit_report is not None:
            card["fitted"] = fit_report
        if shrink_report is not None:
            card["shrink"] = shrink_report
        write_model_card(stage, card)
        if plan.tokens.new:
            self.verify_tokenizer(stage, plan)
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
            _verify_rows(plan, stage, f, mine)
        self._copying.join()
        _verify(plan, stage, grown)
        for p in sorted(stage.rglob("*"), reverse=True):  # files, then the directories that list them
            if p not in self._syncer.submitted:
                self._syncer.submit(p)
        self._syncer.submit(stage)
        self._syncer.wait(poll=self._copying.check_interrupt)
        written = sum(p.stat().st_size for p in (stage / f for f in ckpt.shards))
        seconds = time.perf_counter() - self._t0
        logger.info("wrote %s in %.2f s", self.out, seconds)
        self._finished = True
        return AddResult(self.out, plan, seconds, written, dict(self._methods), notes, fit_report, shrink_report)


@contextlib.contextmanager
def _write_errors(out: Path):
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


class _Cancelled(Exception):
    """Stops the copying thread after the main thread failed."""


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


def _model_roles(plan: Plan, method: str) -> set[str]:
    """The roles whose rows `method` (an init that runs the model) gives: {"output"} on a tied model (one row
    plays both roles), else each role whose init it is and that it gives rows for (`Strategy.model_roles`)."""
    opts = plan.options
    s = get_strategy(method)
    roles = {r for r, init in (("input", opts.init_input), ("output", opts.init_output))
             if init == method and r in s.model_roles}
    return ({"output"} if roles else set()) if plan.layout.tied else roles


def _fit(plan: Plan, progress: Steps | None):
    """Run `fitted.fit_rows` once when a matrix is initialized `fitted`; None otherwise.

    Untied: the input embedding gets distilled rows, the output matrix convexly fitted ones. Tied
    (one row plays both roles): the output fit only; its pull toward the sub-word mean keeps the
    row readable as an input.
    """
    opts = plan.options
    roles = _model_roles(plan, "fitted")
    if not plan.tokens.new or not roles:
        return None
    from ..fitted import FitOptions, FitToken, fit_rows

    # The output prior is the sub-word mean, tied or not: better bits per byte than the mean row (bench/RESULTS.md),
    # and the shrink keeps the KL bound either way.
    start = "subword-mean"
    fo = FitOptions(corpus=opts.fit_corpus, contexts_per_word=opts.fit_contexts, context_tokens=opts.fit_context_tokens,
                    input_steps=opts.fit_steps, depth=opts.fit_depth,
                    output_steps=opts.fit_output_steps, l2=opts.fit_l2, seed=opts.seed,
                    output_start=opts.fit_prior or start, kl_limit=opts.fit_kl_limit, device=opts.device,
                    dtype=opts.dtype, segment=plan.fit_segment())
    tokens = [FitToken(t.form, tuple(t.pieces)) for t in plan.tokens.new]
    result = fit_rows(plan.src, tokens, roles, fo, progress)
    result.report["tied"] = plan.layout.tied
    return result


def _shrink(plan: Plan, progress: Steps | None):
    """Run `fitted.shrink_rows` once when the output rows (the shared ones when tied) are initialized
    `subword-mean-shrunk`; None otherwise. Input rows of an untied model stay the plain sub-word mean."""
    opts = plan.options
    if not plan.tokens.new or not _model_roles(plan, "subword-mean-shrunk"):
        return None
    from ..fitted import FitOptions, FitToken, shrink_rows

    fo = FitOptions(kl_limit=opts.fit_kl_limit, seed=opts.seed, device=opts.device, dtype=opts.dtype)
    result = shrink_rows(plan.src, [FitToken(t.form, tuple(t.pieces)) for t in plan.tokens.new], fo, progress)
    result.report["tied"] = plan.layout.tied
    return result


def _all_new_rows(plan: Plan, notes: dict, stats_of: Callable[[str], tuple[RowStats, dict]],
                  fit=None) -> dict[str, GrownTensor]:
    """New rows of every vocabulary tensor, encoded in its dtype (`stats_of(name)`: its `row_stats`; `fit`: the
    result of `_fit`)."""
    ckpt, lay, opts = plan.ckpt, plan.layout, plan.options
    if not plan.row_ids:
        return {}
    computed = set(_matrices(lay))
    grown: dict[str, GrownTensor] = {}
    base = None
    for i, name in enumerate(lay.all_tensors):
        info = ckpt.tensors[name]
        if name not in computed:
            rows = base  # the same matrix stored under another name: identical rows
        else:
            fitted = None
            if fit is not None and name in lay.biases:
                fitted = None if fit.bias is None else fit.bias[:, None]
            elif fit is not None:
                fitted = fit.output_rows if (lay.tied or name == lay.lm_head) else fit.input_rows
            rows = _new_rows(plan, name, opts.seed + i, notes, stats_of(name), fitted)
            if name == lay.embedding:
                base = rows
        # Rows inside the old matrix (--reuse-reserved) are patched in place; the rest are appended.
        # Ids are handed out reused rows first, then counting up from rows_before (tokenizer.plan),
        # so the patched rows come first and the appended ones are already in row order.
        order = plan.row_ids
        n_inside = sum(r < plan.rows_before for r in order)
        if order[n_inside:] != list(range(plan.rows_before, plan.rows_after)):
            raise VocabSurgeonError(f"internal: new rows of '{name}' are not in row order; nothing was written")
        head = rows.encoded(info.dtype, stop=n_inside).tobytes()
        inside = {r: head[j * info.row_bytes:(j + 1) * info.row_bytes] for j, r in enumerate(order[:n_inside])}
        tail = rows.encoded(info.dtype, start=n_inside)
        if len(tail) <= _EAGER_TAIL_BYTES:  # compute now, while the copy thread runs; else block by block in write_rows
            tail = tail.tobytes()
        grown[name] = GrownTensor((plan.rows_after, *info.shape[1:]), tail, inside)
    return grown


_EAGER_TAIL_BYTES = 64 << 20


def _write_metadata_files(plan: Plan, stage: Path, grown: dict[str, GrownTensor]) -> None:
    ckpt = plan.ckpt
    if ckpt.index is not None:
        index = json.loads(json.dumps(ckpt.index))
        total = 0
        for t in ckpt.tensors.values():
            g = grown.get(t.name)
            total += t.nbytes + (len(g.tail) if g else 0)
        meta = index.setdefault("metadata", {})
        meta["total_size"] = total
        if plan.options.untie:  # the new output matrix lives beside the embedding
            index["weight_map"][plan.layout.lm_head] = ckpt.tensors[plan.layout.lm_head].file
        if isinstance(meta.get("total_parameters"), int):  # transformers writes num_parameters() here
            meta["total_parameters"] += _parameters_added(plan, grown)
        write_json(stage / INDEX_NAME, index)
    config = json.loads(json.dumps(ckpt.config))
    for path in plan.layout.vocab_keys:
        node = config
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = plan.rows_after
    if plan.options.untie:
        config["tie_word_embeddings"] = False
        if isinstance(config.get("text_config"), dict) and "tie_word_embeddings" in config["text_config"]:
            config["text_config"]["tie_word_embeddings"] = False
    if plan.architectures:  # the input has none (the plan's note says so)
        config["architectures"] = plan.architectures
    write_json(stage / CONFIG_NAME, config)
    if plan.tokens.new:
        plan.editor.write(plan.tokens, stage)


def _parameters_added(plan: Plan, grown: dict[str, GrownTensor]) -> int:
    """Parameters the grown tensors add, counted as `model.num_parameters()` counts them: a tied
    matrix and its aliases (T5's encoder/decoder.embed_tokens) are one parameter."""
    added = 0
    for name, g in grown.items():
        if name not in plan.layout.aliases:
            old = plan.ckpt.tensors[name].shape
            added += math.prod(g.shape) - math.prod(old)
    if plan.options.untie:  # the output matrix becomes a parameter of its own, old rows included
        added += math.prod(plan.ckpt.tensors[plan.layout.lm_head].shape)
    return added


# Files that are rewritten above, or that must never be carried over.
_HANDLED = {INDEX_NAME, CONFIG_NAME, TOKENIZER_FILE, TOKENIZER_CONFIG, *SLOW_TOKENIZER_FILES}


def _copy_other_files(plan: Plan, stage: Path) -> None:
    src = plan.ckpt.path
    for p in sorted(src.rglob("*")):
        rel = p.relative_to(src)
        if any(part.startswith(".") for part in rel.parts) or rel.parts[0] in ("__pycache__",):
            continue  # .git, .cache, editor files: not part of the checkpoint
        if len(rel.parts) == 1 and (p.name in plan.ckpt.shards or p.name in plan.dropped
                                    or (p.name in _HANDLED and (stage / p.name).exists())):
            continue
        dst = stage / rel
        if p.is_dir():
            dst.mkdir(exist_ok=True)
        elif p.is_file():  # follows symlinks (Hub cache snapshots are links into blobs)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, dst)


def _verify_rows(plan: Plan, stage: Path, f: str, grown: dict[str, GrownTensor]) -> None:
    """Re-read rewritten shard `f`'s header and check that each of its vocabulary tensors (`grown`)
    has its new shape and its old rows byte for byte (done while other shards may still be copying)."""
    ckpt = plan.ckpt
    written = {t.name: t for t in read_header(stage / f).tensors}
    for name, g in grown.items():
        t, o = ckpt.tensors[name], written.get(name)
        if o is None or o.shape != g.shape or o.dtype != t.dtype:
            got = f"{o.dtype}{list(o.shape)}" if o else "nothing"
            raise VocabSurgeonError(f"internal: tensor '{name}' written as {got}, expected {t.dtype}{list(g.shape)}")
        if not rows_kept(ckpt.path / t.file, t, stage / f, o.start, except_rows=g.patches):
            raise VocabSurgeonError(f"internal: old rows of '{name}' changed while writing; nothing was published")


def _verify(plan: Plan, stage: Path, grown: dict[str, GrownTensor]) -> None:
    """Re-open the whole written checkpoint and check its tensors, shapes and index before calling
    the job done (old rows: `_verify_rows`; the tokenizer: `verify_tokenizer`)."""
    ckpt = plan.ckpt
    out = Checkpoint.open(stage)
    if set(out.tensors) != set(ckpt.tensors):
        changed = sorted(set(out.tensors) ^ set(ckpt.tensors))
        raise VocabSurgeonError(f"internal: written checkpoint has tensors {changed} changed; nothing was published")
    for name, t in ckpt.tensors.items():
        o = out.tensors[name]
        want_shape = grown[name].shape if name in grown else t.shape
        if o.shape != want_shape or o.dtype != t.dtype:
            raise VocabSurgeonError(f"internal: tensor '{name}' written as {o.dtype}{list(o.shape)}, "
                                    f"expected {t.dtype}{list(want_shape)}")
    if out.index is not None and out.index["metadata"]["total_size"] != out.total_size:
        raise VocabSurgeonError("internal: index total_size does not match the shards; nothing was published")
    out.close()


def add_tokens(
    src: str | os.PathLike,
    out: str | os.PathLike,
    tokens: list[str],
    *,
    progress: Callable[[int], None] | None = None,
    revision: str | None = None,
    token: str | None = None,
    **options,
) -> AddResult:
    """Add `tokens` to the checkpoint at `src` and write the result to `out`.

    Args:
        src: a Hugging Face checkpoint directory (config.json, safetensors, tokenizer.json), or a Hub
            repo id (`org/name`) whose safetensors checkpoint is downloaded into the Hub cache.
        out: the output directory; created atomically, must not exist or be empty (or force=True).
        tokens: the new tokens, e.g. from `read_tokens_file`.
        progress: called with the number of bytes written, as they are written.
        revision, token: the Hub revision and token when `src` is a repo id (token None: HF_TOKEN or
            the stored login).
        **options: fields of `AddOptions` (init_input, init_output, seed, eps, special, link, force,
            device, embedding_key, lm_head_key, pad_to_multiple_of, init, reuse_reserved, gguf_parity, strict).

    Returns:
        AddResult; `result.to_dict()` is what `vocabsurgeon add --json` prints.

    Example:
        >>> from vocabsurgeon import add_tokens
        >>> r = add_tokens("fixtures/gpt2-tiny", "/tmp/out", ["Frodo"], init="mean")  # doctest: +SKIP
        >>> r.to_dict()["rows_after"] - r.to_dict()["rows_before"]  # doctest: +SKIP
        2
    """
    target = open_target(src, AddOptions(**options), revision=revision, token=token)
    return run_job(target, out, tokens, counting("writing", progress) if progress else SILENT)


def run_job(target: Target, out: str | os.PathLike, tokens: list[str], progress: Progress = SILENT,
            on_plan: Callable[[Plan], None] | None = None) -> AddResult:
    """Plan `tokens` for `target` while its shards start copying, then write `out` (see `AddJob`):
    `add_tokens` and `pipeline.add_validate_push` both run this.

    Args:
        progress: the "writing" count (bytes) and the fitted init's stages.
        on_plan: called with the plan before the new rows are computed and written.

    Raises:
        InputError: no token is new, or bad input found while reading values; nothing is written.
    """
    with AddJob(target, out) as job:
        return job.write(job.plan(tokens), progress, on_plan)
