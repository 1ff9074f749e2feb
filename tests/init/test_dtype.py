"""The GPU's dtype on the CPU: --dtype runs fitted, validation and init in bfloat16 on every family (issue 38).

A GPU loads a checkpoint in its own dtype (`--dtype auto` there); `--dtype checkpoint` does the same
on the CPU, so these tests cover that path on every row of the architecture table, with tiny models
saved in bfloat16.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch
import transformers as T
from click.testing import CliRunner

from builders import bytelevel_tokenizer, save_checkpoint
from vocabsurgeon.checkpoint.architectures import ARCHITECTURES
from vocabsurgeon.checkpoint.filenames import REPORT_NAME
from vocabsurgeon.cli.commands import cli
from vocabsurgeon.errors import InputError
from vocabsurgeon.init.fitted import causal as fitted
from vocabsurgeon.runtime import LoadedModel, ModelKind, load_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

FIXTURES = Path(__file__).parents[2] / "fixtures"
REFUSED = "computes its logits with more than hidden . lm_head (scaling or capping)"


def _families():
    """tests/checkpoint/test_architectures.py's FAMILIES: one tiny model per row of the table."""
    path = Path(__file__).parents[1] / "checkpoint" / "test_architectures.py"
    spec = importlib.util.spec_from_file_location("architecture_families", path)
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # (dataclasses look it up there)
    spec.loader.exec_module(module)
    return module


ARCH = _families()
FAMILIES = ARCH.FAMILIES


def _head_check(model, ids) -> None:
    model = model.eval()
    lm = LoadedModel(model, ModelKind("causal", type(model).__name__))
    fitted._Model(lm, bytelevel_tokenizer(ARCH.V)).check_linear_head(ids)


def test_dtype_auto_is_float32_on_the_cpu_and_the_checkpoints_own_on_a_gpu():
    from vocabsurgeon.devices import load_dtype

    assert load_dtype("auto", "cpu") is torch.float32
    assert load_dtype("auto", "cuda:0") == "auto" and load_dtype("checkpoint", "cpu") == "auto"
    assert load_dtype("bfloat16", "cpu") is torch.bfloat16


def test_a_plain_head_in_bfloat16_passes_the_linear_head_check():
    # What a GPU runs: the model in its checkpoint's bfloat16. Refused on every GPU before issue 38: its
    # bfloat16 logits were compared with a float32 product at a tolerance finer than bfloat16's resolution.
    src = FIXTURES / "llama-tiny"
    model = T.AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16).eval()
    tok = load_tokenizer(src)
    ids = torch.tensor([tok("Frodo went to Mordor with Samwise and the ring, far from home.").input_ids])
    m = fitted._Model(LoadedModel(model, ModelKind("causal", type(model).__name__)), tok)
    m.check_linear_head(ids)
    assert m._checked


def _gemma2(cap):
    return T.Gemma2ForCausalLM(T.Gemma2Config(vocab_size=ARCH.V, head_dim=16, final_logit_softcapping=cap,
                                              **ARCH._decoder(), **ARCH._ids(ARCH._tok())))


CAPPED = {
    # Gemma 2's softcapping, tanh(z / cap) * cap, with a cap that the tiny model's logits reach
    "gemma2-softcap": lambda: _gemma2(0.05),
    "cohere-logit-scale": lambda: T.CohereForCausalLM(T.CohereConfig(vocab_size=ARCH.V, logit_scale=0.5, **ARCH._decoder(),
                                                                     **ARCH._ids(ARCH._tok()))),
    "granite-logits-scaling": lambda: T.GraniteForCausalLM(T.GraniteConfig(vocab_size=ARCH.V, logits_scaling=4.0,
                                                                           **ARCH._decoder(), **ARCH._ids(ARCH._tok()))),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("name", list(CAPPED))
def test_the_linear_head_check_refuses_capped_or_scaled_logits_in_either_dtype(name, dtype):
    torch.manual_seed(0)
    model = CAPPED[name]().to(dtype)
    ids = torch.randint(3, ARCH.V, (1, 24))
    with pytest.raises(InputError, match=REFUSED.replace(".", r"\.").replace("(", r"\(").replace(")", r"\)")):
        _head_check(model, ids)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_gemma2_without_its_cap_passes_the_linear_head_check(dtype):
    torch.manual_seed(0)
    _head_check(_gemma2(None).to(dtype), torch.randint(3, ARCH.V, (1, 24)))


@pytest.fixture(scope="module")
def bf16_family(tmp_path_factory):
    """Each family saved in bfloat16, built once per module on first use."""
    root = tmp_path_factory.mktemp("bf16-families")
    cache: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in cache:
            fam = FAMILIES[name]
            torch.manual_seed(0)
            path = save_checkpoint(fam.build().eval().to(torch.bfloat16), ARCH._tok(), root / name,
                                   max_shard_size=ARCH.SHARD)
            ARCH._store(path, fam)
            cache[name] = path
        return cache[name]

    return get


FIT_FLAGS = ["--fit-contexts", "2", "--fit-context-tokens", "16", "--fit-output-steps", "10", "--max-tokens", "256"]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_add_in_the_checkpoints_bfloat16_on_every_family(family, bf16_family, tmp_path):
    # --init fitted where it runs (causal LMs, masked LMs; seq2seq: mean), then validation, both in bfloat16
    ARCH._skip_where_add_refuses(family)
    src, out = bf16_family(family), tmp_path / "out"
    seq2seq = FAMILIES[family].auto is T.AutoModelForSeq2SeqLM
    args = ["add", "-q", "--json", "--device", "cpu", "--dtype", "checkpoint", str(src), str(out)]
    args += ["--init", "mean"] if seq2seq else ["--init", "fitted", *FIT_FLAGS]
    for w in ARCH.WORDS:
        args += ["-t", w]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output + r.stderr
    summary = json.loads(r.stdout)
    report = json.loads((out / REPORT_NAME).read_text())
    assert summary["validation"]["passed"] is True and report["dtype"] == "bfloat16"
    assert report["old_logits"]["unchanged"]
    if not seq2seq:
        assert summary["fitted"]["method"] == "fitted"
        # untied causal models distil their input rows: the bfloat16 pass must read rows as it reads ids
        assert "skipped" not in (summary["fitted"].get("input") or {})


def test_every_row_of_the_table_runs_in_bfloat16():
    assert {FAMILIES[f].architecture for f in FAMILIES} == {a.name for a in ARCHITECTURES}


def test_validate_takes_the_dtype_from_the_environment(bf16_family, tmp_path):
    src, out = bf16_family("llama"), tmp_path / "out"
    r = CliRunner().invoke(cli, ["add", "-q", "--no-validate", str(src), str(out), "-t", "Frodo"])
    assert r.exit_code == 0, r.output + r.stderr
    r = CliRunner().invoke(cli, ["validate", "-q", "--json", "--max-tokens", "128", str(src), str(out)],
                           env={"VOCABSURGEON_DTYPE": "checkpoint"})
    assert r.exit_code == 0, r.output + r.stderr
    assert json.loads(r.stdout)["dtype"] == "bfloat16"


def test_an_unknown_dtype_is_refused_in_one_line(tmp_path):
    r = CliRunner().invoke(cli, ["add", "--dtype", "fp8", str(FIXTURES / "llama-tiny"), str(tmp_path / "o"), "-t", "x"])
    assert r.exit_code == 2 and "'fp8' is not one of" in r.stderr and not (tmp_path / "o").exists()
