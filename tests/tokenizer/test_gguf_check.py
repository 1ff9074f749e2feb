"""llama.cpp's converter recognises a byte-level BPE by its ids on one text (tokenizer/gguf_check.py): that text is
the pinned converter's, and neither `add` nor `extend` changes its ids."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from vocabsurgeon import add_tokens
from vocabsurgeon.add.plan import AddOptions, open_target
from vocabsurgeon.extend.pipeline import run_extend
from vocabsurgeon.extend.plan import ExtendOptions
from vocabsurgeon.tokenizer.gguf_check import CHECK_TEXT

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures"))
import llamacpp  # noqa: E402
from published import tiny_llama  # noqa: E402

NEW_LANGUAGE = Path(__file__).resolve().parents[1] / "extend" / "new_language.txt"  # Russian and Japanese prose


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


@pytest.mark.parametrize("name", ["qwen3", "llama3", "gpt2"])
def test_extend_learns_no_merge_that_changes_the_converters_check_text(name, tmp_path):
    # once the Russian and Japanese merges changed its ids (its Bulgarian and Chinese words), the output did not
    # convert ("BPE pre-tokenizer was not recognized"), for every byte-level family
    src = tiny_llama(name, tmp_path / "src")
    result = run_extend(open_target(src, AddOptions(init="subword-mean")), tmp_path / "out",
                        ExtendOptions(NEW_LANGUAGE, 120, None))
    assert result.plan.learned.merges
    a, b = AutoTokenizer.from_pretrained(src), AutoTokenizer.from_pretrained(tmp_path / "out")
    assert b.encode(CHECK_TEXT) == a.encode(CHECK_TEXT)
