"""Tiny real checkpoints built in code for the tests: transformers' own classes, nothing downloaded."""

from __future__ import annotations

import functools
import inspect
import json
from pathlib import Path

import torch
from tokenizers import SentencePieceBPETokenizer, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

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


# ---------------------------------------------------------------------------------------------
# One tokenizer of each family, as real checkpoints ship it (shared by the tokenizer tests)

OLD_TEXTS = [
    "The parser returns a list of strings, and the caller joins them with spaces.",
    "Return a new list of the items (sorted in ascending order); raise an error if it is empty!",
    "It's 42% faster: don't use os.path here.",
]


def _special_ids(vocab_size, specials):
    return dict(vocab_size=vocab_size, special_tokens=specials, show_progress=False)


@functools.lru_cache(maxsize=None)
def _sp_bpe_parts() -> tuple[dict, list]:
    """Vocab and merges of a Llama-2 style BPE: "▁" word starts, byte fallback."""
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    specials = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    tok.train_from_iterator(training_text(), trainers.BpeTrainer(**_special_ids(700, specials)))
    model = json.loads(tok.to_str())["model"]
    return model["vocab"], [tuple(m) for m in model["merges"]]


@functools.lru_cache(maxsize=None)
def _unigram_json() -> str:
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")]
    )
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(vocab_size=600, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>",
                                      show_progress=False)
    tok.train_from_iterator(training_text(), trainer)
    return tok.to_str()


@functools.lru_cache(maxsize=None)
def _wordpiece_vocab(lowercase: bool) -> dict:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(training_text(), trainers.WordPieceTrainer(**_special_ids(600, specials)))
    # the trainer breaks ties between equal counts in a per-process order (the same tokens, other ids):
    # ids in a fixed order, so a seeded model built on it is the same model in every run
    learnt = sorted(t for t in json.loads(tok.to_str())["model"]["vocab"] if t not in specials)
    return {t: i for i, t in enumerate(specials + learnt)}


def make_tokenizer(name: str):
    """A transformers tokenizer of one family, as a real checkpoint of that family ships it."""
    import transformers as T

    if name == "byte-level":  # Llama 3 style: tokenizer.json loaded as written
        return bytelevel_tokenizer(600)
    if name == "byte-level-gpt2":  # GPT-2 / Qwen style: a class that rebuilds from vocab + merges
        data = json.loads(bytelevel_tokenizer(600).backend_tokenizer.to_str())["model"]
        return T.GPT2Tokenizer(vocab=data["vocab"], merges=[tuple(m) for m in data["merges"]],
                               unk_token=SPECIAL, bos_token=SPECIAL, eos_token=SPECIAL)
    if name == "sp-bpe":  # Llama 2 / Mistral: LlamaTokenizer
        vocab, merges = _sp_bpe_parts()
        return T.LlamaTokenizer(vocab=vocab, merges=merges)
    if name == "sp-bpe-file":  # the same tokenizer.json, loaded as written
        vocab, merges = _sp_bpe_parts()
        return PreTrainedTokenizerFast(tokenizer_object=T.LlamaTokenizer(vocab=vocab, merges=merges).backend_tokenizer,
                                       bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    if name == "unigram":  # T5: T5Tokenizer rebuilds from the (piece, score) list
        vocab = [tuple(p) for p in json.loads(_unigram_json())["model"]["vocab"]]
        return T.T5Tokenizer(vocab=vocab, extra_ids=4)
    if name == "unigram-file":
        return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(_unigram_json()),
                                       eos_token="</s>", unk_token="<unk>", pad_token="<pad>")
    if name in ("wordpiece-cased", "wordpiece-uncased"):
        lower = name.endswith("uncased")
        return T.BertTokenizer(vocab=_wordpiece_vocab(lower), do_lower_case=lower)
    raise KeyError(name)


def tiny_checkpoint(path: Path, tok, extra_rows: int = 0) -> Path:
    """A tiny tied Llama saved with `tok`; `extra_rows` past the tokenizer (padding or reserved rows)."""
    n = max(tok.get_vocab().values()) + 1
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=n + extra_rows, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)
    LlamaForCausalLM(cfg).eval().save_pretrained(path)
    tok.save_pretrained(path)
    return Path(path)


