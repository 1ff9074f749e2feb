"""--init subword-mean-shrunk (`extend`'s default): the sub-word mean, its output rows shrunk toward the mean row
until held-out old text keeps fitted's KL limits; on the trained fixtures (gpt2-tiny tied, llama-tiny untied)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from builders import family_checkpoint
from click.testing import CliRunner

from vocabsurgeon.engine.finish import ValidationOptions
from vocabsurgeon.add.plan import AddOptions
from vocabsurgeon.checkpoint.reader import Checkpoint
from vocabsurgeon.cli.commands import cli
from vocabsurgeon.errors import InputError, ValidationFailed
from vocabsurgeon.extend.pipeline import extend_validate_push
from vocabsurgeon.extend.plan import ExtendOptions
from vocabsurgeon.add.pipeline import add_tokens

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
# English prose with the lotr words: 100 merges learned from it are English pieces that the tied gpt2-tiny
# predicts in old text, so their plain sub-word mean output rows move old text past validation's KL mean limit.
ENGLISH = FIXTURES / "corpus_lotr.txt"
LOTR = (FIXTURES / "lotr.txt").read_text(encoding="utf-8").split()
VALIDATE = ValidationOptions(max_tokens=1024, device="cpu")

pytestmark = pytest.mark.usefixtures("one_thread")


def _rows(path: Path, name: str) -> np.ndarray:
    ck = Checkpoint.open(path)
    return ck.rows_np(name, 0, ck.tensors[name].shape[0]).astype(np.float64)


def test_extend_default_keeps_old_text_where_the_plain_subword_mean_fails_validation(tmp_path):
    src = FIXTURES / "gpt2-tiny"  # tied: the one shared row is shrunk
    learn = ExtendOptions(ENGLISH, 100)
    with pytest.raises(ValidationFailed, match="mean KL .* is over the limit"):
        extend_validate_push(src, tmp_path / "plain", learn, AddOptions(init="subword-mean", device="cpu"),
                             validation=VALIDATE)
    done = extend_validate_push(src, tmp_path / "out", learn, validation=VALIDATE)  # the defaults
    d = done.to_dict()
    assert d["validation"]["passed"] and d["init"]["input"] == d["init"]["output"] == "subword-mean-shrunk"
    s = d["shrink"]
    shrink, kl = s["output"]["shrink"], s["output"]["old_text_kl"]
    assert s["method"] == "subword-mean-shrunk" and s["tied"] is True and s["roles"] == ["output"]
    assert 0.0 < shrink["a"] < 1.0
    assert shrink["limit_mean"] == pytest.approx(kl["bound"]) == pytest.approx(np.log1p(100 / 2048))
    assert shrink["limit_p99"] == max(0.05, shrink["limit_mean"])
    before = kl["before_shrink"]
    assert before["mean"] > shrink["limit_mean"] or before["p99"] > shrink["limit_p99"]  # plain breaks the limits
    assert kl["mean"] <= shrink["limit_mean"] and kl["p99"] <= shrink["limit_p99"]
    assert kl["positions"] == before["positions"] > 500
    # the written rows are mean + a (sub-word mean - mean) of the tied matrix
    plan = done.result.plan
    name = plan.layout.embedding
    old, new = _rows(src, name), _rows(tmp_path / "out", name)
    assert new[:len(old)].tobytes() == old.tobytes()
    mean = old.mean(0)
    for t in plan.tokens.new:
        want = mean + shrink["a"] * (old[list(t.pieces)].mean(0) - mean)
        assert np.allclose(new[t.id], want, rtol=0, atol=1e-6), t.piece
    card = (tmp_path / "out" / "README.md").read_text(encoding="utf-8")
    assert f"| shrink toward the mean row | a = {shrink['a']:.3g} (limits: mean {shrink['limit_mean']:.3g}" in card
    assert f"| old-text KL of the sub-word mean (held-out) | mean {before['mean']:.3g}" in card


def test_untied_input_rows_are_the_plain_subword_mean_and_output_rows_shrink_to_the_limit_asked(tmp_path):
    src = FIXTURES / "llama-tiny"  # untied, bf16, sharded
    plain = add_tokens(src, tmp_path / "plain", LOTR, init="subword-mean", device="cpu").to_dict()
    first = add_tokens(src, tmp_path / "first", LOTR, init="subword-mean-shrunk", device="cpu").to_dict()
    limit = first["shrink"]["output"]["old_text_kl"]["before_shrink"]["mean"] / 10  # makes the shrink work
    r = add_tokens(src, tmp_path / "out", LOTR, init="subword-mean-shrunk", fit_kl_limit=limit, device="cpu")
    d = r.to_dict()
    lay = r.plan.layout
    # each matrix is recorded as what it got: the input rows are not shrunk
    assert d["tensors"][lay.embedding]["init"] == d["init"]["input"] == "subword-mean"
    assert d["tensors"][lay.lm_head]["init"] == d["init"]["output"] == "subword-mean-shrunk"
    card = (tmp_path / "out" / "README.md").read_text(encoding="utf-8")
    assert "| init | input embedding: `subword-mean`; output: `subword-mean-shrunk`;" in card
    assert f"| `{lay.embedding}` | 2048 → " in card and "| `subword-mean` |" in card
    assert _rows(tmp_path / "out", lay.embedding).tobytes() == _rows(tmp_path / "plain", lay.embedding).tobytes()
    shrink, kl = d["shrink"]["output"]["shrink"], d["shrink"]["output"]["old_text_kl"]
    assert d["shrink"]["tied"] is False and shrink["limit_mean"] == limit and 0.0 <= shrink["a"] < 1.0
    assert kl["mean"] <= limit < kl["before_shrink"]["mean"]
    old, new = _rows(src, lay.lm_head), _rows(tmp_path / "out", lay.lm_head)
    mean = old.mean(0)
    for t in r.plan.tokens.new:
        want = mean + shrink["a"] * (old[list(t.pieces)].mean(0) - mean)
        assert np.allclose(new[t.id], want, rtol=1e-2, atol=1e-3), t.piece  # bf16 rows
    assert not np.allclose(new[len(old):], _rows(tmp_path / "plain", lay.lm_head)[len(old):], atol=1e-3)
    assert d["added"] == plain["added"]


def test_cli_dry_run_plans_what_the_run_writes_and_a_seed_gives_the_same_bytes(tmp_path):
    src = FIXTURES / "gpt2-tiny"
    args = ["--tokens", str(FIXTURES / "lotr.txt"), "--init", "subword-mean-shrunk", "--device", "cpu", "--json",
            "--no-validate"]
    dry = CliRunner().invoke(cli, ["add", *args, "--dry-run", str(src), str(tmp_path / "dry")])
    assert dry.exit_code == 0, dry.output
    runs = [CliRunner().invoke(cli, ["add", *args, "--seed", "7", str(src), str(tmp_path / n)]) for n in ("a", "b")]
    assert all(r.exit_code == 0 for r in runs), runs[0].output
    planned, done = json.loads(dry.stdout), json.loads(runs[0].stdout)
    for key in ("init", "tensors", "added", "rows_before", "rows_after"):
        assert planned[key] == done[key], key
    assert "shrink" not in planned and done["shrink"]["output"]["shrink"]["a"] <= 1.0
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == (tmp_path / "b" / "model.safetensors").read_bytes()
    assert json.loads(runs[1].stdout)["shrink"]["output"] == done["shrink"]["output"]


def test_a_model_that_is_not_a_causal_lm_is_refused_before_writing(tmp_path):
    from builders import make_tokenizer
    from transformers import BertConfig, BertForMaskedLM

    tok = make_tokenizer("wordpiece-uncased")
    BertForMaskedLM(BertConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                               intermediate_size=32)).save_pretrained(tmp_path / "bert")
    tok.save_pretrained(tmp_path / "bert")
    with pytest.raises(InputError, match="--init subword-mean-shrunk measures the old-text KL of a causal language "
                                         "model; .*use --init subword-mean \\(or mean\\)"):
        add_tokens(tmp_path / "bert", tmp_path / "out", ["frodo"], init="subword-mean-shrunk", device="cpu")
    assert not (tmp_path / "out").exists()


def test_extend_on_a_random_tiny_model_keeps_the_subword_mean_where_it_meets_the_limits(tmp_path):
    # a = 1 where the plain sub-word mean already keeps old text: the rows are the sub-word mean's
    src = family_checkpoint(tmp_path / "ckpt", "byte-level")
    learn = ExtendOptions(FIXTURES / "corpus_lotr.txt", 20)
    done = extend_validate_push(src, tmp_path / "out", learn, validation=None)
    extend_validate_push(src, tmp_path / "plain", learn, AddOptions(init="subword-mean"), validation=None)
    assert done.to_dict()["shrink"]["output"]["shrink"]["a"] == 1.0
    name = done.result.plan.layout.embedding
    assert np.allclose(_rows(tmp_path / "out", name), _rows(tmp_path / "plain", name), rtol=0, atol=1e-6)


def test_untied_fitted_input_rows_beside_shrunk_output_rows(tmp_path):
    src = FIXTURES / "llama-tiny"
    fast = {"fit_steps": 4, "fit_contexts": 2, "fit_corpus": str(FIXTURES / "corpus_lotr.txt"), "device": "cpu"}
    both = add_tokens(src, tmp_path / "both", LOTR, init_input="fitted", init_output="subword-mean-shrunk", **fast)
    add_tokens(src, tmp_path / "shrunk", LOTR, init="subword-mean-shrunk", device="cpu")
    d, lay = both.to_dict(), both.plan.layout
    assert d["fitted"]["roles"] == ["input"] and d["shrink"]["roles"] == ["output"]
    assert _rows(tmp_path / "both", lay.lm_head).tobytes() == _rows(tmp_path / "shrunk", lay.lm_head).tobytes()
    n = Checkpoint.open(src).tensors[lay.embedding].shape[0]
    assert not np.array_equal(_rows(tmp_path / "both", lay.embedding)[n:], _rows(tmp_path / "shrunk", lay.embedding)[n:])
