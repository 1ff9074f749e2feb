"""The fitted init on causal LMs: input rows by distillation, output rows by a convex new-logit fit.

Over 500 lines: the distillation and the output fit share their windows, model and budget.

Output rows minimise the cross-entropy against the old distribution with each word's spelling probability
moved onto its new token (convex; L-BFGS), then are shrunk toward the mean row until the held-out old-text
KL meets its limit (`shrink_to_limit`). Input rows are distilled (`distill.py`) on the hidden states after
the first layers (`layer_tap.py`). The frozen model runs over the contexts once (`_teach`). The method in
full: docs/internals.md.
"""

from __future__ import annotations

from bisect import bisect_left
import contextlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...progress import Steps
from ...errors import InputError
from .common import (  # noqa: F401  (FitResult, Run, find_runs: the fitting API, importable from here)
    FIT_KL_P99,
    contexts_found,
    DEFAULT_OLD_TEXT_WEIGHT,
    FitOptions,
    FitResult,
    FitToken,
    OUTPUT_STARTS,
    bisect,
    lbfgs,
    Run,
    Window,
    find_runs,
    narrow_threads,
    output_prior,
    pad_batch,
    read_fit_corpus,
    segmented_runs,
    subword_mean,
)
from ...kl import kl_added_mass, kl_bound, kl_figures, meets_limits
from ...corpus import paragraphs, read_corpus
from ...runtime import LoadedModel, ModelKind, context_length, encode, load_tokenizer, loaded_model
from .distill import distill_input_rows
from .layer_tap import layers_for
from ...tokenizer.chats import chat_samples

logger = logging.getLogger(__name__)

# The output fit's L2 weight: the value that keeps held-out old-text KL within its limits on every fixture, tied
# and untied; `--fit-l2 0.03` trades that margin for bits per byte (bench/RESULTS.md, "The output fit's L2 weight").
DEFAULT_L2 = 0.3
CAUSAL_PASSES = 3  # distillation passes over the windows, at most, unless FitOptions.passes says
# Distillation matches the hidden states after this share of a causal model's layers (FitOptions.depth;
# layer_tap.py), in at most DEPTH_PASSES passes (a pass costs that share of one over all layers).
# Matched after the first fifth, the rows' held-out loss at the last layer is about that of matching
# there, in a fraction of the time (bench/RESULTS.md).
DISTILL_DEPTH = 0.2
# (position, new token) pairs in the output fit's KL term over the contexts, at most: beyond, its positions
# where no new word follows are a weighted sample (`sample_positions`); at 100 words every one stays.
OUTPUT_PAIRS = 2**23
MIN_SAMPLED = 2048  # sampled context positions, at least
# The output fit stops when an L-BFGS iteration changes its objective by less than this share: its
# iterations after that move the rows by less than they differ from run to run (bench/RESULTS.md).
OUTPUT_REL_CHANGE = 1e-9
BATCH_LOGITS_BYTES = 2**28  # a teacher batch's logits are computed in products at most this large
TEACH_TOKENS = 2048  # positions (padded) per batch of the frozen model's pass, beyond its `batch` windows
DEPTH_PASSES = 6

GENERATE_BATCH = 128  # prompts sampled together (generated contexts)
# Prompts of generated contexts; "{}" is the form (" Frodo" carries its space)
BARE_PROMPTS = ("{}", "\"{}", "{} is", "({}")
SPACE_PROMPTS = ("The{}", "It was{}", "We talked about{}", "I saw{}")


def word_windows(text: str, tok, prefix: list[int], tokens: list[FitToken], length: int,
                 per_token: int) -> list[Window]:
    """Windows of at most `length` tokens around the occurrences of new tokens in the paragraphs of
    `text`, in corpus order: each ends a quarter of `length` after an occurrence (the positions that
    follow it, which distillation matches) and starts as far before it as the length allows (its
    context). An occurrence whose token already has `per_token` windows, or that an earlier window
    holds, adds none. Each window starts with `prefix` (the model's sequence start)."""
    return budget_windows(text, tok, prefix, tokens, length, per_token, None)[0]


