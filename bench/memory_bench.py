"""Peak resident memory of `vocabsurgeon add --dry-run` against the number of words in the tokens file.

    python -m bench.memory_bench [--sizes 10000,100000,1000000] [--write]

Builds (once, in bench/work/) the checkpoint of bench/plan_bench.py: the 128,256-id byte-level BPE of
bench/common.py (Llama 3 sized) with 8-wide rows, so that the figure is the planning's, not the weights'.
For each size, writes that many distinct made-up names (bench/common.py's make_words) as a tokens file and
runs `vocabsurgeon add --dry-run --json -q` in a child process; the child's peak RSS is read from
`os.wait4` (the kernel's ru_maxrss of that child alone). A list over `wordlist.MAX_WORDS` is
refused before the tokenizer is read: its row says so, with the RSS of the refusal. `--write`
puts the table into bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORK = HERE / "work"

BEGIN = "<!-- memory_bench:begin -->"
END = "<!-- memory_bench:end -->"


def measure(src: Path, words: list[str], name: str, work: Path = WORK) -> dict:
    """Run the dry run on `words` in a child process; its exit status, wall seconds and peak RSS."""
    from bench.plan_bench import dry_run_command

    cmd = dry_run_command(src, words, name, work)
    tokens = Path(cmd[cmd.index("--tokens") + 1])
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    err = p.stderr.read().decode("utf-8", "replace").strip()
    p.stderr.close()
    p.returncode = os.waitstatus_to_exitcode(status)
    return {"words": len(words), "file_mb": round(tokens.stat().st_size / 1e6, 1), "exit": p.returncode,
            "peak_rss_mb": round(usage.ru_maxrss / 1024), "seconds": round(wall, 1),
            "message": err.splitlines()[-1].replace(f"{HERE.parent}/", "") if p.returncode else ""}


def table(rows: list[dict], load: str) -> str:
    lines = [BEGIN, "",
             "`python -m bench.memory_bench --write`: `vocabsurgeon add --dry-run --json -q` in a child process on "
             "a checkpoint with the 128,256-id byte-level BPE of bench/common.py (Llama 3 sized; 8-wide rows, so the "
             "figure is the plan's), made-up names (bench/common.py's make_words); peak RSS is the child's ru_maxrss. "
             f"Machine: 2 cores shared with other work, load while measuring: `{load}`.", "",
             "| words | tokens file | exit | peak RSS | wall s | note |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['words']:,} | {r['file_mb']} MB | {r['exit']} | {r['peak_rss_mb']:,} MB | {r['seconds']} "
                     f"| {r['message']} |")
    return "\n".join(lines + ["", END])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--write", action="store_true", help="put the table into bench/RESULTS.md")
    args = ap.parse_args(argv)
    from bench.common import make_words, write_block
    from bench.plan_bench import _checkpoint

    WORK.mkdir(exist_ok=True)
    src = _checkpoint(WORK / "plan-ckpt")
    known = set(json.loads((src / "tokenizer.json").read_text())["model"]["vocab"])
    sizes = [int(x) for x in args.sizes.split(",")]
    words = make_words(max(sizes), 0, known)
    rows = []
    for n in sizes:
        rows.append(measure(src, words[:n], f"memory-{n}"))
        print(json.dumps(rows[-1]), flush=True)
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    block = table(rows, load)
    print(block)
    if args.write:
        write_block(HERE / "RESULTS.md", block, BEGIN, END,
                    heading="Memory of a dry run against the number of words (issue 21)")


if __name__ == "__main__":
    main()
