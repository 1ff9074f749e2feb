"""llama.cpp reads `extend`'s output as transformers does (issue 40): the output, converted with llama.cpp's own
converter (fixtures/llamacpp.py), tokenizes new-language text, old text and the learned pieces to transformers' ids
and decodes them alike, for the published tokenizer families whose input already has that parity."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tokenizers import decoders
from transformers import AutoTokenizer

from vocabsurgeon.add.plan import AddOptions, open_target
from vocabsurgeon.extend.pipeline import run_extend
from vocabsurgeon.extend.plan import PACKAGED_CORPUS, ExtendOptions, paragraphs
from vocabsurgeon.tokenizer.gguf_check import CHECK_TEXT

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
sys.path.insert(0, str(FIXTURES))
import llamacpp  # noqa: E402
from published import tiny_llama, tiny_mistral_as_published  # noqa: E402

try:
    import llama_cpp  # noqa: F401
except ImportError as e:  # compiled on install: not every machine has it
    WHY = f"llama_cpp does not import ({e}); pip install llama-cpp-python==0.3.36"
else:
    WHY = ""


CORPUS = Path(__file__).parent / "new_language.txt"  # Russian and Japanese prose
NEW = paragraphs(CORPUS)
OLD = paragraphs(PACKAGED_CORPUS)  # English prose, dialogue, numbers and code


@pytest.fixture
def converter():
    return llamacpp.fetch_or_skip()


def _extended(src: Path, out: Path, n: int = 120):
    result = run_extend(open_target(src, AddOptions(init="subword-mean")), out, ExtendOptions(CORPUS, n, None))
    assert result.plan.tokens.new  # (the small corpus runs out of pairs seen twice before n)
    return result


# llama.cpp's converter hashes a byte-level pre-tokenizer to a type; the learned merges go after the old ones, which
# every BPE runtime applies by rank: the same ids on new-language text, old text, and each learned piece alone.
@pytest.mark.parametrize("name", ["qwen3", "llama3", "gpt2"])
def test_the_converters_check_text_keeps_its_ids(name, tmp_path):
    # llama.cpp's converter recognises a byte-level BPE by its ids on CHECK_TEXT (Bulgarian and Chinese words among
    # them); once the Russian and Japanese merges changed them, the output did not convert ("BPE pre-tokenizer was
    # not recognized"), for every byte-level family
    src = tiny_llama(name, tmp_path / "src")
    result = _extended(src, tmp_path / "out")
    assert result.plan.learned.merges
    a, b = AutoTokenizer.from_pretrained(src), AutoTokenizer.from_pretrained(tmp_path / "out")
    assert b.encode(CHECK_TEXT) == a.encode(CHECK_TEXT)


@pytest.mark.parametrize("name", ["qwen3", "llama3", "gpt2"])
@pytest.mark.usefixtures("converter")
@pytest.mark.llamacpp
@pytest.mark.slow
@pytest.mark.skipif(bool(WHY), reason=WHY)
def test_llama_cpp_tokenizes_the_extended_byte_level_output_as_transformers_does(name, tmp_path):
    src = tiny_llama(name, tmp_path / "src")
    result = _extended(src, tmp_path / "out")
    done = llamacpp.convert(tmp_path / "out", tmp_path / "out.gguf")
    assert done.returncode == 0, done.stderr[-2000:]
    alone = [decoders.ByteLevel().decode([t.piece]) for t in result.plan.tokens.new]
    texts = NEW + OLD + [t for t in alone if "\ufffd" not in t]  # (a piece of part of a character is no text)
    assert llamacpp.mismatches(tmp_path / "out", tmp_path / "out.gguf", texts) == []


@pytest.mark.usefixtures("converter")
@pytest.mark.llamacpp
@pytest.mark.slow
@pytest.mark.skipif(bool(WHY), reason=WHY)
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