def budget_windows(text: str, tok, prefix: list[int], tokens: list[FitToken], length: int, per_token: int,
                   budget: int | None, segment=None) -> tuple[list[Window], int]:
    """`word_windows` with at most `budget` positions in all (None: no limit): the most windows per token,
    at most `per_token` and at least 1, whose windows fit; and that number. The model's pass over the
    windows is most of a fit's time, and it grows with the words times the windows per word.

    `segment` (`FitOptions.segment`): the output tokenizer's segmentation of the paragraphs; each window
    then holds the new tokens that tokenizer writes there (`segmented_runs`), not the longest match."""
    texts = paragraphs(text) if text.strip() else []
    paras = [list(ids) for ids in tok(texts, add_special_tokens=False, padding=False, truncation=False,
                                      verbose=False).input_ids] if texts else []
    if segment is not None and paras:
        found = [segmented_runs(ids, seg, tokens) for ids, seg in zip(paras, segment(texts))]
        missed = sum(f is None for f in found)
        if missed:  # the output's ids are not the old ones joined (never for `extend`'s merges): longest match
            logger.info("%d of %d paragraph(s) of the fit corpus: new tokens found by longest match", missed, len(paras))
        found = [find_runs(ids, tokens) if f is None else f for ids, f in zip(paras, found)]
    else:
        found = [find_runs(ids, tokens) for ids in paras]
    for per in range(per_token, 0, -1):
        out = _windows_of(paras, found, prefix, tokens, length, per, exact=segment is not None)
        if budget is None or sum(len(w.old) for w in out) <= budget or per == 1:
            break
    _say_fewer("windows", per, per_token, len(tokens), budget)
    return out, per


def _say_fewer(what: str, per: int, most: int, k: int, budget: int | None) -> None:
    if per < most:
        logger.info("%d %s per new token (of %d): the windows of %d tokens fit %d positions", per, what, most, k, budget)


def _windows_of(paras: list[list[int]], found: list[list[Run]], prefix: list[int], tokens: list[FitToken],
                length: int, per_token: int, exact: bool = False) -> list[Window]:
    span = max(2, length - len(prefix))
    after = span // 4
    counts = [0] * len(tokens)
    out = []
    for ids, runs in zip(paras, found):
        starts = [q.start for q in runs]  # in order: find_runs and segmented_runs go left to right
        covered = 0  # paragraph ids before this are in the last window taken
        for r in runs:
            if counts[r.j] >= per_token or r.start + r.length <= covered:
                continue
            end = min(len(ids), r.start + r.length + after)
            start = max(0, end - span)
            if start > r.start:  # a word longer than the window: skip it
                continue
            w = Window(prefix + ids[start:end], [])
            if exact:  # the paragraph's own runs that the window holds whole (a word cut at its start stays pieces)
                held = runs[bisect_left(starts, start):bisect_left(starts, end)]
                w.runs = [Run(q.start - start + len(prefix), q.length, q.j) for q in held if q.start + q.length <= end]
            else:
                w.runs = find_runs(w.old, tokens)
            out.append(w)
            covered = end
            for q in w.runs:
                counts[q.j] += 1
    return out


class _Model:
    """The frozen causal LM, loaded by runtime.loaded_model: hidden states (the output layer's input),
    the old output rows, and what each window starts with."""

    def __init__(self, lm: LoadedModel, tok, init: str = "fitted"):
        self.init = init  # the --init that runs it, for the messages
        self.model = lm.model.requires_grad_(False)
        out = self.model.get_output_embeddings()
        self.W = out.weight.detach()  # (n, hidden)
        self.b = out.bias.detach() if getattr(out, "bias", None) is not None else None
        self.E = self.model.get_input_embeddings().weight.detach()  # (n, hidden)
        self.n = self.W.shape[0]
        self.device = lm.device
        self.max_len = context_length(lm)
        self.prefix = lm.prefix(tok)
        self._checked = False

    def hidden(self, ids, mask=None, embeds=None):
        """(B, T, hidden) last hidden states: the output layer's input."""
        kwargs = {"attention_mask": mask, "use_cache": False}
        if embeds is not None:
            return self.model.base_model(inputs_embeds=embeds, **kwargs).last_hidden_state
        return self.model.base_model(input_ids=ids, **kwargs).last_hidden_state

    def logits(self, h):
        z = h.float() @ self.W.float().T
        return z + self.b.float() if self.b is not None else z

    def check_linear_head(self, ids) -> None:
        """The fit assumes logits = h . W (+ b), h the base model's last hidden state (`hidden`); refuse
        models that scale or cap the logits (Gemma 2's softcapping, a logit scale) or that state.

        Like with like, in the model's dtype: one forward call gives the logits and the output layer's
        input (a hook), and the output layer is run on that input again; the base model's pass gives
        the state the fit reads, to compare with that input. A plain head differs by rounding alone
        (`linear_head_tolerance`)."""
        import torch

        head = self.model.get_output_embeddings()
        seen = {}
        hook = head.register_forward_pre_hook(lambda module, args: seen.setdefault("h", args[0]))
        one = ids[:1]
        try:
            with torch.no_grad():
                want = self.model(input_ids=one, attention_mask=torch.ones_like(one), use_cache=False).logits
                h = seen["h"]
                got = head(h)  # (1, T, n) the output layer on its own input, as the model ran it
                read = self.hidden(one, torch.ones_like(one))  # (1, T, hidden) what the fit reads
        finally:
            hook.remove()
        want, got = want.float(), got.float()
        if not (_within(want, got, self.W.dtype) and _within(h.float(), read.float(), self.W.dtype)):
            raise InputError(f"{type(self.model).__name__} computes its logits with more than hidden . lm_head "
                             f"(scaling or capping), which --init {self.init} does not model; use --init mean or subword-mean")
        self._checked = True


