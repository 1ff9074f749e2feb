"""The inits on a real model against the attainable figure, and fitted's time and memory at 10 to 1,000 words.

    python -m bench.quick_fitted --model smollm2 --words 60 --results bench/RESULTS.md
    python -m bench.quick_fitted --model gemma3 --words 60 --runs mean oracle --results bench/RESULTS.md
    python -m bench.quick_fitted --model smollm2 --scale 10 100 1000 --runs mean fitted --results bench/RESULTS.md
    python -m bench.quick_fitted --model smollm2 --words 60 --runs fitted "fitted --untie" --dtype bfloat16 --results ...

Each run is one `vocabsurgeon add --no-validate` in its own process (wall time and peak RSS) on
bench/domain.py's words and fit corpus, then validation's own usability figure alone: the held-out
paragraphs that use the words (up to validation's 2,048 tokens), bits per byte of the new model and
tokenization over the original's (x1.000: as good as before; lower is better). The `oracle` runs
train the new rows on those very sequences (bench/oracle.py): the attainable figure for an init
that sets only the new rows; each row's share of the gap is (mean - it) / (mean - oracle) at the
same words. `--scale` takes the first N of `suggest`'s top max(N) words on the larger domain (every stdlib file's
docstrings: the 41 modules give too few words). Rows accumulate in
`--json` (by model, words, run and dtype), so runs on separate invocations make one table per model.
`--dtype` is add's: the dtype the fit runs the model in (bfloat16: what a GPU runs a bf16 checkpoint in);
the figures are scored in float32 whatever the fit ran in, so that a row differs from its float32 row
by the fit alone.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import shutil
import sys
from pathlib import Path

from bench import common
from bench import domain
from bench import oracle
from bench import real_model

from vocabsurgeon import read_tokens_file
from vocabsurgeon.runtime import context_length, corpus_windows, encode, load_tokenizer, loaded_model
from vocabsurgeon.validation.measure import NewIds, _bits, usability_texts

# label -> (add options, oracle roles trained afterwards[, the text they are trained on: "scored" (default), the
# held-out paragraphs that are scored, or "fit", the fit corpus's paragraphs that use the words])
RUNS = {
    "mean": ({"init": "mean"}, ()),
    "subword-mean": ({"init": "subword-mean"}, ()),
    "fitted": ({"init": "fitted", "fit-corpus": "fit"}, ()),
    "fitted --untie": ({"init": "fitted", "untie": True, "fit-corpus": "fit"}, ()),
    "fitted, --fit-l2 0.03": ({"init": "fitted", "fit-corpus": "fit", "fit-l2": 0.03}, ()),
    "fitted --untie, --fit-l2 0.03": ({"init": "fitted", "untie": True, "fit-corpus": "fit", "fit-l2": 0.03}, ()),
    "fitted, no corpus": ({"init": "fitted"}, ()),
    "fitted --untie, no corpus": ({"init": "fitted", "untie": True}, ()),
    "oracle": ({"init": "mean", "untie": True}, ("input", "output")),
    "oracle, input rows": ({"init": "mean", "untie": True}, ("input",)),
    "oracle, output rows": ({"init": "mean", "untie": True}, ("output",)),
    "fitted --untie, then oracle input rows": ({"init": "fitted", "untie": True, "fit-corpus": "fit"}, ("input",)),
    "fitted --untie, then oracle output rows": ({"init": "fitted", "untie": True, "fit-corpus": "fit"}, ("output",)),
    "trained on the fit corpus": ({"init": "mean", "untie": True}, ("input", "output"), "fit"),
    "trained on the fit corpus, output rows": ({"init": "mean", "untie": True}, ("output",), "fit"),
}
FIT_CORPUS_TOKENS = 16384  # positions of the fit corpus the "trained on the fit corpus" runs train on, at most


def markers(model: str, block: str | None = None) -> tuple[str, str]:
    name = block or f"fitted-quick-{model}"
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def bits(ckpt: Path, tok, paragraphs: list[str], new: NewIds | None) -> tuple[float, list[list[int]], int]:
    """Total bits of `paragraphs` under `ckpt`, the sequences scored and the position scoring starts at."""
    with loaded_model(ckpt, "cpu") as lm:
        prefix, window = lm.prefix(tok), context_length(lm)
        seqs = [w for p in paragraphs for w in corpus_windows(encode(tok, p), prefix, window)]
        return _bits(lm, seqs, len(prefix), new)[0], seqs, len(prefix)


def add_command(src: Path, out: Path, tokens: Path, options: dict, fit: Path, dtype: str = "float32",
                device: str = "cpu") -> list[str]:
    cmd = common.vocabsurgeon_command() + ["-q", "add", "--tokens", str(tokens), "--json", "--no-validate",
                                           "--device", device, "--dtype", dtype, "--force"]
    for key, value in options.items():
        cmd += [f"--{key}"] if value is True else [f"--{key}", str(fit) if value == "fit" else str(value)]
    return cmd + [str(src), str(out)]


def run(label: str, src: Path, tokens: Path, fit: Path, held: str, scratch: Path, args, old_bits: dict) -> dict:
    options, roles, *on = RUNS[label]
    name = (f"quick-{args.model}-{tokens.stem}-{args.device}-{args.dtype}-"
            + "".join(c for c in label if c.isalnum()))  # one per run
    out = scratch / name
    shutil.rmtree(out, ignore_errors=True)
    before = common.uptime()
    log = scratch / f"{name}.log"
    sample = common.measure(add_command(src, out, tokens, options, fit, args.dtype, args.device), log)
    text = log.read_text()
    summary = json.JSONDecoder().raw_decode(text[text.index("{"):])[0]
    after = common.uptime()
    old_tok, new_tok = load_tokenizer(src), load_tokenizer(out)
    new = NewIds(len(old_tok))
    usable = usability_texts(held, new_tok, new, 2048)
    scored = hashlib.sha256("\n\n".join(usable).encode()).hexdigest()
    if scored not in old_bits:
        old_bits[scored] = bits(src, old_tok, usable, None)[0]
        cache = scratch / f"quick-{args.model}-original-bits.json"  # shared with runs beside this one
        cache.write_text(json.dumps({**(json.loads(cache.read_text()) if cache.exists() else {}), **old_bits}))
    trained = None
    if roles:
        if on == ["fit"]:  # what the fit corpus alone teaches rows trained on it, scored on the held-out text
            taught = usability_texts(fit.read_text(encoding="utf-8"), new_tok, new, FIT_CORPUS_TOKENS)
        else:
            taught = usable
        _, seqs, start = bits(out, new_tok, taught, new)
        n_old = summary.get("n_old") or len(old_tok)
        trained = oracle.train_rows(out, n_old, seqs, start, set(roles), args.oracle_passes, args.oracle_lr)
    new_bits = bits(out, new_tok, usable, new)[0]
    fitted = summary.get("fitted") or {}
    kl = (fitted.get("output") or {}).get("old_text_kl") or {}
    shutil.rmtree(out)
    return {"model": args.model, "words": sum(1 for _ in read_tokens_file(tokens)), "init": label, "dtype": args.dtype,
            "device": args.device,
            "ratio": new_bits / old_bits[scored], "bpb_old": old_bits[scored] / sum(len(p.encode()) for p in usable),
            "paragraphs": len(usable), "add_seconds": round(sample.wall, 1), "add_cpu_seconds": round(sample.cpu, 1),
            "peak_rss": sample.rss,
            "held_kl_mean": kl.get("mean"), "bound": kl.get("bound"), "oracle": trained,
            "input": {k: (fitted.get("input") or {}).get(k) for k in ("held_out_loss", "passes", "seconds")},
            "uptime_before": before, "uptime_after": common.uptime() if roles else after}


def key(row: dict) -> tuple:
    return row.get("domain", "domain"), row["words"], row["init"], row.get("dtype", "float32"), row.get("device", "cpu")


def table(rows: list[dict], description: str) -> str:
    """The model's tables: the inits on the 41 modules' words, then the larger domain's word counts."""
    ref = {key(r): r["ratio"] for r in rows}
    lines = [f"{description}; this machine's 2 cores (load average: the last column, 1 minute, before and after "
             "the run)."]
    for name, large in (("domain", False), ("domain-large", True)):
        part = [r for r in rows if r.get("domain", "domain") == name]
        if part:
            lines += ["", f"Words and text: {domain.recipe(large)}.", ""] + _rows(part, ref)
    return "\n".join(lines)


