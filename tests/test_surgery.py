"""End-to-end surgery through the Python API: the invariants users rely on, on real tiny models."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from invariants import bound, check_surgery, kl_old_new, tree_digest
from vocabsurgeon import InputError, add_tokens, plan_add

WORDS = ["Frodo", "Aragorn", "Lothlorien", "C++"]
TEXT_OLD = "The parser returns a list of strings, and the caller joins them with spaces."
TEXT_NEW = "Frodo met Aragorn in Lothlorien. Aragorn wrote C++, and Frodo! (Frodo)"


def _logits(path, text):
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    ids = tok(text, return_tensors="pt").input_ids
    with torch.no_grad():
        return model(ids).logits[0]


@pytest.mark.parametrize("ckpt", ["gpt2_ckpt", "llama_ckpt"])
def test_mean_init_keeps_old_logits_and_kl_bound(ckpt, request, tmp_path):
    src = request.getfixturevalue(ckpt)
    before = tree_digest(src)
    result = add_tokens(src, tmp_path / "out", WORDS, init="mean")
    out = tmp_path / "out"
    k = result.plan.k
    assert k == 2 * len(WORDS)  # the bare and the word-start form of each word
    check_surgery(src, out, k)
    assert tree_digest(src) == before, "the input was modified"

    old, new = _logits(src, TEXT_OLD), _logits(out, TEXT_OLD)
    n = old.shape[-1]
    assert new.shape[-1] == n + k
    assert torch.equal(old, new[:, :n]), "old-vocabulary logits changed"
    kl = kl_old_new(old, new)
    assert kl.max().item() <= bound(k, n) + 1e-9


@pytest.mark.parametrize("ckpt", ["gpt2_ckpt", "llama_ckpt"])
def test_new_words_are_one_token_and_old_text_unchanged(ckpt, request, tmp_path):
    src = request.getfixturevalue(ckpt)
    add_tokens(src, tmp_path / "out", WORDS)
    old_tok = AutoTokenizer.from_pretrained(src)
    new_tok = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert new_tok(TEXT_OLD).input_ids == old_tok(TEXT_OLD).input_ids
    ids = new_tok(TEXT_NEW).input_ids
    pieces = new_tok.convert_ids_to_tokens(ids)
    single = [new_tok.decode([i]).strip() for i in ids]
    for w in ("Frodo", "Aragorn", "Lothlorien", "C++"):
        assert single.count(w) == TEXT_NEW.count(w), (w, pieces)
    assert "Ġ" not in pieces, f"stray whitespace token in {pieces}"
    assert new_tok.decode(ids) == TEXT_NEW
    assert len(ids) < len(old_tok(TEXT_NEW).input_ids)


def test_tied_stays_tied_and_loads(gpt2_ckpt, tmp_path):
    add_tokens(gpt2_ckpt, tmp_path / "out", ["Frodo"])
    m = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert m.get_input_embeddings().weight.data_ptr() == m.get_output_embeddings().weight.data_ptr()


def test_untied_grows_both_with_separate_inits(llama_ckpt, tmp_path):
    r = add_tokens(llama_ckpt, tmp_path / "out", ["Frodo"], init_input="subword-mean", init_output="mean")
    m = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    emb, head = m.get_input_embeddings().weight, m.get_output_embeddings().weight
    n = r.plan.rows_before
    old = AutoModelForCausalLM.from_pretrained(llama_ckpt)
    mean_head = old.get_output_embeddings().weight.double().mean(0).to(head.dtype)
    assert torch.equal(head[n], mean_head)
    tok = AutoTokenizer.from_pretrained(llama_ckpt)
    pieces = tok(" Frodo").input_ids
    want = old.get_input_embeddings().weight[pieces].double().mean(0).to(emb.dtype)
    word_start = [t for t in r.plan.tokens.new if t.form == " Frodo"][0]
    assert torch.equal(emb[word_start.id], want)


def test_seed_makes_output_deterministic(gpt2_ckpt, tmp_path):
    a = add_tokens(gpt2_ckpt, tmp_path / "a", ["Frodo"], init="mean-noise", seed=7)
    b = add_tokens(gpt2_ckpt, tmp_path / "b", ["Frodo"], init="mean-noise", seed=7)
    c = add_tokens(gpt2_ckpt, tmp_path / "c", ["Frodo"], init="mean-noise", seed=8)
    files = ["model.safetensors", "tokenizer.json", "config.json"]
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
    assert (tmp_path / "a/model.safetensors").read_bytes() != (tmp_path / "c/model.safetensors").read_bytes()
    assert a.to_dict()["added"] == b.to_dict()["added"] == c.to_dict()["added"]


def test_existing_tokens_are_skipped_and_reported(gpt2_ckpt, tmp_path):
    vocab = AutoTokenizer.from_pretrained(gpt2_ckpt).get_vocab()
    native = next(w for w in sorted(vocab) if w.isalpha() and len(w) > 3 and "Ġ" + w in vocab)
    r = add_tokens(gpt2_ckpt, tmp_path / "out", [native, "Frodo"])
    d = r.to_dict()
    assert d["skipped"] == [{"token": native, "reason": "already in the vocabulary"}]
    assert {a["token"] for a in d["added"]} == {"Frodo"}


def test_special_tokens_stay_special(gpt2_ckpt, tmp_path):
    add_tokens(gpt2_ckpt, tmp_path / "out", ["<|ring|>"], special=True)
    tok = AutoTokenizer.from_pretrained(tmp_path / "out")
    ids = tok("wear the <|ring|> now").input_ids
    assert tok.convert_tokens_to_ids("<|ring|>") in ids
    assert "<|ring|>" not in tok.decode(ids, skip_special_tokens=True)


def test_pad_to_multiple_of_pads_with_mean_rows(llama_ckpt, tmp_path):
    r = add_tokens(llama_ckpt, tmp_path / "out", ["Frodo"], pad_to_multiple_of=64)
    assert r.plan.rows_after % 64 == 0
    check_surgery(llama_ckpt, tmp_path / "out", r.plan.k)
    tok = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert max(tok.get_vocab().values()) < r.plan.rows_before + 2


def test_every_other_file_is_carried_over(gpt2_ckpt, tmp_path):
    (gpt2_ckpt / "chat_template.jinja").write_text("{{ messages }}")
    (gpt2_ckpt / "1_Pooling").mkdir()
    (gpt2_ckpt / "1_Pooling" / "config.json").write_text("{}")
    add_tokens(gpt2_ckpt, tmp_path / "out", ["Frodo"])
    assert (tmp_path / "out/chat_template.jinja").read_text() == "{{ messages }}"
    assert (tmp_path / "out/1_Pooling/config.json").exists()
    gen = json.loads((tmp_path / "out/generation_config.json").read_text())
    assert gen == json.loads((gpt2_ckpt / "generation_config.json").read_text())


def test_tied_model_refuses_two_different_inits(gpt2_ckpt):
    with pytest.raises(InputError, match="embeddings are tied"):
        plan_add(gpt2_ckpt, ["Frodo"], __import__("vocabsurgeon").AddOptions(init_input="zeros", init_output="mean"))
