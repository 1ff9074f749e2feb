"""The frozen start of each distillation window, run once: its keys and values, reused at every step.

Positions before a window's first new token read old ids only, so their keys and values are the same at
every Adam step; each step then runs from the first new token on, exactly. Cache APIs differ between
transformers versions and architectures, so `PrefixCache.agrees` checks the cached pass against the full
one and the fit falls back to full windows when they differ.
"""

from __future__ import annotations

import inspect
import logging

from .common import pad_batch
from .layer_tap import cut_before
from ...runtime import cache_argument, returned_cache

logger = logging.getLogger(__name__)


def _layers(cache) -> list[tuple]:
    """[(keys, values)] per layer, each (B, heads, T, head_dim), from a transformers cache of any version."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    if hasattr(cache, "to_legacy_cache"):
        return [tuple(kv[:2]) for kv in cache.to_legacy_cache()]
    return [tuple(kv[:2]) for kv in cache]


def _dynamic_cache(kv: list[tuple]):
    from transformers import DynamicCache

    if "ddp_cache_data" in inspect.signature(DynamicCache.__init__).parameters:
        return DynamicCache(ddp_cache_data=kv)
    return DynamicCache.from_legacy_cache(tuple(kv))


def window_prefixes(output, keep: dict[int, int], rows: list[int], layers: int | None = None) -> dict[int, list[tuple]]:
    """{window: [(keys, values)] per layer of its first `keep[window]` positions} from the cache a
    forward over a right-padded batch returned (`output`); `rows[b]` is the window in row b. A
    causal model's real positions never read the padding, so a prefix's keys and values are the
    ones a pass over that prefix alone gives. With `layers`, the first that many layers only: a
    distillation that stops after them reads no other (a cache of every layer of thousands of
    windows is gigabytes).

    Raises:
        ValueError: a layer's cache holds fewer positions than the pass ran (a sliding-window layer,
            as Gemma's, keeps only its last window): its first positions are not there to keep.
    """
    kv = _layers(returned_cache(output))
    ran = output.last_hidden_state.shape[1]
    if any(k.shape[2] != ran for k, _ in kv):
        raise ValueError(f"the cache holds {min(k.shape[2] for k, _ in kv)} of the {ran} positions run "
                         "(a sliding-window layer keeps only its window)")
    kv = kv[:layers] if layers else kv
    return {i: [(k[b, :, :keep[i]].clone(), v[b, :, :keep[i]].clone()) for k, v in kv]
            for b, i in enumerate(rows) if i in keep}


class PrefixCache:
    """Keys and values of each window's prefix (old ids), kept per window on the model's device.

    `kv[i]` is [(keys, values)] per layer, each (heads, positions, head_dim), for window i. The
    teacher pass over the old windows computes them on its way (fitted._teach, `window_prefixes`);
    `PrefixCache.run` computes them from the prefixes alone."""

    def __init__(self, base_model, kv: dict[int, list[tuple]]):
        self.base = base_model
        self.arg = cache_argument(base_model)
        self.kv = kv
        self.lengths = {i: (layers[0][0].shape[1] if layers else 0) for i, layers in kv.items()}

    @classmethod
    def run(cls, base_model, prefixes: dict[int, list[int]], batch: int, device,
            layers: int | None = None) -> "PrefixCache":
        """The cache of `prefixes[i]` (old ids) for each window i, computed in batches of `batch`
        (of the first `layers` layers only, when given: see `window_prefixes`)."""
        import torch

        keep = {i: len(p) for i, p in prefixes.items()}
        todo = [i for i, p in prefixes.items() if p]
        kv = {i: [] for i, p in prefixes.items() if not p}
        for s in range(0, len(todo), batch):
            part = todo[s:s + batch]
            ids, mask = pad_batch([prefixes[i] for i in part], 0, device)  # right-padded
            with torch.no_grad():
                out = base_model(input_ids=ids, attention_mask=mask, use_cache=True)
            kv.update(window_prefixes(out, keep, part, layers))
        return cls(base_model, kv)

    def hidden(self, part: list[int], embeds, mask):
        """(B, S, hidden) last hidden states of the windows' rest (`embeds`, right-padded, `mask`)
        after their cached prefixes: each prefix left-padded to the longest, masked out."""
        import torch

        B, S = mask.shape
        P = max(self.lengths[i] for i in part)
        if P == 0:
            return self.base(inputs_embeds=embeds, attention_mask=mask, use_cache=False).last_hidden_state
        some = next(self.kv[i] for i in part if self.lengths[i])
        kv = []
        for layer, (k0, v0) in enumerate(some):
            K = k0.new_zeros((B, k0.shape[0], P, k0.shape[2]))
            V = v0.new_zeros((B, v0.shape[0], P, v0.shape[2]))
            for b, i in enumerate(part):
                p = self.lengths[i]
                if p:
                    K[b, :, P - p:] = self.kv[i][layer][0]
                    V[b, :, P - p:] = self.kv[i][layer][1]
            kv.append((K, V))
        past = torch.zeros((B, P), dtype=mask.dtype, device=mask.device)
        for b, i in enumerate(part):
            past[b, P - self.lengths[i]:] = 1
        start = torch.tensor([self.lengths[i] for i in part], device=mask.device)
        positions = start[:, None] + torch.arange(S, device=mask.device)[None, :]
        out = self.base(inputs_embeds=embeds, attention_mask=torch.cat([past, mask], 1), position_ids=positions,
                        use_cache=True, **{self.arg: _dynamic_cache(kv)})
        return out.last_hidden_state

    @staticmethod
    def agrees(cached, full, dtype=None, tol: float | None = None) -> bool:
        """Whether hidden states of the cached pass match the full pass's, relative to their scale: within
        `tol`, by default 1e-4, or 8 eps of the `dtype` the model runs in when coarser (a bfloat16 model's
        two passes differ by an ulp or two of the largest state: 0.25 in 32 on SmolLM2-135M). A cache read
        wrong (other positions, a sliding window) moves states by their own size."""
        import torch

        if tol is None:
            tol = max(1e-4, 8 * torch.finfo(dtype).eps) if dtype is not None else 1e-4
        scale = max(1.0, float(full.abs().max()))
        return bool(torch.isfinite(cached).all()) and float((cached - full).abs().max()) <= tol * scale


def full_hidden(base_model, embeds, mask, starts: list[int]):
    """(B, T, hidden) last hidden states of full windows (`embeds`, right-padded, `mask`) whose
    backward stops at each layer's input at the positions before `starts[b]` (row b's first new token).

    Those positions read old ids only, so no gradient through them reaches the new rows: the cut
    changes no gradient of a new row, as the cached path never runs them backward either. It keeps
    the backward finite where a position's hidden state is exactly 0 in every layer: a first
    position whose embedding row is 0 (transformers zeroes the pad_token_id row of a new model; a
    random model whose pad is its BOS starts every window with it). Each norm's backward at 0
    multiplies by 1/sqrt(eps), so on a deep model that position's gradient overflows float32 from the
    top down, and the attention backward spreads it (0 * inf at masked entries) to every position and
    every new row (tools/nan_repro.py; bench/RESULTS.md).
    """
    import torch

    grad = torch.is_grad_enabled() and embeds.requires_grad
    out = base_model(inputs_embeds=embeds, attention_mask=mask, use_cache=False, output_hidden_states=grad)
    if grad:
        for h in out.hidden_states[1:]:
            cut_before(h, starts)
    return out.last_hidden_state
