"""--init fitted and --untie, on the trained fixtures (fixtures/gpt2-tiny tied, fixtures/llama-tiny untied).

Usability is measured as `validate` measures it: bits per byte of the new model on held-out
paragraphs of corpus_lotr.txt that use the words (the first two thirds are the fit corpus), and
old-text KL on corpus.txt (none of the words) against the mean-init bound log(1 + k/n).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from vocabsurgeon import add_tokens, read_tokens_file, validate_checkpoint
from vocabsurgeon.cli.commands import cli
from vocabsurgeon.errors import InputError
from vocabsurgeon.add.plan import AddOptions
from vocabsurgeon.init.fitted.causal import (
    DEPTH_PASSES,
    FitOptions,
    FitToken,
    Run,
    Window,
    _OutputData,
    _kl_new,
    budget_windows,
    find_runs,
    fit_output_rows,
    prompts_per_token,
    sample_continuations,
    sample_positions,
    shrink_to_limit,
    teach_batches,
    word_windows,
)
from vocabsurgeon.init.fitted import fit_rows

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
WORDS = read_tokens_file(FIXTURES / "lotr.txt")
FAST = {"fit_steps": 40, "fit_output_steps": 60, "fit_contexts": 8}  # a few steps are enough on the tiny models


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def split(tmp_path_factory) -> tuple[Path, Path]:
    """corpus_lotr.txt split by paragraphs: (fit part, held-out part)."""
    paras = [p for p in (FIXTURES / "corpus_lotr.txt").read_text(encoding="utf-8").split("\n\n") if p.strip()]
    cut = len(paras) * 2 // 3
    d = tmp_path_factory.mktemp("split")
    (d / "fit.txt").write_text("\n\n".join(paras[:cut]), encoding="utf-8")
    (d / "held.txt").write_text("\n\n".join(paras[cut:]), encoding="utf-8")
    return d / "fit.txt", d / "held.txt"


def _measure(base: Path, out: Path, held: Path) -> dict:
    use = validate_checkpoint(base, out, held, device="cpu")["usability"]
    kl = validate_checkpoint(base, out, FIXTURES / "corpus.txt", device="cpu")["kl"]
    return {"bpb": use["bpb_new"], "bpb_old": use["bpb_old"], "kl": kl}


def _add(base: Path, out: Path, **options) -> Path:
    add_tokens(base, out, WORDS, **options)
    return out


# ------------------------------------------------------------------ units


def test_find_runs_takes_the_longest_match_left_to_right():
    tokens = [FitToken("ab", (1, 2)), FitToken("abc", (1, 2, 3)), FitToken("d", (4, 5))]
    assert find_runs([9, 1, 2, 3, 1, 2, 4, 5, 4], tokens) == [Run(1, 3, 1), Run(4, 2, 0), Run(6, 2, 2)]


def test_window_new_ids_and_alignment():
    w = Window([7, 8, 1, 2, 3, 9, 1, 2, 3], [Run(2, 3, 0), Run(6, 3, 1)])
    assert w.new_ids(100) == [7, 8, 100, 9, 101]
    olds, news = w.aligned()
    # the new token's position reads like its last piece; the pieces inside the word have no match
    assert list(zip(olds, news)) == [(4, 2), (5, 3), (8, 4)]


def _toy_data(seed=0, P=200, d=6, k=2):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(P, d, generator=g, dtype=torch.float64)
    logz = torch.randn(P, generator=g, dtype=torch.float64) + 5.0
    q_pos = torch.tensor([3, 10, 50, 51])
    q_tok = torch.tensor([0, 0, 1, 1])
    return _OutputData(h, logz, q_pos, q_tok, torch.ones(4, dtype=torch.float64))


def _objective(data, W, prior, lam):
    s = data.h @ W.T
    obj = torch.logaddexp(data.logz, s.logsumexp(-1)).sum() - data.logz.sum()
    return obj - (data.q * s[data.q_pos, data.q_tok]).sum() + 0.5 * lam * ((W - prior) ** 2).sum()


def test_output_fit_reaches_the_convex_optimum():
    data = _toy_data()
    prior = torch.zeros(2, 6, dtype=torch.float64)
    W, _ = fit_output_rows(data, prior, 0.0, 0.5, 200, lambda *a: None)
    lam = 0.5 * float((data.h ** 2).mean()) * data.h.shape[1]
    Wg = W.clone().requires_grad_(True)
    _objective(data, Wg, prior, lam).backward()
    assert float(Wg.grad.abs().max()) < 1e-5  # stationary, hence the global minimum (convex)
    # and no random perturbation does better
    g = torch.Generator().manual_seed(1)
    best = float(_objective(data, W, prior, lam))
    for _ in range(20):
        assert float(_objective(data, W + 0.05 * torch.randn(2, 6, generator=g, dtype=torch.float64), prior, lam)) > best


def test_output_fit_stops_early_on_a_relative_change_near_the_optimum():
    data = _toy_data(P=2000, d=16, k=4)
    data = _OutputData(data.h, data.logz, torch.tensor([3, 10, 50, 51, 70, 90]), torch.tensor([0, 1, 2, 3, 0, 1]),
                       torch.ones(6, dtype=torch.float64))
    prior = torch.zeros(4, 16, dtype=torch.float64)
    full, calls = fit_output_rows(data, prior, 0.0, 0.05, 300, lambda *a: None)
    early, fewer = fit_output_rows(data, prior, 0.0, 0.05, 300, lambda *a: None, rel_change=1e-6)
    assert fewer < calls
    assert float((early - full).norm() / full.norm()) < 1e-2


def test_output_fit_without_evidence_lowers_the_new_logits():
    # no position where a new word follows: the objective is KL + L2, so the rows move to lower KL than the prior
    data = _toy_data()
    data = _OutputData(data.h, data.logz, data.q_pos[:0], data.q_tok[:0], data.q[:0])
    prior = torch.ones(2, 6, dtype=torch.float64)
    W, _ = fit_output_rows(data, prior, 0.0, 0.1, 100, lambda *a: None)

    def kl(w):
        return torch.logaddexp(data.logz, (data.h @ w.T).logsumexp(-1)) - data.logz

    assert float(kl(W).mean()) < float(kl(prior).mean())


def test_shrink_finds_the_largest_factor_that_meets_the_limits():
    data = _toy_data()
    g = torch.Generator().manual_seed(2)
    M = torch.randn(3, 6, generator=g, dtype=torch.float64).mean(0).expand(3, 6)  # "mean-init" rows
    W = M + 3.0 * torch.randn(3, 6, generator=g, dtype=torch.float64)  # fitted rows far from them
    full = _kl_new(data.h, data.logz, W, 0.0).numpy()
    limit = float(full.mean()) / 4
    a, kl = shrink_to_limit(data.h, data.logz, W, M, 0.0, limit, 10.0)
    assert 0.0 < a < 1.0
    assert kl.mean() <= limit
    np.testing.assert_allclose(kl, _kl_new(data.h, data.logz, M + a * (W - M), 0.0).numpy())
    # the largest: a little more would break the limit
    assert _kl_new(data.h, data.logz, M + (a + 1e-6) * (W - M), 0.0).numpy().mean() > limit
    # rows that already meet the limits are kept as fitted
    assert shrink_to_limit(data.h, data.logz, W, M, 0.0, float(full.mean()), 10.0)[0] == 1.0


def test_shrink_to_a_zero_limit_gives_the_mean_rows_which_meet_the_bound():
    data = _toy_data()
    rows = torch.randn(500, 6, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    # an old vocabulary whose log Z the toy positions use: the mean row meets log(1 + k/n) at every position
    logz = (data.h @ rows.T).logsumexp(-1)
    M = rows.mean(0).expand(2, 6)
    W = M + torch.randn(2, 6, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    a, kl = shrink_to_limit(data.h, logz, W, M, 0.0, 0.0, 0.0)
    assert a == 0.0
    assert (kl <= np.log1p(2 / 500) + 1e-12).all()


# ------------------------------------------------------------------ fit_rows


def test_fit_rows_is_deterministic_and_reports_its_corpus(split):
    fit, _ = split
    tokens = [FitToken(" Frodo", (1, 2)), FitToken(" Samwise", (3, 4))]
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(FIXTURES / "llama-tiny")
    tokens = [FitToken(f, tuple(tok(f, add_special_tokens=False).input_ids)) for f in (" Frodo", " Samwise")]
    opts = FitOptions(corpus=str(fit), input_steps=5, output_steps=10, contexts_per_word=4, seed=3)
    seen: dict[str, tuple[int, int]] = {}
    a = fit_rows(FIXTURES / "llama-tiny", tokens, {"input", "output"}, opts,
                 progress=lambda stage, done, total: seen.__setitem__(stage, (done, total)))
    b = fit_rows(FIXTURES / "llama-tiny", tokens, {"input", "output"}, opts)
    # every stage reports to the callback (the CLI draws the bars) and ends complete
    assert set(seen) == {"model on contexts", "input rows", "model on old text", "output rows", "held-out old text"}
    assert all(d == t for d, t in seen.values())
    # 8 windows, batches of 8: passes of one step, as many as the 5 steps allow (DEPTH_PASSES at most)
    steps = min(5, DEPTH_PASSES)
    assert a.report["input"]["steps"] == seen["input rows"][0] == steps and a.report["input"]["passes"] == steps
    assert np.array_equal(a.input_rows, b.input_rows) and np.array_equal(a.output_rows, b.output_rows)
    assert a.input_rows.shape == a.output_rows.shape == (2, 64)
    c = a.report["contexts"]
    assert c["source"] == "corpus" and c["sha256"] == hashlib.sha256(fit.read_bytes()).hexdigest()
    assert c["occurrences"] > 0 and c["n_tokens_without_context"] == 0
    kl = a.report["output"]["old_text_kl"]
    assert kl["positions"] > 0 and kl["mean"] <= kl["bound"]
    assert 0.0 <= a.report["output"]["shrink"]["a"] <= 1.0


def test_the_shrink_keeps_the_old_text_kl_within_the_limit_asked_for(split):
    # the default fit on llama-tiny is within the bound; a limit of a tenth of it makes the shrink work
    from transformers import AutoTokenizer

    fit, _ = split
    tok = AutoTokenizer.from_pretrained(FIXTURES / "llama-tiny")
    tokens = [FitToken(" " + w, tuple(tok(" " + w, add_special_tokens=False).input_ids)) for w in WORDS]
    free = fit_rows(FIXTURES / "llama-tiny", tokens, {"output"}, FitOptions(corpus=str(fit), output_steps=30))
    kl = free.report["output"]["old_text_kl"]
    limit = kl["before_shrink"]["mean"] / 10
    r = fit_rows(FIXTURES / "llama-tiny", tokens, {"output"}, FitOptions(corpus=str(fit), output_steps=30,
                                                                        kl_limit=limit))
    out = r.report["output"]
    assert 0.0 <= out["shrink"]["a"] < 1.0 and out["shrink"]["limit_mean"] == limit
    assert out["old_text_kl"]["mean"] <= limit < out["old_text_kl"]["before_shrink"]["mean"]
    assert out["old_text_kl"]["p99"] <= out["shrink"]["limit_p99"]
    # the written rows are the shrunk ones: between the mean row and the fitted rows
    assert not np.allclose(r.output_rows, free.output_rows)


def test_generated_contexts_when_no_corpus():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(FIXTURES / "gpt2-tiny")
    tokens = [FitToken(f, tuple(tok(f, add_special_tokens=False).input_ids)) for f in ("Gandalf", " Gandalf")]
    r = fit_rows(FIXTURES / "gpt2-tiny", tokens, {"output"},
                 FitOptions(output_steps=5, prompts_per_word=2, generated_tokens=8, seed=0))
    c = r.report["contexts"]
    assert c["source"] == "generated" and c["windows"] == 4 and c["occurrences"] >= 4  # each prompt holds its word
    assert r.input_rows is None and r.output_rows.shape == (2, 64)


def test_generated_contexts_keep_to_the_budget():
    """Without a corpus, many words get fewer prompts each (at least one), as corpus windows do: sampling
    is most of such a fit's time, and it grows with the words times the prompts per word."""
    assert prompts_per_token(FitOptions(prompts_per_word=4, context_budget=None), 2000, 32) == 4
    assert prompts_per_token(FitOptions(prompts_per_word=4), 100, 32) == 4  # 12,800 positions fit 65,536
    assert prompts_per_token(FitOptions(prompts_per_word=4), 1000, 32) == 2
    assert prompts_per_token(FitOptions(prompts_per_word=4), 5000, 32) == 1  # never none
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(FIXTURES / "gpt2-tiny")
    tokens = [FitToken(f, tuple(tok(f, add_special_tokens=False).input_ids)) for f in ("Gandalf", " Gandalf")]
    r = fit_rows(FIXTURES / "gpt2-tiny", tokens, {"output"},
                 FitOptions(output_steps=5, prompts_per_word=4, generated_tokens=8, context_tokens=16,
                            context_budget=2 * 2 * 16, seed=0))
    c = r.report["contexts"]
    assert c["prompts_per_word"] == 2 and c["windows"] == 4 and c["budget_positions"] == 64


