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


def test_index_metadata_counts_the_new_parameters_as_transformers_does(llama_ckpt, tmp_path):
    add_tokens(llama_ckpt, tmp_path / "out", ["Frodo", "Aragorn"])
    meta = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())["metadata"]
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert meta["total_parameters"] == model.num_parameters()
    assert meta["total_size"] == sum(p.numel() * p.element_size() for p in model.state_dict().values())


def test_row_statistics_are_taken_while_the_tokens_are_planned(llama_ckpt, tmp_path, monkeypatch):
    # The old rows' statistics (mean-noise's covariance and its factor: most of that init's time on a CPU)
    # depend on the checkpoint and the options, not on the tokens: add takes them beside the planning.
    import threading

    from vocabsurgeon.add import pipeline
    from vocabsurgeon.init import rows

    taken, threads = threading.Event(), []
    row_stats, plan_tokens = rows.row_stats, pipeline.plan_tokens

    def stats(*args, **kwargs):
        threads.append(threading.current_thread().name)
        out = row_stats(*args, **kwargs)
        taken.set()
        return out

    def plan(*args, **kwargs):
        assert taken.wait(60), "no statistics were taken while the tokens were planned"
        return plan_tokens(*args, **kwargs)

    monkeypatch.setattr(rows, "row_stats", stats)
    monkeypatch.setattr(pipeline, "plan_tokens", plan)
    add_tokens(llama_ckpt, tmp_path / "out", WORDS, init="mean-noise", seed=3)
    assert threads and threading.main_thread().name not in threads
    check_surgery(llama_ckpt, tmp_path / "out", 2 * len(WORDS))


def test_a_failed_job_stops_its_statistics_thread(llama_ckpt, tmp_path, monkeypatch):
    import threading

    from vocabsurgeon.add import pipeline
    from vocabsurgeon.errors import Cancelled
    from vocabsurgeon.init import rows

    started = threading.Event()

    def stats(target, name, device, stop=None):  # a long statistics pass, stopped between chunks
        started.set()
        while not stop.wait(0.01):
            pass
        raise Cancelled

    def plan(*args, **kwargs):
        started.wait(60)
        raise InputError("the plan failed")

    monkeypatch.setattr(rows, "row_stats", stats)
    monkeypatch.setattr(pipeline, "plan_tokens", plan)
    with pytest.raises(InputError, match="the plan failed"):
        add_tokens(llama_ckpt, tmp_path / "out", WORDS, init="mean-noise")
    assert started.is_set()
    assert not [t for t in threading.enumerate() if t.name == "vocabsurgeon-stats"]
    assert not (tmp_path / "out").exists()


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


# ------------------------------------------------------------------------------------------------
# Many tokens, streamed rows, fast JSON: the performance paths give the same results


def _made_up_words(n: int, seed: int = 0) -> list[str]:
    import random

    r = random.Random(seed)
    out: dict[str, None] = {}
    while len(out) < n:
        out["".join(r.choice("bdfgklmnprstvz") + r.choice("aeiou") for _ in range(r.randint(3, 5))).capitalize()] = None
    return list(out)


@pytest.mark.parametrize("ckpt", ["gpt2_ckpt", "llama_ckpt"])
def test_many_tokens_are_verified_and_each_is_one_token(ckpt, request, tmp_path):
    src = request.getfixturevalue(ckpt)
    words = _made_up_words(3000)
    r = add_tokens(src, tmp_path / "out", words, init="mean", pad_to_multiple_of=64)
    assert r.plan.k >= 2 * len(words) - len(r.to_dict()["skipped"]) * 2
    check_surgery(src, tmp_path / "out", r.plan.k)
    tok = AutoTokenizer.from_pretrained(tmp_path / "out")
    for w in words[::97]:
        assert len(tok(w, add_special_tokens=False).input_ids) == 1
        assert len(tok(" " + w, add_special_tokens=False).input_ids) == 1