def _within(a, b, dtype) -> bool:
    diff = (a - b).abs()
    ok = bool((diff <= linear_head_tolerance(b, dtype)).all())
    if not ok:
        logger.info("differ by up to %.3g (largest %.3g, %s)", float(diff.max()), float(b.abs().max()), dtype)
    return ok


def linear_head_tolerance(logits, dtype):
    """How far the `logits` of a plain output layer (or its input) may lie from the same run in `dtype`: each
    within 2 eps of itself plus 2 eps of the mean |logit| (eps: `dtype`'s resolution, `torch.finfo(dtype).eps`:
    a rounding of the result each way and another kernel's accumulation order), and never less than a
    thousandth of the largest logit, below which a difference does not move the fit. 0.4% of a logit in
    bfloat16; a logit scale or Gemma 2's capping at 30 moves a model's large logits by far more.

        >>> import torch
        >>> [round(float(t), 4) for t in linear_head_tolerance(torch.tensor([30.0, -2.0]), torch.bfloat16)]
        [0.7188, 0.2812]
        >>> [round(float(t), 4) for t in linear_head_tolerance(torch.tensor([30.0, -2.0]), torch.float32)]
        [0.03, 0.03]
    """
    import torch

    eps = torch.finfo(dtype).eps
    size = logits.abs()
    return (2 * eps * (size + size.mean())).clamp(min=1e-3 * float(size.max()))


@dataclass
class _Teacher:
    """What the frozen model says on each window (old tokenization), kept on the CPU."""

    h: list  # per window: (T, hidden) float32 hidden states
    logz: list  # per window: (T,) float64 log partition function
    lp_next: list  # per window: (T - 1,) float64 log p(next old id)
    prefix_kv: dict = field(default_factory=dict)  # window -> keys and values of its start (see _teach)
    at_depth: list | None = None  # per window: (T, hidden) float32 after the first `depth` layers, through the final norm


def teach_batches(lengths: list[int], batch: int, tokens: int | None = None) -> list[list[int]]:
    """Indices of windows of `lengths` in batches for the frozen model's pass: in length order (padding
    costs as much as real positions), each batch at least `batch` windows and more while it holds at most
    `tokens` positions (padded): large matrix products keep both cores busy where small ones spin-wait."""
    tokens = TEACH_TOKENS if tokens is None else tokens
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    out, part = [], []
    for i in order:
        if len(part) >= batch and (len(part) + 1) * lengths[i] > tokens:
            out.append(part)
            part = []
        part.append(i)
    return out + [part] if part else out


