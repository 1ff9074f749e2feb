"""Tests for compare.py and the `compare` / `neighbors` commands: the metric against brute force, its invariants, the CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from hypothesis import given, settings, strategies as st
from safetensors.numpy import load_file, save_file
from tokenizers import Tokenizer

from builders import tiny_gpt2
from vocabsurgeon import add_tokens
from vocabsurgeon.cli.commands import cli
from vocabsurgeon.explore.compare import knn_match, load_space, top_k
from vocabsurgeon.errors import InputError

WTE = "transformer.wte.weight"


# ---------------------------------------------------------------------------- brute-force reference


def brute_knn(x: np.ndarray, k: int, metric: str = "dot") -> list[list[int]]:
    """The k nearest other rows of x, from the full n x n matrix (sorted best first)."""
    x = np.asarray(x, np.float64)
    if metric == "cosine":
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
    s = x @ x.T
    np.fill_diagonal(s, -np.inf)
    return [list(np.argsort(-row, kind="stable")[:k]) for row in s]


def brute_match(a: np.ndarray, b: np.ndarray, k: int) -> np.ndarray:
    na, nb = brute_knn(a, k), brute_knn(b, k)
    return np.array([len(set(p) & set(q)) / len(set(p) | set(q)) for p, q in zip(na, nb)])


def rng_matrix(seed: int, n: int, d: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, d))  # float64: no ties


# ---------------------------------------------------------------------------- the math


@pytest.mark.parametrize("chunk_rows", [1, 7, None])
@pytest.mark.parametrize("metric", ["dot", "cosine"])
def test_top_k_equals_brute_force(chunk_rows, metric):
    x = rng_matrix(1, 53, 6) * np.random.default_rng(2).uniform(0.2, 3, (53, 1))  # varied norms
    ids, scores = top_k(x, 5, metric=metric, chunk_rows=chunk_rows)
    assert ids.tolist() == [[int(i) for i in r] for r in brute_knn(x, 5, metric)]
    full = x @ x.T if metric == "dot" else (x / np.linalg.norm(x, axis=1, keepdims=True)) @ (
        x / np.linalg.norm(x, axis=1, keepdims=True)).T
    np.testing.assert_allclose(scores, np.take_along_axis(full, ids, axis=1), rtol=1e-12)
    assert scores.dtype == np.float64  # the input's precision is kept


def test_top_k_query_rows_and_self_exclusion():
    x = rng_matrix(3, 40, 5)
    ids, _ = top_k(x, 39, rows=[4, 0, 17], chunk_rows=2)
    for q, row in zip([4, 0, 17], ids):
        assert q not in row.tolist() and sorted(row.tolist()) == sorted(set(range(40)) - {q})


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(3, 40), da=st.integers(1, 9), db=st.integers(1, 9),
       k=st.integers(1, 8), chunk=st.integers(1, 45))
def test_knn_match_equals_brute_force(seed, n, da, db, k, chunk):
    k = min(k, n - 1)
    a, b = rng_matrix(seed, n, da), rng_matrix(seed + 1, n, db)  # widths may differ
    got = knn_match(a, b, k, chunk_rows=chunk)
    np.testing.assert_array_equal(got, brute_match(a, b, k))


def test_knn_match_of_a_space_with_itself_is_one():
    x = rng_matrix(4, 300, 16)
    assert knn_match(x, x, 10).tolist() == [1.0] * 300


def test_knn_match_is_one_under_orthogonal_rotation():
    x = rng_matrix(5, 300, 16)
    q, _ = np.linalg.qr(np.random.default_rng(6).standard_normal((16, 16)))
    assert np.allclose(q @ q.T, np.eye(16))
    rotated = x @ q  # inner products are kept, so every neighbour set is
    assert knn_match(x, rotated, 10).tolist() == [1.0] * 300
    # cosine-only changes are not invisible: scaling rows changes inner-product neighbours
    scaled = x * np.random.default_rng(7).uniform(0.1, 10, (300, 1))
    assert knn_match(x, scaled, 10).mean() < 0.9


def test_knn_match_of_a_row_shuffled_copy_is_near_zero():
    x = rng_matrix(8, 2000, 16)
    shuffled = x[np.random.default_rng(9).permutation(2000)]  # row i is now another token's vector
    score = knn_match(x, shuffled, 10)
    assert score.mean() < 0.02  # chance level is about k / n = 0.005
    assert score.mean() == pytest.approx(brute_match(x, shuffled, 10).mean(), abs=1e-12)


def test_knn_match_values_are_jaccard_steps():
    a, b = rng_matrix(10, 200, 8), rng_matrix(11, 200, 8)
    k = 6
    allowed = {i / (2 * k - i) for i in range(k + 1)}
    assert set(knn_match(a, b, k).tolist()) <= allowed


def test_errors_for_k_and_shapes():
    x = rng_matrix(12, 5, 3)
    with pytest.raises(InputError) as e:
        knn_match(x, x, 5)
    assert str(e.value) == "--k 5 needs more than 5 tokens, but the vocabulary compared has 5; pass a smaller --k"
    with pytest.raises(InputError) as e:
        top_k(x, 0)
    assert str(e.value) == "--k must be at least 1 (got 0)"
    with pytest.raises(InputError) as e:
        knn_match(x, x[:4], 2)
    assert str(e.value) == "the two matrices must have one row per token each, got 5 and 4 rows"
    with pytest.raises(InputError) as e:
        top_k(x, 2, metric="l2")
    assert str(e.value) == "--metric 'l2' is not one of dot, cosine"


def test_device_plumbing_on_cpu():
    """The CUDA path is the same torch code with another torch.device: run it with an explicit device object."""
    a, b = rng_matrix(13, 64, 8), rng_matrix(14, 64, 8)
    expected = brute_match(a, b, 5)
    for device in ("cpu", "auto", torch.device("cpu")):
        np.testing.assert_array_equal(knn_match(a, b, 5, device=device, chunk_rows=9), expected)
    # torch inputs are accepted too (as the matrices are, after the move to the device)
    np.testing.assert_array_equal(knn_match(torch.from_numpy(a), torch.from_numpy(b), 5), expected)


def _uncased_checkpoint(path: Path) -> Path:
    """A tiny Llama with an uncased BERT tokenizer, padding on in tokenizer.json (as sentence-transformers ship)."""
    import transformers as T

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", "world", "shire", "the", "a", "##s", "##o", "[MASK]"]
    tok = T.BertTokenizer(vocab={w: i for i, w in enumerate(words)}, do_lower_case=True)
    torch.manual_seed(0)
    cfg = T.LlamaConfig(vocab_size=len(words), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                        num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    T.LlamaForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    data = json.loads((path / "tokenizer.json").read_text())
    data["padding"] = {"strategy": {"Fixed": 16}, "direction": "Right", "pad_to_multiple_of": None,
                       "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"}
    (path / "tokenizer.json").write_text(json.dumps(data))
    return path


def test_cli_neighbors_reads_a_query_as_the_tokenizer_does_and_answers_the_others(tmp_path):
    ckpt = _uncased_checkpoint(tmp_path / "uncased")
    r = invoke("neighbors", ckpt, "Hello", "Frodo", "WORLD", "--k", 2, "--json")
    assert r.exit_code == 2
    got = json.loads(r.stdout)["tokens"]
    assert [(g["query"], g.get("id")) for g in got] == [("Hello", 4), ("Frodo", None), ("WORLD", 5)]
    assert len(got[0]["neighbors"]) == len(got[2]["neighbors"]) == 2
    message = (f"'Frodo' is not one token of {ckpt / 'tokenizer.json'} (it splits into '[UNK]'); pass one "
               "of those pieces, a row as '#id', or add the word first with `vocabsurgeon add`")
    assert got[1]["error"] == message
    assert r.stderr == f"Error: {message}\n"
    r = invoke("neighbors", ckpt, "Hello", "Frodo", "--k", 2)
    assert r.exit_code == 2
    assert r.stdout.splitlines()[0] == "'hello' (id 4):" and len(r.stdout.splitlines()) == 3
    assert r.stderr == f"Error: {message}\n"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown when there is no GPU")
def test_cuda_without_gpu_is_a_clear_error():
    x = rng_matrix(15, 10, 3)
    with pytest.raises(InputError) as e:
        knn_match(x, x, 2, device="cuda")
    assert str(e.value) == "--device cuda was asked for but no CUDA device is available; use --device cpu or auto"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_matches_brute_force():
    a, b = rng_matrix(16, 3000, 32), rng_matrix(17, 3000, 24)
    expected = brute_match(a, b, 10)
    np.testing.assert_array_equal(knn_match(a, b, 10, device="cuda", chunk_rows=257), expected)
    np.testing.assert_array_equal(knn_match(a, b, 10, device="cuda"), expected)
    ids, _ = top_k(a, 10, metric="cosine", device="cuda")
    assert ids.tolist() == [[int(i) for i in r] for r in brute_knn(a, 10, "cosine")]


# ---------------------------------------------------------------------------- checkpoints and the CLI


def invoke(*args):
    result = CliRunner().invoke(cli, [str(a) for a in args])
    return result


def write_wte(ckpt: Path, transform) -> Path:
    """Rewrite the tied GPT-2 embedding of `ckpt` in place with transform(matrix)."""
    f = ckpt / "model.safetensors"
    tensors = load_file(str(f))
    tensors[WTE] = np.ascontiguousarray(transform(tensors[WTE]))
    save_file(tensors, str(f), metadata={"format": "pt"})
    return ckpt


def vocab_size(ckpt: Path) -> int:
    return Tokenizer.from_file(str(ckpt / "tokenizer.json")).get_vocab_size(with_added_tokens=True)


def test_cli_compare_with_itself_json(gpt2_ckpt):
    r = invoke("compare", gpt2_ckpt, gpt2_ckpt, "--json", "--k", 7)
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["knn_match"]["mean"] == 1.0
    assert out["k"] == 7 and out["tokens_compared"] == vocab_size(gpt2_ckpt) and out["matched_by"] == "string"
    assert out["knn_match"]["histogram"][-1] == {"shared": 7, "score": 1.0, "tokens": out["tokens_compared"]}
    assert out["device"] == "cpu" or torch.cuda.is_available()


def test_cli_compare_shuffled_rows_against_brute_force(gpt2_ckpt, tmp_path):
    other = Path(shutil.copytree(gpt2_ckpt, tmp_path / "shuffled"))
    perm = np.random.default_rng(0).permutation(vocab_size(gpt2_ckpt))
    write_wte(other, lambda m: m[perm])
    r = invoke("compare", gpt2_ckpt, other, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    a = load_file(str(gpt2_ckpt / "model.safetensors"))[WTE]
    expected = brute_match(a, a[perm], 10).mean()
    assert out["knn_match"]["mean"] == pytest.approx(expected, abs=0.005)  # float32 vs float64 near-ties
    assert out["knn_match"]["mean"] < 0.05
    assert len(out["lowest"]) == 10 and out["lowest"][0]["score"] <= out["highest"][0]["score"]


def test_cli_compare_human_output_and_plot(gpt2_ckpt, llama_ckpt, tmp_path):
    png = tmp_path / "hist.png"
    r = invoke("compare", gpt2_ckpt, llama_ckpt, "--k", 5, "--plot", png)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0] == "KNN-match similarity of input matrices, k=5 nearest neighbours by inner product"
    assert lines[1] == f"  A: {gpt2_ckpt} ({WTE}, {vocab_size(gpt2_ckpt)} x 32)"
    assert lines[2] == f"  B: {llama_ckpt} (model.embed_tokens.weight, {vocab_size(llama_ckpt)} x 32)"
    assert lines[3] == f"  tokens compared: {vocab_size(gpt2_ckpt)}"
    assert len([ln for ln in lines if ln.startswith("  ") and ln.split()[0].isdigit()]) == 6  # 0..k shared
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"Wrote {png}" in r.stderr


def test_cli_compare_which_output(llama_ckpt):
    same = json.loads(invoke("compare", llama_ckpt, llama_ckpt, "--which", "output", "--json").stdout)
    assert same["tensor_a"] == "lm_head.weight" and same["knn_match"]["mean"] == 1.0
    # the untied input and output matrices are different spaces
    space_in, space_out = load_space(llama_ckpt, "input"), load_space(llama_ckpt, "output")
    assert knn_match(space_in.matrix, space_out.matrix, 10).mean() < 0.5


def test_cli_compare_after_add_uses_the_shared_tokens(gpt2_ckpt, tmp_path):
    out_dir = tmp_path / "added"
    add_tokens(gpt2_ckpt, out_dir, ["Frodo", "Gandalf"], init="subword-mean")
    r = invoke("compare", gpt2_ckpt, out_dir, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    n = vocab_size(gpt2_ckpt)
    assert vocab_size(out_dir) == n + 4  # "Frodo", " Frodo", "Gandalf", " Gandalf"
    assert out["tokens_compared"] == n and out["tokens_b"] == n + 4
    assert out["knn_match"]["mean"] == 1.0  # old rows are unchanged and neighbours come from the shared tokens
    assert r.stderr.count(f"WARNING: the vocabularies differ: comparing the {n} tokens both share "
                          f"(A has {n} rows, B {n + 4})") == 1


def test_cli_compare_different_vocabularies(gpt2_ckpt, tmp_path):
    other = tiny_gpt2(tmp_path / "small", vocab_size=450, seed=1)
    va = Tokenizer.from_file(str(gpt2_ckpt / "tokenizer.json")).get_vocab(with_added_tokens=True)
    vb = Tokenizer.from_file(str(other / "tokenizer.json")).get_vocab(with_added_tokens=True)
    shared = set(va) & set(vb)
    assert len(va) > len(shared) and len(vb) == len(shared)  # the smaller BPE's merges are a prefix
    r = invoke("compare", gpt2_ckpt, other)
    assert r.exit_code == 0, r.output
    assert f"  tokens compared: {len(shared)}" in r.stdout.splitlines()
    out = json.loads(invoke("compare", gpt2_ckpt, other, "--json").stdout)
    assert out["tokens_compared"] == len(shared)
    for t in out["lowest"] + out["highest"]:  # ids map through the strings, not the row numbers
        assert va_text(va, t["id_a"]) == va_text(vb, t["id_b"])


def va_text(vocab: dict, i: int) -> str:
    return next(s for s, j in vocab.items() if j == i)


def test_compare_without_tokenizer_matches_rows(gpt2_ckpt, tmp_path):
    other = Path(shutil.copytree(gpt2_ckpt, tmp_path / "bare"))
    (other / "tokenizer.json").unlink()
    r = invoke("compare", gpt2_ckpt, other, "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["matched_by"] == "row" and out["tokens_compared"] == vocab_size(gpt2_ckpt)
    assert out["knn_match"]["mean"] == 1.0
    assert f"WARNING: {other / 'tokenizer.json'}: missing; tokens are shown and matched by row id" in r.stderr


def test_cli_neighbors_of_a_new_token(gpt2_ckpt, tmp_path):
    out_dir = tmp_path / "added"
    add_tokens(gpt2_ckpt, out_dir, ["Frodo"], init="subword-mean")
    tok = Tokenizer.from_file(str(out_dir / "tokenizer.json"))
    frodo = tok.token_to_id("Frodo")
    r = invoke("neighbors", out_dir, "Frodo", "--k", 20, "--metric", "cosine", "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)["tokens"][0]
    assert got["id"] == frodo and got["token"] == "Frodo" and got["query"] == "Frodo"
    m = load_file(str(out_dir / "model.safetensors"))[WTE]
    expected = brute_knn(m, 20, "cosine")[frodo]
    assert [n["id"] for n in got["neighbors"]] == [int(i) for i in expected]
    scores = [n["score"] for n in got["neighbors"]]
    assert scores == sorted(scores, reverse=True)
    # subword-mean puts Frodo next to its pieces, and next to " Frodo" (the mean of nearly the same pieces)
    pieces = Tokenizer.from_file(str(gpt2_ckpt / "tokenizer.json")).encode("Frodo", add_special_tokens=False).ids
    assert len(pieces) >= 2
    assert got["neighbors"][0]["token"] == " Frodo"
    assert set(pieces) <= {n["id"] for n in got["neighbors"]}


def test_cli_neighbors_human_output_and_token_forms(gpt2_ckpt):
    tok = Tokenizer.from_file(str(gpt2_ckpt / "tokenizer.json"))
    the = tok.token_to_id("Ġthe")
    assert the is not None
    r = invoke("neighbors", gpt2_ckpt, " the", "Ġthe", f"#{the}", "--k", 3)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert len(lines) == 12 and lines[0:4] == lines[4:8] == lines[8:12]  # three names of one row
    assert lines[0] == f"' the' (id {the}):"
    m = load_file(str(gpt2_ckpt / "model.safetensors"))[WTE].astype(np.float64)
    best = brute_knn(m, 3)[the]
    for rank, (line, i) in enumerate(zip(lines[1:4], best), 1):
        text = tok.decode([int(i)])
        assert line == f"  {rank:>3}  {m[the] @ m[i]:>10.4f}  {text!r} (id {i})"


def test_cli_neighbors_errors(gpt2_ckpt):
    r = invoke("neighbors", gpt2_ckpt, "Frodo")
    assert r.exit_code == 2
    tok = Tokenizer.from_file(str(gpt2_ckpt / "tokenizer.json"))
    pieces = " ".join(repr(tok.decode([i])) for i in tok.encode("Frodo", add_special_tokens=False).ids)
    assert r.stderr == (
        f"Error: 'Frodo' is not one token of {gpt2_ckpt / 'tokenizer.json'} (it splits into {pieces}); pass one "
        "of those pieces, a row as '#id', or add the word first with `vocabsurgeon add`\n"
    )
    n = vocab_size(gpt2_ckpt)
    r = invoke("neighbors", gpt2_ckpt, f"#{n}")
    assert r.exit_code == 2
    assert r.stderr == f"Error: #{n}: {gpt2_ckpt} has rows 0..{n - 1} in '{WTE}'; pass a smaller id\n"
    r = invoke("neighbors", gpt2_ckpt, "#0", "--k", n)
    assert r.exit_code == 2
    assert r.stderr == f"Error: --k {n} needs more than {n} tokens, but '{WTE}' has {n}; pass a smaller --k\n"
    r = invoke("neighbors", gpt2_ckpt)
    assert r.exit_code == 2 and "Missing argument 'TOKENS...'" in r.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown when there is no GPU")
def test_cli_device_cuda_without_gpu(gpt2_ckpt):
    r = invoke("compare", gpt2_ckpt, gpt2_ckpt, "--device", "cuda")
    assert r.exit_code == 2
    assert r.stderr == ("Error: --device cuda was asked for but no CUDA device is available; "
                        "use --device cpu or auto\n")


def test_cli_nan_row_is_refused(gpt2_ckpt, tmp_path):
    other = Path(shutil.copytree(gpt2_ckpt, tmp_path / "nan"))

    def poison(m):
        m = m.copy()
        m[17, 3] = np.nan
        return m

    write_wte(other, poison)
    r = invoke("compare", gpt2_ckpt, other)
    assert r.exit_code == 2
    assert r.stderr == f"Error: {other}: tensor '{WTE}' row 17 holds NaN or Inf; fix or drop that row first\n"


def test_help_says_what_k_means_and_why_inner_product():
    text = " ".join(invoke("compare", "--help").stdout.split())
    assert "K nearest neighbours by inner product (itself excluded)" in text
    assert "Inner product, not cosine: the model scores with inner products" in text
    assert "K: how many nearest neighbours of each token" in text
    n_text = " ".join(invoke("neighbors", "--help").stdout.split())
    assert "--metric [dot|cosine]" in n_text and "K: how many nearest neighbours" in n_text


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cli_compare_on_cuda(gpt2_ckpt, tmp_path):
    other = Path(shutil.copytree(gpt2_ckpt, tmp_path / "shuffled"))
    perm = np.random.default_rng(0).permutation(vocab_size(gpt2_ckpt))
    write_wte(other, lambda m: m[perm])
    cpu = json.loads(invoke("compare", gpt2_ckpt, other, "--json", "--device", "cpu").stdout)
    gpu = json.loads(invoke("compare", gpt2_ckpt, other, "--json", "--device", "cuda").stdout)
    assert gpu["device"].startswith("cuda")
    assert gpu["knn_match"]["mean"] == pytest.approx(cpu["knn_match"]["mean"], abs=0.005)
