"""`add` on every model family of the architecture table, built tiny with transformers' own classes.

Each family is saved with `save_pretrained(max_shard_size=...)` (several shards), grown with the CLI,
and loaded back with the family's Auto class. Per family: every vocabulary-sized tensor grows,
old rows are bit-identical, other tensors are untouched, tying is kept, new bias entries hold the
mean bias, config vocab sizes equal the rows, token ids of the configs still name the same tokens,
the old logits are unchanged and mean-init KL(p_old || p_new) <= log(1 + k/n).
"""

from __future__ import annotations

import functools
import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import torch
from click.testing import CliRunner
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import transformers as T
from builders import SPECIAL, bytelevel_tokenizer, save_checkpoint
from vocabsurgeon.checkpoint.architectures import ARCHITECTURES, detect, text_config
from vocabsurgeon.checkpoint.reader import INDEX_NAME, Checkpoint
from vocabsurgeon.cli.commands import cli
from vocabsurgeon.checkpoint.filenames import REPORT_NAME

WORDS = ["Frodo", "Gandalf"]
TEXT_OLD = "The parser returns a list of strings, and the caller joins them with spaces."
TEXT_NEW = "Frodo asked Gandalf about the parser."
SHARD = "20KB"  # a few shards for a hidden size of 32 and 600 rows
V = 600  # tokenizer size; padded families have more rows


def _tok():
    return bytelevel_tokenizer(V)


def _ids(tok) -> dict:
    return {"bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id, "pad_token_id": tok.eos_token_id}


def _decoder(**kw) -> dict:
    return dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=1, max_position_embeddings=64, **kw)


def _small(**kw) -> dict:
    return dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                max_position_embeddings=64, **kw)


def _t5(tied: bool):
    tok = _tok()
    cfg = T.T5Config(vocab_size=V, d_model=32, d_ff=64, d_kv=16, num_layers=1, num_decoder_layers=1, num_heads=2,
                     tie_word_embeddings=tied, decoder_start_token_id=tok.eos_token_id, **_ids(tok))
    return T.T5ForConditionalGeneration(cfg)


def _gemma3n(per_layer_rows: int):
    tok = _tok()
    cfg = T.Gemma3nTextConfig(
        vocab_size=V, vocab_size_per_layer_input=per_layer_rows, hidden_size=32, hidden_size_per_layer_input=8,
        intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
        laurel_rank=4, altup_num_inputs=2, activation_sparsity_pattern=[0.0, 0.0], num_kv_shared_layers=0,
        layer_types=["sliding_attention", "full_attention"], **_ids(tok),
    )
    return T.Gemma3nForCausalLM(cfg)


@functools.cache
def _gemma3n_runs_ids_past_its_per_layer_table() -> bool:
    """Whether the installed transformers runs a Gemma 3n text model on ids past its per-layer table (5.17-5.20
    raise IndexError there, the model's own ids included; 5.21 on give them id 0's per-layer input)."""
    model = _gemma3n(per_layer_rows=512).eval()
    try:
        with torch.no_grad():
            model(torch.tensor([[V - 1]]))
    except IndexError:
        return False
    return True


def _skip_where_add_refuses(family: str) -> None:
    """Skip the family whose add this transformers refuses (test_add_on_a_partial_per_layer_gemma3n checks it)."""
    if family == "gemma3n-partial-per-layer" and not _gemma3n_runs_ids_past_its_per_layer_table():
        pytest.skip("this transformers' Gemma 3n text model raises IndexError on ids past its per-layer table, so add "
                    "refuses it (test_add_on_a_partial_per_layer_gemma3n_runs_or_is_refused_at_start)")


def _llava():
    tok = _tok()
    text = T.LlamaConfig(vocab_size=V, tie_word_embeddings=False, **_decoder(), **_ids(tok))
    vision = T.CLIPVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                                image_size=16, patch_size=8, projection_dim=16)
    # The image token is the special token, which the test texts never contain.
    return T.LlavaForConditionalGeneration(T.LlavaConfig(text_config=text, vision_config=vision,
                                                         image_token_index=tok.convert_tokens_to_ids(SPECIAL)))


@dataclass(frozen=True)
class Family:
    """A tiny model of one family and what `add` must grow in it."""

    build: Callable[[], T.PreTrainedModel]
    auto: type  # the Auto class that loads it back
    architecture: str  # the row of ARCHITECTURES it must be detected as
    tensors: tuple[str, ...]  # every vocabulary-sized tensor transformers 5 stores for it
    tied: bool
    stored_copies: tuple[tuple[str, str], ...] = ()  # (name, source): tied copies older exports also store
    stored_untied: tuple[tuple[str, str], ...] = ()  # (name, like): a separate matrix stored next to `like`
    config: tuple[tuple[str, object], ...] = ()  # config.json edits, as on the Hub


