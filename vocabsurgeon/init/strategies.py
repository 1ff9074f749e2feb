"""Initialization strategies for new rows: small pure functions over row statistics, by name.

Over 500 lines: the statistics and the strategies that read them are one table, kept together by name.

The names in `STRATEGIES` are the names in the CLI (`--init`), the Python API and the README.
Statistics are accumulated over row chunks (`accumulate_stats`), and new rows are computed and
encoded in blocks (`NewRows`, `EncodedRows`), so memory stays O(hidden^2 + chunk), never
O(vocab x hidden) nor O(new rows x hidden). The CPU path is NumPy (torch costs over a second to
import, more than the rest of a typical run); the CUDA path for the covariance uses torch.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Iterator

import numpy as np

from ..checkpoint.reader import DTYPE_SIZES
from ..checkpoint.writer import encode_rows
from ..errors import InputError

logger = logging.getLogger(__name__)

DEFAULT_EPS = 1e-5  # Hewitt's choice: N(mu, 1e-5 * Sigma) keeps new rows close to the mean
# Seeds are used by numpy (default_rng: any integer >= 0) and torch (Generator.manual_seed: at most
# 2**64 - 1); this is the range both take.
MAX_SEED = 2**64 - 1


def check_seed(seed: int) -> int:
    """Refuse a seed that numpy or torch would refuse later, after the output was written.

    Raises:
        InputError: the seed is negative or larger than MAX_SEED.
    """
    if not (isinstance(seed, int) and 0 <= seed <= MAX_SEED):
        raise InputError(f"--seed {seed}: a seed is an integer from 0 to {MAX_SEED}")
    return seed


def check_eps(eps: float) -> float:
    """Refuse a noise scale that is not a finite number >= 0 (NaN or Inf would write rows of NaN;
    a negative one would silently be the mean).

    Raises:
        InputError: eps is NaN, infinite or negative.
    """

    if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps >= 0):
        raise InputError(f"--eps {eps}: the noise scale of mean-noise must be a finite number >= 0 (default "
                         f"{DEFAULT_EPS})")
    return eps


@dataclass
class RowStats:
    """Mean (and optionally covariance) of the old rows of one matrix, float64."""

    n: int
    mean: np.ndarray  # (hidden,)
    cov: np.ndarray | None = None  # (hidden, hidden), population covariance (divided by n)


def _is_cuda(device) -> bool:
    return getattr(device, "type", str(device).split(":")[0]) == "cuda"


F32_SUM_ROWS = 256  # rows summed in float32 before the float64 total (the error bound grows with it)


def _column_sums(chunk: np.ndarray) -> np.ndarray:
    """Column sums of a (rows, hidden) chunk as float64: float32 chunks summed in float32 over
    blocks of at most F32_SUM_ROWS rows, the block sums in float64 (see `accumulate_stats`)."""
    if chunk.dtype != np.float32:
        return chunk.sum(0, dtype=np.float64)
    rows, width = chunk.shape
    if rows <= F32_SUM_ROWS:  # the chunk of `stream_rows` for hidden 4096 in bf16: one block
        return chunk.sum(0).astype(np.float64)
    whole = rows - rows % F32_SUM_ROWS
    part = chunk[:whole].reshape(-1, F32_SUM_ROWS, width).sum(1).sum(0, dtype=np.float64)
    if whole < rows:
        part += chunk[whole:].sum(0)
    return part


COV_BLOCK_BYTES = 128 << 20  # rows gathered for one covariance product (8,192 rows of a 4096-wide float32 matrix)


class _Scatter:
    """The scatter matrix sum_i (x_i - mean)(x_i - mean)^T of streamed rows: at the speed of one
    float32 `X.T @ X`, and without cancellation however far the rows are from 0.

    Chunks (of `stream_rows`: 256 rows of a 4096-wide matrix) are gathered into blocks of
    COV_BLOCK_BYTES; each block is centred on its own float64 mean and multiplied in one product
    (`b.T @ b` of one array: BLAS's syrk, half a GEMM's work). Products of one 256-row chunk each,
    were much slower per row than one `X.T @ X`: each wrote and widened a whole hidden x hidden partial for
    256 rows (bench/RESULTS.md, "Covariance at GEMM speed"). The blocks combine
    exactly (the law of total covariance): M2 = sum_b S_b + sum_b n_b (m_b - m)(m_b - m)^T, where
    S_b is block b's scatter about its own mean m_b, m the mean of all rows. Every term is a
    difference from a mean taken before any product, so an offset common to all rows (a large mean)
    never enters a product; the partials and the between-block terms add up in float64.

    `precision` is that of the block products: "float32" (default on the CPU) or "float64" (default
    on CUDA, where FP64 matmul is fast). On CUDA (`torch` set) each block goes to the device in one
    transfer and M2 stays there; the arithmetic is the same (tests run it on the CPU's torch).
    """

    def __init__(self, width: int, dtype: np.dtype, precision: str, torch=None, device=None):
        self.width, self.precision, self.torch, self.device = width, precision, torch, device
        dtype = np.float64 if dtype == np.float64 else np.float32  # rows as `stream_rows` widens them
        self.rows = max(1, COV_BLOCK_BYTES // (width * np.dtype(dtype).itemsize))
        self.buf = np.empty((self.rows, width), dtype=dtype)
        self.filled = 0
        self.block_sum = np.zeros(width, dtype=np.float64)
        self.counts: list[int] = []
        self.means: list[np.ndarray] = []  # m_b, float64
        self.offsets: list[np.ndarray] = []  # m_b - s_b, where block b was centred on s_b (its mean in float32)
        self.m2 = (torch.zeros((width, width), dtype=torch.float64, device=device) if torch is not None
                   else np.zeros((width, width), dtype=np.float64))
        self.gram: np.ndarray | None = None  # one block's product, reused (fresh 64 MiB arrays fault in their pages)

    def add(self, chunk: np.ndarray, sums: np.ndarray) -> None:
        """Rows `chunk` (finite) with their float64 column sums `sums`; copied (`chunk` may be reused)."""
        pos = 0
        while pos < chunk.shape[0]:
            n = min(self.rows - self.filled, chunk.shape[0] - pos)
            self.buf[self.filled:self.filled + n] = chunk[pos:pos + n]
            # the block mean from the column sums already taken; a chunk split between blocks is summed again
            self.block_sum += sums if n == chunk.shape[0] else chunk[pos:pos + n].sum(0, dtype=np.float64)
            self.filled += n
            pos += n
            if self.filled == self.rows:
                self._flush()

    def _flush(self) -> None:
        n = self.filled
        if n == 0:
            return
        block = self.buf[:n]
        torch = self.torch
        if self.precision == "float32" and block.dtype == np.float32:
            # Centred in place on the mean from the column sums already taken (rounded to float32; close, not
            # exact); what is left of the mean is then summed on the differences, where float32 is accurate.
            s = (self.block_sum / n).astype(np.float32)
            block -= s  # exact where rows are within 2x of s (Sterbenz), else one rounding of a difference
            offset = _column_sums(block) / n  # m_b - s
            m = s + offset
            x = torch.from_numpy(block).to(self.device) if torch is not None else block
        else:  # float64 rows or float64 products: centred in float64 on the block's float64 mean
            x = torch.from_numpy(block).to(self.device).double() if torch is not None else block.astype(np.float64)
            mx = x.mean(0)
            x -= mx
            m = mx.cpu().numpy() if torch is not None else mx
            offset = np.zeros_like(m)
            if self.precision == "float32":
                x = x.float() if torch is not None else x.astype(np.float32)
        if torch is not None:
            self.m2 += (x.T @ x).double()
        else:
            if self.gram is None or self.gram.dtype != x.dtype:
                self.gram = np.empty((self.width, self.width), dtype=x.dtype)
            np.matmul(x.T, x, out=self.gram)  # x.T @ x of one array: BLAS's syrk
            np.add(self.m2, self.gram, out=self.m2)
        self.counts.append(n)
        self.means.append(m)
        self.offsets.append(offset)
        self.filled = 0
        self.block_sum[:] = 0

    def result(self, mean: np.ndarray) -> np.ndarray:
        """M2 about `mean` (that of all rows), float64 on the CPU."""
        self._flush()
        m2 = self.m2.cpu().numpy() if self.torch is not None else self.m2
        w = np.sqrt(np.asarray(self.counts, dtype=np.float64))[:, None]
        between = w * (np.asarray(self.means) - mean)  # sqrt(n_b) (m_b - m)
        shifted = w * np.asarray(self.offsets)  # sqrt(n_b) (m_b - s_b): block b's product is about s_b
        # m2 + between.T @ between - shifted.T @ shifted, in one product and in place
        m2 += np.concatenate([between, shifted]).T @ np.concatenate([between, -shifted])
        return m2


def accumulate_stats(
    chunks: Iterable[np.ndarray], *, cov: bool, device="cpu", name: str = "matrix",
    strict: bool = True, precision: str | None = None,
) -> RowStats:
    """Stream row chunks (k_i, hidden) into the mean and, if asked, the covariance.

    Float64 chunks (F64 checkpoints) are summed in float64, as before. Float32 chunks (what
    `stream_rows` gives for BF16, F16 and F32, widened exactly) are summed in float32 over blocks
    of at most F32_SUM_ROWS rows (one block per `stream_rows` chunk when the chunk has at most
    that many rows: 256 rows of a 4096-wide bf16 matrix), and the block sums add up in float64.
    A float64 sum of float32 data goes through a buffered cast, a float32 sum is vectorized: about
    half the time of the statistics (bench/RESULTS.md).

    What stays exact: the row count `n`, which rows hold NaN or Inf (found by row number, see
    Raises), and float64 sums of F64 chunks. What is not: each float32 block sum is off by at most
    (F32_SUM_ROWS - 1) * 2**-24 ~= 1.5e-5 times the sum of that column's absolute values over the
    block (the bound of a recursive sum), so the mean is off by at most 1.5e-5 * mean(|x|) per
    column, plus the float64 rounding of the total (negligible). That is the worst case; rounding
    errors are not all of one sign, and on that bf16 matrix the mean moved by at most 2.2e-9 of
    the column's mean absolute value (3.7e-11 absolute) from the float64 sum's: the bf16 new rows
    are the same bits (bf16 keeps 8 significant bits), 330 of 4096 values would differ in the
    last bit of a float32 row. A block whose float32 sum overflows (finite values near float32's
    maximum) makes its chunk be summed again in float64, which cannot overflow: the mean stays
    finite and accurate. The result is deterministic: the same chunks give the same bits.

    The covariance is taken in blocks of rows, each centred on its own float64 mean, combined
    exactly in float64 (`_Scatter`): no cancellation whatever the rows' mean. `precision` is that
    of the block products: "float64" (default on CUDA, where FP64 matmul is fast) or "float32"
    (default on the CPU, several times faster); the two agree to ~1e-6 relative (see
    tests/init/test_strategies.py). On CUDA, blocks are streamed to the GPU one at a time.

    Raises:
        InputError: when a row holds NaN or Inf (it would poison every new row). With
            strict=False (strategies that do not average) such rows are left out with a warning.
    """
    cuda = _is_cuda(device)
    precision = precision or ("float64" if cuda else "float32")
    if precision not in ("float32", "float64"):
        raise ValueError(f"precision {precision!r}: float32 or float64")
    total = scatter = None
    n = seen = 0
    for chunk in chunks:
        chunk = np.asarray(chunk)
        if chunk.ndim != 2:
            chunk = chunk.reshape(chunk.shape[0], -1)
        # The column sums double as the NaN/Inf test: a NaN or Inf makes its column's sum non-finite.
        # So the per-row test (a full extra pass with a temporary mask) only runs on a bad chunk. A
        # float32 sum can also overflow to Inf on finite rows; then the chunk is summed in float64,
        # which cannot overflow on values in float32's range.
        with np.errstate(invalid="ignore", over="ignore"):  # a signalling NaN, an overflow: handled below
            part = _column_sums(chunk)
        rows = chunk.shape[0]
        if not np.isfinite(part).all():
            finite = np.isfinite(chunk).all(axis=1)
            if not finite.all():
                bad = int(np.flatnonzero(~finite)[0]) + seen
                if strict:
                    raise InputError(
                        f"tensor '{name}' row {bad} holds NaN or Inf; refusing to average it into new rows "
                        "(repair the checkpoint, or use --init zeros or random, which do not average)"
                    )
                logger.warning("tensor '%s': %d rows hold NaN or Inf (first: row %d); left out of the statistics",
                               name, int((~finite).sum()), bad)
                chunk = chunk[finite]
            part = chunk.sum(0, dtype=np.float64)
        seen += rows
        if chunk.shape[0] == 0:
            continue
        if total is None:
            total = np.zeros(chunk.shape[1], dtype=np.float64)
            if cov:
                torch = None
                if cuda:
                    import torch
                scatter = _Scatter(chunk.shape[1], chunk.dtype, precision, torch, device)
        total += part
        if cov:
            scatter.add(chunk, part)
        n += chunk.shape[0]
    if total is None or n == 0:
        raise InputError(f"tensor '{name}' has no rows to initialize from")
    mean = total / n
    c = None
    if cov:
        c = scatter.result(mean)
        c /= n
        c += c.T  # symmetric to the last bit (the rank-1 terms' product is not); numpy copies the overlapping c.T
        c *= 0.5
    return RowStats(n, mean, c)


def factor_covariance(cov: np.ndarray) -> tuple[np.ndarray, str]:
    """A factor F with F @ F.T == cov: Cholesky when positive definite, else a clamped eigendecomposition.

    Embedding covariances are often rank deficient (fewer rows than dimensions, duplicated or
    dead rows), where Cholesky fails; the eigen fallback clamps tiny negative eigenvalues to 0.
    """
    try:
        L = np.linalg.cholesky(cov)
        if np.isfinite(L).all():
            return L, "cholesky"
    except np.linalg.LinAlgError:
        pass
    w, V = np.linalg.eigh(cov)
    return V * np.sqrt(np.clip(w, 0, None)), "eigh"


@dataclass
class InitContext:
    """Everything a strategy may use. Rows are float64; the caller casts to the tensor's dtype.

    A strategy computes the rows [start, start + k) of a matrix's new rows: `NewRows` calls it
    block by block, so that k x hidden float64 never has to fit in memory at once.
    """

    k: int  # number of rows to compute (in this block)
    hidden: int
    stats: RowStats | None
    generator: np.random.Generator
    eps: float = DEFAULT_EPS
    initializer_range: float = 0.02
    pieces: list[list[int]] | None = None  # per new row: ids of its pieces under the old tokenizer
    rows_of: Callable[[list[int]], np.ndarray] | None = None  # ids -> (len, hidden) rows
    name: str = "matrix"
    start: int = 0  # index of the first row of this block among the new rows (into `pieces`)
    memo: dict = field(default_factory=dict)  # work shared by the blocks of one matrix (a factor)
    fitted: np.ndarray | None = None  # (new tokens, hidden): rows fitted by the model (`fitted.fit_rows`)


def zeros(ctx: InitContext) -> np.ndarray:
    return np.zeros((ctx.k, ctx.hidden))


def random(ctx: InitContext) -> np.ndarray:
    return ctx.generator.standard_normal((ctx.k, ctx.hidden)) * ctx.initializer_range


def mean(ctx: InitContext) -> np.ndarray:
    return np.tile(ctx.stats.mean, (ctx.k, 1))


def prepare_mean_noise(stats: RowStats, eps: float, name: str = "matrix") -> dict:
    """mean-noise's work shared by every block of one matrix (`InitContext.memo`): the factor of eps * Sigma,
    an O(hidden^3) factorization. It needs the statistics and eps, not the tokens, so `add` computes it
    beside the planning (`Strategy.prepare`)."""
    factor, how = factor_covariance(stats.cov * eps)
    logger.info("%s: covariance factored by %s", name, how)
    return {"factor": factor}


def mean_noise(ctx: InitContext) -> np.ndarray:
    if "factor" not in ctx.memo:  # once per matrix, not per block
        ctx.memo.update(prepare_mean_noise(ctx.stats, ctx.eps, ctx.name))
    # Noise comes from the seeded CPU generator, so results do not depend on the device.
    z = ctx.generator.standard_normal((ctx.k, ctx.hidden))
    return ctx.stats.mean + z @ ctx.memo["factor"].T


def pieces_mean(rows_of: Callable[[list[int]], np.ndarray], pieces: list, default: np.ndarray) -> np.ndarray:
    """(len(pieces), hidden) float64: each token's mean of its pieces' rows (`rows_of(ids)`), or `default`
    for a token without pieces (a padding row, a special token). The sub-word mean, wherever it is taken."""
    out = np.empty((len(pieces), len(default)))
    for i, ids in enumerate(pieces):
        out[i] = rows_of(list(ids)).astype(np.float64).mean(0) if ids else default
    return out


def subword_mean(ctx: InitContext) -> np.ndarray:
    pieces = ctx.pieces[ctx.start:ctx.start + ctx.k] if ctx.pieces is not None else [[]] * ctx.k
    return pieces_mean(ctx.rows_of, pieces, ctx.stats.mean)


def fitted(ctx: InitContext) -> np.ndarray:
    # The rows were fitted beforehand from the model's forward passes (see fitted/causal.py); padding rows
    # are not asked for here (NewRows gives them the mean).
    return np.asarray(ctx.fitted[ctx.start:ctx.start + ctx.k], dtype=np.float64)


def subword_mean_shrunk(ctx: InitContext) -> np.ndarray:
    # Output rows (the shared row when tied) were shrunk beforehand by the model (fitted/shrunk.py); input rows of
    # an untied model never touch old text and are the plain sub-word mean.
    return subword_mean(ctx) if ctx.fitted is None else fitted(ctx)


@dataclass(frozen=True)
class Strategy:
    name: str
    fn: Callable[[InitContext], np.ndarray]
    needs_cov: bool
    help: str
    averages: bool = True  # uses the old rows' values (so NaN/Inf rows are an error)
    constant: bool = False  # every row is the same: computed and encoded once, its bytes repeated
    needs_model: bool = False  # runs the model (fitted.fit_rows, fitted.shrink_rows) before the rows are computed
    model_roles: tuple[str, ...] = ("input", "output")  # with needs_model: the roles whose rows the model gives
    # What an untied model's input rows get instead when "input" is not in model_roles (their init, as recorded)
    untied_input: str | None = None
    brief: str = ""  # `add --help`'s line (lines) for it; strategies with the same brief share one
    # (stats, eps, name) -> the memo of its matrix (`InitContext.memo`): work that depends on the old rows'
    # statistics and the options only, done once per matrix, before the tokens are known when `add` can
    prepare: Callable[[RowStats, float, str], dict] | None = None


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy("mean", mean, False,
                 "the mean of the old rows; bounds KL(p_old||p_new) <= log(1 + k/n) for every prefix",
                 constant=True, brief="mean of the old rows; KL(p_old||p_new) <= log(1 + k/n)"),
        Strategy("mean-noise", mean_noise, True,
                 "N(mu, eps*Sigma), Sigma the old rows' covariance (Hewitt); rows differ, KL stays near the bound",
                 brief="N(mu, eps*Sigma), Sigma the rows' covariance (GPU when present)", prepare=prepare_mean_noise),
        Strategy("subword-mean", subword_mean, False,
                 "the mean of the rows of the word's pieces under the original tokenizer (FVT)",
                 brief="mean of the rows of the word's pieces under the old tokenizer"),
        Strategy("subword-mean-shrunk", subword_mean_shrunk, False,
                 "the sub-word mean, its output rows (the shared row when tied) shrunk toward the mean row until the "
                 "held-out old-text KL meets fitted's limits (see fitted/shrunk.py); input rows the sub-word mean",
                 needs_model=True, model_roles=("output",), untied_input="subword-mean",
                 brief="the sub-word mean, output rows shrunk toward the mean row\n"
                       "until old text keeps its KL limit (runs the model once)"),
        Strategy("fitted", fitted, False,
                 "fitted from forward passes of the frozen model: output rows by a convex, KL-penalized fit "
                 "shrunk to the mean-init KL bound, input rows by distillation (see fitted/causal.py)", needs_model=True,
                 brief="fitted by the frozen model on contexts (--fit-corpus, else generated):\n"
                       "output rows convex and KL-penalized, input rows distilled"),
        Strategy("zeros", zeros, False,
                 "all zeros: logit 0, dangerous when the model's logits are large and negative", averages=False,
                 constant=True, brief="the transformers defaults; dangerous on some models"),
        Strategy("random", random, False,
                 "N(0, initializer_range), what transformers does by default; as risky as zeros", averages=False,
                 brief="the transformers defaults; dangerous on some models"),
    )
}


def strategies_help(indent: str = "  ", width: int = 14, default: str = "mean") -> str:
    """The strategies, one line each (`add --help`); those with the same brief share a line, the `default` one
    says so, and a name longer than the column has its own line.

        >>> print(strategies_help().splitlines()[-1])
          zeros, random the transformers defaults; dangerous on some models
    """
    by_brief: dict[str, list[str]] = {}
    for s in STRATEGIES.values():
        by_brief.setdefault(s.brief + (" (default)" if s.name == default else ""), []).append(s.name)
    lines = []
    for brief, names in by_brief.items():
        first, *more = brief.split("\n")
        if first.endswith(" (default)") and more:  # the mark ends the brief's last line
            first, more[-1] = first[:-len(" (default)")], more[-1] + " (default)"
        label = ", ".join(names)
        if len(label) >= width:
            lines.append(f"{indent}{label}")
            more = [first, *more]
        else:
            lines.append(f"{indent}{label:<{width - 1}} {first}")
        lines += [f"{indent}{'':<{width}}{line}" for line in more]
    return "\n".join(lines)


def get_strategy(name: str) -> Strategy:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise InputError(f"unknown init strategy {name!r}; choose one of {', '.join(STRATEGIES)}") from None


BLOCK_BYTES = 16 << 20  # float64 rows computed and encoded at a time: memory O(block), not O(k x hidden)


@dataclass
class NewRows:
    """The k new rows of one matrix, described, not materialized: the first `from_strategy` rows
    come from `strategy`, the rest (padding, never reachable from the tokenizer) repeat `fill`.

    Rows are produced block by block, and every pass gives the same values (the generator is
    re-seeded from `seed`), so the rows of a tied alias are those of its matrix.
    """

    k: int
    hidden: int
    strategy: Strategy | None  # None: every row is `fill`
    ctx: InitContext | None  # the strategy's context; its k and start are set per block
    seed: int
    fill: np.ndarray  # (hidden,) float64
    from_strategy: int = 0

    @classmethod
    def constant(cls, row: np.ndarray, k: int) -> "NewRows":
        row = np.asarray(row, dtype=np.float64)
        return cls(k, row.shape[0], None, None, 0, row)

    def _segments(self) -> list[tuple[int, np.ndarray | None]]:
        """(rows, constant row or None for computed rows), in order."""
        segs: list[tuple[int, np.ndarray | None]] = []
        n = self.from_strategy if self.strategy is not None else 0
        if n:
            if self.strategy.constant:
                ctx = replace(self.ctx, k=1, start=0, generator=np.random.default_rng(self.seed))
                segs.append((n, np.asarray(self.strategy.fn(ctx), dtype=np.float64)[0]))
            else:
                segs.append((n, None))
        if self.k > n:
            segs.append((self.k - n, self.fill))
        return segs

    def blocks(self, block_rows: int | None = None) -> Iterator[np.ndarray]:
        """The rows in order, as float64 blocks of at most `block_rows` rows (constant rows as
        read-only broadcast views)."""
        for _, _, block in self._blocks(block_rows):
            yield block

    def _blocks(self, block_rows: int | None) -> Iterator[tuple[int, bool, np.ndarray]]:
        """(segment number, whether its rows are constant, block), in row order."""
        step = block_rows or max(1, BLOCK_BYTES // (8 * max(1, self.hidden)))
        ctx = None
        for seg, (count, row) in enumerate(self._segments()):
            for s in range(0, count, step):
                n = min(step, count - s)
                if row is not None:
                    yield seg, True, np.broadcast_to(row, (n, self.hidden))
                    continue
                if ctx is None:  # one generator per pass, drawn from in row order
                    ctx = replace(self.ctx, generator=np.random.default_rng(self.seed))
                yield seg, False, np.asarray(self.strategy.fn(replace(ctx, k=n, start=s)), dtype=np.float64)

    def array(self) -> np.ndarray:
        """All k rows as one (k, hidden) float64 array: for tests and small k only."""
        return np.concatenate([np.asarray(b) for b in self.blocks()]) if self.k else np.zeros((0, self.hidden))

    def encoded(self, dtype: str, start: int = 0, stop: int | None = None,
                block_rows: int | None = None) -> "EncodedRows":
        """Rows [start, stop) (default: to the end) in the bytes of `dtype`, produced lazily block by block."""
        return EncodedRows(self, dtype, start, stop, block_rows)


class EncodedRows:
    """Bytes of rows [start, stop) of `NewRows` in a safetensors dtype: `len()` is known up front,
    iterating yields the bytes block by block (what `writer.write_rows` writes), and a constant
    row is encoded once and its bytes repeated, so mean and padding rows cost no arithmetic."""

    def __init__(self, rows: NewRows, dtype: str, start: int = 0, stop: int | None = None,
                 block_rows: int | None = None):
        if dtype not in ("F16", "BF16", "F32", "F64"):
            encode_rows(np.zeros((0, rows.hidden)), dtype)  # raises the InputError
        self.rows, self.dtype = rows, dtype
        self.stop = rows.k if stop is None else min(stop, rows.k)
        self.start = min(start, self.stop)
        self.block_rows = block_rows or max(1, BLOCK_BYTES // (8 * max(1, rows.hidden)))
        self.row_bytes = rows.hidden * DTYPE_SIZES[dtype]

    def __len__(self) -> int:
        return (self.stop - self.start) * self.row_bytes

    def __iter__(self) -> Iterator[bytes]:
        pos = 0  # index of the next row of self.rows
        encoded: dict[int, bytes] = {}  # one encoded copy of each constant row, by segment
        if self.start == self.stop:
            return
        for seg, constant, block in self.rows._blocks(self.block_rows):
            lo, hi = max(0, self.start - pos), min(block.shape[0], self.stop - pos)
            pos += block.shape[0]
            if lo < hi:  # rows before `start` are computed anyway: the generator runs in row order
                if constant:
                    if seg not in encoded:
                        encoded[seg] = encode_rows(block[:1], self.dtype)
                    yield encoded[seg] * (hi - lo)
                else:
                    yield encode_rows(block[lo:hi], self.dtype)
            if pos >= self.stop:
                return

    def tobytes(self) -> bytes:
        return b"".join(self)
