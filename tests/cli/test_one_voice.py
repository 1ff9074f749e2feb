"""One voice (issue 46): progress reaches a log as a few lines, also with --json; the plan goes to stderr;
a warning is said once, where a user reads it; every command refuses a checkpoint without tokenizer files
as `add` does, in one line and before any work."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from vocabsurgeon.cli.commands import cli

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
GPT2, LOTR, CORPUS = FIXTURES / "gpt2-tiny", FIXTURES / "lotr.txt", FIXTURES / "corpus_lotr.txt"


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_progress_reaches_a_log_as_a_few_lines_per_count(tmp_path):
    # CliRunner's stderr is not a terminal: no bars there, a line per count start and end, few between
    r = run("extend", "--dry-run", "--corpus", CORPUS, "--new-tokens", "5", GPT2, tmp_path / "out")
    assert r.exit_code == 0, r.output
    counting = [line for line in r.stderr.splitlines() if line.startswith("reading corpus: ")]
    assert counting[0] == f"reading corpus: started, {CORPUS.stat().st_size / 1024:.1f} KiB"
    assert counting[-1].startswith("reading corpus: done, ") and len(counting) <= 12
    assert "\r" not in r.stderr
    r = run("inspect", "--max-tokens", "64", GPT2)  # the model run says that it runs, and how far it got
    assert r.exit_code == 0, r.output
    lines = r.stderr.splitlines()
    assert lines[0] == "running: loading the model" and re.fullmatch(r"log Z: started, \d+ tok", lines[1])
    assert lines[-1].startswith("log Z: done, ") and len(lines) <= 13


def test_json_keeps_progress_on_stderr_and_quiet_silences_it(tmp_path):
    r = run("extend", "--dry-run", "--json", "--corpus", CORPUS, "--new-tokens", "5", GPT2, tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["dry_run"] is True  # stdout: the JSON and nothing else
    assert "reading corpus: started" in r.stderr
    r = run("extend", "--dry-run", "--json", "-q", "--corpus", CORPUS, "--new-tokens", "5", GPT2, tmp_path / "out")
    assert r.exit_code == 0 and r.stderr == "" and json.loads(r.stdout)["dry_run"] is True


@pytest.mark.parametrize("command", ["add", "extend"])
def test_the_plan_goes_to_stderr_with_and_without_dry_run(command, tmp_path):
    args = ["-t", "Frodo"] if command == "add" else ["--corpus", CORPUS, "--new-tokens", "5"]
    first = {"add": "gpt2 checkpoint (tied embeddings)", "extend": "gpt2 checkpoint, byte-level-bpe tokenizer"}[command]
    dry = run(command, *args, "--dry-run", GPT2, tmp_path / "dry")
    real = run(command, *args, "--no-validate", GPT2, tmp_path / "out")
    assert dry.exit_code == real.exit_code == 0, (dry.output, real.output)
    assert dry.stdout == real.stdout == ""
    assert first in dry.stderr and first in real.stderr
    plan = json.loads(run(command, *args, "--dry-run", "--json", GPT2, tmp_path / "dry").stdout)
    assert plan["dry_run"] is True


def test_a_plan_note_is_said_once_in_the_plan(tmp_path):
    r = run("add", "--tokens", LOTR, "--init", "mean", "--no-validate", GPT2, tmp_path / "out")
    assert r.exit_code == 0, r.output
    said = [line for line in r.stderr.splitlines() if "'mithril' in" in line]
    assert len(said) == 1 and said[0].startswith("note: 1 kept token(s) are not one token in some contexts"), said
    assert not r.stderr.startswith("WARNING")
    d = json.loads(run("add", "--tokens", LOTR, "--dry-run", "--json", GPT2, tmp_path / "dry").stdout)
    assert any("'mithril'" in n for n in d["tokenizer_notes"])  # --json: the note is in the JSON


def test_suggest_says_its_note_once(tmp_path):
    r = run("suggest", "--corpus", CORPUS, "--top", "10", GPT2)
    assert r.exit_code == 0, r.output
    said = [line for line in r.stderr.splitlines() if "'said'" in line]
    assert said == ["note: 1 proposed word(s) keep their old pieces in some contexts (e.g. 'said' in \"'said'\"): no "
                    "entry of this tokenizer reaches them there without changing how old text tokenizes (`add "
                    "--dry-run --json`: contexts_not_one_token)"]
    d = json.loads(run("suggest", "--json", "--corpus", CORPUS, "--top", "10", GPT2).stdout)
    assert d["notes"] == [said[0].removeprefix("note: ")]


@pytest.fixture
def no_tokenizer(tmp_path) -> Path:
    """The tiny GPT-2 without its tokenizer files."""
    ckpt = tmp_path / "no-tokenizer"
    shutil.copytree(GPT2, ckpt)
    for f in ckpt.iterdir():
        if f.name.startswith("tokenizer") or f.name in ("vocab.json", "merges.txt", "special_tokens_map.json"):
            f.unlink()
    return ckpt


@pytest.mark.parametrize("command", ["add", "inspect", "extend", "suggest", "validate-base", "validate-new", "trim"])
def test_every_command_refuses_a_checkpoint_without_tokenizer_files_in_one_line(command, no_tokenizer, tmp_path):
    out = tmp_path / "out"
    args = {
        "add": ["add", "-t", "Frodo", no_tokenizer, out],
        "inspect": ["inspect", no_tokenizer],
        "extend": ["extend", "--corpus", CORPUS, "--new-tokens", "5", no_tokenizer, out],
        "suggest": ["suggest", "--corpus", CORPUS, no_tokenizer],
        "validate-base": ["validate", no_tokenizer, GPT2],
        "validate-new": ["validate", GPT2, no_tokenizer],
        "trim": ["trim", "--corpus", CORPUS, "--vocab-size", "100", no_tokenizer, out],
    }[command]
    r = run(*args)
    assert r.exit_code == 2, r.output
    assert r.stdout == ""
    assert r.stderr == (
        f"Error: {no_tokenizer / 'tokenizer.json'}: missing, and there is no slow tokenizer file (tokenizer.model, "
        "spiece.model, sentencepiece.bpe.model, vocab.json, vocab.txt) to convert; vocabsurgeon edits fast tokenizers "
        "(tokenizer.json). Save the tokenizer with transformers (AutoTokenizer.from_pretrained(dir).save_pretrained(dir)) "
        "first\n")
    assert not out.exists()


def test_the_library_refuses_it_too(no_tokenizer, tmp_path):
    from vocabsurgeon import InputError
    from vocabsurgeon.explore.suggest import suggest_tokens
    from vocabsurgeon.trim.surgery import TrimOptions, plan_trim
    from vocabsurgeon.validation.validate import validate_checkpoint

    for call in (lambda: suggest_tokens(no_tokenizer, CORPUS),
                 lambda: plan_trim(no_tokenizer, CORPUS, TrimOptions(vocab_size=100)),
                 lambda: validate_checkpoint(GPT2, no_tokenizer)):
        with pytest.raises(InputError, match="tokenizer.json: missing, and there is no slow tokenizer file"):
            call()
