"""Tokenizer families: new words behave like native words on each, through transformers' AutoTokenizer.

Each family's tokenizer is trained here on the standard library's docstrings and saved the way
real checkpoints ship it: with transformers' model-specific class (GPT2Tokenizer, LlamaTokenizer,
T5Tokenizer, BertTokenizer), which transformers 5 rebuilds from vocab/merges/scores on load, and
with the generic class that loads tokenizer.json as written. The three guarantees of the issue are
checked on realistic sentences: old text keeps its ids, every occurrence of a new word is one
token with no stray word-boundary piece next to it, and decoding matches the original decode.
"""

from __future__ import annotations

import functools
import io
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
import sentencepiece as spm
from hypothesis import strategies as st
from click.testing import CliRunner
from tokenizers import Regex, Tokenizer, pre_tokenizers
from transformers import (AutoModelForCausalLM, AutoTokenizer, BertTokenizer, LlamaConfig, LlamaForCausalLM,
                          PreTrainedTokenizerFast)

from invariants import check_same_tokenizer_behaviour
from builders import OLD_TEXTS, SPECIAL, bytelevel_tokenizer, make_tokenizer, tiny_checkpoint, training_text
from conftest import FIXTURES
from vocabsurgeon.cli.commands import cli
from vocabsurgeon.errors import InputError
from vocabsurgeon.tokenizer.families.pieces import byte_level, parts_of
from vocabsurgeon.tokenizer.drafting import GAP_PIECE
from vocabsurgeon.tokenizer.editor import TokenizerEditor, verify_tokenizer

WORDS = ["mithril", "Frodo", "Lothlorien", "Éowyn"]
NEW_TEXTS = [
    "{0} is light, and {1} knew it.",  # sentence-initial, before punctuation
    "They said {0}, and {0} again: {0}.",  # after a space, before "," ":" "."
    "Ask {1} {2} about the {0} of {3}.",  # next to other new words
    "({1}) and {3}'s {0}-coat; {2}!",  # after and before punctuation
]


# ---------------------------------------------------------------------------------------------
# Tokenizers of each family, trained once per session

CONTEXTS_NOTE = "not one token in some contexts"


RESPLIT_NOTE = "re-split longer words that hold them"
ENTRIES_NOTE = "are vocabulary entries that only ignore_merges reaches"


def _but_contexts(notes: list[str]) -> list[str]:
    """The notes other than the one listing contexts where a kept word keeps its old pieces (issue 32: every
    context is reported; on byte-level BPE `'return'` splits as the contraction `'re` + `turn`, as old text does),
    the one naming kept words that re-split longer words, and the one on byte-level entries (issue 39)."""
    return [n for n in notes if CONTEXTS_NOTE not in n and RESPLIT_NOTE not in n and ENTRIES_NOTE not in n]


FAMILIES = ["byte-level", "byte-level-gpt2", "sp-bpe", "sp-bpe-file", "unigram", "unigram-file",
            "wordpiece-cased", "wordpiece-uncased"]


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    cache: dict = {}

    def get(name: str, extra_rows: int = 0) -> Path:
        key = (name, extra_rows)
        if key not in cache:
            cache[key] = tiny_checkpoint(root / f"{name}-{extra_rows}", make_tokenizer(name), extra_rows)
        return cache[key]

    return get


# ---------------------------------------------------------------------------------------------
# The guarantees


def _boundary(tok, i: int) -> bool:
    """A piece that is only a word boundary ("▁", "Ġ", " "): decodes to nothing or whitespace."""
    return tok.decode([i]).strip() == "" and tok.convert_ids_to_tokens(i) not in tok.all_special_tokens


def check_guarantees(src: Path, out: Path, words: list[str], same_class: bool = True) -> None:
    """Old text keeps its ids; each new word is one token with no stray boundary; decode as before."""
    old, new = AutoTokenizer.from_pretrained(src), AutoTokenizer.from_pretrained(out)
    assert (type(new) is type(old)) == same_class
    for text in OLD_TEXTS:
        assert new(text).input_ids == old(text).input_ids, text
    normalizer = old.backend_tokenizer.normalizer
    lowercases = isinstance(old, BertTokenizer) and old.do_lower_case
    norm = [normalizer.normalize_str(w) if lowercases else w for w in words]
    placeholder = GAP_PIECE.format("")[:-1]  # Unigram ids in a gap: never produced, checked below
    added = {i for p, i in new.get_vocab().items() if not p.startswith(placeholder)} - set(old.get_vocab().values())
    word_ids = {nw: {i for i in added if new.decode([i]).strip() == nw} for nw in norm}
    for w, nw in zip(words, norm):
        for form in (w, " " + w):
            ids = new(form, add_special_tokens=False).input_ids
            assert len(ids) == 1 and ids[0] in word_ids[nw], (form, new.convert_ids_to_tokens(ids))
    new_ids = set().union(*word_ids.values())
    assert new_ids == added
    for template in NEW_TEXTS:
        text = template.format(*words)
        ids = new(text, add_special_tokens=False).input_ids
        pieces = new.convert_ids_to_tokens(ids)
        # one token per occurrence
        for w, nw in zip(words, norm):
            hits = sum(1 for i in ids if i in word_ids[nw])
            assert hits == text.count(w), (w, text, pieces)
        # no stray word-boundary piece before a new word, and none more than the old tokenizer makes
        # (a tiny vocabulary has native ones: " knew" is "Ġ" + "k" + ...)
        old_ids = old(text, add_special_tokens=False).input_ids
        for j, i in enumerate(ids):
            if i in new_ids and j > 0:
                assert not _boundary(new, ids[j - 1]), (text, pieces)
        assert sum(map(functools.partial(_boundary, new), ids)) <= sum(map(functools.partial(_boundary, old), old_ids))
        # decoding as the original tokenizer decodes the same text, where it has no <unk> for it
        if old.unk_token_id not in old_ids:
            assert new.decode(ids) == old.decode(old_ids), (text, pieces)
            assert new.decode(ids, skip_special_tokens=True) == old.decode(old_ids, skip_special_tokens=True)
        else:  # better than the original: the word is kept (BERT decodes "( x )" natively: spaces aside)
            want = normalizer.normalize_str(text) if lowercases else text
            assert new.decode(ids).replace(" ", "") == want.replace(" ", ""), (text, pieces)
        assert len(ids) < len(old_ids)


def _add(src: Path, out: Path, *args: str) -> dict:
    r = CliRunner().invoke(cli, ["add", *args, "--json", "-q", str(src), str(out)])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _tokens_args(words):
    return [a for w in words for a in ("-t", w)]


# ---------------------------------------------------------------------------------------------
# Per family: CLI round trip and the guarantees through AutoTokenizer


