"""bench.fit_memory keeps working: the output fit of this tree and of the code before, each in a child process,
on the same synthetic inputs (tiny shapes), and its RESULTS.md block.

No figure is asserted beyond being measured, except that both fits give the same rows.
"""

from __future__ import annotations

import subprocess

import pytest

from bench import fit_memory
from bench.common import REPO


def _has_revision(rev: str) -> bool:
    return subprocess.run(["git", "cat-file", "-e", f"{rev}:vocabsurgeon/init/fitted/causal.py"], cwd=REPO,
                          capture_output=True).returncode == 0


@pytest.mark.skipif(not _has_revision("006d5a3"), reason="the code before (git 006d5a3) is not in this checkout's history")
def test_the_fit_memory_bench_runs_both_fits_and_writes_its_block(tmp_path):
    results = tmp_path / "RESULTS.md"
    fit_memory.main(["--sizes", "200:3", "--before-sizes", "200", "--k", "20", "--hidden", "8", "--steps", "3",
                     "--results", str(results), "--work", str(tmp_path / "work")])
    text = results.read_text()
    assert fit_memory.BEGIN in text and fit_memory.END in text
    before, after = [line for line in text.splitlines() if line.startswith(("| before | 200 | 3 ", "| after | 200 | 3 "))]
    assert float(after.split(" | ")[7]) < 1e-9  # rows vs before: the same fit
