"""The check text of tokenizer/gguf_check.py is the one the pinned llama.cpp converter hashes."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from vocabsurgeon import add_tokens
from vocabsurgeon.tokenizer.gguf_check import CHECK_TEXT

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures"))
import llamacpp  # noqa: E402


def test_check_text_is_the_pinned_converters():
    source = (llamacpp.fetch_or_skip() / "conversion" / "base.py").read_text(encoding="utf-8")
    found = [ast.literal_eval(line.split("=", 1)[1].strip()) for line in source.splitlines()
             if line.strip().startswith("chktxt = ")]
    assert found == [CHECK_TEXT]


# Words of the converter's check text ("emojis", "apple" in "?我想在apple工作", Bulgarian and Chinese words) made
# llama.cpp's converter refuse the output of `add` ("BPE pre-tokenizer was not recognized"), --gguf-parity or not.
CHECKED = ["emojis", "concatenated", "Български", "工作"]


@pytest.mark.parametrize("gguf_parity", [False, True])
@pytest.mark.parametrize("name", ["gpt2", "llama3", "qwen3"])
def test_add_skips_a_word_that_would_change_the_converters_check_text(published, name, gguf_parity, tmp_path):
    src = published(name)
    summary = add_tokens(src, tmp_path / "out", [*CHECKED, "Frodo"], gguf_parity=gguf_parity).to_dict()
    assert {a["token"] for a in summary["added"]} >= {"Frodo"}
    a, b = AutoTokenizer.from_pretrained(src), AutoTokenizer.from_pretrained(tmp_path / "out")
    assert b.encode(CHECK_TEXT) == a.encode(CHECK_TEXT)
    assert [s for s in summary["skipped"] if "GGUF" in s["reason"] and s["token"] in CHECKED]


def test_a_sentencepiece_output_keeps_such_words(published, tmp_path):
    # the converter reads Llama 2's tokenizer.model (no hash): nothing to skip for it
    summary = add_tokens(published("llama2"), tmp_path / "out", CHECKED).to_dict()
    assert not [s for s in summary["skipped"] if "GGUF" in s["reason"]]
