"""Checks that every surgery must pass, shared by the test files."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import torch
from safetensors import safe_open

from vocabsurgeon.checkpoint.architectures import detect, text_config
from vocabsurgeon.checkpoint.reader import Checkpoint


def tree_digest(path: Path) -> dict[str, str]:
    """Hash of every file under `path` (to prove the input was not modified)."""
    out = {}
    for p in sorted(Path(path).rglob("*")):
        if p.is_file():
            out[str(p.relative_to(path))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def raw_bytes(ckpt: Checkpoint, name: str) -> bytes:
    t = ckpt.tensors[name]
    with open(ckpt.path / t.file, "rb") as f:
        f.seek(t.start)
        return f.read(t.nbytes)


def check_surgery(src: Path, out: Path, added: int) -> None:
    """Old rows bit-identical, untouched tensors byte-identical, index complete, config = rows, tie kept."""
    a, b = Checkpoint.open(src), Checkpoint.open(out)
    la, lb = detect(a), detect(b)
    assert set(a.tensors) == set(b.tensors)
    assert lb.rows == la.rows + added
    grown = set(la.all_tensors)
    for name in a.tensors:
        if name in grown:
            ta, tb = a.tensors[name], b.tensors[name]
            assert tb.shape == (ta.shape[0] + added, *ta.shape[1:]), name
            assert tb.dtype == ta.dtype
            with safe_open(str(src / ta.file), "pt") as fa, safe_open(str(out / tb.file), "pt") as fb:
                old, new = fa.get_tensor(name), fb.get_tensor(name)
            assert torch.equal(old.view(torch.uint8) if old.dtype == torch.bool else old, new[: ta.shape[0]]), name
            assert torch.isfinite(new.float()).all(), name
        else:
            assert raw_bytes(a, name) == raw_bytes(b, name), f"untouched tensor {name} changed"
    if b.index is not None:
        assert set(b.index["weight_map"]) == set(b.tensors)
        assert b.index["metadata"]["total_size"] == b.total_size
    for shard, header in a.shards.items():
        assert b.shards[shard].metadata == header.metadata
    cfg = json.loads((out / "config.json").read_text())
    assert text_config(cfg)["vocab_size"] == lb.rows
    assert lb.tied == la.tied


def kl_old_new(old_logits: torch.Tensor, new_logits: torch.Tensor) -> torch.Tensor:
    """Per-position KL(p_old || p_new) in float64; p_old over the old vocabulary only."""
    n = old_logits.shape[-1]
    lp_old = old_logits.double().log_softmax(-1)
    lp_new = new_logits.double().log_softmax(-1)[..., :n]
    return (lp_old.exp() * (lp_old - lp_new)).sum(-1)


def bound(k: int, n: int) -> float:
    return math.log1p(k / n)


def tokenizer_behaviour(tok) -> dict:
    """What a user of a transformers tokenizer relies on besides the ids of text: padding and truncation
    sides, model_max_length, the special tokens it adds (BOS/EOS), its special tokens and their ids, the chat
    template and clean_up_tokenization_spaces."""
    probe = "Hello world"
    with_specials, plain = tok(probe).input_ids, tok(probe, add_special_tokens=False).input_ids
    start = next(i for i in range(len(with_specials) + 1) if with_specials[i:i + len(plain)] == plain)
    specials = {k: v for k, v in tok.special_tokens_map.items() if isinstance(v, str)}
    return {
        "padding_side": tok.padding_side,
        "truncation_side": tok.truncation_side,
        "model_max_length": tok.model_max_length,
        "added_before": with_specials[:start],
        "added_after": with_specials[start + len(plain):],
        "special_tokens": {k: (v, tok.convert_tokens_to_ids(v)) for k, v in specials.items()},
        "additional_special_tokens": sorted(tok.all_special_tokens),
        "chat_template": tok.chat_template,
        "clean_up_tokenization_spaces": tok.clean_up_tokenization_spaces,
    }


def check_same_tokenizer_behaviour(src: Path, out: Path) -> None:
    """AutoTokenizer(out) behaves as AutoTokenizer(src) in every `tokenizer_behaviour` attribute. A special token
    that a class invents on load where src's tokenizer.json has none (GemmaTokenizer's <pad>, numbered after the
    last token) is compared by content only: its id follows the new tokens. src is read as transformers 5.22 on
    load it (`as_transformers_loads`: 5.17 to 5.21 rebuild DeepSeek V3's layout otherwise)."""
    from builders import as_transformers_loads
    from transformers import AutoTokenizer

    old, new = as_transformers_loads(Path(src)), AutoTokenizer.from_pretrained(out)
    a, b = tokenizer_behaviour(old), tokenizer_behaviour(new)
    file = Path(src) / "tokenizer.json"
    if file.is_file():
        data = json.loads(file.read_text(encoding="utf-8"))
        vocab = data["model"].get("vocab") or {}
        in_file = {p[0] for p in vocab} if isinstance(vocab, list) else set(vocab)
        in_file |= {t["content"] for t in data.get("added_tokens") or []}
        for k, (content, _) in a["special_tokens"].items():
            if content not in in_file:
                assert b["special_tokens"][k][0] == content, k
                a["special_tokens"][k] = b["special_tokens"][k] = content
    differ = {k: (a[k], b[k]) for k in a if a[k] != b[k]}
    assert not differ, differ


def check_resize_keeps_new_rows(out: Path, ids: list[int]) -> None:
    """The first line of every fine-tuning script, `model.resize_token_embeddings(len(tokenizer))`, keeps the
    rows of the new `ids` as written, and a forward pass on each of them runs (issue 32)."""
    from transformers import AutoModel, AutoTokenizer

    tok, model = AutoTokenizer.from_pretrained(out), AutoModel.from_pretrained(out).eval()
    written = model.get_input_embeddings().weight.detach().clone()
    assert max(ids) < len(tok), (max(ids), len(tok))
    model.resize_token_embeddings(len(tok))
    assert torch.equal(model.get_input_embeddings().weight[ids], written[ids])
    with torch.no_grad():
        hidden = model(input_ids=torch.tensor([ids])).last_hidden_state
    assert torch.isfinite(hidden.float()).all()


def check_padded_batch_matches_each_text_alone(out: Path, texts: list[str], side: str) -> list[int]:
    """Batched, padded inference (`side` padding, the position ids a server passes) gives each text the logits
    it gets alone; returns the batch's ids."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    tok.pad_token, tok.padding_side = tok.pad_token or tok.eos_token, side
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    batch = tok(texts, padding=True, return_tensors="pt")
    mask = batch.attention_mask
    position_ids = (mask.cumsum(-1) - 1).clamp(min=0)  # what a server passes with left padding
    with torch.no_grad():
        logits = model(**batch, position_ids=position_ids).logits
        for i, text in enumerate(texts):
            alone = model(**tok(text, return_tensors="pt")).logits[0]
            real = mask[i].bool()
            assert int(real.sum()) == alone.shape[0]
            torch.testing.assert_close(logits[i][real], alone, rtol=1e-4, atol=1e-5)
    return batch.input_ids.flatten().tolist()


def lm_batch(tok, texts: list[str]) -> dict:
    """A right-padded causal-LM batch of `texts` with labels (padding masked out), as a fine-tuning script makes one."""
    tok.pad_token = tok.pad_token or tok.eos_token
    tok.padding_side = "right"
    batch = tok(texts, padding=True, return_tensors="pt")
    return {**batch, "labels": batch.input_ids.masked_fill(batch.attention_mask == 0, -100)}


def lm_loss(model, batch: dict) -> float:
    with torch.no_grad():
        return model(**batch).loss.item()


def train_steps(model, batch: dict, steps: int, lr: float = 3e-2) -> None:
    """`steps` AdamW steps on `batch` over the parameters that require grad (a PEFT model's), then eval mode."""
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    for _ in range(steps):
        opt.zero_grad()
        model(**batch).loss.backward()
        opt.step()
    model.eval()
