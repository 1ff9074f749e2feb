"""What comes after `add`: llama.cpp's own converter (convert_hf_to_gguf.py of the pinned llama-cpp-python sdist,
fixtures/llamacpp.py) converts the output, and the GGUF holds every new token at its id."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from builders import family_tokenizer, tiny_checkpoint
from click.testing import CliRunner

from vocabsurgeon.cli.commands import cli

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures"))
import llamacpp  # noqa: E402


@pytest.mark.slow  # the converter imports torch and transformers in its own process: ~40 s each on 2 loaded cores
@pytest.mark.parametrize("family", ["sp-bpe-meta"])
def test_llama_cpps_converter_converts_the_output_with_each_new_token_at_its_id(family, tmp_path):
    src, out = tiny_checkpoint(tmp_path / "src", family_tokenizer(family)), tmp_path / "out"
    r = CliRunner().invoke(cli, ["add", "--json", "-q", "--no-validate", "-t", "Frodo", "-t", "Gandalf", str(src), str(out)])
    assert r.exit_code == 0, r.output
    added = json.loads(r.stdout)["added"]
    done = llamacpp.convert(out, tmp_path / "out.gguf")
    assert done.returncode == 0, done.stderr[-2000:]
    field = llamacpp.reader(tmp_path / "out.gguf").fields["tokenizer.ggml.tokens"]
    tokens = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
    assert all(tokens[a["id"]] == a["piece"] for a in added), [(a["piece"], tokens[a["id"]]) for a in added]
