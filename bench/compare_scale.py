"""Scale check of `vocabsurgeon compare`: time and peak memory on a large synthetic vocabulary matrix.

Writes two synthetic checkpoints (GPT-2 layout, one tied `transformer.wte.weight` of --rows x
--hidden, float32 or bf16) in row chunks, so generating them never holds the matrix in memory:

  A: Gaussian rows with log-normal norms (so inner products, not only directions, differ);
  B: A reflected by a Householder matrix I - 2 v v^T (an orthogonal map: inner products are kept,
     so KNN-match should be ~1, up to float32 near-ties), plus optional --noise.

Then runs `python -m vocabsurgeon compare A B --json` as a child process and reports its wall
time, its peak RSS (from wait4's rusage) and the mean KNN-match similarity, and extrapolates the
time to 256k x 8k by the n^2 d cost of the chunked matmuls. Results go in bench/COMPARE.md.

Usage:
  python -m bench.compare_scale --rows 32768 --hidden 1024 [--dtype f32|bf16] [--device cpu]
      [--workdir bench/work/compare] [--keep] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

TENSOR = "transformer.wte.weight"


def _header(rows: int, hidden: int, dtype: str) -> bytes:
    width = {"F32": 4, "BF16": 2}[dtype]
    obj = {"__metadata__": {"format": "pt"},
           TENSOR: {"dtype": dtype, "shape": [rows, hidden], "data_offsets": [0, rows * hidden * width]}}
    raw = json.dumps(obj, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data starts 8-byte aligned
    return struct.pack("<Q", len(raw)) + raw


def _encode(chunk: np.ndarray, dtype: str) -> bytes:
    chunk = np.ascontiguousarray(chunk, np.float32)
    if dtype == "F32":
        return chunk.tobytes()
    bits = chunk.view(np.uint32)  # round to nearest even, then keep the top 16 bits
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16).tobytes()


def write_pair(root: Path, rows: int, hidden: int, dtype: str, noise: float, seed: int,
               chunk_rows: int = 8192) -> tuple[Path, Path]:
    """Write checkpoints A and B (see the module docstring) under `root`, a row chunk at a time."""
    a_dir, b_dir = root / "A", root / "B"
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(hidden).astype(np.float32)
    v /= np.linalg.norm(v)  # Householder vector: B = A (I - 2 v v^T)
    config = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": rows, "n_embd": hidden,
              "n_layer": 1, "n_head": 1, "n_positions": 64, "tie_word_embeddings": True}
    for d in (a_dir, b_dir):
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.json").write_text(json.dumps(config, indent=2))
    with open(a_dir / "model.safetensors", "wb") as fa, open(b_dir / "model.safetensors", "wb") as fb:
        head = _header(rows, hidden, dtype)
        fa.write(head)
        fb.write(head)
        for s in range(0, rows, chunk_rows):
            c = min(chunk_rows, rows - s)
            a = rng.standard_normal((c, hidden), dtype=np.float32)  # (c, hidden)
            a *= np.exp(0.3 * rng.standard_normal((c, 1), dtype=np.float32)) / np.sqrt(hidden)
            b = a - 2.0 * (a @ v)[:, None] * v[None, :]
            if noise:
                b += noise * rng.standard_normal((c, hidden), dtype=np.float32) / np.sqrt(hidden)
            fa.write(_encode(a, dtype))
            fb.write(_encode(b, dtype))
    return a_dir, b_dir


def run_compare(a: Path, b: Path, k: int, device: str) -> dict:
    """Run the CLI in a child process; return its JSON plus wall seconds and peak RSS (GiB)."""
    cmd = [sys.executable, "-m", "vocabsurgeon", "compare", str(a), str(b), "--k", str(k), "--json", "-q",
           "--device", device]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate()
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"compare failed ({proc.returncode}): {err.decode()}")
    import resource

    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # the largest reaped child, KiB on Linux
    res = json.loads(out)
    res["bench"] = {"wall_s": round(wall, 2), "peak_rss_gib": round(peak_kib / 2**20, 3)}
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=32768)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--noise", type=float, default=0.0, help="Gaussian noise added to B, relative to the row scale.")
    p.add_argument("--device", default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workdir", type=Path, default=Path("bench/work/compare"))
    p.add_argument("--keep", action="store_true", help="Keep the synthetic checkpoints.")
    p.add_argument("--json", type=Path, help="Also write the results here.")
    args = p.parse_args()

    root = args.workdir / f"{args.rows}x{args.hidden}-{args.dtype}"
    t0 = time.perf_counter()
    a, b = write_pair(root, args.rows, args.hidden, args.dtype.upper(), args.noise, args.seed)
    gen_s = time.perf_counter() - t0
    try:
        res = run_compare(a, b, args.k, args.device)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    n, d = args.rows, args.hidden
    matrix_gib = n * d * 4 / 2**30
    scale = (256 * 1024) ** 2 * 8192 / (n ** 2 * d)
    summary = {
        "rows": n, "hidden": d, "dtype": args.dtype, "k": args.k, "device": res["device"],
        "generate_s": round(gen_s, 1), "compare_wall_s": res["bench"]["wall_s"],
        "compare_reported_s": res["seconds"], "load_s": res.get("load_seconds"), "peak_rss_gib": res["bench"]["peak_rss_gib"],
        "two_matrices_f32_gib": round(2 * matrix_gib, 3), "knn_match_mean": res["knn_match"]["mean"],
        "tokens_compared": res["tokens_compared"],
        "extrapolated_256k_x_8k_s": round(res["seconds"] * scale), "cpu_count": os.cpu_count(),
    }
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
