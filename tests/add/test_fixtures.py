"""The README's main job on the committed, trained fixtures, checked the way a user would."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from conftest import FIXTURES
from invariants import bound, check_surgery, kl_old_new, tree_digest

LOTR = [w for w in (FIXTURES / "lotr.txt").read_text(encoding="utf-8").splitlines() if w]


@pytest.mark.parametrize("name", ["gpt2-tiny", "llama-tiny"])
def test_readme_main_job_on_fixture(name, tmp_path):
    src = FIXTURES / name
    before = tree_digest(src)
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "vocabsurgeon", "add", "--tokens", str(FIXTURES / "lotr.txt"),
                        "--init", "mean", "--json", "--no-validate", str(src), str(out)],
                       capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    k = summary["rows_after"] - summary["rows_before"]
    assert k == 2 * len(LOTR)
    check_surgery(src, out, k)
    assert tree_digest(src) == before

    old_tok, new_tok = AutoTokenizer.from_pretrained(src), AutoTokenizer.from_pretrained(out)
    old_m = AutoModelForCausalLM.from_pretrained(src).eval()
    new_m = AutoModelForCausalLM.from_pretrained(out).eval()

    corpus = (FIXTURES / "corpus.txt").read_text(encoding="utf-8")
    ids = old_tok(corpus).input_ids
    assert new_tok(corpus).input_ids == ids, "text without new words must tokenize exactly as before"
    x = torch.tensor([ids[:128]])
    with torch.no_grad():
        lo, ln = old_m(x).logits[0], new_m(x).logits[0]
    n = lo.shape[-1]
    assert torch.equal(lo, ln[:, :n])
    assert kl_old_new(lo, ln).max().item() <= bound(k, n) + 1e-9

    lotr_text = (FIXTURES / "corpus_lotr.txt").read_text(encoding="utf-8")
    new_ids = new_tok(lotr_text).input_ids
    pieces = new_tok.convert_ids_to_tokens(new_ids)
    assert new_tok.decode(new_ids) == lotr_text
    old_pieces = old_tok.convert_ids_to_tokens(old_tok(lotr_text).input_ids)
    assert pieces.count("Ġ") == old_pieces.count("Ġ"), "no stray whitespace pieces beyond the text's own"
    single = [new_tok.decode([i]).strip() for i in new_ids]
    for w in LOTR:  # every occurrence of a new word is exactly one token
        assert lotr_text.count(w) == single.count(w), w
    assert len(new_ids) < len(old_tok(lotr_text).input_ids)
