"""The benchmark script keeps working: its tiny mode end to end, the generator, the RESULTS.md block.

No timing assertions: the figures are only checked to be measured (positive) and reported.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench" / "bench.py"
sys.path.insert(0, str(BENCH.parent))

import bench  # noqa: E402

CONFIGS = ["transformers", "vocabsurgeon", "vocabsurgeon --link", "floor (copy)", "floor (link)"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One run of `bench.py all --size tiny`, into a RESULTS.md that already has prose around the block."""
    work = tmp_path_factory.mktemp("bench")
    results = work / "RESULTS.md"
    results.write_text(f"# Results\n\nintro prose\n\n{bench.BEGIN}\nold figures\n{bench.END}\n\n## Where the time goes\nkept\n")
    proc = subprocess.run(
        [sys.executable, str(BENCH), "all", "--size", "tiny", "--work", str(work), "--results", str(results),
         "--many", "150"],
        capture_output=True, text=True, timeout=300,
    )
    return proc, work, results


def test_tiny_mode_runs_every_configuration_and_reports_it(tiny_run):
    proc, work, results = tiny_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((work / "results-tiny.json").read_text())
    med = data["run"]["median"]
    assert list(med) == CONFIGS
    for name, m in med.items():
        assert m["wall"] > 0 and m["rss"] > 0, name
        assert len(m["walls"]) == 1
    text = results.read_text()
    for name in CONFIGS:
        assert f"| {name} | {med[name]['wall']:.2f} s |" in text
    assert "| time: transformers / vocabsurgeon (copy) |" in text
    assert "| peak RSS: transformers / vocabsurgeon |" in text
    assert "| time: vocabsurgeon --link / floor (link) |" in text


def test_tiny_mode_keeps_the_prose_and_replaces_the_old_block(tiny_run):
    _, _, results = tiny_run
    text = results.read_text()
    assert text.startswith("# Results\n\nintro prose\n\n" + bench.BEGIN)
    assert text.endswith(bench.END + "\n\n## Where the time goes\nkept\n")
    assert "old figures" not in text
    assert text.count(bench.BEGIN) == 1


def test_tiny_mode_many_tokens_are_added_and_encode_speed_measured(tiny_run):
    _, work, results = tiny_run
    many = json.loads((work / "results-tiny.json").read_text())["many"]
    assert "error" not in many, many
    assert many["tokens"] == 150
    assert many["rows_after"] - many["rows_before"] == 300  # every word: bare and word-start forms
    # text without the new words tokenizes exactly as before; with them, in fewer ids
    assert many["plain"]["ids_after"] == many["plain"]["ids_before"]
    assert many["with_new_words"]["ids_after"] < many["with_new_words"]["ids_before"]
    assert f"**Adding {150:,} tokens in one run**" in results.read_text()


def test_tiny_mode_removes_its_outputs(tiny_run):
    _, work, _ = tiny_run
    assert not (work / "out").exists()
    assert not (work / "out-many").exists()
    assert not list(work.glob(".out*"))  # no staging directory left behind


def test_generated_checkpoint_is_a_sharded_untied_llama_with_a_matching_tokenizer(tmp_path):
    from tokenizers import Tokenizer

    from vocabsurgeon.architectures import detect
    from vocabsurgeon.checkpoint import Checkpoint

    size = bench.SIZES["tiny"]
    path = bench.generate(size, tmp_path / "ckpt")
    ckpt = Checkpoint.open(path)  # strict header and index checks
    assert len(ckpt.shards) >= 3
    layout = detect(ckpt, None, None)
    assert (layout.embedding, layout.lm_head, layout.tied) == ("model.embed_tokens.weight", "lm_head.weight", False)
    assert ckpt.tensors["model.embed_tokens.weight"].file != ckpt.tensors["lm_head.weight"].file
    assert {t.dtype for t in ckpt.tensors.values()} == {"BF16"}
    assert ckpt.tensors["lm_head.weight"].shape == (size.vocab, size.hidden)
    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    assert tok.get_vocab_size() == size.vocab
    assert tok.token_to_id(f"<|reserved_special_token_{size.specials - 3}|>") == size.vocab - 1
    assert json.loads((path / "config.json").read_text())["vocab_size"] == size.vocab
    rows = ckpt.rows_np("model.embed_tokens.weight", 0, size.vocab)
    assert (rows != 0).any() and abs(float(rows.std()) - 0.02) < 0.005  # finite random values, like a real model


def test_made_up_words_are_distinct_and_avoid_the_vocabulary():
    words = bench.make_words(300, seed=5, avoid={"Baba"})
    assert len(set(words)) == 300
    assert "Baba" not in words
    assert words == bench.make_words(300, seed=5, avoid={"Baba"})


def test_write_results_creates_the_file_with_one_block(tmp_path):
    path = tmp_path / "R.md"
    bench.write_results(path, f"{bench.BEGIN}\nA\n{bench.END}")
    bench.write_results(path, f"{bench.BEGIN}\nB\n{bench.END}")
    text = path.read_text()
    assert "B" in text and "\nA\n" not in text
    assert text.count(bench.BEGIN) == 1 and text.count(bench.END) == 1
