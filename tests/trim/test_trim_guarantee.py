"""The trim guarantee, per tokenizer family, on large texts: text whose original tokens were all kept
tokenizes to the same tokens (ids through the map), other text encodes and decodes as before, and the
model's kept logits are the original's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from builders import OLD_TEXTS, family_tokenizer, tiny_checkpoint, training_text
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

from vocabsurgeon import trim_vocabulary
from vocabsurgeon.trim.surgery import IDMAP_NAME

REPO = Path(__file__).resolve().parents[2]
CORPORA = [REPO / "fixtures" / "corpus.txt", REPO / "fixtures" / "corpus_lotr.txt",
           REPO / "vocabsurgeon" / "data" / "corpus.txt"]


def _texts() -> list[str]:
    """Paragraphs of the fixture corpora and of the stdlib docstrings (about 1 MB in all), and every
    fourth line (short texts, more of which use only kept tokens)."""
    docs = [c.read_text(encoding="utf-8") for c in CORPORA] + list(training_text())
    out = [p for doc in docs for p in doc.split("\n\n") if p.strip()]
    out += [line for doc in docs for line in doc.split("\n") if line.strip()][::4]
    return out + OLD_TEXTS + ["Éowyn said: «naïve café» — 北京 🙂 x²"]


def _byte_level_ignore_merges():
    tok = family_tokenizer("byte-level")
    data = json.loads(tok.backend_tokenizer.to_str())
    data["model"]["ignore_merges"] = True  # Llama 3: a word that is a token is taken whole
    from tokenizers import Tokenizer

    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(data)),
                                   bos_token=tok.bos_token, eos_token=tok.eos_token)


def _tokenizer(family: str):
    return _byte_level_ignore_merges() if family == "byte-level-ignore-merges" else family_tokenizer(family)


FAMILIES = ["byte-level", "byte-level-ignore-merges", "byte-level-gpt2", "sp-bpe", "sp-bpe-meta", "sp-bpe-gemma",
            "metaspace-bpe", "unigram", "unigram-file", "wordpiece-uncased", "wordpiece-cased"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """The domain corpus: the fixture corpora (12 kB); the docstrings are held-out text."""
    path = tmp_path_factory.mktemp("corpus") / "en.txt"
    path.write_text("\n\n".join(c.read_text(encoding="utf-8") for c in CORPORA), encoding="utf-8")
    return path


@pytest.mark.parametrize("family", FAMILIES)
def test_kept_text_tokenizes_the_same_and_other_text_round_trips(family, corpus, tmp_path):
    src = tiny_checkpoint(tmp_path / "src", _tokenizer(family))
    r = trim_vocabulary(src, tmp_path / "out", corpus, min_count=2)
    assert 0 < r.to_dict()["tokens_removed"]
    old_ids = json.loads((tmp_path / "out" / IDMAP_NAME).read_text())["old_ids"]
    new_of = {o: n for n, o in enumerate(old_ids)}
    old = AutoTokenizer.from_pretrained(src)
    new = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert len(new) == len(old_ids)
    texts = _texts()
    olds = old(texts, add_special_tokens=False).input_ids  # batched: the fast tokenizers run in parallel
    news = new(texts, add_special_tokens=False).input_ids
    kept_ids = set(new_of)
    kept = [kept_ids.issuperset(a) for a in olds]
    for text, a, b, k in zip(texts, olds, news, kept):
        if k:
            assert b == [new_of[i] for i in a], text
    others = [i for i, k in enumerate(kept) if not k]
    decoded_old = old.batch_decode([olds[i] for i in others])
    decoded_new = new.batch_decode([news[i] for i in others])
    for i, x, y in zip(others, decoded_old, decoded_new):
        assert y == x, texts[i]
        if family.startswith("byte-level"):  # byte-level BPE decodes any text to itself
            assert y == texts[i], texts[i]
    same, other = len(texts) - len(others), len(others)
    # both kinds of text are there in numbers (not a guarantee tested on nothing)
    assert same > 200 and other > 200, (same, other)


@pytest.mark.parametrize("ckpt", ["gpt2_ckpt", "llama_ckpt"])
def test_kept_logits_are_the_originals_so_the_distribution_is_renormalized(ckpt, corpus, tmp_path, request):
    src = request.getfixturevalue(ckpt)
    trim_vocabulary(src, tmp_path / "out", corpus, vocab_size=400, pad_to_multiple_of=16)
    kept = torch.tensor(json.loads((tmp_path / "out" / IDMAP_NAME).read_text())["old_ids"])
    a = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    b = AutoModelForCausalLM.from_pretrained(tmp_path / "out", dtype=torch.float32).eval()
    assert b.get_input_embeddings().weight.shape[0] == 400 and b.config.vocab_size == 400  # 400 is a multiple of 16
    ids = torch.tensor([[i for i in kept.tolist()[300:360]]])
    with torch.no_grad():
        la = a(ids).logits[0]
        lb = b(torch.tensor([[kept.tolist().index(i) for i in ids[0].tolist()]])).logits[0]
    torch.testing.assert_close(lb, la[:, kept], rtol=0, atol=1e-5)
    # per position, log p_new = log p_old - log p_old(kept): KL(p_new || p_old) = -log p_old(kept)
    lpa, lpb = la.log_softmax(-1), lb.log_softmax(-1)
    mass = lpa[:, kept].logsumexp(-1)
    torch.testing.assert_close(lpb, lpa[:, kept] - mass[:, None], rtol=0, atol=1e-5)
    kl = (lpb.exp() * (lpb - lpa[:, kept])).sum(-1)
    torch.testing.assert_close(kl, -mass, rtol=0, atol=1e-5)
    assert np.all(np.isfinite(kl.numpy()))
