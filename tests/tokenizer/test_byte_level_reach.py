"""Byte-level BPE vocabularies with entries their merges do not rebuild (issue #20): transformers' GGUF conversion
of Qwen2.5 appends "[PAD151665]" ... "[PAD151935]" as plain vocabulary entries. Such an entry changes text under
ignore_merges only if some text has it as a whole pre-token, and these never are (a digit is a pre-token of its
own): the words that need ignore_merges ("Éowyn", a bare "Москва") were all skipped for nothing. Built from the
published Qwen3 tokenizer.json (fixtures/published.py) with such entries appended, on a tiny model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from tokenizers import Tokenizer
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from vocabsurgeon.cli.commands import cli
from vocabsurgeon.tokenizer.contexts import CONTEXTS as CONTEXT_TABLE
from vocabsurgeon.tokenizer.families import byte_level_bpe
from vocabsurgeon.tokenizer.families.byte_level_bpe import GPT2_PATTERN, WholePreTokens, context_variants, split_pattern
from vocabsurgeon.tokenizer.families.pieces import byte_level, bytes_of
from vocabsurgeon.tokenizer.editor import TokenizerEditor

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
sys.path.insert(0, str(FIXTURES))
from published import Missing, fetch  # noqa: E402

NAMES = ["Lothlórien", "Éowyn", "Théoden", "Nazgûl", "Björk", "Zoë", "Москва"]
WHY = "ignore_merges would change how this tokenizer splits existing text"
ROWS = 151936  # Qwen2.5's embedding rows: the GGUF conversion names every id up to here
OLD_TEXTS = [
    (FIXTURES / "corpus.txt").read_text(encoding="utf-8"),
    "[PAD151665] [PAD151935][PAD151700]", "PAD151665", "[PAD", "151665]", "Eowyn and Theoden rode to Lothlorien.",
    "Nazgul, Bjork, Zoe; Moskva (Москвы, москва).", "Théo, Éo, Zo, Naz, Лоth", "cliché précis fiancé Göteborg",
    "def f(x):\n    return x[1:3]  # 12345\n", "  leading and trailing  ", "tab\tand\r\nnewlines\n\n",
    "emoji 🙂 and 中文 and العربية", "it's we'll they'd I'M", "\u0558!\u0558 and !\u0558!",
]


def _files(name: str) -> Path:
    try:
        return fetch(name)
    except Missing as e:  # files no package ships, not committed (fixtures/published.py LOCAL)
        pytest.skip(str(e))


def _pre(name: str) -> dict:
    return json.loads((_files(name) / "tokenizer.json").read_text(encoding="utf-8"))["pre_tokenizer"]


def _padded(data: dict, extra: list[str] = ()) -> dict:
    """`data` as transformers' GGUF conversion writes Qwen2.5's: every id a vocabulary entry (the added tokens'
    too, at their ids), "[PADn]" for each id up to ROWS that no token has, as plain vocabulary entries (not
    added tokens), no merges for them; then `extra` entries the same way."""
    data = json.loads(json.dumps(data))
    vocab = data["model"]["vocab"]
    vocab.update({t["content"]: t["id"] for t in data["added_tokens"]})
    top = 1 + max([*vocab.values(), *(t["id"] for t in data["added_tokens"])])
    for i in range(top, ROWS):
        vocab[f"[PAD{i}]"] = i
    for i, piece in enumerate(extra, start=ROWS):
        vocab[piece] = i
    return data


def _checkpoint(path: Path, data: dict) -> Path:
    """A tiny tied Llama (rows = largest id + 1) around `data`, with Qwen3's published tokenizer_config.json."""
    torch.manual_seed(0)
    rows = 1 + max([*data["model"]["vocab"].values(), *(t["id"] for t in data["added_tokens"])])
    cfg = LlamaConfig(vocab_size=rows, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(path)
    (path / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    config = _files("qwen3") / "tokenizer_config.json"
    (path / "tokenizer_config.json").write_bytes(config.read_bytes())
    return path


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    """Checkpoints of the published Qwen3 tokenizer: "padded" (GGUF's [PAD] entries), "zzqx" (also "Zzqx",
    a whole pre-token its merges do not build), built once."""
    data = json.loads((_files("qwen3") / "tokenizer.json").read_text(encoding="utf-8"))
    root = tmp_path_factory.mktemp("reach")
    return {"padded": _checkpoint(root / "padded", _padded(data)),
            "zzqx": _checkpoint(root / "zzqx", _padded(data, ["Zzqx"]))}


def _add(src: Path, out: Path, *args: str) -> dict:
    r = CliRunner().invoke(cli, ["add", "--json", "-q", "--no-validate", *args, str(src), str(out)])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


# --- which pieces can be a whole pre-token


@pytest.mark.parametrize("name", ["llama3", "qwen3", "gpt2"])
def test_the_published_layouts_are_known_and_gguf_pad_entries_can_never_be_a_whole_pre_token(name):
    pre = _pre(name)
    assert split_pattern(pre) == (GPT2_PATTERN if name == "gpt2" else pre["pretokenizers"][0]["pattern"]["Regex"])
    reach = WholePreTokens.of(pre)
    assert reach is not None
    for piece in ("[PAD151665]", "[PAD151935]", "[PAD0]", "PAD1", "a1", "[1]",  # a digit is a pre-token of its own
                  "Ã", byte_level("É")[:1], byte_level("Москва")[:3],  # not whole characters
                  "[PAD]", "<|endoftext|>", "Frodo Baggins"):  # several pre-tokens / " " is not a byte symbol
        assert not reach.can_be_whole(piece), piece
    for text in ("Zzqx", " Zzqx", "Éowyn", " Москва", "]", "1", "'s", "\n\n", "   ", ",", " ,",
                 "\u0558!\u0558"):  # U+0558: a letter for the `regex` package, not for Oniguruma (the tokenizer's)
        assert reach.can_be_whole(byte_level(text)), text


def test_layouts_and_patterns_it_cannot_vouch_for_keep_the_strict_rule():
    split = {"type": "Split", "pattern": {"Regex": r"\p{L}+|\p{N}|\s+|[^\s\p{L}\p{N}]+"}, "behavior": "Isolated",
             "invert": False}
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    seq = {"type": "Sequence", "pretokenizers": [split, level]}
    assert WholePreTokens.of(seq) is not None
    for pre in (
        {"type": "ByteLevel", "use_regex": False},  # the whole text is one pre-token
        {"type": "Sequence", "pretokenizers": [{**split, "behavior": "MergedWithPrevious"}, level]},
        {"type": "Sequence", "pretokenizers": [{**split, "invert": True}, level]},
        {"type": "Sequence", "pretokenizers": [{**split, "pattern": {"String": " "}}, level]},
        {"type": "Sequence", "pretokenizers": [split, {**level, "add_prefix_space": True}]},  # " " + each piece
        {"type": "Sequence", "pretokenizers": [split, split, level]},
        {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, level]},
        {"type": "Sequence", "pretokenizers": [{**split, "pattern": {"Regex": r"a*|."}}, level]},  # empty matches
        None,
    ):
        assert WholePreTokens.of(pre) is None, pre
    # a pattern that leaves gaps (",;" between matches is a pre-token too): a gap is reachable where no match starts
    gappy = WholePreTokens.of({"type": "Sequence", "pretokenizers": [{**split, "pattern": {"Regex": r"\p{L}+|\d"}},
                                                                     level]})
    assert gappy.can_be_whole(",") and gappy.can_be_whole(byte_level(", ;")) and gappy.can_be_whole("ab")
    assert not gappy.can_be_whole("a1") and not gappy.can_be_whole("12") and not gappy.can_be_whole("a,")
    for pattern in (r"\w+(?=\s)", r"(?<=a)b", r"\bx", r"^x", r"x$", r"\Ax", r"x\z", r"(a)\1", r"a*+b", r"a++",
                    r"\p{N}{1,3}+", r"(?>ab|a)", r"\Kx", r"(?x: a )", r"(?i)x", r"[]x]", r"x\R", r"(?<n>x)"):
        assert context_variants(pattern) is None, pattern
    assert context_variants(r"[^\s(?=]+|\s+(?!\S)") == (r"[^\s(?=]+|\s+(?!)", r"[^\s(?=]+|\s+")


def _sweep() -> str:
    """Every character of the Basic Multilingual Plane's first 0x3000 code points and a sample of the rest (where
    Unicode versions differ), each in a few contexts."""
    cps = [*range(0x20, 0x3000), *range(0x3000, 0x110000, 97)]
    return "".join(f"!{c}a{c} {c}1{c}{c}\n'{c}({c}) " for c in map(chr, cps) if not 0xD800 <= ord(c) <= 0xDFFF)


@pytest.mark.parametrize("name", ["llama3", "qwen3", "gpt2"])
def test_every_pre_token_the_tokenizer_makes_is_one_the_rule_calls_reachable(name):
    """The rule against the pre-tokenizer itself: every pre-token of corpus text and of a Unicode sweep passes
    (no false "never"), and the pieces it calls unreachable are no pre-token of themselves in any context."""
    files = _files(name)
    tok = Tokenizer.from_file(str(files / "tokenizer.json"))
    reach = WholePreTokens.of(_pre(name))
    texts = [*OLD_TEXTS, (FIXTURES / "corpus_lotr.txt").read_text(encoding="utf-8"), _sweep()]
    seen = {p for t in texts for p, _ in tok.pre_tokenizer.pre_tokenize_str(t)}
    assert len(seen) > 20000
    missed = [p for p in seen if not reach.can_be_whole(p)]
    assert missed == [], missed[:10]
    vocab = tok.get_vocab(with_added_tokens=False)
    never = [p for p in [*vocab, *(f"[PAD{i}]" for i in range(151665, ROWS))] if not reach.can_be_whole(p)]
    assert any(p.startswith("[PAD") for p in never) and len(never) > 100
    for p in never[::7]:
        raw = bytes_of(p) or b""
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            continue  # not whole characters: a pre-token never is
        for c in ("{}", " {}", "x{}y", "({})", '"{}"', "{}\n", "1{}1", "a{} b", "{}.", "'{}'"):
            assert p not in [s for s, _ in tok.pre_tokenizer.pre_tokenize_str(c.format(text))], (p, c)


# --- what `add` makes of it


def test_gguf_pad_entries_no_longer_make_every_word_that_needs_ignore_merges_skipped(qwen, tmp_path):
    src = qwen["padded"]
    ed = TokenizerEditor(src)
    bpe = ed.tok.model
    pads = [p for p in ed.vocab if p.startswith("[PAD")]
    assert len(pads) > 250 and all([t.value for t in bpe.tokenize(p)] != [p] for p in pads)
    assert ed.family.merges_are_redundant()
    summary = _add(src, tmp_path / "out", *[a for w in NAMES for a in ("-t", w)])
    assert summary["skipped"] == [] and {a["token"] for a in summary["added"]} == set(NAMES)
    assert all(WHY not in n for n in summary["tokenizer_notes"]), summary["tokenizer_notes"]
    old, new = AutoTokenizer.from_pretrained(src), AutoTokenizer.from_pretrained(tmp_path / "out")
    ids = {w: {a["id"] for a in summary["added"] if a["token"] == w} for w in NAMES}
    for w in NAMES:  # a form that was one token already (" Москва")
        for form in (w, " " + w):
            one = old(form, add_special_tokens=False)["input_ids"]
            ids[w] |= set(one) if len(one) == 1 else set()
    contexts = summary["contexts_not_one_token"]
    mechanism = {a["token"]: a["mechanism"] for a in summary["added"] if a["form"] == a["token"]}  # the bare form's
    pre = Tokenizer.from_file(str(src / "tokenizer.json")).pre_tokenizer
    for w in NAMES:
        for c in ("{}", " {}", "{} went home.", "I saw {}.", "{}, and more", "({})", '"{}"', "[{}]", "'{}'", "-{}-"):
            text = c.format(w)
            got = new(text, add_special_tokens=False)["input_ids"]
            assert new.decode(got) == text, (w, text)
            pieces = [p for p, _ in pre.pre_tokenize_str(text)]
            if byte_level(w) not in pieces and byte_level(" " + w) not in pieces:
                # Qwen's regex joins "(" or "[" to the word ("(Éowyn" is one pre-token): an entry that only
                # ignore_merges reaches is not reached there, so the word keeps its old pieces; a merge applies
                # where BPE stops at its two pieces, an added token everywhere (reported where not one token)
                if mechanism.get(w) == "vocab" or text in contexts.get(w, ()):
                    assert got == old(text, add_special_tokens=False)["input_ids"], (w, text)
                    continue
            assert text not in contexts.get(w, ()), (w, text)
            assert sum(i in ids[w] for i in got) == 1, (w, text, new.convert_ids_to_tokens(got))
            if text in (w, " " + w):
                assert len(got) == 1, (w, text, new.convert_ids_to_tokens(got))
    assert all(set(v) <= {c.template.format(w=w) for c in CONTEXT_TABLE if c.soft} for w, v in contexts.items()), contexts
    for text in OLD_TEXTS:
        assert new(text)["input_ids"] == old(text)["input_ids"], text[:60]
        assert new.decode(new(text)["input_ids"]) == old.decode(old(text)["input_ids"])


def test_without_the_rule_only_the_word_that_needs_ignore_merges_is_skipped(qwen, monkeypatch):
    """Without the pre-token analysis (every entry must be rebuilt, as before #20's fix) the garbled bare forms are
    added tokens spelled as bytes for the decoder (issue 32), kept as before; only "Москва" needs ignore_merges
    (its bare form has three pieces, and an added token would split " Москва", one token already)."""
    monkeypatch.setattr(byte_level_bpe, "split_pattern", lambda pre: None)
    ed = TokenizerEditor(qwen["padded"])
    assert not ed.family.merges_are_redundant()
    plan = ed.plan([*NAMES, "Frodo"], chat=[])
    assert {t.text for t in plan.new} == {*NAMES[:-1], "Frodo"}
    assert all(t.mechanism in ("added", "merge") for t in plan.new)
    assert plan.skipped == [{"token": "Москва", "reason": (
        "already one token after a space (' Москва'); its bare form would split that token as an added token, and "
        f"cannot be a vocabulary entry: {WHY}")}]


def test_a_reachable_entry_its_merges_do_not_build_still_blocks_ignore_merges(qwen, tmp_path):
    src = qwen["zzqx"]
    ed = TokenizerEditor(src)
    assert [t.value for t in ed.tok.model.tokenize("Zzqx")] != ["Zzqx"]
    assert [p for p, _ in ed.tok.pre_tokenizer.pre_tokenize_str("Zzqx")] == ["Zzqx"]  # ignore_merges would take it
    assert not ed.family.merges_are_redundant()
    summary = _add(src, tmp_path / "out", "--dry-run", "-t", "Éowyn", "-t", "Москва", "-t", "Frodo")
    assert {s["token"]: s["reason"] for s in summary["skipped"]} == {
        "Москва": f"already one token after a space (' Москва'); its bare form would split that token as an added "
                  f"token, and cannot be a vocabulary entry: {WHY}"}
    assert {a["token"] for a in summary["added"]} == {"Frodo", "Éowyn"}  # Éowyn: added tokens (issue 32)


def test_a_qwen2_checkpoint_keeps_only_words_that_survive_the_class_transformers_forces_on_it(qwen, tmp_path):
    """The real Qwen2.5 checkpoint of issue #20 is model_type qwen2, which transformers 5 loads with Qwen2Tokenizer
    whatever tokenizer_class says; that class rebuilds BPE from vocab and merges without ignore_merges. So a word
    that needed a vocabulary entry there is made of one merge where it can be (two pieces), else skipped with that
    reason; every kept word is one token through AutoTokenizer, and old text keeps AutoTokenizer's ids."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    src = tmp_path / "qwen2"
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=ROWS, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    Qwen2ForCausalLM(cfg).save_pretrained(src)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (src / f).write_bytes((qwen["padded"] / f).read_bytes())
    assert TokenizerEditor(src).forced_class() == "Qwen2Tokenizer"
    words = NAMES + ["Frodo", "Gandalf"]
    summary = _add(src, tmp_path / "out", *[a for w in words for a in ("-t", w)])
    kept = {a["token"] for a in summary["added"]}
    skipped = {s["token"]: s["reason"] for s in summary["skipped"]}
    assert {"Frodo", "Gandalf"} <= kept and kept | set(skipped) == set(words)
    assert all("Qwen2Tokenizer" in r and "ignore_merges" in r for r in skipped.values()), skipped
    old, new = AutoTokenizer.from_pretrained(src), AutoTokenizer.from_pretrained(tmp_path / "out")
    assert type(new).__name__ == "Qwen2Tokenizer"
    for w in kept:
        for text in (w, " " + w, f"I met {w}."):
            ids = new(text, add_special_tokens=False)["input_ids"]
            assert any(new.decode([i]).strip() == w for i in ids) and new.decode(ids) == text, (text, ids)
    corpus = (FIXTURES / "corpus.txt").read_text(encoding="utf-8")
    assert new(corpus)["input_ids"] == old(corpus)["input_ids"]
