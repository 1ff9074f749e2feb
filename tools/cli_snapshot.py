"""Snapshot of what users and pipelines read from the CLI: every `--help` text and the `--json` output
of each command on the committed fixtures, so a refactor can show that it changed neither.

    python -m tools.cli_snapshot write bench/work/snap-before     # before the change
    python -m tools.cli_snapshot write bench/work/snap-after      # after it
    python -m tools.cli_snapshot diff bench/work/snap-before bench/work/snap-after

`diff` exits 1 and prints a unified diff when any file differs. The JSON is normalised only where a
run cannot repeat itself: wall-clock seconds become 0 and the temporary directories become
`<TMP>`; every other byte (figures, ids, keys, key order) is compared as printed.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
# Keys whose values are wall-clock measurements, not results.
TIMING_KEY = re.compile(r"(^|_)(seconds|elapsed|wall)(_|$)|_s$")


def _commands() -> list[list[str]]:
    """Every command path of the click group: [], ["add"], ["validate"], ... (new commands included)."""
    from vocabsurgeon.cli.commands import cli as main

    paths: list[list[str]] = [[]]
    for name in sorted(main.list_commands(click.Context(main))):
        paths.append([name])
    return paths


def _runs(tmp: Path) -> dict[str, list[str]]:
    """The `--json` invocations, by snapshot file name. Order matters: later runs read earlier outputs."""
    gpt2, llama = FIXTURES / "gpt2-tiny", FIXTURES / "llama-tiny"
    lotr, corpus_lotr = FIXTURES / "lotr.txt", FIXTURES / "corpus_lotr.txt"
    return {
        "add-dry-gpt2": ["add", "--tokens", str(lotr), "--dry-run", "--json", str(gpt2), str(tmp / "dry")],
        "add-gpt2": ["add", "--tokens", str(lotr), "--init", "mean", "--json", str(gpt2), str(tmp / "gpt2")],
        "add-llama": ["add", "--tokens", str(lotr), "--init", "subword-mean", "--no-validate", "--json",
                      str(llama), str(tmp / "llama")],
        "validate-llama": ["validate", "--json", "--corpus", str(corpus_lotr), str(llama), str(tmp / "llama")],
        "inspect-gpt2": ["inspect", "--json", str(gpt2)],
        "inspect-llama": ["inspect", "--json", str(llama)],
        "compare-llama": ["compare", "--json", str(llama), str(tmp / "llama")],
        "neighbors-gpt2": ["neighbors", "--json", str(tmp / "gpt2"), "Frodo", "Gandalf"],
        "suggest-gpt2": ["suggest", "--json", "--corpus", str(corpus_lotr), "--top", "10", str(gpt2)],
    }


def _normalise(value, tmp: str):
    if isinstance(value, dict):
        return {k: (0 if TIMING_KEY.search(k) and isinstance(v, (int, float)) else
                    {kk: 0 for kk in v} if k == "seconds" and isinstance(v, dict) else _normalise(v, tmp))
                for k, v in value.items()}
    if isinstance(value, list):
        return [_normalise(v, tmp) for v in value]
    if isinstance(value, str):
        return value.replace(tmp, "<TMP>").replace(str(ROOT), "<ROOT>")
    return value


def _cli(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "100", "PYTHONHASHSEED": "0"}
    return subprocess.run([sys.executable, "-m", "vocabsurgeon", *args], capture_output=True, text=True, env=env, cwd=ROOT)


def write(dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for path in _commands():
        done = _cli([*path, "--help"])
        (dest / f"help-{'-'.join(path) or 'main'}.txt").write_text(f"exit {done.returncode}\n{done.stdout}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in _runs(Path(tmp)).items():
            done = _cli(args)
            try:
                body = json.dumps(_normalise(json.loads(done.stdout), tmp), indent=2, ensure_ascii=False)
            except json.JSONDecodeError:
                body = done.stdout.replace(tmp, "<TMP>")
            (dest / f"json-{name}.txt").write_text(f"exit {done.returncode}\n{body}\n")
            print(f"{name}: exit {done.returncode}", file=sys.stderr)


def diff(a: Path, b: Path) -> int:
    names = sorted({p.name for p in a.iterdir()} | {p.name for p in b.iterdir()})
    changed = 0
    for name in names:
        left = (a / name).read_text().splitlines(keepends=True) if (a / name).exists() else []
        right = (b / name).read_text().splitlines(keepends=True) if (b / name).exists() else []
        if left != right:
            changed += 1
            sys.stdout.writelines(difflib.unified_diff(left, right, f"{a.name}/{name}", f"{b.name}/{name}"))
    print(f"{len(names)} files, {changed} differ", file=sys.stderr)
    return 1 if changed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    sub.add_parser("write").add_argument("dest", type=Path)
    d = sub.add_parser("diff")
    d.add_argument("a", type=Path)
    d.add_argument("b", type=Path)
    args = parser.parse_args()
    if args.verb == "write":
        write(args.dest)
        return 0
    return diff(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
