"""The trim guarantee on real published tokenizer files (fixtures/published.py: Llama 2 and 3, Qwen3, GPT-2,
GPT-4o's o200k, Gemma 2 and 3, Mistral v0.1 and v0.3 from tokenizer.model only, all-MiniLM's WordPiece, t5-small's
Unigram, bert-base-cased from vocab.txt only), each on a tiny model built around it and trimmed with
fixtures/corpus.txt: text whose original tokens are all kept tokenizes the same (ids through the map, special
tokens included), other text decodes as before, the output loads with AutoTokenizer and its model class, tied
stays tied with the kept rows, and every special id is remapped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from published_models import FIXTURES, NAMES
from safetensors import safe_open
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

from vocabsurgeon import trim_vocabulary
from vocabsurgeon.trim.surgery import IDMAP_NAME

REPO = FIXTURES.parent
CORPUS = FIXTURES / "corpus.txt"
# Other prose than the corpus (texts with removed tokens), and short texts that start or go on with spaces,
# newlines, digits, CJK, emoji and special tokens written in the text
OTHER = [FIXTURES / "corpus_lotr.txt", REPO / "vocabsurgeon" / "data" / "corpus.txt"]
SPACED = [" a", "a", "  Hello", "\nfoo", "\tbar", " \n x", "Hello  world", "x\n\ny", "123 4567 89.0", " 2024-11-25",
          "日本語のテキスト", "emoji 😀🎉 here", "don't", " it's", "Éowyn said: «naïve café» x²"]
# Large vocabularies (128k to 262k rows): a few seconds each to load and trim on 2 cores
SLOW = {"gemma2", "gemma3", "gpt4o", "llama3", "qwen3"}


def _texts() -> list[str]:
    docs = [CORPUS.read_text(encoding="utf-8")] + [p.read_text(encoding="utf-8") for p in OTHER]
    paragraphs = [p for d in docs for p in d.split("\n\n") if p.strip()]
    lines = [line for d in docs for line in d.split("\n") if line.strip()]
    return list(dict.fromkeys([*paragraphs, *lines, *(" " + line for line in lines), *SPACED]))


def _read(path: Path, name: str) -> dict:
    return json.loads((path / name).read_text(encoding="utf-8")) if (path / name).is_file() else {}


def _weights(path: Path) -> dict[str, torch.Tensor]:
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open is not a mapping)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in NAMES])
def test_trim_keeps_the_guarantees_on_published_tokenizer_files(name, published, tmp_path):
    src, out = published(name), tmp_path / "out"
    result = trim_vocabulary(src, out, CORPUS, min_count=1).to_dict()
    assert result["tokens_removed"] > 0
    old_ids = json.loads((out / IDMAP_NAME).read_text(encoding="utf-8"))["old_ids"]
    new_of = {o: n for n, o in enumerate(old_ids)}

    old, new = AutoTokenizer.from_pretrained(src), AutoTokenizer.from_pretrained(out)
    assert type(new).__name__ == type(old).__name__ and len(new) == len(old_ids)
    texts = _texts()
    for special in (False, True):
        olds = old(texts, add_special_tokens=special).input_ids
        news = new(texts, add_special_tokens=special).input_ids
        same = 0
        for text, a, b in zip(texts, olds, news):
            if all(i in new_of for i in a):  # every original token kept: the same tokens, ids through the map
                assert b == [new_of[i] for i in a], (text, old.convert_ids_to_tokens(a), new.convert_ids_to_tokens(b))
                same += 1
            else:  # into kept pieces, decoding as the original's decodes (to the text itself where it round-trips)
                assert new.decode(b, skip_special_tokens=True) == old.decode(a, skip_special_tokens=True), text
        assert same > 30 and len(texts) - same > 20, (same, len(texts))  # both kinds of text, in numbers

    # special tokens and the ids the configs name: kept and remapped
    for tok in old.all_special_tokens:
        assert new.convert_tokens_to_ids(tok) == new_of[old.convert_tokens_to_ids(tok)], tok
    for file in ("config.json", "generation_config.json"):
        a, b = _read(src, file), _read(out, file)
        for key, value in a.items():
            if key.endswith("_token_id") and isinstance(value, int):
                assert b[key] == new_of[value], (file, key)

    # the model loads with its class; tied stays tied; the kept rows are the original rows
    a, b = _weights(src), _weights(out)
    emb = next(k for k in a if k.endswith("embed_tokens.weight") or k.endswith("word_embeddings.weight"))
    assert torch.equal(b[emb], a[emb][torch.tensor(old_ids)])
    assert "lm_head.weight" not in b
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    assert config["vocab_size"] == len(old_ids)
    if name.startswith("bert"):
        model = AutoModel.from_pretrained(out)
        assert model.get_input_embeddings().weight.shape[0] == len(old_ids)
        return
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert config.get("tie_word_embeddings", True) and model.lm_head.weight is model.get_input_embeddings().weight
    orig = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    ids = old(texts[0], add_special_tokens=True).input_ids[:32]
    ids = [i for i in ids if i in new_of]
    with torch.no_grad():
        la = orig(torch.tensor([ids])).logits[0]
        lb = model(torch.tensor([[new_of[i] for i in ids]])).logits[0]
    torch.testing.assert_close(lb, la[:, old_ids], rtol=0, atol=1e-5)
