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


@pytest.fixture
def converter():
    """llama.cpp's converter, or a skip with the reason where its sdist cannot be downloaded (no network)."""
    return llamacpp.fetch_or_skip()


@pytest.mark.floor  # also run with the oldest supported versions (.ci/run)
def test_without_a_network_the_converter_tests_skip_with_the_reason(monkeypatch, tmp_path):
    monkeypatch.setattr(llamacpp, "CACHE", tmp_path / "llamacpp")  # nothing cached
    monkeypatch.delenv("LLAMACPP_SDIST", raising=False)
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip finds no index and no local wheel: as without a network
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    with pytest.raises(pytest.skip.Exception, match=r"^llama-cpp-python==0\.3\.36: pip cannot download the sdist \(.+\); "
                       r"the llama\.cpp converter tests need it once"):
        llamacpp.fetch_or_skip()
    assert not (tmp_path / "llamacpp").exists()


def test_a_sdist_that_is_not_the_pinned_one_still_fails(monkeypatch, tmp_path):
    monkeypatch.setattr(llamacpp, "CACHE", tmp_path / "llamacpp")
    (tmp_path / "other.tar.gz").write_bytes(b"not the sdist")
    monkeypatch.setenv("LLAMACPP_SDIST", str(tmp_path / "other.tar.gz"))
    with pytest.raises(RuntimeError, match="not the pinned"):
        llamacpp.fetch_or_skip()


@pytest.mark.slow  # the converter imports torch and transformers in its own process: ~40 s each on 2 loaded cores
@pytest.mark.parametrize("family", ["sp-bpe-meta"])
def test_llama_cpps_converter_converts_the_output_with_each_new_token_at_its_id(family, converter, tmp_path):
    src, out = tiny_checkpoint(tmp_path / "src", family_tokenizer(family)), tmp_path / "out"
    r = CliRunner().invoke(cli, ["add", "--json", "-q", "--no-validate", "-t", "Frodo", "-t", "Gandalf", str(src), str(out)])
    assert r.exit_code == 0, r.output
    added = json.loads(r.stdout)["added"]
    done = llamacpp.convert(out, tmp_path / "out.gguf")
    assert done.returncode == 0, done.stderr[-2000:]
    field = llamacpp.reader(tmp_path / "out.gguf").fields["tokenizer.ggml.tokens"]
    tokens = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
    assert all(tokens[a["id"]] == a["piece"] for a in added), [(a["piece"], tokens[a["id"]]) for a in added]


@pytest.mark.slow  # as above
def test_the_converter_reads_the_kept_tokenizer_model_with_its_scores_and_the_new_pieces(converter, tmp_path):
    # Mistral 7B's files as published: the converter reads tokenizer.model first. The output keeps it with the
    # new tokens appended, so llama.cpp gets every old piece's score (without the file: -1000 for all, and its
    # score-ranked SentencePiece tokenizer splits old text otherwise), a merge word as a normal piece ranked
    # last, and an added token as user-defined with its "▁" read as a space (matched in raw text).
    from published import tiny_mistral_as_published
    from vocabsurgeon import add_tokens

    src = tiny_mistral_as_published(tmp_path / "src")
    summary = add_tokens(src, tmp_path / "out", ["Frodo", "Lothlórien"], init="mean").to_dict()
    how = {a["token"]: a for a in summary["added"]}
    assert how["Frodo"]["mechanism"] == "merge" and how["Lothlórien"]["mechanism"] == "added", how
    assert (tmp_path / "out" / "tokenizer.model").is_file()
    for side in ("src", "out"):
        assert llamacpp.convert(tmp_path / side, tmp_path / f"{side}.gguf").returncode == 0
    old, new = (llamacpp.reader(tmp_path / f"{side}.gguf").fields for side in ("src", "out"))
    scores = [[float(f["tokenizer.ggml.scores"].parts[i][0]) for i in f["tokenizer.ggml.scores"].data] for f in (old, new)]
    n = len(scores[0])
    assert n == 32000 and scores[1][:n] == scores[0]  # every old piece keeps its score
    tokens = new["tokenizer.ggml.tokens"]
    types = new["tokenizer.ggml.token_type"]
    text = {i: bytes(tokens.parts[tokens.data[i]]).decode("utf-8") for i in (how["Frodo"]["id"], how["Lothlórien"]["id"])}
    kind = {i: int(types.parts[types.data[i]][0]) for i in text}
    assert text[how["Frodo"]["id"]] == "▁Frodo" and kind[how["Frodo"]["id"]] == 1  # NORMAL
    assert scores[1][how["Frodo"]["id"]] < min(scores[0])  # ranked after every old piece
    assert text[how["Lothlórien"]["id"]] == " Lothlórien" and kind[how["Lothlórien"]["id"]] == 4  # USER_DEFINED


