"""bench/oracle.py trains only the new rows it is asked to, and lowers the loss of its text."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import oracle
from vocabsurgeon import add_tokens, read_tokens_file
from vocabsurgeon.runtime import corpus_windows, encode, load_tokenizer

REPO = Path(__file__).resolve().parents[2]


def _rows(ckpt: Path):
    from safetensors.torch import load_file

    tensors = {}
    for f in sorted(ckpt.glob("*.safetensors")):
        tensors.update(load_file(f))
    emb = next(v for k, v in tensors.items() if k.endswith("wte.weight"))
    out = next(v for k, v in tensors.items() if k.endswith("lm_head.weight"))
    return emb, out


@pytest.mark.slow  # two adds and a few training passes on the tiny GPT-2: ~1 min on 2 loaded cores
@pytest.mark.parametrize("roles", [{"output"}, {"input", "output"}])
def test_oracle_lowers_the_loss_and_moves_only_the_new_rows_of_its_roles(tmp_path, roles):
    src = REPO / "fixtures" / "gpt2-tiny"
    out = tmp_path / "out"
    add_tokens(src, out, read_tokens_file(REPO / "fixtures" / "lotr.txt"), init="mean", untie=True, device="cpu")
    tok, n_old = load_tokenizer(out), len(load_tokenizer(src))
    text = (REPO / "fixtures" / "corpus_lotr.txt").read_text(encoding="utf-8")[:3000]
    seqs = corpus_windows(encode(tok, text), [tok.bos_token_id], 64)
    assert any(t >= n_old for s in seqs for t in s)  # the text uses the new tokens
    emb0, out0 = _rows(out)
    report = oracle.train_rows(out, n_old, seqs, 1, roles, max_passes=3, lr=0.05)
    emb1, out1 = _rows(out)
    assert report["final_loss"] < report["start_loss"]
    assert report["passes"] >= (1 if "input" in roles else 0)
    assert emb1[:n_old].equal(emb0[:n_old]) and out1[:n_old].equal(out0[:n_old])
    assert (not emb1[n_old:].equal(emb0[n_old:])) == ("input" in roles)
    assert not out1[n_old:].equal(out0[n_old:])


def test_oracle_refuses_tied_rows(tmp_path):
    out = tmp_path / "out"
    add_tokens(REPO / "fixtures" / "gpt2-tiny", out, ["Frodo"], init="mean", device="cpu")
    with pytest.raises(ValueError, match="needs untied rows"):
        oracle.train_rows(out, 2048, [[1, 2, 3]], 1, {"output"}, max_passes=1, lr=0.05)
