"""extend_bench: a run of some sizes keeps the table's other rows, read back from RESULTS.md as written."""

from __future__ import annotations

from bench import extend_bench


def _row(tokenizer: str, lang: str, n: int, extend: float) -> dict:
    return {"tokenizer": tokenizer, "lang": lang, "n": n, "corpus_mb": 7.7, "original": 0.5788, "extend": extend,
            "kept": 0.2275, "recipe": 0.2503, "extend_tokens": n, "recipe_tokens": 761, "extend_changed": 30,
            "kept_changed": 2, "recipe_changed": 1288, "seconds": 20.5, "load": "14.73", "outside_keep": 0,
            "held_new_share": 0.89, "kept_new": 0.2301, "recipe_new": 0.2512}


def test_a_run_of_one_size_keeps_the_other_rows_of_the_table(tmp_path):
    results = tmp_path / "RESULTS.md"
    before_columns = {"outside_keep": None, "held_new_share": None, "kept_new": None, "recipe_new": None}
    old = [_row("gpt2", "ru", 1000, 0.2212), _row("llama2", "ja", 8000, 0.1518),
           {**_row("gpt2", "ja", 32000, 0.1), **before_columns}]  # a row written before the keep-text columns
    text = extend_bench._table(old, 2012)
    results.write_text(f"# R\n\n{extend_bench.BEGIN}\n{text}\n{extend_bench.END}\n", encoding="utf-8")
    assert extend_bench._published_rows(results) == old
    new = [_row("gpt2", "ja", 32000, 0.2), _row("llama2", "ru", 32000, 0.1069)]
    merged = extend_bench._merged(extend_bench._published_rows(results), new)
    assert [(r["tokenizer"], r["lang"], r["n"], r["extend"]) for r in merged] == [
        ("gpt2", "ru", 1000, 0.2212), ("gpt2", "ja", 32000, 0.2), ("llama2", "ru", 32000, 0.1069),
        ("llama2", "ja", 8000, 0.1518)]
