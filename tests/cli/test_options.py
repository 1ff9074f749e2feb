"""Every option of every command, given a value out of its range: a one-line error or a run, never "internal error".

The list of options is read from click's command objects, so an option added later is covered
without touching this file. Each command runs on the tiny GPT-2 with the cheapest arguments that
still reach the option's check (`add --dry-run`: every option is checked before any work).
"""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from vocabsurgeon.cli.commands import cli

# Values a user may well type by mistake, per option type.
BAD_INTS = ["-1", "0", str(2**70)]
BAD_FLOATS = ["-1", "nan", "-inf"]
BAD_STRINGS = [""]


def _bad_values(param: click.Option, tmp) -> list[str]:
    t = param.type
    if isinstance(t, click.Choice) or param.is_flag or param.count:
        return []
    if isinstance(t, click.types.IntParamType):
        return BAD_INTS
    if isinstance(t, click.types.FloatParamType):
        return BAD_FLOATS
    if isinstance(t, click.Path):
        return [str(tmp), str(tmp / "missing" / "x.txt"), str(tmp / "missing" / "x.png"), ""]
    return BAD_STRINGS


def _cases():
    for name, cmd in sorted(cli.commands.items()):
        for param in cmd.params:
            # flags and choices are left out: click itself refuses any other value
            if isinstance(param, click.Option) and not param.hidden and _bad_values(param, Path(".")):
                yield pytest.param(name, param.opts[0], id=f"{name} {param.opts[0]}")


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A tiny GPT-2 and its expansion by `add`, for the commands that read two checkpoints."""
    from builders import tiny_gpt2

    root = tmp_path_factory.mktemp("options")
    src = tiny_gpt2(root / "gpt2")
    out = root / "out"
    r = CliRunner().invoke(cli, ["add", "-q", "--no-validate", "-t", "Frodo", str(src), str(out)])
    assert r.exit_code == 0, r.output
    corpus = root / "corpus.txt"
    corpus.write_text("Frodo went to the Shire. " * 20, encoding="utf-8")
    return src, out, corpus


def _base_args(command: str, src, out, corpus, tmp) -> list[str]:
    """The cheapest valid invocation of `command` (its option under test is appended)."""
    return {
        "add": ["add", "--dry-run", "-t", "Frodo", str(src), str(tmp / "new")],
        "validate": ["validate", "--max-tokens", "32", str(src), str(out)],
        "inspect": ["inspect", "--max-tokens", "32", str(src)],
        "compare": ["compare", str(src), str(out)],
        "neighbors": ["neighbors", str(out), "Frodo"],
        "suggest": ["suggest", "--corpus", str(corpus), str(src)],
        "trim": ["trim", "--dry-run", "--corpus", str(corpus), "--min-count", "1", str(src), str(tmp / "new")],
        "extend": ["extend", "--dry-run", "--corpus", str(corpus), "--new-tokens", "3", str(src), str(tmp / "new")],
        "push": ["push", str(out), "me/never-pushed"],
    }[command]


@pytest.mark.parametrize("command,opt", list(_cases()))
def test_an_out_of_range_option_value_never_gives_an_internal_error(command, opt, written, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # whatever a value makes a command write lands here, not in the repo
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # push and --revision must fail here, not reach the network
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    src, out, corpus = written
    param = next(p for p in cli.commands[command].params if isinstance(p, click.Option) and p.opts[0] == opt)
    for value in _bad_values(param, tmp_path):
        args = _base_args(command, src, out, corpus, tmp_path) + [opt, value]
        r = CliRunner().invoke(cli, args)
        said = r.output  # stdout and stderr
        assert "internal error" not in said, (args, said)
        assert r.exception is None or isinstance(r.exception, SystemExit), (args, r.exception)
        assert r.exit_code in (0, 2, 3, 4, 5), (args, r.exit_code, said)  # 5: -o in a missing directory
        if r.exit_code == 2:  # one line that names the option or the value
            err = [line for line in said.splitlines() if line.startswith("Error")]
            assert len(err) == 1, (args, said)

