"""Covariance at GEMM speed (issue 38): `--init mean-noise`'s statistics against one float32 `X.T @ X`.

    python -m bench.cov_bench matrix --results bench/RESULTS.md    # 128,256 x 4096: ~5 min on 2 busy cores
    python -m bench.cov_bench add --results bench/RESULTS.md       # add on the 1B-class checkpoint: ~5 min
    python -m bench.cov_bench all --rows 3000 --hidden 64 --old-rows 1000 --add tiny --results /tmp/R.md  # seconds

1. **The covariance alone.** X is a rows x hidden float32 matrix of the bench checkpoint's values (N(0, 0.02)
   rounded to bf16, widened, as `stream_rows` gives them), moved by a large mean offset (+1.0 on every entry,
   +0.5 more on the first 300 rows: bytes and specials sit apart at the start of a vocabulary), so that any
   cancellation shows. Timed in this process, in this order: one float32 `X.T @ X` of the whole matrix
   (numpy's BLAS, what "GEMM speed" means here); `accumulate_stats(cov=True)` fed 256-row chunks as
   `stream_rows` feeds it (mean, NaN check and covariance: the CPU default, float32 products); the
   implementation before issue 38 (git 96fed96: one product per 256-row chunk, each partial added in
   float64) on the first `--old-rows` rows only (it takes minutes for all of them). Accuracy: the
   covariance of the first 512 columns against float64 `np.cov` of those columns.
2. **`add`.** On a generated checkpoint (`--add 1b`: Llama-3.2-1B shapes, 128,256 x 2048, untied, bf16,
   16 layers, 3.0 GB), `add --init mean --no-validate` and `add --init mean-noise --no-validate` of
   1,000 words, and `mean-noise` again with `OPENBLAS_NUM_THREADS=1` (numpy's BLAS on one thread: on busy
   cores its second thread spin-waits), each in its own process, interleaved, medians (`--repeats`) of
   the wall and the CPU seconds (user + system) of each process.

The load average is recorded before and after each timing: the machine is shared.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np

from bench import common

HERE = Path(__file__).resolve().parent
BEGIN, END = "<!-- cov-bench:begin -->", "<!-- cov-bench:end -->"
ADD_BEGIN, ADD_END = "<!-- cov-add:begin -->", "<!-- cov-add:end -->"
BEFORE = "96fed96"  # the commit of the per-chunk products
SIZES = {k: common.SIZES[k] for k in ("1b", "tiny")}  # 1b: validate_bench's 1B-class shapes, 3.0 GB


def load_avg() -> float:
    return round(os.getloadavg()[0], 2)


def matrix(rows: int, hidden: int, seed: int = 0) -> np.ndarray:
    """The bench checkpoint's values (bf16 N(0, 0.02), widened to float32), offset as the docstring says."""
    x = np.random.default_rng(seed).standard_normal((rows, hidden), dtype=np.float32) * np.float32(0.02)
    x.view(np.uint32)[:] &= np.uint32(0xFFFF0000)  # truncated to bf16 (the values of a bf16 checkpoint)
    x += np.float32(1.0)
    x[:300] += np.float32(0.5)
    return x


def old_module():
    """vocabsurgeon/init.py as of BEFORE, imported beside the current one."""
    src = subprocess.run(["git", "-C", str(common.REPO), "show", f"{BEFORE}:vocabsurgeon/init.py"],
                         capture_output=True, text=True, check=True).stdout
    name = "vocabsurgeon._init_before"
    mod = types.ModuleType(name)
    mod.__package__ = "vocabsurgeon"
    sys.modules[name] = mod
    exec(compile(src, f"{BEFORE}:vocabsurgeon/init.py", "exec"), mod.__dict__)
    return mod


def chunks(x: np.ndarray, rows: int = 256):
    for i in range(0, x.shape[0], rows):
        yield x[i:i + rows]


def timed(fn):
    la = load_avg()
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t, (la, load_avg())


