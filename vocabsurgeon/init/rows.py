"""The new rows of a plan: the old rows' statistics (computed ahead, in a thread), the model-run inits
(fitted, shrunk) and every vocabulary tensor's appended rows encoded in its dtype.

A plan here is any engine plan (`engine.target.Plan` or a subclass): this room reads its target, layout,
options, new tokens and row ids, and never writes a file.
"""

from __future__ import annotations

import threading
from typing import Callable

import numpy as np

from ..checkpoint.architectures import text_config
from ..checkpoint.reader import FLOAT_DTYPES
from ..checkpoint.writer import GrownTensor
from ..devices import resolve_device
from ..errors import Cancelled, InputError, VocabSurgeonError
from ..progress import Steps
from .strategies import InitContext, NewRows, RowStats, Strategy, accumulate_stats, get_strategy

def computed_matrices(layout) -> list[str]:
    """The vocabulary tensors whose new rows are computed; the others (aliases, a tied lm_head) repeat the
    embedding's."""
    return [n for n in layout.all_tensors if not (n in layout.aliases or (layout.tied and n == layout.lm_head))]


def row_stats(target, name: str, device, stop: threading.Event | None = None) -> tuple[RowStats, dict]:
    """The old rows' statistics of vocabulary tensor `name` (a covariance when its strategy needs one), and
    its strategy's work shared by all its new rows (`Strategy.prepare`: mean-noise's factor of the covariance).

    A bias gets its mean only (a fitted bias, a masked-LM head's, too). Nothing here depends on the tokens:
    `AddJob` runs it in a thread while the tokens are planned (`StatsAhead`). `stop` set: stops between chunks.
    """
    ckpt = target.ckpt
    strategy = _stats_strategy(target, name)
    chunks = ckpt.stream_rows(name)
    if stop is not None:
        chunks = _until(stop, chunks)
    stats = accumulate_stats(chunks, cov=strategy.needs_cov, device=device, name=name, strict=strategy.averages)
    memo = strategy.prepare(stats, target.options.eps, name) if strategy.prepare is not None else {}
    return stats, memo


def _stats_strategy(target, name: str) -> Strategy:
    """The strategy whose statistics `name` needs: a bias's are its mean's, else its init's."""
    return get_strategy("mean" if len(target.ckpt.tensors[name].shape) == 1 else target.strategy_for(name))


def _until(stop: threading.Event, chunks):
    for chunk in chunks:
        if stop.is_set():
            raise Cancelled
        yield chunk


class StatsAhead:
    """`row_stats` of every computed vocabulary matrix, in a thread started when the job opens.

    The statistics depend on the checkpoint and the options, not on the tokens, so they are computed while
    the main thread plans the tokens (and the copy thread moves bytes), not after. For `mean` that hides one
    read of each matrix; for `mean-noise` it hides the covariance and its factorization, two syrks of
    128,256 x 2048 and two Cholesky factorizations on the 1B-class checkpoint, most of that init's cost on a
    CPU (bench/RESULTS.md, "Covariance at GEMM speed"). The arithmetic is the same as in the main thread, so
    the results are the same bits. Errors (a NaN row, no CUDA for --device cuda) are raised by `get`, in the
    main thread, where the rows are asked for: where they were raised before.
    """

    def __init__(self, target, interrupted: threading.Event):
        self.target, self._interrupted = target, interrupted
        self._names = computed_matrices(target.layout)
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


def _new_rows(plan, name: str, gen_seed: int, notes: dict, stats: tuple[RowStats, dict],
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


def _model_roles(plan, method: str) -> set[str]:
    """The roles whose rows `method` (an init that runs the model) gives: {"output"} on a tied model (one row
    plays both roles), else each role whose init it is and that it gives rows for (`Strategy.model_roles`)."""
    opts = plan.options
    s = get_strategy(method)
    roles = {r for r, init in (("input", opts.init_input), ("output", opts.init_output))
             if init == method and r in s.model_roles}
    return ({"output"} if roles else set()) if plan.layout.tied else roles


def fitted_rows(plan, progress: Steps | None):
    """Run `fitted.fit_rows` once when a matrix is initialized `fitted`; None otherwise.

    Untied: the input embedding gets distilled rows, the output matrix convexly fitted ones. Tied
    (one row plays both roles): the output fit only; its pull toward the sub-word mean keeps the
    row readable as an input.
    """
    opts = plan.options
    roles = _model_roles(plan, "fitted")
    if not plan.tokens.new or not roles:
        return None
    from .fitted import FitOptions, FitToken, fit_rows

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


def shrunk_rows(plan, progress: Steps | None):
    """Run `fitted.shrink_rows` once when the output rows (the shared ones when tied) are initialized
    `subword-mean-shrunk`; None otherwise. Input rows of an untied model stay the plain sub-word mean."""
    opts = plan.options
    if not plan.tokens.new or not _model_roles(plan, "subword-mean-shrunk"):
        return None
    from .fitted import FitOptions, FitToken, shrink_rows

    fo = FitOptions(kl_limit=opts.fit_kl_limit, seed=opts.seed, device=opts.device, dtype=opts.dtype)
    result = shrink_rows(plan.src, [FitToken(t.form, tuple(t.pieces)) for t in plan.tokens.new], fo, progress)
    result.report["tied"] = plan.layout.tied
    return result


def all_new_rows(plan, notes: dict, stats_of: Callable[[str], tuple[RowStats, dict]],
                  fit=None) -> dict[str, GrownTensor]:
    """New rows of every vocabulary tensor, encoded in its dtype (`stats_of(name)`: its `row_stats`; `fit`: the
    result of `fitted_rows`)."""
    ckpt, lay, opts = plan.ckpt, plan.layout, plan.options
    if not plan.row_ids:
        return {}
    computed = set(computed_matrices(lay))
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