FAMILIES = {
    "gpt2": Family(
        lambda: T.GPT2LMHeadModel(T.GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=2, n_positions=64,
                                               **_ids(_tok()))),
        T.AutoModelForCausalLM, "gpt2", ("transformer.wte.weight",), tied=True),
    "llama": Family(
        lambda: T.LlamaForCausalLM(T.LlamaConfig(vocab_size=V, tie_word_embeddings=False, **_decoder(), **_ids(_tok()))),
        T.AutoModelForCausalLM, "llama", ("model.embed_tokens.weight", "lm_head.weight"), tied=False),
    "mistral": Family(
        lambda: T.MistralForCausalLM(T.MistralConfig(vocab_size=V, tie_word_embeddings=False, **_decoder(),
                                                     **_ids(_tok()))),
        T.AutoModelForCausalLM, "mistral", ("model.embed_tokens.weight", "lm_head.weight"), tied=False),
    # Qwen pads the embedding past the tokenizer (151936 rows for 151665 tokens); here 640 for 600.
    "qwen2": Family(
        lambda: T.Qwen2ForCausalLM(T.Qwen2Config(vocab_size=640, tie_word_embeddings=True, **_decoder(),
                                                 **_ids(_tok()))),
        T.AutoModelForCausalLM, "qwen2", ("model.embed_tokens.weight",), tied=True),
    "qwen3": Family(
        lambda: T.Qwen3ForCausalLM(T.Qwen3Config(vocab_size=640, tie_word_embeddings=True, head_dim=16,
                                                 **_decoder(), **_ids(_tok()))),
        T.AutoModelForCausalLM, "qwen2", ("model.embed_tokens.weight",), tied=True),
    "gemma": Family(
        lambda: T.GemmaForCausalLM(T.GemmaConfig(vocab_size=V, head_dim=16, **_decoder(), **_ids(_tok()))),
        T.AutoModelForCausalLM, "gemma", ("model.embed_tokens.weight",), tied=True),
    "gemma2": Family(
        lambda: T.Gemma2ForCausalLM(T.Gemma2Config(vocab_size=V, head_dim=16, **_decoder(), **_ids(_tok()))),
        T.AutoModelForCausalLM, "gemma", ("model.embed_tokens.weight",), tied=True),
    "gemma3n-per-layer": Family(
        lambda: _gemma3n(per_layer_rows=V), T.AutoModelForCausalLM, "gemma3n",
        ("model.embed_tokens.weight", "model.embed_tokens_per_layer.weight"), tied=True),
    # As in the released Gemma 3n: the per-layer table covers only the first ids, so it stays as is.
    "gemma3n-partial-per-layer": Family(
        lambda: _gemma3n(per_layer_rows=512), T.AutoModelForCausalLM, "gemma3n",
        ("model.embed_tokens.weight",), tied=True),
    "gpt_neox": Family(
        lambda: T.GPTNeoXForCausalLM(T.GPTNeoXConfig(vocab_size=V, **_small(), **_ids(_tok()))),
        T.AutoModelForCausalLM, "gpt_neox", ("gpt_neox.embed_in.weight", "embed_out.weight"), tied=False),
    "opt": Family(
        lambda: T.OPTForCausalLM(T.OPTConfig(vocab_size=V, hidden_size=32, ffn_dim=64, num_hidden_layers=2,
                                             num_attention_heads=2, max_position_embeddings=64,
                                             word_embed_proj_dim=32, **_ids(_tok()))),
        T.AutoModelForCausalLM, "opt", ("model.decoder.embed_tokens.weight",), tied=True),
    "phi": Family(
        lambda: T.PhiForCausalLM(T.PhiConfig(vocab_size=V, **_small(), **_ids(_tok()))),
        T.AutoModelForCausalLM, "phi", ("model.embed_tokens.weight", "lm_head.weight", "lm_head.bias"), tied=False),
    "bert-mlm": Family(
        lambda: T.BertForMaskedLM(T.BertConfig(vocab_size=V, **_small(), **_ids(_tok()))),
        T.AutoModelForMaskedLM, "bert", ("bert.embeddings.word_embeddings.weight", "cls.predictions.bias"),
        tied=True),
    # transformers 4 exports also stored the tied decoder and its bias.
    "bert-mlm-v4-layout": Family(
        lambda: T.BertForMaskedLM(T.BertConfig(vocab_size=V, **_small(), **_ids(_tok()))),
        T.AutoModelForMaskedLM, "bert",
        ("bert.embeddings.word_embeddings.weight", "cls.predictions.bias", "cls.predictions.decoder.weight",
         "cls.predictions.decoder.bias"), tied=True,
        stored_copies=(("cls.predictions.decoder.weight", "bert.embeddings.word_embeddings.weight"),
                       ("cls.predictions.decoder.bias", "cls.predictions.bias"))),
    "t5-tied": Family(lambda: _t5(tied=True), T.AutoModelForSeq2SeqLM, "t5", ("shared.weight",), tied=True),
    # transformers 5 builds every T5 tied; T5 v1.1 / flan-t5 checkpoints store their own lm_head and say
    # tie_word_embeddings=false, and transformers 5 re-exports them with tie_word_embeddings=true.
    "t5-untied": Family(
        lambda: _t5(tied=True), T.AutoModelForSeq2SeqLM, "t5", ("shared.weight", "lm_head.weight"), tied=False,
        stored_untied=(("lm_head.weight", "shared.weight"),), config=(("tie_word_embeddings", False),)),
    "t5-untied-v5-export": Family(
        lambda: _t5(tied=True), T.AutoModelForSeq2SeqLM, "t5", ("shared.weight", "lm_head.weight"), tied=False,
        stored_untied=(("lm_head.weight", "shared.weight"),)),
    "t5-aliases": Family(
        lambda: _t5(tied=True), T.AutoModelForSeq2SeqLM, "t5",
        ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight"), tied=True,
        stored_copies=(("encoder.embed_tokens.weight", "shared.weight"), ("decoder.embed_tokens.weight", "shared.weight"))),
    # Multimodal: vocab_size lives in text_config, the language model under a `language_model.` prefix.
    "llava": Family(
        _llava, T.AutoModelForImageTextToText, "llama",
        ("language_model.model.embed_tokens.weight", "language_model.lm_head.weight"), tied=False),
}


