"""What the fits of `--init fitted` share, causal (causal.py) and encoder (encoder.py) alike.

The new tokens as the fits see them, the options and the result, the windows of old ids with the
runs of pieces that become new tokens, the fit corpus, and the Adam loop of the input-row
distillation (passes over the windows, held-out windows decide which pass's rows are kept). Each
fit brings its own loss. The library never prints: progress goes to a callback.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ...progress import Steps
from ..strategies import pieces_mean
from ...corpus import read_text

logger = logging.getLogger(__name__)

# The held-out old-text KL's 99th percentile the fits keep (nats; at least the mean limit): the figure
# the causal defaults were chosen to keep on the fixtures. The mean's limit is --fit-kl-limit, by
# default the mean-init bound log(1 + k/n).
OUTPUT_STARTS = ("mean", "subword-mean", "first-piece")  # priors of fitted output rows (output_prior)
ENCODER_WINDOW = 128  # tokens per encoder context at most (a sentence; capped by the model's positions)
LENGTH_BUCKET = 8  # batches sorted by length together (length_batches)
FIT_KL_P99 = 0.05

# The output fit's old-text weight (see causal.py: DEFAULT_L2 and the grid it was chosen on).
DEFAULT_OLD_TEXT_WEIGHT = 16.0
SMALL_HIDDEN = 256  # narrower models run single-threaded on the CPU (see narrow_threads)


@dataclass(frozen=True)
class FitToken:
    """One new token as fitting sees it: the text it stands for and its pieces under the old tokenizer."""

    form: str
    pieces: tuple[int, ...]


@dataclass
class FitOptions:
    """Bounds and knobs of the fit; the CLI's --fit-* flags map one to one."""

    corpus: str | None = None  # text that uses the words; None: generated contexts
    contexts_per_word: int = 8  # windows per new token, at most
    # Tokens per window around an occurrence (capped by the model's positions): as good as longer windows
    # at a fraction of the time; the forward pass over the contexts is most of a kept-tied fit (bench/RESULTS.md).
    context_tokens: int = 32
    # Positions of all corpus windows, at most (None: no limit): beyond, fewer windows per word (at least one).
    # The model's pass over the windows is most of a fit's time; at 100 words every word keeps contexts_per_word.
    context_budget: int | None = 2**16
    input_steps: int | None = None  # Adam steps of the input distillation, at most (None: `passes` decide)
    # Passes over the windows, at most; a pass that gains < 1% on held-out windows stops it. None: on a
    # causal LM 6 through the first layers (fitted.DEPTH_PASSES), 3 through all of them (`depth` 1: a
    # pass is a forward and backward over every window, minutes on a real model); 10 on an encoder
    # (sentences through a small model; see encoder.ENCODER_PASSES).
    passes: int | None = None
    # Share of a causal model's layers after which distillation matches hidden states (None:
    # fitted.DISTILL_DEPTH; 1: the last hidden state, every layer run at every step).
    depth: float | None = None
    output_steps: int = 100  # L-BFGS iterations of the output fit
    batch_size: int = 8  # windows per distillation step
    lr: float = 0.1  # Adam step, relative to the rms of the old input rows
    l2: float | None = None  # weight of the L2 prior toward the start row (sum objective, logit units); None: DEFAULT_L2
    # Mass the ideal puts on a new token where its word follows: "corpus" = 1 (the corpus is right:
    # maximum likelihood of the new tokenization), "model" = p_old(pieces | prefix) (the old model is
    # right); default: corpus with a corpus, model for generated contexts.
    target: str | None = None
    # Prior of the output rows: "mean" (keeps the KL near the mean-init bound), "subword-mean"
    # (a tied row must also serve as input: it stays near the pieces' mean, which reads well) or
    # "first-piece" (the new token predicts like the piece it replaces at the word's start).
    output_start: str = "subword-mean"
    kl_limit: float | None = None  # held-out old-text KL mean the output rows are shrunk to; None: log(1 + k/n)
    old_text_tokens: int = 2048  # positions of packaged old text in the output objective (and as many held out)
    old_text_weight: float = DEFAULT_OLD_TEXT_WEIGHT  # weight of those positions' KL (the contexts' weigh 1)
    seed: int = 0
    device: str = "cpu"
    dtype: str = "auto"  # what the model runs in (devices.DTYPES); the rows are fitted in float32/float64 anyway
    generated_tokens: int = 48  # generated contexts: tokens sampled after each prompt
    prompts_per_word: int = 4
    # The output tokenizer's ids of each fit-corpus paragraph, new token j written as -1 - j (None: the new
    # tokens are found by longest match, as added words match). `extend` passes it: its new tokens are pieces
    # that merges make, and the longest match would give contexts the tokenizer never writes (`segmented_runs`).
    segment: Callable[[list[str]], list[list[int]]] | None = None