def test_fit_corpus_that_is_not_utf8_is_refused(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"Frodo \xff")
    with pytest.raises(InputError, match=r"bad.txt: invalid UTF-8 at byte 6; save the fit corpus as UTF-8"):
        fit_rows(FIXTURES / "gpt2-tiny", [FitToken(" Frodo", (1, 2))], {"output"}, FitOptions(corpus=str(bad)))


# ------------------------------------------------------------------ usability (the done-when)


def test_fitted_beats_mean_and_subword_mean_untied(split, tmp_path):
    fit, held = split
    base = FIXTURES / "llama-tiny"
    got = {init: _measure(base, _add(base, tmp_path / init, init=init, fit_corpus=str(fit) if init == "fitted"
                                       else None, **(FAST if init == "fitted" else {})), held)
           for init in ("mean", "subword-mean", "fitted")}
    assert got["fitted"]["bpb"] < got["mean"]["bpb"]
    assert got["fitted"]["bpb"] < got["subword-mean"]["bpb"]
    kl = got["fitted"]["kl"]
    assert kl["mean"] <= kl["bound"] and kl["p99"] < 0.05, kl


def test_fitted_on_a_tied_model_tied_and_untied(split, tmp_path):
    fit, held = split
    base = FIXTURES / "gpt2-tiny"
    mean = _measure(base, _add(base, tmp_path / "mean", init="mean"), held)
    tied = _measure(base, _add(base, tmp_path / "tied", init="fitted", fit_corpus=str(fit), **FAST), held)
    untied = _measure(base, _add(base, tmp_path / "untied", init="fitted", untie=True, fit_corpus=str(fit), **FAST),
                      held)
    for r in (tied, untied):
        assert r["bpb"] < mean["bpb"]
        assert r["kl"]["mean"] <= r["kl"]["bound"] and r["kl"]["p99"] < 0.05, r["kl"]
    # twice the free rows: --untie is at least as good as kept tied
    assert untied["bpb"] <= tied["bpb"], (untied["bpb"], tied["bpb"])


