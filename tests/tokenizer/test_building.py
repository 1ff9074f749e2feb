"""The tokenizer the plan builds from a tokenizer.json object without a JSON round trip of its vocabulary
(vocabsurgeon/tokenizer/building.py, issue 38) is the one the tokenizers parser builds from that object: the
published files, the test fixtures, and the edited objects the plan checks; and a plan is the same either way."""

from __future__ import annotations

import json
import random

import pytest
from tokenizers import Tokenizer

from vocabsurgeon.add.plan import AddOptions, open_target, plan_tokens
from vocabsurgeon.tokenizer import building, opened, writing
from vocabsurgeon.tokenizer.building import tokenizer_from_data
from vocabsurgeon.tokenizer.editor import TokenizerEditor
from vocabsurgeon.tokenizer.encoding import encode_ids
from vocabsurgeon.tokenizer.families.pieces import FormIndex, text_pieces

from published_models import FIXTURES, Missing, fetch

TEXTS = ["Hello, world!", " Frodo went to Lothlórien.", "getUserName(x) == 12345", "Москва 日本語 😀",
         "<|begin_of_text|>hi<|end_of_text|>", "  two  spaces\n\ttab"]
WORDS = ["Frodo", "Gandalf", "Lothlórien", "mithril", "José", "Björk", "Dvořák", "tachycardia", "pathlib", "kubectl",
         "getUserName", "Москва", "REQ"]


def _parsed(data: dict) -> Tokenizer:
    return Tokenizer.from_str(json.dumps(data))


def _same(data: dict) -> None:
    """`tokenizer_from_data` gives what the parser gives: the same serialization and the same ids."""
    fast, parsed = tokenizer_from_data(data), _parsed(data)
    assert fast.to_str() == parsed.to_str()
    assert encode_ids(fast, TEXTS) == encode_ids(parsed, TEXTS)
    assert fast.get_vocab_size(with_added_tokens=True) == parsed.get_vocab_size(with_added_tokens=True)


@pytest.mark.parametrize("name,fast", [("llama3", True), ("gpt2", True), ("llama2", True), ("gpt4o", False)])
def test_published_tokenizers_build_as_the_parser_builds_them(name, fast):
    try:
        files = fetch(name)
    except Missing as e:
        pytest.skip(str(e))
    data = json.loads((files / "tokenizer.json").read_text(encoding="utf-8"))
    # Llama 3's 256 specials are outside its vocabulary and numbered after it; GPT-4o's ids have gaps (the parser)
    assert (building._bpe_parts(data) is not None) is fast
    _same(data)


@pytest.mark.parametrize("name", ["gpt2-tiny", "llama-tiny"])
def test_edited_tokenizers_build_as_the_parser_builds_them(name):
    """Entries, merges (llama-tiny's SentencePiece BPE), added tokens: the objects the plan checks."""
    ed = TokenizerEditor(FIXTURES / name)
    _same(ed.data)
    plan = ed.plan(WORDS, first_id=ed.size)
    assert {t.mechanism for t in plan.new} & {"vocab", "merge", "added"}
    edited = ed.edited(plan)
    _same(edited)
    cache: dict = {}  # the original's merges converted once, reused for the edited copy (appended to, or not)
    tokenizer_from_data(ed.data, cache)
    assert tokenizer_from_data(edited, cache).to_str() == _parsed(edited).to_str()


def test_added_tokens_the_parser_would_renumber_go_through_the_parser():
    """An added token whose id is not the one the parser gives it (a gap after the vocabulary) is left to it."""
    data = json.loads((FIXTURES / "gpt2-tiny" / "tokenizer.json").read_text(encoding="utf-8"))
    size = len(data["model"]["vocab"])
    data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] in data["model"]["vocab"]] + [
        {"id": size + 5, "content": "<gap>", "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}]
    assert building._bpe_parts(data) is None
    _same(data)
    data["added_tokens"][-1]["id"] = size  # the id the parser gives it: built here
    assert building._bpe_parts(data) is not None
    _same(data)


def test_merges_written_as_text_build_as_the_parser_builds_them():
    data = json.loads((FIXTURES / "gpt2-tiny" / "tokenizer.json").read_text(encoding="utf-8"))
    data["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in data["model"]["merges"]]
    assert building._bpe_parts(data) is not None
    _same(data)


def _round_trip(data: dict, cache: dict | None = None) -> Tokenizer:
    return _parsed(data)


@pytest.mark.parametrize("name", ["gpt2", "llama3"])
def test_a_plan_is_the_same_as_with_the_tokenizers_parsed_from_json(name, published, monkeypatch):
    """What the plan decides (entries, skips, contexts, re-splits, notes) does not depend on how its tokenizers
    are built: the same plan as with every tokenizer parsed from JSON, as before issue 38."""
    words = WORDS + ["returned", "unread", "(striped", "x2"]
    src = published(name)
    target = open_target(src, AddOptions())
    fast = plan_tokens(target, words).to_dict()
    monkeypatch.setattr(opened, "tokenizer_from_data", _round_trip)
    monkeypatch.setattr(writing, "tokenizer_from_data", _round_trip)
    assert plan_tokens(target, words).to_dict() == fast


def _hits_by_definition(index: FormIndex, pieces: list[str]) -> list:
    return [(g, FormIndex._hits_in_python(pieces, g, by_head)) for g, by_head in index.groups]


@pytest.mark.parametrize("seed", range(6))
def test_form_index_finds_in_numpy_what_the_window_scan_finds(seed):
    """The numpy path (1,000 pieces or more) gives the same hits, in the same order, as the window scan: short
    and long forms, characters outside the BMP, forms with characters no piece has."""
    rng = random.Random(seed)
    alphabet = "abcĠÉ😀\n" if seed % 2 else "ab"
    pieces = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 9))) for _ in range(1500)]
    forms = {"".join(rng.choice(alphabet + "z") for _ in range(rng.randint(1, 6))) for _ in range(40)}
    index = FormIndex(forms)
    assert index.hits(pieces) == _hits_by_definition(index, pieces)
    held = {f: list(dict.fromkeys(p for p in pieces if len(f) < len(p) and f in p)) for f in forms}
    assert index.holders(pieces) == {f: ps for f, ps in held.items() if ps}


