"""Cases that published tokenizers and real word lists hit (issue 20): numbers on tokenizers that split
digits, WordPiece's word length limit, two spellings of one token in a list, byte-fallback pieces, and
tokenizer files that disagree on an id."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from builders import bytelevel_tokenizer, make_tokenizer, tiny_checkpoint
from tokenizers import Tokenizer, pre_tokenizers

from vocabsurgeon.cli.commands import cli
from vocabsurgeon.tokenizer.editor import TokenizerEditor


def _add(*args) -> tuple[int, dict | str]:
    r = CliRunner().invoke(cli, ["add", "--json", "-q", "--no-validate", *map(str, args)])
    return r.exit_code, (json.loads(r.stdout) if r.exit_code == 0 else r.stderr)


def _digit_splitting_checkpoint(path: Path) -> Path:
    """A byte-level BPE whose pre-tokenizer isolates each digit first (as Qwen and SmolLM do)."""
    src = tiny_checkpoint(path, bytelevel_tokenizer(600))
    tok = Tokenizer.from_file(str(src / "tokenizer.json"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.save(str(src / "tokenizer.json"))
    return src


def test_a_word_with_digits_is_skipped_where_numbers_are_split_and_never_suggested(tmp_path):
    src = _digit_splitting_checkpoint(tmp_path / "src")
    code, summary = _add("-t", "2022", "-t", "H2O", "-t", "Frodo", src, tmp_path / "out")
    assert code == 0, summary
    assert {a["token"] for a in summary["added"]} == {"Frodo"}
    reasons = {s["token"]: s["reason"] for s in summary["skipped"]}
    assert set(reasons) == {"2022", "H2O"}
    assert reasons["2022"].startswith("it has digits, and this tokenizer splits numbers")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("In 2022 and 2022 and 2022 the Frodo and Frodo and Frodo of 1325 and 1325 and 1325.\n" * 5)
    r = CliRunner().invoke(cli, ["suggest", "--json", "--corpus", str(corpus), str(src)])
    assert r.exit_code == 0, r.output
    words = [w["word"] for w in json.loads(r.stdout)["words"]]
    assert "Frodo" in words and not any(c.isdigit() for w in words for c in w)


def test_numbers_stay_tokens_where_the_tokenizer_keeps_them_whole(tmp_path):
    # GPT-2's pre-tokenizer keeps "1325" whole and its vocabulary has pieces of several digits
    code, summary = _add("-t", "1325", Path(__file__).resolve().parents[2] / "fixtures" / "gpt2-tiny", tmp_path / "out")
    assert code == 0 and summary["skipped"] == [], summary


def test_a_wordpiece_word_longer_than_its_limit_is_skipped_with_the_limit(tmp_path):
    src = tiny_checkpoint(tmp_path / "src", make_tokenizer("wordpiece-cased"))
    long = "Pneumono" + "x" * 100
    code, summary = _add("-t", long, "-t", "Frodo", src, tmp_path / "out")
    assert code == 0, summary
    assert summary["skipped"] == [{"token": long, "reason": (
        "it has 108 characters, more than this WordPiece's max_input_chars_per_word (100): the tokenizer reads any "
        "longer word as [UNK]")}]


def test_a_word_that_an_earlier_word_took_says_which(tmp_path):
    src = tiny_checkpoint(tmp_path / "src", make_tokenizer("wordpiece-uncased"))
    plan = TokenizerEditor(src).plan(["Frodo", "frodo"])
    assert [t.piece for t in plan.new] == ["frodo"]
    assert plan.skipped == [{"token": "frodo", "reason": (
        "the same token as 'Frodo', earlier in the list (this tokenizer stores it as that token's piece)")}]


def test_tokenizer_files_that_disagree_on_an_id_are_refused(tmp_path):
    src = tiny_checkpoint(tmp_path / "src", bytelevel_tokenizer(600))
    cfg = json.loads((src / "tokenizer_config.json").read_text())
    eos = str(json.loads((src / "tokenizer.json").read_text())["added_tokens"][0]["id"])  # <|endoftext|>
    cfg["added_tokens_decoder"] = {eos: {"content": "<|begin_of_text|>", "special": True, "normalized": False,
                                         "lstrip": False, "rstrip": False, "single_word": False}}
    (src / "tokenizer_config.json").write_text(json.dumps(cfg))
    code, err = _add("-t", "Frodo", src, tmp_path / "out")
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        f"Error: {src / 'tokenizer_config.json'}: added_tokens_decoder names id {eos} '<|begin_of_text|>', but "
        "tokenizer.json has '<|endoftext|>' there; the two files disagree, fix or re-download them")
    assert not (tmp_path / "out").exists()


def test_a_decomposed_spelling_of_a_word_in_the_list_is_the_same_word(tmp_path):
    import unicodedata

    src = tiny_checkpoint(tmp_path / "src", bytelevel_tokenizer(600))
    tok = Tokenizer.from_file(str(src / "tokenizer.json"))
    from tokenizers import normalizers

    tok.normalizer = normalizers.NFC()  # as Qwen2/3 ship it
    tok.save(str(src / "tokenizer.json"))
    nfd = unicodedata.normalize("NFD", "Müller")
    plan = TokenizerEditor(src).plan(["Müller", nfd])
    assert {t.text for t in plan.new} == {"Müller"}
    assert plan.skipped == [{"token": nfd, "reason": (
        "the tokenizer normalizes it to 'Müller' (e.g. Unicode NFC), the same as 'Müller'")}]


def test_a_unigram_word_that_nfkc_folds_into_other_text_is_skipped_when_it_would_change_that_text(tmp_path):
    src = tiny_checkpoint(tmp_path / "src", make_tokenizer("unigram-file"))  # NFKC, as T5's tokenizer.json
    plan = TokenizerEditor(src).plan(["m²", "Frodo"])
    assert {t.text for t in plan.new} == {"Frodo"}
    assert plan.skipped == [{"token": "m²", "reason": (
        "the tokenizer folds it to 'm2' (Unicode NFKC), and a new 'm2' would change how existing text with 'm2' "
        "tokenizes (e.g. 'exm2.n')")}]
