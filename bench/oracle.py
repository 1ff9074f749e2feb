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
    (the loss of every token after position `start`, as validation scores it).

    The output rows alone are a convex problem (`_fit_output_rows`, to convergence). The input rows
    take Adam passes; with both, each pass of the input rows is followed by the output rows' optimum
    for them, until a pass gains under GAIN (a pass that loses is undone). The report: the loss (nats
    per token) before, after each pass and at the end, passes, seconds."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval().requires_grad_(False)
    emb, out = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    if emb.data_ptr() == out.data_ptr():
        raise ValueError(f"{ckpt}: the oracle needs untied rows (add --untie)")
    if getattr(model.config.get_text_config(), "final_logit_softcapping", None):
        raise ValueError(f"{ckpt}: soft-capped logits: the output rows' fit assumes logits = hidden . rows")
    names = {"input": _param_name(model, emb), "output": _param_name(model, out)}
    old = {"input": emb[:n_old], "output": out[:n_old]}  # frozen
    new = {"input": emb[n_old:].detach().clone().requires_grad_(True), "output": out[n_old:].detach().clone()}
    opt = torch.optim.Adam([new["input"]], lr=lr * float(old["input"].pow(2).mean().sqrt()))  # relative to the rows
    tokens = sum(len(s) - start for s in seqs)

    def loss_of(s: list[int]):
        x = torch.tensor([s])
        weights = {names[r]: torch.cat([old[r], new[r]]) for r in ROLES}
        logits = torch.func.functional_call(model, weights, args=(), kwargs={"input_ids": x}).logits[0]
        return torch.nn.functional.cross_entropy(logits[start - 1:-1], x[0, start:], reduction="sum")

    def settle() -> float:
        """The summed loss once the output rows (when trained) are at their optimum for the input rows."""
        if "output" in roles:
            before, after = _fit_output_rows(model, old["output"], new["output"], n_old, seqs, start, loss_of)
            report.setdefault("start_loss", round(before / tokens, 5))
            return after
        with torch.no_grad():
            return sum(float(loss_of(s)) for s in seqs)

    report = {"roles": sorted(roles), "sequences": len(seqs), "tokens": tokens}
    t0 = time.perf_counter()
    if "output" not in roles:
        with torch.no_grad():
            report["start_loss"] = round(sum(float(loss_of(s)) for s in seqs) / tokens, 5)
    best = settle()
    report["loss"] = [round(best / tokens, 5)]
    for _ in range(max_passes if "input" in roles else 0):
        kept = {r: new[r].detach().clone() for r in ROLES}
        for i in torch.randperm(len(seqs)).tolist():
            opt.zero_grad()
            (loss_of(seqs[i]) / len(seqs[i])).backward()
            opt.step()
        total = settle()
        report["loss"].append(round(total / tokens, 5))
        log.info("oracle pass %d: %.4f nats/token", len(report["loss"]) - 1, total / tokens)
        if total > best:  # undone
            with torch.no_grad():
                for r in ROLES:
                    new[r].copy_(kept[r])
            break
        gain, best = 1 - total / best, total
        if gain < GAIN:
            break
    report["final_loss"] = round(best / tokens, 5)
    report["passes"] = len(report["loss"]) - 1
    report["seconds"] = round(time.perf_counter() - t0, 1)
    with torch.no_grad():
        emb[n_old:] = new["input"]
        out[n_old:] = new["output"]
    model.save_pretrained(ckpt)
    return report


def _fit_output_rows(model, W_old, W_new, n_old: int, seqs, start: int, loss_of, steps: int = 200):
    """Fit the new output rows alone, in place: with the input rows fixed this is convex over hidden states
    that do not move. One forward pass keeps each scored position's hidden state, the log-sum-exp of its
    old logits and its target; L-BFGS then runs to convergence. Returns the summed loss before and after."""
    import torch

    hs = []
    hook = model.get_output_embeddings().register_forward_hook(lambda mod, args, result: hs.append(args[0][0]))
    with torch.no_grad():
        before = sum(float(loss_of(s)) for s in seqs)
    hook.remove()
    H = torch.cat([h[start - 1:-1] for h in hs]).detach()  # (tokens, hidden)
    target = torch.cat([torch.tensor(s[start:]) for s in seqs])  # (tokens,)
    with torch.no_grad():
        logz_old = torch.cat([torch.logsumexp(part @ W_old.T, -1) for part in H.split(256)])  # (tokens,)
        is_new = target >= n_old
        old_target = (H[~is_new] * W_old[target[~is_new]]).sum(-1).sum()
    W = W_new.detach().clone().requires_grad_(True)
    opt = torch.optim.LBFGS([W], lr=1, max_iter=steps, history_size=20, line_search_fn="strong_wolfe",
                            tolerance_grad=1e-9, tolerance_change=1e-12)

    def objective():
        opt.zero_grad()
        new_logits = H @ W.T  # (tokens, k)
        logz = torch.logaddexp(logz_old, torch.logsumexp(new_logits, -1))
        picked = new_logits[is_new].gather(1, (target[is_new] - n_old)[:, None])[:, 0]
        loss = logz.sum() - old_target - picked.sum()
        loss.backward()
        return loss

    opt.step(objective)
    after = float(objective().detach())
    with torch.no_grad():
        W_new.copy_(W)
    return before, after
