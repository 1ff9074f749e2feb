"""bench.memory_bench keeps working: it measures a dry run's peak memory in a child, and a refusal.

No figure is asserted beyond being measured: the figures themselves are in bench/RESULTS.md.
"""

from __future__ import annotations

from bench import memory_bench
from vocabsurgeon.add.wordlist import MAX_WORDS


def test_the_memory_bench_measures_a_dry_run_and_a_refused_list(gpt2_ckpt, tmp_path):
    row = memory_bench.measure(gpt2_ckpt, ["Frodo", "Gandalf"], "two", tmp_path)
    assert row["exit"] == 0 and row["peak_rss_mb"] > 0 and row["words"] == 2
    too_many = [f"w{i}" for i in range(MAX_WORDS + 1)]
    row = memory_bench.measure(gpt2_ckpt, too_many, "too-many", tmp_path)
    assert row["exit"] == 2
    assert f"{MAX_WORDS + 1:,} words, over the limit of {MAX_WORDS:,} words" in row["message"]
    table = memory_bench.table([row], "load average: 1.00")
    assert table.startswith(memory_bench.BEGIN) and table.endswith(memory_bench.END)
    assert f"| {MAX_WORDS + 1:,} | " in table