def _store(path: Path, fam: Family) -> None:
    """Store the family's extra tensors in the shard of their source and apply its config edits."""
    index = json.loads((path / INDEX_NAME).read_text())
    wm = index["weight_map"]
    for name, source, copy in [(*c, True) for c in fam.stored_copies] + [(*c, False) for c in fam.stored_untied]:
        shard = path / wm[source]
        with safe_open(str(shard), "pt") as f:
            metadata = f.metadata()
        tensors = load_file(shard)
        tensors[name] = tensors[source].clone() if copy else torch.randn_like(tensors[source])
        save_file(tensors, shard, metadata=metadata)
        wm[name] = wm[source]
        index["metadata"]["total_size"] += tensors[name].numel() * tensors[name].element_size()
    (path / INDEX_NAME).write_text(json.dumps(index, indent=2))
    config = json.loads((path / "config.json").read_text())
    config.update(fam.config)
    (path / "config.json").write_text(json.dumps(config, indent=2))


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Build each family once per module, on first use."""
    root = tmp_path_factory.mktemp("families")
    cache: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in cache:
            fam = FAMILIES[name]
            torch.manual_seed(0)
            path = save_checkpoint(fam.build().eval(), _tok(), root / name, max_shard_size=SHARD)
            _store(path, fam)
            cache[name] = path
        return cache[name]

    return get


def _add(src: Path, out: Path, *extra: str) -> dict:
    args = ["add", "-q", "--json", str(src), str(out), *extra]
    for w in WORDS:
        args += ["-t", w]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 0, r.output + r.stderr
    return json.loads(r.stdout)


def _tensor(path: Path, ckpt: Checkpoint, name: str) -> torch.Tensor:
    with safe_open(str(path / ckpt.tensors[name].file), "pt") as f:
        return f.get_tensor(name)


def _logits(model, auto, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        if auto is T.AutoModelForSeq2SeqLM:
            return model(input_ids=ids, decoder_input_ids=ids).logits[0]
        return model(input_ids=ids).logits[0]


def _token_ids(config: dict, prefix: str = "") -> dict[str, int]:
    """Every `*_token_id(s)` of a config (nested configs too), flattened to name -> id."""
    out = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(_token_ids(value, f"{prefix}{key}."))
        elif key.endswith(("_token_id", "_token_ids", "_token_index")):
            for i, v in enumerate(value if isinstance(value, list) else [value]):
                if isinstance(v, int):
                    out[f"{prefix}{key}[{i}]"] = v
    return out


def _vocab_values(config: dict, prefix: str = "") -> dict[str, int]:
    out = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out.update(_vocab_values(value, f"{prefix}{key}."))
        elif key.startswith("vocab_size") and isinstance(value, int):
            out[prefix + key] = value
    return out


@pytest.mark.parametrize("family", list(FAMILIES))
def test_add_grows_every_vocabulary_tensor_and_keeps_the_model(family, built, tmp_path):
    fam = FAMILIES[family]
    src, out = built(family), tmp_path / "out"
    _skip_where_add_refuses(family)
    summary = _add(src, out)
    a, b = Checkpoint.open(src), Checkpoint.open(out)
    assert len(a.shards) >= 3, "the family should be saved in several shards"
    assert summary["architecture"] == fam.architecture
    n, rows_after = summary["rows_before"], summary["rows_after"]
    k = rows_after - n
    # padded families (Qwen): the new tokens take the padding rows after the tokenizer's last id first
    reused = summary["reused_rows"]
    assert reused == [t["id"] for t in summary["added"] if t["id"] < n]
    assert k + len(reused) == len(summary["added"]) > 0 and (not reused or n > V)
    keep = [i for i in range(n) if i not in reused]
    new_rows = reused + list(range(n, rows_after))

    # Every tensor with one row per id (found from the shapes, not from the table) grew.
    vocab_tensors = {name for name, t in a.tensors.items() if t.shape[0] == n}
    assert vocab_tensors == set(fam.tensors)
    assert set(summary["tensors"]) == vocab_tensors
    for name in a.tensors:
        old, new = _tensor(src, a, name), _tensor(out, b, name)
        if name in vocab_tensors:
            assert new.shape == (rows_after, *old.shape[1:]), name
            assert torch.equal(new[keep], old[keep]), f"old rows of {name} changed"
            # --init mean: every new row (bias entry) is the mean of the old rows of the same tensor.
            mean = old.double().mean(0).to(old.dtype)
            torch.testing.assert_close(new[new_rows], mean.expand_as(new[new_rows]), msg=name)
        else:
            assert torch.equal(new, old), f"untouched tensor {name} changed"
    for name, source in fam.stored_copies:  # tied copies stay copies
        assert torch.equal(_tensor(out, b, name), _tensor(out, b, source)), name

    # Config: every vocabulary size that counted the rows now counts the new rows; the rest stay.
    cfg_a, cfg_b = json.loads((src / "config.json").read_text()), json.loads((out / "config.json").read_text())
    assert text_config(cfg_b)["vocab_size"] == rows_after
    for key, value in _vocab_values(cfg_a).items():
        assert _vocab_values(cfg_b)[key] == (rows_after if value == n else value), key

    # Token ids of the configs (generation_config.json too) are unchanged and name the same tokens.
    old_tok, new_tok = T.AutoTokenizer.from_pretrained(src), T.AutoTokenizer.from_pretrained(out)
    gen_a = src / "generation_config.json"
    if gen_a.exists():
        assert (out / "generation_config.json").read_bytes() == gen_a.read_bytes()
    ids = {**_token_ids(cfg_a), **(_token_ids(json.loads(gen_a.read_text())) if gen_a.exists() else {})}
    assert ids, "the family config should hold token ids"
    assert _token_ids(cfg_b) == _token_ids(cfg_a)
    for key, i in ids.items():
        assert 0 <= i < rows_after, key
        if i < V:
            assert new_tok.convert_ids_to_tokens(i) == old_tok.convert_ids_to_tokens(i), key

    # Loaded back with its Auto class: tie kept, vocabulary size = rows, old logits kept, KL bound.
    old_m = fam.auto.from_pretrained(src).eval()
    new_m = fam.auto.from_pretrained(out).eval()
    for m in (old_m, new_m):
        emb, head = m.get_input_embeddings().weight, m.get_output_embeddings().weight
        assert (emb.data_ptr() == head.data_ptr()) == fam.tied
    assert new_m.get_input_embeddings().weight.shape[0] == rows_after
    assert new_m.config.get_text_config().vocab_size == rows_after
    x = torch.tensor([old_tok(TEXT_OLD).input_ids])
    old_l, new_l = _logits(old_m, fam.auto, x), _logits(new_m, fam.auto, x)
    assert old_l.shape[-1] == n and new_l.shape[-1] == rows_after
    torch.testing.assert_close(new_l[:, keep], old_l[:, keep], rtol=0, atol=1e-5)
    lp_old, lp_new = old_l.double().log_softmax(-1), new_l.double().log_softmax(-1)[:, :n]
    kl = (lp_old.exp() * (lp_old - lp_new)).sum(-1)
    if not reused:  # log(1 + k/n) covers appended rows only (a reused row had old values): validation measures it
        assert kl.max().item() <= math.log1p(k / n) + 1e-9
    assert kl.min().item() > 0  # the new tokens took some probability mass
    y = torch.cat([x, torch.tensor([[t["id"] for t in summary["added"]]])], dim=1)  # the new rows are usable
    assert torch.isfinite(_logits(new_m, fam.auto, y)).all()


# What `add`'s validation can run depends on what the family's model computes.
KIND_OF_AUTO = {T.AutoModelForCausalLM: "causal", T.AutoModelForImageTextToText: "causal",
                T.AutoModelForSeq2SeqLM: "seq2seq", T.AutoModelForMaskedLM: "masked"}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_validation_in_add_runs_the_checks_that_apply_to_the_family(family, built, tmp_path):
    _skip_where_add_refuses(family)
    src, out = built(family), tmp_path / "out"
    summary = _add(src, out)
    assert summary["validation"]["passed"] is True
    report = json.loads((out / REPORT_NAME).read_text())
    kind = KIND_OF_AUTO[FAMILIES[family].auto]
    assert report["model"]["kind"] == kind
    n, k = summary["rows_before"], summary["rows_after"] - summary["rows_before"]
    kl = report["kl"]
    assert kl["applicable"] and kl["positions"] > 0
    if summary["reused_rows"]:  # padding rows taken (Qwen): validation's bound counts them, log(1 + k/n) does not
        assert 0 < kl["max"] <= kl["bound"] * (1 + 1e-6)
    else:
        assert 0 < kl["max"] <= math.log1p(k / n) * (1 + 1e-6) and kl["bound"] == pytest.approx(math.log1p(k / n))
    assert report["old_logits"]["applicable"] and report["old_logits"]["unchanged"]
    generates = kind != "masked"
    assert report["sampling"]["applicable"] is generates and report["complete"] is generates
    if generates:
        assert report["sampling"]["tokens"] > 0
    else:
        assert report["skipped"] == [f"sampling and usability skipped: {report['model']['class']} is a masked "
                                     "language model and does not generate text"]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_new_words_are_one_token_with_the_family_tokenizer(family, built, tmp_path):
    _skip_where_add_refuses(family)
    src, out = built(family), tmp_path / "out"
    summary = _add(src, out)
    new_tok, old_tok = T.AutoTokenizer.from_pretrained(out), T.AutoTokenizer.from_pretrained(src)
    assert new_tok(TEXT_OLD).input_ids == old_tok(TEXT_OLD).input_ids
    want = {t["form"]: t["id"] for t in summary["added"]}
    for form, i in want.items():
        assert new_tok(form, add_special_tokens=False).input_ids == [i], (form, type(new_tok).__name__)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_rows_fed_as_inputs_embeds_read_as_the_model_reads_ids(family):
    # --init fitted feeds rows as inputs_embeds (new_token_embeds), which skips the embedding module's
    # forward: Gemma's scales by sqrt(hidden) there. A new token given an old token's row must read as it.
    from vocabsurgeon.init.fitted.common import new_token_embeds

    torch.manual_seed(0)
    model = FAMILIES[family].build().eval()
    body = model.get_encoder() if model.config.model_type == "t5" else model.base_model
    emb = model.get_input_embeddings()
    n = emb.weight.shape[0]
    top = V
    if family == "gemma3n-partial-per-layer" and not _gemma3n_runs_ids_past_its_per_layer_table():
        top = model.config.vocab_size_per_layer_input  # the only ids this transformers runs it on
    ids = torch.randint(3, top, (2, 12))
    new = ids.clone()
    new[0, 4], new[1, 7] = n + 1, n  # new tokens 1 and 0, given the rows of the old ids there
    R = emb.weight.detach()[[int(ids[1, 7]), int(ids[0, 4])]]
    with torch.no_grad():
        want = body(input_ids=ids).last_hidden_state
        got = body(inputs_embeds=new_token_embeds(emb, new, R)).last_hidden_state
    assert torch.allclose(got, want, atol=1e-5, rtol=0), float((got - want).abs().max())


@pytest.mark.floor
def test_add_on_a_partial_per_layer_gemma3n_runs_or_is_refused_at_start(built, tmp_path):
    # Released Gemma 3n: the per-layer table covers only the first ids and stays as is, so every new id is
    # past it. transformers 5.17-5.20 cannot run a text model on such ids: add refuses there, before writing.
    src, out = built("gemma3n-partial-per-layer"), tmp_path / "out"
    if _gemma3n_runs_ids_past_its_per_layer_table():
        summary = _add(src, out)
        model = T.AutoModelForCausalLM.from_pretrained(out).eval()
        with torch.no_grad():
            logits = model(torch.tensor([[t["id"] for t in summary["added"]]])).logits
        assert torch.isfinite(logits).all()
        return
    args = ["add", "-q", str(src), str(out)] + [a for w in WORDS for a in ("-t", w)]
    r = CliRunner().invoke(cli, args)
    assert r.exit_code == 2 and not out.exists(), r.output
    assert r.stderr == (f"Error: {src}: transformers {T.__version__} runs this gemma3n_text (gemma3n layout) model "
                        "only on ids below the 512 rows of 'model.embed_tokens_per_layer.weight' (IndexError past "
                        "them) and every new token's id is past them; pip install -U 'transformers>=5.21.0'\n")


def test_every_row_of_the_table_is_tested():
    assert {FAMILIES[f].architecture for f in FAMILIES} == {a.name for a in ARCHITECTURES}


# --- sentence-transformers: modules.json, 1_Pooling/ and the transformer at the root ---

ST_FILES = {
    "modules.json": [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ],
    "sentence_bert_config.json": {"max_seq_length": 64, "do_lower_case": False},
    "config_sentence_transformers.json": {"prompts": {}, "default_prompt_name": None, "similarity_fn_name": "cosine"},
    "1_Pooling/config.json": {"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True},
}


def _bert_encoder(path: Path) -> Path:
    """A tiny BertModel (no MLM head, as sentence-transformers stores it) saved in shards."""
    tok = _tok()
    tok.pad_token = tok.eos_token
    torch.manual_seed(0)
    model = T.BertModel(T.BertConfig(vocab_size=V, pad_token_id=tok.pad_token_id, **_small()), add_pooling_layer=False)
    return save_checkpoint(model.eval(), tok, path, max_shard_size=SHARD)


def _hidden(path: Path, text: str) -> torch.Tensor:
    ids = torch.tensor([T.AutoTokenizer.from_pretrained(path)(text).input_ids])
    with torch.no_grad():
        return T.AutoModel.from_pretrained(path).eval()(input_ids=ids).last_hidden_state


def test_sentence_transformers_layout_is_carried_over_and_loads(tmp_path):
    src = _bert_encoder(tmp_path / "st")
    for rel, data in ST_FILES.items():
        (src / rel).parent.mkdir(exist_ok=True)
        (src / rel).write_text(json.dumps(data, indent=2))
    out = tmp_path / "out"
    summary = _add(src, out)
    assert summary["architecture"] == "bert" and summary["tied"] is True
    assert set(summary["tensors"]) == {"embeddings.word_embeddings.weight"}
    for rel in ST_FILES:
        assert (out / rel).read_bytes() == (src / rel).read_bytes(), rel
    assert json.loads((out / "config.json").read_text())["vocab_size"] == summary["rows_after"]
    torch.testing.assert_close(_hidden(out, TEXT_OLD), _hidden(src, TEXT_OLD), rtol=0, atol=1e-6)
    assert torch.isfinite(_hidden(out, TEXT_NEW)).all()

    # No language-model head: validation compares the hidden states of old text instead of logits.
    report = json.loads((out / REPORT_NAME).read_text())
    assert report["passed"] and report["model"] == {"kind": "encoder", "class": "BertModel",
                                             "missing_weights": ["pooler.dense.bias", "pooler.dense.weight"]}
    assert report["old_logits"]["what"] == "hidden states" and report["old_logits"]["unchanged"]
    assert not report["kl"]["applicable"] and not report["sampling"]["applicable"] and not report["complete"]
    assert report["skipped"] == ["KL, sampling and usability skipped: BertModel has no language-model head; "
                                 "checked that the hidden states of old text are unchanged instead"]

    # An old row that moved is caught: the hidden states of old text change.
    broken = Path(shutil.copytree(out, tmp_path / "broken"))
    shard = broken / Checkpoint.open(broken).tensors["embeddings.word_embeddings.weight"].file
    tensors = load_file(shard)
    old_rows = tensors["embeddings.word_embeddings.weight"][: summary["rows_before"]]
    old_rows += torch.randn(old_rows.shape, generator=torch.Generator().manual_seed(0))  # (LayerNorm undoes a shift)
    save_file(tensors, shard, metadata={"format": "pt"})
    r = CliRunner().invoke(cli, ["validate", "-q", "--json", str(src), str(broken)])
    assert r.exit_code == 3, r.stderr
    assert json.loads(r.stdout)["failures"][0].startswith("hidden states of old text changed by up to ")


@pytest.mark.parametrize("padded", [False, True])
def test_sentence_transformers_loads_and_encodes_the_output(padded, tmp_path):
    pytest.importorskip("sentence_transformers", reason="sentence-transformers is not installed")
    from sentence_transformers import SentenceTransformer, models

    hf = _bert_encoder(tmp_path / "hf")
    src = tmp_path / "st"
    SentenceTransformer(modules=[models.Transformer(str(hf)), models.Pooling(32)]).save(str(src))
    for f in src.glob("model*.safetensors*"):  # re-save the root transformer in shards
        f.unlink()
    T.AutoModel.from_pretrained(hf).save_pretrained(src, max_shard_size=SHARD)
    if padded:  # as all-MiniLM-L6-v2 ships it: every encode padded to 128 ids and truncated there
        data = json.loads((src / "tokenizer.json").read_text())
        pad_id = T.AutoTokenizer.from_pretrained(src).pad_token_id
        data["padding"] = {"strategy": {"Fixed": 128}, "direction": "Right", "pad_to_multiple_of": None,
                           "pad_id": pad_id, "pad_type_id": 0, "pad_token": data["added_tokens"][0]["content"]}
        data["truncation"] = {"direction": "Right", "max_length": 128, "strategy": "LongestFirst", "stride": 0}
        (src / "tokenizer.json").write_text(json.dumps(data))
    before = SentenceTransformer(str(src), device="cpu")
    out = tmp_path / "out"
    summary = _add(src, out)
    after = SentenceTransformer(str(out), device="cpu")
    assert (out / "modules.json").read_bytes() == (src / "modules.json").read_bytes()
    assert (out / "1_Pooling" / "config.json").read_bytes() == (src / "1_Pooling" / "config.json").read_bytes()
    torch.testing.assert_close(after.encode([TEXT_OLD], convert_to_tensor=True),
                               before.encode([TEXT_OLD], convert_to_tensor=True), rtol=0, atol=1e-6)
    ids = after.tokenize([" " + WORDS[0]])["input_ids"][0].tolist()
    assert ids == [t["id"] for t in summary["added"] if t["form"] == " " + WORDS[0]]
    if padded:  # the user's settings are kept in the written tokenizer.json
        written, given = (json.loads((d / "tokenizer.json").read_text()) for d in (out, src))
        assert (written["padding"], written["truncation"]) == (given["padding"], given["truncation"])
    assert torch.isfinite(after.encode([TEXT_NEW], convert_to_tensor=True)).all()


# --- architectures the table does not know ---

def _mystery(path: Path, tensors: dict[str, tuple[int, ...]], **config) -> Path:
    """A hand-made single-file checkpoint of an unknown family with the given tensor shapes."""
    path.mkdir()
    gen = torch.Generator().manual_seed(0)
    save_file({n: torch.randn(shape, generator=gen) for n, shape in tensors.items()}, path / "model.safetensors",
              metadata={"format": "pt"})
    (path / "config.json").write_text(json.dumps({"model_type": "mystery", "vocab_size": V, **config}))
    _tok().save_pretrained(path)
    return path


def _run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, ["add", "-q", *args, "-t", WORDS[0]])
    return r.exit_code, r.stdout, r.stderr


def test_unknown_architecture_is_detected_from_the_shapes(built, tmp_path):
    src = Path(shutil.copytree(built("llama"), tmp_path / "src"))
    config = json.loads((src / "config.json").read_text())
    config.update(model_type="mystery", architectures=["MysteryForCausalLM"])
    (src / "config.json").write_text(json.dumps(config))
    r = CliRunner().invoke(cli, ["add", "--json", str(src), str(tmp_path / "out"), "-t", WORDS[0]])
    assert r.exit_code == 0, r.stderr
    assert ("WARNING: unknown architecture 'mystery', detected from the shapes: input embedding "
            "model.embed_tokens.weight, output lm_head.weight, biases none, other vocabulary matrices none; "
            "pass --embedding-key/--lm-head-key if this is wrong\n") in r.stderr
    summary = json.loads(r.stdout)
    assert summary["architecture"] == "unknown" and summary["tied"] is False
    assert set(summary["tensors"]) == {"model.embed_tokens.weight", "lm_head.weight"}
    b = Checkpoint.open(tmp_path / "out")
    assert b.tensors["lm_head.weight"].shape[0] == b.tensors["model.embed_tokens.weight"].shape[0] == summary["rows_after"]
    # transformers cannot build 'mystery': the tokenizer checks run, the model checks are skipped and said so.
    report = json.loads((tmp_path / "out" / REPORT_NAME).read_text())
    assert report["passed"] and not report["complete"] and report["model"]["kind"] is None
    assert report["tokenization"]["passed"] and not report["kl"]["applicable"]
    [skipped] = report["skipped"]
    assert skipped.startswith("model checks skipped (KL, old logits, sampling, usability): transformers cannot "
                              "build this model (")
    assert f"WARNING: {tmp_path / 'out'}: {skipped}\n" in r.stderr
    assert f"Not checked: {skipped}." in (tmp_path / "out" / "README.md").read_text()  # the model card says so too


def test_known_family_with_other_names_falls_back_to_the_shapes(tmp_path):
    # Meta's original Llama names, under a transformers config.
    src = _mystery(tmp_path / "src", {"tok_embeddings.weight": (V, 16), "output.weight": (V, 16), "norm.weight": (16,)},
                   model_type="llama", tie_word_embeddings=False)
    layout = detect(Checkpoint.open(src))
    assert (layout.architecture, layout.embedding, layout.lm_head, layout.tied) == (
        "llama", "tok_embeddings.weight", "output.weight", False)


AMBIGUOUS = {"wordvecs.weight": (V, 16), "proj_b.weight": (V, 16), "proj_a.weight": (V, 16), "proj_a.bias": (V,),
             "norm.weight": (16,)}


def test_ambiguous_unknown_architecture_asks_for_the_keys(tmp_path):
    src = _mystery(tmp_path / "src", AMBIGUOUS)
    out = tmp_path / "out"
    assert _run(str(src), str(out)) == (2, "", (
        f"Error: {src}: unknown architecture 'mystery': cannot tell the input embedding among the tensors with "
        f"{V} rows ['proj_a.weight', 'proj_b.weight', 'wordvecs.weight']; pass --embedding-key NAME (and "
        "--lm-head-key NAME when untied)\n"))
    assert _run(str(src), str(out), "--embedding-key", "wordvecs.weight") == (2, "", (
        f"Error: {src}: unknown architecture 'mystery': input embedding 'wordvecs.weight', but several tensors "
        f"with {V} rows could be the output matrix ['proj_a.weight', 'proj_b.weight']; pass --lm-head-key NAME "
        "(the others grow too, initialized with the mean)\n"))
    assert _run(str(src), str(out), "--embedding-key", "nope") == (2, "", (
        "Error: tensor 'nope' is not in the checkpoint; run `vocabsurgeon inspect` to list tensors\n"))
    assert not out.exists()

    code, stdout, _ = _run("--json", str(src), str(out), "--embedding-key", "wordvecs.weight",
                           "--lm-head-key", "proj_a.weight")
    assert code == 0
    summary = json.loads(stdout)
    n, rows = summary["rows_before"], summary["rows_after"]
    assert {name: t["init"] for name, t in summary["tensors"].items()} == {
        "wordvecs.weight": "mean", "proj_a.weight": "mean", "proj_b.weight": "mean", "proj_a.bias": "mean"}
    a, b = Checkpoint.open(src), Checkpoint.open(out)
    for name in summary["tensors"]:
        old, new = _tensor(src, a, name), _tensor(out, b, name)
        assert new.shape[0] == rows and torch.equal(new[:n], old), name
    assert torch.equal(_tensor(out, b, "norm.weight"), _tensor(src, a, "norm.weight"))


@pytest.mark.parametrize("tensors, config, message", [
    ({"wordvecs.weight": (V, 16)}, {"vocab_size": None},
     "unknown architecture 'mystery' and no vocab_size in config.json; pass --embedding-key NAME "
     "(and --lm-head-key NAME when untied)"),
    ({"wordvecs.weight": (V + 8, 16)}, {},
     f"unknown architecture 'mystery': no 2-D tensor has {V} rows (vocab_size in config.json); pass "
     "--embedding-key NAME (and --lm-head-key NAME when untied)"),
    ({"wordvecs.weight": (V, 16)}, {"tie_word_embeddings": False},
     "config.json says the embeddings are untied, but no output matrix was found; pass --lm-head-key NAME "
     "(see `vocabsurgeon inspect`)"),
], ids=["no-vocab-size", "no-vocab-tensor", "untied-without-output"])
def test_unknown_architecture_errors(tensors, config, message, tmp_path):
    src = _mystery(tmp_path / "src", tensors, **config)
    assert _run(str(src), str(tmp_path / "out")) == (2, "", f"Error: {src}: {message}\n")


def test_unknown_single_matrix_is_a_tied_embedding(tmp_path):
    src = _mystery(tmp_path / "src", {"wordvecs.weight": (V, 16), "norm.weight": (16,)})
    layout = detect(Checkpoint.open(src))
    assert (layout.architecture, layout.embedding, layout.lm_head, layout.tied) == (
        "unknown", "wordvecs.weight", None, True)