def test_gguf_parity_skips_what_llama_cpp_reads_otherwise_and_keeps_the_rest(tmp_path):
    # Qwen3's published files: Müller's bare form is three pieces and " Müller" one token already, so without the
    # flag it is an entry only ignore_merges reaches (one token in transformers, split by llama.cpp); with it the
    # word is skipped with that reason, and a word written as merges and added tokens is kept.
    from published import tiny_llama
    from vocabsurgeon import add_tokens

    src = tiny_llama("qwen3", tmp_path / "src")
    plain = add_tokens(src, tmp_path / "plain", ["Müller", "Kubernetes"], init="mean").to_dict()
    assert {a["token"]: a["mechanism"] for a in plain["added"] if a["form"] == a["token"]}["Müller"] == "vocab"
    parity = add_tokens(src, tmp_path / "parity", ["Müller", "Kubernetes"], init="mean", gguf_parity=True).to_dict()
    assert [s["token"] for s in parity["skipped"]] == ["Müller"]
    assert parity["skipped"][0]["reason"].startswith("--gguf-parity: ") and "llama.cpp" in parity["skipped"][0]["reason"]
    kept = [[(a["form"], a["mechanism"]) for a in s["added"] if a["token"] == "Kubernetes"] for s in (parity, plain)]
    # kept by both: with the flag as merges and added tokens, without it (issue 39) as merges or entries that only
    # the whole word reaches (an added token would re-split longer words that hold it)
    assert kept[0] and {m for _, m in kept[0]} <= {"merge", "added"}
    assert kept[1] and {m for _, m in kept[1]} <= {"merge", "vocab"}


def test_a_sentencepiece_word_of_two_pieces_is_one_merge_that_old_text_does_not_reach(tmp_path):
    # Meta's layout (Llama 2, Mistral): "▁" + word split into two existing pieces is one merge appended last (read
    # alike by transformers, SentencePiece and llama.cpp); a longer word stays an added token.
    from transformers import AutoTokenizer

    from builders import OLD_TEXTS, sp_bpe_meta
    from vocabsurgeon import add_tokens

    tok = sp_bpe_meta()
    model = tok.backend_tokenizer.model
    vocab = tok.get_vocab()
    heads = sorted(p for p in vocab if p.startswith("▁") and len(p) > 2 and p[1:].isalpha())
    tails = sorted(p for p in vocab if p.isalpha() and len(p) > 2)
    two = next(h + t for h in heads for t in tails
               if h + t not in vocab and [x.value for x in model.tokenize(h + t)] == [h, t])
    word = two[1:]
    src = tiny_checkpoint(tmp_path / "src", tok)
    summary = add_tokens(src, tmp_path / "out", [word, "Lothlorien"], init="mean").to_dict()
    how = {a["token"]: (a["mechanism"], a["piece"]) for a in summary["added"]}
    assert how[word] == ("merge", two) and how["Lothlorien"][0] == "added", how
    old, new = AutoTokenizer.from_pretrained(src), AutoTokenizer.from_pretrained(tmp_path / "out")
    for text in OLD_TEXTS:
        assert new(text)["input_ids"] == old(text)["input_ids"], text
    for text in (f"{word} and", f"I saw {word}."):
        ids = new(text, add_special_tokens=False)["input_ids"]
        assert summary["added"][0]["id"] in ids and new.decode(ids) == text, (text, new.convert_ids_to_tokens(ids))
