"""Hub pull and push with the real huggingface_hub client against the small Hub of tests/fakehub.py
(the `hub` fixture), served on 127.0.0.1: no test reaches the real Hub."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from fakehub import _sha
from vocabsurgeon import __version__
from vocabsurgeon.cli.commands import cli

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "fixtures" / "gpt2-tiny"
CHECKPOINT_FILES = {"README.md", "config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                    "tokenizer_config.json", "vocabsurgeon_report.json"}


def run(*args, **kw):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False, **kw)


@pytest.fixture
def out(tmp_path):
    """A validated `add` output of the tiny GPT-2, plus the stray files a real directory collects."""
    o = tmp_path / "out"
    r = run("add", "-q", "--max-tokens", "64", "-t", "Frodo", "-t", "Gandalf", FIXTURE, o)
    assert r.exit_code == 0, r.output
    (o / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    (o / "notes.tmp").write_text("scratch")
    (o / "model.safetensors.lock").write_text("")
    (o / "__pycache__").mkdir()
    (o / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (o / ".vocabsurgeon-staging-1234").mkdir()
    (o / ".vocabsurgeon-staging-1234" / "model.safetensors").write_bytes(b"partial")
    return o


STRAY = {".DS_Store", "notes.tmp", "model.safetensors.lock", "__pycache__/x.cpython-311.pyc",
         ".vocabsurgeon-staging-1234/model.safetensors"}


def test_push_sends_the_checkpoint_in_one_commit(hub, out):
    r = run("push", out, "me/gpt2-lotr", "--json", "--message", "Add LOTR names")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert len(hub.commits) == 1
    c = hub.commits[0]
    assert (c["repo"], c["revision"], c["message"], c["create_pr"]) == ("me/gpt2-lotr", "main", "Add LOTR names", False)
    assert set(c["files"]) == CHECKPOINT_FILES and c["deleted"] == [] and c["other"] == []
    for f, body in c["files"].items():
        assert body == (out / f).read_bytes(), f
    assert hub.created == {"name": "gpt2-lotr", "organization": "me"}
    assert set(d["files"]) == CHECKPOINT_FILES and set(d["skipped"]) == STRAY
    assert d["repo_id"] == "me/gpt2-lotr" and d["revision"] == "main" and d["pr_url"] is None
    assert d["commit"] == _sha(hub.repos["me/gpt2-lotr"]["main"])
    assert d["commit_url"] == f"{hub.url}/me/gpt2-lotr/commit/{d['commit']}"
    assert not any(s in p for p in hub.paths() for s in ("DS_Store", ".tmp", "staging", "pycache", ".lock"))


def test_push_to_a_pull_request_leaves_main_alone(hub, out):
    base = hub.add_repo("me/gpt2-lotr", {"README.md": b"old\n"})
    r = run("push", out, "me/gpt2-lotr", "--create-pr", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["pr_url"] == f"{hub.url}/me/gpt2-lotr/discussions/1"
    assert hub.commits[0]["create_pr"] and hub.commits[0]["message"] == f"Upload out with vocabsurgeon {__version__}"
    assert _sha(hub.repos["me/gpt2-lotr"]["main"]) == base
    assert set(hub.repos["me/gpt2-lotr"]["refs/pr/1"]) == CHECKPOINT_FILES


def test_push_to_a_new_branch(hub, out):
    hub.add_repo("me/gpt2-lotr", {"README.md": b"old\n"})
    r = run("push", out, "me/gpt2-lotr", "--revision", "vocab-v2", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["revision"] == "vocab-v2"
    assert ("POST", "/api/models/me/gpt2-lotr/branch/vocab-v2", {}) in hub.requests
    assert hub.repos["me/gpt2-lotr"]["main"] == {"README.md": b"old\n"}
    assert set(hub.repos["me/gpt2-lotr"]["vocab-v2"]) == CHECKPOINT_FILES


def test_push_deletes_remote_files_that_contradict_the_checkpoint(hub, out):
    hub.add_repo("me/gpt2-lotr", {"vocab.json": b"{}", "merges.txt": b"", "pytorch_model.bin": b"x",
                                  "model-00001-of-00002.safetensors": b"x", "LICENSE": b"MIT"})
    r = run("push", out, "me/gpt2-lotr", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["deleted"] == sorted(hub.commits[0]["deleted"]) == [
        "merges.txt", "model-00001-of-00002.safetensors", "pytorch_model.bin", "vocab.json"]
    assert set(hub.repos["me/gpt2-lotr"]["main"]) == CHECKPOINT_FILES | {"LICENSE"}


@pytest.mark.parametrize("how,message", [
    (500, "Error: push to me/gpt2-lotr: the Hub answered HTTP 500 while uploading and committing; nothing was "
          "committed to me/gpt2-lotr. Rerun the same command: files already uploaded are not sent again"),
    ("close", "Error: push to me/gpt2-lotr: cannot reach the Hub at {url} while uploading and committing "
              "(RemoteProtocolError); the commit either happened completely or not at all; check the repo's "
              "history, then rerun: files already uploaded are not sent again"),
])
def test_failed_commit_is_one_line_exit_4_and_a_rerun_completes(hub, out, how, message):
    hub.fail["commit"] = how
    r = run("push", out, "me/gpt2-lotr")
    assert r.exit_code == 4
    assert r.stderr.strip() == message.format(url=hub.url)
    assert hub.commits == [] and set(hub.repos["me/gpt2-lotr"]["main"]) == {".gitattributes"}
    del hub.fail["commit"]
    r = run("push", out, "me/gpt2-lotr")
    assert r.exit_code == 0, r.output
    assert set(hub.repos["me/gpt2-lotr"]["main"]) == CHECKPOINT_FILES | {".gitattributes"}


@pytest.mark.parametrize("status,message", [
    (401, "Error: push to me/gpt2-lotr: not logged in or the token is invalid (HTTP 401); run `hf auth login`, "
          "set HF_TOKEN, or pass --token"),
    (403, "Error: push to me/gpt2-lotr: your token may not write there (HTTP 403): the namespace is someone else's "
          "or the token is read-only; push to your own namespace or use a token with write access"),
])
def test_auth_failures_say_what_to_do(hub, out, status, message):
    hub.fail["create"] = status
    hub.fail["info"] = status
    r = run("push", out, "me/gpt2-lotr")
    assert r.exit_code == 4
    assert r.stderr.strip() == message
    assert hub.commits == []


def test_missing_branch_for_a_pull_request(hub, out):
    hub.add_repo("me/gpt2-lotr", {"README.md": b"old\n"})
    r = run("push", out, "me/gpt2-lotr", "--create-pr", "--revision", "nope")
    assert r.exit_code == 4
    assert r.stderr.strip() == ("Error: push to me/gpt2-lotr: branch 'nope' not found (HTTP 404); create it, or pass "
                                "another --revision")


def test_unreachable_hub(hub, out, monkeypatch):
    from huggingface_hub import constants

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setattr(constants, "ENDPOINT", dead)
    r = run("push", out, "me/gpt2-lotr")
    assert r.exit_code == 4
    assert r.stderr.strip() == (f"Error: push to me/gpt2-lotr: cannot reach the Hub at {dead} while creating the repo "
                                "(ConnectError); nothing was committed to me/gpt2-lotr")


def test_offline_mode(hub, out, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    r = run("push", out, "me/gpt2-lotr")
    assert r.exit_code == 4
    assert r.stderr.strip() == ("Error: push to me/gpt2-lotr: HF_HUB_OFFLINE is set, so nothing can be uploaded; "
                                "unset it and rerun")
    assert hub.requests == []


def test_push_refuses_what_is_not_a_checkpoint(hub, tmp_path):
    (tmp_path / "empty").mkdir()
    r = run("push", tmp_path / "empty", "me/x")
    assert r.exit_code == 2 and r.stderr.startswith("Error: ")
    r = run("push", FIXTURE, "not-a-repo-id")
    assert r.exit_code == 2
    assert r.stderr.strip() == "Error: 'not-a-repo-id': not a Hub repo id; pass it as org/name, e.g. me/gpt2-lotr"
    assert hub.requests == []


def _serve_fixture(hub, repo="org/gpt2-tiny", extra=None) -> str:
    files = {p.name: p.read_bytes() for p in FIXTURE.iterdir() if p.is_file()}
    files["README.md"] = (b"---\nlicense: apache-2.0\nlanguage:\n- en\ntags:\n- tiny\n---\n\n# gpt2-tiny\n\n"
                          b"A tiny GPT-2 for tests.\n")
    files["pytorch_model.bin"] = b"PICKLE: must never be downloaded"
    files["original/consolidated.pth"] = b"PICKLE"
    files["onnx/model.onnx"] = b"onnx"
    files.update(extra or {})
    return hub.add_repo(repo, files)


def test_add_pulls_a_repo_id_without_pickles_and_records_it_in_the_card(hub, tmp_path, monkeypatch):
    from huggingface_hub import ModelCard

    sha = _serve_fixture(hub)
    monkeypatch.chdir(tmp_path)  # no local directory spelled org/gpt2-tiny
    r = run("add", "-t", "Frodo", "-t", "Gandalf", "--no-validate", "--json", "org/gpt2-tiny", "out")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["base"] == {"name": "org/gpt2-tiny", "repo_id": "org/gpt2-tiny", "revision": None, "commit": sha}
    got = {p.split("/resolve/")[1].split("/", 1)[1] for p in hub.paths("GET") if "/resolve/" in p}
    assert got == {f.name for f in FIXTURE.iterdir()} | {"README.md"}
    assert not any(p.endswith((".bin", ".pth", ".onnx")) for p in hub.paths())
    card = ModelCard((tmp_path / "out" / "README.md").read_text())
    meta = card.data.to_dict()
    assert meta["license"] == "apache-2.0" and meta["language"] == ["en"]
    assert meta["base_model"] == "org/gpt2-tiny" and meta["tags"] == ["tiny", "vocabsurgeon"]
    assert f"[org/gpt2-tiny]({hub.url}/org/gpt2-tiny) (commit `{sha[:12]}`)" in card.text
    assert "| `Frodo` | `'Frodo'`, `' Frodo'` |" in card.text and "Not run (`--no-validate`)" in card.text


def test_add_pulls_a_sentencepiece_model_beside_tokenizer_json_and_no_other_slow_file(hub, tmp_path, monkeypatch):
    # tokenizer.model is what llama.cpp's converter reads first (add keeps it, extended, for SentencePiece BPE);
    # vocab.txt is never read where tokenizer.json is there. A byte-level output leaves the .model out.
    _serve_fixture(hub, extra={"tokenizer.model": b"not read: byte-level BPE", "vocab.txt": b"[PAD]"})
    monkeypatch.chdir(tmp_path)
    r = run("add", "-t", "Frodo", "--no-validate", "--json", "org/gpt2-tiny", "out")
    assert r.exit_code == 0, r.output
    got = {p.split("/resolve/")[1].split("/", 1)[1] for p in hub.paths("GET") if "/resolve/" in p}
    assert "tokenizer.model" in got and "vocab.txt" not in got
    assert not (tmp_path / "out" / "tokenizer.model").exists()
    assert any(n.startswith("not copied: tokenizer.model") for n in json.loads(r.stdout)["tokenizer_notes"])


def test_add_from_a_revision(hub, tmp_path, monkeypatch):
    _serve_fixture(hub)
    hub.repos["org/gpt2-tiny"]["v1"] = dict(hub.repos["org/gpt2-tiny"]["main"])
    monkeypatch.chdir(tmp_path)
    r = run("add", "-t", "Frodo", "--no-validate", "--json", "--revision", "v1", "org/gpt2-tiny", "out")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["base"]["revision"] == "v1"
    assert "/api/models/org/gpt2-tiny/revision/v1" in hub.paths("GET")
    r = run("add", "-t", "Frodo", "--no-validate", "--revision", "nope", "org/gpt2-tiny", "out2")
    assert r.exit_code == 2
    assert r.stderr.strip() == ("Error: org/gpt2-tiny: revision 'nope' not found on the Hub; check --revision (a "
                                "branch, tag or commit)")


def test_a_local_directory_wins_over_a_repo_id(hub, tmp_path, monkeypatch):
    _serve_fixture(hub)
    shutil.copytree(FIXTURE, tmp_path / "org" / "gpt2-tiny")
    monkeypatch.chdir(tmp_path)
    r = run("add", "-t", "Frodo", "--no-validate", "--json", "org/gpt2-tiny", "out")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["base"]["repo_id"] is None
    assert hub.requests == []


def test_pickle_only_repo_is_refused_without_downloading(hub, tmp_path, monkeypatch):
    hub.add_repo("org/old", {"config.json": (FIXTURE / "config.json").read_bytes(), "pytorch_model.bin": b"PICKLE"})
    monkeypatch.chdir(tmp_path)
    r = run("add", "-t", "Frodo", "--no-validate", "org/old", "out")
    assert r.exit_code == 2
    assert r.stderr.strip() == (
        "Error: org/old: has only pickle weights (pytorch_model.bin); they are refused and never downloaded. Use a "
        "revision or a copy of the model with safetensors weights (e.g. a refs/pr/N branch from the Hub's convert space)")
    assert not any("/resolve/" in p for p in hub.paths())


@pytest.mark.parametrize("args", [
    ("add", "-t", "Frodo", "--no-validate", "org/missing", "out"),
    ("inspect", "org/missing"),
    ("validate", "org/missing", FIXTURE),
    ("compare", FIXTURE, "org/missing"),
    ("neighbors", "org/missing", " the"),
], ids=lambda a: a[0])
def test_unknown_repo_id(hub, tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    r = run(*args)
    assert r.exit_code == 2
    assert r.stderr.strip() == ("Error: org/missing: not a local directory, and not found on the Hub (or private: log "
                                "in with `hf auth login` or set HF_TOKEN); check the spelling")


@pytest.mark.floor
def test_add_push_to(hub, tmp_path):
    r = run("add", "-t", "Frodo", "--no-validate", "--json", "--push-to", "me/gpt2-lotr", "--create-pr", "--private",
            FIXTURE, tmp_path / "out")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["push"]["pr_url"] == f"{hub.url}/me/gpt2-lotr/discussions/1"
    assert set(d["push"]["files"]) == CHECKPOINT_FILES
    # the repo is asked for private: huggingface_hub 1.5 sends {"private": true}, newer ones
    # {"visibility": "private"}; which is the library's wire format, not ours
    created = dict(hub.created)
    private = created.pop("private", None) is True or created.pop("visibility", None) == "private"
    assert private, hub.created
    assert created == {"name": "gpt2-lotr", "organization": "me"}
    # public text names a local base by its directory only, never the user's directory layout
    assert hub.commits[0]["message"] == f"Add 1 new token to gpt2-tiny with vocabsurgeon {__version__}"
    assert hub.commits[0]["files"]["README.md"] == (tmp_path / "out" / "README.md").read_bytes()


def test_add_push_failure_keeps_the_output_and_says_how_to_retry(hub, tmp_path):
    hub.fail["commit"] = 500
    o = tmp_path / "out"
    r = run("add", "-t", "Frodo", "--no-validate", "--push-to", "me/gpt2-lotr", FIXTURE, o)
    assert r.exit_code == 4
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("Error: push to me/gpt2-lotr: the Hub answered HTTP 500")
    assert line.endswith(f"{o} is written; retry with `vocabsurgeon push {o} me/gpt2-lotr`")
    assert (o / "model.safetensors").is_file()


def test_push_options_need_push_to(tmp_path):
    r = run("add", "-t", "Frodo", "--create-pr", FIXTURE, tmp_path / "out")
    assert r.exit_code == 2
    assert r.stderr.strip() == "Error: --create-pr is a push option; pass --push-to REPO_ID too"
    assert not (tmp_path / "out").exists()


def test_long_token_lists_go_to_a_file(tmp_path):
    words = [f"Elf{chr(65 + i // 26)}{chr(97 + i % 26)}" for i in range(45)]
    r = run("add", "-q", "--no-validate", *[a for w in words for a in ("-t", w)], FIXTURE, tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "out" / "added_tokens.txt").read_text().splitlines() == words
    card = (tmp_path / "out" / "README.md").read_text()
    assert "45 words (90 tokens); the full list is in [`added_tokens.txt`](added_tokens.txt)" in card
    assert "ElfBa" not in card


def test_validation_figures_reach_the_card_and_the_hub(hub, tmp_path):
    from huggingface_hub import ModelCard

    o = tmp_path / "out"
    r = run("add", "-t", "Frodo", "-t", "Gandalf", "--corpus", REPO / "fixtures" / "corpus_lotr.txt", "--max-tokens", 256,
            "--plot", o / "kl.png", "--push-to", "me/gpt2-lotr", "--json", FIXTURE, o)
    assert r.exit_code == 0, r.output
    report = json.loads((o / "vocabsurgeon_report.json").read_text())
    card = ModelCard((o / "README.md").read_text()).text
    kl, u = report["kl"], report["usability"]
    assert "Validation **passed**" in card
    assert f"| KL(p_old ‖ p_new) mean | {kl['mean']:.3g} nats | {kl['limit_mean']:.3g} |" in card
    assert f"| KL max | {kl['max']:.3g} nats | mean-init bound log(1 + k/n) = {kl['bound']:.3g} (within) |" in card
    assert u["applicable"] and f"| {u['bpb_new']:.3f} (original model: {u['bpb_old']:.3f}) |" in card
    assert "![Histogram of per-position KL](kl.png)" in card
    sent = hub.commits[0]["files"]
    assert set(sent) == CHECKPOINT_FILES | {"kl.png", "vocabsurgeon_report.json"}
    assert sent["README.md"] == (o / "README.md").read_bytes()


def test_failed_validation_is_in_the_card_and_nothing_is_pushed(hub, tmp_path):
    o = tmp_path / "out"
    # rows 100x the old rows' spread: new tokens take the samples (KL ~160 nats, 97% new tokens)
    r = run("add", "-t", "Frodo", "--max-tokens", 64, "--init", "mean-noise", "--eps", "1e4", "--push-to",
            "me/gpt2-lotr", FIXTURE, o)
    assert r.exit_code == 3
    assert not o.exists()  # nothing published; the output is kept beside it
    card = (tmp_path / "out.rejected" / "README.md").read_text()
    assert "Validation **FAILED**: " in card and "--max-new-token-fraction" in card
    assert hub.requests == []


@pytest.mark.parametrize("args", [
    ("add", "-t", "Frodo", FIXTURE, "out"),
    ("inspect", FIXTURE),
    ("validate", FIXTURE, FIXTURE),  # two local directories: nothing for --revision to apply to
    ("compare", FIXTURE, FIXTURE),
], ids=lambda a: a[0])
def test_revision_with_a_local_directory_is_refused(tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    r = run(*args, "--revision", "v1")
    assert r.exit_code == 2
    assert r.stderr.strip() == (f"Error: {FIXTURE}: --revision is for Hub repo ids, but this is a local directory; "
                                "drop --revision")


# ------------------------------------------------------------------------- inspect, validate, compare
# They take a repo id wherever they read a checkpoint, pulled by the same code as `add`: what they
# measure must be what they measure on the same checkpoint as a local directory.

FAST = ("--max-tokens", 60)  # one forward pass per model on the tiny GPT-2


def _figures(report: dict, *names: str) -> dict:
    """The report without the keys that name the checkpoints or time the run."""
    return {k: v for k, v in report.items() if k not in {*names, "seconds", "load_seconds"}}


def _added(tmp_path) -> Path:
    out = tmp_path / "added"
    r = run("add", "-q", "--no-validate", "-t", "Frodo", "-t", "Gandalf", FIXTURE, out)
    assert r.exit_code == 0, r.output
    return out


def test_inspect_a_repo_id_gives_the_figures_of_its_directory(hub, tmp_path, monkeypatch):
    sha = _serve_fixture(hub)
    monkeypatch.chdir(tmp_path)
    local = run("inspect", "--json", *FAST, FIXTURE)
    pulled = run("inspect", "--json", *FAST, "org/gpt2-tiny")
    assert local.exit_code == 0 and pulled.exit_code == 0, pulled.output
    d, ref = json.loads(pulled.stdout), json.loads(local.stdout)
    assert d["path"] == "org/gpt2-tiny"
    assert d["source"] == {"name": "org/gpt2-tiny", "repo_id": "org/gpt2-tiny", "revision": None, "commit": sha}
    assert ref["source"]["repo_id"] is None
    assert _figures(d, "path", "source") == _figures(ref, "path", "source")
    assert d["zero_init_risk"]["positions"] == 61
    assert not any(p.endswith((".bin", ".pth", ".onnx")) for p in hub.paths())
    r = run("inspect", "-q", *FAST, "org/gpt2-tiny")
    assert r.stdout.splitlines()[0] == f"org/gpt2-tiny (commit {sha[:12]}): gpt2, tied embeddings, F32"


def test_validate_a_repo_id_base_against_a_local_output(hub, tmp_path, monkeypatch):
    sha = _serve_fixture(hub)
    hub.repos["org/gpt2-tiny"]["v1"] = dict(hub.repos["org/gpt2-tiny"]["main"])
    out = _added(tmp_path)
    monkeypatch.chdir(tmp_path)
    local = run("validate", "--json", *FAST, FIXTURE, out)
    # --revision applies to BASE, the repo id; NEW, a local directory, is read as it is
    pulled = run("validate", "--json", *FAST, "--revision", "v1", "org/gpt2-tiny", out)
    assert local.exit_code == 0 and pulled.exit_code == 0, pulled.output
    d, ref = json.loads(pulled.stdout), json.loads(local.stdout)
    assert d["base"] == "org/gpt2-tiny" and d["new"] == ref["new"] == str(out)
    assert d["sources"] == {"base": {"name": "org/gpt2-tiny", "repo_id": "org/gpt2-tiny", "revision": "v1",
                                     "commit": sha},
                            "new": {"name": str(out), "repo_id": None, "revision": None, "commit": None}}
    assert _figures(d, "base", "sources") == _figures(ref, "base", "sources")
    assert d["passed"] and d["kl"]["positions"] == 61 and d["vocab"]["k"] == 4
    assert "/api/models/org/gpt2-tiny/revision/v1" in hub.paths("GET")


def test_compare_repo_ids_give_the_figures_of_their_directories(hub, tmp_path, monkeypatch):
    sha_a = _serve_fixture(hub)
    out = _added(tmp_path)
    sha_b = hub.add_repo("me/gpt2-lotr", {p.name: p.read_bytes() for p in out.iterdir()})
    monkeypatch.chdir(tmp_path)
    local = run("compare", "--json", "--k", 5, FIXTURE, out)
    pulled = run("compare", "--json", "--k", 5, "org/gpt2-tiny", "me/gpt2-lotr")
    assert local.exit_code == 0 and pulled.exit_code == 0, pulled.output
    d, ref = json.loads(pulled.stdout), json.loads(local.stdout)
    assert (d["a"], d["b"]) == ("org/gpt2-tiny", "me/gpt2-lotr")
    assert d["sources"]["a"]["commit"] == sha_a and d["sources"]["b"]["commit"] == sha_b
    assert ref["sources"]["b"] == {"name": str(out), "repo_id": None, "revision": None, "commit": None}
    assert _figures(d, "a", "b", "sources") == _figures(ref, "a", "b", "sources")
    assert d["tokens_b"] == d["tokens_compared"] + 4
    r = run("compare", "-q", "--k", 5, "org/gpt2-tiny", out)
    assert r.stdout.splitlines()[1].startswith(f"  A: org/gpt2-tiny (commit {sha_a[:12]}) (transformer.wte.weight, ")
    assert r.stdout.splitlines()[2].startswith(f"  B: {out} (transformer.wte.weight, ")


def test_neighbors_of_a_repo_id_are_those_of_its_directory(hub, tmp_path, monkeypatch):
    _serve_fixture(hub)
    monkeypatch.chdir(tmp_path)
    local = run("neighbors", "--json", "--k", 3, FIXTURE, " the", "#42")
    pulled = run("neighbors", "--json", "--k", 3, "org/gpt2-tiny", " the", "#42")
    assert local.exit_code == 0 and pulled.exit_code == 0, pulled.output
    assert json.loads(pulled.stdout)["tokens"] == json.loads(local.stdout)["tokens"]
    assert any(p.startswith("/org/gpt2-tiny/resolve/") for p in hub.paths()), hub.paths()


def test_the_python_api_takes_repo_ids_like_the_cli(hub, tmp_path, monkeypatch):
    from vocabsurgeon.explore.compare import compare
    from vocabsurgeon.explore.inspection import inspect_checkpoint
    from vocabsurgeon.validation.validate import validate_checkpoint

    sha = _serve_fixture(hub)
    out = _added(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert inspect_checkpoint("org/gpt2-tiny", run_model=False)["source"]["commit"] == sha
    assert compare("org/gpt2-tiny", out, 5, device="cpu").to_dict()["sources"]["a"]["commit"] == sha
    report = validate_checkpoint("org/gpt2-tiny", out, max_tokens=60, device="cpu")
    assert report["passed"] and report["sources"]["base"]["commit"] == sha


def test_a_local_directory_wins_for_every_command(hub, tmp_path, monkeypatch):
    _serve_fixture(hub)
    shutil.copytree(FIXTURE, tmp_path / "org" / "gpt2-tiny")
    monkeypatch.chdir(tmp_path)
    r = run("inspect", "--json", *FAST, "org/gpt2-tiny")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["source"]["repo_id"] is None
    r = run("compare", "--json", "org/gpt2-tiny", FIXTURE)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["sources"]["a"]["repo_id"] is None
    r = run("validate", "org/gpt2-tiny", "org/gpt2-tiny")  # refused after reading both configs from disk
    assert r.exit_code == 2
    assert r.stderr.strip() == ("Error: org/gpt2-tiny: vocab_size is 2048, not more than the 2048 of org/gpt2-tiny; "
                                "pass the original first and the expanded checkpoint second")
    assert hub.requests == []


@pytest.fixture
def progress_bars():
    """huggingface_hub's progress bars on, as in a fresh process; their state is restored afterwards."""
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    was = are_progress_bars_disabled()
    yield enable_progress_bars
    (disable_progress_bars if was else enable_progress_bars)()