@pytest.mark.parametrize("family", FAMILIES)
def test_cli_round_trip_new_words_behave_like_native_words(family, built, tmp_path):
    src, out = built(family), tmp_path / "out"
    summary = _add(src, out, *_tokens_args(WORDS))
    assert summary["skipped"] == []
    # GPT2Tokenizer would drop ignore_merges, which "Éowyn" needs: the class is switched (and reported)
    switched = family == "byte-level-gpt2"
    assert any("tokenizer_class GPT2Tokenizer -> PreTrainedTokenizerFast" in n
               for n in summary["tokenizer_notes"]) == switched
    check_guarantees(src, out, WORDS, same_class=not switched)
    # every new token maps to the row it was initialized in, in the model the CLI wrote
    tok = AutoTokenizer.from_pretrained(out)
    rows = json.loads((out / "config.json").read_text())["vocab_size"]
    for a in summary["added"]:
        assert tok.convert_tokens_to_ids(a["piece"]) == a["id"] < rows
    assert summary["rows_after"] == summary["rows_before"] + len(summary["added"])


EXPECTED_MECHANISM = {
    "byte-level": "vocab", "byte-level-gpt2": "vocab", "sp-bpe": "added", "sp-bpe-file": "added",
    "unigram": "vocab", "unigram-file": "vocab", "wordpiece-cased": "vocab", "wordpiece-uncased": "vocab",
}


@pytest.mark.parametrize("family", FAMILIES)
def test_plan_names_family_mechanism_and_pieces(family, built):
    ed = TokenizerEditor(built(family))
    plan = ed.plan(["Frodo"])
    forms = {t.form: t for t in plan.new}
    assert {t.mechanism for t in plan.new} == {EXPECTED_MECHANISM[family]}
    if family.startswith("wordpiece"):  # one entry: after a space and at a start are the same word
        assert [t.piece for t in plan.new] == ["frodo" if family.endswith("uncased") else "Frodo"]
    elif family.startswith("unigram"):
        assert forms["Frodo"].piece == "Frodo" and forms[" Frodo"].piece == "▁Frodo"
    elif family.startswith("byte-level"):  # entries that only ignore_merges reaches (issue 39), spelled as bytes
        assert forms["Frodo"].piece == "Frodo" and forms[" Frodo"].piece == "ĠFrodo"
    else:
        assert forms["Frodo"].piece == "Frodo" and forms[" Frodo"].piece == " Frodo"
    assert [t.id for t in plan.new] == list(range(ed.size, ed.size + len(plan.new)))
    assert all(t.pieces == ed.encode(t.form) and len(t.pieces) > 1 for t in plan.new)


def test_byte_level_word_that_the_decoder_would_garble_is_an_added_token_the_decoder_spells_as_bytes(built, tmp_path):
    # An added token "Éowyn" would decode as "\ufffdowyn" (its characters are all byte symbols) without the Replace
    # step before ByteLevel; an added token, not an entry that only ignore_merges reaches, as llama.cpp reads it alike.
    # With --gguf-parity (elsewhere an entry that only ignore_merges reaches, issue 39).
    src = built("byte-level-gpt2")
    plan = TokenizerEditor(src, gguf_parity=True).plan(["Éowyn"])
    forms = {t.form: t for t in plan.new}
    assert (forms["Éowyn"].mechanism, forms["Éowyn"].piece) == ("added", "Éowyn")
    assert (forms[" Éowyn"].mechanism, forms[" Éowyn"].piece) == ("added", " Éowyn")
    assert not plan.set_ignore_merges
    assert _but_contexts(plan.notes) == [
        "tokenizer_class GPT2Tokenizer -> PreTrainedTokenizerFast, so transformers loads tokenizer.json as written "
        "(model-specific classes rebuild its decoder, which would decode added tokens such as 'Éowyn' as bytes)"
    ]
    decoder = TokenizerEditor(src, gguf_parity=True).edited(plan)["decoder"]
    assert decoder["decoders"][:2] == [{"type": "Replace", "pattern": {"String": " Éowyn"}, "content": byte_level(" Éowyn")},
                                       {"type": "Replace", "pattern": {"String": "Éowyn"}, "content": byte_level("Éowyn")}]
    out = tmp_path / "out"
    _add(src, out, "-t", "Éowyn", "--gguf-parity")
    tok = AutoTokenizer.from_pretrained(out)
    assert type(tok).__name__ == "TokenizersBackend"
    ids = tok("Éowyn, and Éowyn.", add_special_tokens=False).input_ids
    assert len(ids) == 5 and tok.decode(ids) == "Éowyn, and Éowyn."


# ---------------------------------------------------------------------------------------------
# Byte-level BPE: a new form that is part of an existing token ("return" of " return")
#
# Added tokens are matched in raw text before pre-tokenization: an added token "return" would turn
# " return" (one token) into "Ġ" + "return", and "API" would split " CAPITAL". Such a form is a
# vocabulary entry with ignore_merges instead, produced only for a whole pre-token.


def _ids(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False).input_ids


def _one_token_after_a_space(vocab: dict, prefix: str = "Ġ") -> str:
    """A word that is one token after a space (" return") but not at a sentence start ("return")."""
    return next(w for w in ("return", "string", "default", "argument") if prefix + w in vocab and w not in vocab)


def test_parts_of_finds_forms_inside_longer_pieces():
    assert parts_of(["Ġreturn", "ation", "x"], {"return", "tion", "Ġreturn", "ation", "zz"}) == {
        "return": "Ġreturn", "tion": "ation"}


_piece = st.text(alphabet="abĠÉ", min_size=1, max_size=9)


@settings(max_examples=300, deadline=None)
@given(st.lists(_piece, max_size=10), st.sets(_piece, max_size=8))
def test_parts_of_is_the_first_longer_piece_that_contains_each_form(pieces, forms):
    """The indexed search agrees with the definition, short forms (1-3 characters) included."""
    want = {}
    for f in forms:
        hit = next((p for p in pieces if len(f) < len(p) and f in p), None)
        if hit is not None:
            want[f] = hit
    assert parts_of(pieces, forms) == want


