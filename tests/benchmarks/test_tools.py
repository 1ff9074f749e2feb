"""The developer tools in tools/ run as `python -m tools.NAME` from the repository root."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=300, cwd=REPO,
                          check=False)


def test_phases_times_every_step_of_an_add_and_its_free_copy_bound(tmp_path):
    for extra, out in (([], tmp_path / "out"), (["--free-copy"], tmp_path / "free")):
        r = _tool("tools.phases", *extra, "add", "--tokens", "fixtures/lotr.txt", "--init", "mean", "-q", "--no-validate",
                  "fixtures/llama-tiny", str(out))
        assert r.returncode == 0, r.stderr[-3000:]
        steps = {line.split()[0] for line in r.stderr.splitlines() if line.strip()}
        assert {"plan_tokens", "write_rows", "rows_kept", "verify_tokenizer", "total"} <= steps, r.stderr[-3000:]
    assert (tmp_path / "out" / "config.json").exists()
    assert not (tmp_path / "free").exists()  # a --free-copy output has holes for weights: removed


def test_cli_snapshot_diff_says_which_files_differ(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        (d / "help-add.txt").write_text("Usage: vocabsurgeon add\n")
    (a / "json-add.txt").write_text('exit 0\n{"kl": 0.1}\n')
    (b / "json-add.txt").write_text('exit 0\n{"kl": 0.1}\n')
    same = _tool("tools.cli_snapshot", "diff", str(a), str(b))
    assert (same.returncode, same.stdout, same.stderr) == (0, "", "2 files, 0 differ\n")
    (b / "json-add.txt").write_text('exit 0\n{"kl": 0.2}\n')
    changed = _tool("tools.cli_snapshot", "diff", str(a), str(b))
    assert changed.returncode == 1 and changed.stderr == "2 files, 1 differ\n"
    assert '-{"kl": 0.1}\n+{"kl": 0.2}\n' in changed.stdout and "a/json-add.txt" in changed.stdout
