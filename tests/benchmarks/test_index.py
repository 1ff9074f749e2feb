"""bench/README.md is the index of bench/ and tools/: every script is listed with a command that exists,
and every RESULTS.md block it names is there."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
INDEX = (REPO / "bench" / "README.md").read_text(encoding="utf-8")
RESULTS = (REPO / "bench" / "RESULTS.md").read_text(encoding="utf-8")


def _modules(folder: str) -> set[str]:
    return {p.stem for p in (REPO / folder).glob("*.py") if p.stem != "__init__"}


def test_every_bench_module_and_tool_is_in_the_index():
    named = set(re.findall(r"python -m (?:bench|tools)\.([a-z_]+)", INDEX)) | set(re.findall(r"`bench/(\w+)\.py`", INDEX))
    assert _modules("bench") | _modules("tools") <= named


def test_every_command_of_the_index_names_a_module_that_exists():
    for package, name in re.findall(r"python -m (bench|tools)\.([a-z_]+)", INDEX):
        assert name in _modules(package), f"bench/README.md runs {package}.{name}, which does not exist"


def test_every_results_block_the_index_names_is_in_results():
    markers = re.findall(r"\(`([\w.-]+)`\)", INDEX)
    assert len(markers) >= 8
    for m in markers:
        assert f"<!-- {m}:begin -->" in RESULTS and f"<!-- {m}:end -->" in RESULTS, m


def test_no_bench_or_tool_script_edits_sys_path():
    for p in [*(REPO / "bench").glob("*.py"), *(REPO / "tools").glob("*.py")]:
        assert "sys.path.insert" not in p.read_text(encoding="utf-8"), p.name
