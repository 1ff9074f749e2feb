"""The README and the manual (docs/) say what the code does: their Python examples run as written, the
getting-started page runs as written in a copy of the repository's layout, the README shows every command and
links only to files that exist, and every page is in the site's nav and on its home page."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from vocabsurgeon.cli.commands import cli

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = REPO / "docs"
GETTING_STARTED = DOCS / "getting-started.md"  # runs from the repository root: its own test below
NOT_RUN = "<!-- not run by tests/test_docs.py:"  # a block that needs the network says so, and why, before it
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _python_blocks() -> list[tuple[str, int, str]]:
    """(file, line, code) of every ```python block of the README and the manual, but those marked NOT_RUN."""
    found = []
    for path in [README, *sorted(set(DOCS.glob("*.md")) - {GETTING_STARTED})]:
        text = path.read_text(encoding="utf-8")
        for m in BLOCK.finditer(text):
            before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
            if not before.startswith(NOT_RUN):
                found.append((path.relative_to(REPO).as_posix(), text.count("\n", 0, m.start()) + 1, m.group(1)))
    return found


BLOCKS = _python_blocks()


def test_the_readme_and_the_python_api_page_have_examples_to_run():
    files = {f for f, _, _ in BLOCKS}
    assert {"README.md", "docs/python-api.md"} <= files


@pytest.mark.parametrize("where,line,code", BLOCKS, ids=[f"{f}:{n}" for f, n, _ in BLOCKS])
def test_python_example_runs_as_written(where, line, code, tmp_path, monkeypatch, capsys):
    """Run in a directory that holds what the examples name: `ckpt/` (the committed tiny GPT-2),
    `lotr.txt` and a corpus `en.txt`; `out/` does not exist yet."""
    shutil.copytree(REPO / "fixtures" / "gpt2-tiny", tmp_path / "ckpt")
    shutil.copy(REPO / "fixtures" / "lotr.txt", tmp_path / "lotr.txt")
    shutil.copy(REPO / "fixtures" / "corpus.txt", tmp_path / "en.txt")
    monkeypatch.chdir(tmp_path)
    exec(compile(code, f"{where}:{line}", "exec"), {"__name__": "__main__"})
    assert (tmp_path / "out" / "config.json").exists()  # every runnable example writes an output
    assert capsys.readouterr().out  # and prints what it shows


def test_the_getting_started_page_runs_as_written(tmp_path, monkeypatch, capsys):
    """Its commands and its Python in order, in a directory laid out as the repository (the install aside), and
    the Python prints what the block after it shows."""
    (tmp_path / "fixtures").mkdir()
    shutil.copytree(REPO / "fixtures" / "gpt2-tiny", tmp_path / "fixtures" / "gpt2-tiny")
    shutil.copy(REPO / "fixtures" / "lotr.txt", tmp_path / "fixtures" / "lotr.txt")
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"^```(python)?\n(.*?)^```", GETTING_STARTED.read_text(encoding="utf-8"), re.S | re.M)
    ran = []
    for i, (lang, code) in enumerate(blocks):
        if lang:
            capsys.readouterr()
            exec(compile(code, f"docs/getting-started.md, block {i}", "exec"), {"__name__": "__main__"})
            assert capsys.readouterr().out == blocks[i + 1][1], "the output shown after the Python is not what it prints"
            ran.append("python")
        for line in code.splitlines() if not lang else []:
            if line.startswith("vocabsurgeon "):
                result = CliRunner().invoke(cli, shlex.split(line)[1:])
                assert result.exit_code == 0, f"{line}\n{result.output}"
                ran.append(line.split()[1])
    assert ran == ["add", "python", "validate", "inspect"]


def test_the_home_page_of_the_manual_links_every_page():
    linked = set(re.findall(r"\]\(([\w-]+\.md)\)", (DOCS / "index.md").read_text(encoding="utf-8")))
    assert {p.name for p in DOCS.glob("*.md")} - {"index.md"} <= linked


def test_the_readme_is_a_front_page_with_one_example_of_each_command():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 150
    figure = re.search(r"\bx\d\.\d{3}\b|\b\d+(?:\.\d+)? (?:s|CPU s|GB peak)\b", text)  # measured figures: behind links
    assert figure is None, f"README.md quotes {figure.group()!r}: link to docs/ or bench/RESULTS.md instead"
    examples = "\n".join(re.findall(r"^```\n(.*?)^```", text, re.S | re.M))
    for name in cli.commands:
        assert re.search(rf"^vocabsurgeon {name} ", examples, re.M), f"README.md has no example of `vocabsurgeon {name}`"


@pytest.mark.parametrize("path", [README, *sorted(DOCS.glob("*.md")), REPO / "bench" / "README.md"],
                         ids=lambda p: p.relative_to(REPO).as_posix())
def test_relative_links_point_at_files_that_exist(path):
    """mkdocs build --strict checks the manual's links and anchors in CI; this checks the README's too."""
    text = path.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" not in target:
            assert (path.parent / target).exists(), f"{path.name} links to {target}, which does not exist"


def test_every_page_of_the_manual_is_in_the_site_nav():
    nav = set(re.findall(r"^  - [^:]+: (\S+\.md)$", (REPO / "mkdocs.yml").read_text(encoding="utf-8"), re.M))
    assert nav == {p.name for p in DOCS.glob("*.md")}
