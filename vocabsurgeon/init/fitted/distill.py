"""Input rows of `--init fitted` on a causal LM by distillation (AweDist, 2025).

The model reading a new token must give the hidden states it gives on the word's pieces, at the
positions from the first new token on; Adam over the new rows only (`common.adam_passes`). A
step runs the first layers only (`layer_tap.LayerTap`, at the depth causal.py chooses) and only
the part of each window after its cached start (`prefix_cache.PrefixCache`). `m` is fitted's frozen
model (`fitted._Model`: E, n, hidden(), model, device) and `teacher` its pass over the windows
(`fitted._Teacher`), duck-typed here so that this module does not import fitted.py.
"""

from __future__ import annotations

import logging

from .common import Window, adam_passes, new_token_embeds, pad_batch
from ...progress import Steps
from .layer_tap import LayerTap
from .prefix_cache import full_hidden

logger = logging.getLogger(__name__)


def distill_input_rows(m, windows: list[Window], teacher, start, steps: int | None, batch: int,
                       lr: float, seed: int, say: Steps, passes: int = 3, depth: int | None = None):
    """Input rows such that the model reading new tokens gives the hidden states it gives on their
    pieces, at the aligned positions from the first new token on (MSE relative to |h|^2), by
    `common.adam_passes` (passes over the windows, held-out windows keep the best pass).

    The hidden states are the last ones, or with `depth` those after the first `depth` decoder
    layers (through the final norm, `teacher.at_depth`): each step then runs only those layers (layer_tap.py).

    Each step runs only the part of each window from its first new token: the keys and values of
    what comes before are computed once (`prefix_cache.PrefixCache`, checked against full windows on
    the first batch; full windows when they differ), and a batch holds windows of similar lengths
    (`common.length_batches`): padding costs as much as real positions.

    Returns:
        (rows (k, hidden) float64, a report: steps, passes, held-out loss per pass, skipped steps,
        whether the prefix cache was used).
    """
    import torch

    rms = float(m.E.float().pow(2).mean().sqrt())
    usable = [i for i, w in enumerate(windows) if w.runs]
    target = teacher.at_depth if depth else teacher.h
    h2 = float(torch.cat([target[i] for i in usable]).pow(2).sum(-1).mean()) if usable else 1.0
    pieces = [w.new_ids(m.n) for w in windows]
    aligned = [w.aligned() for w in windows]
    first = {i: windows[i].runs[0].start for i in usable}  # the first new token's position, old and new ids alike

    def states(part, R, cache):
        """(hidden states, offset of each row's first position) of the windows `part` read with rows R."""
        skip = [first[i] if cache is not None else 0 for i in part]
        ids, mask = pad_batch([pieces[i][s:] for i, s in zip(part, skip)], 0, m.device)
        emb = new_token_embeds(m.model.get_input_embeddings(), ids, R)  # through the embedding's own forward
        starts = [first[i] for i in part]
        if depth:  # the first `depth` layers only; on full windows the backward stops before the first new token
            with LayerTap(m.model.base_model, depth, stop=True, cut=starts if cache is None else None) as tap:
                tap.run(lambda: m.hidden(None, mask, embeds=emb) if cache is None else cache.hidden(part, emb, mask))
            return tap.h, skip
        # full windows: the backward stops at the positions before the first new token, as on the cache
        h = full_hidden(m.model.base_model, emb, mask, starts) if cache is None else cache.hidden(part, emb, mask)
        return h.float(), skip

    def batch_loss(part, R, cache=None):
        h, skip = states(part, R, cache)
        loss, count = 0.0, 0
        for b, (i, s) in enumerate(zip(part, skip)):
            olds, news = aligned[i]
            loss = loss + ((h[b, [n - s for n in news]] - target[i][olds].to(m.device)) ** 2).sum()
            count += len(olds)
        return loss / (count * h2)

    if usable and not _reads_as_ids(states, usable[:batch], first, target, start, m.device, m.E.dtype):
        logger.warning("input distillation skipped: %s reads rows given as inputs_embeds otherwise than its ids; "
                       "the input rows keep the sub-word mean", type(m.model).__name__)
        return start.double().cpu(), {"steps": 0, "passes": 0, "prefix_cache": False,
                                      "skipped": "the model reads inputs_embeds otherwise than its ids"}
    cache = _checked_prefix_cache(m, windows, usable[:batch], first, batch, states, start, teacher.prefix_kv,
                                  depth) if usable else None
    lengths = [len(p) - (first.get(i, 0) if cache is not None else 0) for i, p in enumerate(pieces)]
    rows, report = adam_passes(start, rms, usable, lambda part, R: batch_loss(part, R, cache), steps, batch, lr, seed,
                               say, passes, m.device, lengths)
    report["prefix_cache"] = cache is not None
    return rows, report


def _reads_as_ids(states, probe: list[int], first: dict[int, int], target, start, device, dtype=None) -> bool:
    """Whether the student pass (rows given as inputs_embeds) gives the teacher's hidden states
    (from ids) at the positions of `probe`'s windows before their first new token, where both read
    the same old ids. A model whose forward does more with ids than look up its embedding module
    (scaling them outside it, or reading the ids again) cannot be distilled through inputs_embeds.
    `dtype`: what the model runs in (the tolerance, `PrefixCache.agrees`)."""
    import torch

    from .prefix_cache import PrefixCache

    with torch.no_grad():
        h, _ = states(probe, start.float().to(device), None)
    olds = [(b, p) for b, i in enumerate(probe) for p in range(first[i])]
    if not olds:
        return True
    got = torch.stack([h[b, p] for b, p in olds]).float()
    want = torch.stack([target[probe[b]][p] for b, p in olds]).to(got.device)
    return PrefixCache.agrees(got, want, dtype)


def _checked_prefix_cache(m, windows: list[Window], probe: list[int], first: dict[int, int], batch: int,
                          states, start, kv: dict | None = None, depth: int | None = None):
    """The windows' prefixes run once (`kv`: their keys and values from the teacher pass, when it kept
    every one), or None when a cached pass over `probe` differs from the full one (or the model
    cannot take a cache): then distillation runs full windows."""
    import torch

    from .prefix_cache import PrefixCache

    try:
        cache = PrefixCache(m.model.base_model, {i: kv[i] for i in first if i in kv}) if kv else None
        if cache is None or cache.lengths != first:  # the teacher did not keep these prefixes: run them
            cache = PrefixCache.run(m.model.base_model, {i: windows[i].old[:s] for i, s in first.items()}, batch,
                                    m.device, depth)
        with torch.no_grad():
            R = start.float().to(m.device)
            cached, skip = states(probe, R, cache)
            full, _ = states(probe, R, None)
        rows = [(b, n) for b, (i, s) in enumerate(zip(probe, skip)) for n in range(s, len(windows[i].new_ids(m.n)))]
        got = torch.stack([cached[b, n - skip[b]] for b, n in rows])
        want = torch.stack([full[b, n] for b, n in rows])
    except Exception as e:  # noqa: BLE001 - any failure only costs speed: the full windows give the same rows
        logger.info("distillation runs full windows: the prefix cache failed (%s: %s)", type(e).__name__, e)
        return None
    if not PrefixCache.agrees(got, want, m.E.dtype):
        logger.info("distillation runs full windows: the cached pass differs from the full one on %s",
                    type(m.model).__name__)
        return None
    return cache