def metaspace_bpe() -> PreTrainedTokenizerFast:
    """SentencePiece BPE as the tokenizers library trains it: Metaspace pre-tokenizer and decoder, no byte fallback."""
    sp = SentencePieceBPETokenizer()
    sp.train_from_iterator(training_text(), vocab_size=600, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    return PreTrainedTokenizerFast(tokenizer_object=sp._tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def sp_bpe_meta() -> PreTrainedTokenizerFast:
    """Llama 2's tokenizer.json as Meta ships it: the "▁" written by a Prepend + Replace normalizer, no
    pre-tokenizer, byte fallback, and a decoder that strips the first space (the class is set in
    `_tokenizer_dir`: LlamaTokenizer with legacy true, as in Meta's tokenizer_config.json)."""
    from tokenizers import decoders, models, normalizers

    vocab, merges = _sp_bpe_parts()
    tok = Tokenizer(models.BPE(vocab=vocab, merges=list(merges), byte_fallback=True, fuse_unk=True, unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def sp_bpe_gemma() -> PreTrainedTokenizerFast:
    """Gemma 2/3's layout: a Replace(" ", "▁") normalizer (no "▁" prepended), a Split(" ") pre-tokenizer
    (merged with the previous piece), byte fallback, a decoder without Strip; class GemmaTokenizer."""
    from tokenizers import decoders, models, normalizers
    from tokenizers import pre_tokenizers as pt

    vocab, merges = _sp_bpe_parts()
    tok = Tokenizer(models.BPE(vocab=vocab, merges=list(merges), byte_fallback=True, fuse_unk=True, unk_token="<unk>"))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pt.Split(" ", "merged_with_previous")
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def family_tokenizer(family: str):
    """A transformers tokenizer of one family (make_tokenizer's, or the layouts added for published files)."""
    if family == "sp-bpe-meta":
        return sp_bpe_meta()
    if family == "sp-bpe-gemma":
        return sp_bpe_gemma()
    return metaspace_bpe() if family == "metaspace-bpe" else make_tokenizer(family)


# The tokenizer families above, each as its publishers ship it (the class in tokenizer_config.json), and the
# DeepSeek V3 layout: a byte-level file under a config that names LlamaTokenizerFast, which transformers 5.22 on
# load as TokenizersBackend (it pads on the right, LlamaTokenizerFast on the left; see as_transformers_loads).
ALL_FAMILIES = ["byte-level", "byte-level-gpt2", "byte-level-llama-class", "sp-bpe", "sp-bpe-file", "sp-bpe-meta",
                "sp-bpe-gemma", "metaspace-bpe", "unigram", "unigram-file", "wordpiece-cased", "wordpiece-uncased"]
SHIPPED_CLASS = {"sp-bpe-meta": {"tokenizer_class": "LlamaTokenizer", "legacy": True},
                 "sp-bpe-gemma": {"tokenizer_class": "GemmaTokenizer"},
                 "byte-level-llama-class": {"tokenizer_class": "LlamaTokenizerFast"}}


def as_transformers_loads(path: Path):
    """AutoTokenizer of `path` as transformers 5.22 on load it. 5.17 to 5.21 rebuild a LlamaTokenizer(Fast) over a
    byte-level tokenizer.json (byte-level-llama-class, DeepSeek V3's layout) with SentencePiece's pipeline (a Russian
    paragraph gets three ids, an <unk> is appended); 5.22 load it as written, and vocabsurgeon reads the input so
    and writes a class that every version loads as written (issue 38)."""
    from transformers import AutoTokenizer

    cfg, file = path / "tokenizer_config.json", path / "tokenizer.json"
    declared = read_json(cfg).get("tokenizer_class") or "" if cfg.exists() else ""
    pipeline = {k: v for k, v in read_json(file).items() if k != "model"} if file.exists() else {}
    if declared.removesuffix("Fast") == "LlamaTokenizer" and '"ByteLevel"' in json.dumps(pipeline):
        return PreTrainedTokenizerFast.from_pretrained(str(path))  # transformers 5.22's TokenizersBackend
    return AutoTokenizer.from_pretrained(str(path))


def family_checkpoint(path: Path, family: str, rows_multiple: int = 1) -> Path:
    """`tiny_checkpoint` around a tokenizer of `family` (one of ALL_FAMILIES), with its shipped class; with
    `rows_multiple`, its rows padded past the tokenizer to a multiple of it (as Qwen's 151,669 tokens have
    151,936 rows), by at least one row."""
    tok = bytelevel_tokenizer(600) if family == "byte-level-llama-class" else family_tokenizer(family)
    n = max(tok.get_vocab().values()) + 1
    path = tiny_checkpoint(path, tok, (-n) % rows_multiple or rows_multiple if rows_multiple > 1 else 0)
    if family in SHIPPED_CLASS:
        cfg = read_json(path / "tokenizer_config.json")
        cfg.update(SHIPPED_CLASS[family])
        (path / "tokenizer_config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return path


def tiny_gemma3(sliding_window: int = 64, seed: int = 0):
    """(a tiny tied Gemma3ForCausalLM, its byte-level tokenizer): an embedding that multiplies by
    sqrt(hidden) = 8 in its own forward, and a sliding-window layer before a full-attention one."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    tok = bytelevel_tokenizer(600)
    torch.manual_seed(seed)
    cfg = Gemma3TextConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=64,
                           layer_types=["sliding_attention", "full_attention"], sliding_window=sliding_window,
                           tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                           pad_token_id=tok.eos_token_id)
    return Gemma3ForCausalLM(cfg).eval(), tok