@pytest.mark.parametrize("name", ["gpt2-tiny", "llama-tiny"])
def test_byte_level_word_already_one_token_after_a_space_keeps_that_token(name, tmp_path):
    src, out = FIXTURES / name, tmp_path / "out"
    old = AutoTokenizer.from_pretrained(src)
    assert len(_ids(old, " return")) == 1 and len(_ids(old, "return")) > 1
    summary = _add(src, out, "-t", "return", "-t", "when", "-t", "Frodo")
    assert summary["skipped"] == []
    # Issue 39: no added token (matched anywhere, it would re-split "returned") and no merge (appended last, it would
    # join "ret" "urn" inside "returned"): an entry only ignore_merges reaches
    mech = {a["form"]: (a["piece"], a["mechanism"]) for a in summary["added"]}
    assert mech["return"] == ("return", "vocab") and mech["when"] == ("when", "vocab")
    assert mech["Frodo"] == ("Frodo", "vocab") and mech[" Frodo"] == ("ĠFrodo", "vocab")
    assert summary["contexts_not_one_token"]["return"] == ["'return'"]
    assert summary["longer_words_resplit"] == {}
    new_id = {a["form"]: a["id"] for a in summary["added"]}
    new = AutoTokenizer.from_pretrained(out)
    raw = Tokenizer.from_file(str(out / "tokenizer.json"))
    # after a space, and in every longer word that holds a new word, text tokenizes exactly as before
    for text in [" return", " when", " returning", " whenever", "The call returns when it is done.", "returned",
                 "returns", "nonreturn", "Frodos", " Frodos", *OLD_TEXTS]:
        assert _ids(new, text) == _ids(old, text), text
    # at a sentence start and after punctuation, the bare form is one new token
    assert _ids(new, "return") == [new_id["return"]]
    assert _ids(new, "(when)") == [_ids(old, "(")[0], new_id["when"], _ids(old, ")")[0]]
    text = "return x when Frodo said (when), and return.\nwhen"
    ids = _ids(new, text)
    assert [ids.count(new_id[w]) for w in ("return", "when", "Frodo", " Frodo")] == [1, 2, 0, 1]
    assert ids.count(_ids(old, " return")[0]) == 1 and ids.count(_ids(old, " when")[0]) == 1
    assert new.decode(ids) == text
    for text in ["return", "(when)", "return x when Frodo said (when), and return.\nwhen", *OLD_TEXTS]:
        assert raw.encode(text, add_special_tokens=False).ids == _ids(new, text), text
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.get_input_embeddings().weight.shape[0] == summary["rows_after"] == len(new)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits
    assert logits.shape == (1, len(ids), summary["rows_after"]) and torch.isfinite(logits).all()


def test_byte_level_word_inside_an_existing_token_does_not_split_it(tmp_path):
    src, out = FIXTURES / "gpt2-tiny", tmp_path / "out"
    old = AutoTokenizer.from_pretrained(src)
    # "tion" is part of "ation" and " function"; " addition" of " additional"; none of them is a token
    assert [len(_ids(old, t)) for t in (" function", " additional", "tion", " tion", "addition", " addition")] == \
        [1, 1, 2, 2, 2, 2]
    summary = _add(src, out, "-t", "tion", "-t", "addition")
    # each form a whole pre-token: an entry only ignore_merges reaches; never an added token, which would split
    # " function", nor a merge, which would join "add" "ition" inside "additionally" (issue 39)
    assert {a["mechanism"] for a in summary["added"]} == {"vocab"}
    assert [a["form"] for a in summary["added"]] == ["tion", " tion", "addition", " addition"]
    assert summary["longer_words_resplit"] == {}
    new = AutoTokenizer.from_pretrained(out)
    for text in [" function", "function", " functions", "information", "The nation's functions.", " additional",
                 "additional", " additions", "additionally"]:
        assert _ids(new, text) == _ids(old, text), text
    new_id = {a["form"]: a["id"] for a in summary["added"]}
    text = "tion, a tion (tion) in addition (addition)."
    ids = _ids(new, text)
    assert [ids.count(new_id[f]) for f in ("tion", " tion", "addition", " addition")] == [2, 1, 1, 1]
    assert new.decode(ids) == text


def test_byte_level_word_inside_a_new_garbled_added_token_is_an_added_token_too(built, tmp_path):
    # "Éowyn" is an added token spelled as bytes for the decoder; an added token "owyn" does not split it
    # (the leftmost, longest added token is matched first), so it needs no entry.
    # With --gguf-parity: elsewhere both are entries that only ignore_merges reaches (issue 39).
    src, out = built("byte-level-gpt2"), tmp_path / "out"
    summary = _add(src, out, "-t", "Éowyn", "-t", "owyn", "--gguf-parity")
    assert [(a["form"], a["mechanism"]) for a in summary["added"]] == [
        ("Éowyn", "added"), (" Éowyn", "added"), ("owyn", "added"), (" owyn", "added")]
    old, tok = AutoTokenizer.from_pretrained(src), AutoTokenizer.from_pretrained(out)
    new_id = {a["form"]: a["id"] for a in summary["added"]}
    for form, i in new_id.items():
        assert _ids(tok, form) == [i], form
    text = "Éowyn, owyn and Éowyn (owyn)."
    ids = _ids(tok, text)
    assert ids == [new_id["Éowyn"], *_ids(old, ","), new_id[" owyn"], *_ids(old, " and"), new_id[" Éowyn"],
                   *_ids(old, " ("), new_id["owyn"], *_ids(old, ").")]
    assert tok.decode(ids) == text


def _bytelevel_checkpoint(path: Path, edit) -> Path:
    """A tiny checkpoint with the byte-level BPE of these tests, its tokenizer.json changed by
    `edit(data)` and loaded as written (PreTrainedTokenizerFast)."""
    data = json.loads(bytelevel_tokenizer(600).backend_tokenizer.to_str())
    edit(data)
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(data)), bos_token=SPECIAL,
                                  eos_token=SPECIAL)
    return tiny_checkpoint(path, tok)


def test_byte_level_with_ignore_merges_already_set_keeps_its_class(tmp_path):
    # Llama 3 ships ignore_merges: the bare form of two pieces is an entry it alone reaches; neither the model options
    # nor the class change.
    src = _bytelevel_checkpoint(tmp_path / "src", lambda data: data["model"].update(ignore_merges=True))
    out = tmp_path / "out"
    word = _one_token_after_a_space(TokenizerEditor(src).vocab)
    plan = TokenizerEditor(src).plan([word])
    assert [(t.form, t.mechanism) for t in plan.new] == [(word, "vocab")]  # not a merge, which reaches longer words
    assert not plan.set_ignore_merges and _but_contexts(plan.notes) == []
    summary = _add(src, out, "-t", word)
    assert _but_contexts(summary["tokenizer_notes"]) == []
    old, new = AutoTokenizer.from_pretrained(src), AutoTokenizer.from_pretrained(out)
    assert type(new) is type(old)
    assert _ids(new, f"{word}, {word}") == [plan.new[0].id, *_ids(old, ",")] + _ids(old, f" {word}")
    for text in OLD_TEXTS:
        assert _ids(new, text) == _ids(old, text)


