"""The fitted init on a masked-LM head: the new decoder rows and bias entries, fitted on masked positions.

With s = t . W^T + b the new logits at a [MASK] (t the head's transform), the objective
log(1 + sum_j exp(s_j - log Z)) - q s_j* is convex in (W, b); old text adds q = 0 positions and an L2
pulls toward the start. The new biases are then lowered by the smallest shift that keeps the held-out
masked-LM KL within its limits (`bias_shrink`). Details: docs/internals.md.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from .common import (ENCODER_WINDOW, FIT_KL_P99, FitOptions, FitResult, FitToken, Window, bisect, lbfgs,
                     new_token_embeds, output_prior, pad_batch)
from ...kl import kl_added_mass, kl_bound, kl_figures, meets_limits
from .newlogit import added_mass, chunk_rows, word_evidence
from ...progress import Steps
from ...corpus import paragraphs, read_corpus
from ...runtime import encode, special_ends

logger = logging.getLogger(__name__)

# L2 weight of the masked-LM head fit (logit units, as the causal output fit's): toward the distilled
# input row when the decoder is tied (the row must still read as an input), toward the prior row when not.
MLM_L2_TIED = 0.1
MLM_L2_UNTIED = 0.1
MASK_SHARE = 0.15  # tokens masked at once in the old-text and context passes of the head fit (BERT's share)
# Whether the bias shift keeps the limits at the masked positions of held-out old text too (always
# reported). Off: validation reads unmasked text, and on the trained test fixture enforcing it took
# all the gain (the fit keeps masked old positions down through its objective instead).
ENFORCE_MASKED = False


class _DecoderIO:
    """What the masked-LM decoder (the output embeddings) reads and gives, captured by a forward hook:
    the head's transformed hidden states t (B, T, hidden) and the old logits (B, T, n) = t . E^T + bias."""

    def __init__(self, enc):
        out = enc.model.get_output_embeddings() if hasattr(enc.model, "get_output_embeddings") else None
        self.ok = out is not None and out.weight.shape[0] == enc.n
        self.out, self.seen = out, []

    def __enter__(self):
        if self.ok:
            self.hook = self.out.register_forward_hook(lambda mod, args, res: self.seen.append((args[0].detach(),
                                                                                              res.detach())))
        return self

    def __exit__(self, *exc):
        if self.ok:
            self.hook.remove()

    def last(self):
        return self.seen[-1]


def old_text_head(enc, tok, parity: int, max_tokens: int, masked: bool = False, seed: int = 0):
    """The decoder's input t (positions, hidden) float64 and the old log-partition (positions,) at every
    position of unmasked packaged text: its even paragraphs (`parity` 0, for the head fit's objective)
    or its odd ones (1, held out: validation reads them too), up to `max_tokens` tokens. `masked`:
    instead, at MASK_SHARE of each paragraph's tokens (seeded), replaced by [MASK] all at once, as a
    masked-LM is used. None for a model whose output layer is not vocabulary-sized."""
    import torch

    io = _DecoderIO(enc)
    if not io.ok:
        return None
    text, _ = read_corpus(None)
    head, tail = special_ends(tok)
    step = min(enc.max_len, ENCODER_WINDOW) - len(head) - len(tail)
    ts, logz, used = [], [], 0
    with io:
        for i, para in enumerate(paragraphs(text)):
            if i % 2 != parity or used >= max_tokens:
                continue
            ids = encode(tok, para)[:step]
            used += len(ids)
            x = torch.tensor([head + ids + tail], device=enc.device)
            keep = torch.ones(x.shape[1], dtype=torch.bool)
            if masked:
                at = _mask_positions(len(ids), np.random.default_rng([seed, i])) + len(head)
                x[0, at] = tok.mask_token_id
                keep = torch.zeros(x.shape[1], dtype=torch.bool)
                keep[at] = True
            with torch.no_grad():
                enc.model(input_ids=x, attention_mask=torch.ones_like(x))
            g, z = io.last()
            ts.append(g[0].double().cpu()[keep])
            logz.append(z[0].double().cpu().logsumexp(-1)[keep])
    if not ts:
        return torch.zeros((0, enc.E.shape[1]), dtype=torch.float64), torch.zeros(0, dtype=torch.float64)
    return torch.cat(ts), torch.cat(logz)


