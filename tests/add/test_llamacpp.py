"""llama.cpp reads `add`'s output as transformers does (issue 32): the output, converted with llama.cpp's own
converter (fixtures/llamacpp.py), tokenizes the corpus and each new word in every context to transformers' ids
and decodes them alike, for the published tokenizer families whose input already has that parity."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from vocabsurgeon import add_tokens
from vocabsurgeon.tokenizer import contexts

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
sys.path.insert(0, str(FIXTURES))
import llamacpp  # noqa: E402
from published import tiny_llama, tiny_mistral_as_published  # noqa: E402

llama_cpp = None if llamacpp.missing() else importlib.import_module("llama_cpp")

pytestmark = [pytest.mark.llamacpp, pytest.mark.skipif(llama_cpp is None, reason=llamacpp.missing())]


@pytest.fixture(autouse=True)
def converter():
    """llama.cpp's converter, or a skip with the reason where its sdist cannot be downloaded (no network)."""
    return llamacpp.fetch_or_skip()

# Names, accented names (the bare form garbled as an added token), jargon whose bare form BPE splits in two
# ("Kubernetes", "pathlib") or which is one token after a space already, and a word of another script.
WORDS = ["Frodo", "Gandalf", "Müller", "Éowyn", "Lothlórien", "Björk", "José", "Zoë", "Kubernetes", "pathlib",
         "getUserName", "tachycardia", "Москва"]
PARAGRAPHS = [p for p in (FIXTURES / "corpus.txt").read_text(encoding="utf-8").split("\n\n") if p.strip()]


def _texts(words: list[str]) -> list[str]:
    return [*PARAGRAPHS, *dict.fromkeys(c.text for c in contexts.cases(words))]


@pytest.mark.slow  # llama.cpp's converter imports torch and transformers in its own process: ~40 s on 2 loaded cores
# The families whose input has parity here (bench/llamacpp_parity.py): in a Llama checkpoint, Gemma's files are
# converted as Llama's and differ on the input already; GPT-4o's do not convert.
@pytest.mark.parametrize("name", ["qwen3", "llama3", "gpt2"])
def test_llama_cpp_tokenizes_the_output_as_transformers_does(name, tmp_path):
    src = tiny_llama(name, tmp_path / "src")
    summary = add_tokens(src, tmp_path / "out", WORDS).to_dict()
    assert summary["added"], summary["skipped"]
    done = llamacpp.convert(tmp_path / "out", tmp_path / "out.gguf")
    assert done.returncode == 0, done.stderr[-2000:]

    # An entry that only ignore_merges reaches (a byte-level form that is no merge of two pieces, issue 39: never an
    # added token, which would re-split longer words) is reached by llama.cpp only for the pre-tokenizer types where
    # it applies ignore_merges (Llama 3's llama-bpe); elsewhere (GPT-2's) llama.cpp gives the word its old pieces,
    # the ids the input gave it: old text keeps its ids in both.
    byte_level = summary["tokenizer_family"] == "byte-level-bpe"
    entries = {a["token"] for a in summary["added"] if a["mechanism"] == "vocab" and byte_level}
    reached = llamacpp.pre_tokenizer_type(tmp_path / "out.gguf") == "llama-bpe"  # the published Llama 3 files: smaug-bpe
    texts = _texts([w for w in WORDS if reached or w not in entries])
    assert llamacpp.mismatches(tmp_path / "out", tmp_path / "out.gguf", texts) == []
    if entries and not reached:
        assert llamacpp.mismatches(src, tmp_path / "out.gguf", _texts(sorted(entries))) == []
    new = AutoTokenizer.from_pretrained(tmp_path / "out")
    for a in summary["added"]:  # the words are new tokens in transformers
        assert new(a["form"], add_special_tokens=False)["input_ids"] == [a["id"]], a


@pytest.mark.slow  # as above, and llama.cpp loads the model's weights
def test_llama_cpp_generates_from_the_converted_output_of_add(tmp_path):
    src = tiny_llama("qwen3", tmp_path / "src")
    # --gguf-parity: entries llama.cpp reads as transformers does (Qwen's pre-tokenizer type, qwen2, does not apply
    # ignore_merges, so by default llama.cpp would give the new words their old pieces)
    summary = add_tokens(src, tmp_path / "out", ["Éowyn", "Kubernetes"], gguf_parity=True).to_dict()
    done = llamacpp.convert(tmp_path / "out", tmp_path / "out.gguf")
    assert done.returncode == 0, done.stderr[-2000:]
    llm = llama_cpp.Llama(model_path=str(tmp_path / "out.gguf"), n_ctx=64, verbose=False)
    text = "Kubernetes, said Éowyn"
    prompt = llm.tokenize(text.encode(), add_bos=False)
    new_ids = {a["form"]: a["id"] for a in summary["added"]}
    assert prompt == AutoTokenizer.from_pretrained(tmp_path / "out")(text, add_special_tokens=False)["input_ids"]
    assert new_ids["Kubernetes"] in prompt and new_ids[" Éowyn"] in prompt
    generated = [t for _, t in zip(range(5), llm.generate(prompt, top_k=1, temp=0.0))]
    assert len(generated) == 5 and all(0 <= t < llm.n_vocab() for t in generated)
    assert llm.n_vocab() == summary["rows_after"]


def _ids_differ(checkpoint, gguf, texts: list[str]) -> set[str]:
    """The texts llama.cpp and transformers give different ids. Decodings are not compared here: llama.cpp's
    detokenizer keeps the leading space of a SentencePiece text (" The"), for the input as for the output."""
    return {m[0] for m in llamacpp.mismatches(checkpoint, gguf, texts) if m[1] != m[2]}


@pytest.mark.slow  # three conversions, as above
def test_llama_cpp_reads_old_text_of_a_sentencepiece_output_as_it_read_the_input(tmp_path):
    # Mistral 7B's files as published (tokenizer.model beside tokenizer.json): the converter reads the .model first.
    # Once the output left it out, the converter fell back to tokenizer.json with one score for every piece, and
    # llama.cpp split old text otherwise (37 of 182 texts alike, against 182 of 182 for the input).
    src = tiny_mistral_as_published(tmp_path / "src")
    texts = _texts(WORDS)
    assert llamacpp.convert(src, tmp_path / "in.gguf").returncode == 0
    before = _ids_differ(src, tmp_path / "in.gguf", texts)
    assert len(before) < len(texts) // 5, sorted(before)[:5]  # the input's own parity holds for most texts

    add_tokens(src, tmp_path / "out", WORDS)
    assert llamacpp.convert(tmp_path / "out", tmp_path / "out.gguf").returncode == 0
    after = _ids_differ(tmp_path / "out", tmp_path / "out.gguf", PARAGRAPHS)
    assert after <= before, sorted(after - before)[:3]

    # --gguf-parity keeps the words of two pieces (one merge, which both read alike) and skips the others
    summary = add_tokens(src, tmp_path / "parity", WORDS, gguf_parity=True).to_dict()
    kept = [a["token"] for a in summary["added"]]
    assert kept and {a["mechanism"] for a in summary["added"]} == {"merge"}, summary["added"]
    assert summary["skipped"] and all(s["reason"].startswith("--gguf-parity") for s in summary["skipped"])
    assert llamacpp.convert(tmp_path / "parity", tmp_path / "parity.gguf").returncode == 0
    missed = _ids_differ(tmp_path / "parity", tmp_path / "parity.gguf", _texts(kept))
    assert missed <= before, sorted(missed - before)[:3]