def test_byte_level_without_ignore_merges_uses_a_merge_or_skips(tmp_path):
    # Without its last merge, an entry is not rebuilt by the merges: ignore_merges would change it.
    # A form BPE splits into two pieces gets one merge (last); a longer one is skipped or stays added.
    src = _bytelevel_checkpoint(tmp_path / "src", lambda data: data["model"]["merges"].pop())
    out = tmp_path / "out"
    ed = TokenizerEditor(src)
    assert not ed.family.merges_are_redundant()
    pair = _one_token_after_a_space(ed.vocab)  # "return": two pieces, " return" one token
    long = next(w for w in ("default", "argument", "from", "not")
                if "Ġ" + w in ed.vocab and w not in ed.vocab and len(ed.encode(w)) >= 3)
    part = next(w for w in ("tring", "efault") if len(ed.encode(w)) >= 3 and any(w in p for p in ed.vocab))
    assert len(ed.encode(pair)) == 2
    r = CliRunner().invoke(cli, ["add", "-t", pair, "-t", long, "-t", part, "-t", "Frodo", "--json", str(src), str(out)])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    why = "ignore_merges would change how this tokenizer splits existing text"
    assert summary["skipped"] == [{"token": long, "reason": (
        f"already one token after a space (' {long}'); its bare form would split that token as an added token, "
        f"and cannot be a vocabulary entry: {why}")}]
    skip_note, part_note = _but_contexts(summary["tokenizer_notes"])  # no tokenizer_class change: no ignore_merges
    assert skip_note == (f"1 token(s) skipped (e.g. {long!r}): already one token after a space; the bare form would "
                         f"split that token as an added token, and cannot be a vocabulary entry ({why})")
    # a form inside another token that is neither falls back to an added token (the README's trade-off), and says so
    assert re.fullmatch(rf"\d added token\(s\) \(e\.g\. '{part}'\) are also part of existing tokens "
                        rf"\(e\.g\. '.+'\), which now split where they occur; they cannot be vocabulary entries "
                        rf"here \({why}\)", part_note)
    assert skip_note not in r.stderr and part_note not in r.stderr  # --json: said in the JSON, once
    # Frodo: a merge where a whole pre-token is two pieces (issue 39), else an added token (reported)
    assert [(a["form"], a["mechanism"]) for a in summary["added"]][:3] == [
        (pair, "merge"), (part, "added"), (" " + part, "added")]
    assert {a["mechanism"] for a in summary["added"][3:]} <= {"merge", "added"}
    written = json.loads((out / "tokenizer.json").read_text())["model"]
    assert not written.get("ignore_merges")
    assert written["merges"][-1] == [*(ed.tok.id_to_token(i) for i in ed.encode(pair))]
    old, new = AutoTokenizer.from_pretrained(src), AutoTokenizer.from_pretrained(out)
    assert type(new) is type(old)
    pair_id = summary["added"][0]["id"]
    for text in (f" {long}", long, f"({long}s)", f" {pair}", f"x {pair} y", *OLD_TEXTS):
        if part not in text:  # the added token splits words around it ("strings"): the note above
            assert _ids(new, text) == _ids(old, text), text
    assert _ids(new, pair) == [pair_id] and pair_id in _ids(new, f"({pair} x)")
    assert new.decode(_ids(new, f"{pair}, {pair}ed ({pair})")) == f"{pair}, {pair}ed ({pair})"
    for a in summary["added"]:
        assert _ids(new, a["form"]) == [a["id"]]


