"""Faults and hostile input: a clean one-line error, no output, no staging leftovers, input unchanged."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from invariants import check_surgery, tree_digest
from vocabsurgeon import add_tokens, plan_add
from vocabsurgeon.cli.commands import cli
from vocabsurgeon.errors import VocabSurgeonError

# Runs the CLI, pausing before one step of the surgery (named by PAUSE_AT) until GO exists, after
# writing READY: lets a test kill or interrupt the process at a known moment.
BOOT = r"""
import os, sys, time, pathlib
import vocabsurgeon.engine.job as s
import vocabsurgeon.validation.validate as v
point, ready, go = os.environ.get("PAUSE_AT"), os.environ.get("READY"), os.environ.get("GO")
def wrap(name, s=s):
    orig = getattr(s, name)
    def f(*a, **k):
        if name == point:
            pathlib.Path(ready).write_text("x")
            while not (go and pathlib.Path(go).exists()):
                time.sleep(0.01)
        return orig(*a, **k)
    setattr(s, name, f)
for n in ("copy_old_bytes", "copy_file", "write_rows", "write_metadata_files", "verify_checkpoint"):
    wrap(n)
wrap("validate_checkpoint", v)
from vocabsurgeon.cli.commands import main
sys.argv = ["vocabsurgeon"] + sys.argv[1:]
main()
"""


def spawn(args, tmp_path, pause_at=None, tag="a", **kw):
    env = dict(os.environ, PAUSE_AT=pause_at or "", READY=str(tmp_path / f"ready-{tag}"), GO=str(tmp_path / "go"))
    return subprocess.Popen([sys.executable, "-c", BOOT, *map(str, args)], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_sigint_default, **kw)


def _sigint_default():
    # A test run started in the background by a non-interactive shell (CI) inherits SIGINT
    # ignored, and Python then keeps it ignored; give the child Ctrl-C as a terminal user has it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for(path: Path, proc, timeout=120):
    t0 = time.time()
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"process ended early: {proc.stderr.read()}")
        if time.time() - t0 > timeout:
            raise AssertionError("timed out waiting for the pause point")
        time.sleep(0.01)


def staging_leftovers(parent: Path) -> list[Path]:
    return list(parent.glob(".*vocabsurgeon-staging-*"))


def cli_run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


@pytest.mark.parametrize("moment", ["copy_old_bytes", "copy_file", "write_rows", "write_metadata_files", "verify_checkpoint"])
def test_sigkill_leaves_no_output_and_rerun_sweeps(llama_ckpt, tmp_path, moment):
    before = tree_digest(llama_ckpt)
    out = tmp_path / "out"
    p = spawn(["add", "-q", "--no-validate", "-t", "Frodo", llama_ckpt, out], tmp_path, pause_at=moment)
    wait_for(tmp_path / "ready-a", p)
    assert staging_leftovers(tmp_path), "the run should be writing into a staging directory"
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert not out.exists()
    assert tree_digest(llama_ckpt) == before
    r = cli_run("add", "-q", "--no-validate", "-t", "Frodo", llama_ckpt, out)
    assert r.exit_code == 0, r.output
    assert not staging_leftovers(tmp_path), "a rerun sweeps stale staging directories"
    check_surgery(llama_ckpt, out, 2)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_cleans_up(llama_ckpt, tmp_path, sig):
    out = tmp_path / "out"
    p = spawn(["add", "-t", "Frodo", "--no-validate", llama_ckpt, out], tmp_path, pause_at="copy_file")
    try:
        wait_for(tmp_path / "ready-a", p)
        p.send_signal(sig)
        _, err = p.communicate(timeout=60)
    finally:  # never leave a paused child behind when the test fails
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130
    assert err.strip().splitlines()[-1] == "Interrupted; nothing was written."
    assert not out.exists() and not staging_leftovers(tmp_path)


def test_two_runs_racing_for_one_output(llama_ckpt, tmp_path):
    out = tmp_path / "out"
    procs = [spawn(["add", "-q", "--no-validate", "-t", "Frodo", llama_ckpt, out], tmp_path, pause_at="verify_checkpoint", tag=t)
             for t in "ab"]
    for t, p in zip("ab", procs):
        wait_for(tmp_path / f"ready-{t}", p)
    (tmp_path / "go").write_text("go")
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    codes = sorted(c for c, _ in results)
    assert codes == [0, 2], results
    loser = [e for c, e in results if c == 2][0]
    assert loser.strip() == f"Error: {out}: appeared while this run was writing (another run?); nothing was changed"
    assert not staging_leftovers(tmp_path)
    check_surgery(llama_ckpt, out, 2)


def test_file_size_limit_gives_clean_error(llama_ckpt, tmp_path):
    out = tmp_path / "out"
    limit = 20_000  # bytes: smaller than the first shard

    def limit_fsize():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    r = subprocess.run([sys.executable, "-m", "vocabsurgeon", "add", "-q", "-t", "Frodo", "--no-validate",
                        str(llama_ckpt), str(out)], capture_output=True, text=True, preexec_fn=limit_fsize,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 5, r.stderr
    assert r.stderr.strip().startswith(f"Error: {out}: writing failed: File too large")
    assert r.stderr.strip().endswith("nothing was published. Free space, check permissions, or choose another output directory")
    assert not out.exists() and not staging_leftovers(tmp_path)


@pytest.fixture
def tiny_fs(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {r.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", str(mnt)], check=False)


def test_full_filesystem_gives_clean_error(llama_ckpt, tiny_fs):
    out = tiny_fs / "out"
    r = cli_run("add", "-q", "-t", "Frodo", "--no-validate", llama_ckpt, out)
    assert r.exit_code == 5
    assert r.stderr.startswith(f"Error: {out}: writing failed: No space left on device")
    assert not out.exists() and not staging_leftovers(tiny_fs)


@pytest.fixture
def readonly_copy(llama_ckpt, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    r = subprocess.run(["mount", "--bind", str(llama_ckpt), str(ro)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot bind-mount here (needs root): {r.stderr.strip()}")
    subprocess.run(["mount", "-o", "remount,ro,bind", str(ro)], check=True)
    yield ro
    subprocess.run(["umount", str(ro)], check=False)


def test_read_only_input_works(readonly_copy, llama_ckpt, tmp_path):
    with pytest.raises(OSError):
        (readonly_copy / "probe").write_text("x")  # really read-only, even for root
    r = cli_run("add", "-t", "Frodo", "--no-validate", readonly_copy, tmp_path / "out")
    assert r.exit_code == 0, r.output
    check_surgery(llama_ckpt, tmp_path / "out", 2)


def test_symlinked_input_works(llama_ckpt, tmp_path):
    # A Hub-cache-like snapshot: every file is a symlink into a blob store; the directory is a link too.
    snap = tmp_path / "snapshot"
    snap.mkdir()
    for f in llama_ckpt.iterdir():
        (snap / f.name).symlink_to(f)
    link = tmp_path / "link"
    link.symlink_to(snap)
    r = cli_run("add", "-t", "Frodo", "--no-validate", link, tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert not any(p.is_symlink() for p in (tmp_path / "out").iterdir())
    check_surgery(llama_ckpt, tmp_path / "out", 2)


def _poison(ckpt: Path, value: float):
    f = ckpt / "model.safetensors"
    tensors = load_file(str(f))
    tensors["transformer.wte.weight"][5, 3] = value
    save_file(tensors, str(f), metadata={"format": "pt"})


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_nan_or_inf_rows_are_reported_not_averaged(gpt2_ckpt, tmp_path, value):
    _poison(gpt2_ckpt, value)
    r = cli_run("add", "-q", "-t", "Frodo", gpt2_ckpt, tmp_path / "out")
    assert r.exit_code == 2
    assert r.stderr.strip() == (
        "Error: tensor 'transformer.wte.weight' row 5 holds NaN or Inf; refusing to average it into new rows "
        "(repair the checkpoint, or use --init zeros or random, which do not average)"
    )
    assert not (tmp_path / "out").exists()


def test_remote_code_is_never_imported(gpt2_ckpt, tmp_path):
    marker = tmp_path / "imported"
    (gpt2_ckpt / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('pwned')\n")
    cfg = json.loads((gpt2_ckpt / "config.json").read_text())
    cfg["auto_map"] = {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}
    (gpt2_ckpt / "config.json").write_text(json.dumps(cfg))
    r = subprocess.run([sys.executable, "-m", "vocabsurgeon", "add", "-t", "Frodo", str(gpt2_ckpt),
                        str(tmp_path / "out")], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)
    assert r.returncode == 0, r.stderr
    assert not marker.exists()


@pytest.mark.parametrize("damage,message", [
    (lambda b: b[: len(b) // 2], "tokenizer.json: is not valid JSON"),
    (lambda b: b.replace(b'"model"', b'"mod\xffel"', 1), "tokenizer.json: is not valid UTF-8"),
])
def test_damaged_tokenizer_is_refused(gpt2_ckpt, tmp_path, damage, message):
    f = gpt2_ckpt / "tokenizer.json"
    f.write_bytes(damage(f.read_bytes()))
    r = cli_run("add", "-t", "Frodo", gpt2_ckpt, tmp_path / "out")
    assert r.exit_code == 2
    assert r.stderr.startswith(f"Error: {f}: {message.split(': ', 1)[1]}")
    assert not (tmp_path / "out").exists() and not staging_leftovers(tmp_path)  # the copy had started


def test_tokenizer_ids_that_disagree_are_refused(gpt2_ckpt, tmp_path):
    f = gpt2_ckpt / "tokenizer.json"
    tok = json.loads(f.read_text())
    tok["added_tokens"][0]["id"] = 7
    f.write_text(json.dumps(tok))
    r = cli_run("add", "-t", "Frodo", gpt2_ckpt, tmp_path / "out")
    assert r.exit_code == 2
    assert r.stderr.strip() == (
        f"Error: {f}: token '<|endoftext|>' has id 7 in added_tokens but 0 in the model vocabulary; "
        "the tokenizer is inconsistent, fix or re-download it"
    )


def test_config_vocab_size_that_disagrees_is_refused(gpt2_ckpt, tmp_path):
    f = gpt2_ckpt / "config.json"
    cfg = json.loads(f.read_text())
    cfg["vocab_size"] += 3
    f.write_text(json.dumps(cfg))
    r = cli_run("add", "-t", "Frodo", gpt2_ckpt, tmp_path / "out")
    assert r.exit_code == 2
    assert r.stderr.strip() == (
        f"Error: {f}: vocab_size is {cfg['vocab_size']}, but 'transformer.wte.weight' has {cfg['vocab_size'] - 3} "
        "rows; config and weights disagree, refusing to guess"
    )


@pytest.mark.parametrize("which", [0, -1])
def test_verify_after_write_catches_corruption(monkeypatch, llama_ckpt, tmp_path, which):
    """Each rewritten shard is checked (the embedding's and the lm_head's are two shards here)."""
    import vocabsurgeon.engine.job as surgery

    rewritten = plan_add(llama_ckpt, ["Frodo"]).rewrite
    assert len(rewritten) == 2
    orig = surgery.write_rows

    def corrupting(dst, layout, grown, progress):
        orig(dst, layout, grown, progress)
        if dst.name != rewritten[which]:
            return
        with open(dst, "r+b") as f:  # flip one byte of the first tensor's old rows
            f.seek(len(layout.head) + 2)
            b = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([b[0] ^ 0xFF]))

    monkeypatch.setattr(surgery, "write_rows", corrupting)
    with pytest.raises(VocabSurgeonError, match="changed while writing; nothing was published"):
        add_tokens(llama_ckpt, tmp_path / "out", ["Frodo"])
    assert not (tmp_path / "out").exists() and not staging_leftovers(tmp_path)


def test_an_interrupt_swallowed_by_a_library_still_stops_the_wait_for_the_copy():
    # numpy.random's lazy import has been seen to swallow the KeyboardInterrupt of a Ctrl-C; the
    # wait for the copying thread must still end with KeyboardInterrupt, not wait for the copy.
    from vocabsurgeon.engine.job import _noting_interrupts, _Worker

    # Ctrl-C as a terminal user has it: a suite started in the background (`cmd &`) inherits SIGINT ignored
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    release = threading.Event()
    interrupted = threading.Event()
    try:
        with _noting_interrupts(interrupted):
            copying = _Worker(release.wait, 60, interrupted=interrupted)
            try:
                signal.raise_signal(signal.SIGINT)
            except KeyboardInterrupt:
                pass  # what the library did
            t0 = time.monotonic()
            with pytest.raises(KeyboardInterrupt):
                copying.join()
            assert time.monotonic() - t0 < 5
        release.set()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is restored
    finally:
        release.set()
        signal.signal(signal.SIGINT, previous)


def test_ctrl_c_during_validation_publishes_nothing(gpt2_ckpt, tmp_path, monkeypatch):
    # issue 46: an interrupted (or killed) validation left a complete-looking output under the target name
    import vocabsurgeon.validation.validate as validate

    out = tmp_path / "out"

    def interrupted(*a, **k):  # Ctrl-C while the models run: the output is only staged
        raise KeyboardInterrupt

    monkeypatch.setattr(validate, "validate_checkpoint", interrupted)
    r = CliRunner().invoke(cli, ["add", "--max-tokens", "64", "-t", "Frodo", str(gpt2_ckpt), str(out)])
    assert r.exit_code == 130
    assert r.stderr.splitlines()[-1] == f"Interrupted during validation: nothing was published; {out} is as it was"
    assert not out.exists() and not staging_leftovers(tmp_path)


def test_validate_fills_in_an_output_published_without_validation(gpt2_ckpt, tmp_path):
    out = tmp_path / "out"
    assert CliRunner().invoke(cli, ["add", "--no-validate", "-t", "Frodo", str(gpt2_ckpt), str(out)]).exit_code == 0
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "Not run (`--no-validate`)" in card
    pending = json.loads((out / "vocabsurgeon_report.json").read_text())
    assert pending["pending"] == "--no-validate" and pending["passed"] is None

    r = CliRunner().invoke(cli, ["validate", "--max-tokens", "64", str(gpt2_ckpt), str(out)])
    assert r.exit_code == 0, r.output
    assert f"Wrote the report and the model card's validation section into {out}" in r.stderr
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "Validation **passed**" in card and "Not run" not in card
    report = json.loads((out / "vocabsurgeon_report.json").read_text())
    assert report["passed"] is True and "pending" not in report
    assert report["init"] == {"input": "mean", "output": "mean", "bias": "mean", "eps": 1e-05}
    assert report["files"] == pending["files"]


def test_ctrl_c_during_the_push_says_what_is_done(gpt2_ckpt, tmp_path, monkeypatch):
    import vocabsurgeon.checkpoint.hub as hub

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(hub, "push", interrupted)
    out = tmp_path / "out"
    r = CliRunner().invoke(cli, ["add", "--no-validate", "--push-to", "me/lotr", "-t", "Frodo", str(gpt2_ckpt), str(out)])
    assert r.exit_code == 130
    assert r.stderr.splitlines()[-1] == (
        f"Interrupted during the push: {out} is written; a Hub commit is all or nothing, so me/lotr is as it was. "
        f"Retry with `vocabsurgeon push {out} me/lotr`")
    check_surgery(gpt2_ckpt, out, 2)