# ------------------------------------------------------------------ --untie


def test_untie_loads_untied_with_old_logits_unchanged(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = FIXTURES / "gpt2-tiny"
    r = add_tokens(base, tmp_path / "out", WORDS, untie=True)
    d = r.to_dict()
    assert d["tied"] is False and d["untied"] == {"lm_head": "lm_head.weight", "of": "transformer.wte.weight",
                                                  "bytes_added": 2072 * 64 * 4}
    assert json.loads((tmp_path / "out" / "config.json").read_text())["tie_word_embeddings"] is False
    old = AutoModelForCausalLM.from_pretrained(base)
    new = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert new.config.tie_word_embeddings is False
    assert new.get_output_embeddings().weight.data_ptr() != new.get_input_embeddings().weight.data_ptr()
    assert torch.equal(new.get_output_embeddings().weight[:2048], old.get_input_embeddings().weight)
    ids = AutoTokenizer.from_pretrained(base)((FIXTURES / "corpus.txt").read_text(), return_tensors="pt").input_ids[:, :120]
    with torch.no_grad():
        a, b = old(ids).logits, new(ids).logits
    assert b.shape[-1] == 2072 and torch.equal(a, b[..., :2048])


def test_untie_a_sharded_tied_bf16_model(tmp_path):
    # Qwen2's small sizes tie; sharded, bf16: the new lm_head lands in the embedding's shard and the index
    from builders import bytelevel_tokenizer, save_checkpoint
    from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

    tok = bytelevel_tokenizer(600)
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    base = save_checkpoint(Qwen2ForCausalLM(cfg).to(torch.bfloat16).eval(), tok, tmp_path / "qwen", "40KB")
    r = add_tokens(base, tmp_path / "out", ["Frodo", "Gandalf"], untie=True, init="mean")
    index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    emb_file = index["weight_map"]["model.embed_tokens.weight"]
    assert index["weight_map"]["lm_head.weight"] == emb_file and len(set(index["weight_map"].values())) > 1
    n = len(tok)
    assert r.to_dict()["untied"]["bytes_added"] == (n + 4) * 32 * 2
    old = AutoModelForCausalLM.from_pretrained(base)
    new = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert new.config.tie_word_embeddings is False
    assert index["metadata"]["total_parameters"] == new.num_parameters()  # the new matrix counted in full
    assert torch.equal(new.lm_head.weight[:n], old.lm_head.weight)
    ids = torch.tensor([tok("The wizard came back to the shire at night.").input_ids])
    with torch.no_grad():
        assert torch.equal(old(ids).logits, new(ids).logits[..., :n])


def test_untie_on_an_untied_model_is_refused(tmp_path):
    with pytest.raises(InputError, match=r"the embeddings are already untied; drop --untie"):
        add_tokens(FIXTURES / "llama-tiny", tmp_path / "out", WORDS, untie=True)


# ------------------------------------------------------------------ CLI


def test_cli_add_fitted_records_the_fit(split, tmp_path):
    fit, _ = split
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["add", "--tokens", str(FIXTURES / "lotr.txt"), "--init", "fitted",
                                   "--fit-corpus", str(fit), "--fit-steps", "5", "--fit-output-steps", "10",
                                   "--fit-depth", "1", "--fit-l2", "0.5", "--fit-context-tokens", "24",
                                   "--no-validate", "--json", "--quiet",
                                   str(FIXTURES / "llama-tiny"), str(out)])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["init"] == {"input": "fitted", "output": "fitted", "bias": "mean", "eps": 1e-5}
    f = d["fitted"]
    assert f["contexts"]["name"] == "fit.txt" and f["input"]["steps"] <= 5 and f["output"]["target"] == "corpus"
    assert f["input"]["depth"] == {"share": 1.0, "layers": 2, "of": 2}  # --fit-depth 1: the last layer
    assert f["output"]["l2"] == 0.5 and f["context_tokens"] == 24
    card = (out / "README.md").read_text()
    assert "fit.txt" in card and f["contexts"]["sha256"] in card
    # both old-text KL figures (as fitted, as written) and the shrink factor, in --json and the card
    kl, a = f["output"]["old_text_kl"], f["output"]["shrink"]["a"]
    assert 0.0 <= a <= 1.0 and kl["mean"] <= kl["bound"] and kl["before_shrink"]["mean"] is not None
    assert f"| shrink toward the mean row | a = {a:.3g}" in card and "| old-text KL as fitted (held-out) |" in card