def covariance(rows: int, hidden: int, old_rows: int) -> dict:
    from vocabsurgeon.init import accumulate_stats

    x = matrix(rows, hidden)
    _, gemm, gemm_load = timed(lambda: x.T @ x)
    stats, ours, ours_load = timed(lambda: accumulate_stats(chunks(x), cov=True))
    old = old_module()
    xo = x[:old_rows]
    old_stats, before, before_load = timed(lambda: old.accumulate_stats(chunks(xo), cov=True))
    cols = min(512, hidden)
    ref = np.cov(x[:, :cols].astype(np.float64).T, bias=True).reshape(cols, cols)
    ref_old = np.cov(xo[:, :cols].astype(np.float64).T, bias=True).reshape(cols, cols)
    err = float(np.abs(stats.cov[:cols, :cols] - ref).max() / np.abs(ref).max())
    err_old = float(np.abs(old_stats.cov[:cols, :cols] - ref_old).max() / np.abs(ref_old).max())
    # the same rows for ours as the old one's, for its accuracy on them
    ours_on_old = accumulate_stats(chunks(xo), cov=True)
    err_ours_old = float(np.abs(ours_on_old.cov[:cols, :cols] - ref_old).max() / np.abs(ref_old).max())
    return {"rows": rows, "hidden": hidden, "old_rows": old_rows, "cols": cols, "gemm_s": gemm, "ours_s": ours,
            "before_s": before, "gemm_load": gemm_load, "ours_load": ours_load, "before_load": before_load,
            "err": err, "err_before": err_old, "err_ours_on_old_rows": err_ours_old}


def add_runs(size_name: str, work: Path, repeats: int) -> dict:
    size = SIZES[size_name]
    src = work / f"ckpt-{size_name}"  # add_bench's checkpoint of that size
    if not (src / "model.safetensors.index.json").exists():
        common.generate(size, src)
    tokens = work / f"tokens-cov-{size.new_tokens}.txt"
    tokens.write_text("\n".join(common.make_words(size.new_tokens, 1, common.known_words(src))) + "\n",
                      encoding="utf-8")
    out = work / "out-cov"
    runs = {"mean": ("mean", {}), "mean-noise": ("mean-noise", {}),
            "mean-noise, OPENBLAS_NUM_THREADS=1": ("mean-noise", {"OPENBLAS_NUM_THREADS": "1"})}
    samples: dict[str, list] = {k: [] for k in runs}
    loads = [load_avg()]
    for r in range(repeats):
        for label in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
            init, env = runs[label]
            common.drop(out)
            os.sync()
            common.read_all(src)
            cmd = common.vocabsurgeon_command() + ["add", "--tokens", str(tokens), "--init", init, "--no-validate",
                                                   "--device", "cpu", "-q", str(src), str(out)]
            s = common.measure(cmd, work / "cov-add.log", env={**os.environ, **env})
            samples[label].append(s)
            loads.append(load_avg())
            print(f"[{r + 1}/{repeats}] add --init {label}: {s.wall:.2f} s, CPU {s.cpu:.2f} s, "
                  f"{s.rss / 2**20:.0f} MiB, load {loads[-1]}", file=sys.stderr, flush=True)
    common.drop(out)
    return {"size": size_name, "shape": size, "bytes": common.du(src), "load": (min(loads), max(loads)),
            "wall": {k: statistics.median(s.wall for s in v) for k, v in samples.items()},
            "walls": {k: [round(s.wall, 2) for s in v] for k, v in samples.items()},
            "cpu": {k: statistics.median(s.cpu for s in v) for k, v in samples.items()},
            "cpus": {k: [round(s.cpu, 2) for s in v] for k, v in samples.items()},
            "rss": {k: statistics.median(s.rss for s in v) for k, v in samples.items()}}


def header(argv: list[str]) -> list[str]:
    return [f"Generated by `python -m bench.cov_bench {' '.join(argv)}` on {time.strftime('%Y-%m-%d %H:%M')}.", "",
            "**Machine:** " + ", ".join(f"{k} {v}" for k, v in common.machine().items()) + ".", ""]


def _la(p) -> str:
    return f"{p[0]}-{p[1]}"