@dataclass
class FitResult:
    """Fitted rows, (k, hidden) float64 in the order of the tokens given, and what was done."""

    input_rows: np.ndarray | None
    output_rows: np.ndarray | None
    report: dict = field(default_factory=dict)
    bias: np.ndarray | None = None  # (k,) the new entries of the output bias; None: the mean bias


@dataclass
class Run:
    """An occurrence of a new token in a window: old ids [start, start + length) become token j."""

    start: int
    length: int
    j: int


@dataclass
class Window:
    """One context: ids under the old tokenizer, the runs of pieces that become new tokens, and
    the ids the new tokenizer gives (a new token j as n_old + j)."""

    old: list[int]
    runs: list[Run]

    def new_ids(self, n_old: int) -> list[int]:
        out, i = [], 0
        for r in self.runs:
            out += self.old[i:r.start] + [n_old + r.j]
            i = r.start + r.length
        return out + self.old[i:]

    def aligned(self) -> tuple[list[int], list[int]]:
        """(old positions, new positions) whose outputs should agree, from the first new token on:
        the new token's position matches its last piece's, and piece-interior positions have no match."""
        olds, news = [], []
        if not self.runs:
            return olds, news
        shift, ri = 0, 0
        for i in range(self.runs[0].start, len(self.old)):
            while ri < len(self.runs) and i >= self.runs[ri].start + self.runs[ri].length:
                shift += self.runs[ri].length - 1
                ri += 1
            if ri < len(self.runs) and i >= self.runs[ri].start:
                r = self.runs[ri]
                if i != r.start + r.length - 1:
                    continue  # inside the word: no new position reads these pieces
                olds.append(i)
                news.append(r.start - shift)
                continue
            olds.append(i)
            news.append(i - shift)
        return olds, news


def find_runs(ids: list[int], tokens: list[FitToken]) -> list[Run]:
    """Left to right, the longest new token whose pieces start at each position (as added tokens
    match: a word inside a longer one is replaced too)."""
    by_first: dict[int, list[tuple[tuple[int, ...], int]]] = {}
    for j, t in enumerate(tokens):
        if t.pieces:
            by_first.setdefault(t.pieces[0], []).append((t.pieces, j))
    for cands in by_first.values():
        cands.sort(key=lambda c: -len(c[0]))
    runs, i = [], 0
    while i < len(ids):
        for pieces, j in by_first.get(ids[i], ()):
            if tuple(ids[i:i + len(pieces)]) == pieces:
                runs.append(Run(i, len(pieces), j))
                i += len(pieces)
                break
        else:
            i += 1
    return runs


def segmented_runs(ids: list[int], segmented: list[int], tokens: list[FitToken]) -> list[Run] | None:
    """The runs that turn old `ids` into `segmented` (the output tokenizer's ids of the same text, new token j
    written as -1 - j): each new token takes its pieces where they stand. None where `segmented` is not `ids`
    with runs of pieces joined (then the caller falls back to `find_runs`)."""
    runs, i = [], 0
    for x in segmented:
        if x >= 0:
            if i >= len(ids) or ids[i] != x:
                return None
            i += 1
            continue
        j = -1 - x
        p = tokens[j].pieces
        if not p or tuple(ids[i:i + len(p)]) != p:
            return None
        runs.append(Run(i, len(p), j))
        i += len(p)
    return runs if i == len(ids) else None