def _mask_positions(count: int, rng) -> np.ndarray:
    """MASK_SHARE of `count` positions (at least one), sorted: the ones a masked-LM pass masks."""
    return np.sort(rng.permutation(count)[:max(1, round(MASK_SHARE * count))]) if count else np.zeros(0, dtype=int)


def masked_lm_logits(enc, tok, rows, max_tokens: int):
    """The new tokens' masked-LM logits without their bias, (positions, k), and the old log-partition,
    (positions,), at every position of unmasked held-out packaged text (its odd paragraphs, as
    validation reads it), with `rows` as the new decoder rows. None for a model whose output layer is
    not vocabulary-sized."""
    import torch

    found = old_text_head(enc, tok, 1, max_tokens)
    if found is None:
        return None
    t, logz = found
    return (t @ torch.as_tensor(rows, dtype=torch.float64).T).numpy(), logz.numpy()


@dataclass
class MaskedData:
    """The masked positions of the head fit: each occurrence of a new token in the contexts, masked."""

    t: object  # (Q, hidden) float64: the decoder's input at the masked position, new tokenization
    logz: object  # (Q,) float64: the old logits' log-partition there
    top: object  # (Q,) float64: the largest old logit there
    j: object  # (Q,) long: which new token the word is
    q: object  # (Q,) float64: the mass the ideal moves onto it


def _head_pass(enc, io: _DecoderIO, seqs: list[list[int]], R):
    """(decoder input t, logits) at every position of `seqs` (new ids, right-padded into one batch), the new
    tokens read as the rows R: the frozen model's pass, with `io` capturing the decoder's input and output."""
    import torch

    ids, mask = pad_batch(seqs, enc.pad, enc.device)
    with torch.no_grad():
        enc.model(inputs_embeds=new_token_embeds(enc.model.get_input_embeddings(), ids, R), attention_mask=mask)
    return io.last()


def masked_contexts(enc, windows: list[Window], rows, mask_id: int, batch: int):
    """(t, log Z, the largest old logit, token index) at each occurrence of a new token in `windows`, read with the word as
    one [MASK] in the new tokenization (the other new tokens read as `rows`, the fitted input rows)."""
    import torch

    io = _DecoderIO(enc)
    R = torch.as_tensor(rows, dtype=enc.E.dtype, device=enc.device)
    seqs, where, js = [], [], []
    for w in windows:
        ids = w.new_ids(enc.n)
        news = [i for i, x in enumerate(ids) if x >= enc.n]
        for r, pos in zip(w.runs, news):
            s = list(ids)
            s[pos] = mask_id
            seqs.append(s)
            where.append(pos)
            js.append(r.j)
    ts, zs, tops = [], [], []
    with io:
        for s in range(0, len(seqs), batch):
            part = seqs[s:s + batch]
            g, z = _head_pass(enc, io, part, R)
            at = torch.tensor(where[s:s + batch], device=g.device)
            rows_at = torch.arange(len(part), device=g.device)
            ts.append(g[rows_at, at].double().cpu())
            zs.append(z[rows_at, at].double().cpu().logsumexp(-1))
            tops.append(z[rows_at, at].double().cpu().max(-1).values)
    H = enc.E.shape[1]
    empty = torch.zeros(0, dtype=torch.float64)
    return (torch.cat(ts) if ts else torch.zeros((0, H), dtype=torch.float64), torch.cat(zs) if zs else empty,
            torch.cat(tops) if tops else empty, torch.tensor(js, dtype=torch.long))


