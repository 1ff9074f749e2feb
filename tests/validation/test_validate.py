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
from builders import bytelevel_tokenizer, save_checkpoint
from click.testing import CliRunner
from invariants import bound, kl_old_new
from safetensors.torch import load_file, save_file

from vocabsurgeon.cli.commands import cli
from vocabsurgeon.validation.validate import REPORT_NAME, read_corpus

FAST = ("--max-tokens", "60")  # one forward pass per model: the tiny GPT-2 has 64 positions
WORDS = ("-t", "Frodo", "-t", "Gandalf")


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def added(src: Path, out: Path, *extra) -> Path:
    r = run("add", *WORDS, "--no-validate", "-q", *extra, src, out)
    assert r.exit_code == 0, r.output
    assert json.loads((out / REPORT_NAME).read_text())["pending"] == "--no-validate"  # validate fills it in
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
    text = (Path(__file__).resolve().parents[2] / "vocabsurgeon" / "data" / "corpus.txt").read_text(encoding="utf-8")
    ids = [tok.bos_token_id] + tok(text, add_special_tokens=False).input_ids[:max_tokens]
    x = torch.tensor([ids])
    with torch.no_grad():
        lo = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)(x).logits[0]
        ln = AutoModelForCausalLM.from_pretrained(new, dtype=torch.float32)(x).logits[0]
    return kl_old_new(lo, ln).numpy()


def agreement(report: dict) -> float:
    """The relative tolerance of `report`'s KL figures against an independent float32 computation on the CPU:
    a few units of the resolution of the dtype validation ran in, on the same device (the same kernels sum in
    the same order: below 1e-6 in float32), more on another one, whose kernels sum in another order (2e-6 on
    an H100 in float32)."""
    eps = torch.finfo(getattr(torch, report["dtype"])).eps
    return (8 if str(report["device"]).startswith("cpu") else 64) * eps