@pytest.mark.parametrize("args", [
    ("inspect", *FAST, "org/gpt2-tiny"),
    ("validate", "org/gpt2-tiny", "org/gpt2-tiny"),  # refused after the pull: only the download matters here
    ("compare", "org/gpt2-tiny", "org/gpt2-tiny"),
], ids=lambda a: a[0])
def test_hub_progress_bars_are_off_with_json_and_quiet(hub, tmp_path, monkeypatch, progress_bars, args):
    _serve_fixture(hub)
    monkeypatch.chdir(tmp_path)
    for flag in ("--json", "-q"):
        progress_bars()
        r = run(*args, flag)
        assert "Fetching" not in r.stderr, flag
    progress_bars()
    r = run(*args)  # from the cache now, and still drawn: so the runs above could have drawn it
    assert "Fetching" in r.stderr


def test_push_refuses_a_folder_that_is_not_a_validated_output_unless_asked(hub, tmp_path):
    # issue 46: push uploaded a folder add never wrote, and one whose validation never ran, without a word
    r = run("push", FIXTURE, "me/x")
    assert r.exit_code == 2
    assert r.stderr.strip() == (f"Error: {FIXTURE} is not a vocabsurgeon output (no vocabsurgeon_report.json); "
                                f"validate it first (`vocabsurgeon validate BASE {FIXTURE}`), or pass --unvalidated to "
                                "push it as it is")
    o = tmp_path / "o"
    assert run("add", "-q", "--no-validate", "-t", "Frodo", FIXTURE, o).exit_code == 0
    r = run("push", o, "me/x")
    assert r.exit_code == 2 and r.stderr.startswith(f"Error: {o} was not validated (--no-validate); validate it first")
    assert hub.requests == []
    r = run("push", o, "me/x", "--unvalidated", "--json")
    assert r.exit_code == 0, r.output