def report_matrix(cov: dict, argv: list[str]) -> str:
    L = [BEGIN, "", *header(argv),
         f"Covariance of a {cov['rows']:,} x {cov['hidden']} float32 matrix (bf16 values, mean offset 1.0, first 300 "
         f"rows 0.5 further), in one process, 256-row chunks; accuracy on the first {cov['cols']} columns against "
         "float64 `np.cov` (largest error / largest entry):", "",
         "| what | rows | seconds | per 1,000 rows | / one `X.T @ X` | load average (before-after) | error |",
         "|---|---:|---:|---:|---:|---|---:|"]
    per = cov["gemm_s"] / cov["rows"] * 1000
    L.append(f"| one float32 `X.T @ X` | {cov['rows']:,} | {cov['gemm_s']:.2f} | {per:.3f} | 1.00 | "
             f"{_la(cov['gemm_load'])} | |")
    L.append(f"| `accumulate_stats(cov=True)` | {cov['rows']:,} | {cov['ours_s']:.2f} | "
             f"{cov['ours_s'] / cov['rows'] * 1000:.3f} | **{cov['ours_s'] / cov['gemm_s']:.2f}** | "
             f"{_la(cov['ours_load'])} | {cov['err']:.1e} |")
    b = cov["before_s"] / cov["old_rows"] * 1000
    L.append(f"| before (git {BEFORE}, per-chunk products) | {cov['old_rows']:,} | {cov['before_s']:.2f} | {b:.3f} | "
             f"{b / per:.2f} (per row) | {_la(cov['before_load'])} | {cov['err_before']:.1e} "
             f"(now {cov['err_ours_on_old_rows']:.1e} on those rows) |")
    return "\n".join(L + ["", END])


def report_add(add: dict, argv: list[str]) -> str:
    s = add["shape"]
    L = [ADD_BEGIN, "", *header(argv),
         f"`add` of {s.new_tokens:,} words on the generated {add['size']} checkpoint (Llama, untied, bf16, "
         f"vocab {s.vocab:,}, hidden {s.hidden}, {s.layers} layers, {common.gb(add['bytes'])}), "
         "`--no-validate --device cpu`, each in its own process, interleaved, page cache warm; "
         f"load average {_la(add['load'])}:", "",
         "| init | wall (median) | all walls (s) | CPU s, user + system (median) | all CPU s | peak RSS (median) |",
         "|---|---:|---|---:|---|---:|"]
    for k in add["wall"]:
        L.append(f"| {k} | {add['wall'][k]:.2f} s | {', '.join(map(str, add['walls'][k]))} | {add['cpu'][k]:.2f} | "
                 f"{', '.join(map(str, add['cpus'][k]))} | {common.gb(add['rss'][k])} |")
    w, c = add["wall"], add["cpu"]
    one = "mean-noise, OPENBLAS_NUM_THREADS=1"
    L += ["", f"mean-noise / mean: **{w['mean-noise'] / w['mean']:.2f}** (wall), {c['mean-noise'] / c['mean']:.2f} "
          f"(CPU); with `OPENBLAS_NUM_THREADS=1`: {w[one] / w['mean']:.2f} (wall), {c[one] / c['mean']:.2f} (CPU)"]
    return "\n".join(L + ["", ADD_END])


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m bench.cov_bench", description=__doc__.splitlines()[0])
    ap.add_argument("part", choices=["matrix", "add", "all"])
    ap.add_argument("--rows", type=int, default=128_256)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--old-rows", type=int, default=8192, help="rows the pre-issue-38 code is timed on")
    ap.add_argument("--add", choices=list(SIZES), default="1b", help="the checkpoint of the add part")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--work", type=Path, default=common.WORK)
    ap.add_argument("--results", type=Path, help="write the blocks into this markdown file, between their markers")
    a = ap.parse_args(argv)
    a.work.mkdir(parents=True, exist_ok=True)
    blocks = []
    if a.part in ("matrix", "all"):
        cov = covariance(a.rows, a.hidden, min(a.old_rows, a.rows))
        print(f"covariance: {cov}", file=sys.stderr, flush=True)
        blocks.append((report_matrix(cov, argv), BEGIN, END))
    if a.part in ("add", "all"):
        blocks.append((report_add(add_runs(a.add, a.work, a.repeats), argv), ADD_BEGIN, ADD_END))
    for block, begin, end in blocks:
        print(block)
        if a.results:
            common.write_block(a.results, block, begin, end, heading="Covariance at GEMM speed (issue 38)")


if __name__ == "__main__":
    main()