def context_negatives(enc, windows: list[Window], rows, mask_id: int, special: set[int], batch: int,
                      seed: int):
    """(t, log Z) at MASK_SHARE of the old tokens of each window (new tokenization, the new words read
    as `rows`), masked at once: positions of the domain where an old token belongs, where the ideal
    is the old distribution (q = 0)."""
    import torch

    io = _DecoderIO(enc)
    R = torch.as_tensor(rows, dtype=enc.E.dtype, device=enc.device)
    seqs, picks = [], []
    for i, w in enumerate(windows):
        ids = w.new_ids(enc.n)
        olds = [p for p, x in enumerate(ids) if x < enc.n and x not in special]
        at = [olds[a] for a in _mask_positions(len(olds), np.random.default_rng([seed, i]))]
        if at:
            seqs.append([mask_id if p in set(at) else x for p, x in enumerate(ids)])
            picks.append(at)
    ts, zs = [], []
    with io:
        for s in range(0, len(seqs), batch):
            g, z = _head_pass(enc, io, seqs[s:s + batch], R)
            for b, at in enumerate(picks[s:s + batch]):
                ts.append(g[b, at].double().cpu())
                zs.append(z[b, at].double().cpu().logsumexp(-1))
    H = enc.E.shape[1]
    return (torch.cat(ts) if ts else torch.zeros((0, H), dtype=torch.float64),
            torch.cat(zs) if zs else torch.zeros(0, dtype=torch.float64))


def word_probabilities(enc, windows: list[Window], tokens: list[FitToken], mask_id: int,
                       batch: int) -> list[float]:
    """The old model's probability of each occurrence's word in `windows` (old tokenization), its
    pieces all masked and read left to right: the product over pieces i of p_old(piece i | the
    context, pieces before i shown, the rest masked). One value per run, in `masked_contexts` order."""
    import torch

    seqs, at, want, owner = [], [], [], []
    n_runs = 0
    for w in windows:
        for r in w.runs:
            pieces = tokens[r.j].pieces
            for i in range(r.length):
                s = list(w.old)
                s[r.start + i:r.start + r.length] = [mask_id] * (r.length - i)
                seqs.append(s)
                at.append(r.start + i)
                want.append(pieces[i])
                owner.append(n_runs)
            n_runs += 1
    logp = torch.zeros(n_runs, dtype=torch.float64)
    for s in range(0, len(seqs), batch):
        ids, mask = pad_batch(seqs[s:s + batch], enc.pad, enc.device)
        with torch.no_grad():
            z = enc.model(input_ids=ids, attention_mask=mask).logits.double()
        rows = torch.arange(ids.shape[0], device=z.device)
        pos = torch.tensor(at[s:s + batch], device=z.device)
        lp = z[rows, pos].log_softmax(-1)[rows, torch.tensor(want[s:s + batch], device=z.device)]
        logp.index_add_(0, torch.tensor(owner[s:s + batch]), lp.cpu())
    return logp.exp().tolist()


