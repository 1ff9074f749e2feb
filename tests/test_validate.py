"""Validation: `vocabsurgeon validate`, and the check that `add` runs by default.

Mean init passes and its KL agrees with an independent computation; checkpoints broken on
purpose (unit-variance new rows; zero init on a model whose logits are all very negative) fail
with exit status 3, and `inspect` flags the shifted model before any surgery.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from builders import bytelevel_tokenizer, save_checkpoint
from invariants import bound, kl_old_new
from vocabsurgeon.cli import cli
from vocabsurgeon.validate import REPORT_NAME, read_corpus

FAST = ("--max-tokens", "60")  # one forward pass per model: the tiny GPT-2 has 64 positions
WORDS = ("-t", "Frodo", "-t", "Gandalf")


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def added(src: Path, out: Path, *extra) -> Path:
    r = run("add", *WORDS, "--no-validate", "-q", *extra, src, out)
    assert r.exit_code == 0, r.output
    assert not (out / REPORT_NAME).exists()
    return out


def shifted_llama(root: Path, alpha: float = 40.0) -> tuple[Path, Path]:
    """An untied float32 tiny Llama, and the same model with every output row shifted by one vector c.

    Every logit at a position moves by the same h.c, so the distributions are unchanged while
    log Z drops by about `alpha`. A constant component in every input embedding makes the final
    hidden states point the same way, so one c makes every logit very negative.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = bytelevel_tokenizer(600)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=False,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    model = LlamaForCausalLM(cfg).eval()
    text, _ = read_corpus()
    x = torch.tensor([[tok.bos_token_id] + tok(text, add_special_tokens=False).input_ids[:200]])
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] += 1.0
        base = save_checkpoint(model, tok, root / "base")
        h = model.model(input_ids=x).last_hidden_state[0]  # (T, hidden)
        mu = h.mean(0)
        model.lm_head.weight += -alpha * mu / mu.dot(mu)
        shifted = save_checkpoint(model, tok, root / "shifted")
        logits = model(input_ids=x).logits[0]
    assert logits.max() < -10, "the shift must make every logit very negative"
    return base, shifted


@pytest.fixture(scope="module")
def shifted(tmp_path_factory):
    return shifted_llama(tmp_path_factory.mktemp("shifted"))


