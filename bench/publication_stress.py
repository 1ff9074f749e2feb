"""Proven before published, under fire (issue 46): rounds of a full `add` with validation (A) racing a
`--force --no-validate` run (B) onto the same target, with a `kill -9` of one of them at a random moment.

After every round the target must be absent, the previous output, or one whole output whose report and card
describe its own weights: the report's summary names the words in its tokenizer.json, config.json's
vocab_size equals the summary's rows, the safetensors header has that many rows, and the report lists exactly
the files in the directory. A run that exits 0 must be the one whose words are under the target name.

    python -m bench.publication_stress --rounds 50 --size quick
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from .common import SIZES, generate, machine_line

WORDS = {"A": ["Frodo", "Gandalf", "Aragorn"], "B": ["Bilbo"]}


def _command(which: str, src: Path, out: Path, force: bool) -> list[str]:
    args = [sys.executable, "-m", "vocabsurgeon", "add", "-q", *sum((["-t", w] for w in WORDS[which]), [])]
    if which == "A":
        args += ["--max-tokens", "128"]
    else:
        args += ["--no-validate"]
    return args + (["--force"] if force else []) + [str(src), str(out)]


def check_target(out: Path) -> str:
    """'absent', or the words of the one whole output under `out` ('A' or 'B'); raises when it is not whole."""
    if not out.exists():
        return "absent"
    report = json.loads((out / "vocabsurgeon_report.json").read_text())
    summary = report["add"]
    words = {a["token"] for a in summary["added"]}
    which = next(k for k, v in WORDS.items() if set(v) == words)
    config = json.loads((out / "config.json").read_text())
    assert config["vocab_size"] == summary["rows_after"], "config and report disagree"
    tokenizer = (out / "tokenizer.json").read_text()
    assert all(w in tokenizer for w in words), "the tokenizer lacks the report's words"
    assert not any(w in tokenizer for k, ws in WORDS.items() if k != which for w in ws), "another run's words"
    from safetensors import safe_open

    shards = sorted(out.glob("*.safetensors"))
    rows = {f.get_slice(n).get_shape()[0] for p in shards for f in [safe_open(str(p), "np")] for n in f.keys()
            if n.endswith("embed_tokens.weight")}
    assert rows == {summary["rows_after"]}, f"weights have {rows} rows, the report {summary['rows_after']}"
    listed = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert sorted(report["files"]) == listed, "the report's file list is not the directory's"
    assert (f"{summary['rows_before']:,} -> {summary['rows_after']:,}" in (out / "README.md").read_text()
            or str(summary["rows_after"]) in (out / "README.md").read_text()), "the card describes other rows"
    return which


def one_round(src: Path, out: Path, rng: random.Random, before: str) -> dict:
    procs = {k: subprocess.Popen(_command(k, src, out, force=True), stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True) for k in ("A", "B")}
    victim = rng.choice(["A", "B", None])
    if victim is not None:
        time.sleep(rng.uniform(0.0, 8.0))
        if procs[victim].poll() is None:
            procs[victim].send_signal(signal.SIGKILL)
    codes = {k: p.wait() for k, p in procs.items()}
    state = check_target(out)
    winners = [k for k, c in codes.items() if c == 0]
    # Runs that overlap: the first to publish wins, the other sees the target changed and fails. Both exit 0 only
    # when one published before the other had started (its --force then replaced a whole output, as asked).
    if len(winners) == 2:
        assert state in winners, f"both exited 0, but {state} is published"
    else:
        assert state == (winners[0] if winners else before), f"exit codes {codes}, but {state} is published"
    return {"killed": victim, "codes": codes, "published": state}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--size", default="quick", choices=sorted(SIZES))
    ap.add_argument("--work", type=Path, default=Path("bench/work/publication"))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    src = args.work / f"ckpt-{args.size}"
    if not (src / "config.json").exists():
        generate(SIZES[args.size], src)
    out = args.work / "out"
    shutil.rmtree(out, ignore_errors=True)
    rng = random.Random(args.seed)
    tally: dict[str, int] = {}
    state = "absent"
    for i in range(args.rounds):
        r = one_round(src, out, rng, state)
        state = r["published"]
        key = f"published {r['published']}"
        tally[key] = tally.get(key, 0) + 1
        print(f"round {i + 1}: killed {r['killed']}, exit codes {r['codes']}, published {r['published']}", flush=True)
    print(f"{args.rounds} rounds, every target whole and self-described: {tally}; {machine_line()}")


if __name__ == "__main__":
    main()
