"""What a pipeline reads: with --json only the JSON on stdout, with -q nothing but errors on stderr.

Run as a real process (not CliRunner): transformers writes its warnings and bars through its own
handlers, and Python warnings go straight to the real stderr, which CliRunner does not see the same way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def vocabsurgeon(*args, cwd):
    env = {k: v for k, v in os.environ.items() if k not in ("TRANSFORMERS_VERBOSITY", "HF_HUB_DISABLE_PROGRESS_BARS")}
    env["OMP_NUM_THREADS"] = "1"
    # transformers chatty, as a user's environment may set it: -q must silence it all the same (a model's own
    # warnings come and go with transformers versions, so the test does not rely on one)
    env["TRANSFORMERS_VERBOSITY"] = "info"
    return subprocess.run([sys.executable, "-m", "vocabsurgeon", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, stdin=subprocess.DEVNULL, timeout=600)


@pytest.fixture(scope="module")
def added(tmp_path_factory):
    """A tiny GPT-2 and its expansion, written without -q (so that it is known to print transformers' messages)."""
    from builders import tiny_gpt2

    root = tmp_path_factory.mktemp("streams")
    src = tiny_gpt2(root / "gpt2")
    r = vocabsurgeon("add", "--max-tokens", "64", "-t", "Frodo", src, root / "out", cwd=root)
    assert r.returncode == 0, r.stderr
    assert "[transformers]" in r.stderr, "transformers printed nothing to silence"
    return src, root / "out", root


def test_quiet_add_with_validation_prints_nothing_at_all(added):
    src, _, root = added
    r = vocabsurgeon("add", "-q", "--max-tokens", "64", "-t", "Gandalf", src, root / "quiet", cwd=root)
    assert r.returncode == 0
    assert (r.stdout, r.stderr) == ("", "")
    r = vocabsurgeon("add", "--json", "-q", "--max-tokens", "64", "-t", "Gandalf", src, root / "quiet-json", cwd=root)
    assert r.returncode == 0 and r.stderr == ""
    assert json.loads(r.stdout)["validation"]["passed"] is True  # stdout is the JSON and nothing else


def test_quiet_validate_and_inspect_print_only_what_was_asked(added):
    src, out, root = added
    r = vocabsurgeon("validate", "-q", "--max-tokens", "64", src, out, cwd=root)
    assert r.returncode == 0 and (r.stdout, r.stderr) == ("", "")
    r = vocabsurgeon("inspect", "-q", "--json", "--max-tokens", "32", out, cwd=root)
    assert r.returncode == 0 and r.stderr == ""
    assert json.loads(r.stdout)["architecture"] == "gpt2"


def test_quiet_still_prints_errors(added):
    src, _, root = added
    r = vocabsurgeon("add", "-q", "--seed", "-1", "-t", "Sam", src, root / "never", cwd=root)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines()[-1] == "Error: Invalid value for '--seed': -1 is not in the range 0<=x<=18446744073709551615."
