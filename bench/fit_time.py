"""Time of `add --init fitted` on a 135M-class model: 100 new words, a corpus that uses them.

Time only: the checkpoint is validate_bench.py's generated 135M-class model (SmolLM-135M shapes,
untied, random bf16 weights), so quality figures would mean nothing (bench/usability.py measures
quality on the trained fixtures). The corpus is English stdlib docstrings with every 10th word one
of the new words (bench.sample_text). `add --init mean` is timed in the same run for reference.

    python bench/fit_time.py                    # about 5-10 minutes on 2 idle cores
    python bench/fit_time.py --words 20 --chars 20000 --size tiny    # seconds
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench
import validate_bench


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", default="135m", choices=list(validate_bench.MODELS))
    p.add_argument("--words", type=int, default=100)
    p.add_argument("--chars", type=int, default=200_000, help="corpus size in characters")
    p.add_argument("--work", type=Path, default=HERE / "work")
    args = p.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    src = args.work / f"ckpt-{args.size}"
    if not (src / "model.safetensors.index.json").exists():
        bench.generate(validate_bench.MODELS[args.size].size, src)
    words = bench.make_words(args.words, seed=17, avoid=bench._known_words(src))
    tokens = args.work / f"fit-words-{args.words}.txt"
    tokens.write_text("".join(w + "\n" for w in words), encoding="utf-8")
    corpus = args.work / f"fit-corpus-{args.words}.txt"
    corpus.write_text(bench.sample_text(words, args.chars, seed=17)[1], encoding="utf-8")
    rows = []
    for init in ("mean", "fitted"):
        out = args.work / f"fit-out-{args.size}-{init}"
        bench._drop(out)
        log = args.work / f"fit-{args.size}-{init}.json"
        extra = ["--fit-corpus", str(corpus)] if init == "fitted" else []
        cmd = bench._vocabsurgeon() + ["add", "--json", "-q", "--no-validate", "--init", init, "--tokens", str(tokens),
                                       *extra, str(src), str(out)]
        load0 = os.getloadavg()[0]
        wall, rss, code = validate_bench.measure(cmd, log, ok=(0,))
        summary = json.loads(log.read_text(encoding="utf-8"))
        fitted = summary.get("fitted") or {}
        stages = {k: (fitted.get(k) or {}).get("seconds") for k in ("input", "output")}
        rows.append({"init": init, "wall": wall, "rss": rss, "exit": code, "load": (load0, os.getloadavg()[0]),
                     "fit_seconds": fitted.get("seconds"), "stages": stages})
        print(json.dumps(rows[-1]), flush=True)
        bench._drop(out)
    print(f"\n{args.size}, {args.words} words, corpus {args.chars:,} characters, {os.cpu_count()} cores:")
    for r in rows:
        print(f"  --init {r['init']:<6} {r['wall']:7.1f} s  {r['rss'] / 2**30:.2f} GiB  load {r['load'][0]:.1f}-"
              f"{r['load'][1]:.1f}  fit {r['fit_seconds']} s {r['stages']}")


if __name__ == "__main__":
    main()
