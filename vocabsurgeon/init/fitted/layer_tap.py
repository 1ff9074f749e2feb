"""The hidden states after a causal model's first D decoder layers: where input distillation matches.

A model reads a multi-piece word into one vector in its first layers, so matching the states after D
layers gives the later layers what the pieces gave them, and each step runs D layers only. `LayerTap`
hooks the D-th layer, reads its output through the model's final norm and can stop the forward there.
"""

from __future__ import annotations

from ...errors import InputError


def decoder_layers(base_model):
    """The base model's decoder layers: its ModuleList as long as the config's layer count, or None."""
    import torch

    n = getattr(base_model.config, "num_hidden_layers", None)
    for module in base_model.modules():
        if isinstance(module, torch.nn.ModuleList) and n and len(module) == n:
            return module
    return None


def final_norm(base_model):
    """The norm the base model applies after its decoder layers (LlamaModel.norm, GPT2Model.ln_f, ...):
    its last child module registered after the layers whose class is a norm, or None."""
    layers = decoder_layers(base_model)
    after, found = False, None
    for module in base_model.children():
        if module is layers:
            after = True
        elif after and type(module).__name__.endswith("Norm"):
            found = module
    return found


def layers_for(base_model, share: float) -> int | None:
    """How many decoder layers distillation runs for a `share` of the model's depth (at least 1), or
    None for all of them (a share of 1, or a model whose decoder layers are not found: then the
    last hidden state is matched, as `share` 1 does)."""
    if not 0 < share <= 1:
        raise InputError(f"fit depth {share}: must be a share of the model's layers in (0, 1]")
    layers = decoder_layers(base_model)
    if layers is None or share >= 1:
        return None
    return max(1, min(len(layers), round(share * len(layers))))


def cut_before(h, starts: list[int]) -> None:
    """Stop the backward through `h` (B, T, hidden) at the positions before `starts[b]` in row b:
    positions that read old ids only never reach a new row, and their gradient can only overflow
    (see prefix_cache.full_hidden)."""
    import torch

    if h.requires_grad:
        old = (torch.arange(h.shape[1], device=h.device)[None, :]
               < torch.tensor(starts, device=h.device)[:, None])[..., None]  # (B, T, 1)
        h.register_hook(lambda g: g.masked_fill(old, 0))


class _Stop(Exception):
    """Raised by the tap's hook to end a forward after the tapped layer."""


def unit_rms(h):
    """Each position's vector scaled to root-mean-square 1 (float32): the read of a model whose final
    norm is not found."""
    h = h.float()
    return h * (h.pow(2).mean(-1, keepdim=True) + 1e-12).rsqrt()


class LayerTap:
    """Within `with LayerTap(base_model, depth, stop) as tap`, `tap.run(forward)` calls `forward()` (a
    forward of `base_model`) and returns its result; `tap.h` is then the output of decoder layer
    `depth` (1-based) through the final norm. With `stop`, the forward ends there (`run` returns None).

    `cut`, a list of positions per batch row: the backward stops at each tapped layer's output before
    those positions (see prefix_cache.full_hidden: positions that never reach a new row, whose
    gradient can only overflow)."""

    def __init__(self, base_model, depth: int, stop: bool = True, cut: list[int] | None = None):
        self.layers = decoder_layers(base_model)
        self.norm = final_norm(base_model) or unit_rms
        self.depth, self.stop, self.cut = depth, stop, cut
        self.h = None
        self._hooks = []

    def __enter__(self):
        def keep(module, args, output):
            h = output[0] if isinstance(output, tuple) else output
            self.h = self.norm(h).float()
            if self.stop:
                raise _Stop

        def masked(module, args, output):
            cut_before(output[0] if isinstance(output, tuple) else output, self.cut)

        if self.cut is not None:
            self._hooks += [layer.register_forward_hook(masked) for layer in self.layers[:self.depth]]
        self._hooks.append(self.layers[self.depth - 1].register_forward_hook(keep))
        return self

    def run(self, forward):
        self.h = None
        try:
            return forward()
        except _Stop:
            return None

    def __exit__(self, *exc):
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
