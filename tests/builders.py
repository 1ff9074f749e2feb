"""Tiny real checkpoints built in code for the tests: transformers' own classes, nothing downloaded."""

from __future__ import annotations

import functools
import inspect
import json
from pathlib import Path

import torch

SPECIAL = "<|endoftext|>"


@functools.lru_cache(maxsize=None)
def training_text() -> tuple[str, ...]:
    """English text from the standard library's docstrings: enough to train a small BPE."""
    import argparse, collections, email, json as _json, logging, os, pathlib, re, subprocess, typing  # noqa: E401

    out = []
    for mod in (argparse, collections, email, _json, logging, os, pathlib, re, subprocess, typing):
        for _, obj in inspect.getmembers(mod):
            doc = inspect.getdoc(obj)
            if doc:
                out.append(doc)
    return tuple(out)


@functools.lru_cache(maxsize=None)
def _bytelevel_json(vocab_size: int) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[SPECIAL], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_text(), trainer)
    return tok.to_str()


def bytelevel_tokenizer(vocab_size: int = 600):
    """A GPT-2 style byte-level BPE tokenizer (transformers object), trained on stdlib docstrings."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_bytelevel_json(vocab_size)),
        bos_token=SPECIAL, eos_token=SPECIAL,
    )


def save_checkpoint(model, tokenizer, path: Path, max_shard_size: str | None = None) -> Path:
    """save_pretrained the model (sharded when max_shard_size is given) and its tokenizer."""
    path = Path(path)
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(path, **kwargs)
    tokenizer.save_pretrained(path)
    return path


def tiny_gpt2(path: Path, vocab_size: int = 600, seed: int = 0) -> Path:
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = bytelevel_tokenizer(vocab_size)
    torch.manual_seed(seed)
    cfg = GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=1, n_head=2, n_positions=64,
                     bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    return save_checkpoint(GPT2LMHeadModel(cfg).eval(), tok, path)


def tiny_llama(path: Path, vocab_size: int = 600, seed: int = 0, dtype=torch.bfloat16) -> Path:
    """Untied, sharded (3+ shards), embedding and lm_head in different shards."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = bytelevel_tokenizer(vocab_size)
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=False,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    model = LlamaForCausalLM(cfg).to(dtype).eval()
    return save_checkpoint(model, tok, path, max_shard_size="40KB")


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))
