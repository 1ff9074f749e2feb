"""Usability of new tokens per init: bits per byte on held-out text with the words, old-text KL, fitting time.

    python -m bench.usability                       # both trained fixtures, table on stdout
    python -m bench.usability --results bench/RESULTS.md --json bench/work/usability.json

For each model, the paragraphs of fixtures/corpus_lotr.txt are split: the first two thirds are the
fit corpus (`--fit-corpus`), the last third is held out. Each init writes a checkpoint with
`add_tokens` (the words of fixtures/lotr.txt), and `validate_checkpoint` measures it as `vocabsurgeon
validate` does: bits per byte of the new model and tokenization on the held-out paragraphs, as a
ratio to the original model and tokenization (x1.00 = as good as before; lower is better), and
KL(p_old || p_new) over fixtures/corpus.txt (none of the words) against the mean-init bound
log(1 + k/n). Fitting time is `fitted.fit_rows`'s own clock (model load, contexts, both fits).

The models are the committed trained fixtures (64-wide, 2 layers, 2,048 tokens), not a real-shaped
model: none can be downloaded or trained in the time on this machine. Their training text excluded
every paragraph that mentions a lotr word, so they have never seen the words, which is why even
mean init is below x1.00 here (each word's pieces cost more than one mean-init token does).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from bench import common
from vocabsurgeon import add_tokens, read_tokens_file, validate_checkpoint

REPO = Path(__file__).resolve().parent.parent

FIXTURES = REPO / "fixtures"
BEGIN, END = "<!-- usability:begin -->", "<!-- usability:end -->"

# (label, add options); "fit" is replaced by the fit corpus
RUNS = {
    "gpt2-tiny": [
        ("mean", {"init": "mean"}),
        ("sub-word mean", {"init": "subword-mean"}),
        ("fitted, tied", {"init": "fitted", "fit_corpus": "fit"}),
        ("fitted --untie", {"init": "fitted", "untie": True, "fit_corpus": "fit"}),
        ("fitted --untie, generated contexts", {"init": "fitted", "untie": True}),
    ],
    "llama-tiny": [
        ("mean", {"init": "mean"}),
        ("sub-word mean", {"init": "subword-mean"}),
        ("sub-word mean in, fitted out", {"init_input": "subword-mean", "init_output": "fitted", "fit_corpus": "fit"}),
        ("fitted (untied)", {"init": "fitted", "fit_corpus": "fit"}),
        ("fitted, generated contexts", {"init": "fitted"}),
    ],
}


def split_corpus(work: Path) -> tuple[Path, Path]:
    paras = [p for p in (FIXTURES / "corpus_lotr.txt").read_text(encoding="utf-8").split("\n\n") if p.strip()]
    cut = len(paras) * 2 // 3
    (work / "fit.txt").write_text("\n\n".join(paras[:cut]), encoding="utf-8")
    (work / "held.txt").write_text("\n\n".join(paras[cut:]), encoding="utf-8")
    return work / "fit.txt", work / "held.txt"


def measure(model: str, label: str, options: dict, fit: Path, held: Path, work: Path) -> dict:
    base = FIXTURES / model
    options = {k: (str(fit) if v == "fit" else v) for k, v in options.items()}
    out = work / f"{model}-{len(list(work.iterdir()))}"
    t = time.perf_counter()
    result = add_tokens(base, out, read_tokens_file(FIXTURES / "lotr.txt"), **options)
    seconds = time.perf_counter() - t
    use = validate_checkpoint(base, out, held, device="cpu")["usability"]
    kl = validate_checkpoint(base, out, FIXTURES / "corpus.txt", device="cpu")["kl"]
    d = result.to_dict()
    return {"model": model, "init": label, "options": options, "bpb_new": use["bpb_new"], "bpb_old": use["bpb_old"],
            "ratio": use["bpb_new"] / use["bpb_old"], "held_out_bytes": use["bytes"],
            "kl_mean": kl["mean"], "kl_p99": kl["p99"], "kl_max": kl["max"], "kl_bound": kl["bound"],
            "add_seconds": round(seconds, 2), "fit_seconds": (d.get("fitted") or {}).get("seconds"),
            "untie_bytes": (d.get("untied") or {}).get("bytes_added")}


def table(rows: list[dict]) -> str:
    lines = [("| model | init | bits/byte (original) | vs original tokenization | old-text KL mean / p99 / max "
              "(bound) | fitting s | add s |"), "|---|---|---|---|---|---|---|"]
    for r in rows:
        fit = f"{r['fit_seconds']:.1f}" if r["fit_seconds"] is not None else "-"
        lines.append(f"| {r['model']} | {r['init']} | {r['bpb_new']:.3f} ({r['bpb_old']:.3f}) | x{r['ratio']:.3f} | "
                     f"{r['kl_mean']:.4f} / {r['kl_p99']:.4f} / {r['kl_max']:.4f} ({r['kl_bound']:.4f}) | {fit} | "
                     f"{r['add_seconds']:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=list(RUNS), choices=list(RUNS))
    ap.add_argument("--results", type=Path, help="write the table into this markdown file, between the markers")
    ap.add_argument("--json", type=Path, help="write every figure here")
    args = ap.parse_args(argv)
    import torch

    # 64-wide models: intra-op threads only add OpenMP spin-waits (30-40x slower on a busy machine);
    # fit_rows does the same for narrow models, this covers the validations too.
    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        fit, held = split_corpus(work)
        outs = work / "out"
        outs.mkdir()
        for model in args.models:
            for label, options in RUNS[model]:
                rows.append(measure(model, label, options, fit, held, outs))
                print(f"{model} {label}: x{rows[-1]['ratio']:.3f}", file=sys.stderr)
    text = table(rows)
    print(text)
    common.publish(text, rows, args.results, args.json, BEGIN, END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
