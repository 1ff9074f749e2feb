"""wordlist.py: what a tokens file may hold, and what is refused (the CLI's exact messages: test_cli.py)."""

from __future__ import annotations


import pytest

import vocabsurgeon.add.wordlist as wl
from vocabsurgeon import InputError



@pytest.mark.parametrize("line", ["1,000", "f(a,b)", "std::map<K,V>", "x, y = 1", "10µg,", "Müller-Lyer", "«bonjour»"])
def test_tokens_with_commas_that_users_add_are_not_taken_for_csv(line, tmp_path):
    p = tmp_path / "w.txt"
    p.write_text(line + "\n", encoding="utf-8")
    assert wl.read_tokens_file(p) == [line]


@pytest.mark.parametrize("line", ["Frodo,Gandalf", "Frodo, Gandalf, Aragorn", "naïve,café", "O'Brien,Smith-Jones"])
def test_comma_separated_words_are_csv(line, tmp_path):
    p = tmp_path / "w.txt"
    p.write_text(f"Sam\n{line}\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"w.txt:2: looks like comma-separated values; write one token per line$"):
        wl.read_tokens_file(p)


def test_a_token_that_starts_with_a_bracket_is_not_json(tmp_path):
    p = tmp_path / "w.txt"
    p.write_text("[CLS]\n{x}\n[1]x\n", encoding="utf-8")
    assert wl.read_tokens_file(p) == ["[CLS]", "{x}", "[1]x"]


def test_many_problems_are_counted_past_the_listed_ones(tmp_path):
    p = tmp_path / "w.txt"
    p.write_text("".join(f" w{i}\n" for i in range(wl.MAX_LISTED + 3)), encoding="utf-8")
    with pytest.raises(InputError, match=rf"{wl.MAX_LISTED + 3} problems, fix them all.*; and 3 more$"):
        wl.read_tokens_file(p)


def test_inline_tokens_follow_the_file_and_may_not_repeat_it(tmp_path):
    p = tmp_path / "w.txt"
    p.write_text("Frodo\n", encoding="utf-8")
    assert wl.gather_tokens(p, ["Sam"]) == ["Frodo", "Sam"]
    with pytest.raises(InputError, match=r"^-t 'Frodo': token 'Frodo' is given twice; remove one$"):
        wl.gather_tokens(p, ["Frodo"])
    with pytest.raises(InputError, match="no tokens given"):
        wl.gather_tokens(None, [])


@pytest.mark.parametrize("encoding,name", [("utf-16", "UTF-16 LE"), ("utf-16-le", "UTF-16 LE"),
                                           ("utf-16-be", "UTF-16 BE"), ("utf-32", "UTF-32 LE")])
def test_a_utf16_file_is_named_as_such_in_one_line(tmp_path, encoding, name):
    # Notepad's "Unicode" and PowerShell's `>` write UTF-16; with or without a byte-order mark.
    p = tmp_path / "w.txt"
    p.write_text("Frodo\nGandalf\nSam\n", encoding=encoding)
    with pytest.raises(InputError) as e:
        wl.read_tokens_file(p)
    assert str(e.value) == f"{p}: the file is {name}; save it as UTF-8"


def test_a_comment_line_that_looks_like_a_token_gets_a_note(tmp_path, caplog):
    p = tmp_path / "w.txt"
    p.write_text("# C preprocessor\n#include\nFrodo\n", encoding="utf-8")
    with caplog.at_level("WARNING", logger="vocabsurgeon.add.wordlist"):
        assert wl.read_tokens_file(p) == ["Frodo"]
    assert caplog.messages == [
        f"{p}: 1 line starting with '#' read as a comment (#include); write \\#include for the token"]


def test_comment_lines_with_a_space_after_the_hash_get_no_note(tmp_path, caplog):
    p = tmp_path / "w.txt"
    p.write_text("# names\n## more names\n#\nFrodo\n", encoding="utf-8")
    with caplog.at_level("WARNING", logger="vocabsurgeon.add.wordlist"):
        assert wl.read_tokens_file(p) == ["Frodo"]
    assert caplog.messages == []


def test_a_list_past_the_word_limit_is_refused_with_its_count(tmp_path):
    p = tmp_path / "w.txt"
    n = wl.MAX_WORDS + 7
    p.write_text("".join(f"w{i}\n" for i in range(n)), encoding="utf-8")
    with pytest.raises(InputError) as e:
        wl.read_tokens_file(p)
    assert str(e.value).startswith(f"{p}: {n:,} words, over the limit of {wl.MAX_WORDS:,} words that one run "
                                   "can plan (the plan keeps every word's forms and pieces in memory")
    assert str(e.value).endswith("split the list and add it in several runs, or keep the words that save the most "
                                 "tokens (`vocabsurgeon suggest`)")


def test_inline_tokens_count_toward_the_word_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(wl, "MAX_WORDS", 2)
    p = tmp_path / "w.txt"
    p.write_text("Frodo\nSam\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"^the tokens: 3 words, over the limit of 2 words"):
        wl.gather_tokens(p, ["Merry"])


def test_a_huge_file_is_refused_without_being_held_in_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(wl, "MAX_WORDS", 1000)
    p = tmp_path / "w.txt"
    with open(p, "w", encoding="utf-8") as f:
        for i in range(0, 400_000, 1000):
            f.write("".join(f"word{j}\n" for j in range(i, i + 1000)))
    size = p.stat().st_size  # ~4.3 MB; read at once and split, it would take several times that
    peak = _peak_memory_of_refusal(p, r": 400,000 words, over the limit of 1,000 words")
    assert peak < size / 2, (peak, size)


def test_a_huge_file_of_bad_lines_is_refused_without_holding_every_problem(tmp_path):
    p = tmp_path / "w.txt"
    with open(p, "w", encoding="utf-8") as f:
        for i in range(0, 300_000, 1000):
            f.write("".join(f" word{j}\n" for j in range(i, i + 1000)))  # every line padded: 300,000 problems
    peak = _peak_memory_of_refusal(p, r": 300000 problems, fix them all and rerun: line 1: .*; and 299990 more$")
    assert peak < p.stat().st_size / 2, peak


def _peak_memory_of_refusal(path, message: str) -> int:
    """Peak Python memory while `read_tokens_file(path)` refuses the file with `message`."""
    import tracemalloc

    tracemalloc.start()
    try:
        with pytest.raises(InputError, match=message):
            wl.read_tokens_file(path)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
