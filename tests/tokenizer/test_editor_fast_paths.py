"""The plan's shortcuts give the verdicts of the checks they replace (issue 38): each compared with the check as
defined, on the fixtures and the published tokenizer files, with inputs made to fail it."""

from __future__ import annotations

import itertools
import json

import pytest

from vocabsurgeon.add.plan import AddOptions, open_target, plan_tokens
from vocabsurgeon.tokenizer import checks, contexts
from vocabsurgeon.tokenizer.checks import decode_mismatch, may_mismatch
from vocabsurgeon.tokenizer.editor import TokenizerEditor
from vocabsurgeon.tokenizer.families.byte_level_bpe import WholePreTokens

from builders import family_checkpoint
from published_models import FIXTURES, NAMES as PUBLISHED

WORDS = ["Frodo", "Gandalf", "Lothlórien", "mithril", "José", "Björk", "Dvořák", "getUserName", "Москва", "REQ",
         "returned", "ﬁsh", "m²", "naïve", "Éowyn", "c++", "it's"]


def test_a_decoding_can_fail_only_where_may_mismatch_says_so():
    """Every (text, normalized, decoding, round trip) over a small alphabet: where `may_mismatch` is False, no
    round trip of the original makes the decoding a mismatch, so that round trip need not be computed."""
    strings = ["", "a", "A", "a ", " a", "b"]
    for text, norm, got, want in itertools.product(strings, repeat=4):
        if decode_mismatch(text, norm, got, want):
            assert may_mismatch(text, norm, got), (text, norm, got, want)


def _by_definition(ed: TokenizerEditor, texts: dict[int, str], gots: dict[int, str]) -> dict:
    """The decode check with the original's round trip of every text (as before the shortcut)."""
    wants = ed.decoded(list(texts.values()))
    return {j: (want, gots[j]) for (j, text), want in zip(texts.items(), wants)
            if gots[j] != want and want in (text, ed.normalize(text))}


@pytest.mark.parametrize("name", ["gpt2-tiny", "llama-tiny", "gpt2", "llama2", "llama3", "t5-small", "bert-base-cased",
                                  "wordpiece-uncased", "unigram",
                                  "sp-bpe-meta"])
def test_decode_mismatches_are_those_of_the_definition(name, published, tmp_path):
    """The texts of the decode contexts, each with decodings that the edited tokenizer could give: the text, the
    original's round trip, the normalized text, and texts changed by a character: the same mismatches (some).
    Uncased WordPiece's round trip is the normalized text, which a decoding that is the text itself fails."""
    src = FIXTURES / name if name.endswith("-tiny") else published(name) if name in PUBLISHED else \
        family_checkpoint(tmp_path / name, name)
    ed = TokenizerEditor(src)
    cases = [c for c in contexts.cases(WORDS) if c.context.decode]
    texts = {j: c.text for j, c in enumerate(cases)}
    wants = dict(zip(texts, ed.decoded(list(texts.values()))))
    found = 0
    for k, variant in enumerate([lambda t, j: t, lambda t, j: wants[j], lambda t, j: ed.normalize(t),
                                 lambda t, j: t + " ", lambda t, j: t.replace(t[:1], "\ufffd", 1)]):
        gots = {j: variant(t, j) for j, t in texts.items()}
        fast = checks.decode_mismatches(ed, texts, gots)
        assert fast == _by_definition(ed, texts, gots), k
        found += len(fast)
    assert found  # the changed decodings are caught


@pytest.mark.parametrize("name", ["llama2", "llama3", "t5-small"])
def test_a_plan_is_the_same_as_with_every_round_trip_computed(name, published, monkeypatch):
    words = WORDS + ["(striped", "x2", "unread"]
    target = open_target(published(name), AddOptions())
    fast = plan_tokens(target, words).to_dict()
    monkeypatch.setattr(checks, "may_mismatch", lambda text, normalized, got: True)
    assert plan_tokens(target, words).to_dict() == fast


def _rebuilt_in_file_order(ed: TokenizerEditor) -> bool:
    """ByteLevelBPE._all_rebuilt as defined: every entry in file order, until one not rebuilt that can be whole."""
    reach = WholePreTokens.of(ed.data.get("pre_tokenizer"))
    for piece in ed.vocab:
        if piece in ed.added:
            continue
        got = ed.tok.model.tokenize(piece)
        if (len(got) != 1 or got[0].value != piece) and (reach is None or reach.can_be_whole(piece)):
            return False
    return True


def _with_entries(tmp_path, name: str, data: dict, entries: dict[str, int], at: str) -> TokenizerEditor:
    """`data` with vocabulary `entries` (piece -> position: "first", "middle" or "last" in the file's order, at the
    next free ids), its ignore_merges off, as a tokenizer.json of its own."""
    model = data["model"]
    top = 1 + max([*model["vocab"].values(), *(t["id"] for t in data.get("added_tokens") or [])])
    items = list(model["vocab"].items())
    new = [(p, top + i) for i, p in enumerate(entries)]
    k = {"first": 0, "middle": len(items) // 2, "last": len(items)}[at]
    data = {**data, "model": {**model, "vocab": dict(items[:k] + new + items[k:]), "ignore_merges": False}}
    path = tmp_path / f"{name}-{at}"
    path.mkdir(parents=True)
    (path / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return TokenizerEditor(path)


@pytest.mark.parametrize("name,places", [("gpt2-tiny", ("first", "middle", "last")), ("gpt2", ("first",)),
                                         ("qwen3", ()), ("llama3", ())])
def test_the_scan_from_the_last_entry_answers_as_the_scan_in_file_order(name, places, tmp_path):
    """Whether ignore_merges is redundant, scanned from the last entry: the answer of the scan in file order, on the
    published vocabularies with ignore_merges off (Llama 3's has entries its merges do not build: not redundant), and
    on copies with entries the merges do not build that can be a whole pre-token (" Zzqx": not redundant, wherever
    it is; first in the file is the one the scan from the last entry reaches last) or that cannot ("[PAD9]")."""
    from published import Missing, fetch

    try:
        files = FIXTURES / name if name.endswith("-tiny") else fetch(name)
    except Missing as e:
        pytest.skip(str(e))
    data = json.loads((files / "tokenizer.json").read_text(encoding="utf-8"))
    plain = _with_entries(tmp_path, name, data, {}, "last")
    redundant = _rebuilt_in_file_order(plain)
    assert plain.family._all_rebuilt() is redundant is (name != "llama3")
    for at in places:
        whole = _with_entries(tmp_path / "whole", name, data, {"[PAD9]": 0, "ĠZzqx": 0}, at)
        assert whole.family._all_rebuilt() is _rebuilt_in_file_order(whole) is False, at
        unreached = _with_entries(tmp_path / "pad", name, data, {"[PAD9]": 0, "[PAD10]": 0}, at)
        assert unreached.family._all_rebuilt() is _rebuilt_in_file_order(unreached) is True, at
