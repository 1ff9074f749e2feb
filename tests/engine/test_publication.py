"""Proven before published (issue 46): under the target name there is only ever the previous state or one
whole output whose card and report describe its own weights; a loser of a race exits non-zero."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "add"))
from test_reliability import spawn, staging_leftovers, wait_for  # noqa: E402

from vocabsurgeon import AddOptions, OutputExistsError, add_tokens  # noqa: E402
from vocabsurgeon.add.pipeline import add_validate_push  # noqa: E402
from vocabsurgeon.cli.commands import cli  # noqa: E402
from vocabsurgeon.engine.finish import ValidationOptions  # noqa: E402


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def _describes_itself(out: Path) -> dict:
    """The output's report and card match its own weights and tokenizer; returns the report."""
    report = json.loads((out / "vocabsurgeon_report.json").read_text())
    summary = report["add"]
    vocab = json.loads((out / "tokenizer.json").read_text())
    config = json.loads((out / "config.json").read_text())
    assert config["vocab_size"] == summary["rows_after"]
    for a in summary["added"]:
        assert any(t["content"] == a["piece"] for t in vocab.get("added_tokens", [])) or a["piece"] in vocab["model"]["vocab"]
    card = (out / "README.md").read_text(encoding="utf-8")
    assert f"{summary['rows_before']:,} -> {summary['rows_after']:,}" in card or str(summary["rows_after"]) in card
    assert sorted(report["files"]) == sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    return report


def _b_publishes_during_validation(monkeypatch, src: Path, out: Path) -> None:
    """Run B (`--force --no-validate`, the word Bilbo) publishes to `out` while run A validates."""
    import vocabsurgeon.validation.validate as validate

    real = validate.validate_checkpoint

    def b_publishes_meanwhile(*args, **kwargs):
        add_tokens(src, out, ["Bilbo"], force=True)
        return real(*args, **kwargs)

    monkeypatch.setattr(validate, "validate_checkpoint", b_publishes_meanwhile)


def test_a_run_that_loses_the_race_publishes_nothing_and_says_so(gpt2_ckpt, tmp_path, monkeypatch):
    # Run A validates while run B (--force --no-validate) publishes there: A must not put its card and report
    # over B's weights, nor report success.
    out = tmp_path / "v"
    _b_publishes_during_validation(monkeypatch, gpt2_ckpt, out)
    with pytest.raises(OutputExistsError, match=f"{out}: appeared while this run was writing"):
        add_validate_push(gpt2_ckpt, out, ["Frodo", "Gandalf"], validation=ValidationOptions(max_tokens=64))
    report = _describes_itself(out)
    assert {a["token"] for a in report["add"]["added"]} == {"Bilbo"} and report["pending"] == "--no-validate"
    assert not staging_leftovers(tmp_path)


def test_force_notices_a_target_replaced_meanwhile(gpt2_ckpt, tmp_path, monkeypatch):
    out = tmp_path / "v"
    add_tokens(gpt2_ckpt, out, ["Sam"])
    _b_publishes_during_validation(monkeypatch, gpt2_ckpt, out)
    with pytest.raises(OutputExistsError, match=f"{out}: was replaced while this run was writing"):
        add_validate_push(gpt2_ckpt, out, ["Frodo"], validation=ValidationOptions(max_tokens=64),
                          options=AddOptions(force=True))
    assert {a["token"] for a in _describes_itself(out)["add"]["added"]} == {"Bilbo"}


def test_a_failed_validation_leaves_the_target_and_keeps_the_output_beside_it(gpt2_ckpt, tmp_path, monkeypatch):
    import vocabsurgeon.validation.validate as validate

    out = tmp_path / "out"
    add_tokens(gpt2_ckpt, out, ["Sam"])
    before = (out / "model.safetensors").read_bytes()
    real = validate.validate_checkpoint

    def failing(*args, **kwargs):  # the real figures, then a verdict against them
        report = real(*args, **kwargs)
        report.passed, report.failures = False, ["KL mean above its limit (forced by the test)"]
        return report

    monkeypatch.setattr(validate, "validate_checkpoint", failing)
    r = run("add", "-t", "Frodo", "-t", "Gandalf", "--max-tokens", "64", "--force", gpt2_ckpt, out)
    assert r.exit_code == 3, r.output
    kept = tmp_path / "out.rejected"
    assert f"{out} is as it was; the output is kept for inspection in {kept}" in r.stderr
    assert (out / "model.safetensors").read_bytes() == before
    report = _describes_itself(kept)
    assert report["passed"] is False and {a["token"] for a in report["add"]["added"]} == {"Frodo", "Gandalf"}
    assert "Validation **FAILED**" in (kept / "README.md").read_text(encoding="utf-8")
    assert not staging_leftovers(tmp_path)


def test_a_full_disk_while_the_report_is_written_exits_5_with_nothing_published(gpt2_ckpt, tmp_path, monkeypatch):
    import errno

    import vocabsurgeon.engine.record as record

    out = tmp_path / "out"
    real = record.write_text_atomic

    def full(path, text, fsync=True):
        if path.name == "vocabsurgeon_report.json":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, text, fsync)

    monkeypatch.setattr(record, "write_text_atomic", full)
    r = run("add", "-q", "-t", "Frodo", "--max-tokens", "64", gpt2_ckpt, out)
    assert r.exit_code == 5, r.output
    assert r.stderr.startswith(f"Error: {out}: writing failed: No space left on device")
    assert not out.exists() and not staging_leftovers(tmp_path)


def test_kill_during_validation_leaves_no_output(gpt2_ckpt, tmp_path):
    out = tmp_path / "out"
    p = spawn(["add", "-q", "-t", "Frodo", "--max-tokens", "64", gpt2_ckpt, out], tmp_path,
              pause_at="validate_checkpoint")
    wait_for(tmp_path / "ready-a", p)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert not out.exists()


@pytest.mark.parametrize("args", [
    ["add", "-t", "Frodo", "--device", "cuda"],
    ["add", "-t", "Frodo", "--device", "cuda", "--no-validate"],
    ["add", "-t", "Frodo", "--init", "mean-noise", "--device", "cuda:0", "--no-validate"],
])
def test_a_cuda_device_without_cuda_is_refused_before_anything_is_written(gpt2_ckpt, tmp_path, args):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the refusal is for machines without it")
    out = tmp_path / "out"
    r = run(*args, gpt2_ckpt, out)
    assert r.exit_code == 2
    assert r.stderr.strip().endswith("but no CUDA device is available; use --device cpu or auto")
    assert not out.exists() and not staging_leftovers(tmp_path)


@pytest.mark.parametrize("command", ["validate", "compare"])
def test_validate_and_compare_refuse_cuda_without_cuda_at_start(gpt2_ckpt, tmp_path, command):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the refusal is for machines without it")
    r = run(command, "--device", "cuda", gpt2_ckpt, gpt2_ckpt)
    assert r.exit_code == 2 and "no CUDA device is available" in r.stderr


def test_validate_refuses_a_base_of_another_architecture_before_loading(gpt2_ckpt, llama_ckpt, tmp_path):
    out = tmp_path / "out"
    add_tokens(gpt2_ckpt, out, ["Frodo"])
    r = subprocess.run([sys.executable, "-m", "vocabsurgeon", "validate", str(llama_ckpt), str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip() == (f"Error: {out} is a gpt2 model, {llama_ckpt} a llama model: validate compares an "
                                "output with the checkpoint it was made from; pass that checkpoint as BASE")
    assert "--no-validate" not in r.stderr