def pad_batch(seqs: list[list[int]], pad: int, device):
    import torch

    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), T), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        mask[i, :len(s)] = 1
    return ids.to(device), mask.to(device)


def lbfgs(params: list, objective, steps: int, say: Steps, stage: str, rel_change: float = 0.0) -> int:
    """Minimize the convex `objective()` (a scalar tensor of `params`) by L-BFGS with a strong-Wolfe line
    search, at most `steps` iterations (0: none), reporting to `say` as `stage`. Returns the evaluations.
    With `rel_change`, it stops once an iteration changes the objective by less than that share of
    the objective at the start. The new-logit fits (causal output rows, masked-LM head) both run through here."""
    import torch

    calls = 0
    if steps > 0:
        change = 1e-12
        if rel_change > 0:
            with torch.no_grad():
                change = max(change, rel_change * abs(float(objective())))
        opt = torch.optim.LBFGS(params, lr=1.0, max_iter=steps, history_size=20, line_search_fn="strong_wolfe",
                                tolerance_grad=1e-10, tolerance_change=change)

        def closure():
            nonlocal calls
            opt.zero_grad()
            obj = objective()
            obj.backward()
            calls += 1
            say(stage, min(calls, steps), steps)
            return obj

        opt.step(closure)
    say(stage, steps, steps)  # converged, possibly before the last iteration
    return calls


def bisect(ok, good: float, bad: float, iters: int, tol: float = 0.0) -> float:
    """The end of [good, bad] (either order) that meets `ok`, narrowed by bisection: `ok(good)` holds, `ok(bad)`
    does not. Monotony is not assumed: each step keeps one end that meets and one that does not.

        >>> round(bisect(lambda x: x * x <= 2, good=0.0, bad=2.0, iters=40), 6)
        1.414214
    """
    for _ in range(iters):
        if abs(bad - good) < tol:
            break
        mid = (good + bad) / 2
        good, bad = (mid, bad) if ok(mid) else (good, mid)
    return good


def embedding_read(embedding, rows):
    """(..., hidden) what the model reads for `rows` (..., hidden) of its input embedding's weight: the
    embedding module's own forward, run with those rows as its weight.

    `inputs_embeds` enters the model after that module, so rows given there must go through it
    first: Gemma's embedding multiplies by sqrt(hidden) in its forward, and a row passed as it is
    on disk reads 1/sqrt(hidden) too small. A plain `nn.Embedding` gives the rows back unchanged.
    """
    import torch

    flat = rows.reshape(-1, rows.shape[-1])
    slots = torch.arange(flat.shape[0], device=flat.device)
    pad = getattr(embedding, "padding_idx", None)
    # padding_idx only zeroes that row's gradient, and may lie past these rows: none here
    try:
        if pad is not None:
            embedding.padding_idx = None
        out = torch.func.functional_call(embedding, {"weight": flat}, (slots,))
    finally:
        if pad is not None:
            embedding.padding_idx = pad
    return out.reshape(*rows.shape[:-1], out.shape[-1])


def new_token_embeds(embedding, ids, R):
    """(B, T, hidden) the `inputs_embeds` of ids (B, T) whose ids from n on (n: the embedding's rows)
    are new tokens read as the rows R (k, hidden): what the model computes from ids once R is
    appended to its embedding (`embedding_read`).

    Only the new tokens' positions read R, through a one-hot product over those positions: the
    backward of R[index] accumulates in a thread-dependent order (rows differed in the last bits from
    run to run), and a product over every position would let a non-finite gradient at any old
    position reach every row (0 * inf)."""
    import torch

    E = embedding.weight.detach()
    n = E.shape[0]
    emb = E[ids.clamp(max=n - 1)]
    where = (ids >= n).nonzero(as_tuple=True)
    if where[0].numel():
        pick = torch.nn.functional.one_hot(ids[where] - n, R.shape[0]).to(R.dtype)  # (new positions, k)
        emb = emb.index_put(where, (pick @ R).to(emb.dtype))
    return embedding_read(embedding, emb)


