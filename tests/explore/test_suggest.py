"""`vocabsurgeon suggest`: the ranking against a brute-force count, add's skips, the projection, streaming, the CLI."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from builders import tiny_gpt2, training_text
from click.testing import CliRunner
from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)

import vocabsurgeon.corpus as corpus_module
import vocabsurgeon.explore.suggest as suggest_module
from vocabsurgeon.cli.commands import cli
from vocabsurgeon.corpus import Reader, counting_tokenizer
from vocabsurgeon.explore.suggest import (
    count_split_words,
    rank,
    suggest_tokens,
)
from vocabsurgeon.tokenizer.editor import TokenizerEditor

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "fixtures"
CORPUS = FIXTURES / "corpus_lotr.txt"
LOTR = (FIXTURES / "lotr.txt").read_text(encoding="utf-8").split()


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def brute_force(ckpt: Path, text: str, min_count: int = 2) -> list[tuple[str, int, int]]:
    """(word, count, saving) of every multi-piece word, best first, by another route than suggest:
    the whole text pre-tokenized at once, each pre-token's pieces from the BPE model itself."""
    tok = Tokenizer.from_file(str(ckpt / "tokenizer.json"))
    count, saving = Counter(), Counter()
    for pre, (start, end) in tok.pre_tokenizer.pre_tokenize_str(text):
        pieces = len(tok.model.tokenize(pre))
        span = text[start:end]
        word = span.removeprefix(" ")
        if pieces >= 2 and word and not any(c.isspace() for c in word) and any(c.isalnum() for c in word):
            count[word] += 1
            saving[word] += pieces - 1
    ranked = sorted((w for w in count if count[w] >= min_count), key=lambda w: (-saving[w], -count[w], w))
    return [(w, count[w], saving[w]) for w in ranked]


@pytest.mark.parametrize("name", ["gpt2-tiny", "llama-tiny"])
def test_suggest_proposes_the_words_that_save_the_most(name):
    ckpt = FIXTURES / name
    text = CORPUS.read_text(encoding="utf-8")
    expected = brute_force(ckpt, text)
    skipped = {s["token"] for s in TokenizerEditor(ckpt).plan([w for w, _, _ in expected]).skipped}
    expected = [e for e in expected if e[0] not in skipped]
    s = suggest_tokens(ckpt, CORPUS, top=20)
    assert [(c.word, c.count, c.saving) for c in s.words] == expected[:20]
    # the invented names of the fixture are the corpus's costliest words: all 12 lead the list
    assert set(LOTR) <= {c.word for c in s.words[:14]}


