"""`python -m bench.extend_time` keeps working: extend and add of the same number of rows, each timed and reported.

No timing assertions: the figures are only checked to be measured and reported.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

RUSSIAN = ("Программа читает файл и пишет результат в новый файл. Если файл не найден, программа сообщает об ошибке "
           "и завершает работу. Файл настроек читается при запуске программы, а результат пишется в каталог.")


def test_tiny_mode_adds_as_many_rows_both_ways_and_reports_both_ratios(tmp_path):
    from bench import extend_time

    corpus = tmp_path / "ru.txt"
    corpus.write_text("\n\n".join([RUSSIAN] * 40), encoding="utf-8")
    results = tmp_path / "RESULTS.md"
    results.write_text("# Results\n\nprose\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "bench.extend_time", "--size", "tiny", "--rows", "12", "--repeats",
                           "1", "--corpus", str(corpus), "--work", str(tmp_path / "work"), "--results", str(results)],
                          capture_output=True, text=True, timeout=300, cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = results.read_text(encoding="utf-8")
    assert text.startswith("# Results\n\nprose\n") and text.count(extend_time.BEGIN) == 1
    assert "Rows: extend 12, add 12 " in text  # the same number of rows, as add's own dry run counts them
    for run in ("`extend`", "`add`", "`extend --dry-run`", "`add --dry-run`"):
        assert f"| {run} | " in text
    assert "| whole run | **" in text and "| the rest (run less its dry run: writing the rows) | **" in text
    assert not (tmp_path / "work" / "out-extend-time").exists()
