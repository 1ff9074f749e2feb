"""The family records of vocabsurgeon/families/: detection, and what each makes of a word (or why it skips it)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from builders import family_tokenizer as _tokenizer
from tokenizers import Tokenizer, models, pre_tokenizers

from vocabsurgeon.errors import InputError
from vocabsurgeon.tokenizer.families import FAMILIES, SUPPORTED_FAMILIES, Entry, Skip
from vocabsurgeon.tokenizer.editor import TokenizerEditor

DETECTED = {"byte-level": "byte-level-bpe", "byte-level-gpt2": "byte-level-bpe", "sp-bpe": "sentencepiece-bpe",
            "sp-bpe-file": "sentencepiece-bpe", "metaspace-bpe": "sentencepiece-bpe-metaspace",
            "unigram": "unigram", "unigram-file": "unigram", "wordpiece-cased": "wordpiece",
            "wordpiece-uncased": "wordpiece"}


@functools.cache
def _saved(root: Path, name: str) -> Path:
    _tokenizer(name).save_pretrained(root / name)
    return root / name


@pytest.fixture(scope="module")
def editor(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    return lambda name: TokenizerEditor(_saved(root, name))


def test_every_family_has_a_record_with_a_distinct_name():
    assert SUPPORTED_FAMILIES == tuple(f.name for f in FAMILIES) and len(set(SUPPORTED_FAMILIES)) == len(FAMILIES)


@pytest.mark.parametrize("name", DETECTED)
def test_each_tokenizer_as_shipped_is_detected_as_its_family(name, editor):
    ed = editor(name)
    assert ed.family_name == DETECTED[name] == ed.family.name


def test_byte_level_word_is_two_entries_only_the_whole_word_reaches_and_a_split_latin1_symbol_is_skipped(editor):
    # issue 39: not added tokens, which are matched anywhere and would re-split "Frodos"
    kind = editor("byte-level").family
    kind.prepare(["Frodo", "°C"])
    assert kind.entries("Frodo") == [Entry("Frodo", "Frodo", "vocab"), Entry(" Frodo", "ĠFrodo", "vocab")]
    with pytest.raises(Skip, match=r"^the pre-tokenizer splits it \(° \| C\), so it can only be an added token, "
                                   r"which the ByteLevel decoder would garble"):
        kind.entries("°C")


def test_sentencepiece_bpe_word_is_two_added_tokens(editor):
    kind = editor("sp-bpe-file").family
    kind.prepare(["Frodo"])
    assert kind.entries("Frodo") == [Entry("Frodo", "Frodo", "added"), Entry(" Frodo", " Frodo", "added")]


def test_metaspace_bpe_word_is_merges_of_two_pieces_or_skipped(editor):
    ed = editor("metaspace-bpe")
    kind = ed.family

    def pieces(p):
        return [t.value for t in ed.tok.model.tokenize(p)]

    two = next(p[1:] for p in sorted(ed.vocab) if p.startswith("▁") and len(p) > 4 and len(pieces(p[:-1])) == 2
               and len(pieces(p[1:-1])) == 2 for p in [p[:-1]] if not ed.has(p) and not ed.has(p[1:]))
    assert kind.entries(two) == [Entry(two, two, "merge"), Entry(" " + two, "▁" + two, "merge")]
    assert kind.merge_pair(" " + two) == tuple(pieces("▁" + two))
    with pytest.raises(Skip, match=r"takes a new word only as one merge of two existing pieces, and 'Lothlorien' "
                                   r"is \d+ pieces"):
        kind.entries("Lothlorien")


def test_unigram_word_is_two_pieces_scored_like_the_most_likely_piece(editor):
    ed = editor("unigram-file")
    kind = ed.family
    kind.prepare(["Frodo"])
    best = max(s for p, s in ed.model["vocab"] if p not in ed.added)
    assert kind.entries("Frodo") == [Entry("Frodo", "Frodo", "vocab", score=best),
                                     Entry(" Frodo", "▁Frodo", "vocab", score=best)]


def test_a_tokenizer_json_of_tokenizers_before_0_10_is_read_as_its_family(tmp_path):
    """t5-small's tokenizer.json on the Hub (2020) names no model type and writes Metaspace with `str_rep`
    and `add_prefix_space`: it was refused as an "other (None)" tokenizer. It is read, and written, in the
    format the tokenizers library itself writes, which loads as the same tokenizer."""
    import json

    _tokenizer("unigram-file").save_pretrained(tmp_path)
    file = tmp_path / "tokenizer.json"
    data = json.loads(file.read_text(encoding="utf-8"))
    del data["model"]["type"]
    old_metaspace = {"type": "Metaspace", "replacement": "▁", "str_rep": "▁", "add_prefix_space": True}
    data["pre_tokenizer"]["pretokenizers"][1] = data["decoder"] = old_metaspace
    file.write_text(json.dumps(data), encoding="utf-8")
    ed = TokenizerEditor(tmp_path)
    assert ed.family_name == "unigram" and ed.data["model"]["type"] == "Unigram"
    assert ed.data["pre_tokenizer"]["pretokenizers"][1]["prepend_scheme"] == "always"
    text = "I saw Frodo, and more."
    assert Tokenizer.from_str(json.dumps(ed.data)).encode(text).ids == Tokenizer.from_file(str(file)).encode(text).ids
    assert {t.form for t in ed.plan(["Frodo"]).new} == {"Frodo", " Frodo"}


def test_a_metaspace_always_resave_of_metas_layout_is_read_with_the_same_ids_and_takes_added_tokens(tmp_path):
    """transformers 5 re-saves Llama 2's tokenizer.json with no normalizer and a Metaspace "always" pre-tokenizer
    (" Hello" is "▁Hello" there, "▁" + "▁Hello" in Meta's file): read as normalizer steps that do the same to
    every text, so a word is one added token matched on normalized text, not only a merge of two pieces."""
    import json

    from builders import sp_bpe_meta

    data = json.loads(sp_bpe_meta().backend_tokenizer.to_str())
    data["normalizer"] = None
    data["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": False}
    (tmp_path / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    ed = TokenizerEditor(tmp_path)
    assert ed.family_name == "sentencepiece-bpe" and ed.data["pre_tokenizer"] is None
    resaved = Tokenizer.from_str(json.dumps(data))
    for text in [" Hello", "Hello", "  two  spaces ", "a\n b", "I saw Frodo, and more.", "▁x", ""]:
        assert ed.tok.encode(text).ids == resaved.encode(text).ids, text
    # the content is the normalized form, which this normalizer leaves as it is (llama.cpp's converter reads it)
    assert ed.family.entries("Frodo") == [Entry("Frodo", "▁Frodo", "added", normalized=True)]
    assert any("Metaspace pre-tokenizer" in n for n in ed.plan(["Frodo"]).notes)


def test_wordpiece_word_is_one_entry_punctuation_an_added_token_and_cjk_a_raw_added_token(editor):
    cased, uncased = editor("wordpiece-cased").family, editor("wordpiece-uncased").family
    assert cased.entries("Frodo") == [Entry("Frodo", "Frodo", "vocab")]
    assert uncased.entries("Frodo") == [Entry("Frodo", "frodo", "vocab")]
    assert uncased.entries("C++") == [Entry("C++", "c++", "added", normalized=True)]
    assert cased.entries("東京大学") == uncased.entries("東京大学") == [Entry("東京大学", "東京大学", "added")]
    assert uncased.normalization("Frodo", {}) == ("frodo", None)
    assert uncased.normalization("FRODO", {"frodo": "Frodo"}) == (
        None, "the tokenizer normalizes it to 'frodo', the same as token 'Frodo'")


def test_an_unsupported_family_is_refused_with_the_supported_ones(tmp_path):
    tok = Tokenizer(models.WordLevel({"a": 0, "[UNK]": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(InputError, match=r"tokenizer.json: other \(WordLevel\) tokenizers are not supported \("
                                         r"supported: byte-level-bpe, sentencepiece-bpe-metaspace, sentencepiece-bpe, "
                                         r"unigram, wordpiece\); open an issue with the model name$"):
        TokenizerEditor(tmp_path).plan(["Frodo"])
