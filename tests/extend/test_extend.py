"""`vocabsurgeon extend`: merges learned after the old ones, old tokens and text kept, rows grown by add's surgery."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from builders import as_transformers_loads, family_checkpoint, read_json
from click.testing import CliRunner
from hypothesis import given, settings, strategies as st
from tokenizers import Tokenizer
from transformers import AutoTokenizer

from vocabsurgeon.add.plan import AddOptions, open_target
from vocabsurgeon.checkpoint.reader import Checkpoint
from vocabsurgeon.cli.commands import cli
from vocabsurgeon.errors import InputError
from vocabsurgeon.corpus import MAX_ITEM_CHARS, Reader, count_words, read_paragraphs, words_of
from vocabsurgeon.extend.learn import KEEP_PIECE
from vocabsurgeon.extend.pipeline import run_extend
from vocabsurgeon.extend.plan import PACKAGED_CORPUS, ExtendOptions, plan_extend
from vocabsurgeon.tokenizer.encoding import encode_ids, unpadded
from vocabsurgeon.tokenizer.encoding import merge_parts

REPO = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).parent / "new_language.txt"  # Russian and Japanese prose, written for these tests
OLD = read_paragraphs(PACKAGED_CORPUS)  # English prose, dialogue, numbers and code
TEXTS = read_paragraphs(CORPUS) + OLD + ["  two  spaces\n\n\tTabbed\r\n", "naïve Zoë 😀🎉", "Москва 日本語のテキスト"]
CHAT = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# Each family `add` supports that extend extends (the refused ones: test_refused_families_say_why)
EXTENDED = ["byte-level", "byte-level-gpt2", "byte-level-llama-class", "sp-bpe", "sp-bpe-file", "sp-bpe-meta",
            "sp-bpe-gemma", "metaspace-bpe"]


def _items() -> list[str]:
    """The corpus as `extend` reads it: paragraph by paragraph (`corpus.Reader`)."""
    return list(Reader(CORPUS, MAX_ITEM_CHARS))


def _extend(src: Path, out: Path, n: int = 60, keep: Path | None = None, init: str = "subword-mean", corpus=CORPUS):
    return run_extend(open_target(src, AddOptions(init=init)), out, ExtendOptions(corpus, n, keep))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """family -> (checkpoint, output, result): each family extended once for the module."""
    done = {}

    def get(family: str):
        if family not in done:
            base = tmp_path_factory.mktemp(family)
            src = family_checkpoint(base / "ckpt", family)
            done[family] = (src, base / "out", _extend(src, base / "out"))
        return done[family]

    return get


@pytest.mark.parametrize("family", EXTENDED)
def test_old_tokens_ids_and_merges_stay_and_new_merges_follow_in_order(built, family):
    src, out, result = built(family)
    before, after = read_json(src / "tokenizer.json"), read_json(out / "tokenizer.json")
    old_vocab, new_vocab = result.plan.editor.vocab, after["model"]["vocab"]
    assert all(new_vocab[p] == i for p, i in old_vocab.items())
    old_merges = [merge_parts(m) for m in result.plan.editor.model["merges"]]
    merges = [merge_parts(m) for m in after["model"]["merges"]]
    assert merges[:len(old_merges)] == old_merges and merges[len(old_merges):] == result.plan.learned.merges
    assert [t["content"] for t in after["added_tokens"]] == [t["content"] for t in before["added_tokens"]]
    assert [t["id"] for t in after["added_tokens"]] == [t["id"] for t in before["added_tokens"]]
    new = result.plan.tokens.new
    assert [t.id for t in new] == list(range(result.plan.editor.size, result.plan.editor.size + len(new)))
    assert all(new_vocab[t.piece] == t.id for t in new)
    a, b = as_transformers_loads(src), AutoTokenizer.from_pretrained(out)
    # (a class may add default special tokens past the file's ids on load, GemmaTokenizer's <pad> and <mask> on this
    # tiny file: those follow the new pieces as they followed the old ones)
    specials = {t: i for t, i in zip(a.all_special_tokens, a.all_special_ids) if i < result.plan.editor.size}
    assert {t: b.convert_tokens_to_ids(t) for t in specials} == specials
    assert len(b) == len(a) + len(new)


@pytest.mark.floor  # transformers 5.17 to 5.21 load byte-level-llama-class's input otherwise (as_transformers_loads)
@pytest.mark.parametrize("family", EXTENDED)
def test_every_text_decodes_as_before_and_transformers_agrees_with_tokenizers(built, family):
    src, out, _ = built(family)
    old, new = as_transformers_loads(src), AutoTokenizer.from_pretrained(out)
    alone = Tokenizer.from_file(str(out / "tokenizer.json"))
    for text in TEXTS:
        ids = new(text, add_special_tokens=False)["input_ids"]
        assert ids == alone.encode(text, add_special_tokens=False).ids, text
        want, got = old.decode(old(text, add_special_tokens=False)["input_ids"]), new.decode(ids)
        # as before, or closer to the text where the old one had unknown pieces (a character added: metaspace-bpe)
        assert got == want or (want != text and got.count("<unk>") < want.count("<unk>")), text


@pytest.mark.parametrize("family", EXTENDED)
def test_the_learned_merges_compress_the_corpus_as_counted(built, family):
    src, out, result = built(family)
    e = result.plan.to_dict()["extend"]
    old, new = Tokenizer.from_file(str(src / "tokenizer.json")), Tokenizer.from_file(str(out / "tokenizer.json"))
    n_old, n_new = (sum(map(len, encode_ids(t, _items()))) for t in (old, new))
    assert n_new < n_old
    # the learner's own counts are the tokenizer's: words counted exactly, merges applied as encode applies them
    if family in ("byte-level", "byte-level-gpt2", "byte-level-llama-class"):
        assert (e["corpus_tokens"]["before"], e["corpus_tokens"]["after"]) == (n_old, n_new)


@pytest.mark.parametrize("family", ["byte-level", "sp-bpe-meta"])
def test_old_rows_stay_bit_identical_and_new_rows_are_the_subword_mean(built, family):
    src, out, result = built(family)
    a, b = Checkpoint.open(src), Checkpoint.open(out)
    name = result.plan.layout.embedding
    n = a.tensors[name].shape[0]
    old, new = a.rows_np(name, 0, n), b.rows_np(name, 0, b.tensors[name].shape[0])
    assert new[:n].tobytes() == old.tobytes()
    t = result.plan.tokens.new[0]
    want = old[t.pieces].astype(np.float32).mean(axis=0)
    assert np.allclose(new[t.id].astype(np.float32), want, atol=1e-2)
    assert t.pieces and len(t.pieces) >= 2  # a merged piece is made of two or more old pieces


def test_keep_text_keeps_its_tokens_and_the_chat_template_keeps_its_ids(tmp_path):
    src = family_checkpoint(tmp_path / "ckpt", "byte-level")
    cfg = read_json(src / "tokenizer_config.json")
    cfg["chat_template"] = CHAT
    (src / "tokenizer_config.json").write_text(json.dumps(cfg), encoding="utf-8")
    mixed = tmp_path / "mixed.txt"  # the new language and English prose: merges that English text uses too
    mixed.write_text(CORPUS.read_text(encoding="utf-8") + "\n\n" + (REPO / "fixtures" / "corpus_lotr.txt").read_text(
        encoding="utf-8"), encoding="utf-8")
    free = _extend(src, tmp_path / "free", n=200, corpus=mixed)
    kept = _extend(src, tmp_path / "kept", n=200, keep=PACKAGED_CORPUS, corpus=mixed)
    changed = {o.source: o.changed for o in free.plan.old_text}
    assert changed["(packaged sample)"] > 0  # without --keep-text the English sample does change here
    assert [o.changed for o in kept.plan.old_text] == [0, 0]
    assert kept.plan.learned.refused[KEEP_PIECE] > 0  # pieces of the English text's characters alone were refused
    report = kept.plan.to_dict()["extend"]
    assert [o["outside_keep_text"] for o in report["old_text"]] == [0, 0]  # the sample is in the file's characters
    assert report["pairs_refused"] == kept.plan.learned.refused
    assert [o["outside_keep_text"] for o in free.plan.to_dict()["extend"]["old_text"]] == [None]
    old, new = AutoTokenizer.from_pretrained(src), AutoTokenizer.from_pretrained(tmp_path / "kept")
    assert [new(t, add_special_tokens=False)["input_ids"] for t in OLD] == \
           [old(t, add_special_tokens=False)["input_ids"] for t in OLD]
    assert read_json(tmp_path / "kept" / "tokenizer_config.json")["chat_template"] == CHAT
    chat = [{"role": "user", "content": "Hello there"}, {"role": "assistant", "content": "Hi!"}]
    assert new.apply_chat_template(chat, tokenize=True) == old.apply_chat_template(chat, tokenize=True)


def test_keep_text_of_a_byte_level_bpe_with_ignore_merges_keeps_whole_words(tmp_path):
    src = family_checkpoint(tmp_path / "ckpt", "byte-level")
    data = read_json(src / "tokenizer.json")
    data["model"]["ignore_merges"] = True
    (src / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    keep = tmp_path / "keep.txt"
    keep.write_text(CORPUS.read_text(encoding="utf-8").split("\n\n")[0], encoding="utf-8")  # words of the corpus
    result = _extend(src, tmp_path / "out", n=100, keep=keep)
    assert read_json(tmp_path / "out" / "tokenizer.json")["model"]["ignore_merges"] is True
    old, new = Tokenizer.from_file(str(src / "tokenizer.json")), Tokenizer.from_file(str(tmp_path / "out/tokenizer.json"))
    texts = read_paragraphs(keep)
    assert encode_ids(new, texts) == encode_ids(old, texts)
    assert result.plan.old_text[0].changed == 0
    assert len(encode_ids(new, [CORPUS.read_text(encoding="utf-8")])[0]) < \
        len(encode_ids(old, [CORPUS.read_text(encoding="utf-8")])[0])


# --keep-text as a user passes it: the packaged English sample. Unseen English: fixtures/corpus_lotr.txt, whose words
# the corpus below also holds, so that merges of English pieces are there to be learned
KEEP_CHARS = sorted(set(OLD_TEXT := PACKAGED_CORPUS.read_text(encoding="utf-8")))
LOTR = read_paragraphs(REPO / "fixtures" / "corpus_lotr.txt")
# byte-level BPE with and without ignore_merges, SentencePiece BPE in its layouts (Llama 2's: no pre-tokenizer)
KEEP_FAMILIES = [("byte-level", False), ("byte-level", True), ("byte-level-gpt2", False), ("sp-bpe", False),
                 ("sp-bpe-meta", False), ("metaspace-bpe", False)]


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    """(family, ignore_merges) -> (old tokenizer, new tokenizer, plan): extended with --keep-text on a corpus of
    the new language and English that the keep file lacks."""
    done = {}

    def get(family: str, ignore_merges: bool):
        if (family, ignore_merges) not in done:
            base = tmp_path_factory.mktemp(family)
            src = family_checkpoint(base / "ckpt", family)
            if ignore_merges:
                data = read_json(src / "tokenizer.json")
                data["model"]["ignore_merges"] = True
                (src / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
            mixed = base / "mixed.txt"
            mixed.write_text(CORPUS.read_text(encoding="utf-8") + "\n\n" + "\n\n".join(LOTR), encoding="utf-8")
            plan = plan_extend(open_target(src), ExtendOptions(mixed, 200, PACKAGED_CORPUS))
            new = unpadded(Tokenizer.from_str(json.dumps(plan.editor.edited(plan.tokens))))
            done[family, ignore_merges] = plan.tokens.original, new, plan
        return done[family, ignore_merges]

    return get


@pytest.mark.parametrize("family, ignore_merges", KEEP_FAMILIES)
def test_keep_text_keeps_unseen_text_written_in_its_characters(kept, family, ignore_merges):
    """Not only the keep file: other English paragraphs, their words reordered, keep their ids, because every new
    piece holds a character the keep file lacks; the new language still compresses."""
    old, new, plan = kept(family, ignore_merges)
    unseen = [p for p in LOTR if set(p) <= set(KEEP_CHARS)]
    words = " ".join(unseen).split()
    unseen += [" ".join(sorted(words)), " ".join(reversed(words)), "".join(words[:50])]
    assert len(unseen) >= 15 and not any(p in OLD_TEXT for p in LOTR)
    assert encode_ids(new, unseen) == encode_ids(old, unseen)
    assert [(o.changed, o.inside_changed) for o in plan.old_text] == [(0, 0), (0, 0)]
    language = read_paragraphs(CORPUS)
    assert sum(map(len, encode_ids(new, language))) < 0.8 * sum(map(len, encode_ids(old, language)))
    assert plan.learned.refused  # English pairs of the corpus were refused


@pytest.mark.parametrize("family", ["byte-level", "sp-bpe-meta", "metaspace-bpe"])
def test_keep_text_counts_the_blank_lines_between_its_paragraphs(tmp_path, family):
    """A keep file of one-line paragraphs: its newlines are characters of it too, so text with newlines keeps."""
    src = family_checkpoint(tmp_path / "ckpt", family)
    keep = tmp_path / "keep.txt"
    keep.write_text("\n\n".join(" ".join(p.split()) for p in read_paragraphs(PACKAGED_CORPUS)), encoding="utf-8")
    corpus = tmp_path / "corpus.txt"  # the new language, its lines broken as a text file breaks them
    corpus.write_text("\n".join(CORPUS.read_text(encoding="utf-8").split()), encoding="utf-8")
    plan = plan_extend(open_target(src), ExtendOptions(corpus, 100, keep))
    old, new = plan.tokens.original, unpadded(Tokenizer.from_str(json.dumps(plan.editor.edited(plan.tokens))))
    texts = OLD + ["\n".join(LOTR[0].split()[:20]), "a\nb\n\nc"]
    assert encode_ids(new, texts) == encode_ids(old, texts)


@pytest.mark.parametrize("family, ignore_merges", KEEP_FAMILIES)
@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(alphabet=KEEP_CHARS, max_size=40) | st.sampled_from(" ".join(LOTR).split()), max_size=12))
def test_keep_text_keeps_any_text_of_its_characters(kept, family, ignore_merges, parts):
    old, new, _ = kept(family, ignore_merges)
    text = " ".join(parts)
    assert new.encode(text, add_special_tokens=False).ids == old.encode(text, add_special_tokens=False).ids


@pytest.mark.parametrize("family, kind", [("unigram", "Unigram"), ("unigram-file", "Unigram"),
                                          ("wordpiece-cased", "WordPiece"), ("wordpiece-uncased", "WordPiece")])
def test_refused_families_say_why_and_write_nothing(tmp_path, family, kind):
    src = family_checkpoint(tmp_path / "ckpt", family)
    with pytest.raises(InputError, match=rf"tokenizer.json: cannot extend a {kind} tokenizer: "):
        plan_extend(open_target(src), ExtendOptions(CORPUS, 10))
    r = CliRunner().invoke(cli, ["extend", "--corpus", str(CORPUS), "--new-tokens", "10", str(src),
                                 str(tmp_path / "out")])
    assert r.exit_code == 2 and f"cannot extend a {kind} tokenizer" in r.output
    assert not (tmp_path / "out").exists()


def test_word_counts_by_distinct_chunk_are_the_counts_of_each_paragraph_pre_tokenized_whole(tmp_path):
    src = family_checkpoint(tmp_path / "ckpt", "byte-level")
    tok = Tokenizer.from_file(str(src / "tokenizer.json"))
    by_chunk, n_bytes = count_words(tok, CORPUS, chunk_chars=600)  # the first batch decides; the rest by chunk
    whole = words_of(tok, _items())
    assert by_chunk == whole and n_bytes == CORPUS.stat().st_size
    assert list(by_chunk) == list(whole)  # in the order words first occur: the learner's ties follow it


def test_cli_dry_run_json_learns_and_writes_nothing(tmp_path):
    src = family_checkpoint(tmp_path / "ckpt", "byte-level-gpt2")
    r = CliRunner().invoke(cli, ["extend", "--corpus", str(CORPUS), "--new-tokens", "30", "--dry-run", "--json",
                                 str(src), str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["dry_run"] and d["extend"]["new_tokens"] == 30 and len(d["added"]) == 30
    assert d["rows_after"] - d["rows_before"] == 30 and d["init"]["input"] == "subword-mean-shrunk"
    assert d["extend"]["tokens_per_byte"]["after"] < d["extend"]["tokens_per_byte"]["before"]
    assert not (tmp_path / "out").exists()


def test_cli_writes_validates_and_reports(tmp_path):
    src = family_checkpoint(tmp_path / "ckpt", "byte-level")
    r = CliRunner().invoke(cli, ["extend", "--corpus", str(CORPUS), "--new-tokens", "40", "--json", "--max-tokens",
                                 "256", str(src), str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["validation"]["passed"] and d["extend"]["new_tokens"] == 40
    assert d["init"]["output"] == "subword-mean-shrunk" and d["shrink"]["output"]["shrink"]["a"] <= 1.0  # the default
    assert Checkpoint.open(tmp_path / "out").config["vocab_size"] == d["rows_after"]
    card = (tmp_path / "out" / "README.md").read_text(encoding="utf-8")
    assert "40 sub-word tokens learned from `new_language.txt`" in card and "new word(s)" not in card


@pytest.mark.parametrize("args, message", [
    (["--new-tokens", "0"], "--new-tokens"),
    (["--new-tokens", "5", "--keep-text", "missing.txt"], "missing.txt: no such file; pass a UTF-8 text file to --keep-text"),
])
def test_cli_bad_options_say_so(tmp_path, args, message):
    src = family_checkpoint(tmp_path / "ckpt", "byte-level")
    r = CliRunner().invoke(cli, ["extend", "--corpus", str(CORPUS), *args, str(src), str(tmp_path / "out")])
    assert r.exit_code == 2 and message in r.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["gpt2", "llama3", "llama2", "mistral-v0.1"])
def test_published_tokenizers_extend_with_old_text_kept_and_loaders_agreeing(published, tmp_path, name):
    """GPT-2 (byte-level), Llama 3 (byte-level, ignore_merges), Llama 2 (SentencePiece BPE, Meta's file) and Mistral
    (its tokenizer.model only: converted, and written back with the new pieces)."""
    src = published(name)
    result = _extend(src, tmp_path / "out", n=300, keep=PACKAGED_CORPUS)
    out = tmp_path / "out"
    assert [o.changed for o in result.plan.old_text] == [0, 0]
    old, new = AutoTokenizer.from_pretrained(src), AutoTokenizer.from_pretrained(out)
    alone = Tokenizer.from_file(str(out / "tokenizer.json"))
    n_old = n_new = 0
    for text in TEXTS:
        a, b = old(text, add_special_tokens=False)["input_ids"], new(text, add_special_tokens=False)["input_ids"]
        assert b == alone.encode(text, add_special_tokens=False).ids, text
        assert new.decode(b) == old.decode(a), text
        if text in OLD:
            assert b == a, text
        n_old, n_new = n_old + len(a), n_new + len(b)
    assert n_new < n_old
    unseen = [p for p in LOTR if set(p) <= set(KEEP_CHARS)]  # English that --keep-text lacks, in its characters
    assert [new(t, add_special_tokens=False)["input_ids"] for t in unseen] == \
           [old(t, add_special_tokens=False)["input_ids"] for t in unseen]
    if name == "llama3":
        assert read_json(out / "tokenizer.json")["model"]["ignore_merges"] is True
    if name == "mistral-v0.1":  # SentencePiece reads the written .model as tokenizer.json reads it
        import sentencepiece

        sp = sentencepiece.SentencePieceProcessor(model_file=str(out / "tokenizer.model"))
        assert sp.get_piece_size() == result.plan.editor.size + len(result.plan.tokens.new)
        for text in TEXTS:
            assert sp.encode(text) == new(text, add_special_tokens=False)["input_ids"], text


def test_suggest_points_to_extend_where_whole_words_cover_little(tmp_path):
    from vocabsurgeon.explore.suggest import suggest_tokens

    src = family_checkpoint(tmp_path / "ckpt", "byte-level-gpt2")
    many = suggest_tokens(src, CORPUS, top=2, min_count=1)  # every word form its own candidate
    assert many.candidates >= 8 and "vocabsurgeon extend" in many.describe()
    few = suggest_tokens(src, CORPUS, top=1000, min_count=1)
    assert "vocabsurgeon extend" not in few.describe()


def test_fitted_init_fits_the_contexts_the_merges_write_not_the_longest_match(tmp_path):
    """The fitted init's corpus windows hold the new tokens that the edited tokenizer writes there: the longest
    match that finds add's words would join pieces that the merges leave apart."""
    from vocabsurgeon.init.fitted.causal import budget_windows
    from vocabsurgeon.init.fitted.common import FitToken, Run, Window, find_runs, segmented_runs
    from vocabsurgeon.runtime import load_tokenizer
    from vocabsurgeon.tokenizer.encoding import unpadded

    src = family_checkpoint(tmp_path / "ckpt", "byte-level")
    plan = plan_extend(open_target(src, AddOptions(init="fitted")), ExtendOptions(CORPUS, 200))
    tokens = [FitToken(t.form, tuple(t.pieces)) for t in plan.tokens.new]
    far = 10**9  # Window.new_ids writes new token j as far + j: back to its id
    ids_of = [t.id for t in plan.tokens.new]

    def written(w: Window) -> list[int]:
        return [ids_of[x - far] if x >= far else x for x in w.new_ids(far)]

    texts = read_paragraphs(CORPUS)
    old = encode_ids(plan.tokens.original, texts)
    new = encode_ids(unpadded(Tokenizer.from_str(json.dumps(plan.editor.edited(plan.tokens)))), texts)
    segmented = plan.fit_segment()(texts)
    assert [written(Window(a, segmented_runs(a, s, tokens))) for a, s in zip(old, segmented)] == new
    assert any(written(Window(a, find_runs(a, tokens))) != b for a, b in zip(old, new))  # why segment exists
    windows, _ = budget_windows(CORPUS.read_text(encoding="utf-8"), load_tokenizer(src), [], tokens, 10**6, 1, None,
                                plan.fit_segment())  # windows as long as a paragraph: each is one whole
    assert windows and all(written(w) in new for w in windows)
    assert segmented_runs([1, 2, 3], [-1, 3], [FitToken("x", (1, 2))]) == [Run(0, 2, 0)]
    assert segmented_runs([1, 2, 3], [-1, 4], [FitToken("x", (1, 2))]) is None  # not the old ids joined: None


def test_cli_fitted_fits_on_the_corpus_it_learned_from(tmp_path):
    src = family_checkpoint(tmp_path / "ckpt", "byte-level")
    r = CliRunner().invoke(cli, ["extend", "--corpus", str(CORPUS), "--new-tokens", "20", "--init", "fitted", "--json",
                                 "--no-validate", "--device", "cpu", str(src), str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    contexts = json.loads(r.stdout)["fitted"]["contexts"]
    assert contexts["source"] == "corpus" and contexts["name"] == CORPUS.name
    assert contexts["runs"] == "the output tokenizer's"
