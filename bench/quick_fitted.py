"""Bits per byte of fitted runs alone, without the rest of validation: for a loaded machine.

    python -m bench.quick_fitted --model gemma3 --words 60 --runs mean fitted "fitted --untie"

fitted_bench.py's runs and domain, measured with validation's own usability figure only (the
held-out paragraphs that use the words, up to validation's 2,048 tokens, bits per byte of the new
model and tokenization over the original's), skipping the KL, sampling and chat checks that take
most of `validate` on a 262k-row model. The fit's own held-out old-text KL (before and after its
shrink, and the bound) is reported from `--json`'s fitted report.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

from bench import common
from bench import domain
from bench import fitted_bench
from bench import real_model

from vocabsurgeon import add_tokens, read_tokens_file
from vocabsurgeon.runtime import context_length, corpus_windows, encode, load_tokenizer, loaded_model
from vocabsurgeon.validation.measure import NewIds, _bits, usability_texts


def bits(ckpt: Path, tok, paragraphs: list[str], new: NewIds | None) -> float:
    with loaded_model(ckpt, "cpu") as lm:
        prefix, window = lm.prefix(tok), context_length(lm)
        seqs = [w for p in paragraphs for w in corpus_windows(encode(tok, p), prefix, window)]
        return _bits(lm, seqs, len(prefix), new)[0]


def main() -> int:
    ap = common.runs_parser(__doc__, fitted_bench.RUNS)
    ap.add_argument("--model", default="smollm2", choices=list(real_model.MODELS))
    args = ap.parse_args()
    src = real_model.build(args.work, args.model)
    tokens = args.work / f"domain-words-{src.name}-{args.words}.txt"
    if tokens.exists():  # built by an earlier bench run (suggest takes minutes on a loaded machine)
        fit, held = args.work / "domain-fit.txt", args.work / "domain-held.txt"
    else:
        fit, held, tokens = domain.build(args.work, src, args.words)
    words = read_tokens_file(tokens)
    old_tok = load_tokenizer(src)
    n = len(old_tok)
    text = held.read_text(encoding="utf-8")
    rows, old_bits = [], {}
    for label in args.runs:
        options = {k: (str(fit) if v == "fit" else v) for k, v in fitted_bench.RUNS[label].items()}
        out = args.work / ("quick-" + label.replace(" ", "").replace("-", ""))
        shutil.rmtree(out, ignore_errors=True)
        before = common.uptime()
        t = time.perf_counter()
        result = add_tokens(src, out, words, device="cpu", **options).to_dict()
        seconds = time.perf_counter() - t
        new_tok = load_tokenizer(out)
        new = NewIds(n)
        usable = usability_texts(text, new_tok, new, 2048)
        key = tuple(usable)
        if key not in old_bits:
            old_bits[key] = bits(src, old_tok, usable, None)
        new_bits = bits(out, new_tok, usable, new)
        fitted = result.get("fitted") or {}
        kl = (fitted.get("output") or {}).get("old_text_kl") or {}
        row = {"init": label, "ratio": new_bits / old_bits[key], "bpb_old": old_bits[key] / sum(len(p.encode()) for p in usable),
               "paragraphs": len(usable), "add_seconds": round(seconds, 1), "held_kl_mean": kl.get("mean"),
               "held_kl_before_shrink": (kl.get("before_shrink") or {}).get("mean"), "bound": kl.get("bound"),
               "input": {k: (fitted.get("input") or {}).get(k) for k in ("held_out_loss", "passes", "prefix_cache",
                                                                         "skipped", "seconds")},
               "uptime_before": before, "uptime_after": common.uptime()}
        rows.append(row)
        print(json.dumps(row), flush=True)
        shutil.rmtree(out)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