@pytest.mark.floor  # also run with the oldest supported versions (.ci/run)
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
    rel = agreement(report)
    assert report["kl"]["mean"] == pytest.approx(kl.mean(), rel=rel, abs=1e-12)
    assert report["kl"]["max"] == pytest.approx(kl.max(), rel=rel, abs=1e-12)
    assert report["kl"]["p99"] == pytest.approx(np.quantile(kl, 0.99), rel=rel, abs=1e-12)
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
    kept = tmp_path / "out.rejected" if code else out  # a failed output is never published
    report = json.loads((kept / REPORT_NAME).read_text(encoding="utf-8"))
    assert report["passed"] is (code == 0)
    if code:
        assert not out.exists() and (kept / "model.safetensors").exists()
        last = r.stderr.strip().splitlines()[-1]
        assert last == (
            f"Error: {out}: validation failed: {'; '.join(report['failures'])}. {out} is as it was; the output is "
            f"kept for inspection in {kept}; see {kept / REPORT_NAME}. Try --init mean, or pass --no-validate to skip "
            "the checks"
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


# ------------------------------------------------------------------ chat templates

CHATML = ("{%- if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful AI assistant."
          "<|im_end|>\\n' }}{%- endif %}{%- for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\\n' }}{%- endif %}")


def tiny_chat(path: Path) -> Path:
    """A tiny tied Qwen2 instruct model: ChatML special tokens, and the template (with a default system
    prompt) in tokenizer_config.json, as instruct checkpoints ship it."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = bytelevel_tokenizer(600)
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.eos_token = "<|im_end|>"
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True,
                      max_position_embeddings=256, eos_token_id=tok.eos_token_id)
    path = save_checkpoint(Qwen2ForCausalLM(cfg).eval(), tok, path)
    config = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["chat_template"] = CHATML
    (path / "tokenizer_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    for f in ("chat_template.jinja", "chat_template.json"):  # transformers 5 may write the template apart
        (path / f).unlink(missing_ok=True)
    return path


@pytest.fixture(scope="module")
def chat_ckpt(tmp_path_factory):
    return tiny_chat(tmp_path_factory.mktemp("chat") / "chat")


def test_chat_samples_use_the_template_and_its_default_system_prompt(chat_ckpt, gpt2_ckpt):
    from vocabsurgeon.runtime import load_tokenizer
    from vocabsurgeon.tokenizer.chats import chat_samples, render_chats

    tok = load_tokenizer(chat_ckpt)
    samples = [text for text, _ in render_chats(tok)]
    assert len(samples) == 4
    assert samples[0] == ("<|im_start|>system\nYou are a helpful AI assistant.<|im_end|>\n<|im_start|>user\nWhat is "
                          "the capital of France?<|im_end|>\n<|im_start|>assistant\nThe capital of France is Paris."
                          "<|im_end|>\n")
    assert samples[2].startswith("<|im_start|>system\nYou are a helpful assistant. Answer briefly.<|im_end|>")
    prompts = [text for text, _ in render_chats(tok, generation_prompt=True)]
    assert len(prompts) == 4 and all(p.endswith("<|im_end|>\n<|im_start|>assistant\n") for p in prompts)
    assert chat_samples(chat_ckpt) == samples + prompts  # what add's plan keeps unchanged
    assert render_chats(load_tokenizer(gpt2_ckpt)) == [] and chat_samples(gpt2_ckpt) == []  # no template


def transformers_add(src: Path, out: Path, words: list[str], noise: float | None = None) -> Path:
    """The words added the plain transformers way (add_tokens, resize_token_embeddings, save_pretrained),
    which does not guard the chat template as `vocabsurgeon add` does: a checkpoint made elsewhere."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(src)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    tok.add_tokens(words)
    model.resize_token_embeddings(len(tok))
    if noise is not None:
        with torch.no_grad():
            torch.manual_seed(0)
            w = model.get_input_embeddings().weight
            w[-len(words):] = noise * torch.randn(len(words), w.shape[1])
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def test_add_skips_a_word_of_the_chat_template(chat_ckpt, tmp_path):
    r = run("add", "-t", "assistant", "-t", "Frodo", "--json", "--no-validate", chat_ckpt, tmp_path / "out")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert {a["token"] for a in d["added"]} == {"Frodo"}
    assert [s["token"] for s in d["skipped"]] == ["assistant"] and "chat template" in d["skipped"][0]["reason"]


def test_a_word_of_the_chat_template_added_elsewhere_fails_validation(chat_ckpt, tmp_path):
    out = transformers_add(chat_ckpt, tmp_path / "out", ["assistant"])
    r = run("validate", *FAST, "--json", chat_ckpt, out)
    assert r.exit_code == 3, r.output
    report = json.loads(r.stdout)
    t = report["tokenization"]
    # "<|im_start|>assistant" is in every conversation; the third says "assistant" in its own system
    # message, so it may change, the others may not
    assert t["chat_samples"] == 4 and t["chat_ids_changed"] == 3
    assert t["chat_new_tokens"] == ["assistant"]
    assert ("3 of 4 chat-template conversations tokenize differently: the template's text now holds new token(s) "
            "'assistant'; chat prompts change for every user (remove those words from the tokens)") in report["failures"]
    assert report["kl_chat"]["applicable"] is True and report["kl_chat"]["samples"] == 4


def test_chat_figures_agree_with_an_independent_computation(chat_ckpt, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "out"
    r = run("add", "-t", "Frodo", "--json", *FAST, chat_ckpt, out)
    assert r.exit_code == 0, r.output
    report = json.loads((out / REPORT_NAME).read_text(encoding="utf-8"))
    assert report["tokenization"]["chat_ids_changed"] == 0
    g = report["greedy_chat"]
    assert g["applicable"] is True and g["compared"] == g["prompts"] == 4 and g["differing"] == 0
    from vocabsurgeon.tokenizer.chats import CHATS

    tok = AutoTokenizer.from_pretrained(chat_ckpt)
    kl = []
    with torch.no_grad():
        base = AutoModelForCausalLM.from_pretrained(chat_ckpt, dtype=torch.float32)
        new = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
        for turns in CHATS:  # rendered and tokenized by transformers, run on both models here
            messages = [{"role": role, "content": content} for role, content in turns]
            ids = tok.apply_chat_template(messages, tokenize=True, return_dict=True)["input_ids"]
            x = torch.tensor([ids])
            kl.append(kl_old_new(base(x).logits[0], new(x).logits[0]).numpy())
    kl = np.concatenate(kl)
    c = report["kl_chat"]
    assert c["positions"] == kl.size
    rel = agreement(report)
    assert c["mean"] == pytest.approx(kl.mean(), rel=rel) and c["max"] == pytest.approx(kl.max(), rel=rel)
    assert c["max"] <= c["bound"] * (1 + 1e-9) and c["within_bound"] is True


def test_chat_greedy_answers_differ_when_the_new_rows_take_over(chat_ckpt, tmp_path):
    out = transformers_add(chat_ckpt, tmp_path / "out", ["assistant"], noise=1e4)
    r = run("validate", *FAST, "--json", chat_ckpt, out)
    assert r.exit_code == 3
    g = json.loads(r.stdout)["greedy_chat"]
    assert g["applicable"] is True and g["differing"] >= 1 and g["examples"][0]["base"] != g["examples"][0]["new"]


# ------------------------------------------------------------------ NaN and Inf, options


def poison(out: Path, rows: dict[int, float]) -> Path:
    f = out / "model.safetensors"
    tensors = load_file(f)
    for i, v in rows.items():
        tensors["transformer.wte.weight"][i] = v
    save_file(tensors, f, metadata={"format": "pt"})
    return out


@pytest.mark.parametrize("rows", [{601: float("nan"), 603: float("inf")}, {5: float("-inf")}],
                         ids=["new rows", "an old row"])
def test_nan_or_inf_rows_fail_with_their_ids(gpt2_ckpt, tmp_path, rows):
    out = poison(added(gpt2_ckpt, tmp_path / "out"), rows)
    r = run("validate", gpt2_ckpt, out, *FAST)
    assert r.exit_code == 3
    ids = ", ".join(map(str, rows))
    assert r.stderr.strip().splitlines()[-1] == (
        f"Error: {out}: validation failed: {len(rows)} row(s) hold NaN or Inf, e.g. tensor 'transformer.wte.weight' "
        f"rows {ids}; the model's outputs are not numbers (re-run add with a finite --eps, or another --init)")
    d = json.loads(run("validate", gpt2_ckpt, out, "--json", *FAST).stdout)
    assert d["finite"]["nonfinite_rows"] == {"transformer.wte.weight": list(rows)}
    assert d["kl"]["applicable"] is False and d["complete"] is False
    assert d["method"] is None and d["method_reason"] == "no model was run"  # nor read for the relation


BAD_EPS = "Error: --eps {}: the noise scale of mean-noise must be a finite number >= 0 (default 1e-05)\n"


@pytest.mark.parametrize("eps", ["nan", "inf", "-inf", "-1"])
@pytest.mark.parametrize("mode", [(), ("--dry-run",), ("--no-validate",)], ids=["run", "dry-run", "no-validate"])
def test_bad_eps_is_refused_before_any_work(gpt2_ckpt, tmp_path, eps, mode):
    out = tmp_path / "out"
    r = run("add", *WORDS, "--init", "mean-noise", "--eps", eps, *mode, gpt2_ckpt, out)
    assert r.exit_code == 2 and r.stderr == BAD_EPS.format(float(eps))
    assert not out.exists()


@pytest.mark.parametrize("args,message", [
    (("--device", "tpu"), "--device 'tpu' is not one of auto, cpu, cuda (or cuda:N)"),
    (("--max-kl-mean", "-1"), "--max-kl-mean -1.0: must be a finite number of nats >= 0"),
    (("--max-kl-p99", "nan"), "--max-kl-p99 nan: must be a finite number of nats >= 0"),
    (("--max-new-token-fraction", "1.5"), "--max-new-token-fraction 1.5: must be a fraction between 0 and 1"),
], ids=["device", "kl-mean", "kl-p99", "fraction"])
@pytest.mark.parametrize("mode", [(), ("--dry-run",), ("--no-validate",)], ids=["run", "dry-run", "no-validate"])
def test_bad_options_are_refused_before_any_work(gpt2_ckpt, tmp_path, args, message, mode):
    out = tmp_path / "out"
    r = run("add", *WORDS, *args, *mode, gpt2_ckpt, out)
    assert r.exit_code == 2 and r.stderr == f"Error: {message}\n"
    assert not out.exists()
    if not mode:
        r = run("validate", gpt2_ckpt, gpt2_ckpt, *args)  # refused before the checkpoints are even read
        assert r.exit_code == 2 and r.stderr == f"Error: {message}\n"


@pytest.mark.parametrize("mode", [(), ("--dry-run",)])
def test_plot_without_validation_is_refused(gpt2_ckpt, tmp_path, mode):
    out = tmp_path / "out"
    r = run("add", *WORDS, "--no-validate", "--plot", tmp_path / "kl.png", *mode, gpt2_ckpt, out)
    assert r.exit_code == 2
    assert r.stderr == "Error: --plot draws the validation's KL histogram; drop --no-validate or --plot\n"
    assert not out.exists()


# ------------------------------------------------------------------ one pass, two passes


@pytest.mark.parametrize("which", ["gpt2", "llama"])
def test_one_pass_gives_the_two_pass_figures(which, gpt2_ckpt, llama_ckpt, tmp_path):
    src = {"gpt2": gpt2_ckpt, "llama": llama_ckpt}[which]
    out = added(src, tmp_path / "out", "--init", "mean-noise", "--eps", "0.1")  # distinct rows, a KL above zero
    corpus = tmp_path / "c.txt"
    corpus.write_text(read_corpus()[0][:1500] + "\n\nFrodo met Gandalf. Gandalf spoke to Frodo.", encoding="utf-8")
    one, two = (json.loads(run("validate", src, out, "--json", "--method", m, "--corpus", corpus, *FAST).stdout)
                for m in ("one-pass", "two-pass"))
    assert one["method"] == "one-pass" and two["method"] == "two-pass"
    assert list(one["seconds"]) == ["tokenizers", "finite rows", "one-pass", "expanded model", "sampling"]
    assert list(two["seconds"]) == ["tokenizers", "finite rows", "two-pass", "original model", "expanded model",
                                    "sampling"]
    assert all(v >= 0 for v in one["seconds"].values())
    assert one["kl"]["positions"] == two["kl"]["positions"] == 61 and one["kl"]["mean"] > 0
    for key in ("mean", "p99", "max"):
        assert one["kl"][key] == pytest.approx(two["kl"][key], rel=1e-6, abs=1e-12)
    assert two["old_logits"]["how"] == "measured" and two["old_logits"]["max_abs_diff"] == 0.0
    assert one["old_logits"]["how"] == "files"
    assert one["sampling"] == two["sampling"]
    assert one["usability"]["applicable"] is True
    for key in ("bpb_old", "bpb_new", "new_token_bits_mean"):
        assert one["usability"][key] == pytest.approx(two["usability"][key], rel=1e-6)
    auto = json.loads(run("validate", src, out, "--json", "--corpus", corpus, *FAST).stdout)
    assert auto["method"] == "one-pass" and auto["kl"] == one["kl"]


def test_a_checkpoint_not_made_by_add_gets_two_passes(gpt2_ckpt, tmp_path):
    from vocabsurgeon.validation.validate import derived_by_add

    out = poison(added(gpt2_ckpt, tmp_path / "out"), {})
    assert derived_by_add(gpt2_ckpt, out).derived is True
    tensors = load_file(out / "model.safetensors")
    tensors["transformer.wte.weight"][5] += 1e-3  # an old row moved
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    rel = derived_by_add(gpt2_ckpt, out)
    assert rel == (False, "tensor 'transformer.wte.weight' differs from the original's in its old rows")
    d = json.loads(run("validate", gpt2_ckpt, out, "--json", *FAST).stdout)
    assert d["method"] == "two-pass" and d["method_reason"] == rel.reason
    assert d["old_logits"]["how"] == "measured" and d["old_logits"]["max_abs_diff"] > 0
    r = run("validate", gpt2_ckpt, out, "--method", "one-pass", "-q", *FAST)
    assert r.exit_code == 2 and r.stderr == (
        f"Error: {out}: one-pass validation needs a checkpoint made from {gpt2_ckpt} by add, but {rel.reason}; use "
        "the two-pass method\n")
    cfg = json.loads((out / "config.json").read_text())
    cfg["n_layer"] = 2
    (out / "config.json").write_text(json.dumps(cfg))
    assert derived_by_add(gpt2_ckpt, out) == (False, "the configs differ in more than the vocabulary size")


def test_validation_encodes_without_padding_or_truncation(gpt2_ckpt, tmp_path):
    """Tokenizers that pad to 128 and truncate at 16 tokens (as sentence-transformers ship them)."""
    out = added(gpt2_ckpt, tmp_path / "out")
    for ckpt in (gpt2_ckpt, out):
        f = ckpt / "tokenizer.json"
        t = json.loads(f.read_text(encoding="utf-8"))
        t["padding"] = {"strategy": {"Fixed": 128}, "direction": "Right", "pad_to_multiple_of": None, "pad_id": 0,
                        "pad_type_id": 0, "pad_token": "<|endoftext|>"}
        t["truncation"] = {"direction": "Right", "max_length": 16, "strategy": "LongestFirst", "stride": 0}
        f.write_text(json.dumps(t), encoding="utf-8")
    r = run("validate", gpt2_ckpt, out, "--json", *FAST)
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    text, _ = read_corpus()
    plain = bytelevel_tokenizer(600)(text, add_special_tokens=False).input_ids
    assert report["corpus"]["tokens"] == len(plain) > 128
    assert report["kl"]["positions"] == 61 and report["tokenization"]["passed"] is True
    assert report["tokenization"]["new_words"] == report["tokenization"]["one_token_words"] == 2
    from vocabsurgeon.runtime import load_tokenizer

    backend = load_tokenizer(out).backend_tokenizer  # what any direct encode of the checks would use
    assert backend.padding is None and backend.truncation is None
    assert len(backend.encode(text).ids) == len(plain)


# ------------------------------------------------------------------ progress, the pipeline from Python


def test_add_says_validation_starts_with_an_estimate_and_shows_progress(gpt2_ckpt, tmp_path):
    r = run("add", *WORDS, *FAST, gpt2_ckpt, tmp_path / "out")
    assert r.exit_code == 0, r.output
    err = r.stderr
    assert f"Validating {tmp_path / 'out'} against {gpt2_ckpt} (--no-validate skips this)" in err
    assert "running: one-pass (every other tensor is byte-identical and the old rows are bit-identical): about " in err
    assert "-parameter model, roughly " in err and "validating: done" in err  # a log's lines: stderr is no terminal
    r = run("add", *WORDS, "-q", *FAST, gpt2_ckpt, tmp_path / "out-q")
    assert r.exit_code == 0 and "validating" not in r.stderr and "running:" not in r.stderr
    r = run("add", *WORDS, "--json", *FAST, gpt2_ckpt, tmp_path / "out-json")  # progress stays on stderr
    assert r.exit_code == 0 and "validating: done" in r.stderr and json.loads(r.stdout)["validation"]["passed"]


def test_the_pipeline_writes_the_card_with_the_figures(gpt2_ckpt, tmp_path):
    from vocabsurgeon import AddOptions, ValidationFailed
    from vocabsurgeon.add.pipeline import ValidationOptions, add_validate_push

    done = add_validate_push(gpt2_ckpt, tmp_path / "out", ["Frodo"], validation=ValidationOptions(max_tokens=60))
    card = (tmp_path / "out" / "README.md").read_text(encoding="utf-8")
    assert "Validation **passed**" in card and ", one-pass)." in card
    assert f"| KL(p_old ‖ p_new) mean | {done.report['kl']['mean']:.3g} nats | 0.05 |" in card
    assert done.to_dict()["validation"]["passed"] is True and done.pushed is None
    with pytest.raises(ValidationFailed) as e:
        add_validate_push(gpt2_ckpt, tmp_path / "bad", ["Frodo"], AddOptions(init="mean-noise", eps=1e4),
                          validation=ValidationOptions(max_tokens=60))
    assert e.value.report["passed"] is False
    assert not (tmp_path / "bad").exists() and e.value.kept == tmp_path / "bad.rejected"
    assert "Validation **FAILED**: mean KL" in (tmp_path / "bad.rejected" / "README.md").read_text(encoding="utf-8")


def test_a_stored_report_reads_back_as_the_same_record_and_the_same_json(gpt2_ckpt, tmp_path):
    from vocabsurgeon.add.pipeline import ValidationOptions, add_validate_push
    from vocabsurgeon.validation.report import Report

    done = add_validate_push(gpt2_ckpt, tmp_path / "out", ["Frodo"], validation=ValidationOptions(max_tokens=60))
    stored = json.loads((tmp_path / "out" / REPORT_NAME).read_text(encoding="utf-8"))
    files = stored.pop("files")  # the engine's list of what it wrote, beside the record
    assert files == sorted(p.name for p in (tmp_path / "out").iterdir())
    back = Report.from_dict(stored)
    # key for key and in order: the file written is what the record gives, and reading it back changes nothing
    assert json.dumps(back.to_dict(), indent=2, ensure_ascii=False) == json.dumps(stored, indent=2, ensure_ascii=False)
    assert back.passed is done.report.passed is True and back.check("kl").mean == done.report["kl"]["mean"]
    assert [c.KEY for c in back.checks] == [c.KEY for c in done.report.checks]
    assert dict(done.report) == done.report.to_dict()  # the record reads as its JSON


def test_the_pipeline_reports_progress_through_one_protocol(gpt2_ckpt, tmp_path):
    from vocabsurgeon.add.pipeline import ValidationOptions, add_validate_push
    from vocabsurgeon.progress import Progress

    counts, done, stages, plans = {}, {}, [], []

    def count(name, total, unit=""):
        counts[name] = (total, unit)
        done.setdefault(name, 0)

        def advance(n):
            done[name] += n
        return advance

    result = add_validate_push(gpt2_ckpt, tmp_path / "out", ["Frodo", "Gandalf"],
                               validation=ValidationOptions(max_tokens=60),
                               progress=Progress(stage=stages.append, count=count,
                                                 advance=lambda n: done.__setitem__("validating", done["validating"] + n)),
                               on_plan=plans.append)
    assert len(plans) == 1 and [t.text for t in plans[0].tokens.new][:1] == ["Frodo"]
    # the copy counts bytes; validation counts tokens and says what starts
    # (its total starts as the plan's bytes_to_write and ends as the bytes moved: the count ends complete)
    assert counts["writing"] == (done["writing"], "B") and done["writing"] > 0.9 * result.result.to_dict()["bytes_to_write"]
    assert counts["validating"][1] == "tok" and 0 < done["validating"] <= counts["validating"][0]
    assert any(s.startswith("one-pass (") for s in stages) and "sampling" in stages


def test_the_cli_bars_correct_a_running_count_instead_of_drawing_it_again(capsys):
    from vocabsurgeon.cli.options import Bars

    bars = Bars(disable=False)
    advance = bars.count("validating", 10, "tok")
    advance(6)
    drawn = bars.bars["validating"]
    bars.count("validating", 8, "tok")  # the total corrected: the same bar, not a second one
    assert bars.bars == {"validating": drawn} and drawn.total == 8 and drawn.n == 6
    bars.advance(2)
    bars.stage("sampling")
    bars.close()
    err = capsys.readouterr().err
    assert "running: sampling" in err and "validating: 100%" in err and "8/8" in err
    assert Bars(disable=True).count("validating", 10)(5) is None  # -q and --json: nothing drawn


def test_a_tokenization_failure_asks_for_no_init_and_a_model_failure_asks_for_mean_only_where_it_was_not_used():
    """Issue 32: a tokenization failure after `--init mean` said "Try --init mean"."""
    from vocabsurgeon.validation.checks import KLCheck, TokenizationCheck
    from vocabsurgeon.validation.report import Report
    from vocabsurgeon.validation.validate import next_step

    tok = Report.decide([TokenizationCheck(old_text_ids_changed=6)], [])
    kl = Report.decide([KLCheck(applicable=True, mean=3.0, p99=3.0, limit_mean=0.1, limit_p99=1.0)], [])
    assert next_step(tok, "mean") == next_step(tok, "zeros") == (
        "The written tokenizer tokenizes text otherwise than the input, which no --init changes: remove the words it "
        "names, or report it with the model name and the tokens, or pass --no-validate to skip the checks")
    assert next_step(kl, "zeros") == "Try --init mean, or pass --no-validate to skip the checks"
    assert next_step(kl, "mean") == "Pass --no-validate to skip the checks"


def test_a_longer_word_that_a_new_word_re_splits_fails_validation_unless_the_plan_reported_it():
    """Issue 39: the validation corpus had no word holding a new word, and an added token "REQ" re-split
    "REQUEST" unnoticed. The tokenization check now tokenizes every corpus word that holds a new word."""
    from transformers import AutoTokenizer

    from published_models import fetch
    from vocabsurgeon.validation.validate import longer_words

    old = AutoTokenizer.from_pretrained(fetch("gpt2"))
    new = AutoTokenizer.from_pretrained(fetch("gpt2"))
    new.add_tokens(["REQ", " REQ"])  # matched anywhere in raw text, as `add` wrote most words before
    ids = {"REQ": {new.convert_tokens_to_ids("REQ"), new.convert_tokens_to_ids(" REQ")}}
    text = ["A REQUEST for REQ, and REQ_ID."]
    checked, changed = longer_words(old, new, text, ids, reported=set())
    assert checked == 1 and [c["text"] for c in changed] == ["REQUEST", " REQUEST", "(REQUEST"]
    assert longer_words(old, new, text, ids, reported={"REQ"})[1] == []
    assert longer_words(old, new, text, ids)[1] == []  # run alone: an added token's word counts as reported