def test_a_garbled_bare_form_that_cannot_be_an_entry_is_an_added_token_that_decodes_as_written(tmp_path):
    # Without redundant merges "Éowyn" cannot be an entry, and BPE splits it into more than two pieces (no merge):
    # it is an added token, which decodes as "\ufffdowyn" unless the decoder spells it as its bytes first.
    src = _bytelevel_checkpoint(tmp_path / "src", lambda data: data["model"]["merges"].pop())
    assert len(TokenizerEditor(src).encode("Éowyn")) > 2
    r = CliRunner().invoke(cli, ["add", "-t", "Éowyn", "-t", "Frodo", "--json", str(src), str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert [(a["form"], a["mechanism"]) for a in summary["added"]] == [
        ("Éowyn", "added"), (" Éowyn", "added"), ("Frodo", "added"), (" Frodo", "added")]
    assert summary["skipped"] == []
    old, new = AutoTokenizer.from_pretrained(src), AutoTokenizer.from_pretrained(tmp_path / "out")
    new_id = {a["form"]: a["id"] for a in summary["added"]}
    ids = _ids(new, "Éowyn, and Éowyn.")
    assert new_id["Éowyn"] in ids and new_id[" Éowyn"] in ids and new.decode(ids) == "Éowyn, and Éowyn."
    for text in OLD_TEXTS:
        assert _ids(new, text) == _ids(old, text), text


def test_a_word_start_form_is_not_an_entry_when_its_bare_form_is_an_added_token(tmp_path):
    # " argu" is part of " argument" and two pieces (a merge would do), but "argu" is three pieces
    # and stays an added token; as such it would match inside " argu", so " argu" is added too.
    src = _bytelevel_checkpoint(tmp_path / "src", lambda data: data["model"]["merges"].pop())
    ed = TokenizerEditor(src)
    word = next(w for w in ("argu", "defa", "speci") if len(ed.encode(" " + w)) == 2 and len(ed.encode(w)) >= 3)
    summary = _add(src, tmp_path / "out", "-t", word)
    assert [(a["form"], a["mechanism"]) for a in summary["added"]] == [(word, "added"), (" " + word, "added")]
    new = AutoTokenizer.from_pretrained(tmp_path / "out")
    for a in summary["added"]:
        assert _ids(new, a["form"]) == [a["id"]]
        assert _ids(new, f"x{a['form']}, y") .count(a["id"]) == 1


def test_a_new_entry_that_contains_another_new_words_added_token_becomes_added_too(tmp_path):
    # "tion" (two pieces, inside "ation") would be a merge, but "tio" (three pieces) stays an added
    # token, and added tokens are matched first: "tion" would encode as "tio" + "n". Both are added.
    src = _bytelevel_checkpoint(tmp_path / "src", lambda data: data["model"]["merges"].pop())
    ed = TokenizerEditor(src)
    assert len(ed.encode("tion")) == 2 and len(ed.encode("tio")) >= 3
    summary = _add(src, tmp_path / "out", "-t", "tion", "-t", "tio")
    assert {a["mechanism"] for a in summary["added"]} == {"added"}
    new = AutoTokenizer.from_pretrained(tmp_path / "out")
    for a in summary["added"]:
        assert _ids(new, a["form"]) == [a["id"]], a


def test_a_merge_survives_a_model_specific_class_that_rebuilds_the_tokenizer(tmp_path):
    # transformers 5's GPT2Tokenizer rebuilds the backend from vocab + merges: the merge is kept
    # (ignore_merges would not be), so the class stays and the word is still one token.
    src = _bytelevel_checkpoint(tmp_path / "src", lambda data: data["model"]["merges"].pop())
    cfg_path = src / "tokenizer_config.json"
    cfg_path.write_text(json.dumps({**json.loads(cfg_path.read_text()), "tokenizer_class": "GPT2Tokenizer"}))
    old = AutoTokenizer.from_pretrained(src)
    assert type(old).__name__ == "GPT2Tokenizer"
    word = _one_token_after_a_space(TokenizerEditor(src).vocab)
    summary = _add(src, tmp_path / "out", "-t", word)
    assert [(a["form"], a["mechanism"]) for a in summary["added"]] == [(word, "merge")]
    assert _but_contexts(summary["tokenizer_notes"]) == []
    new = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert type(new).__name__ == "GPT2Tokenizer"
    assert _ids(new, word) == [summary["added"][0]["id"]]
    for text in (f" {word}", f" {word}s", *OLD_TEXTS):
        assert _ids(new, text) == _ids(old, text), text


def test_byte_level_word_already_one_token_after_a_space_is_skipped_when_the_pre_tokenizer_splits_it(tmp_path):
    tok = Tokenizer.from_str(bytelevel_tokenizer(600).backend_tokenizer.to_str())
    word = _one_token_after_a_space(json.loads(tok.to_str())["model"]["vocab"])
    # splits the first letters of the text off: the bare form cannot be one pre-token, " word" still is
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(rf"\A{word[:2]}"), "isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.save(str(tmp_path / "tokenizer.json"))
    plan = TokenizerEditor(tmp_path).plan([word, "Frodo"])
    assert plan.skipped == [{"token": word, "reason": (
        f"already one token after a space (' {word}'); its bare form would split that token as an added token, "
        f"and cannot be a vocabulary entry: the pre-tokenizer splits {word!r}")}]
    assert [(t.form, t.mechanism) for t in plan.new] == [("Frodo", "vocab"), (" Frodo", "vocab")]  # issue 39


def test_only_skipped_words_say_why_nothing_was_added(tmp_path):
    src = _bytelevel_checkpoint(tmp_path / "src", lambda data: data["model"]["merges"].pop())
    ed = TokenizerEditor(src)
    word = next(w for w in ("default", "argument") if len(ed.encode(w)) >= 3 and "Ġ" + w in ed.vocab)  # no merge
    r = CliRunner().invoke(cli, ["add", "-t", word, str(src), str(tmp_path / "out")])
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines()[-1] == (
        f"Error: nothing to add: 1 token(s) skipped, e.g. {word!r}: already one token after a space (' {word}'); "
        "its bare form would split that token as an added token, and cannot be a vocabulary entry: ignore_merges "
        "would change how this tokenizer splits existing text (see --dry-run for details)")
    assert not (tmp_path / "out").exists()


def test_sentencepiece_bpe_says_which_existing_tokens_a_new_word_splits(built, tmp_path):
    # SentencePiece BPE has only added tokens, which match anywhere: a new word inside an existing
    # token ("tion" in "▁function") splits it. That is the README's trade-off; the report names it.
    src, out = built("sp-bpe"), tmp_path / "out"
    vocab = TokenizerEditor(src).vocab
    host = next(p for p in vocab if p.startswith("▁") and len(p) > 6 and p[3:] not in vocab and "▁" + p[3:] not in vocab)
    word = host[3:]
    summary = _add(src, out, "-t", word, "-t", "Frodo")
    assert [a["form"] for a in summary["added"]] == [word, " " + word, "Frodo", " Frodo"]
    note = next(n for n in summary["tokenizer_notes"] if "part of existing tokens" in n)
    assert note == (f"1 added token(s) (e.g. {word!r}) are also part of existing tokens (e.g. {host[1:]!r}), which now "
                    "split where they occur; they cannot be vocabulary entries here (SentencePiece BPE takes new words "
                    "only as added tokens)")
    old, new = AutoTokenizer.from_pretrained(src), AutoTokenizer.from_pretrained(out)
    assert _ids(old, f"a {host[1:]}") != _ids(new, f"a {host[1:]}")  # the note is true: that token splits now
    for text in OLD_TEXTS:
        if word not in text:
            assert _ids(new, text) == _ids(old, text), text


@pytest.mark.parametrize("family", ["sp-bpe", "sp-bpe-file"])
def test_sentencepiece_bpe_word_already_one_token_after_a_space_is_already_there(family, built, tmp_path):
    # Metaspace puts "▁" before the first word too, so "return" is "▁return" at a sentence start
    # as after a space: nothing is added for it, and no added token can split "▁return".
    src, out = built(family), tmp_path / "out"
    word = _one_token_after_a_space(TokenizerEditor(src).vocab, "▁")
    summary = _add(src, out, "-t", word, "-t", "Frodo")
    assert summary["skipped"] == [{"token": word, "reason": "already in the vocabulary"}]
    old, new = AutoTokenizer.from_pretrained(src), AutoTokenizer.from_pretrained(out)
    assert len(_ids(old, word)) == len(_ids(old, f" {word}")) == 1
    for text in (word, f" {word}", f"({word})", f"{word}s, {word}.", *OLD_TEXTS):
        assert _ids(new, text) == _ids(old, text), text


@pytest.mark.parametrize("family", ["byte-level", "sp-bpe-file", "unigram-file", "wordpiece-cased"])
def test_existing_added_tokens_keep_their_ids(family, tmp_path):
    # Chat tokens (Qwen's <|im_start|>) are added tokens missing from the model vocabulary; on load
    # the library numbers those after the model's entries, which would now be the new words' ids.
    tok = make_tokenizer(family)
    tok.add_tokens(["<|im_start|>", "<|im_end|>"], special_tokens=True)
    src, out = tiny_checkpoint(tmp_path / "src", tok), tmp_path / "out"
    data = json.loads((src / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    assert "<|im_start|>" not in (vocab if isinstance(vocab, dict) else [p for p, _ in vocab])
    before = {t["content"]: t["id"] for t in data["added_tokens"]}
    summary = _add(src, out, *_tokens_args(WORDS))
    new = AutoTokenizer.from_pretrained(out)
    assert {c: new.convert_tokens_to_ids(c) for c in before} == before
    assert min(a["id"] for a in summary["added"]) == max(before.values()) + 1
    check_guarantees(src, out, WORDS)
    text = "<|im_start|>user\nmithril, and Frodo<|im_end|>"
    ids, old = new(text, add_special_tokens=False).input_ids, AutoTokenizer.from_pretrained(src)
    assert ids[0] == before["<|im_start|>"] and ids[-1] == before["<|im_end|>"]
    assert new.decode(ids) == old.decode(old(text, add_special_tokens=False).input_ids)


# ---------------------------------------------------------------------------------------------
# WordPiece: cased and uncased


def test_uncased_wordpiece_normalizes_and_tells_the_user(built, tmp_path, caplog):
    src = built("wordpiece-uncased")
    plan = TokenizerEditor(src).plan(["Frodo"])
    assert [(t.text, t.piece) for t in plan.new] == [("Frodo", "frodo")]
    note = "token 'Frodo' is stored as 'frodo': the tokenizer normalizes text (e.g. lowercases) before lookup"
    assert _but_contexts(plan.notes) == [note]
    r = CliRunner().invoke(cli, ["add", "-t", "Frodo", str(src), str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    assert r.stderr.count(note) == 1 and f"note: {note}" in r.stderr.splitlines()  # in the plan, once
    tok = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert tok("FRODO frodo Frodo", add_special_tokens=False).input_ids == [plan.new[0].id] * 3


def test_uncased_wordpiece_skips_a_word_whose_normalized_form_is_already_a_token(built, tmp_path):
    # "The" on an uncased tokenizer is "the": already there, like "the" itself, so one list works on
    # cased and uncased models (issue 14, item 2: this replaces the earlier refusal).
    src = built("wordpiece-uncased")
    summary = _add(src, tmp_path / "out", "-t", "The", "-t", "the", "-t", "Frodo")
    assert summary["skipped"] == [
        {"token": "The", "reason": "already in the vocabulary as 'the' (the tokenizer normalizes text, e.g. "
                                   "lowercases, before lookup)"},
        {"token": "the", "reason": "already in the vocabulary"}]
    assert [a["piece"] for a in summary["added"]] == ["frodo"]
    r = CliRunner().invoke(cli, ["add", "-t", "The", str(src), str(tmp_path / "out2")])
    assert r.exit_code == 2 and r.stderr.strip().splitlines()[-1] == (
        "Error: every token is already in the vocabulary; nothing to add (see --dry-run for details)")


def test_uncased_wordpiece_skips_the_second_of_two_words_that_normalize_alike(built):
    plan = TokenizerEditor(built("wordpiece-uncased")).plan(["Frodo", "FRODO"])
    assert [t.piece for t in plan.new] == ["frodo"]
    assert plan.skipped == [{"token": "FRODO", "reason": "the tokenizer normalizes it to 'frodo', the same as token "
                                                         "'Frodo'"}]


def test_cased_wordpiece_adds_a_capitalized_form_of_an_existing_word(built, tmp_path):
    src = built("wordpiece-cased")
    ed = TokenizerEditor(src)
    word = next(w for w in ("Value", "Object", "String", "Parser", "Return") if w.lower() in ed.vocab and w not in ed.vocab)
    plan = ed.plan([word])
    assert [(t.piece, t.mechanism) for t in plan.new] == [(word, "vocab")] and _but_contexts(plan.notes) == []
    _add(src, tmp_path / "out", "-t", word)
    tok = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert tok(f"{word} {word.lower()}", add_special_tokens=False).input_ids == [plan.new[0].id, ed.vocab[word.lower()]]


def test_wordpiece_word_split_by_punctuation_becomes_an_added_token(built, tmp_path):
    src = built("wordpiece-uncased")
    plan = TokenizerEditor(src).plan(["C++"])
    assert [(t.piece, t.mechanism, t.normalized) for t in plan.new] == [("c++", "added", True)]
    _add(src, tmp_path / "out", "-t", "C++")
    tok = AutoTokenizer.from_pretrained(tmp_path / "out")
    ids = tok("I like C++, and c++.", add_special_tokens=False).input_ids
    assert ids.count(plan.new[0].id) == 2 and tok.decode(ids) == "i like c++, and c++."


# ---------------------------------------------------------------------------------------------
# --special


@pytest.mark.parametrize("family", ["byte-level-gpt2", "sp-bpe", "unigram", "wordpiece-uncased"])
def test_special_tokens_stay_special_and_existing_ones_are_not_demoted(family, built, tmp_path):
    src, out = built(family), tmp_path / "out"
    old = AutoTokenizer.from_pretrained(src)
    existing = old.eos_token or old.sep_token
    summary = _add(src, out, "--special", "-t", "<|tool|>", "-t", existing)
    assert summary["skipped"] == [{"token": existing, "reason": "already a special token"}]
    [a] = summary["added"]
    assert (a["piece"], a["mechanism"]) == ("<|tool|>", "special")
    tok = AutoTokenizer.from_pretrained(out)
    text = "call <|tool|> now"
    ids = tok(text, add_special_tokens=False).input_ids
    assert a["id"] in ids and tok.convert_tokens_to_ids("<|tool|>") == a["id"]
    assert "<|tool|>" not in tok.decode(ids, skip_special_tokens=True)
    assert tok.decode(ids).count("<|tool|>") == 1
    assert existing in tok.all_special_tokens and tok.convert_tokens_to_ids(existing) == old.convert_tokens_to_ids(existing)
    for t in OLD_TEXTS:
        assert tok(t).input_ids == old(t).input_ids


def test_a_normal_word_is_not_promoted_to_special(built):
    ed = TokenizerEditor(built("wordpiece-cased"))
    plan = ed.plan(["the"], special=True)
    assert plan.new == [] and plan.skipped == [{"token": "the", "reason": "already in the vocabulary (not promoted to special)"}]


# ---------------------------------------------------------------------------------------------
# Ids past the tokenizer: embeddings with more rows than the tokenizer has entries


@pytest.mark.parametrize("family", ["byte-level-gpt2", "sp-bpe", "unigram", "unigram-file", "wordpiece-cased"])
def test_new_ids_follow_the_last_token_on_the_padding_rows_and_are_what_the_reloaded_tokenizer_gives(family, built,
                                                                                                     tmp_path):
    src, out = built(family, extra_rows=24), tmp_path / "out"
    size = TokenizerEditor(src).size
    summary = _add(src, out, *_tokens_args(WORDS))
    assert summary["rows_before"] == summary["rows_after"] == size + 24  # every entry fits in the padding rows
    assert [a["id"] for a in summary["added"]] == list(range(size, size + len(summary["added"])))
    check_guarantees(src, out, WORDS, same_class=family != "byte-level-gpt2")
    tok = AutoTokenizer.from_pretrained(out)
    for a in summary["added"]:
        assert tok.convert_tokens_to_ids(a["piece"]) == a["id"]
    assert len(tok) == size + len(summary["added"])  # resize_token_embeddings(len(tokenizer)) keeps them


@pytest.mark.parametrize("family", ["unigram", "unigram-file"])
def test_unigram_ids_past_a_gap_fill_it_with_placeholders_that_are_never_produced(family, built, tmp_path):
    """Ids asked to start past the tokenizer (the library's first_id): a Unigram vocabulary is a list indexed
    by id, so the gap holds placeholder pieces."""
    src, out = built(family, extra_rows=24), tmp_path / "out"
    ed = TokenizerEditor(src)
    size = ed.size
    plan = ed.plan(WORDS, first_id=size + 24)
    assert [t.id for t in plan.new] == list(range(size + 24, size + 24 + len(plan.new)))
    shutil.copytree(src, out)
    ed.write(plan, out)
    vocab = json.loads((out / "tokenizer.json").read_text())["model"]["vocab"]
    assert [p for p, _ in vocab[size:size + 24]] == [GAP_PIECE.format(i) for i in range(size, size + 24)]
    tok = AutoTokenizer.from_pretrained(out)
    gap = set(range(size, size + 24))
    for text in OLD_TEXTS + [GAP_PIECE.format(size), "<vocabsurgeon", "unused"]:
        assert not gap & set(tok(text).input_ids)
    assert any("placeholder" in n for n in plan.notes)


def test_plan_refuses_ids_inside_the_tokenizer(built):
    ed = TokenizerEditor(built("unigram"))
    with pytest.raises(InputError, match=rf"^new ids must start at or after {ed.size}, the tokenizer's size; got 3$"):
        ed.plan(["Frodo"], first_id=3)


# ---------------------------------------------------------------------------------------------
# A checkpoint with only a slow SentencePiece tokenizer.model


@pytest.fixture(scope="session")
def slow_only(tmp_path_factory):
    import sentencepiece as spm

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(training_text()), model_writer=buf, vocab_size=600,
                                   model_type="bpe", byte_fallback=True, character_coverage=1.0, minloglevel=2)
    path = tmp_path_factory.mktemp("slow") / "ckpt"
    path.mkdir()
    (path / "tokenizer.model").write_bytes(buf.getvalue())
    (path / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}))
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=600, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    LlamaForCausalLM(cfg).eval().save_pretrained(path)
    assert not (path / "tokenizer.json").exists()
    return path


@pytest.mark.floor  # also run with the oldest supported versions (.ci/run)
def test_slow_only_checkpoint_is_converted_and_says_so(slow_only, tmp_path):
    src = Path(shutil.copytree(slow_only, tmp_path / "src"))
    out = tmp_path / "out"
    summary = _add(src, out, *_tokens_args(WORDS))
    assert summary["tokenizer_family"] == "sentencepiece-bpe"
    assert _but_contexts(summary["tokenizer_notes"]) == [
        "tokenizer.model converted to tokenizer.json with transformers' LlamaTokenizer",
        "tokenizer.model: the new tokens appended as pieces at their ids (llama.cpp's converter reads it first; "
        "SentencePiece users get them too)",
    ]
    assert (out / "tokenizer.json").exists() and not (src / "tokenizer.json").exists()
    # SentencePiece reads the written .model: the old pieces as they were, each new token at its id and one piece
    old_sp = spm.SentencePieceProcessor(model_file=str(src / "tokenizer.model"))
    new_sp = spm.SentencePieceProcessor(model_file=str(out / "tokenizer.model"))
    assert new_sp.get_piece_size() == old_sp.get_piece_size() + len(summary["added"])
    assert [new_sp.id_to_piece(i) for i in range(old_sp.get_piece_size())] == \
        [old_sp.id_to_piece(i) for i in range(old_sp.get_piece_size())]
    new_tok = AutoTokenizer.from_pretrained(out)
    for a in summary["added"]:
        assert new_sp.piece_to_id(a["piece"].replace(" ", "▁")) == a["id"], a
    for text in [*OLD_TEXTS, *(f"I saw {w} today" for w in WORDS)]:
        assert new_sp.encode(text) == new_tok(text, add_special_tokens=False)["input_ids"], text
    check_guarantees(src, out, WORDS)
    check_same_tokenizer_behaviour(src, out)


def _mistral_layout(slow_only, dest: Path) -> Path:
    """`slow_only` with a tokenizer.model trained with Llama's and Mistral's settings (no normalization, spaces kept
    as they are) and no tokenizer_config.json: Mistral's own layout (mistral-common)."""
    src = Path(shutil.copytree(slow_only, dest))
    (src / "tokenizer_config.json").unlink()
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(training_text()), model_writer=buf, vocab_size=600,
                                   model_type="bpe", byte_fallback=True, character_coverage=1.0, minloglevel=2,
                                   normalization_rule_name="identity", remove_extra_whitespaces=False)
    (src / "tokenizer.model").write_bytes(buf.getvalue())
    return src


def converts_as_sentencepiece(src: Path) -> bool:
    """Whether AutoTokenizer of the installed transformers gives a tokenizer.model alone SentencePiece's own ids
    (5.24 does; 5.17 to 5.23 drop the leading "▁" and order the merges otherwise)."""
    from vocabsurgeon.tokenizer.loading import PROBES

    sp, tok = spm.SentencePieceProcessor(model_file=str(src / "tokenizer.model")), AutoTokenizer.from_pretrained(src)
    return all(tok(t, add_special_tokens=False).input_ids == sp.encode(t) for t in PROBES)


@pytest.mark.floor  # also run with the oldest supported versions (.ci/run)
def test_a_sentencepiece_bpe_model_alone_is_read_in_metas_layout_and_its_words_are_kept(slow_only, tmp_path):
    """Mistral's tokenizer.model as Mistral's own library ships it, with no tokenizer_config.json: transformers 5
    converts it generically, with a Metaspace "always" pre-tokenizer that would put a "▁" after every added
    token, so the Metaspace BPE family took only words of two pieces (issue 20: the published Mistral 7B v0.1
    and v0.3 files kept none of 16 ordinary words). It is read in Meta's layout, which gives the same ids.
    A transformers that converts it otherwise than SentencePiece tokenizes it is refused in one line (issue 38)."""
    from vocabsurgeon.tokenizer.families.sentencepiece_bpe import as_meta_layout
    from vocabsurgeon.tokenizer.editor import convert_slow_tokenizer

    src = _mistral_layout(slow_only, tmp_path / "src")
    if not converts_as_sentencepiece(src):
        import transformers

        r = CliRunner().invoke(cli, ["add", "-t", "Frodo", str(src), str(tmp_path / "out")])
        assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.output
        assert r.stderr.startswith(f"Error: {src / 'tokenizer.model'}: transformers {transformers.__version__} converts "
                                   "it otherwise than SentencePiece tokenizes it ("), r.stderr
        assert not (tmp_path / "out").exists()
        return
    data, cls = convert_slow_tokenizer(src)
    assert data["pre_tokenizer"] is None and [n["type"] for n in data["normalizer"]["normalizers"]] == ["Prepend",
                                                                                                      "Replace"]
    as_converted = AutoTokenizer.from_pretrained(src).backend_tokenizer
    ours = Tokenizer.from_str(json.dumps(data))
    for text in [*OLD_TEXTS, " a leading space", "  two, then\n a newline", "</s>after<s> and </s> before", "a▁b", "",
                 "▁x", " "]:
        assert ours.encode(text).ids == as_converted.encode(text).ids, text
    assert as_meta_layout(data) is data  # only transformers' own conversion is rewritten

    summary = _add(src, tmp_path / "out", *_tokens_args(WORDS))
    assert summary["tokenizer_family"] == "sentencepiece-bpe" and summary["skipped"] == []
    assert {a["token"] for a in summary["added"]} == set(WORDS)
    old, new = AutoTokenizer.from_pretrained(src), AutoTokenizer.from_pretrained(tmp_path / "out")
    for text in OLD_TEXTS:
        assert new(text).input_ids == old(text).input_ids, text
    ids_of = {a["token"]: a["id"] for a in summary["added"]}
    for w in WORDS:
        for text in (f"{w} went home.", f"I saw {w}, and {w}'s.", f" {w}"):
            ids = new(text, add_special_tokens=False).input_ids
            assert ids.count(ids_of[w]) == text.count(w) and new.decode(ids) == text, (text, new.convert_ids_to_tokens(ids))
    # issue 32: the output named no BOS, EOS or UNK (the converting class gave them to the input, no file did)
    assert (new.bos_token, new.eos_token, new.unk_token) == (old.bos_token, old.eos_token, old.unk_token) == \
        ("<s>", "</s>", "<unk>")
    check_same_tokenizer_behaviour(src, tmp_path / "out")


@pytest.mark.floor  # also run with the oldest supported versions (.ci/run)
def test_a_sentencepiece_model_alone_keeps_its_special_tokens_when_every_word_is_a_merge(slow_only, tmp_path):
    """Issue 38: where every new word is a merge (here --gguf-parity keeps only those), no other change named the
    tokenizer class, so the output had no tokenizer_config.json and loaded with no BOS, EOS or UNK token."""
    src = _mistral_layout(slow_only, tmp_path / "src")
    if not converts_as_sentencepiece(src):
        pytest.skip("this transformers converts a tokenizer.model alone otherwise than SentencePiece: refused (above)")
    sp = spm.SentencePieceProcessor(model_file=str(src / "tokenizer.model"))
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    # made-up words of two pieces, "▁" + word-start piece and a word piece: a merge each
    words = [w for a in pieces if a.startswith("▁") and len(a) >= 4 and a[1:].isalpha()
             for b in pieces if b.isalpha() and len(b) >= 3
             for w in [a[1:] + b] if w not in " ".join(OLD_TEXTS) and sp.encode(f" {w}", out_type=str) == ["▁", a, b]][:3]
    summary = _add(src, tmp_path / "out", "--gguf-parity", *_tokens_args(words))
    assert len(summary["added"]) == 3 and {a["mechanism"] for a in summary["added"]} == {"merge"}, summary["added"]
    old, new = AutoTokenizer.from_pretrained(src), AutoTokenizer.from_pretrained(tmp_path / "out")
    assert (new.bos_token, new.eos_token, new.unk_token) == (old.bos_token, old.eos_token, old.unk_token) == \
        ("<s>", "</s>", "<unk>")
    assert new.all_special_tokens == old.all_special_tokens
    assert any(n.startswith("tokenizer.model converted to tokenizer.json with transformers' ") and
               "; tokenizer_config.json written with tokenizer_class PreTrainedTokenizerFast, bos_token '<s>', "
               "eos_token '</s>', unk_token '<unk>'" in n for n in summary["tokenizer_notes"]), summary["tokenizer_notes"]
    for text in OLD_TEXTS:
        assert new(text).input_ids == old(text).input_ids, text
    check_same_tokenizer_behaviour(src, tmp_path / "out")


def test_missing_tokenizer_is_refused_with_what_to_do(slow_only, tmp_path):
    src = Path(shutil.copytree(slow_only, tmp_path / "src"))
    (src / "tokenizer.model").unlink()
    r = CliRunner().invoke(cli, ["add", "-t", "Frodo", str(src), str(tmp_path / "out")])
    assert r.exit_code == 2
    assert r.stderr == (
        f"Error: {src / 'tokenizer.json'}: missing, and there is no slow tokenizer file (tokenizer.model, spiece.model, "
        "sentencepiece.bpe.model, vocab.json, vocab.txt) to convert; vocabsurgeon edits "
        "fast tokenizers (tokenizer.json). Save the tokenizer with transformers "
        "(AutoTokenizer.from_pretrained(dir).save_pretrained(dir)) first\n"
    )


def test_t5_with_only_its_spiece_model_is_converted(tmp_path):
    """T5 ships its SentencePiece file as spiece.model (T5Tokenizer's name), not tokenizer.model."""
    import sentencepiece as spm
    from transformers import T5Config, T5ForConditionalGeneration

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(training_text()), model_writer=buf, vocab_size=600,
                                   model_type="unigram", character_coverage=1.0, minloglevel=2,
                                   pad_id=0, eos_id=1, unk_id=2, bos_id=-1)
    src = tmp_path / "src"
    torch.manual_seed(0)
    T5ForConditionalGeneration(T5Config(vocab_size=700, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2,
                                        decoder_start_token_id=0)).eval().save_pretrained(src)
    (src / "spiece.model").write_bytes(buf.getvalue())
    (src / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "T5Tokenizer", "extra_ids": 100}))
    summary = _add(src, tmp_path / "out", "-t", "Frodo")
    assert summary["tokenizer_family"] == "unigram"
    assert summary["tokenizer_notes"][0].startswith("spiece.model converted to tokenizer.json with transformers' T5")
    assert [a["token"] for a in summary["added"]] == ["Frodo"] * len(summary["added"]) and summary["added"]
    assert not (tmp_path / "out" / "spiece.model").exists()


# ---------------------------------------------------------------------------------------------
# Verification after writing


def test_verification_catches_an_id_the_reloaded_tokenizer_does_not_give(built, tmp_path):
    from vocabsurgeon.errors import VocabSurgeonError

    ed = TokenizerEditor(built("sp-bpe"))
    plan = ed.plan(["Frodo"])
    ed.write(plan, tmp_path)
    verify_tokenizer(tmp_path, plan)  # as written: fine
    data = json.loads((tmp_path / "tokenizer.json").read_text())
    for t in data["added_tokens"]:
        if t["content"] == "Frodo":
            t["id"] += 1
    del data["model"]["vocab"]["Frodo"]  # the library then picks the id itself
    (tmp_path / "tokenizer.json").write_text(json.dumps(data))
    with pytest.raises(VocabSurgeonError, match=r"^token 'Frodo': the reloaded tokenizer gives id \d+, but row "
                                                rf"{plan.new[0].id} was initialized for it; this is a bug"):
        verify_tokenizer(tmp_path, plan)
