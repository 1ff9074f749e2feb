"""Peak memory and seconds per evaluation of the fitted init's output fit, chunked against the code before (issue 40).

    python -m bench.fit_memory [--results bench/RESULTS.md] [--before 006d5a3]

Each run is one child process (bench/common.py's `measure`: GNU time's peak RSS, CPU seconds) that builds
synthetic float32 hidden states (P, hidden) and float64 log Z, the word positions and their weights, the shapes
of SmolLM2-135M extended with 8,000 Russian tokens (P ~ 36,000 sampled positions, k = 8,000 new rows, hidden
576; bench/RESULTS.md, "extend on a real model"), and runs `causal.fit_output_rows` for one L-BFGS iteration:
this tree's (`after`) or git `--before`'s, loaded from that revision's causal.py (`before`). Synthetic inputs
are right here: this is the solver's memory and time, not a quality figure. The child reports the RSS before
the fit (torch and the inputs) and the fit's wall and CPU seconds per objective evaluation; the parent compares
the rows of `before` and `after` fitted on the same inputs (max relative difference).

The code before kept several (P, k) float64 matrices through autograd: at P = 36,000 about 12.5 GiB, over
what one process may take on this shared machine (about 5 GB), so `before` runs at a quarter and an eighth of
the positions by default (its memory grows with P; `--before-sizes` to change).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from bench.common import HERE, WORK, load_average, machine_line, measure, module_command, uptime, write_block

BEGIN = "<!-- fit-memory:begin -->"
END = "<!-- fit-memory:end -->"
OUT = WORK / "fit-memory"
K, HIDDEN = 8000, 576
# positions[:iterations] of the runs; 30 iterations fill L-BFGS's history (20 pairs of (k, hidden) vectors)
AFTER_SIZES = ("4500", "9000", "36000", "4500:30")
BEFORE_SIZES = ("4500", "9000")


def _data(P: int, k: int, hidden: int, seed: int = 0):
    """Synthetic inputs of the output fit, as `_fit_loaded` hands them over: float32 hidden states, float64
    log Z, 5 of 6 positions followed by a word (the 8,000-token run had 30,062 of ~36,000), weights 1 and 16."""
    import torch

    from vocabsurgeon.init.fitted.causal import _OutputData

    g = torch.Generator().manual_seed(seed)
    h = torch.randn(P, hidden, generator=g) * 2.0  # (P, hidden) float32
    logz = 12.0 + torch.randn(P, generator=g, dtype=torch.float64)
    q_pos = torch.randperm(P, generator=g)[:P * 5 // 6].sort().values
    q_tok = torch.randint(0, k, (q_pos.numel(),), generator=g)
    q = torch.rand(q_pos.numel(), generator=g, dtype=torch.float64)
    weight = torch.where(torch.rand(P, generator=g) < 0.1, 16.0, 1.0).double()
    prior = 0.05 * torch.randn(k, hidden, generator=g, dtype=torch.float64)
    return _OutputData(h, logz, q_pos, q_tok, q, weight), prior


def _before_module(rev: str, work: Path):
    """causal.py of git `rev`, imported as vocabsurgeon.init.fitted._causal_before (its relative imports: this tree's)."""
    text = subprocess.run(["git", "show", f"{rev}:vocabsurgeon/init/fitted/causal.py"], capture_output=True, text=True,
                          check=True, cwd=HERE.parent).stdout
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"causal_{rev}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("vocabsurgeon.init.fitted._causal_before", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def child(which: str, P: int, k: int, hidden: int, rev: str, steps: int, rows_out: Path) -> None:
    """One fit in this process; prints its figures as JSON and saves the rows to `rows_out`."""
    import torch

    if which == "before":
        fit = _before_module(rev, rows_out.parent).fit_output_rows
    else:
        from vocabsurgeon.init.fitted.causal import fit_output_rows as fit
    data, prior = _data(P, k, hidden)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    t0, c0 = time.perf_counter(), time.process_time()
    W, calls = fit(data, prior, 0.0, 0.3, steps, lambda *a: None)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    torch.save(W, rows_out)
    print(json.dumps({"rss_before_fit": rss_before, "evaluations": calls, "fit_wall": wall, "fit_cpu": cpu,
                      "threads": torch.get_num_threads()}))


def run(which: str, P: int, k: int, hidden: int, rev: str, steps: int, work: Path) -> dict:
    rows = work / f"rows-{which}-{P}-{steps}.pt"
    log = work / f"{which}-{P}-{steps}.log"
    load = load_average(uptime())
    s = measure(module_command("fit_memory") + ["--child", which, "--positions", str(P), "--k", str(k),
                                                "--hidden", str(hidden), "--before", rev, "--steps", str(steps),
                                                "--rows-out", str(rows)], log)
    got = json.loads(log.read_text().strip().splitlines()[-1])
    row = {"which": which, "positions": P, "steps": steps, "k": k, "hidden": hidden, "peak_rss": s.rss, "wall": s.wall,
           "cpu": s.cpu, "load": f"{load}-{load_average(uptime())}", **got}
    print(json.dumps(row), flush=True)
    return row


def difference(P: int, steps: int, work: Path) -> float | None:
    """Max |after - before| / max |before| of the rows fitted at P positions in `steps` iterations, where both ran."""
    import torch

    a, b = work / f"rows-after-{P}-{steps}.pt", work / f"rows-before-{P}-{steps}.pt"
    if not (a.exists() and b.exists()):
        return None
    A, B = torch.load(a), torch.load(b)
    return float((A - B).abs().max() / B.abs().max())


def table(rows: list[dict], rev: str, k: int, hidden: int, work: Path) -> str:
    head = ("`python -m bench.fit_memory --results bench/RESULTS.md` (issue 40): `causal.fit_output_rows` for a few "
            f"L-BFGS iterations on synthetic inputs, k = {k:,} new rows, hidden {hidden}, float64 on the CPU "
            "(SmolLM2-135M extended with 8,000 Russian tokens: about 36,000 positions, k 8,000, hidden 576): this tree (`after`, "
            f"positions in chunks of `newlogit.CHUNK_BYTES`) against git {rev}'s function (`before`, one "
            "(P, k) objective through autograd), each in its own process, in one run. Synthetic inputs: a "
            "figure of the solver's memory and time, not of the rows' quality. Peak RSS: the child's (GNU time), "
            "torch and the inputs included (RSS before the fit beside it); s / evaluation: the fit's wall and CPU "
            "seconds over its objective evaluations. rows vs before: max |difference| / max |row| of the rows "
            "fitted on the same inputs. `before` is not run at 36,000 positions: about 12 GiB there, over what one "
            f"process may take on this shared machine. Machine: {machine_line()}.")
    lines = [BEGIN, "", head, "",
             "| code | positions P | L-BFGS iterations | peak RSS | RSS before the fit | evaluations | "
             "s / evaluation, wall (CPU) | rows vs before | load average |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        diff = difference(r["positions"], r["steps"], work) if r["which"] == "after" else None
        lines.append(f"| {r['which']} | {r['positions']:,} | {r['steps']} | {r['peak_rss'] / 2**30:.2f} GiB | "
                     f"{r['rss_before_fit'] / 2**30:.2f} GiB | {r['evaluations']} | "
                     f"{r['fit_wall'] / r['evaluations']:.1f} ({r['fit_cpu'] / r['evaluations']:.1f}) | "
                     f"{'-' if diff is None else f'{diff:.1e}'} | {r['load']} |")
    return "\n".join(lines + ["", END])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, help="write the table into this markdown file, between the markers")
    ap.add_argument("--before", default="006d5a3", help="git revision of the code before")
    ap.add_argument("--sizes", default=",".join(AFTER_SIZES),
                    help="the `after` runs: positions, each with :ITERATIONS or --steps")
    ap.add_argument("--before-sizes", default=",".join(BEFORE_SIZES), help="the `before` runs, as --sizes")
    ap.add_argument("--steps", type=int, default=1, help="L-BFGS iterations of a run that names none")
    ap.add_argument("--work", type=Path, default=OUT, help="scratch folder (the rows, the children's logs)")
    ap.add_argument("--k", type=int, default=K, help="new rows")
    ap.add_argument("--hidden", type=int, default=HIDDEN)
    ap.add_argument("--child", choices=["before", "after"], help=argparse.SUPPRESS)
    ap.add_argument("--positions", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--rows-out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child, args.positions, args.k, args.hidden, args.before, args.steps, args.rows_out)
    args.work.mkdir(parents=True, exist_ok=True)
    for p in args.work.glob("rows-*.pt"):
        p.unlink()

    def runs(spec: str) -> list[tuple[int, int]]:
        return [(int(x.split(":")[0]), int(x.split(":")[1]) if ":" in x else args.steps) for x in spec.split(",") if x]

    sizes, before = runs(args.sizes), runs(args.before_sizes)
    rows = []
    for P, steps in sorted(set(sizes) | set(before), key=lambda r: (r[1], r[0])):  # before and after side by side
        for which, wanted in (("before", before), ("after", sizes)):
            if (P, steps) in wanted:
                rows.append(run(which, P, args.k, args.hidden, args.before, steps, args.work))
    block = table(rows, args.before, args.k, args.hidden, args.work)
    print(block)
    if args.results:
        write_block(args.results, block, BEGIN, END, "The output fit's memory (issue 40)")


if __name__ == "__main__":
    main()