def test_form_index_with_thousands_of_distinct_characters_agrees_with_the_window_scan():
    """Past 4,096 distinct characters in the heads, the first-two-characters table is not built (its size): the
    windows are filtered by their first character, then searched."""
    rng = random.Random(7)
    alphabet = [chr(0x4E00 + i) for i in range(6000)]
    forms = {"".join(rng.choice(alphabet) for _ in range(rng.randint(1, 5))) for _ in range(3500)}
    pieces = ["".join(rng.choice(alphabet[:300]) for _ in range(rng.randint(1, 6))) for _ in range(3000)]
    index = FormIndex(forms)
    assert len({c for f in forms for c in f[:4]}) > 4096
    assert index.hits(pieces) == _hits_by_definition(index, pieces)


def test_form_index_on_a_vocabulary_agrees_with_the_window_scan():
    vocab = json.loads((FIXTURES / "gpt2-tiny" / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    pieces = list(vocab) * 3  # past the numpy threshold
    index = FormIndex({"Ġthe", "the", "re", "ation", "Ġreturn", "tion", "zzz"})
    assert index.hits(pieces) == _hits_by_definition(index, pieces)


def test_text_pieces_leave_out_added_tokens_and_byte_fallback_pieces_only():
    vocab = {"<0x41>": 0, "a": 1, "x\n<0x42>": 2, "<0x4G>": 3, "<0x41>b": 4, "<s>": 5, "\n": 6, "<0xFF>": 7}
    assert text_pieces(vocab, {"<s>": {"id": 5}}) == ["a", "x\n<0x42>", "<0x4G>", "<0x41>b", "\n"]
    assert text_pieces({"a": 0, "b": 1}, {}) == ["a", "b"]


def test_merges_held_as_pairs_write_the_same_json_and_build_the_same_tokenizer():
    """The editor holds ["a", "b"] merges as ("a", "b") tuples (merges_as_pairs): json.dumps writes the same text,
    the parser and the constructor build the same tokenizer, and the garbage collector stops tracking them."""
    import gc

    text = (FIXTURES / "gpt2-tiny" / "tokenizer.json").read_text(encoding="utf-8")
    data = building.merges_as_pairs(json.loads(text))
    assert json.dumps(data) == json.dumps(json.loads(text))
    assert all(type(m) is tuple for m in data["model"]["merges"])
    _same(data)
    gc.collect()
    assert not any(gc.is_tracked(m) for m in data["model"]["merges"])
    as_text = json.loads(text)  # "a b" merges, and anything that is not a list of pairs, are left as they are
    as_text["model"]["merges"] = [" ".join(m) for m in as_text["model"]["merges"]]
    assert building.merges_as_pairs(json.loads(json.dumps(as_text))) == as_text
    odd = json.loads(text)
    odd["model"]["merges"][3] = ["a", "b", "c"]
    assert building.merges_as_pairs(json.loads(json.dumps(odd))) == odd


def test_the_editor_writes_the_tokenizer_json_it_read(tmp_path):
    """Read (merges as pairs) and written without an edit: the same object as the file's."""
    ed = TokenizerEditor(FIXTURES / "gpt2-tiny")
    plan = ed.plan([], first_id=ed.size)
    ed.write(plan, tmp_path)
    assert json.loads((tmp_path / "tokenizer.json").read_text(encoding="utf-8")) == \
        json.loads((FIXTURES / "gpt2-tiny" / "tokenizer.json").read_text(encoding="utf-8"))
