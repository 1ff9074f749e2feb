"""The `vocabsurgeon trim` command line: exit codes, exact one-line messages, nothing written on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from vocabsurgeon.cli.commands import cli

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "corpus.txt"


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_trim_json_summary(gpt2_ckpt, tmp_path):
    r = run("trim", "--corpus", CORPUS, "--vocab-size", 300, "--json", gpt2_ckpt, tmp_path / "out")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["tokens_kept"] == 300 and d["rows_after"] == 300 and d["tokens_before"] == d["rows_before"]
    assert d["files_rewritten"] == ["model.safetensors"] and d["output"] == str(tmp_path / "out")
    assert (tmp_path / "out" / "vocabsurgeon_idmap.json").is_file()


def test_dry_run_writes_nothing(gpt2_ckpt, tmp_path):
    r = run("trim", "--corpus", CORPUS, "--min-count", 2, "--dry-run", "--json", gpt2_ckpt, tmp_path / "out")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["dry_run"] and d["tokens_removed"] > 0 and d["bytes_saved"] > 0
    assert not (tmp_path / "out").exists()


def _error(r) -> str:
    assert r.exit_code == 2, r.output
    lines = [line for line in r.stderr.strip().splitlines() if not line.startswith("counting: ")]  # progress
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_vocab_size_below_what_must_stay(gpt2_ckpt, tmp_path):
    r = run("trim", "--corpus", CORPUS, "--vocab-size", 100, gpt2_ckpt, tmp_path / "out")
    assert _error(r) == ("Error: --vocab-size 100 is below the 257 tokens that must stay (256 byte symbol, "
                         "1 special token); pass --vocab-size 257 or more")
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out*"))


@pytest.mark.parametrize("text,why", [("", "the corpus is empty"), (" \n\n", "the corpus tokenizes to no token at all")])
def test_a_corpus_that_uses_nothing(text, why, tmp_path):
    from builders import family_tokenizer, tiny_checkpoint

    src = tiny_checkpoint(tmp_path / "bert", family_tokenizer("wordpiece-uncased"))  # whitespace is no token here
    corpus = tmp_path / "empty.txt"
    corpus.write_text(text, encoding="utf-8")
    r = run("trim", "--corpus", corpus, "--min-count", 1, src, tmp_path / "out")
    assert why in _error(r)
    assert not (tmp_path / "out").exists()


def test_merges_that_cannot_be_closed(gpt2_ckpt, tmp_path):
    path = gpt2_ckpt / "tokenizer.json"
    data = json.loads(path.read_text())
    data["model"]["merges"].append(["Ġzz", "qq"])
    path.write_text(json.dumps(data))
    r = run("trim", "--corpus", CORPUS, "--vocab-size", 300, gpt2_ckpt, tmp_path / "out")
    assert _error(r).startswith("Error: tokenizer.json: the merge 'Ġzz' + 'qq' uses 'Ġzz', which is not in the vocabulary")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args,message", [
    ([], "Error: pass one of --vocab-size N (keep the N most used tokens) or --min-count K (keep the tokens used at "
         "least K times)"),
    (["--vocab-size", 300, "--min-count", 2], "Error: pass one of --vocab-size N"),
    (["--vocab-size", 5000], "Error: --vocab-size 5000: the tokenizer has only 600 tokens; pass a smaller size"),
])
def test_size_options(gpt2_ckpt, tmp_path, args, message):
    r = run("trim", "--corpus", CORPUS, *args, gpt2_ckpt, tmp_path / "out")
    assert _error(r).startswith(message)


def test_existing_output_is_refused_before_counting(gpt2_ckpt, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("mine")
    r = run("trim", "--corpus", tmp_path / "missing.txt", "--vocab-size", 300, gpt2_ckpt, tmp_path / "out")
    assert _error(r) == (f"Error: {tmp_path / 'out'}: exists and is not empty; pass --force to replace it, or choose "
                         "another directory")


def test_force_replaces_an_earlier_trim(gpt2_ckpt, tmp_path):
    assert run("trim", "--corpus", CORPUS, "--vocab-size", 300, gpt2_ckpt, tmp_path / "out").exit_code == 0
    r = run("trim", "--corpus", CORPUS, "--vocab-size", 280, "--force", gpt2_ckpt, tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert len(json.loads((tmp_path / "out" / "vocabsurgeon_idmap.json").read_text())["old_ids"]) == 280


def test_help_has_an_example():
    r = run("trim", "--help")
    assert r.exit_code == 0 and "vocabsurgeon trim --corpus en.txt --vocab-size 32000 ckpt/ out/" in r.output


def test_push_to_sends_the_trimmed_checkpoint_in_one_commit(gpt2_ckpt, tmp_path, hub):
    r = run("trim", "--corpus", CORPUS, "--vocab-size", 300, "--json", "--push-to", "me/gpt2-en", gpt2_ckpt,
            tmp_path / "out")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert len(hub.commits) == 1 and hub.commits[0]["message"].startswith("Trim the vocabulary of gpt2 to 300 tokens")
    files = hub.commits[0]["files"]
    assert files["vocabsurgeon_idmap.json"] == (tmp_path / "out" / "vocabsurgeon_idmap.json").read_bytes()
    assert files["model.safetensors"] == (tmp_path / "out" / "model.safetensors").read_bytes()
    assert d["push"]["repo_id"] == "me/gpt2-en"