def _rows(rows: list[dict], ref: dict) -> list[str]:
    lines = ["| words | init | bits/byte vs original | share of the gap mean -> best oracle run | held-out old-text KL "
             "mean (bound) | `add` wall s (CPU s) | peak RSS MB | oracle Adam passes, loss nats/token before -> "
             "after | load average |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["words"], list(RUNS).index(r["init"]), r.get("dtype", "float32") != "float32",
                                         r.get("device", "cpu"))):
        f32 = {**r, "dtype": "float32", "device": "cpu"}  # mean and the oracle: their float32 CPU rows are the reference
        mean = ref.get(key({**f32, "init": "mean"}))
        best = min((ref[key({**f32, "init": o})] for o in RUNS if "oracle" in o and key({**f32, "init": o}) in ref),
                   default=None)  # the full oracle, else the best part measured (then the share is an upper bound)
        share = f"{(mean - r['ratio']) / (mean - best):.0%}" if mean and best and mean != best else "-"
        kl = "-" if r.get("held_kl_mean") is None or r.get("oracle") else f"{r['held_kl_mean']:.5f} ({r['bound']:.5f})"
        o = r.get("oracle")
        trained = f"{o['passes']}, {o['start_loss']:.3f} -> {o['final_loss']:.3f}" if o else "-"
        load = f"{common.load_average(r['uptime_before'])}-{common.load_average(r['uptime_after'])}"
        cpu = f" ({r['add_cpu_seconds']:.0f})" if r.get("add_cpu_seconds") is not None else ""
        init = r["init"] + (f", fit in {r['dtype']}" if r.get("dtype", "float32") != "float32" else "") + (
            f", on {r['device']}" if r.get("device", "cpu") != "cpu" else "")
        lines.append(f"| {r['words']} | {init} | x{r['ratio']:.3f} | {share} | {kl} | {r['add_seconds']:.0f}{cpu} | "
                     f"{r['peak_rss'] / 2**20:.0f} | {trained} | {load} |")
    return lines


