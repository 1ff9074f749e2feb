"""The attainable figure for row-only inits: the new rows trained on the held-out paragraphs themselves.

    python -m bench.oracle --model gemma3 --words 60          # Gemma 3 270M (bench/real_model.py)
    python -m bench.oracle --model smollm2 --words 60         # SmolLM2-135M-Instruct
    python -m bench.oracle --json bench/work/oracle.json

No init that sets only the new rows can do better on that text than rows trained on it: the model
(every old weight frozen) after `add --init mean --untie`, and its new input and output rows alone
trained by Adam on the next-token loss of bench/domain.py's held-out paragraphs in the new
tokenization, until a pass over them gains under 0.1% (or `--max-passes`). Its bits per byte are
measured as `validate` measures every init (`validate_checkpoint` against the original), so that
fitted's share of the gap, (mean - fitted) / (mean - oracle), compares like with like. The old-text
KL is reported, not bounded: the oracle ignores it. New rows enter the model through its own input
embedding module's forward (Gemma scales them there).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from bench import common
from bench import domain
from bench import real_model

from vocabsurgeon import add_tokens, read_tokens_file, validate_checkpoint

WINDOW = 256  # tokens per training window (the held-out paragraphs run in these)


def train_rows(ckpt: Path, n_old: int, text: str, max_passes: int, lr: float, seed: int) -> dict:
    """Train the new rows (ids from `n_old` on) of the untied checkpoint `ckpt` on `text`, in place."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(ckpt)
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval().requires_grad_(False)
    emb, out = model.get_input_embeddings(), model.get_output_embeddings()
    assert emb.weight.data_ptr() != out.weight.data_ptr(), "the oracle needs untied rows"
    E_old, W_old = emb.weight[:n_old], out.weight[:n_old]  # frozen
    E_new = emb.weight[n_old:].detach().clone().requires_grad_(True)  # (k, hidden)
    W_new = out.weight[n_old:].detach().clone().requires_grad_(True)
    k = E_new.shape[0]
    bos = [tok.bos_token_id] if tok.bos_token_id is not None else []
    ids = tok(text, add_special_tokens=False).input_ids
    cfg = model.config.get_text_config()
    step = min(WINDOW, getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", WINDOW)) - len(bos)
    windows = [torch.tensor([bos + ids[i:i + step]]) for i in range(0, len(ids), step)]
    rms = float(E_old.pow(2).mean().sqrt())
    opt = torch.optim.Adam([E_new, W_new], lr=lr * rms)
    report = {"windows": len(windows), "tokens": len(ids), "loss": []}

    def loss_of(x):
        # the embedding module's own forward over the old rows and E_new (Gemma scales in it)
        table = torch.cat([E_old, E_new])
        h = model.base_model(inputs_embeds=torch.func.functional_call(emb, {"weight": table}, (x,))).last_hidden_state[0, :-1]
        logits = torch.cat([h @ W_old.T, h @ W_new.T], -1)
        return torch.nn.functional.cross_entropy(logits, x[0, 1:], reduction="sum")

    t0 = time.perf_counter()
    best = None
    for _ in range(max_passes):
        total = 0.0
        for i in torch.randperm(len(windows)).tolist():
            loss = loss_of(windows[i])
            opt.zero_grad()
            (loss / windows[i].shape[1]).backward()
            opt.step()
            total += float(loss)
        report["loss"].append(total / len(ids))
        print(f"pass {len(report['loss'])}: {report['loss'][-1]:.4f} nats/token", file=sys.stderr, flush=True)
        if best is not None and total > best * (1 - 1e-3):
            break
        best = total if best is None else min(best, total)
    report["seconds"] = round(time.perf_counter() - t0, 1)
    with torch.no_grad():
        emb.weight[n_old:] = E_new
        out.weight[n_old:] = W_new
    model.save_pretrained(ckpt)
    report["rows"] = k
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2", choices=list(real_model.MODELS))
    ap.add_argument("--words", type=int, default=60)
    ap.add_argument("--max-passes", type=int, default=30)
    ap.add_argument("--lr", type=float, default=0.02, help="Adam step, relative to the rms of the old input rows")
    ap.add_argument("--work", type=Path, default=Path(__file__).resolve().parent / "work")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    from transformers import AutoConfig

    src = real_model.build(args.work, args.model)
    fit, held, tokens = domain.build(args.work, src, args.words)
    words = read_tokens_file(tokens)
    before = common.uptime()
    out = args.work / f"oracle-{src.name}"
    if out.exists():
        shutil.rmtree(out)
    add_tokens(src, out, words, init="mean", untie=True, device="cpu")
    n_old = AutoConfig.from_pretrained(src).get_text_config().vocab_size
    report = train_rows(out, n_old, held.read_text(encoding="utf-8"), args.max_passes, args.lr, 0)
    use = validate_checkpoint(src, out, held, device="cpu")["usability"]
    kl = validate_checkpoint(src, out, None, device="cpu")["kl"]
    row = {"model": args.model, "words": len(words), "bpb_new": use["bpb_new"], "bpb_old": use["bpb_old"],
           "ratio": use["bpb_new"] / use["bpb_old"], "kl_mean": kl["mean"], "kl_p99": kl["p99"], "kl_bound": kl["bound"],
           **report, "uptime_before": before, "uptime_after": common.uptime()}
    print(json.dumps({k: v for k, v in row.items()}))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(row, indent=2))
    shutil.rmtree(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