def test_cli_fit_depth_outside_0_1_is_refused_before_writing(tmp_path):
    res = CliRunner().invoke(cli, ["add", "-t", "Frodo", "--init", "fitted", "--fit-depth", "0",
                                   str(FIXTURES / "gpt2-tiny"), str(tmp_path / "out")])
    assert res.exit_code == 2 and not (tmp_path / "out").exists() and "--fit-depth" in res.output
    with pytest.raises(InputError, match=r"--fit-depth 1.5: must be a share of the model's layers in \(0, 1\]"):
        AddOptions(init="fitted", fit_depth=1.5).check()


def test_cli_fit_corpus_without_fitted_is_refused(split, tmp_path):
    fit, _ = split
    res = CliRunner().invoke(cli, ["add", "-t", "Frodo", "--fit-corpus", str(fit), str(FIXTURES / "gpt2-tiny"),
                                   str(tmp_path / "out")])
    assert res.exit_code == 2
    assert "--fit-corpus is for --init fitted (or --init-input/--init-output fitted); pass one" in res.output


def test_cli_missing_fit_corpus_is_refused_before_writing(tmp_path):
    res = CliRunner().invoke(cli, ["add", "-t", "Frodo", "--init", "fitted", "--fit-corpus", str(tmp_path / "nope.txt"),
                                   str(FIXTURES / "gpt2-tiny"), str(tmp_path / "out")])
    assert res.exit_code == 2 and not (tmp_path / "out").exists()
    assert f"{tmp_path / 'nope.txt'}: no such file; pass a UTF-8 text file that uses the new words to --fit-corpus" in res.output


