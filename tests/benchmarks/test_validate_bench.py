"""`python -m bench.validate_bench` keeps working: its tiny mode end to end, and its block in RESULTS.md.

No timing assertions: the figures are only checked to be measured and reported.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # two validate processes (each imports torch and transformers): ~30 s on 2 cores
def test_tiny_mode_measures_both_methods_and_keeps_the_rest_of_results(tmp_path):
    from bench import validate_bench

    results = tmp_path / "RESULTS.md"
    results.write_text(f"# Results\n\nprose\n\n{validate_bench.BEGIN}\nold\n{validate_bench.END}\n\n## Later\nkept\n")
    proc = subprocess.run([sys.executable, "-m", "bench.validate_bench", "--size", "tiny", "--work", str(tmp_path / "work"),
                           "--results", str(results)], capture_output=True, text=True, timeout=600, check=False, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = results.read_text(encoding="utf-8")
    assert text.startswith("# Results\n\nprose\n\n") and text.endswith("\n\n## Later\nkept\n") and "old" not in text
    rows = [line for line in text.splitlines() if line.startswith("| tiny |")]
    assert len(rows) == 3 and "| two-pass |" in rows[0] and "| one-pass |" in rows[1]
    assert float(rows[2].split("|")[-2]) <= 1e-6  # the KL figures of both methods agree
