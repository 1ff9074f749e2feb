"""A new word never re-splits a longer word that merely holds it (issue 39): after adding REQ, unread, BAD,
stdin, subclasses and return, "REQUEST", "unreadable", "BADGE", "stdinout", "subclassesOf" and "returned"
keep the ids they had, in tokenizers alone and in transformers, or the plan reports each word that changes
them (longer_words_resplit), where the family's entries cannot keep them (docs/families.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from tokenizers import Tokenizer
from transformers import AutoTokenizer

from builders import family_checkpoint
from vocabsurgeon.cli.commands import cli
from vocabsurgeon.tokenizer import resplit
from vocabsurgeon.tokenizer.editor import TokenizerEditor

WORDS = ["REQ", "unread", "BAD", "stdin", "subclasses", "return", "Handler", "Frodo"]
HOLDERS = ["REQUEST", "unreadable", "BADGE", "stdinout", "subclassesOf", "returned", "Handlerless", "REQUESTS",
           "Frodos", "Frodolike"]
# The words as words: one token there (a sentence start, after a space, before punctuation).
AS_WORDS = ["REQ", " REQ", " unread.", " BAD,", " stdin", " subclasses", "stdin"]
CORPUS = ("The REQUEST was unreadable, said the BADGE; stdinout returned subclassesOf a Handlerless REQUESTS list "
          "of Frodolike Frodos.")
# Byte-level BPE where ignore_merges is allowed (GPT-2's and Llama 3's files): every longer word keeps its ids.
KEEPS = {"gpt2", "llama3"}


def _add(src: Path, out: Path, *args: str) -> dict:
    corpus = out.parent / "corpus.txt"
    corpus.write_text(CORPUS, encoding="utf-8")
    r = CliRunner().invoke(cli, ["add", "--json", "-q", "--no-validate", "--corpus", str(corpus),
                                 *[a for w in WORDS for a in ("-t", w)], *args, str(src), str(out)])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _texts() -> list[str]:
    return [v for h in HOLDERS for v in (h, " " + h, f"A {h}.", f"({h})")]


def _check(src: Path, out: Path, summary: dict, keeps: bool) -> None:
    texts = _texts()
    old_hf, new_hf = AutoTokenizer.from_pretrained(src), AutoTokenizer.from_pretrained(out)
    # tokenizers alone: the written file against the input as transformers built it (Llama 2's output is written
    # in the pipeline of the class that loads it, docs/families.md)
    old_fast = Tokenizer.from_str(old_hf.backend_tokenizer.to_str())
    new_fast = Tokenizer.from_file(str(out / "tokenizer.json"))
    reported = summary["longer_words_resplit"]
    for text in texts:
        before = old_hf(text, add_special_tokens=False)["input_ids"]
        after = new_hf(text, add_special_tokens=False)["input_ids"]
        fast_same = old_fast.encode(text, add_special_tokens=False).ids == \
            new_fast.encode(text, add_special_tokens=False).ids
        if keeps:
            assert after == before and fast_same, (text, new_hf.convert_ids_to_tokens(after))
        elif after != before or not fast_same:  # the plan names a new word it holds
            assert any(resplit.inside(text, w) for w in reported), (text, new_hf.convert_ids_to_tokens(after), reported)
    if keeps:
        assert reported == {}
        added = {a["form"]: a["id"] for a in summary["added"]}
        for text in AS_WORDS:  # one token: a new one, or one that was there already
            form = text.rstrip(".,")
            ids = new_hf(form, add_special_tokens=False)["input_ids"]
            assert len(ids) == 1 and (ids[0] in added.values() or ids == old_hf(form, add_special_tokens=False)["input_ids"])


@pytest.mark.parametrize("name", ["gpt2", "llama3", "qwen3", "llama2", "gemma2", "minilm"])
def test_a_word_that_holds_a_new_word_keeps_its_ids_or_the_plan_reports_it(name, published, tmp_path):
    src = published(name)
    summary = _add(src, tmp_path / "out")
    _check(src, tmp_path / "out", summary, name in KEEPS)


@pytest.mark.parametrize("family", ["unigram", "wordpiece-cased"])
def test_every_family_keeps_or_reports_longer_words(family, tmp_path):
    src = family_checkpoint(tmp_path / "src", family)
    summary = _add(src, tmp_path / "out")
    _check(src, tmp_path / "out", summary, False)


def test_a_form_of_two_pieces_is_no_merge_where_an_entry_only_the_whole_word_reaches_is_allowed(published, tmp_path):
    """GPT-2 splits " softmax" in two ("Ġsoft" "max"): a merge appended last would also join " softmaxed"
    ("Ġsoft" "max" "ed") into " softmax" "ed". It is an entry that only ignore_merges reaches; with
    --gguf-parity (merges and added tokens only, which llama.cpp reads alike) it is an added token, and the plan
    reports the longer word it re-splits."""
    corpus = ["the softmaxed logits"]
    plan = TokenizerEditor(published("gpt2")).plan(["softmax"], corpus=corpus)
    assert {t.form: t.mechanism for t in plan.new} == {"softmax": "vocab", " softmax": "vocab"}
    assert plan.resplits == {} and plan.checked_holders > 0
    parity = TokenizerEditor(published("gpt2"), gguf_parity=True).plan(["softmax"], corpus=corpus)
    assert {t.mechanism for t in parity.new} == {"added"}
    assert [(ex["text"].strip(), ex["after"][-1]) for ex in parity.resplits["softmax"]][0] == ("softmaxed", "ed")


def test_holders_are_found_in_the_vocabulary_and_the_corpus_and_only_inside_longer_words(published):
    ed = TokenizerEditor(published("gpt2"))
    held = ed.holders(["REQ", "return"], resplit.Holders(resplit.corpus_words(["REQ. REQ_ID INET6 REQUEST"])))
    assert held["REQ"] == ["REQUEST"]  # not "REQ." nor "REQ_ID": there it is a word
    assert " returned" in held["return"] and all(resplit.inside(t, "return") for t in held["return"])


def test_a_word_whose_entries_reach_inside_longer_words_is_reported_where_no_vocabulary_or_corpus_holds_one(published):
    """Issue 39's journey with --gguf-parity on SmolLM2: the added token `iterable` re-split `iterables` of the user's
    own corpus, and the plan reported nothing, since neither the vocabulary nor validation's corpus holds a longer word
    with it. Made-up longer words ("Frodos", "unFrodo") are checked too, so the word is reported by what its entries
    do; entries that only ignore_merges reaches keep them, and are not reported."""
    parity = TokenizerEditor(published("gpt2"), gguf_parity=True).plan(["Frodo"])
    assert {t.mechanism for t in parity.new} == {"added"}
    assert [ex["text"] for ex in parity.resplits["Frodo"]] == [" Frodos", " Frodoed", " unFrodo"]  # after a space
    assert any("re-split longer words" in n and "--gguf-parity writes merges and added tokens" in n for n in parity.notes)
    plan = TokenizerEditor(published("gpt2")).plan(["Frodo"])
    assert {t.mechanism for t in plan.new} == {"vocab"} and plan.resplits == {}
    # SentencePiece BPE (added tokens, matched anywhere) and WordPiece (the longest entry that starts a word)
    for src in (published("llama2"), family_checkpoint(published("gpt2").parent.parent / "wp", "wordpiece-cased")):
        assert "Frodo" in TokenizerEditor(src).plan(["Frodo"]).resplits, src


def test_made_up_longer_words_hold_the_word_inside_them():
    assert resplit.made_up("Frodo") == ["Frodos", "Frodoed", "unFrodo"]
    assert resplit.made_up("utf8") == ["utf80", "unutf8"]
    assert resplit.made_up(":=") == [] and resplit.made_up(" ") == []
    assert all(resplit.inside(t, w) for w in ("Frodo", "utf8", "Москва", "x") for t in resplit.made_up(w))
