"""Supported versions: below the floors that CI runs, vocabsurgeon stops at start with one line naming what it
found and what it needs (a command and the library alike), rather than writing something different."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from vocabsurgeon import _compat, add_tokens
from vocabsurgeon.cli.commands import cli
from vocabsurgeon.errors import UnsupportedVersion

REPO = Path(__file__).resolve().parents[1]
GPT2 = REPO / "fixtures" / "gpt2-tiny"

pytestmark = pytest.mark.floor


@pytest.fixture
def installed(monkeypatch):
    """Pretend these versions are installed (the others as they are); the check runs afresh."""
    real = _compat.version
    fake: dict[str, str] = {}
    monkeypatch.setattr(_compat, "version", lambda name: fake.get(name) or real(name))
    _compat.check_versions.cache_clear()
    yield fake
    _compat.check_versions.cache_clear()


def test_a_command_below_the_floor_says_what_it_found_and_needs_in_one_line_and_writes_nothing(installed, tmp_path):
    installed["transformers"] = "4.57.1"
    out = tmp_path / "out"
    r = CliRunner().invoke(cli, ["add", "-t", "Frodo", str(GPT2), str(out)])
    assert r.exit_code == 2
    assert r.stderr == ("Error: transformers 4.57.1 found, >= 5.17.0 needed (vocabsurgeon is tested from these versions "
                        "on; older ones tokenize and load checkpoints otherwise): pip install -U 'transformers>=5.17.0'\n")
    assert not out.exists()


def test_every_package_below_its_floor_is_named(installed, tmp_path):
    installed.update({"transformers": "5.16.1", "tokenizers": "0.22.2"})
    r = CliRunner().invoke(cli, ["suggest", str(GPT2), "--corpus", str(REPO / "fixtures" / "corpus.txt")])
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1
    assert r.stderr.startswith("Error: transformers 5.16.1 found, >= 5.17.0 needed; tokenizers 0.22.2 found, "
                               ">= 0.23.1 needed (")
    assert r.stderr.endswith("pip install -U 'transformers>=5.17.0' 'tokenizers>=0.23.1'\n")


def test_the_library_refuses_too(installed, tmp_path):
    installed["transformers"] = "4.46.0"
    with pytest.raises(UnsupportedVersion, match=r"^transformers 4\.46\.0 found, >= 5\.17\.0 needed") as e:
        add_tokens(GPT2, tmp_path / "out", ["Frodo"], init="mean")
    assert e.value.exit_code == 2
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("found", ["5.17.0", "5.17.0.dev0", "5.24.0", "6.0.0rc1"])
def test_the_floor_and_later_versions_run(installed, found, tmp_path):
    installed["transformers"] = found
    r = CliRunner().invoke(cli, ["add", "-q", "--no-validate", "-t", "Frodo", str(GPT2), str(tmp_path / "out")])
    assert r.exit_code == 0, r.output


def test_the_installed_versions_are_supported():
    assert _compat.too_old(_compat.installed_versions()) == []


def _pins(text: str) -> dict[str, str]:
    return {m[0].lower().replace("_", "-"): m[1] for m in re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", text, re.M)}


def test_pyproject_ci_and_the_check_agree_on_the_floors():
    """pyproject.toml's floors are the versions CI installs (constraints-floor.txt), which the check refuses below."""
    tomllib = pytest.importorskip("tomllib")
    deps = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    declared = {m[0].lower(): m[1] for d in deps for m in re.findall(r"^([A-Za-z0-9_.-]+)>=([^,;\s]+)", d)}
    floor = _pins((REPO / "constraints-floor.txt").read_text(encoding="utf-8"))
    assert floor == _compat.MINIMUM
    assert {k: declared[k] for k in _compat.MINIMUM} == _compat.MINIMUM
    run = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "constraints-floor.txt" in run
