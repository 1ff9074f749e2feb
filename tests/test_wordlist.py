"""wordlist.py: what a tokens file may hold, and what is refused (the CLI's exact messages: test_cli.py)."""

from __future__ import annotations


import pytest

import vocabsurgeon.wordlist as wl
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
