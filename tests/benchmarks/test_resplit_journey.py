"""bench/resplit_journey.py's judgement of a changed text: a new word standing as a word, or a longer word re-split
(reported by the plan or not); and the strings it checks (on made-up ids, then on GPT-2's published tokenizer with
an added token, which re-splits every longer word)."""

from __future__ import annotations

from tokenizers import Tokenizer

from bench import resplit_journey as rj
from vocabsurgeon.tokenizer import resplit
from vocabsurgeon.tokenizer.editor import TokenizerEditor

# old ids -> text; 100 is the new " REQ", whose old ids are 1 2 (" RE" "Q")
PIECES = {1: " RE", 2: "Q", 3: ".", 4: "UEST", 5: " RE", 6: "QUEST", 7: "S"}
FORMS = {100: (" REQ", [1, 2])}


def _decode(ids: list[int]) -> str:
    return "".join(PIECES[i] for i in ids)


def test_a_new_word_standing_as_a_word_is_no_resplit_and_one_inside_a_longer_word_is():
    assert rj.classify(" REQ.", [1, 2, 3], [1, 2, 3], FORMS, _decode, set()) == "same"
    assert rj.classify(" REQ.", [1, 2, 3], [100, 3], FORMS, _decode, set()) == "word"
    # the new id stands where its old pieces stood, but inside "REQUEST": a re-split all the same
    assert rj.classify(" REQUEST", [1, 2, 4], [100, 4], FORMS, _decode, set()) == "unreported"
    assert rj.classify(" REQUEST", [1, 2, 4], [100, 4], FORMS, _decode, {"REQ"}) == "reported"
    # other pieces than the new word's old ones: changed around it
    assert rj.classify(" REQ.", [1, 2, 3], [100, 7], FORMS, _decode, {"REQ"}) == "unreported"
    # no new id at all, yet other ids: a re-split nobody reported
    assert rj.classify(" REQUESTS", [5, 6, 7], [1, 2, 4, 7], FORMS, _decode, set()) == "unreported"


def test_the_strings_are_the_corpus_words_identifier_runs_holding_entries_and_made_up_holders():
    assert rj.corpus_strings(["Use AF_INET6 (or REQ).", "Use it."]) == \
        ["Use", "AF_INET6", "AF", "INET6", "(or", "or", "REQ).", "REQ", "it.", "it"]
    assert rj.holding_entries([" REQUEST", "REQ", " REQ", "xx", " REQUEST"], ["REQ"]) == [" REQUEST"]
    made = rj.made_up(["REQ"])
    assert "REQs" in made and "unREQ" in made and all(resplit.inside(t, "REQ") for t in made)
    assert rj.variants(" REQUEST") == ("REQUEST", " REQUEST", "See REQUEST here.")


def test_on_a_real_tokenizer_an_added_token_is_reported_or_not_and_an_entry_keeps_longer_words(published):
    src = published("gpt2")
    old = Tokenizer.from_file(str(src / "tokenizer.json"))
    for parity, want in ((False, {"same"}), (True, {"unreported"})):
        ed = TokenizerEditor(src, gguf_parity=parity)
        plan = ed.plan(["Frodo"])
        new = ed.edited_tokenizer(plan)
        forms = {t.id: (t.form, old.encode(t.form, add_special_tokens=False).ids) for t in plan.new}
        got = {rj.classify(t, old.encode(t, add_special_tokens=False).ids, new.encode(t, add_special_tokens=False).ids,
                           forms, old.decode, set()) for t in ("Frodos", " Frodos", "unFrodo")}
        assert got == want, parity
        text = "See Frodo here."
        assert rj.classify(text, old.encode(text).ids, new.encode(text).ids, forms, old.decode, set()) == "word"