@pytest.mark.parametrize("name", ["gpt2-tiny", "llama-tiny"])
def test_json_figures_add_up(name):
    r = run("suggest", FIXTURES / name, "--corpus", CORPUS, "--top", 30, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["corpus_bytes"] == CORPUS.stat().st_size
    assert d["tokens_before"] - d["tokens_after"] == sum(w["saving"] for w in d["words"]) > 0
    assert d["tokens_per_byte"] == {"before": d["tokens_before"] / d["corpus_bytes"],
                                    "after": d["tokens_after"] / d["corpus_bytes"]}
    for w in d["words"]:
        assert w["saving"] == round(w["count"] * (w["pieces"] - 1)) and w["count"] >= 2 and w["pieces"] >= 2
    assert len(d["words"]) == 30 and [w["saving"] for w in d["words"]] == sorted((w["saving"] for w in d["words"]),
                                                                                 reverse=True)
    # tokens before: the corpus as the tokenizer encodes it, give or take the newlines between paragraphs
    tok = Tokenizer.from_file(str(FIXTURES / name / "tokenizer.json"))
    text = CORPUS.read_text(encoding="utf-8")
    assert abs(d["tokens_before"] - len(tok.encode(text, add_special_tokens=False).ids)) <= text.count("\n\n")


@pytest.mark.parametrize("name", ["gpt2-tiny", "llama-tiny"])
def test_add_skips_nothing_that_suggest_proposes(name, tmp_path):
    out = tmp_path / "tokens.txt"
    r = run("suggest", FIXTURES / name, "--corpus", CORPUS, "--top", 1000, "--min-count", 1, "-o", out)
    assert r.exit_code == 0, r.output
    words = out.read_text(encoding="utf-8").splitlines()
    assert len(words) > 50 and r.stdout == ""
    r = run("add", "--tokens", out, "--dry-run", "--json", FIXTURES / name, tmp_path / "out")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["skipped"] == [] and {a["token"] for a in d["added"]} == set(words)


@pytest.fixture
def no_merge_ckpt(tmp_path):
    """A byte-level checkpoint whose last merge is gone: ignore_merges would change its text, so a
    word that is one token after a space (" default") but several bare is one that add skips."""
    ckpt = tiny_gpt2(tmp_path / "ckpt")
    data = json.loads((ckpt / "tokenizer.json").read_text(encoding="utf-8"))
    data["model"]["merges"].pop()
    (ckpt / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    ed = TokenizerEditor(ckpt)
    word = next(w for w in ("default", "argument") if len(ed.encode(w)) >= 3 and "Ġ" + w in ed.vocab)
    return ckpt, word


def test_a_word_that_add_would_skip_is_not_proposed(no_merge_ckpt, tmp_path):
    ckpt, word = no_merge_ckpt
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(f"({word}) ({word}) Frodo said, and {word}.\n" * 20, encoding="utf-8")
    d = json.loads(run("suggest", ckpt, "--corpus", corpus, "--json").stdout)
    assert word not in [w["word"] for w in d["words"]] and "Frodo" in [w["word"] for w in d["words"]]
    [skip] = [s for s in d["skipped"] if s["word"] == word]
    assert skip["count"] == 40 and skip["saving"] > max(w["saving"] for w in d["words"])  # the best, but skipped
    assert skip["reason"].startswith(f"already one token after a space (' {word}')")
    # the projection counts only what is proposed
    assert d["tokens_before"] - d["tokens_after"] == sum(w["saving"] for w in d["words"])
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("".join(w["word"] + "\n" for w in d["words"]), encoding="utf-8")
    assert json.loads(run("add", "--tokens", tokens, "--dry-run", "--json", ckpt, tmp_path / "o").stdout)["skipped"] == []


# ---------------------------------------------------------------------------------------------
# Streaming


TRICKY = ("Éowyn rode to Edoras; Éowyn's horse was naïve.\r\n   \r\n\tThéoden  king said: \"Éowyn!\"\n"
          "\n\n(Frodo)Frodo Frodo.Frodo\n" + "Samwise and Frodo walked on " * 40 + "\n\nend")


@pytest.mark.parametrize("name", ["gpt2-tiny", "llama-tiny"])
def test_counts_do_not_depend_on_the_chunk_or_read_size(name, tmp_path, monkeypatch):
    corpus = tmp_path / "c.txt"
    corpus.write_text("\ufeff" + CORPUS.read_text(encoding="utf-8") + TRICKY, encoding="utf-8")
    tok = counting_tokenizer(FIXTURES / name)
    big = count_split_words(tok, corpus)
    assert big.bytes == corpus.stat().st_size - 3  # the BOM is not text
    monkeypatch.setattr(corpus_module, "READ_BYTES", 5)  # partial lines, UTF-8 characters cut in two
    seen = []
    for chunk in (16, 100, 4096):
        small = count_split_words(tok, corpus, chunk_chars=chunk, progress=seen.append)
        assert (small.tokens, small.bytes, small.occurrences) == (big.tokens, big.bytes, big.occurrences), chunk
        assert sum(seen) == corpus.stat().st_size
        seen.clear()
    s = big.occurrences
    assert s[" Frodo", 4] > 0 and s["Éowyn", len(tok.encode("Éowyn", add_special_tokens=False).ids)] == 2


@pytest.mark.parametrize("limit", [1, 7, 64])
def test_the_reader_gives_back_the_text_in_bounded_pieces(limit, tmp_path, monkeypatch):
    corpus = tmp_path / "c.txt"
    corpus.write_text("\ufeff" + TRICKY, encoding="utf-8")
    monkeypatch.setattr(corpus_module, "READ_BYTES", 3)
    items = list(Reader(corpus, limit))
    assert "".join(items) == TRICKY and max(map(len, items)) <= limit
    # a paragraph starts after blank lines (and an item that fits one, is one)
    assert any(i.startswith("(Frodo)") for i in items) or limit < len("(Frodo)")


def test_padding_and_truncation_of_the_tokenizer_are_turned_off(tmp_path):
    ckpt = Path(shutil.copytree(FIXTURES / "gpt2-tiny", tmp_path / "st"))
    tok = Tokenizer.from_file(str(ckpt / "tokenizer.json"))
    tok.enable_truncation(max_length=8)
    tok.enable_padding(length=16, pad_id=2047, pad_token="<|endoftext|>")
    tok.save(str(ckpt / "tokenizer.json"))
    shipped = Tokenizer.from_file(str(ckpt / "tokenizer.json")).encode_batch(["Frodo " * 20])[0]
    assert len(shipped.ids) == 16 and sum(shipped.attention_mask) == 8  # as shipped, it would count 8 of 80 tokens
    shipped = suggest_tokens(ckpt, CORPUS, top=50).to_dict()
    plain = suggest_tokens(FIXTURES / "gpt2-tiny", CORPUS, top=50).to_dict()
    assert shipped.pop("checkpoint") != plain.pop("checkpoint")
    assert shipped == plain


# ---------------------------------------------------------------------------------------------
# Families that keep whole text in one pre-token, and normalizers


def _sp_bpe(prepend_scheme: str = "first") -> Tokenizer:
    """A Llama 2 style BPE: Metaspace without splitting (the whole text is one pre-token), byte fallback;
    trained on words, as SentencePiece trains, then loaded as transformers' LlamaTokenizer builds it."""
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=prepend_scheme, split=True)
    specials = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    tok.train_from_iterator(training_text(), trainers.BpeTrainer(vocab_size=700, special_tokens=specials,
                                                                 show_progress=False))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=prepend_scheme, split=False)
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme=prepend_scheme, split=False)
    return tok