def read_fit_corpus(path: str) -> tuple[str, str]:
    """The fit corpus's text and the sha256 of its bytes.

    Raises:
        InputError: the file cannot be read or is not UTF-8.
    """
    return read_text(path, "fit corpus", "--fit-corpus")


def adam_passes(start, scale: float, usable: list[int], batch_loss, steps: int | None, batch: int, lr: float,
                seed: int, say: Steps, passes: int = 3, device=None, lengths: list[int] | None = None):
    """New rows by Adam from `start`, minimizing `batch_loss(window indices, R)` over the `usable` windows.

    Passes over the windows in a seeded order (at most `passes`, and at most `steps` steps when
    given), `batch` windows a step, step size `lr * scale` (scale: the rms of the old rows). With
    `lengths` (the positions each window's step computes), batches hold windows of similar length
    (`length_batches`). Every
    8th usable window (when 16 or more) is held out: after each pass its loss decides, the rows of
    the best pass are kept, and the run stops when a pass improves it by less than 1%. A step whose
    loss or gradient is not finite is skipped (counted); a row that ends non-finite keeps `start`.

    Returns:
        (rows (k, hidden) float64 on the CPU, a report: steps, passes, held-out loss per pass, skipped steps).
    """
    import torch

    R = start.clone().float().to(device or "cpu").requires_grad_(True)
    opt = torch.optim.Adam([R], lr=lr * scale)
    report = {"steps": 0, "passes": 0, "held_out_windows": 0, "held_out_loss": [], "final_loss": None,
              "skipped_steps": 0}
    if not usable or steps == 0:
        return R.detach().double().cpu(), report
    held = usable[::8] if len(usable) >= 16 else []
    out = set(held)
    train = [i for i in usable if i not in out]
    if lengths is not None:  # the held-out loss is a sum: evaluated in length order, it pads least
        held.sort(key=lambda i: lengths[i])
    per_pass = -(-len(train) // batch)
    total = passes * per_pass if steps is None else min(steps, passes * per_pass)
    rng = np.random.default_rng(seed)

    def held_loss() -> float:
        with torch.no_grad():
            return float(sum(float(batch_loss(held[s:s + batch], R)) * len(held[s:s + batch])
                             for s in range(0, len(held), batch)) / len(held))

    best = held_loss() if held else None
    best_R = R.detach().clone()
    if held:
        report["held_out_loss"].append(best)
    report["held_out_windows"] = len(held)
    step = 0
    while step < total:
        for part in length_batches(list(rng.permutation(train)), batch, lengths, rng):
            if step >= total:
                break
            loss = batch_loss(part, R)
            opt.zero_grad()
            loss.backward()
            if torch.isfinite(loss) and torch.isfinite(R.grad).all():
                opt.step()
                report["final_loss"] = float(loss.detach())
            else:  # an overflow in this batch: skip it rather than poison the rows
                report["skipped_steps"] += 1
            step += 1
            say("input rows", step, total)
        report["passes"] += 1
        if not held:
            best_R = R.detach().clone()
            continue
        now = held_loss()
        report["held_out_loss"].append(now)
        if now < best:
            best_R, gain, best = R.detach().clone(), (best - now) / best, now
            if gain >= 0.01:
                continue
        break  # converged (or worse): the best pass's rows stand
    say("input rows", total, total)
    report["steps"] = step
    if report["skipped_steps"]:
        logger.warning("input distillation: %d of %d steps skipped (non-finite loss or gradient)",
                       report["skipped_steps"], step)
    rows = best_R.double().cpu()
    bad = ~torch.isfinite(rows).all(1)
    if bad.any():  # never write a non-finite row: keep the start (the sub-word mean) for those
        logger.warning("input distillation: %d row(s) not finite; they keep the sub-word mean", int(bad.sum()))
        rows[bad] = start.double().cpu()[bad]
    return rows, report


def length_batches(order: list[int], batch: int, lengths: list[int] | None, rng) -> list[list[int]]:
    """`order` (windows in a random order) cut into batches of `batch`; with `lengths`, each run of
    `LENGTH_BUCKET` batches is sorted by length first and the batches are shuffled (`rng`), so a
    batch holds windows of similar length. A batch pads every window to its longest, and padding
    costs as much as real positions."""
    if lengths is None:
        return [order[s:s + batch] for s in range(0, len(order), batch)]
    span = batch * LENGTH_BUCKET
    out = []
    for s in range(0, len(order), span):
        run = sorted(order[s:s + span], key=lambda i: lengths[i])
        out += [run[t:t + batch] for t in range(0, len(run), batch)]
    return [out[i] for i in rng.permutation(len(out))]


def output_prior(start: str, W, tokens: list[FitToken]):
    """(k, hidden) float64 rows the output fit starts from and is pulled toward (one of OUTPUT_STARTS)."""
    import torch

    W64 = W.double().cpu()
    mean = W64.mean(0)
    if start == "mean" or not tokens:
        return mean.expand(len(tokens), W64.shape[1]).clone()
    if start == "first-piece":
        return torch.stack([W64[t.pieces[0]] if t.pieces else mean for t in tokens])
    return subword_mean(W64, tokens)


def subword_mean(E, tokens: list[FitToken]):
    """(k, hidden) float64: each token's mean of its pieces' rows of E (the mean row for a token without pieces)."""
    import torch

    E64 = E.detach().double().cpu().numpy()
    rows = pieces_mean(lambda ids: E64[ids], [t.pieces for t in tokens], E64.mean(0))
    return torch.from_numpy(rows)


@contextlib.contextmanager
def narrow_threads(device, hidden: int):
    """One torch thread while fitting a model narrower than SMALL_HIDDEN on the CPU, then as before.

    Matrices this narrow gain nothing from intra-op threads, and on a busy machine the OpenMP
    spin-waits cost many times the work itself."""
    import torch

    threads = torch.get_num_threads()
    if getattr(device, "type", str(device)) == "cpu" and hidden < SMALL_HIDDEN:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def contexts_found(windows: list[Window], tokens: list[FitToken], stays_at: str) -> dict:
    """How many contexts the tokens got (the report's `contexts` figures); warns about tokens with none,
    whose rows stay at their starting point (`stays_at` names it)."""
    occurrences = [0] * len(tokens)
    for w in windows:
        for r in w.runs:
            occurrences[r.j] += 1
    missing = [t.form for t, c in zip(tokens, occurrences) if c == 0 and t.pieces]
    if missing:
        seen = {t.form for t, c in zip(tokens, occurrences) if c}
        logger.warning("%d new token(s) never occur in the contexts, e.g. %s: their rows stay at %s",
                       len(missing), form_in_words(missing[0], seen), stays_at)
    return {"windows": len(windows), "occurrences": sum(occurrences), "tokens_without_context": missing[:20],
            "n_tokens_without_context": len(missing)}


def form_in_words(form: str, seen: set[str]) -> str:
    """A new token's form as a message names it: which of a word's two forms it is, and whether the other
    one occurs (a word the corpus has may lack only its bare form: 'Gandalf' at a text start)."""
    word = form.strip()
    if form != word:
        what, other = f"the word-start form {form!r} (after a space)", word
    else:
        what, other = f"the bare form {form!r} (at a text start or after punctuation)", " " + word
    return what + (f"; its form {other!r} occurs" if other in seen else "")

