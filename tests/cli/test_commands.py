"""The `vocabsurgeon add` command line: exit codes, exact messages, --json, --dry-run, --help."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from invariants import tree_digest
from vocabsurgeon import __version__
from vocabsurgeon.cli.commands import cli


def run(*args, **kw):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False, **kw)


@pytest.fixture
def tokens(tmp_path):
    p = tmp_path / "lotr.txt"
    p.write_text("Frodo\nAragorn\nMinas Tirith\n", encoding="utf-8")
    return p


def test_add_json_summary(gpt2_ckpt, tokens, tmp_path):
    r = run("add", "--tokens", tokens, "--json", gpt2_ckpt, tmp_path / "out")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["rows_after"] - d["rows_before"] == len(d["added"]) == 6
    assert {a["token"] for a in d["added"]} == {"Frodo", "Aragorn", "Minas Tirith"}
    assert all(a["id"] >= d["rows_before"] for a in d["added"])
    assert d["init"] == {"input": "mean", "output": "mean", "bias": "mean", "eps": 1e-05}
    assert d["files_rewritten"] == ["model.safetensors"] and d["files_copied"] == []
    assert d["bytes_written"] > 0 and d["seconds"] >= 0
    assert d["tool"] == f"vocabsurgeon {__version__}"


def test_sharded_copies_untouched_shards(llama_ckpt, tokens, tmp_path):
    r = run("add", "--tokens", tokens, "--json", llama_ckpt, tmp_path / "out")
    d = json.loads(r.stdout)
    assert len(d["files_rewritten"]) == 2 and len(d["files_copied"]) >= 1
    assert set(d["copy_methods"].values()) <= {"rewrite", "copy", "reflink"}


def test_link_hardlinks_untouched_shards(llama_ckpt, tokens, tmp_path):
    r = run("add", "--tokens", tokens, "--link", "--json", llama_ckpt, tmp_path / "out")
    d = json.loads(r.stdout)
    for f in d["files_copied"]:
        assert (tmp_path / "out" / f).stat().st_ino == (llama_ckpt / f).stat().st_ino


def test_dry_run_writes_nothing(gpt2_ckpt, tokens, tmp_path):
    r = run("add", "--tokens", tokens, "--dry-run", gpt2_ckpt, tmp_path / "out")
    assert r.exit_code == 0
    assert r.stdout == ""  # the plan goes to stderr, as without --dry-run
    assert "rows " in r.stderr and "'Frodo'" in r.stderr and "rewrite 1 shard(s)" in r.stderr
    assert not (tmp_path / "out").exists()
    r = run("add", "--tokens", tokens, "--dry-run", "--json", gpt2_ckpt, tmp_path / "out")
    assert json.loads(r.stdout)["dry_run"] is True


def test_inline_tokens(gpt2_ckpt, tmp_path):
    r = run("add", "-t", "Frodo", "-t", "Gandalf", "--json", gpt2_ckpt, tmp_path / "out")
    assert {a["token"] for a in json.loads(r.stdout)["added"]} == {"Frodo", "Gandalf"}


def test_existing_output_is_refused_without_force(gpt2_ckpt, tokens, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    r = run("add", "--tokens", tokens, gpt2_ckpt, out)
    assert r.exit_code == 2
    assert r.stderr.strip() == f"Error: {out}: exists and is not empty; pass --force to replace it, or choose another directory"
    assert (out / "keep.txt").read_text() == "mine"
    # --force replaces only an earlier output of vocabsurgeon: an unrelated directory is kept.
    r = run("add", "--tokens", tokens, "--force", gpt2_ckpt, out)
    assert r.exit_code == 2
    assert r.stderr.strip() == (
        f"Error: {out}: is not empty and is not an earlier vocabsurgeon output (no vocabsurgeon_report.json and no "
        "model card tagged vocabsurgeon), so --force will not delete it; remove it yourself or choose another directory")
    assert (out / "keep.txt").read_text() == "mine"


def test_force_replaces_an_earlier_output(gpt2_ckpt, tokens, tmp_path):
    out = tmp_path / "out"
    assert run("add", "--tokens", tokens, "--no-validate", gpt2_ckpt, out).exit_code == 0
    r = run("add", "-t", "Gandalf", "--no-validate", "--force", gpt2_ckpt, out)
    assert r.exit_code == 0, r.output
    assert "Gandalf" in (out / "tokenizer.json").read_text() and "Frodo" not in (out / "tokenizer.json").read_text()
    assert not list(tmp_path.glob(".out.vocabsurgeon-staging-*"))


@pytest.mark.parametrize("earlier", ["user files", "no file list"])
def test_force_never_deletes_files_vocabsurgeon_did_not_write(gpt2_ckpt, tokens, tmp_path, earlier):
    # issue 46: --force onto an earlier output deleted mynotes.txt and checkpoint-500/ without naming them
    out = tmp_path / "out"
    assert run("add", "--tokens", tokens, "--no-validate", gpt2_ckpt, out).exit_code == 0
    if earlier == "user files":
        (out / "mynotes.txt").write_text("mine")
        (out / "checkpoint-500").mkdir()
        (out / "checkpoint-500" / "trainer_state.json").write_text("{}")
        named = "checkpoint-500/trainer_state.json, mynotes.txt"
    else:  # a report without the list of written files (an older version's): nothing is known to be ours
        (out / "vocabsurgeon_report.json").write_text("{}")
        named = "README.md, config.json, generation_config.json and 4 more"
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    r = run("add", "-t", "Gandalf", "--no-validate", "--force", gpt2_ckpt, out)
    assert r.exit_code == 2
    assert r.stderr.strip() == (f"Error: {out}: holds {named}, which vocabsurgeon did not write, so --force will not "
                                "replace it; move them out of it or choose another directory")
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


@pytest.mark.parametrize("where", [".", ".."])
def test_the_current_directory_is_refused_before_any_work(gpt2_ckpt, tokens, tmp_path, monkeypatch, where):
    work = tmp_path / "work" / "here"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    r = run("add", "--tokens", tokens, "--force", gpt2_ckpt, where)
    assert r.exit_code == 2
    assert r.stderr.strip() == (f"Error: {where}: the output is the current directory or contains it; "
                                "choose a new directory, e.g. out/model")
    assert not list(tmp_path.rglob("*vocabsurgeon-staging*")) and list(work.iterdir()) == []


def test_output_inside_input_is_refused(gpt2_ckpt, tokens):
    before = tree_digest(gpt2_ckpt)
    r = run("add", "--tokens", tokens, gpt2_ckpt, gpt2_ckpt / "out")
    assert r.exit_code == 2
    assert "the output may not be the input checkpoint or inside it" in r.stderr
    assert tree_digest(gpt2_ckpt) == before


def test_pickle_checkpoint_is_refused_and_never_unpickled(tmp_path, tokens):
    import pickle

    src = tmp_path / "pt"
    src.mkdir()
    (src / "config.json").write_text('{"model_type": "gpt2", "vocab_size": 10}')
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    (src / "pytorch_model.bin").write_bytes(pickle.dumps(Evil()))
    r = run("add", "--tokens", tokens, src, tmp_path / "out")
    assert r.exit_code == 2
    assert r.stderr.startswith(f"Error: {src / 'pytorch_model.bin'}: pickle checkpoints are refused")
    assert not marker.exists()
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "content,message",
    [
        (b"Frodo\nSam\xff\n", "lotr.txt:2: invalid UTF-8 at byte 3; save the file as UTF-8"),
        (b"Frodo\nSam\nFrodo\n", "lotr.txt:3: token 'Frodo' duplicates line 1; remove one of them"),
        (b"Fro\x07do\n", "lotr.txt:1: token 'Fro\\x07do' contains control character U+0007; remove it"),
        (b"x" * 300 + b"\n", "lotr.txt:1: token is 300 characters, over the limit of 256; shorten it"),
        (b" Frodo\n", "lotr.txt:1: token ' Frodo' has leading or trailing whitespace; remove it "
                      "(word-start forms like ' Frodo' are added automatically)"),
        (b'["Frodo", "Gandalf"]\n', "lotr.txt: looks like JSON; write one token per line (no brackets, quotes or commas)"),
        (b'[\n  "Frodo",\n  "Gandalf"\n', "lotr.txt: looks like JSON; write one token per line (no brackets, quotes or commas)"),
        (b"Frodo,Gandalf,Aragorn\n", "lotr.txt:1: looks like comma-separated values; write one token per line"),
        (b"# names\nFrodo, Sam\nMerry,Pippin\n",
         "lotr.txt:2: looks like comma-separated values; write one token per line (2 such lines)"),
        (b"# only comments\n\n", "lotr.txt: no tokens in the file; write one token per line"),
        ("Frodo\nSam\n".encode("utf-16"), "lotr.txt: the file is UTF-16 LE; save it as UTF-8"),
        (b"Frodo\n Sam\nFrodo\nMer\x07ry\nSam\xff\n",
         "lotr.txt: 4 problems, fix them all and rerun: line 2: token ' Sam' has leading or trailing whitespace; "
         "remove it (word-start forms like ' Frodo' are added automatically); line 3: token 'Frodo' duplicates "
         "line 1; remove one of them; line 4: token 'Mer\\x07ry' contains control character U+0007; remove it; "
         "line 5: invalid UTF-8 at byte 3; save the file as UTF-8"),
    ],
)
def test_bad_tokens_file(gpt2_ckpt, tmp_path, content, message):
    p = tmp_path / "lotr.txt"
    p.write_bytes(content)
    r = run("add", "--tokens", p, gpt2_ckpt, tmp_path / "out")
    assert r.exit_code == 2
    assert r.stderr.strip() == f"Error: {tmp_path}/{message}"
    assert not (tmp_path / "out").exists()


def test_tokens_file_comments_blank_lines_and_escaped_hash(gpt2_ckpt, tmp_path):
    p = tmp_path / "words.txt"
    p.write_bytes(b"# Tolkien names\r\nFrodo\r\n\r\n  \n\\#Shire\n1,000\nf(a,b)\n\n")
    r = run("add", "--tokens", p, "--dry-run", "--json", gpt2_ckpt, tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert [a["token"] for a in json.loads(r.stdout)["added"][::2]] == ["Frodo", "#Shire", "1,000", "f(a,b)"]


@pytest.mark.parametrize("args,message", [
    (["-t", "Frodo "], "-t 'Frodo ': token 'Frodo ' has leading or trailing whitespace; remove it "
                       "(word-start forms like ' Frodo' are added automatically)"),
    (["-t", ""], "-t '': empty or whitespace-only token; remove it"),
    (["-t", "a\tb"], "-t 'a\\tb': token 'a\\tb' contains control character U+0009; remove it"),
    (["-t", "Frodo", "-t", "Frodo", "-t", " "],
     "-t: 2 problems, fix them all and rerun: -t 'Frodo': token 'Frodo' is given twice; remove one; "
     "-t ' ': empty or whitespace-only token; remove it"),
])
def test_inline_tokens_get_the_checks_a_tokens_file_gets(gpt2_ckpt, tmp_path, args, message):
    r = run("add", *args, gpt2_ckpt, tmp_path / "out")
    assert r.exit_code == 2
    assert r.stderr.strip() == f"Error: {message}"
    assert not (tmp_path / "out").exists()


def test_nothing_to_add(gpt2_ckpt, tmp_path):
    r = run("add", "-t", "<|endoftext|>", gpt2_ckpt, tmp_path / "out")
    assert r.exit_code == 2
    assert r.stderr.strip() == "Error: every token is already in the vocabulary; nothing to add (see --dry-run for details)"
    assert not (tmp_path / "out").exists()


def test_unknown_init_is_a_usage_error(gpt2_ckpt, tmp_path):
    r = run("add", "-t", "Frodo", "--init", "magic", gpt2_ckpt, tmp_path / "out")
    assert r.exit_code == 2
    assert "Invalid value for '--init'" in r.stderr


def test_help_has_examples_for_every_command():
    r = run("--help")
    assert r.exit_code == 0 and "Examples:" in r.stdout
    for name, cmd in cli.commands.items():
        h = run(name, "--help")
        assert h.exit_code == 0
        assert "Example" in h.stdout, f"`vocabsurgeon {name} --help` has no example"
        assert cmd.help and cmd.help.split("\n")[0].strip(), f"{name} has no one-line summary"


def test_version():
    r = run("--version")
    assert r.stdout.strip() == f"vocabsurgeon, version {__version__}"


def test_internal_errors_are_one_line(monkeypatch, gpt2_ckpt, tmp_path):
    import vocabsurgeon.engine.job as surgery

    def boom(*a, **k):
        raise RuntimeError("kaboom")

    monkeypatch.setattr(surgery, "write_rows", boom)
    r = run("add", "-t", "Frodo", gpt2_ckpt, tmp_path / "out")
    assert r.exit_code == 1
    assert r.stderr.strip().splitlines()[-1] == (
        "Error: internal error RuntimeError: kaboom. Please report it; rerun with VOCABSURGEON_DEBUG=1 for the traceback."
    )
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.glob(".out.vocabsurgeon-staging-*"))


@pytest.mark.parametrize("flags", [("-t", "Frodo"), ("-t", "Frodo", "--gguf-parity")])
def test_default_add_does_not_import_torch_or_transformers(gpt2_ckpt, tmp_path, flags):
    # Importing torch costs over a second and transformers several: more than a whole surgery. Whether
    # transformers keeps ignore_merges on load (issue 39's entries) is read from its source, not imported.
    import subprocess
    import sys

    code = (
        "import sys; from vocabsurgeon.cli.commands import main; sys.argv = ['vocabsurgeon'] + sys.argv[1:]\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", code, "add", "-q", "--no-validate", *flags, str(gpt2_ckpt),
                        str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"


def test_the_package_exports_the_checks_without_importing_torch():
    import subprocess
    import sys

    code = ("import sys, vocabsurgeon as v; light = 'torch' not in sys.modules\n"
            "from vocabsurgeon import inspect_checkpoint, validate_checkpoint, neighbors, AddJob, open_target\n"
            "print(light, validate_checkpoint.__module__, inspect_checkpoint.__module__, neighbors.__module__,\n"
            "      sorted(set(v.__all__) - set(dir(v)) - {'inspect_checkpoint', 'validate_checkpoint', 'neighbors'}))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "vocabsurgeon.validation.validate", "vocabsurgeon.explore.inspection",
                                "vocabsurgeon.explore.compare", "[]"]


def test_every_command_has_json_quiet_and_an_example_of_itself():
    for name, cmd in cli.commands.items():
        opts = {o for p in cmd.params for o in getattr(p, "opts", [])}
        assert {"--json", "-q", "--quiet"} <= opts, f"`vocabsurgeon {name}` lacks --json or --quiet"
        examples = cmd.help.split("Examples:")[-1]
        assert f"vocabsurgeon {name} " in examples, f"`vocabsurgeon {name} --help` has no example of itself"


def test_the_manuals_exit_code_table_matches_errors_py():
    import re
    from pathlib import Path

    import vocabsurgeon.errors as errors

    page = (Path(__file__).resolve().parents[2] / "docs" / "hub-and-pipelines.md").read_text(encoding="utf-8")
    section = page.split("### Exit codes", 1)[1].split("\n#", 1)[0]
    table = {int(c): m.strip() for c, m in re.findall(r"^\| (\d+) \| (.+) \|$", section, re.M)}
    constants = {v for k, v in vars(errors).items() if k.startswith("EXIT_") and k != "EXIT_CODES"}
    assert table == errors.EXIT_CODES
    assert set(table) == constants
    classes = {c.exit_code for c in vars(errors).values()
               if isinstance(c, type) and issubclass(c, errors.VocabSurgeonError)}
    assert classes <= set(table)


def test_a_negative_seed_is_refused_as_bad_input_not_an_internal_error(gpt2_ckpt, tmp_path):
    r = run("add", "--seed", "-1", "-t", "Frodo", gpt2_ckpt, tmp_path / "out")
    assert r.exit_code == 2
    assert r.stderr.splitlines()[-1] == "Error: Invalid value for '--seed': -1 is not in the range 0<=x<=18446744073709551615."
    assert not (tmp_path / "out").exists()


def test_the_library_refuses_a_negative_seed_before_writing(gpt2_ckpt, tmp_path):
    from vocabsurgeon import InputError, add_tokens

    with pytest.raises(InputError, match=r"^--seed -1: a seed is an integer from 0 to 18446744073709551615$"):
        add_tokens(gpt2_ckpt, tmp_path / "out", ["Frodo"], seed=-1)
    assert not (tmp_path / "out").exists()


def test_a_huge_pad_multiple_is_refused_before_planning(gpt2_ckpt, tmp_path):
    r = run("add", "--pad-to-multiple-of", str(2**70), "--dry-run", "-t", "Frodo", gpt2_ckpt, tmp_path / "out")
    assert r.exit_code == 2
    assert r.stderr == (f"Error: --pad-to-multiple-of {2**70}: pass a positive integer up to 4096 (64 or 128 suit "
                        "tensor cores)\n")


def test_a_plot_file_matplotlib_cannot_write_is_refused_before_comparing(gpt2_ckpt, tmp_path):
    r = run("compare", gpt2_ckpt, gpt2_ckpt, "--plot", tmp_path / "knn.txt")
    assert r.exit_code == 2
    assert r.stderr.startswith(f"Error: --plot {tmp_path / 'knn.txt'}: matplotlib cannot write a '.txt' file; name it "
                               ".png (or .avif, ")
    r = run("compare", gpt2_ckpt, gpt2_ckpt, "--plot", tmp_path / "no" / "knn.png")
    assert r.stderr == (f"Error: --plot {tmp_path / 'no' / 'knn.png'}: the directory {tmp_path / 'no'} does not "
                        "exist; create it first\n")


def test_a_comment_line_that_looks_like_a_token_is_named_in_a_warning(gpt2_ckpt, tmp_path):
    p = tmp_path / "words.txt"
    p.write_text("#include\nFrodo\n", encoding="utf-8")
    r = run("add", "--tokens", p, "--dry-run", gpt2_ckpt, tmp_path / "out")
    assert r.exit_code == 0
    assert (f"WARNING: {p}: 1 line starting with '#' read as a comment (#include); write \\#include for the token"
            in r.stderr.splitlines())


def test_an_empty_plot_name_is_refused_not_written_as_dot_png(gpt2_ckpt, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = run("validate", "--plot", "", gpt2_ckpt, gpt2_ckpt)
    assert r.exit_code == 2 and r.stderr == "Error: --plot needs a file name, e.g. --plot kl.png\n"
    assert not (tmp_path / ".png").exists()
