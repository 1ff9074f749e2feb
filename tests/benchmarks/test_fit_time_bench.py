"""`python -m bench.fit_time` keeps working: its tiny mode end to end (no timing assertions)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_tiny_mode_fits_and_reports_each_stage(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bench.fit_time", "--size", "tiny", "--words", "4", "--runs", "mean",
                           "fitted --untie", "--work", str(tmp_path)], capture_output=True, text=True, timeout=600,
                          check=False, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [r["init"] for r in rows] == ["mean", "fitted --untie"] and all(r["exit"] == 0 for r in rows)
    fitted = rows[1]
    assert fitted["fit_seconds"] > 0 and fitted["stages"]["input"] > 0 and fitted["stages"]["output"] > 0
    assert fitted["skipped_steps"] == 0 and 0 <= fitted["shrink"] <= 1 and "load average" in fitted["uptime_before"]
    assert not list(tmp_path.glob("fit-out-*"))  # outputs removed after each run