def fit_head_rows(masked: MaskedData, old_t, old_logz, prior, b0, l2: float, old_weight, steps: int,
                  say: Steps, fit_bias: bool = True, budget: int | None = None):
    """The new decoder rows W (k, hidden) and biases b (k,) minimizing

        sum over masked positions [log(1 + sum_j exp(t.w_j + b_j - log Z)) - q (t.w_j* + b_j*)]
        + sum over other positions old_weight * log(1 + sum_j exp(t.w_j + b_j - log Z))
        + l2/2 * (scale * |W - prior|^2 + |b - b0|^2),

    the cross-entropy against the ideal (the old distribution with the mass q moved onto the word's
    new token j*) up to a constant, and the KL(p_old || p_new) where old tokens belong (`old_t`,
    `old_logz`; `old_weight` a number or one per position): convex in (W, b) (a
    log-sum-exp of affine functions minus a linear term), minimized by L-BFGS from (prior, b0).
    `scale` (mean squared coordinate of t times hidden) puts the row's L2 in logit units, as the
    causal output fit does. Float64 on the CPU; each evaluation runs over the positions in chunks
    (`newlogit.added_mass`, `budget` bytes of logits a chunk; None: `newlogit.CHUNK_BYTES`), never a
    (positions, k) matrix.

    Returns:
        (W float64, b float64, objective evaluations)
    """
    import torch

    t, logz = masked.t.double(), masked.logz.double()
    q, j = masked.q.double(), masked.j
    ot, oz = old_t.double(), old_logz.double()
    ow = torch.as_tensor(old_weight, dtype=torch.float64)
    both = torch.cat([t, ot]) if ot.numel() else t
    scale = float((both ** 2).mean()) * both.shape[1] if both.numel() else 1.0
    lam = l2 * scale
    prior = torch.as_tensor(prior, dtype=torch.float64)
    b0 = torch.as_tensor(b0, dtype=torch.float64)
    W = prior.clone().requires_grad_(True)
    b = b0.clone().requires_grad_(fit_bias)
    A, c = word_evidence(t, torch.arange(len(j)), j, q, W.shape[0], budget)  # the linear term: (W * A).sum() + (b * c).sum()

    def objective():
        obj = added_mass(t, logz, W, b, budget=budget) - (W * A).sum() - (b * c).sum()
        if ot.numel():
            obj = obj + added_mass(ot, oz, W, b, ow, budget)
        return obj + 0.5 * lam * ((W - prior) ** 2).sum() + 0.5 * l2 * ((b - b0) ** 2).sum()

    calls = lbfgs([W, b] if fit_bias else [W], objective, steps if len(j) else 0, say, "masked-LM head")
    return W.detach(), b.detach(), calls


