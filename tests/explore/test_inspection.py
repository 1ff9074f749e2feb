"""`vocabsurgeon inspect`: layout, sizes, matrix statistics and zero-init risk, checked independently."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from invariants import tree_digest
from safetensors import safe_open

from vocabsurgeon.cli.commands import cli
from vocabsurgeon.validation.validate import read_corpus

FAST = ("--max-tokens", "60")


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def tensor(ckpt: Path, name: str) -> torch.Tensor:
    for f in sorted(ckpt.glob("*.safetensors")):
        with safe_open(str(f), "pt") as h:
            if name in h.keys():
                return h.get_tensor(name).double()
    raise KeyError(name)


def test_inspect_tied_gpt2(gpt2_ckpt):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    before = tree_digest(gpt2_ckpt)
    r = run("inspect", gpt2_ckpt, "--json", *FAST)
    assert r.exit_code == 0, r.stderr
    d = json.loads(r.stdout)
    assert tree_digest(gpt2_ckpt) == before  # nothing changed
    tok = AutoTokenizer.from_pretrained(gpt2_ckpt)
    w = tensor(gpt2_ckpt, "transformer.wte.weight")  # (rows, hidden)
    assert d["architecture"] == "gpt2" and d["tied"] is True and d["dtype"] == "F32"
    assert d["rows"] == w.shape[0] and d["tokenizer_size"] == len(tok) and d["config_vocab_size"] == w.shape[0]
    assert d["padding_rows"] == 0
    assert list(d["matrices"]) == ["transformer.wte.weight"]  # tied: one matrix plays both roles

    m = d["matrices"]["transformer.wte.weight"]
    norms = w.norm(dim=1)
    assert m["row_norm"]["mean"] == pytest.approx(norms.mean().item(), rel=1e-9)
    assert m["row_norm"]["max"] == pytest.approx(norms.max().item(), rel=1e-9)
    std = w.std(dim=0, unbiased=False)
    assert m["dim_std"]["median"] == pytest.approx(np.median(std.numpy()), rel=1e-6)  # torch's median is the lower middle
    xavier = math.sqrt(2 / sum(w.shape))
    assert m["xavier_std"] == pytest.approx(xavier)
    assert m["std_over_xavier"] == pytest.approx(std.pow(2).mean().sqrt().item() / xavier, rel=1e-6)
    assert m["dim_mean"]["max_abs"] == pytest.approx(w.mean(0).abs().max().item(), rel=1e-6, abs=1e-12)

    # log Z and the zero-init KL log(1 + 1/Z), on BOS + the first 60 corpus tokens, computed here
    text, _ = read_corpus()
    ids = [tok.bos_token_id] + tok(text, add_special_tokens=False).input_ids[:60]
    with torch.no_grad():
        logits = AutoModelForCausalLM.from_pretrained(gpt2_ckpt)(torch.tensor([ids])).logits[0].double()
    log_z = logits.logsumexp(-1).numpy()
    kl = np.log1p(np.exp(-log_z))
    z = d["zero_init_risk"]
    assert z["positions"] == len(ids)
    assert z["log_z"]["mean"] == pytest.approx(log_z.mean(), rel=1e-6)
    assert d["zero_init_kl"]["mean"] == pytest.approx(kl.mean(), rel=1e-5)
    assert d["zero_init_kl"]["max"] == pytest.approx(kl.max(), rel=1e-5)
    assert z["verdict"] == ("safe" if kl.max() < 0.01 else "caution")


def test_inspect_untied_llama_lists_both_matrices(llama_ckpt):
    d = json.loads(run("inspect", llama_ckpt, "--json", *FAST).stdout)
    assert d["architecture"] == "llama" and d["tied"] is False and d["dtype"] == "BF16"
    assert list(d["matrices"]) == ["model.embed_tokens.weight", "lm_head.weight"]
    lm = tensor(llama_ckpt, "lm_head.weight")
    assert d["matrices"]["lm_head.weight"]["shape"] == list(lm.shape)
    assert d["matrices"]["lm_head.weight"]["row_norm"]["min"] == pytest.approx(lm.norm(dim=1).min().item(), rel=1e-6)


def test_inspect_reports_padding_rows(gpt2_ckpt, tmp_path):
    out = tmp_path / "out"
    r = run("add", "-t", "Frodo", "-t", "Gandalf", "--pad-to-multiple-of", "64", "--no-validate", "-q",
            gpt2_ckpt, out)
    assert r.exit_code == 0, r.output
    d = json.loads(run("inspect", out, "--json", *FAST).stdout)
    assert d["rows"] == 640 and d["config_vocab_size"] == 640
    assert d["tokenizer_size"] == 604  # 600 + Frodo, " Frodo", Gandalf, " Gandalf"
    assert d["padding_rows"] == 36
    r = run("inspect", out, *FAST)
    assert r.stdout.splitlines()[1] == (
        "rows 640, tokenizer 604, config vocab_size 640 (36 padding/reserved rows past the tokenizer)")


def test_inspect_human_output(gpt2_ckpt):
    r = run("inspect", gpt2_ckpt, *FAST)
    assert r.exit_code == 0
    lines = r.stdout.splitlines()
    assert lines[0] == f"{gpt2_ckpt}: gpt2, tied embeddings, F32"
    assert lines[1] == "rows 600, tokenizer 600, config vocab_size 600"
    assert lines[2].startswith("transformer.wte.weight F32[600, 32]: row norm mean ")
    assert lines[-1].startswith("zero init is safe, like GPT-2 large")


def test_inspect_missing_checkpoint(tmp_path):
    missing = tmp_path / "nope"
    r = run("inspect", missing)
    assert r.exit_code == 2
    assert r.stderr.startswith(f"Error: {missing}") and len(r.stderr.splitlines()) == 1


def test_inspect_lists_nan_and_inf_rows_by_id_without_numpy_warnings(gpt2_ckpt, tmp_path):
    from safetensors.torch import load_file, save_file

    out = tmp_path / "out"
    assert run("add", "-t", "Frodo", "--no-validate", "-q", gpt2_ckpt, out).exit_code == 0
    tensors = load_file(out / "model.safetensors")
    tensors["transformer.wte.weight"][600] = float("nan")
    tensors["transformer.wte.weight"][601, 3] = float("inf")
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning from numpy would fail here
        r = run("inspect", out, *FAST)
    assert r.exit_code == 0
    assert [line for line in r.stderr.splitlines() if not line.startswith(("running: ", "log Z: "))] == []  # progress
    lines = r.stdout.splitlines()
    assert lines[3] == "WARNING: transformer.wte.weight: 2 row(s) hold NaN or Inf: ids 600, 601"
    assert lines[-1] == ("zero-init risk not measured: the model's outputs hold NaN or Inf (see the rows listed "
                         "above)")
    d = json.loads(run("inspect", out, "--json", *FAST).stdout)
    m = d["matrices"]["transformer.wte.weight"]
    assert m["nonfinite_rows"] == 2 and m["nonfinite_row_ids"] == [600, 601]
    w = tensor(gpt2_ckpt, "transformer.wte.weight")  # the finite rows are the original ones
    assert m["row_norm"]["max"] == pytest.approx(w.norm(dim=1).max().item(), rel=1e-9)


def test_inspect_states_the_xavier_ratio_and_flags_rows_far_outside_the_others(gpt2_ckpt, tmp_path):
    from safetensors.torch import load_file, save_file

    r = run("inspect", gpt2_ckpt, *FAST)
    assert "x the Xavier std" in r.stdout.splitlines()[2] and "wider" not in r.stdout
    out = tmp_path / "out"
    assert run("add", "-t", "Frodo", "--no-validate", "-q", gpt2_ckpt, out).exit_code == 0
    tensors = load_file(out / "model.safetensors")
    torch.manual_seed(0)
    tensors["transformer.wte.weight"][601] = torch.randn(32)  # N(0, 1): 50x the old rows' std of 0.02
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    lines = run("inspect", out, *FAST).stdout.splitlines()
    assert lines[3] == ("WARNING: transformer.wte.weight: 1 row(s) with a norm over 10x the 99th percentile of the "
                        "others: ids 601")
    assert not any("row(s) with a norm over" in x for x in run("inspect", gpt2_ckpt, *FAST).stdout.splitlines())


def test_inspect_names_a_qwen3_checkpoint_qwen3_not_qwen2(llama_ckpt):
    # Qwen3 keeps its vocabulary tensors where Qwen2 does (one row of the architecture table), but a
    # user reading "qwen2" about a Qwen3 checkpoint would think the wrong model was read.
    from vocabsurgeon.explore.inspection import describe, inspect_checkpoint

    cfg = json.loads((llama_ckpt / "config.json").read_text())
    cfg.update(model_type="qwen3", architectures=["Qwen3ForCausalLM"])
    (llama_ckpt / "config.json").write_text(json.dumps(cfg))
    report = inspect_checkpoint(llama_ckpt, run_model=False)
    assert report["architecture"] == "qwen2" and report["model_type"] == "qwen3"
    assert describe(report)[0].startswith(f"{llama_ckpt}: qwen3 (qwen2 layout), untied embeddings, ")