def test_sentencepiece_words_are_the_pieces_between_word_starts(tmp_path):
    tok = _sp_bpe()
    corpus = tmp_path / "c.txt"
    corpus.write_text('Frodo, said "Frodo" (Frodo) and Frodo. Éowyn saw Frodo\n', encoding="utf-8")
    occ = count_split_words(tok, corpus).occurrences
    frodo = {span: n for (span, _), n in occ.items() if "Frodo" in span}
    # punctuation is not part of the word; the word-start form carries its space
    assert frodo == {"Frodo": 3, " Frodo": 2}
    assert [c.word for c in rank(count_split_words(tok, corpus), tok, min_count=2)][:1] == ["Frodo"]
    assert ("Éowyn" in {span.strip() for span, _ in occ})


def test_spellings_that_normalize_alike_are_one_candidate(tmp_path):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(training_text(), trainers.WordPieceTrainer(vocab_size=600, show_progress=False,
                                                                       special_tokens=["[UNK]"]))
    corpus = tmp_path / "c.txt"
    corpus.write_text("Frodo and frodo, FRODO! Frodo.\n", encoding="utf-8")
    [frodo] = [c for c in rank(count_split_words(tok, corpus), tok, min_count=1) if c.word.lower() == "frodo"]
    assert frodo.word == "Frodo" and frodo.count == 4


# ---------------------------------------------------------------------------------------------
# The command line


def test_cli_prints_a_tokens_file_and_a_summary(tmp_path):
    r = run("suggest", FIXTURES / "gpt2-tiny", "--corpus", CORPUS, "--top", 3)
    assert r.exit_code == 0, r.output
    assert r.stdout == "Frodo\nGollum\nAragorn\n"
    # the summary (a word of the plan's candidates may be reported first: a context where it keeps its pieces)
    assert any(line.startswith("3 words proposed (of ") for line in r.stderr.splitlines())
    assert "tokens per byte " in r.stderr
    r = run("suggest", "-q", FIXTURES / "gpt2-tiny", "--corpus", CORPUS, "--top", 3)
    assert r.stdout == "Frodo\nGollum\nAragorn\n" and r.stderr == ""


