"""`python -m bench.cov_bench` keeps working: its small mode writes both blocks, with an accurate covariance.

No timing assertions: the figures are only checked to be measured and reported.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_small_mode_writes_both_blocks_and_the_covariance_is_accurate(tmp_path):
    from bench import cov_bench

    results = tmp_path / "RESULTS.md"
    results.write_text(f"# Results\n\nprose\n\n{cov_bench.BEGIN}\nold\n{cov_bench.END}\n\n## Later\nkept\n")
    proc = subprocess.run([sys.executable, "-m", "bench.cov_bench", "all", "--rows", "3000", "--hidden", "64",
                           "--old-rows", "1000", "--add", "tiny", "--repeats", "1", "--work", str(tmp_path / "work"),
                           "--results", str(results)], capture_output=True, text=True, timeout=300, cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = results.read_text(encoding="utf-8")
    assert text.startswith("# Results\n\nprose\n\n") and "\n## Later\nkept\n" in text and "\nold\n" not in text
    assert text.count(cov_bench.ADD_BEGIN) == 1 and text.count(cov_bench.BEGIN) == 1
    row = next(line for line in text.splitlines() if line.startswith("| `accumulate_stats(cov=True)` | 3,000 |"))
    assert float(row.split("|")[-2]) <= 5e-6  # against float64 np.cov, on rows far from zero
    assert re.search(r"\| mean-noise \| [0-9.]+ s \|", text) and "mean-noise / mean: **" in text