def independent_kl(base: Path, new: Path, max_tokens: int) -> np.ndarray:
    """KL(p_old || p_new) per position, computed here without vocabsurgeon: BOS + the first
    `max_tokens` corpus tokens under the original tokenizer, in one forward pass."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base)
    text = (Path(__file__).resolve().parent.parent / "vocabsurgeon" / "data" / "corpus.txt").read_text(encoding="utf-8")
    ids = [tok.bos_token_id] + tok(text, add_special_tokens=False).input_ids[:max_tokens]
    x = torch.tensor([ids])
    with torch.no_grad():
        lo = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)(x).logits[0]
        ln = AutoModelForCausalLM.from_pretrained(new, dtype=torch.float32)(x).logits[0]
    return kl_old_new(lo, ln).numpy()


@pytest.mark.parametrize("which", ["gpt2", "llama"])
def test_add_mean_init_passes_and_kl_agrees_with_independent_computation(which, gpt2_ckpt, llama_ckpt, tmp_path):
    src = {"gpt2": gpt2_ckpt, "llama": llama_ckpt}[which]
    out = tmp_path / "out"
    r = run("add", *WORDS, "--json", *FAST, src, out)
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    report = json.loads((out / REPORT_NAME).read_text(encoding="utf-8"))
    assert summary["validation"]["passed"] is True and report["passed"] is True
    assert report["failures"] == []
    assert summary["validation"]["report"] == str(out / REPORT_NAME)
    k, n = summary["rows_after"] - summary["rows_before"], summary["rows_before"]
    assert report["vocab"] == {"old_rows": n, "new_rows": n + k, "k": k, "new_tokens": k}
    assert report["kl"]["bound"] == pytest.approx(bound(k, n), rel=1e-12)

    kl = independent_kl(src, out, 60)
    assert report["kl"]["positions"] == kl.size == 61
    assert report["kl"]["mean"] == pytest.approx(kl.mean(), rel=1e-6, abs=1e-12)
    assert report["kl"]["max"] == pytest.approx(kl.max(), rel=1e-6, abs=1e-12)
    assert report["kl"]["p99"] == pytest.approx(np.quantile(kl, 0.99), rel=1e-6, abs=1e-12)
    assert report["kl"]["max"] <= report["kl"]["bound"] * (1 + 1e-9)
    assert report["kl"]["within_bound"] is True
    assert report["old_logits"]["unchanged"] is True and report["old_logits"]["max_abs_diff"] == 0.0
    assert report["tokenization"]["passed"] is True
    assert report["tokenization"]["new_words"] == report["tokenization"]["one_token_words"] == 2


def test_validate_json_report_keys(gpt2_ckpt, tmp_path):
    out = added(gpt2_ckpt, tmp_path / "out")
    r = run("validate", gpt2_ckpt, out, "--json", *FAST)
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["passed"] is True
    for key in ("mean", "p99", "max", "bound"):
        assert isinstance(d["kl"][key], float)
    assert 0.0 <= d["sampling"]["new_token_fraction"] <= 1.0
    assert d["sampling"]["tokens"] == 4 * 24 and d["sampling"]["new_word_prompts"] == 4
    for key in ("old_text_ids_changed", "one_token_words", "round_trip_failures", "passed"):
        assert key in d["tokenization"]
    assert d["usability"]["applicable"] is False  # the default corpus has no Frodo
    assert d["corpus"]["name"] == "default"
    # standalone validate derives the new tokens from the tokenizer: the 4 rows added
    assert d["vocab"]["new_tokens"] == d["vocab"]["k"] == 4


def test_validate_is_reproducible(gpt2_ckpt, tmp_path):
    out = added(gpt2_ckpt, tmp_path / "out", "--init", "random")
    a = json.loads(run("validate", gpt2_ckpt, out, "--json", *FAST).stdout)
    b = json.loads(run("validate", gpt2_ckpt, out, "--json", *FAST).stdout)
    assert a["sampling"] == b["sampling"] and a["kl"] == b["kl"]


def test_usability_on_a_corpus_with_the_new_words(gpt2_ckpt, tmp_path):
    out = added(gpt2_ckpt, tmp_path / "out")
    corpus = tmp_path / "lotr.txt"
    text = ("Frodo walked to the river with Gandalf, and Gandalf spoke first.\n\n"
            "The weather was cold and the road was long.\n\n"
            "Frodo said nothing. Gandalf laughed.")
    corpus.write_text(text, encoding="utf-8")
    d = json.loads(run("validate", gpt2_ckpt, out, "--json", "--corpus", corpus).stdout)
    u = d["usability"]
    assert u["applicable"] is True
    assert u["paragraphs"] == 2  # the middle one has no new word
    with_new = [p for p in text.split("\n\n") if "Frodo" in p or "Gandalf" in p]
    assert u["bytes"] == sum(len(p.encode()) for p in with_new)
    assert u["new_tokens_seen"] == sum(p.count("Frodo") + p.count("Gandalf") for p in with_new)
    assert 0 < u["bpb_old"] < 100 and 0 < u["bpb_new"] < 100 and u["new_token_bits_mean"] > 0
    assert d["tokenization"]["paragraphs_with_new_tokens"] == 2
    assert d["passed"] is True  # usability is reported, not pass/fail


def unit_variance(out: Path, k: int = 4) -> Path:
    """Overwrite the k new rows of a tied GPT-2 output with N(0, 1) rows (the old ones have std 0.02)."""
    f = out / "model.safetensors"
    tensors = load_file(f)
    w = tensors["transformer.wte.weight"]
    torch.manual_seed(1)
    w[-k:] = torch.randn(k, w.shape[1])
    save_file(tensors, f, metadata={"format": "pt"})
    return out


def test_unit_variance_new_rows_fail(gpt2_ckpt, tmp_path):
    out = unit_variance(added(gpt2_ckpt, tmp_path / "out"))
    r = run("validate", gpt2_ckpt, out, *FAST)
    assert r.exit_code == 3
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"Error: {out}: validation failed: mean KL ")
    assert "is over the limit 0.05 (--max-kl-mean)" in last
    d = json.loads(run("validate", gpt2_ckpt, out, "--json", *FAST).stdout)
    assert d["passed"] is False and d["kl"]["mean"] > d["kl"]["bound"]
    assert d["old_logits"]["unchanged"] is True  # the old rows are untouched; the new ones do the damage


def test_shifted_model_keeps_its_distribution(shifted):
    from transformers import AutoModelForCausalLM

    base, moved = shifted
    x = torch.tensor([[1, 50, 60, 70, 80, 90]])
    with torch.no_grad():
        a = AutoModelForCausalLM.from_pretrained(base)(x).logits[0].double()
        b = AutoModelForCausalLM.from_pretrained(moved)(x).logits[0].double()
    assert (b.logsumexp(-1) < a.logsumexp(-1) - 30).all()
    assert torch.allclose(a.log_softmax(-1), b.log_softmax(-1), atol=1e-4)


@pytest.mark.parametrize("model,init,code", [("base", "zeros", 0), ("shifted", "zeros", 3), ("shifted", "mean", 0)])
def test_zero_init_on_very_negative_logits_fails(shifted, model, init, code, tmp_path):
    src = shifted[0] if model == "base" else shifted[1]
    out = tmp_path / "out"
    r = run("add", *WORDS, "--init", init, *FAST, src, out)
    assert r.exit_code == code, r.output
    report = json.loads((out / REPORT_NAME).read_text(encoding="utf-8"))  # kept in place either way
    assert report["passed"] is (code == 0)
    if code:
        assert (out / "model.safetensors").exists()
        last = r.stderr.strip().splitlines()[-1]
        assert last == (
            f"Error: {out}: validation failed: {'; '.join(report['failures'])}. The output is kept for "
            f"inspection; see {out / REPORT_NAME}. Try --init mean, or pass --no-validate to skip the checks"
        )
        assert report["kl"]["mean"] > 10  # log(1 + k/Z) with log Z about -33
        # most sampled tokens are new (after a zero-embedded new token the old logits recover for a step)
        assert report["sampling"]["new_token_fraction"] > 0.5
        assert any(f.startswith("mean KL") for f in report["failures"])
        assert any("sampled after prompts without new words are new tokens" in f for f in report["failures"])


def test_add_failure_with_json_prints_the_summary_then_exits_3(shifted, tmp_path):
    out = tmp_path / "out"
    r = run("add", *WORDS, "--init", "zeros", "--json", *FAST, shifted[1], out)
    assert r.exit_code == 3
    d = json.loads(r.stdout)
    assert d["validation"]["passed"] is False and d["validation"]["failures"]
    assert d["rows_after"] == d["rows_before"] + 4


def test_inspect_flags_the_shifted_model_before_surgery(shifted):
    verdicts = {}
    for name, path in zip(("base", "shifted"), shifted):
        r = run("inspect", path, "--json", *FAST)
        assert r.exit_code == 0, r.stderr
        verdicts[name] = json.loads(r.stdout)["zero_init_risk"]["verdict"]
    assert verdicts == {"base": "safe", "shifted": "dangerous"}
    r = run("inspect", shifted[1], *FAST)
    assert "zero init is dangerous, like GPT-2 small" in r.stdout


def test_plot_writes_a_png(gpt2_ckpt, tmp_path):
    out = added(gpt2_ckpt, tmp_path / "out")
    png = tmp_path / "kl.png"
    r = run("validate", gpt2_ckpt, out, "--plot", png, *FAST)
    assert r.exit_code == 0, r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"Wrote {png}" in r.stderr


def test_plot_without_matplotlib_says_which_extra(gpt2_ckpt, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    msg = ("Error: --plot needs matplotlib, which is not installed; install the extra: "
           "pip install 'vocabsurgeon[plot]'\n")
    r = run("validate", gpt2_ckpt, gpt2_ckpt, "--plot", tmp_path / "kl.png")
    assert r.exit_code == 2 and r.stderr == msg
    out = tmp_path / "out"
    r = run("add", *WORDS, "--plot", tmp_path / "kl.png", gpt2_ckpt, out)
    assert r.exit_code == 2 and r.stderr == msg
    assert not out.exists()  # refused before any surgery


def test_validate_needs_more_rows_in_new(gpt2_ckpt):
    r = run("validate", gpt2_ckpt, gpt2_ckpt, *FAST)
    assert r.exit_code == 2
    assert r.stderr == (f"Error: {gpt2_ckpt}: vocab_size is 600, not more than the 600 of {gpt2_ckpt}; pass the "
                        "original first and the expanded checkpoint second\n")


def test_validate_bad_corpus(gpt2_ckpt, tmp_path):
    out = added(gpt2_ckpt, tmp_path / "out")
    missing = tmp_path / "nope.txt"
    r = run("validate", gpt2_ckpt, out, "--corpus", missing)
    assert r.exit_code == 2
    assert r.stderr == (f"Error: {missing}: cannot read the corpus (No such file or directory); pass a UTF-8 text "
                        "file to --corpus\n")
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"caf\xe9\n")
    r = run("validate", gpt2_ckpt, out, "--corpus", bad)
    assert r.exit_code == 2 and r.stderr == f"Error: {bad}: invalid UTF-8 at byte 3; save the corpus as UTF-8\n"


def test_thresholds_are_flags(gpt2_ckpt, tmp_path):
    out = unit_variance(added(gpt2_ckpt, tmp_path / "out"))
    assert run("validate", gpt2_ckpt, out, *FAST).exit_code == 3
    loose = ("--max-kl-mean", "1e9", "--max-kl-p99", "1e9", "--max-new-token-fraction", "1",
             "--max-stuck-fraction", "1")
    r = run("validate", gpt2_ckpt, out, *loose, *FAST)
    assert r.exit_code == 0, r.stderr
    assert r.stderr.strip().splitlines()[-1] == "Validation passed."


def test_a_limit_below_what_was_measured_fails(gpt2_ckpt, tmp_path):
    out = unit_variance(added(gpt2_ckpt, tmp_path / "out"))
    loose = ("--max-kl-mean", "1e9", "--max-kl-p99", "1e9", "--max-stuck-fraction", "1")
    d = json.loads(run("validate", gpt2_ckpt, out, "--json", *loose, *FAST).stdout)
    fraction = d["sampling"]["new_token_fraction"]
    assert fraction > 0
    r = run("validate", gpt2_ckpt, out, *loose, "--max-new-token-fraction", "0", *FAST)
    assert r.exit_code == 3
    assert r.stderr.strip().splitlines()[-1] == (
        f"Error: {out}: validation failed: {fraction:.0%} of tokens sampled after prompts without new words are new "
        "tokens (limit 0%, --max-new-token-fraction)")


def test_default_corpus_is_varied_text():
    text, name = read_corpus()
    assert name == "default" and 2000 < len(text.encode("utf-8")) < 20000
    assert "def " in text and '"' in text and any(c.isdigit() for c in text)
