"""Validation cost: one pass (only the expanded model) against two passes (both models), same run.

Generates Llama-shaped checkpoints with random bf16 weights (bench/common.py's generator), adds a few
words with `add --no-validate`, then times `vocabsurgeon validate SRC OUT --method two-pass|one-pass`,
each in its own process (wall time and the child's own peak RSS, as bench/common.py's measure does), runs
interleaved. Writes a block into bench/RESULTS.md between its own markers.

    python -m bench.validate_bench --size 135m:2 --size 1b:1     # NAME:REPEATS; ~40 min on 2 busy cores
    python -m bench.validate_bench --size tiny --results /tmp/R.md  # seconds (tests/benchmarks/test_validate_bench.py)
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench import common

HERE = Path(__file__).resolve().parent

BEGIN, END = "<!-- validate-bench:begin -->", "<!-- validate-bench:end -->"
METHODS = ("two-pass", "one-pass")


@dataclass(frozen=True)
class Model:
    """A generated checkpoint and the corpus tokens its validation runs."""

    size: common.Size
    max_tokens: int
    label: str


MODELS = {
    # SmolLM-135M shapes (hidden 576, 30 layers, 9 heads, 3 KV heads, vocab 49,152), untied: 162M parameters.
    "135m": Model(common.Size(49_152, 576, 1536, 30, 9, 3, 400_000_000, specials=64), 2048, "135M-class (162M)"),
    # Llama-3.2-1B shapes (hidden 2048, 16 layers, 32 heads, 8 KV heads, vocab 128,256), untied: 1.5B parameters.
    "1b": Model(common.Size(128_256, 2048, 8192, 16, 32, 8, 1_600_000_000), 512, "1B-class (1.5B)"),
    "tiny": Model(common.Size(1_280, 64, 128, 2, 4, 2, 60_000, specials=16), 64, "tiny"),
}
WORDS = ["Vorathil", "Quenmor", "Eldarwyn", "Tharok", "Mirvalen", "Osgarth", "Belunir", "Karadun"]


def measure(cmd: list[str], log: Path, ok: tuple[int, ...] = (0, 3)) -> tuple[float, int, int]:
    """Wall seconds, the child's own peak RSS (bytes, via GNU time) and the exit status of `cmd`.

    Exit 3 (validation failed) is a measured run too: random weights may fail a check.
    """
    gnu_time = Path("/usr/bin/time")
    rss_file = log.with_suffix(".rss")
    full = [str(gnu_time), "-q", "-f", "%M", "-o", str(rss_file)] + cmd if gnu_time.exists() else cmd
    with open(log, "wb") as lf:
        t0 = time.perf_counter()
        proc = subprocess.Popen(full, stdout=lf, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    if code not in ok:
        raise SystemExit(f"validate_bench: {' '.join(cmd)} exited {code}: {proc.stderr.read().decode()[-3000:]}")
    rss = int(rss_file.read_text().split()[-1]) * 1024 if gnu_time.exists() else usage.ru_maxrss * 1024
    return wall, rss, code


def prepare(name: str, work: Path) -> tuple[Path, Path]:
    """The generated checkpoint and its expansion by WORDS (mean init, not validated)."""
    src = work / f"ckpt-{name}"
    if not (src / "model.safetensors.index.json").exists():
        common.generate(MODELS[name].size, src)
    out = work / f"out-{name}"
    common.drop(out)
    subprocess.run(common.vocabsurgeon_command() + ["add", "-q", "--no-validate", "--init", "mean"]
                   + [a for w in WORDS for a in ("-t", w)] + [str(src), str(out)], check=True)
    return src, out


def run(name: str, work: Path, repeats: int) -> dict:
    src, out = prepare(name, work)
    m = MODELS[name]
    samples: dict[str, list] = {k: [] for k in METHODS}
    loads = [os.getloadavg()[0]]
    reports: dict[str, dict] = {}
    for r in range(repeats):
        for method in (METHODS if r % 2 == 0 else METHODS[::-1]):
            log = work / f"validate-{name}-{method}-{r}.json"
            common.read_all(src)
            common.read_all(out)
            cmd = common.vocabsurgeon_command() + ["validate", str(src), str(out), "--method", method, "--max-tokens",
                                           str(m.max_tokens), "--device", "cpu", "--json", "-q"]
            wall, rss, code = measure(cmd, log)
            samples[method].append((wall, rss))
            loads.append(os.getloadavg()[0])
            reports[method] = json.loads(log.read_text(encoding="utf-8"))
            print(f"{name} {method}: {wall:.1f} s, {rss / 2**30:.2f} GiB, exit {code}", file=sys.stderr, flush=True)
    kl = {k: reports[k]["kl"] for k in METHODS}
    rel = max(abs(kl["one-pass"][f] - kl["two-pass"][f]) / max(abs(kl["two-pass"][f]), 1e-300)
              for f in ("mean", "p99", "max"))
    params = sum(math.prod(t["shape"]) for t in _header_tensors(src))
    return {
        "name": name, "label": m.label, "params": params, "max_tokens": m.max_tokens,
        "positions": kl["one-pass"]["positions"], "kl_mean": kl["one-pass"]["mean"], "kl_rel_diff": rel,
        "passed": {k: reports[k]["passed"] for k in METHODS},
        "wall": {k: statistics.median(w for w, _ in samples[k]) for k in METHODS},
        "rss": {k: statistics.median(r for _, r in samples[k]) for k in METHODS},
        "walls": {k: [round(w, 1) for w, _ in samples[k]] for k in METHODS},
        "bytes": common.du(src),
        "load": f"{min(loads):.1f}-{max(loads):.1f}",
    }


def _header_tensors(path: Path) -> list[dict]:
    out = []
    for f in sorted(path.glob("*.safetensors")):
        with open(f, "rb") as h:
            n = int.from_bytes(h.read(8), "little")
            out += [v for k, v in json.loads(h.read(n)).items() if k != "__metadata__"]
    return out


def report(results: list[dict], argv: list[str]) -> str:
    info = common.machine()
    lines = [
        BEGIN, "",
        (f"Generated by `python -m bench.validate_bench {' '.join(argv)}` on "
        f"{datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}."), "",
        "**Machine:** " + ", ".join(f"{k} {v}" for k, v in info.items()) + ".", "",
        (f"Each model: Llama-shaped, untied, random bf16 weights, {len(WORDS)} new words (mean init); `vocabsurgeon "
        "validate SRC OUT --method M --device cpu --json -q` in its own process (models in float32 on the CPU), "
        "median of the runs per method (all walls listed), interleaved, page cache warmed before each run; the "
        "load average of the machine during the runs is given per model."), "",
        "| model | params | corpus tokens | method | wall | peak RSS | all walls (s) | load average |",
        "|---|---:|---:|---|---:|---:|---|---|",
    ]
    for r in results:
        for k in METHODS:
            lines.append(f"| {r['label']} | {r['params'] / 1e6:,.0f}M | {r['max_tokens']} | {k} | {r['wall'][k]:.1f} s "
                         f"| {common.gb(r['rss'][k])} | {', '.join(map(str, r['walls'][k]))} | {r['load']} |")
    lines += ["", ("| model | one-pass / two-pass wall | one-pass / two-pass peak RSS | KL figures, one-pass vs "
              "two-pass (max relative difference) |"), "|---|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['label']} | {r['wall']['one-pass'] / r['wall']['two-pass']:.2f} | "
                     f"{r['rss']['one-pass'] / r['rss']['two-pass']:.2f} | {r['kl_rel_diff']:.1e} |")
    lines += ["", END]
    return "\n".join(lines)


def write_results(path: Path, block: str) -> None:
    """This script's block (between BEGIN and END) into `path`."""
    common.write_block(path, block, BEGIN, END, heading="Validation: one pass against two")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", action="append", help=f"NAME[:REPEATS], repeatable; NAME one of {', '.join(MODELS)} "
                   "(default: 135m:1 and 1b:1)")
    p.add_argument("--work", type=Path, default=HERE / "work")
    p.add_argument("--results", type=Path, default=HERE / "RESULTS.md")
    a = p.parse_args(argv)
    a.work.mkdir(parents=True, exist_ok=True)
    results = []
    for spec in a.size or ["135m", "1b"]:
        name, _, repeats = spec.partition(":")
        if name not in MODELS:
            p.error(f"--size {spec}: not one of {', '.join(MODELS)}")
        results.append(run(name, a.work, int(repeats or 1)))
    block = report(results, argv)
    write_results(a.results, block)
    print(block)


if __name__ == "__main__":
    main()