# ------------------------------------------------------------------ batching at scale (issue 31)


def test_the_teacher_pass_in_large_batches_gives_what_one_window_at_a_time_gives(fit_setup, monkeypatch):
    from vocabsurgeon.init.fitted import causal

    m, windows, _, _, _ = fit_setup
    big = causal._teach(m, windows, 8, lambda *a: None, depth=1)
    monkeypatch.setattr(causal, "TEACH_TOKENS", 1)
    assert len(causal.teach_batches([len(w.old) for w in windows], 1)) == len(windows)
    one = causal._teach(m, windows, 1, lambda *a: None, depth=1)
    for a, b in ((big.h, one.h), (big.logz, one.logz), (big.lp_next, one.lp_next), (big.at_depth, one.at_depth)):
        assert [x.shape for x in a] == [x.shape for x in b]
        assert max(float((x - y).abs().max()) for x, y in zip(a, b)) < 1e-4


def test_teach_batches_fill_to_the_token_cap_in_length_order():
    lengths = [30, 5, 10, 10, 40, 5]
    batches = teach_batches(lengths, 2, tokens=40)
    assert sorted(i for b in batches for i in b) == list(range(6))
    assert [[lengths[i] for i in b] for b in batches] == [[5, 5, 10, 10], [30, 40]]  # 2 windows at least


