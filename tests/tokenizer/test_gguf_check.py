"""The check text of tokenizer/gguf_check.py is the one the pinned llama.cpp converter hashes."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from vocabsurgeon.tokenizer.gguf_check import CHECK_TEXT

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fixtures"))
import llamacpp  # noqa: E402


def test_check_text_is_the_pinned_converters():
    source = (llamacpp.fetch_or_skip() / "conversion" / "base.py").read_text(encoding="utf-8")
    found = [ast.literal_eval(line.split("=", 1)[1].strip()) for line in source.splitlines()
             if line.strip().startswith("chktxt = ")]
    assert found == [CHECK_TEXT]