def new_token_figures(masked: MaskedData, W, b, budget: int | None = None) -> dict:
    """At the masked positions: the new model's mean probability of the word's new token, its mean
    log-probability, and the share of positions where it is the most probable token (of the old
    vocabulary and the new tokens). In chunks of positions of `budget` bytes of logits, as the fit
    (None: `newlogit.CHUNK_BYTES`)."""
    import torch

    if not len(masked.j):
        return {"positions": 0, "p_mean": None, "logp_mean": None, "top1": None}
    W, b = torch.as_tensor(W, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    step = chunk_rows(W.shape[0], 8, budget)
    lps, tops = [], []
    for at in range(0, len(masked.j), step):
        part = slice(at, at + step)
        s = masked.t[part].double() @ W.T + b  # (rows, k)
        lz = torch.logaddexp(masked.logz[part].double(), s.logsumexp(-1))
        rows = torch.arange(s.shape[0])
        mine = s[rows, masked.j[part]]
        lps.append(mine - lz)
        tops.append(mine >= torch.maximum(s.max(-1).values, masked.top[part].double()))
    lp, top = torch.cat(lps), torch.cat(tops)
    return {"positions": int(len(masked.j)), "p_mean": float(lp.exp().mean()), "logp_mean": float(lp.mean()),
            "top1": float(top.double().mean())}


def _kl(lse_minus_logz: np.ndarray, shift: float) -> np.ndarray:
    """KL(p_old || p_new) per position when the new biases are lowered by `shift`."""
    return kl_added_mass(lse_minus_logz - shift)


def bias_shrink(logits: np.ndarray, logz: np.ndarray, bias, limit_mean: float, limit_p99: float,
                iters: int = 40, more: tuple = ()) -> tuple[float, np.ndarray, np.ndarray]:
    """The smallest shift d >= 0 such that the new biases `bias - d` keep the old-text KL's mean under
    `limit_mean` and its p99 under `limit_p99`; returns (d, KL per position before, after). Each
    (logits, logz) pair of `more` (other position sets: masked positions) must meet the limits too.

    `bias` is the new tokens' bias entries as fitted (a number or one per token, `logits`' columns).
    Lowering them only removes mass from the new tokens, so the KL falls monotonically to 0 as d
    grows: the limits are met by construction, found by bisection (to 1e-3 nats of shift). A shift
    of 0 means the fitted biases already met them.

        >>> d, before, after = bias_shrink(np.array([[5.0], [0.0]]), np.array([0.0, 0.0]), 0.0, 0.01, 0.05)
        >>> bool(d > 0 and after.mean() <= 0.01 < before.mean())
        True
    """
    def excess(lg, lz):
        return (np.logaddexp.reduce(lg + bias, axis=1) if lg.size else np.zeros(0)) - lz

    delta = excess(logits, logz)
    others = [excess(lg, lz) for lg, lz in more]

    def meets(d: float) -> bool:
        for x in [delta, *others]:
            if not meets_limits(_kl(x, d), limit_mean, limit_p99):
                return False
        return True

    before = _kl(delta, 0.0)
    if meets(0.0):
        return 0.0, before, before
    hi = 1.0
    while not meets(hi) and hi < 1e9:  # a NaN figure never meets: stop doubling
        hi *= 2
    hi = bisect(meets, good=hi, bad=0.0, iters=iters, tol=1e-3)
    return hi, before, _kl(delta, hi)


def fit_head(enc, tok, out, windows: list[Window], tokens: list[FitToken], result: FitResult,
                  shared: bool, roles: set[str], opts: FitOptions, say: Steps):
    """The new rows and bias entries of a masked-LM head, and the report of the head (`mlm_head`).

    The rows: the convex fit on masked positions (`fit_head_rows`), from and toward the distilled
    input rows when the decoder is tied to the embedding (one row plays both roles), else from and
    toward the `output_start` prior of the decoder's rows. Then, last, the bias entries are lowered by
    `bias_shrink` until the old-text KL on held-out text meets the limits, so they hold by
    construction whatever the fit did.

    Returns:
        (rows (k, hidden) float64 or None: keep result.output_rows, biases (k,) or None: the mean bias, report)
    """
    import torch

    bias = getattr(out, "bias", None)
    what = "the input rows (tied)" if shared else "sub-word mean"
    if not shared and "output" not in roles:
        return None, None, {"fitted": False, "rows": "not fitted (--init-output is not fitted)", "bias": None}
    report: dict = {"fitted": False, "rows": what}
    if bias is None:
        return None, None, {**report, "bias": None}
    held = old_text_head(enc, tok, 1, opts.old_text_tokens)
    if held is None:
        return None, None, {**report, "bias": "mean"}
    if shared:
        start = torch.as_tensor(result.input_rows, dtype=torch.float64)
    else:
        start = output_prior(opts.output_start, out.weight.detach(), tokens)
    mean_bias = float(bias.double().mean())
    b0 = torch.full((len(tokens),), mean_bias, dtype=torch.float64)
    W, b = start, b0
    mask_id = getattr(tok, "mask_token_id", None)
    masked = None
    if mask_id is None:
        report["note"] = "the tokenizer has no mask token: the rows are not fitted on masked positions"
    elif any(w.runs for w in windows):
        t1 = time.perf_counter()
        target = opts.target or ("corpus" if opts.corpus is not None else "model")
        t, logz, top, js = masked_contexts(enc, windows, result.input_rows, mask_id, max(opts.batch_size, 16))
        if target == "corpus":
            q = torch.ones(len(js), dtype=torch.float64)
        else:
            q = torch.tensor(word_probabilities(enc, windows, tokens, mask_id, max(opts.batch_size, 16)),
                             dtype=torch.float64)
        masked = MaskedData(t, logz, top, js, q)
        # where old tokens belong (q = 0): old text, unmasked and masked, weighted; the contexts' other
        # tokens, masked, weight 1 (as the causal fit's context positions)
        old_t, old_z = old_text_head(enc, tok, 0, opts.old_text_tokens)
        old_mt, old_mz = old_text_head(enc, tok, 0, opts.old_text_tokens, masked=True, seed=opts.seed)
        special = set(getattr(tok, "all_special_ids", []) or [])
        neg_t, neg_z = context_negatives(enc, windows, result.input_rows, mask_id, special,
                                         max(opts.batch_size, 16), opts.seed)
        weight = torch.cat([torch.full((len(old_z) + len(old_mz),), float(opts.old_text_weight), dtype=torch.float64),
                            torch.ones(len(neg_z), dtype=torch.float64)])
        l2 = opts.l2 if opts.l2 is not None else (MLM_L2_TIED if shared else MLM_L2_UNTIED)
        W, b, calls = fit_head_rows(masked, torch.cat([old_t, old_mt, neg_t]), torch.cat([old_z, old_mz, neg_z]),
                                    start, b0, l2, weight, opts.output_steps, say)
        bad = ~(torch.isfinite(W).all(1) & torch.isfinite(b))
        if bad.any():  # never write a non-finite row
            logger.warning("masked-LM head fit: %d row(s) not finite; they keep their start", int(bad.sum()))
            W[bad], b[bad] = start[bad], b0[bad]
        report.update({
            "fitted": True, "rows": ("fitted on masked positions, pulled toward the distilled input rows (tied)"
                                     if shared else f"fitted on masked positions from the {opts.output_start} rows"),
            "target": target, "l2": l2, "old_text_weight": opts.old_text_weight, "lbfgs_evaluations": calls,
            "masked_positions": int(len(js)), "old_text_positions": int(len(old_z)),
            "old_text_masked_positions": int(len(old_mz)), "context_masked_positions": int(len(neg_z)),
            "q_mean": float(q.mean()) if len(q) else None, "seconds": round(time.perf_counter() - t1, 3)})
    bound = kl_bound(len(tokens), enc.n)
    limit_mean = opts.kl_limit if opts.kl_limit is not None else bound
    limit_p99 = max(FIT_KL_P99, limit_mean)
    held_t, held_z = held
    # the limits on held-out old text, unmasked (as validation reads it) and masked (as a masked-LM is used;
    # not without a mask token)
    more = None
    if mask_id is not None:
        held_mt, held_mz = old_text_head(enc, tok, 1, opts.old_text_tokens, masked=True, seed=opts.seed)
        more = ((held_mt @ W.T).numpy(), held_mz.numpy())
    d, before, after = bias_shrink((held_t @ W.T).numpy(), held_z.numpy(), b.numpy(), limit_mean, limit_p99,
                                   more=(more,) if more and ENFORCE_MASKED else ())
    written = b - d
    if masked is not None:
        report["new_token"] = {"text": "the fit contexts, the word masked",
                               "start": new_token_figures(masked, start, b0),
                               "fitted": new_token_figures(masked, W, b),
                               "written": new_token_figures(masked, W, written)}
    base = "fitted" if report["fitted"] else "mean"
    report.update({
        "bias": base if d == 0 else f"{base} - shift", "bias_shift": d,
        "new_bias": {"mean": float(written.mean()), "min": float(written.min()), "max": float(written.max()),
                     "old_mean": mean_bias},
        "old_text_kl": {"text": "packaged corpus, odd paragraphs, unmasked", **kl_figures(after),
                        "before_shift": kl_figures(before), "bound": bound, "limit_mean": limit_mean,
                        "limit_p99": limit_p99, "enforced": True},
    })
    if more:
        report["old_text_kl_masked"] = {
            "text": f"packaged corpus, odd paragraphs, {MASK_SHARE:.0%} of the tokens masked", "enforced": ENFORCE_MASKED,
            **kl_figures(_kl(np.logaddexp.reduce(more[0] + written.numpy(), axis=1) - more[1], 0.0)),
            "before_shift": kl_figures(_kl(np.logaddexp.reduce(more[0] + b.numpy(), axis=1) - more[1], 0.0))}
    return (W.numpy() if report["fitted"] else None), written.numpy(), report