def test_sampled_continuations_do_not_depend_on_the_batch(fit_setup):
    m, _, _, _, _ = fit_setup
    prompts = [m.prefix + p for p in ([5, 6, 7], [9], [11, 12, 13, 14, 15], [3, 4])]
    steps = [6, 9, 4, 0]
    together = sample_continuations(m, prompts, steps, None, [10, 11, 12, 13])
    alone = [sample_continuations(m, [p], [n], None, [s])[0] for p, n, s in zip(prompts, steps, [10, 11, 12, 13])]
    assert together == alone
    assert [len(s) - len(p) for s, p in zip(together, prompts)] == steps
    assert together[0] != sample_continuations(m, prompts[:1], steps[:1], None, [99])[0]  # the seed decides


def test_a_position_sample_keeps_the_word_positions_and_old_text_and_stands_for_the_rest():
    data = _toy_data(P=200)  # word positions 3, 10, 50, 51
    data.weight = torch.cat([torch.ones(150, dtype=torch.float64), torch.full((50,), 16.0, dtype=torch.float64)])
    assert sample_positions(data, 150, 146, 0) is data  # 146 context positions where no word follows: all fit
    cut = sample_positions(data, 150, 40, 0)
    assert cut.h.shape[0] == 4 + 40 + 50
    assert torch.equal(cut.h[cut.q_pos], data.h[data.q_pos]) and torch.equal(cut.q_tok, data.q_tok)
    assert torch.equal(cut.h[-50:], data.h[150:]) and torch.equal(cut.weight[-50:], data.weight[150:])
    assert float(cut.weight[:-50].sum()) == pytest.approx(150.0)  # the sample's weights count every context position
    assert not torch.equal(cut.h[:44], sample_positions(data, 150, 40, 1).h[:44])  # the seed decides


def test_budget_windows_lower_the_windows_per_word_to_fit_the_budget():
    from vocabsurgeon.runtime import load_tokenizer

    tok = load_tokenizer(FIXTURES / "gpt2-tiny")
    text = (FIXTURES / "corpus_lotr.txt").read_text(encoding="utf-8")
    tokens = [FitToken(f, tuple(tok(f, add_special_tokens=False).input_ids)) for f in (" Frodo", " Gandalf")]
    full, per = budget_windows(text, tok, [], tokens, 32, 8, None)
    assert per == 8 and [w.old for w in full] == [w.old for w in word_windows(text, tok, [], tokens, 32, 8)]
    budget = sum(len(w.old) for w in full) // 2
    cut, per = budget_windows(text, tok, [], tokens, 32, 8, budget)
    assert per < 8 and sum(len(w.old) for w in cut) <= budget
    assert [w.old for w in cut] == [w.old for w in word_windows(text, tok, [], tokens, 32, per)]
