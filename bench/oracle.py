"""The attainable figure for row-only inits: new rows trained on the measured text itself.

No init that sets only the new rows can do better on a text than rows trained on that text. `train_rows`
takes an untied checkpoint (written by `add --untie`), freezes every old weight and trains its new
input rows, output rows or both by Adam on the next-token loss of the very sequences that
validation's bits-per-byte figure scores, until a pass gains under 0.1% (or `max_passes`), and
writes the best rows back. Run by bench/quick_fitted.py (`--runs oracle ...`), which measures the
result as it measures every init. The old-text KL is not bounded here: the oracle ignores it.
Rows go through the model's own forward (`functional_call`), so embedding scales (Gemma) and
logit soft-capping apply as in use.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

log = logging.getLogger(__name__)

ROLES = ("input", "output")
GAIN = 1e-3  # a pass that lowers the loss by less than this share ends the training


def _param_name(model, tensor) -> str:
    return next(n for n, p in model.named_parameters() if p is tensor)


def train_rows(ckpt: Path, n_old: int, seqs: list[list[int]], start: int, roles: set[str], max_passes: int,
               lr: float, seed: int = 0) -> dict:
    """Train the rows from `n_old` on of the untied checkpoint `ckpt` in place, for `roles`, on `seqs`
    (the loss of every token after position `start`, as validation scores it); the report: passes,
    loss per pass (nats per token), seconds."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval().requires_grad_(False)
    emb, out = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    if emb.data_ptr() == out.data_ptr():
        raise ValueError(f"{ckpt}: the oracle needs untied rows (add --untie)")
    names = {"input": _param_name(model, emb), "output": _param_name(model, out)}
    old = {"input": emb[:n_old], "output": out[:n_old]}  # frozen
    new = {r: w[n_old:].detach().clone().requires_grad_(r in roles) for r, w in (("input", emb), ("output", out))}
    opt = torch.optim.Adam([new[r] for r in roles if r in new], lr=lr)
    for group, r in zip(opt.param_groups, [r for r in ROLES if r in roles]):
        group["lr"] = lr * float(old[r].pow(2).mean().sqrt())  # a step relative to the size of the rows
    tokens = sum(len(s) - start for s in seqs)

    def loss_of(s: list[int]):
        x = torch.tensor([s])
        weights = {names[r]: torch.cat([old[r], new[r]]) for r in ROLES}
        logits = torch.func.functional_call(model, weights, args=(), kwargs={"input_ids": x}).logits[0]
        return torch.nn.functional.cross_entropy(logits[start - 1:-1], x[0, start:], reduction="sum")

    report = {"roles": sorted(roles), "sequences": len(seqs), "tokens": tokens, "loss": []}
    t0 = time.perf_counter()
    for _ in range(max_passes):
        total = 0.0
        for i in torch.randperm(len(seqs)).tolist():
            loss = loss_of(seqs[i])
            opt.zero_grad()
            (loss / len(seqs[i])).backward()
            opt.step()
            total += float(loss)
        report["loss"].append(round(total / tokens, 5))
        log.info("oracle pass %d: %.4f nats/token", len(report["loss"]), total / tokens)
        if len(report["loss"]) > 1 and report["loss"][-1] > report["loss"][-2] * (1 - GAIN):
            break
    with torch.no_grad():
        report["final_loss"] = round(sum(float(loss_of(s)) for s in seqs) / tokens, 5)
        emb[n_old:] = new["input"]
        out[n_old:] = new["output"]
    report["passes"] = len(report["loss"])
    report["seconds"] = round(time.perf_counter() - t0, 1)
    model.save_pretrained(ckpt)
    return report