def test_verification_of_many_tokens_still_catches_a_wrong_one(gpt2_ckpt, tmp_path):
    from vocabsurgeon import VocabSurgeonError
    from vocabsurgeon.tokenizer.editor import verify_tokenizer

    words = _made_up_words(500)
    r = add_tokens(gpt2_ckpt, tmp_path / "out", words)
    tokens = r.plan.tokens
    bad = tokens.new[400]
    tokens.new[400] = type(bad)(**{**bad.__dict__, "id": bad.id + 1})
    with pytest.raises(VocabSurgeonError, match=f"token {bad.text!r}: the reloaded tokenizer gives id {bad.id}"):
        verify_tokenizer(tmp_path / "out", tokens)
    # a word in the middle that is not one token in the written tokenizer (grouping and batching
    # must report that word, not a neighbour)
    tokens.new[400] = type(bad)(**{**bad.__dict__, "text": "Qqzx" + bad.text})
    with pytest.raises(VocabSurgeonError, match=f"token 'Qqzx{bad.text}': '[^']*Qqzx{bad.text}[^']*' encodes to"):
        verify_tokenizer(tmp_path / "out", tokens)
    tokens.new[400] = bad
    verify_tokenizer(tmp_path / "out", tokens)


def test_streamed_tail_writes_the_same_checkpoint_as_the_eager_one(llama_ckpt, tmp_path, monkeypatch):
    import vocabsurgeon.init.rows as rows

    words = _made_up_words(40)
    add_tokens(llama_ckpt, tmp_path / "eager", words, init_input="random", init_output="mean", seed=3,
               pad_to_multiple_of=64)
    monkeypatch.setattr(rows, "_EAGER_TAIL_BYTES", -1)  # every tail block by block in write_rows
    add_tokens(llama_ckpt, tmp_path / "streamed", words, init_input="random", init_output="mean", seed=3,
               pad_to_multiple_of=64)
    for p in sorted((tmp_path / "eager").iterdir()):
        if p.suffix in (".safetensors", ".json") and p.name != "vocabsurgeon_report.json":  # the report has timings
            assert p.read_bytes() == (tmp_path / "streamed" / p.name).read_bytes(), p.name


def test_json_text_is_json_dumps_indent_2_with_big_containers_on_one_line():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from vocabsurgeon.checkpoint.writer import BIG_CONTAINER, json_text

    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
    values = st.recursive(scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(), c, max_size=4),
                          max_leaves=20)

    @settings(max_examples=200, deadline=None)
    @given(values)
    def small(v):
        assert json_text(v) == json.dumps(v, indent=2, ensure_ascii=False)

    small()
    big = {"model": {"vocab": {f"é{i}": i for i in range(BIG_CONTAINER + 1)}, "merges": [["a", "b"]] * 3000},
           "added_tokens": [{"id": 1, "content": "x"}]}
    text = json_text(big)
    assert json.loads(text) == big
    assert len(text.splitlines()) < 20  # vocab and merges are one line each


def test_byte_level_table_matches_the_byte_level_pre_tokenizer():
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from tokenizers import pre_tokenizers

    from vocabsurgeon.tokenizer.families.pieces import byte_level

    rust = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)

    @settings(max_examples=300, deadline=None)
    @given(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1))
    def same(text):
        assert byte_level(text) == "".join(p for p, _ in rust.pre_tokenize_str(text))

    same()
    every_byte = bytes(range(256)).decode("latin-1")
    assert byte_level(every_byte) == "".join(p for p, _ in rust.pre_tokenize_str(every_byte))


def test_a_config_without_architectures_gets_the_detected_class_with_a_note(tmp_path):
    """Issue 39: llama.cpp's converter refuses a config.json without `architectures` ("Failed to detect model
    architecture"), although `add` detected the model; the output's config names its class."""
    from builders import tiny_gpt2

    src = tiny_gpt2(tmp_path / "src")
    cfg = json.loads((src / "config.json").read_text())
    assert cfg.pop("architectures") == ["GPT2LMHeadModel"]
    (src / "config.json").write_text(json.dumps(cfg))
    summary = add_tokens(src, tmp_path / "out", ["Frodo"]).to_dict()
    assert json.loads((tmp_path / "out" / "config.json").read_text())["architectures"] == ["GPT2LMHeadModel"]
    assert any(n.startswith("config.json has no 'architectures': written as ['GPT2LMHeadModel']")
               for n in summary["tokenizer_notes"])
    kept = add_tokens(tmp_path / "out", tmp_path / "again", ["Gandalf"]).to_dict()  # one that has them: no note
    assert not any("architectures" in n for n in kept["tokenizer_notes"])
