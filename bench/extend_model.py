"""`vocabsurgeon extend` on a real model: new-language bits per byte of held-out text per init, old-text KL, time.

    python -m bench.extend_model --model smollm2 --lang ru --sizes 1000 --results bench/RESULTS.md
    python -m bench.extend_model --model smollm2 --lang ru --sizes 8000 --runs fitted --results bench/RESULTS.md
    python -m bench.extend_model --model gemma3 --lang ru --sizes 8000 --results bench/RESULTS.md

Each run is one `vocabsurgeon extend --no-validate` in its own process (wall time, CPU time, peak RSS) on
the real Debian-package corpus of `bench/extend_bench.py` (translated messages and manual pages; every tenth
paragraph held out, never used to learn), with `--init` mean, subword-mean or fitted (`--fit-corpus`: the
learning corpus itself, the text a user has at hand). Then, in this process:
- bits per byte of a held-out sample (seeded, `--held-bytes` of held-out paragraphs), scored as validation and
  `bench.quick_fitted` score it (`quick_fitted.bits`: each paragraph after the model's prefix): the new model
  with the new tokenizer over the ORIGINAL model with the original tokenizer, the same bytes (x1.000: as
  good as the original; lower is better);
- old-text KL(p_old || p_new) on validation's own corpus (the packaged English text, original tokenization),
  as validation's one-pass method computes it (the original's logits are the expanded model's first n),
  against the mean-init bound log(1 + k/n) and validation's limits (max of 0.05 / 0.5 and the bound).
Rows accumulate in `--json` across invocations (by model, language, N, init); the `--results` block keeps the
lines of rows that this machine has no JSON of (runs made elsewhere). For `subword-mean-shrunk` (extend's
default) the init cell gives the shrink factor a and "of which the fit" the shrink's time. On a shared, loaded machine run
it with `OMP_NUM_THREADS=1` (the children inherit it): two torch threads that wait for cores other processes
hold cost ten times the CPU of one (bench/RESULTS.md, "extend on a real model").
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import sys
from pathlib import Path

import numpy as np

from bench import common
from bench import extend_bench
from bench import quick_fitted
from bench import real_model

HERE = Path(__file__).resolve().parent
SCRATCH = common.WORK / "extend-model"
# label -> extend's options ("corpus": the learning corpus's path)
RUNS = {
    "mean": {"init": "mean"},
    "subword-mean": {"init": "subword-mean"},
    "subword-mean-shrunk": {"init": "subword-mean-shrunk"},  # extend's default since issue 40
    "fitted": {"init": "fitted", "fit-corpus": "corpus"},
    "fitted, 5 output steps": {"init": "fitted", "fit-corpus": "corpus", "fit-output-steps": 5},
    "fitted, no corpus": {"init": "fitted"},
    "fitted --untie": {"init": "fitted", "untie": True, "fit-corpus": "corpus"},
}
MAX_KL_MEAN, MAX_KL_P99 = 0.05, 0.5  # validation's default limits (Thresholds), raised to the bound when larger


def markers(model: str) -> tuple[str, str]:
    return f"<!-- extend-model-{model}:begin -->", f"<!-- extend-model-{model}:end -->"


def held_sample(held: list[str], n_bytes: int, seed: int = 0) -> list[str]:
    """Held-out paragraphs in a seeded order until `n_bytes` UTF-8 bytes: short messages and manual pages alike."""
    order = list(range(len(held)))
    random.Random(seed).shuffle(order)
    out, size = [], 0
    for i in order:
        if size >= n_bytes:
            break
        out.append(held[i])
        size += len(held[i].encode())
    return out


def extend_command(src: Path, out: Path, corpus: Path, n: int, options: dict) -> list[str]:
    cmd = common.vocabsurgeon_command() + ["-q", "extend", "--corpus", str(corpus), "--new-tokens", str(n), "--json",
                                           "--no-validate", "--device", "cpu", "--force"]
    for key, value in options.items():
        cmd += [f"--{key}"] if value is True else [f"--{key}", str(corpus) if value == "corpus" else str(value)]
    return cmd + [str(src), str(out)]


def old_text_kl(ckpt: Path, old_tok, n: int) -> np.ndarray:
    """KL(p_old || p_new) per position of validation's default corpus, one pass (validation's own method)."""
    from vocabsurgeon.kl import kl_per_position
    from vocabsurgeon.corpus import read_corpus
    from vocabsurgeon.runtime import context_length, corpus_windows, encode, loaded_model

    text = read_corpus(None)[0]
    with loaded_model(ckpt, "cpu") as lm:
        seqs = corpus_windows(encode(old_tok, text), lm.prefix(old_tok), context_length(lm))
        return np.concatenate([kl_per_position(lg[:, :n], lg) for lg in map(lm.logits, seqs)])


def run(label: str, src: Path, corpus: Path, n: int, sample: list[str], args, old_bits: dict) -> dict:
    from vocabsurgeon.kl import kl_bound, kl_figures
    from vocabsurgeon.runtime import load_tokenizer
    from vocabsurgeon.validation.measure import NewIds

    name = f"{args.model}-{args.lang}-{n}-" + "".join(c for c in label if c.isalnum())
    out = SCRATCH / name
    shutil.rmtree(out, ignore_errors=True)
    log = SCRATCH / f"{name}.log"
    before = common.uptime()
    sample_run = common.measure(extend_command(src, out, corpus, n, RUNS[label]), log)
    after = common.uptime()
    text = log.read_text()
    summary = json.JSONDecoder().raw_decode(text[text.index("{"):])[0]
    old_tok, new_tok = load_tokenizer(src), load_tokenizer(out)
    k = len(new_tok) - len(old_tok)
    scored = hashlib.sha256("\n\n".join(sample).encode()).hexdigest()
    cache = SCRATCH / f"{args.model}-original-bits.json"  # the original's bits of each scored sample
    if scored not in old_bits and cache.exists():  # a run beside this one may have scored it meanwhile
        old_bits.update(json.loads(cache.read_text()))
    if scored not in old_bits:
        old_bits[scored] = quick_fitted.bits(src, old_tok, sample, None)[0]
        cache.write_text(json.dumps({**(json.loads(cache.read_text()) if cache.exists() else {}), **old_bits}))
    new_bits, seqs, start = quick_fitted.bits(out, new_tok, sample, NewIds(len(old_tok)))
    from vocabsurgeon.runtime import encode

    tokens_old = sum(len(encode(old_tok, p)) for p in sample)
    kl = kl_figures(old_text_kl(out, old_tok, len(old_tok)))
    bound = kl_bound(k, len(old_tok))
    n_bytes = sum(len(p.encode()) for p in sample)
    fitted = summary.get("fitted") or summary.get("shrink") or {}  # the model's part: a fit, or the shrink
    fit_kl = (fitted.get("output") or {}).get("old_text_kl") or {}
    fit_seconds = {part: (fitted.get(part) or {}).get("seconds") for part in ("input", "output")}
    if not args.keep:
        shutil.rmtree(out)
    return {"model": args.model, "lang": args.lang, "n": n, "new_tokens": k, "init": label,
            "ratio": new_bits / old_bits[scored], "bpb_old": old_bits[scored] / n_bytes, "bpb_new": new_bits / n_bytes,
            "paragraphs": len(sample), "bytes": n_bytes, "tokens_old": tokens_old,
            "tokens_new": sum(len(s) - start for s in seqs), "kl": kl, "bound": bound,
            "within_limits": kl["mean"] <= max(MAX_KL_MEAN, bound) and kl["p99"] <= max(MAX_KL_P99, bound),
            "fit_old_text_kl": fit_kl or None, "fit_seconds": {"all": fitted.get("seconds"), **fit_seconds},
            "fit_contexts": fitted.get("contexts"),
            "shrink": ((fitted.get("output") or {}).get("shrink") or {}).get("a") if "shrink" in summary else None,
            "seconds": round(sample_run.wall, 1), "cpu_seconds": round(sample_run.cpu or 0.0, 1),
            "peak_rss": sample_run.rss, "uptime_before": before, "uptime_after": after,
            "corpus_bytes": (summary.get("extend") or {}).get("corpus_bytes")}


def key(row: dict) -> tuple:
    return row["model"], row["lang"], row["n"], row["init"]


def kept_lines(results: Path, model: str) -> dict[tuple, str]:
    """The table lines of `model`'s block in `results` by row key (model, language, N, init): the rows of runs
    made elsewhere, whose JSON this machine lacks, stay in the block beside the rows run here."""
    begin, end = markers(model)
    text = results.read_text(encoding="utf-8") if results.exists() else ""
    if begin not in text or end not in text:
        return {}
    out = {}
    for line in text.split(begin, 1)[1].split(end, 1)[0].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 4 and cells[0] == model and cells[3].split(" (a = ")[0] in RUNS:
            out[(cells[0], cells[1], int(cells[2].replace(",", "")), cells[3].split(" (a = ")[0])] = line
    return out


def table(rows: list[dict], model: str, kept: dict[tuple, str] | None = None) -> str:
    """The block's text: `rows` (run here) and the `kept` lines of other rows (`kept_lines`), in order."""
    here = {key(r) for r in rows}
    lines_of = {k: line for k, line in (kept or {}).items() if k not in here}
    rows = sorted(rows, key=lambda r: (r["lang"], r["n"], list(RUNS).index(r["init"])))
    first = rows[0]
    lines = [f"{real_model.MODELS[model].description}; `extend --no-validate` from the learning corpus of "
             "`bench/extend_bench.py` (Debian's translated messages and manual pages, every tenth paragraph held "
             f"out), {common.machine_line()}, each run niced in its own process. Bits per byte: a seeded sample of "
             f"the held-out paragraphs ({first['paragraphs']:,} paragraphs, {first['bytes']:,} bytes per language), "
             "the new model and tokenization over the original model and tokenization (x1.000: as good as the "
             "original; lower is better). Old-text KL: validation's corpus (packaged English text), one pass, "
             "against the mean-init bound log(1 + k/n) and validation's limits (mean 0.05, p99 0.5, or the bound "
             "when larger).",
             "", "| model | text | N | init | held-out tokens/byte, original -> new | bits/byte vs original (original "
             "bits/byte) | old-text KL mean / p99 / max (bound) | within validation's limits | `extend` wall s (CPU s) "
             "| of which the fit s | peak RSS MB | load average |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    body = []
    for r in rows:
        kl = r["kl"]
        load = f"{common.load_average(r['uptime_before'])}-{common.load_average(r['uptime_after'])}"
        fit = (r.get("fit_seconds") or {}).get("all")
        tpb = f"{r['tokens_old'] / r['bytes']:.3f} -> {r['tokens_new'] / r['bytes']:.3f}"
        init = r["init"] + (f" (a = {r['shrink']:.3g})" if r.get("shrink") is not None else "")
        body.append((key(r), f"| {r['model']} | {r['lang']} | {r['n']:,} | {init} | {tpb} | x{r['ratio']:.3f} "
                     f"({r['bpb_old']:.3f}) "
                     f"| {kl['mean']:.3g} / {kl['p99']:.3g} / {kl['max']:.3g} ({r['bound']:.3g}) | "
                     f"{'yes' if r['within_limits'] else 'no'} | {r['seconds']:.0f} ({r['cpu_seconds']:.0f}) | "
                     f"{'-' if fit is None else f'{fit:.0f}'} | "
                     f"{r['peak_rss'] / 2**20:.0f} | {load} |"))
    body += list(lines_of.items())
    body.sort(key=lambda kv: (kv[0][1], kv[0][2], list(RUNS).index(kv[0][3])))
    return "\n".join(lines + [line for _, line in body])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2", choices=list(real_model.MODELS))
    ap.add_argument("--lang", default="ru", choices=["ru", "ja"])
    ap.add_argument("--sizes", type=int, nargs="*", default=[1000])
    ap.add_argument("--runs", nargs="*", default=["mean", "subword-mean", "fitted"], choices=list(RUNS))
    ap.add_argument("--held-bytes", type=int, default=16384, help="bytes of held-out paragraphs scored")
    ap.add_argument("--work", type=Path, default=common.WORK, help="where the real models are built")
    ap.add_argument("--keep", action="store_true", help="keep each run's output checkpoint")
    ap.add_argument("--results", type=Path, help="write the model's table into this markdown file")
    ap.add_argument("--json", type=Path, help="the rows, kept across invocations (default: in bench/work)")
    args = ap.parse_args(argv)
    src = real_model.build(args.work, args.model)
    SCRATCH.mkdir(parents=True, exist_ok=True)
    store = args.json or SCRATCH / f"{args.model}.json"
    extend_bench.WORK = SCRATCH  # the corpus file is this bench's own: extend_bench's runs rewrite theirs
    corpus, held = extend_bench.corpus(args.lang)
    sample = held_sample(held, args.held_bytes)
    old_bits: dict = {}
    for n in args.sizes:
        for label in args.runs:
            row = run(label, src, corpus, n, sample, args, old_bits)
            print(json.dumps(row), flush=True)
            rows = json.loads(store.read_text()) if store.exists() else []  # with the rows of runs beside this one
            rows = [r for r in rows if key(r) != key(row)] + [row]
            store.write_text(json.dumps(rows, indent=2))
            if args.results:
                begin, end = markers(args.model)
                text = table([r for r in rows if r["model"] == args.model], args.model,
                             kept_lines(args.results, args.model))
                common.write_block(args.results, f"{begin}\n{text}\n{end}", begin, end,
                                   heading=f"extend on a real model: bits per byte per init ({args.model}, issue 40)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