def test_cli_refuses_a_missing_corpus(tmp_path):
    r = run("suggest", FIXTURES / "gpt2-tiny", "--corpus", tmp_path / "nope.txt")
    assert r.exit_code == 2
    assert r.stderr.strip() == (f"Error: {tmp_path / 'nope.txt'}: cannot read the corpus (No such file or directory); "
                                "pass a UTF-8 text file to --corpus")


def test_cli_refuses_an_empty_corpus(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"\xef\xbb\xbf")  # a BOM and nothing else
    r = run("suggest", FIXTURES / "gpt2-tiny", "--corpus", empty, "--json")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines()[-1] == (f"Error: {empty}: the corpus is empty; pass a UTF-8 text file with "
                                                  "the domain's text to --corpus")  # after the progress of its count


def test_cli_refuses_a_corpus_that_is_not_utf8(tmp_path):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("Frodo and Éowyn\n".encode("latin-1"))
    r = run("suggest", FIXTURES / "gpt2-tiny", "--corpus", bad)
    assert r.exit_code == 2
    assert r.stderr.strip() == f"Error: {bad}: invalid UTF-8 at byte 10; save the corpus as UTF-8"


def test_cli_says_when_nothing_saves_a_token(tmp_path):
    plain = tmp_path / "plain.txt"
    plain.write_text("the the the\n", encoding="utf-8")
    r = run("suggest", FIXTURES / "gpt2-tiny", "--corpus", plain, "-o", tmp_path / "t.txt")
    assert r.exit_code == 0 and (tmp_path / "t.txt").read_text() == ""
    assert r.stderr.splitlines()[-1] == f"No word of {plain} saves a token; nothing to propose."


