"""Multimodal Gemma 3n reads ids past its text tokens as image and audio tokens (transformers' Gemma3nModel.forward:
[vision_config.vocab_offset, audio_config.vocab_offset) go to embed_vision, every id from the audio offset on to
embed_audio, IndexError past its rows). New tokens must get ids below the vision offset, or be refused in one line.

The tiny model is transformers' own Gemma3nForConditionalGeneration with its vision tower (a timm model, whose
package the tests do not install) replaced by an empty module: text-only forward passes never call it."""

from __future__ import annotations

import json

import pytest
import torch
import transformers as T
import transformers.models.gemma3n.modeling_gemma3n as G
from builders import bytelevel_tokenizer
from click.testing import CliRunner

from vocabsurgeon.cli.commands import cli

V = 600  # text tokens: 594 of a byte-level BPE and 6 unused placeholders
UNUSED = [f"<unused{i}>" for i in range(6)]
WORDS = ["Frodo", "Gandalf"]


class _NoVision(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config


@pytest.fixture
def no_timm(monkeypatch):
    build = G.AutoModel.from_config
    monkeypatch.setattr(G.AutoModel, "from_config", lambda config, **kw: _NoVision(config)
                        if isinstance(config, T.Gemma3nVisionConfig) else build(config, **kw))


@pytest.fixture
def gemma3n(tmp_path, no_timm):
    """A multimodal Gemma 3n laid out as published: 616 text-embedding rows, the last 16 the vision (600-607) and
    audio (608-615) soft tokens' ids, which no tokenizer entry has."""
    tok = bytelevel_tokenizer(V - len(UNUSED))
    tok.add_special_tokens({"additional_special_tokens": UNUSED})
    assert tok.convert_tokens_to_ids(UNUSED) == list(range(V - len(UNUSED), V))
    text = dict(vocab_size=V + 16, vocab_size_per_layer_input=V, hidden_size=32, hidden_size_per_layer_input=8,
                intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                laurel_rank=4, altup_num_inputs=2, activation_sparsity_pattern=[0.0, 0.0], num_kv_shared_layers=0,
                layer_types=["sliding_attention", "full_attention"], bos_token_id=tok.bos_token_id,
                eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id)
    audio = dict(vocab_offset=V + 8, vocab_size=8, hidden_size=32, conf_num_hidden_layers=1, conf_num_attention_heads=2,
                 sscp_conv_channel_size=[8, 8], input_feat_size=16)
    cfg = T.Gemma3nConfig(text_config=text, vision_config=dict(vocab_offset=V, vocab_size=8, hidden_size=32),
                          audio_config=audio)
    torch.manual_seed(0)
    model = T.Gemma3nForConditionalGeneration(cfg).eval()
    with torch.no_grad():  # transformers' own routing: an id past the audio rows is not text
        with pytest.raises(IndexError):
            model(input_ids=torch.tensor([[5, V + 16]]))
    src = tmp_path / "src"
    model.save_pretrained(src)
    tok.save_pretrained(src)
    return src


def test_add_refuses_ids_the_model_reads_as_image_or_audio_tokens(gemma3n, tmp_path):
    out = tmp_path / "out"
    r = CliRunner().invoke(cli, ["add", "-q", "--no-validate", str(gemma3n), str(out)] + [a for w in WORDS for a in ("-t", w)])
    assert r.exit_code == 2 and not out.exists(), r.output
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(f"Error: {gemma3n / 'config.json'}: "
                                                             "Gemma3nForConditionalGeneration reads every id from 600 on "
                                                             "(vision_config.vocab_offset) as an image or audio token")
    assert "--reuse-reserved" in r.stderr


def test_extend_refuses_before_learning(gemma3n, tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("Frodo and Gandalf went on. " * 50, encoding="utf-8")
    out = tmp_path / "out"
    r = CliRunner().invoke(cli, ["extend", "-q", "--corpus", str(corpus), "--new-tokens", "5", str(gemma3n), str(out)])
    assert r.exit_code == 2 and not out.exists(), r.output
    assert "as an image or audio token" in r.stderr and "add --reuse-reserved" in r.stderr


def test_reuse_reserved_puts_the_new_tokens_on_placeholders_below_the_vision_ids_and_the_model_runs_them(
        gemma3n, tmp_path):
    out = tmp_path / "out"
    r = CliRunner().invoke(cli, ["add", "-q", "--json", "--reuse-reserved", "--no-validate", str(gemma3n), str(out)]
                           + [a for w in WORDS for a in ("-t", w)])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    ids = [a["id"] for a in d["added"]]
    assert ids and all(V - len(UNUSED) <= i < V for i in ids), ids  # not the 16 soft-token rows 600-615
    assert d["rows_after"] == d["rows_before"] == V + 16
    tok = T.AutoTokenizer.from_pretrained(out)
    enc = tok(" ".join(WORDS), add_special_tokens=False)["input_ids"]
    assert set(enc) <= set(ids) and len(enc) == len(WORDS)
    model = T.Gemma3nForConditionalGeneration.from_pretrained(out).eval()
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([[5, *enc, 7]])).logits
    assert torch.isfinite(logits).all() and logits.shape[-1] == V + 16


def test_too_few_placeholders_are_refused_with_reuse_reserved(gemma3n, tmp_path):
    words = ["Frodo", "Gandalf", "Aragorn", "Legolas", "Boromir", "Faramir"]  # more entries than 6 placeholders
    out = tmp_path / "out"
    r = CliRunner().invoke(cli, ["add", "-q", "--reuse-reserved", "--no-validate", str(gemma3n), str(out)]
                           + [a for w in words for a in ("-t", w)])
    assert r.exit_code == 2 and not out.exists(), r.output
    assert "too few unused placeholder tokens" in r.stderr