def _teach(m: _Model, windows: list[Window], batch: int, say: Steps, stage: str = "model on contexts",
           keep: dict[int, int] | None = None, depth: int | None = None) -> _Teacher:
    """The frozen model's pass over `windows`, once: what the fits read instead of running it again.
    With `keep` ({window: positions}), the keys and values of each such window's first positions
    are kept too (`prefix_kv`): distillation's prefix cache, which would otherwise run them again.
    With `depth`, the hidden states after that many decoder layers too (`at_depth`: what
    distillation matches, layer_tap.LayerTap).

    log Z is a float32 log-sum-exp over the vocabulary (its rounding, ~1e-7 relative, moves a KL by
    as little), over the batch's real positions in chunks of BATCH_LOGITS_BYTES of logits: float64
    logits of a batch of long windows would be gigabytes (8 x 512 x 49,152 x 8 bytes). Windows are
    batched by `teach_batches`; the results are in the order of `windows`."""
    import torch

    from .layer_tap import LayerTap
    from .prefix_cache import window_prefixes

    h_, logz_, lp_ = [None] * len(windows), [None] * len(windows), [None] * len(windows)
    at_ = [None] * len(windows) if depth else None
    kv: dict = {}
    done = 0
    tap = LayerTap(m.model.base_model, depth, stop=False) if depth else contextlib.nullcontext()
    with tap, torch.no_grad():
        for part in teach_batches([len(w.old) for w in windows], batch):
            ids, mask = pad_batch([windows[i].old for i in part], 0, m.device)
            if not m._checked:
                m.check_linear_head(ids[:, :int(mask[0].sum())])
            out = m.model.base_model(input_ids=ids, attention_mask=mask, use_cache=bool(keep))
            h = out.last_hidden_state
            if keep:
                try:
                    kv.update(window_prefixes(out, keep, part, depth))
                except Exception as e:  # noqa: BLE001 - no usable cache: distillation runs the prefixes itself
                    logger.info("the teacher pass keeps no prefix cache (%s: %s)", type(e).__name__, e)
                    keep, kv = None, {}
            del out
            real = mask.bool()
            flat = h[real]  # (N, hidden) the batch's real positions, row by row
            nxt = torch.cat([ids[:, 1:], ids[:, :1]], 1)[real]  # the id after each position (junk at a row's end)
            rows = max(1, BATCH_LOGITS_BYTES // (4 * m.n))
            lz, lp = [], []
            for s in range(0, flat.shape[0], rows):
                z = m.logits(flat[s:s + rows])  # (rows, n) float32
                lz.append(z.logsumexp(-1))
                lp.append(z.gather(-1, nxt[s:s + rows, None])[:, 0] - lz[-1])
            lz, lp = torch.cat(lz).double().cpu(), torch.cat(lp).double().cpu()
            at = tap.h[real].cpu() if depth else None
            flat = flat.float().cpu()
            o = 0
            for i in part:
                T = len(windows[i].old)
                h_[i], logz_[i], lp_[i] = flat[o:o + T], lz[o:o + T], lp[o:o + T - 1]
                if depth:
                    at_[i] = at[o:o + T]
                o += T
            done += len(part)
            say(stage, done, len(windows))
    return _Teacher(h_, logz_, lp_, kv, at_)


@dataclass
class _OutputData:
    """Positions of the output objective: hidden states, old log Z, and where a new word follows
    with which probability q."""

    h: object  # (P, hidden)
    logz: object  # (P,)
    q_pos: object  # (Q,) position index
    q_tok: object  # (Q,) token index j
    q: object  # (Q,) p_old(pieces | prefix)
    weight: object = None  # (P,) weight of each position's term (None: all 1)


def _output_data(windows: list[Window], teacher: _Teacher, target: str = "model") -> _OutputData:
    import torch

    hs, lzs, qp, qt, qv = [], [], [], [], []
    base = 0
    for w, h, lz, lp in zip(windows, teacher.h, teacher.logz, teacher.lp_next):
        keep = torch.ones(len(w.old), dtype=torch.bool)
        for r in w.runs:
            keep[r.start:r.start + r.length - 1] = False  # predict a piece inside the word: no new position
        index = torch.cumsum(keep.long(), 0) - 1 + base
        for r in w.runs:
            if r.start == 0:
                continue
            qp.append(int(index[r.start - 1]))
            qt.append(r.j)
            qv.append(1.0 if target == "corpus" else float(lp[r.start - 1:r.start + r.length - 1].sum().exp()))
        hs.append(h[keep])
        lzs.append(lz[keep])
        base += int(keep.sum())
    return _OutputData(torch.cat(hs), torch.cat(lzs), torch.tensor(qp, dtype=torch.long),
                       torch.tensor(qt, dtype=torch.long), torch.tensor(qv, dtype=torch.float64))


def sample_positions(data: _OutputData, n_context: int, most: int, seed: int) -> _OutputData:
    """`data` with the positions of the contexts (its first `n_context`) where no new word follows cut to a
    seeded sample of `most`, each weighted to stand for the ones left out (an unbiased estimate of their
    KL sum); the word positions and the old text's (after the contexts) stay, as they are.

    Each position's KL term costs one product with every new row, so the objective's cost is
    positions x new tokens: without a cap it grows with the square of the word count (each word
    brings its contexts). `data` itself when there are no more than `most` such positions."""
    import torch

    P = data.h.shape[0]
    is_word = torch.zeros(P, dtype=torch.bool)
    is_word[data.q_pos] = True
    rest = (~is_word[:n_context]).nonzero()[:, 0]
    if rest.numel() <= most:
        return data
    g = torch.Generator().manual_seed(seed)
    picked = rest[torch.randperm(rest.numel(), generator=g)[:most]].sort().values
    keep = torch.cat([is_word[:n_context].nonzero()[:, 0], picked, torch.arange(n_context, P)]).sort().values
    weight = data.weight.clone() if data.weight is not None else torch.ones(P, dtype=torch.float64)
    weight[picked] *= rest.numel() / most
    where = torch.full((P,), -1, dtype=torch.long)
    where[keep] = torch.arange(keep.numel())
    return _OutputData(data.h[keep], data.logz[keep], where[data.q_pos], data.q_tok, data.q, weight[keep])


def _kl_new(h, logz, W, b_new):
    """KL(p_old || p_new) at positions (h, log Z) when the new output rows are W (and bias b_new)."""
    s = h @ W.T + b_new  # (P, k)
    return kl_added_mass(s.logsumexp(-1) - logz)


def fit_output_rows(data: _OutputData, prior, b_new: float, l2: float, steps: int, say: Steps, device=None,
                    rel_change: float = 0.0, budget: int | None = None, dtype=None):
    """The new output rows minimizing sum over positions of CE(ideal || p_new) + l2/2 * scale * |W - prior|^2.

    Per position: weight * (log(Z_old + sum_j exp(s_j)) - log Z_old) - sum_j q_j s_j, s = h . W^T + b. Convex in
    W (a log-sum-exp minus a linear term), so L-BFGS finds the optimum. The L2 weight is in logit
    units: `scale` is the mean squared hidden-state coordinate, so moving a row by d costs about what
    moving a typical logit by |d| * rms(h) * sqrt(hidden) does. Float64 on the CPU; float32 on a GPU
    (`device`), where the hidden states of many contexts would not fit twice as wide (`dtype` says otherwise:
    the tests run the GPU's float32 on the CPU). `rel_change`: see `common.lbfgs` (0: all `steps` iterations
    unless converged to the last bits).

    Each evaluation runs over the positions in chunks (`newlogit.added_mass`, `budget` bytes of logits a
    chunk; None: `newlogit.CHUNK_BYTES`): its memory beyond the inputs is that chunk and a few (k, hidden)
    matrices, not (P, k) ones.
    """
    import torch

    from .newlogit import added_mass, word_evidence

    dev = torch.device(device) if device is not None else torch.device("cpu")
    dt = dtype or (torch.float64 if dev.type == "cpu" else torch.float32)
    h, logz = data.h.to(dev, dt), data.logz.to(dev, dt)
    prior = prior.to(dev, dt)
    q, q_pos, q_tok = data.q.to(dev, dt), data.q_pos.to(dev), data.q_tok.to(dev)
    weight = data.weight.to(dev, dt) if data.weight is not None else None
    scale = float((h ** 2).mean()) * h.shape[1]
    lam = l2 * scale
    W = prior.clone().requires_grad_(True)
    A, c = word_evidence(h, q_pos, q_tok, q, W.shape[0], budget)  # the linear term: (W * A).sum() + b_new * c.sum()
    evidence_b = b_new * float(c.sum())

    def objective():
        obj = added_mass(h, logz, W, b_new, weight, budget)
        return obj - (W * A).sum() - evidence_b + 0.5 * lam * ((W - prior) ** 2).sum()

    calls = lbfgs([W], objective, steps, say, "output rows", rel_change)
    return W.detach().double().cpu(), calls


def prompts_per_token(opts: FitOptions, k: int, limit: int) -> int:
    """Prompts each new token is written in: `opts.prompts_per_word`, fewer (at least one) where k tokens'
    windows of `limit` positions would pass `opts.context_budget`. Sampling costs a model step per position,
    the most of a fit without a corpus (bench/RESULTS.md)."""
    per = opts.prompts_per_word
    if opts.context_budget is not None and k:
        per = max(1, min(per, opts.context_budget // (k * limit)))
        _say_fewer("prompts", per, opts.prompts_per_word, k, opts.context_budget)
    return per


def generated_windows(m: _Model, tok, tokens: list[FitToken], opts: FitOptions, say: Steps,
                      batch: int = GENERATE_BATCH) -> tuple[list[Window], int]:
    """Contexts the model writes itself: each form in a few prompts (`prompts_per_token`), continued by
    seeded sampling (`sample_continuations`, `batch` prompts at a time); and the prompts per token."""
    limit = min(opts.context_tokens, m.max_len)
    per = prompts_per_token(opts, len(tokens), limit)
    prompts = []
    for t in tokens:
        templates = SPACE_PROMPTS if t.form.startswith(" ") else BARE_PROMPTS
        for p in templates[:per]:
            prompts.append(m.prefix + encode(tok, p.format(t.form)))
    prompts = [p[:limit - 1] for p in prompts]
    out = []
    for s in range(0, len(prompts), batch):
        part = prompts[s:s + batch]
        steps = [min(opts.generated_tokens, limit - len(p)) for p in part]
        for seq in sample_continuations(m, part, steps, tok.eos_token_id, [opts.seed + s + i for i in range(len(part))]):
            w = Window(seq, [])
            w.runs = find_runs(w.old, tokens)
            out.append(w)
        say("generating contexts", min(s + batch, len(prompts)), len(prompts))
    return out, per


def sample_continuations(m: _Model, prompts: list[list[int]], steps: list[int], eos: int | None,
                         seeds: list[int]) -> list[list[int]]:
    """Each prompt i continued by up to `steps[i]` tokens sampled from the model (stopping after `eos`), all
    prompts in one batch with the keys and values of what came before kept (one position a step).

    Prompt i samples with its own generator, seeded `seeds[i]`: its continuation does not depend on
    which prompts share its batch (up to the last bits of the logits). The prompts are left-padded.
    On the CPU a model narrower than SMALL_HIDDEN runs on one thread (`narrow_threads`); a wider one keeps
    torch's threads, faster on idle cores. On a busy machine set OMP_NUM_THREADS=1: there a second
    thread's OpenMP spin-waits cost several times the work (both measured in bench/RESULTS.md)."""
    import torch

    from ...runtime import cache_argument, returned_cache

    B, L = len(prompts), max(len(p) for p in prompts)
    ids = torch.zeros((B, L), dtype=torch.long)
    mask = torch.zeros((B, L), dtype=torch.long)
    for b, p in enumerate(prompts):
        ids[b, L - len(p):] = torch.tensor(p)
        mask[b, L - len(p):] = 1
    ids, mask = ids.to(m.device), mask.to(m.device)
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    gens = [torch.Generator(device="cpu").manual_seed(s) for s in seeds]
    seqs = [list(p) for p in prompts]
    done = [n <= 0 for n in steps]
    arg, cache = cache_argument(m.model.base_model), None
    with torch.no_grad(), narrow_threads(m.device, m.E.shape[1]):
        for step in range(max(steps, default=0)):
            out = m.model.base_model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                                     **({arg: cache} if cache is not None else {}))
            cache = returned_cache(out)
            probs = m.logits(out.last_hidden_state[:, -1]).float().softmax(-1).cpu()  # (B, n)
            nxt = [int(torch.multinomial(probs[b], 1, generator=gens[b])) for b in range(B)]
            for b, t in enumerate(nxt):
                if not done[b]:
                    seqs[b].append(t)
                    done[b] = t == eos or step + 1 >= steps[b]
            if all(done):
                break
            ids = torch.tensor(nxt, device=m.device)[:, None]
            mask = torch.cat([mask, mask.new_ones((B, 1))], 1)
            positions = positions[:, -1:] + 1
    return seqs


def old_text_windows(tok, prefix: list[int], length: int, held_length: int, max_tokens: int,
                     chats: list[str] = ()) -> tuple[list[Window], list[Window]]:
    """Old text in windows, as (for the objective, held out): the packaged corpus's even paragraphs
    in windows of `length` for the objective, its odd ones in windows of `held_length` (validation's
    window: the model's context, at most runtime.MAX_WINDOW) for the held-out measure, plus the
    chat-template samples (held out). Up to `max_tokens` corpus tokens each.

    KL(p_old || p_new) = log(1 + sum_j exp(s_j) / Z) at every position, whatever follows it, so
    paragraphs that happen to use a new word stay in: the held-out figure is validation's figure."""
    text, _ = read_corpus(None)
    halves: tuple[list[Window], list[Window]] = ([], [])
    used = [0, 0]
    for c in chats:  # a rendered conversation is already whole: its own special tokens, no prefix
        halves[1].append(Window(encode(tok, c)[:held_length], []))
    for i, para in enumerate(paragraphs(text)):
        half = i % 2
        step = max(1, (length if half == 0 else held_length) - len(prefix))
        ids = encode(tok, para)
        for s in range(0, len(ids), step):
            if used[half] >= max_tokens:
                break
            part = ids[s:s + step]
            halves[half].append(Window(prefix + part, []))
            used[half] += len(part)
    return halves


def fit_causal_rows(src: Path, kind: ModelKind, tokens: list[FitToken], roles: set[str], opts: FitOptions,
                    say: Steps) -> FitResult:
    """Fit the new rows of the causal LM at `src` (`fitted.fit_rows` calls this for causal kinds): input rows
    by distillation, output rows by the convex new-logit fit, shrunk to the old-text KL limit."""
    import torch

    t0 = time.perf_counter()
    tok = load_tokenizer(src)
    torch.manual_seed(opts.seed)
    with loaded_model(src, opts.device, kind, remedy="use --init mean or subword-mean", dtype=opts.dtype) as lm:
        m = _Model(lm, tok)
        with narrow_threads(m.device, m.E.shape[1]):
            return _fit_loaded(m, src, tok, tokens, roles, opts, say, t0)


def shrink_to_limit(h, logz, W, M, b_new: float, limit_mean: float, limit_p99: float, iters: int = 30):
    """The largest a in [0, 1] such that the rows M + a (W - M) keep the old-text KL at positions
    (h, logz) within both limits (mean, 99th percentile); and the per-position KL at that a.

    M are the mean-init rows: at a = 0 every position's KL is at most log(1 + k/n) (Jensen:
    exp(h . mean row) <= Z / n), so a = 0 meets any limit at or above that bound. KL need not be
    monotone in a, so bisection keeps an end that meets the limits (lo) and one that does not (hi).

    The new logits are linear in a, h . (M + a (W - M)) = h . M + a h . (W - M): the two (positions, k)
    products are taken once, and each of the ~30 steps is a log-sum-exp over them, not a product
    (0.37 CPU s each at 1,000 positions x 8,000 rows x 576 in float64).
    """
    import torch

    base = h @ M.T + b_new  # (P, k)
    slope = h @ (W - M).T  # (P, k)

    def kl_at(a: float):
        return kl_added_mass(torch.add(base, slope, alpha=a).logsumexp(-1) - logz).numpy()

    def meets(kl) -> bool:
        return meets_limits(kl, limit_mean, limit_p99)

    kl = kl_at(1.0)
    if meets(kl):
        return 1.0, kl
    a = bisect(lambda x: meets(kl_at(x)), good=0.0, bad=1.0, iters=iters)
    return a, kl_at(a)


def keep_old_text(m: _Model, held_old: list[Window], W, M, b_new: float, kl_limit: float | None, batch: int,
                  say: Steps, text: str):
    """New output rows W (k, hidden) float64, shrunk toward the mean rows M as far as the held-out old text
    `held_old` needs (`shrink_to_limit`); and the report's "shrink" and "old_text_kl" entries.

    The limits are the mean-init bound log(1 + k/n) on the KL mean (or `kl_limit`, --fit-kl-limit) and
    FIT_KL_P99 (or that limit, if larger) on its 99th percentile. The frozen model runs over `held_old`
    once (`_teach`); `text` says in the report what that text is. Used by `--init fitted` (W: the fitted
    rows) and `--init subword-mean-shrunk` (W: the sub-word mean, `shrunk.py`)."""
    import torch

    k = W.shape[0]
    held = _teach(m, held_old, batch, say, "held-out old text") if held_old else _Teacher([], [], [])
    bound = kl_bound(k, m.n)
    limit_mean = kl_limit if kl_limit is not None else bound
    limit_p99 = max(FIT_KL_P99, limit_mean)
    with torch.no_grad():
        if held.h:
            h_held, z_held = torch.cat(held.h).double(), torch.cat(held.logz)
            kl_before = _kl_new(h_held, z_held, W, b_new).numpy()
            a, kl_held = shrink_to_limit(h_held, z_held, W, M, b_new, limit_mean, limit_p99)
            kl_mean_init = _kl_new(h_held, z_held, M, b_new).numpy()
        else:
            kl_before = kl_held = kl_mean_init = np.zeros(0)
            a = 1.0
    if a < 1.0:
        W = M + a * (W - M)
        logger.info("output rows shrunk toward the mean row (a = %.3f) to keep the old-text KL within the limit", a)
    return W, {"shrink": {"a": a, "limit_mean": limit_mean, "limit_p99": limit_p99},
               "old_text_kl": {"text": text, **kl_figures(kl_held), "bound": bound,
                               "before_shrink": kl_figures(kl_before), "mean_init": kl_figures(kl_mean_init)}}


def _fit_loaded(m: _Model, src: Path, tok, tokens: list[FitToken], roles: set[str], opts: FitOptions, say: Steps,
                t0: float) -> FitResult:
    import torch

    target = opts.target or ("corpus" if opts.corpus is not None else "model")
    length = max(8, min(opts.context_tokens, m.max_len))
    bounds = ("contexts_per_word", "context_tokens", "input_steps", "output_steps", "batch_size", "seed")
    report: dict = {"method": "fitted", "roles": sorted(roles), **{k: getattr(opts, k) for k in bounds}}
    if opts.corpus is not None:
        text, sha = read_fit_corpus(opts.corpus)
        windows, per = budget_windows(text, tok, m.prefix, tokens, length, opts.contexts_per_word,
                                      opts.context_budget, opts.segment)
        report["contexts"] = {"source": "corpus", "name": Path(opts.corpus).name, "sha256": sha,
                              "per_word": per, "budget_positions": opts.context_budget,
                              "runs": "longest match" if opts.segment is None else "the output tokenizer's"}
    else:
        windows, per = generated_windows(m, tok, tokens, opts, say)
        report["contexts"] = {"source": "generated", "prompts_per_word": per, "generated_tokens": opts.generated_tokens,
                              "budget_positions": opts.context_budget}
    report["contexts"].update(contexts_found(windows, tokens, "the starting point"))

    k = len(tokens)
    sub = subword_mean(m.E, tokens)  # the input rows' start
    # distillation's prefix cache: the keys and values before each window's first new token
    keep = {i: w.runs[0].start for i, w in enumerate(windows) if w.runs} if "input" in roles else None
    share = opts.depth if opts.depth is not None else DISTILL_DEPTH
    depth = layers_for(m.model.base_model, share) if "input" in roles else None
    teacher = _teach(m, windows, opts.batch_size, say, keep=keep, depth=depth) if windows else _Teacher([], [], [])
    result = FitResult(None, None, report)
    if "input" in roles:
        t1 = time.perf_counter()
        passes = opts.passes if opts.passes is not None else (DEPTH_PASSES if depth else CAUSAL_PASSES)
        rows, distilled = distill_input_rows(m, windows, teacher, sub, opts.input_steps, opts.batch_size, opts.lr,
                                             opts.seed, say, passes, depth)
        result.input_rows = rows.numpy()
        layers = getattr(m.model.config, "num_hidden_layers", None)
        report["input"] = {"start": "subword-mean", "max_passes": passes,
                           "depth": {"share": share, "layers": depth or layers, "of": layers}, **distilled,
                           "seconds": round(time.perf_counter() - t1, 3)}
    if "output" in roles:
        t1 = time.perf_counter()
        chats = chat_samples(src)
        fit_old, held_old = old_text_windows(tok, m.prefix, length, m.max_len, opts.old_text_tokens, chats)
        old_teacher = _teach(m, fit_old, opts.batch_size, say, "model on old text") if fit_old else _Teacher([], [], [])
        data = _output_data(windows + fit_old, _Teacher(teacher.h + old_teacher.h, teacher.logz + old_teacher.logz,
                                                        teacher.lp_next + old_teacher.lp_next), target)
        n_ctx = data.h.shape[0] - sum(len(w.old) for w in fit_old)
        data.weight = torch.cat([torch.ones(n_ctx, dtype=torch.float64),
                                 torch.full((data.h.shape[0] - n_ctx,), opts.old_text_weight, dtype=torch.float64)])
        all_positions = int(data.h.shape[0])
        data = sample_positions(data, n_ctx, max(MIN_SAMPLED, OUTPUT_PAIRS // max(1, k)), opts.seed)
        b_new = float(m.b.double().mean()) if m.b is not None else 0.0
        mean_rows = output_prior("mean", m.W, tokens)
        prior = output_prior(opts.output_start, m.W, tokens)
        l2 = opts.l2 if opts.l2 is not None else DEFAULT_L2
        W, calls = fit_output_rows(data, prior, b_new, l2, opts.output_steps, say, m.device, OUTPUT_REL_CHANGE)
        bad = ~torch.isfinite(W).all(1)
        if bad.any():  # never write a non-finite row
            logger.warning("output fit: %d row(s) not finite; they keep the %s row", int(bad.sum()), opts.output_start)
            W[bad] = prior[bad]
        text = "packaged corpus, odd paragraphs (not fitted on)" + (f", {len(chats)} chat-template samples"
                                                                    if chats else "")
        W, kept = keep_old_text(m, held_old, W, mean_rows, b_new, opts.kl_limit, opts.batch_size, say, text)
        result.output_rows = W.numpy()
        report["output"] = {"start": opts.output_start, "target": target, "l2": l2,
                            "old_text_weight": opts.old_text_weight, "lbfgs_evaluations": calls,
                            "positions": all_positions, "positions_fitted": int(data.h.shape[0]),
                            "word_positions": int(data.q.numel()),
                            "seconds": round(time.perf_counter() - t1, 3), **kept}
    report["seconds"] = round(time.perf_counter() - t0, 3)
    logger.info("fitted %d rows (%s) in %.1f s", k, ", ".join(sorted(roles)), report["seconds"])
    return result