def _unigram() -> Tokenizer:
    """A T5 style Unigram: NFKC, whitespace split, "▁" word starts."""
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")])
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tok.train_from_iterator(training_text(), trainers.UnigramTrainer(
        vocab_size=600, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>", show_progress=False))
    return tok


def _wordpiece_uncased() -> Tokenizer:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(training_text(), trainers.WordPieceTrainer(
        vocab_size=600, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"], show_progress=False))
    return tok


def _llama2() -> object:
    """The SentencePiece BPE as a Llama 2 checkpoint ships it: transformers' LlamaTokenizer built from
    vocab and merges (Metaspace without splitting, byte-fallback decoder)."""
    from transformers import LlamaTokenizer

    model = json.loads(_sp_bpe().to_str())["model"]
    return LlamaTokenizer(vocab=model["vocab"], merges=[tuple(m) for m in model["merges"]])


def _checkpoint(path: Path, tok) -> Path:
    """A tiny tied Llama with `tok` (a tokenizers object, loaded as written, or a transformers one)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    if isinstance(tok, Tokenizer):
        tok = PreTrainedTokenizerFast(tokenizer_object=tok)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    LlamaForCausalLM(cfg).eval().save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.mark.parametrize("family", ["sentencepiece-bpe", "unigram", "wordpiece-uncased"])
def test_other_families_get_words_that_add_takes_whole(family, tmp_path):
    tok = {"sentencepiece-bpe": _llama2, "unigram": _unigram, "wordpiece-uncased": _wordpiece_uncased}[family]()
    ckpt = _checkpoint(tmp_path / "ckpt", tok)
    out = tmp_path / "tokens.txt"
    r = run("suggest", ckpt, "--corpus", CORPUS, "--top", 40, "-o", out, "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    words = out.read_text(encoding="utf-8").splitlines()
    assert words == [w["word"] for w in d["words"]] and len(words) >= 10
    assert not any(c in w for w in words for c in " ▁,.;:\"'")
    r = run("add", "--tokens", out, "--dry-run", "--json", ckpt, tmp_path / "out")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["skipped"] == []


def test_the_bench_script_measures_and_writes_its_block(tmp_path):
    import subprocess
    import sys

    results = tmp_path / "RESULTS.md"
    results.write_text("# Results\n\nprose\n\n<!-- suggest:begin -->\nold\n<!-- suggest:end -->\n\nkept\n")
    proc = subprocess.run([sys.executable, "-m", "bench.suggest_bench", "--size", "tiny", "--mb", "0.2",
                           "--repeats", "1", "--work", str(tmp_path), "--results", str(results)],
                          check=False, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = results.read_text()
    assert text.startswith("# Results\n\nprose\n\n<!-- suggest:begin -->\n\nGenerated by") and text.endswith(
        "<!-- suggest:end -->\n\nkept\n") and "old" not in text
    [row] = [line for line in text.splitlines() if line.startswith("| 0.2 MB |")]
    assert "1,280 ids" in text and " MiB | " in row and " -> " in row


def test_cli_defaults_are_the_library_defaults():
    defaults = {p.name: p.default for p in cli.commands["suggest"].params}
    assert (defaults["top"], defaults["min_count"]) == (suggest_module.DEFAULT_TOP, suggest_module.DEFAULT_MIN_COUNT)


def test_the_projection_is_what_add_then_delivers_on_the_fixture(tmp_path):
    tokens = tmp_path / "tokens.txt"
    r = run("suggest", FIXTURES / "gpt2-tiny", "--corpus", CORPUS, "--top", 30, "-o", tokens, "--json")
    d = json.loads(r.stdout)
    assert run("add", "-q", "--no-validate", "--tokens", tokens, FIXTURES / "gpt2-tiny", tmp_path / "out").exit_code == 0
    # the corpus has no word that contains a proposed word, so the projection is exact here
    after = count_split_words(counting_tokenizer(tmp_path / "out"), CORPUS)
    assert after.tokens == d["tokens_after"] < d["tokens_before"]


def test_words_a_tokens_file_cannot_hold_are_not_candidates():
    occurrences = Counter({("Frodo", 4): 5, ("#include", 3): 9, ("\\#x", 3): 9, ("...", 3): 9, ("a\tb", 3): 9,
                           ("  Frodo", 4): 9, (" Frodo", 4): 2, ("x" * 300, 9): 9})
    counts = suggest_module.CorpusCounts(CORPUS, 100, 50, occurrences)
    assert [(c.word, c.count, c.saving) for c in rank(counts, min_count=1)] == [("Frodo", 7, 21), ("#include", 9, 18)]


def test_a_hash_word_is_written_escaped_and_read_back_as_itself(tmp_path):
    from vocabsurgeon.add.wordlist import read_tokens_file

    words = [suggest_module.Candidate("#include", 3, 9), suggest_module.Candidate("Frodo", 2, 8)]
    path = tmp_path / "tokens.txt"
    counts = suggest_module.CorpusCounts(CORPUS, 100, 50, Counter())
    path.write_text(suggest_module.Suggestion("ckpt", counts, words).tokens_file(), encoding="utf-8")
    assert path.read_text(encoding="utf-8") == "\\#include\nFrodo\n"
    assert read_tokens_file(path) == ["#include", "Frodo"]


def test_fragments_of_longer_identifiers_are_not_proposed_and_one_paragraph_does_not_dominate(tmp_path):
    """Issue 39: on Python docstrings `suggest` proposed REQ, BAD and INET (from REQUEST, BADGE, AF_INET6 and
    ALERT_DESCRIPTION_BAD_CERT lists), and its top words came from one paragraph's list."""
    one_list = " ".join(f"ALERT_DESCRIPTION_BAD_CERT{i} Serialization" for i in range(40))
    prose = [f"The Kubernetes controller sends a REQUEST to the REQ queue with a BADGE; BAD BADGE REQUEST {i}."
             for i in range(12)]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n\n".join([one_list, *prose, "AF_INET6 AF_INET6 INET6 AF_INET AF_INET6"]), encoding="utf-8")
    counts = count_split_words(counting_tokenizer(FIXTURES / "gpt2-tiny"), corpus)
    words = [c.word for c in rank(counts, min_count=2)]
    assert {"REQ", "BAD", "INET", "ALERT", "DESCRIPTION"}.isdisjoint(words)
    assert {"Kubernetes", "REQUEST", "BADGE"} <= set(words)
    assert words.index("Kubernetes") < words.index("Serialization")  # 12 paragraphs beat 40 times in one
    assert suggest_module.fragments(counts, ["REQ", "Kubernetes"]) == {"REQ"}
