"""Tokenizers as the Hub ships them and word lists as domain users write them (issue 14).

Each family x tokenizer.json variants seen on real models (padding and truncation on, a chat
template with its special tokens) x words drawn by hypothesis from real categories (units and
symbols, CJK, Cyrillic, Hebrew/Arabic, emoji, code identifiers, punctuation only, accents,
hyphenated compounds, a word that exists in another case, the chat template's own words). For
every cell: no word ends the run ("this is a bug" is never raised), old text and the rendered chat
template keep their ids, each kept word is one token in every context, and decoding is as before.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from builders import training_text
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from builders import OLD_TEXTS, family_tokenizer as _tokenizer, sp_bpe_meta as _sp_bpe_meta, tiny_checkpoint
from tokenizers import Tokenizer
from transformers import AutoTokenizer

from vocabsurgeon.cli.commands import cli
from vocabsurgeon.tokenizer.contexts import CONTEXTS as CONTEXT_TABLE
from vocabsurgeon.tokenizer.chats import chat_samples
from vocabsurgeon.tokenizer.editor import TokenizerEditor, verify_tokenizer
from vocabsurgeon.tokenizer.encoding import unpadded
from vocabsurgeon.tokenizer.families import detect_family

CHATML = ("{% if messages[0]['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
          "{% endif %}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

CATEGORIES = {
    "units": ["°C", "5°C", "10µg", "m²", "±5%", "km/h", "µmol/L"],
    "cjk": ["東京大学", "日本語", "北京", "한국어"],
    "cyrillic": ["Москва", "привет", "Ёлка"],
    "rtl": ["שלום", "مرحبا", "ירושלים"],
    "emoji": ["👍🏽", "👨‍👩‍👧", "🦀"],
    "code": ["getUserName", "__init__", "snake_case_var", "std::vector", "np.float32"],
    "punctuation": [":=", "______", "->", "=>", "..."],
    "accents": ["Éowyn", "café", "naïve", "Müller", "Ångström"],
    "hyphenated": ["Müller-Lyer", "café-au-lait", "state-of-the-art", "«bonjour»"],
    "other case": ["Hello", "The", "RETURN", "iPhone"],
    "chat": ["assistant", "system", "user"],
}
ALL_WORDS = [w for ws in CATEGORIES.values() for w in ws]
# Made-up words over the same scripts and symbols, for what the lists above do not think of.
DRAWN = st.text(alphabet="abcXYZéüßø°µ²±%-_:=.()«»’'0123456789абвЖשלוםمرح東京大학😀🏽\u200d", min_size=1, max_size=7).filter(
    lambda w: w.strip() == w)


def _with_hub_variant(path: Path) -> None:
    """Padding and truncation on in tokenizer.json (as sentence-transformers models ship it)."""
    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    tok.enable_padding(length=128, pad_id=0)
    tok.enable_truncation(max_length=128)
    tok.save(str(path / "tokenizer.json"))


MATRIX_FAMILIES = ["byte-level", "byte-level-gpt2", "sp-bpe-file", "sp-bpe-meta", "sp-bpe-gemma", "metaspace-bpe",
                   "unigram-file", "wordpiece-cased", "wordpiece-uncased"]
VARIANTS = ["plain", "hub"]  # hub: padding, truncation and a chat template with its special tokens


@functools.cache
def _tokenizer_dir(root: Path, family: str, variant: str) -> Path:
    tok = _tokenizer(family)
    path = root / f"{family}-{variant}"
    if variant == "hub":
        tok.add_tokens(["<|im_start|>", "<|im_end|>"], special_tokens=True)
        tok.chat_template = CHATML
    tok.save_pretrained(path)
    if family in ("sp-bpe-meta", "sp-bpe-gemma"):  # the classes these layouts ship with
        cfg = json.loads((path / "tokenizer_config.json").read_text())
        cfg.update(tokenizer_class="LlamaTokenizer", legacy=True) if family == "sp-bpe-meta" else \
            cfg.update(tokenizer_class="GemmaTokenizer")
        (path / "tokenizer_config.json").write_text(json.dumps(cfg))
    if variant == "hub":
        _with_hub_variant(path)
    return path


@pytest.fixture(scope="module")
def tokenizer_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    return functools.partial(_tokenizer_dir, root)


# Contexts where a word may keep its old pieces when the plan says so (contexts_not_one_token): there
# the pre-tokenizer joins "(" or '"' to the word, and no entry can reach it without changing old text.
SOFT = ("({})", '"{}"', "I saw {}'s")


def _contexts(w: str, other: str) -> list[tuple[str, dict[str, int]]]:
    out = [(w, {w: 1}), (" " + w, {w: 1}), (f"{w}.", {w: 1}), (f"{w}, {w}.", {w: 2})]
    out += [(c.format(w), {w: 1}) for c in SOFT]
    if other != w and w not in other and other not in w:
        out.append((f"{w} {other}", {w: 1, other: 1}))
    return out


def check_cell(src: Path, out: Path, words: list[str]) -> None:
    """Plan, write and verify `words` on the tokenizer in `src`, then check the invariants."""
    ed = TokenizerEditor(src)
    plan = ed.plan(words)
    assert TokenizerEditor(src).plan(words).to_dict() == plan.to_dict()  # planning is deterministic: dry run = run
    assert {t.text for t in plan.new}.isdisjoint(s["token"] for s in plan.skipped)
    assert {t.text for t in plan.new} | {s["token"] for s in plan.skipped} == set(words)
    out.mkdir(exist_ok=True)
    ed.write(plan, out)
    verify_tokenizer(out, plan)  # the last guard: never "this is a bug" after planning said fine
    written = json.loads((out / "tokenizer.json").read_text())
    original = json.loads((src / "tokenizer.json").read_text())
    assert (written.get("padding"), written.get("truncation")) == (original.get("padding"), original.get("truncation"))
    # the input as its users get it: its file, or where transformers builds another pipeline from it (Meta's Llama 2
    # layout under LlamaTokenizer with legacy true), AutoTokenizer's, which the output follows (as_transformers_builds)
    old = unpadded(Tokenizer.from_str(AutoTokenizer.from_pretrained(src).backend_tokenizer.to_str()) if ed.adopted
                   else Tokenizer.from_file(str(src / "tokenizer.json")))
    new = unpadded(Tokenizer.from_file(str(out / "tokenizer.json")))
    kept = list(dict.fromkeys(t.text for t in plan.new))

    def ids(tok, text):
        return tok.encode(text, add_special_tokens=False).ids

    for text in OLD_TEXTS + chat_samples(src):  # old text and the rendered chat template keep their ids
        if not any(w in text for w in kept):
            assert ids(new, text) == ids(old, text), text
    word_ids = {w: {t.id for t in plan.new if t.text == w} for w in kept}
    for w in kept:
        word_ids[w] |= {i for form in (w, " " + w) for i in [ids(old, form)] if len(i) == 1 for i in i}
    lead = len(ids(old, " a")) - len(ids(old, "a"))  # a lone leading space as its own piece (Llama 2: "▁")
    for k, w in enumerate(kept):
        for text, expect in _contexts(w, kept[(k + 1) % len(kept)]):
            got = ids(new, text)
            for x, n in expect.items():
                if text in plan.contexts.get(x, ()):  # reported: there the word keeps its old pieces
                    assert got == ids(old, text), (x, text, [new.id_to_token(i) for i in got])
                    continue
                assert sum(i in word_ids[x] for i in got) == n, (x, text, [new.id_to_token(i) for i in got])
            if text == w or text == " " + w:
                assert len(got) == 1 + (lead if text != w else 0), (text, [new.id_to_token(i) for i in got])
            want = old.decode(ids(old, text))
            if want in (text, old.normalizer.normalize_str(text) if old.normalizer else text):
                assert new.decode(got) == want, text



@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("family", MATRIX_FAMILIES)
def test_every_family_variant_and_word_category_keeps_the_invariants(family, variant, tokenizer_dirs, tmp_path_factory):
    src = tokenizer_dirs(family, variant)

    @settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(st.lists(st.sampled_from(ALL_WORDS) | DRAWN, min_size=1, max_size=14, unique=True))
    def cell(words):
        check_cell(src, tmp_path_factory.mktemp("out"), words)

    cell()


@pytest.mark.parametrize("family", MATRIX_FAMILIES)
def test_every_category_at_once_on_every_family(family, tokenizer_dirs, tmp_path):
    check_cell(tokenizer_dirs(family, "hub"), tmp_path / "out", ALL_WORDS)


# ---------------------------------------------------------------------------------------------
# The items, one by one, through the CLI


def _run(*args):
    return CliRunner().invoke(cli, ["add", "--json", "-q", "--no-validate", *args])


def _checkpoint(tmp_path: Path, family: str, hub: bool = False) -> Path:
    tok = _tokenizer(family)
    if hub:
        tok.add_tokens(["<|im_start|>", "<|im_end|>"], special_tokens=True)
        tok.chat_template = CHATML
    src = tiny_checkpoint(tmp_path / "src", tok)
    if hub:
        _with_hub_variant(src)
    return src


@pytest.mark.parametrize("family", ["byte-level", "wordpiece-uncased"])
def test_padding_and_truncation_in_tokenizer_json_are_off_for_checks_and_kept_in_the_output(family, tmp_path):
    src, out = _checkpoint(tmp_path, family, hub=True), tmp_path / "out"
    r = _run("-t", "Aragorn", "-t", "Frodo", str(src), str(out))
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["skipped"] == [] and summary["added"]
    padding = json.loads((src / "tokenizer.json").read_text())["padding"]
    assert padding["strategy"] == {"Fixed": 128}
    assert json.loads((out / "tokenizer.json").read_text())["padding"] == padding
    tok = AutoTokenizer.from_pretrained(out)
    assert len(tok("Aragorn", add_special_tokens=False, padding=False).input_ids) == 1


def test_byte_level_latin1_symbols_across_pre_tokens_are_skipped_with_the_reason(tmp_path):
    src, out = _checkpoint(tmp_path, "byte-level"), tmp_path / "out"
    words = ["°C", "5°C", "10µg", "m²", "±5%", "Müller-Lyer", "café-au-lait", "«bonjour»", "Frodo"]
    dry = _run("--dry-run", *[a for w in words for a in ("-t", w)], str(src), str(out))
    r = _run(*[a for w in words for a in ("-t", w)], str(src), str(out))
    assert r.exit_code == dry.exit_code == 0, r.output
    summary, planned = json.loads(r.stdout), json.loads(dry.stdout)
    assert summary["added"] == planned["added"] and summary["skipped"] == planned["skipped"]
    assert [a["token"] for a in summary["added"]] == ["Frodo", "Frodo"]
    assert {s["token"] for s in summary["skipped"]} == set(words[:-1])
    assert summary["skipped"][0]["reason"] == (
        "the pre-tokenizer splits it (° | C), so it can only be an added token, which the ByteLevel decoder would "
        "garble (all its characters are byte symbols)")


@pytest.mark.parametrize("family", ["wordpiece-cased", "wordpiece-uncased"])
def test_wordpiece_cjk_word_is_one_added_token_on_the_raw_text(family, tmp_path):
    src, out = _checkpoint(tmp_path, family), tmp_path / "out"
    r = _run("-t", "東京大学", str(src), str(out))
    assert r.exit_code == 0, r.output
    [a] = json.loads(r.stdout)["added"]
    assert (a["piece"], a["mechanism"]) == ("東京大学", "added")
    tok = AutoTokenizer.from_pretrained(out)
    ids = tok("東京大学は東京大学です", add_special_tokens=False).input_ids
    assert ids.count(a["id"]) == 2


def test_metaspace_bpe_gets_merges_and_decodes_as_before(tmp_path):
    src = _checkpoint(tmp_path, "metaspace-bpe")
    ed = TokenizerEditor(src)
    assert ed.family_name == "sentencepiece-bpe-metaspace" == detect_family(ed.data)

    def pieces(p):
        return [t.value for t in ed.tok.model.tokenize(p)]

    seen = dict.fromkeys(w.strip(".,;:()") for line in training_text()[:400] for w in line.split())
    two = [w for w in seen if w.isalpha() and len(pieces("▁" + w)) == 2 and len(pieces(w)) == 2][:20]
    many = next(w for w in ("Frodo", "Lothlorien", "mithril") if len(pieces("▁" + w)) > 2)
    r = _run(*[a for w in [*two, many] for a in ("-t", w)], str(src), str(tmp_path / "out"))
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert {a["mechanism"] for a in summary["added"]} == {"merge"}
    skipped = {s["token"]: s["reason"] for s in summary["skipped"]}
    assert "takes a new word only as one merge of two existing pieces" in skipped[many]
    kept = list(dict.fromkeys(a["token"] for a in summary["added"]))
    assert kept and set(kept) | set(skipped) == {*two, many}
    old, new = AutoTokenizer.from_pretrained(src), AutoTokenizer.from_pretrained(tmp_path / "out")
    for w in kept:
        text = f"{w}, {w}. ({w})"
        ids = new(text, add_special_tokens=False).input_ids
        assert new.decode(ids) == old.decode(old(text, add_special_tokens=False).input_ids) == text
        assert sum(i in {a["id"] for a in summary["added"] if a["token"] == w} for i in ids) == 3


def test_chat_template_words_are_skipped_and_prompts_keep_their_ids(tmp_path):
    src, out = _checkpoint(tmp_path, "byte-level", hub=True), tmp_path / "out"
    samples = chat_samples(src)
    assert samples and all("<|im_start|>assistant\n" in s for s in samples)
    assert any("You are a helpful assistant." in s for s in samples)  # the default system prompt is rendered
    r = _run("-t", "assistant", "-t", "helpful", "-t", "Frodo", str(src), str(out))
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert [s["token"] for s in summary["skipped"]] == ["assistant", "helpful"]
    assert summary["skipped"][0]["reason"].startswith("the chat template's own text has it (")
    assert summary["skipped"][0]["reason"].endswith("); adding it would change the ids of every chat prompt")
    old, new = AutoTokenizer.from_pretrained(src), AutoTokenizer.from_pretrained(out)
    conversation = [{"role": "user", "content": "Hi"}]
    assert new.apply_chat_template(conversation, add_generation_prompt=True) == \
        old.apply_chat_template(conversation, add_generation_prompt=True)


@pytest.mark.parametrize("family", ["byte-level", "sp-bpe-file", "unigram-file", "wordpiece-cased"])
def test_punctuation_only_words_are_one_token_in_context_or_skipped(family, tmp_path):
    src = _checkpoint(tmp_path, family)
    words = [":=", "______", "->"]
    plan = TokenizerEditor(src).plan(words)
    new_ids = {w: {t.id for t in plan.new if t.text == w} for w in words}
    ed = TokenizerEditor(src)
    ed.write(plan, tmp_path)
    tok = unpadded(Tokenizer.from_file(str(tmp_path / "tokenizer.json")))
    for w in words:
        if new_ids[w]:
            assert sum(i in new_ids[w] for i in tok.encode(f"x = ({w})", add_special_tokens=False).ids) == 1, w
        else:
            assert any(s["token"] == w for s in plan.skipped)


def test_strict_turns_a_skipped_word_into_exit_2_before_writing(tmp_path):
    src, out = _checkpoint(tmp_path, "byte-level"), tmp_path / "out"
    r = CliRunner().invoke(cli, ["add", "--strict", "-t", "°C", "-t", "Frodo", str(src), str(out)])
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines()[-1] == (
        "Error: --strict: 1 token(s) would be skipped, e.g. '°C': the pre-tokenizer splits it (° | C), so it can only "
        "be an added token, which the ByteLevel decoder would garble (all its characters are byte symbols); nothing "
        "was written (drop --strict or remove them; see --dry-run)")
    assert not out.exists()
    assert _run("--strict", "-t", "Frodo", str(src), str(out)).exit_code == 0


def test_llama2_meta_layout_keeps_every_word_loads_as_written_and_reports_bracket_contexts(tmp_path):
    """Meta's Llama 2 tokenizer.json (Prepend normalizer, LlamaTokenizer legacy): once 0 of 76 words were
    kept, each "'(Frodo)' would decode as '(Frodo )'"."""
    src = tiny_checkpoint(tmp_path / "src", _sp_bpe_meta())
    cfg = json.loads((src / "tokenizer_config.json").read_text())
    (src / "tokenizer_config.json").write_text(json.dumps({**cfg, "tokenizer_class": "LlamaTokenizer", "legacy": True}))
    words = ["Frodo", "Gandalf", "mithril", "Lothlorien", "Müller"]
    r = _run(*[a for w in words for a in ("-t", w)], str(src), str(tmp_path / "out"))
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["skipped"] == []
    assert len(summary["added"]) == len(words)  # one added token per word: "Frodo" matches "▁Frodo"
    assert set(summary["contexts_not_one_token"]) == set(words)
    reported = summary["contexts_not_one_token"]["Frodo"]  # brackets, quotes, x=Frodo: the word keeps its old pieces
    assert {"(Frodo)", '"Frodo"'} <= set(reported) <= {c.template.format(w="Frodo") for c in CONTEXT_TABLE if c.soft}
    old = AutoTokenizer.from_pretrained(src)
    new = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert type(old).__name__ == "LlamaTokenizer" and type(new).__name__ in ("TokenizersBackend", "PreTrainedTokenizerFast")
    for text in OLD_TEXTS + ["<s>[INST] Hello there [/INST] Hi! </s><s>[INST] Next [/INST]"]:
        assert new(text)["input_ids"] == old(text)["input_ids"], text  # BOS too, and text after special tokens
    ids = {a["token"]: a["id"] for a in summary["added"]}
    # the content is the form as normalized, which llama.cpp's converter reads as " Frodo" (matched in raw text)
    assert {a["piece"] for a in summary["added"]} == {"▁" + w for w in words}
    for text in ["Frodo went home.", "I saw Frodo's ring, and Gandalf.", "mithril, Lothlorien Müller"]:
        got = new(text, add_special_tokens=False)["input_ids"]
        assert sum(i in ids.values() for i in got) == sum(text.count(w) for w in words), text
        assert new.decode(got) == text
    paren = new("(Frodo)", add_special_tokens=False)["input_ids"]
    assert paren == old("(Frodo)", add_special_tokens=False)["input_ids"]  # reported: keeps its old pieces
    assert new.decode(paren) == "(Frodo)"


def test_strict_refuses_a_word_that_keeps_its_old_pieces_in_some_context(tmp_path):
    src = tiny_checkpoint(tmp_path / "src", _sp_bpe_meta())
    r = CliRunner().invoke(cli, ["add", "--strict", "-t", "Frodo", str(src), str(tmp_path / "out")])
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines()[-1] == (
        "Error: --strict: 1 token(s) would not be one token in every context, e.g. 'Frodo' in '(Frodo)'; nothing was "
        "written (drop --strict to keep them; see --dry-run --json)")
    assert not (tmp_path / "out").exists()