def publish(rows: list[dict], args) -> None:
    if args.results and rows:
        begin, end = markers(args.model, args.block)
        text = table(rows, real_model.MODELS[args.model].description)
        common.write_block(args.results, f"{begin}\n{text}\n{end}", begin, end)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2", choices=list(real_model.MODELS))
    ap.add_argument("--runs", nargs="*", default=list(RUNS)[:4] + ["oracle"], choices=list(RUNS))
    ap.add_argument("--words", type=int, default=60, help="the words of the table: suggest's top N")
    ap.add_argument("--scale", type=int, nargs="*", help="instead: the first N of suggest's top max(N), for each N")
    ap.add_argument("--oracle-passes", type=int, default=6, help="Adam passes of the input rows, at most")
    ap.add_argument("--oracle-lr", type=float, default=0.05, help="Adam step, relative to the rms of the old rows")
    ap.add_argument("--work", type=Path, default=common.WORK, help="where the real models are built")
    ap.add_argument("--scratch", type=Path, help="domain files and outputs (default: --work)")
    ap.add_argument("--results", type=Path, help="write the model's table into this markdown file")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                    help="add's --dtype: what the fit runs the model in (scored in float32 either way)")
    ap.add_argument("--device", default="cpu", help="add's --device: where the fit runs (cuda: the GPU check)")
    ap.add_argument("--block", help="the RESULTS block written (default: fitted-quick-MODEL)")
    ap.add_argument("--json", type=Path, help="the rows, kept across invocations (default: SCRATCH/quick-MODEL.json)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")  # the oracle's passes
    src = real_model.build(args.work, args.model)
    scratch = args.scratch or args.work
    store = args.json or scratch / f"quick-{args.model}.json"
    rows = json.loads(store.read_text()) if store.exists() else []
    counts = args.scale or [args.words]
    large = bool(args.scale)
    name = "domain-large" if large else "domain"
    tokens = scratch / f"{name}-words-{src.name}-{max(counts)}.txt"
    if tokens.exists():  # built by an earlier run (suggest takes minutes on a loaded machine)
        fit, held = scratch / f"{name}-fit.txt", scratch / f"{name}-held.txt"
    else:
        fit, held, tokens = domain.build(scratch, src, max(counts), large)
    lists = {}
    for n in counts:
        lists[n] = tokens
        if n != max(counts) or n > len(read_tokens_file(tokens)):
            words = tokens.read_text(encoding="utf-8").splitlines()
            if n > len(words):
                raise SystemExit(f"suggest found {len(words)} words in {fit}, not {n}")
            lists[n] = scratch / f"{tokens.stem}-first-{n}.txt"
            lists[n].write_text("\n".join(words[:n]) + "\n", encoding="utf-8")
    cache = scratch / f"quick-{args.model}-original-bits.json"  # the original's bits of each scored text
    text, old_bits = held.read_text(encoding="utf-8"), json.loads(cache.read_text()) if cache.exists() else {}
    for path in lists.values():
        for label in args.runs:
            row = {"domain": name, **run(label, src, path, fit, text, scratch, args, old_bits)}
            print(json.dumps(row), flush=True)
            rows = [r for r in rows if key(r) != key(row)] + [row]
            store.write_text(json.dumps(rows, indent=2))
            publish(rows, args)
    publish(rows, args)  # also with no runs: the table of the rows kept
    return 0


if __name__ == "__main__":
    sys.exit(main())
