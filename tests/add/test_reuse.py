"""--reuse-reserved: new tokens take rows no token uses and reserved placeholders before appending."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

from builders import bytelevel_tokenizer, save_checkpoint
from vocabsurgeon import InputError, add_tokens
from vocabsurgeon.checkpoint.reader import Checkpoint

RESERVED = ["<|reserved_special_token_0|>", "<|reserved_special_token_1|>"]
WORDS = ["Frodo", "Aragorn", "Gandalf", "Mordor", "Rivendell"]  # 10 new entries (bare + word-start)


@pytest.fixture
def padded(tmp_path):
    """A Llama-style checkpoint: 600 tokens + 2 reserved specials, 608 embedding rows (6 unused)."""
    tok = bytelevel_tokenizer(600)
    tok.add_special_tokens({"additional_special_tokens": RESERVED})
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=608, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=False,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    return save_checkpoint(model, tok, tmp_path / "padded", max_shard_size="40KB")


def test_default_ids_follow_the_last_token_on_the_padding_rows_then_rows_keep_the_padding_multiple(padded, tmp_path):
    """As transformers' add_tokens numbers them (issue 32: ids after the last row were cut off by
    resize_token_embeddings(len(tokenizer))); the reserved tokens 600 and 601 stay."""
    r = add_tokens(padded, tmp_path / "out", WORDS)
    d = r.to_dict()
    assert [a["id"] for a in d["added"]] == list(range(602, 612))
    assert d["reused_rows"] == list(range(602, 608)) and d["freed_tokens"] == {}
    assert d["rows_after"] == 640  # 608 rows are a multiple of 32: 612 rounded up to it
    assert any(n.startswith("6 new token(s) took padding rows 602..607") for n in d["tokenizer_notes"])
    assert AutoTokenizer.from_pretrained(tmp_path / "out").convert_ids_to_tokens([600, 601]) == RESERVED


def test_pad_to_multiple_of_1_appends_one_row_per_token(padded, tmp_path):
    d = add_tokens(padded, tmp_path / "out", WORDS, pad_to_multiple_of=1).to_dict()
    assert d["rows_after"] == 612 and d["padding_rows"] == 0


def test_reuse_takes_unused_rows_then_reserved_tokens(padded, tmp_path):
    out = tmp_path / "out"
    r = add_tokens(padded, out, WORDS, reuse_reserved=True, init="mean")
    d = r.to_dict()
    ids = [a["id"] for a in d["added"]]
    assert ids == [602, 603, 604, 605, 606, 607, 600, 601, 608, 609]
    assert d["reused_rows"] == ids[:8]
    assert d["freed_tokens"] == {"600": RESERVED[0], "601": RESERVED[1]}
    assert d["rows_before"] == 608 and d["rows_after"] == 640  # the checkpoint's multiple of 32 kept
    assert any(n.startswith("--reuse-reserved: 8 new tokens took existing rows") for n in d["tokenizer_notes"])

    tok = AutoTokenizer.from_pretrained(out)
    for a in d["added"]:
        assert tok(a["form"], add_special_tokens=False).input_ids == [a["id"]], a
    assert RESERVED[0] not in tok.get_vocab()

    a, b = Checkpoint.open(padded), Checkpoint.open(out)
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        old, new = a.rows_np(name, 0, 608), b.rows_np(name, 0, 640)
        keep = [i for i in range(608) if i not in ids]
        assert np.array_equal(old[keep], new[keep]), "rows that were not reused stay bit-identical"
        mean = old.astype(np.float64).mean(0)
        want = torch.from_numpy(mean).to(torch.bfloat16).float().numpy()
        for i in ids:
            assert np.array_equal(new[i], want), i

    m_old = AutoModelForCausalLM.from_pretrained(padded).eval()
    m_new = AutoModelForCausalLM.from_pretrained(out).eval()
    x = torch.tensor([AutoTokenizer.from_pretrained(padded)("The value of the option is set.").input_ids])
    with torch.no_grad():
        lo, ln = m_old(x).logits[0], m_new(x).logits[0]
    keep = [i for i in range(608) if i not in ids]
    assert torch.equal(lo[:, keep], ln[:, keep])


def test_tekken_special_placeholders_are_reserved_tokens_to_reuse(tmp_path):
    """Mistral Nemo's Tekken ships <SPECIAL_20>..<SPECIAL_999> among its first 1000 ids (issue 32)."""
    from vocabsurgeon.tokenizer.editor import TokenizerEditor

    tok = bytelevel_tokenizer(600)
    tok.add_special_tokens({"additional_special_tokens": ["<SPECIAL_20>", "<SPECIAL_21>", "[INST]"]})
    tok.save_pretrained(tmp_path)
    assert TokenizerEditor(tmp_path).reusable_ids(603) == [(600, "<SPECIAL_20>"), (601, "<SPECIAL_21>")]


def test_reuse_refused_for_unigram_vocabularies(tmp_path, monkeypatch):
    from vocabsurgeon.tokenizer.editor import TokenizerEditor

    ed = TokenizerEditor.__new__(TokenizerEditor)
    ed.model, ed.dir, ed.family_name = {"vocab": [["a", 0.0]]}, tmp_path, "unigram"
    with pytest.raises(InputError, match="--reuse-reserved needs a BPE or WordPiece vocabulary"):
        ed.reusable_ids(10)


def test_reused_rows_alone_are_validated_by_add_and_by_validate(padded, tmp_path):
    """Llama 3's case: every new token takes a reserved row, none is appended (once: "vocab_size is 608, not
    more than the 608 ... pass the original first", exit 2, no report)."""
    from vocabsurgeon.validation.validate import validate_checkpoint

    out = tmp_path / "out"
    r = add_tokens(padded, out, ["Frodo", "Gandalf"], reuse_reserved=True)
    assert r.to_dict()["rows_after"] == 608 and len(r.to_dict()["reused_rows"]) == 4
    from vocabsurgeon.engine.finish import finish_add

    report = finish_add(r).report  # validation, as add runs it (it knows the new ids)
    assert report["passed"], report["failures"]
    assert report["method"] == "two-pass"  # the reused rows changed: the original must run
    assert report["old_logits"]["unchanged"] and report["vocab"]["new_tokens"] == 4
    standalone = validate_checkpoint(padded, out, max_tokens=256)  # `vocabsurgeon validate BASE OUT`: ids from the files
    assert standalone["passed"], standalone["failures"]
    assert standalone["vocab"]["new_tokens"] == 4 and standalone["tokenization"]["new_words"] == 2


def test_a_run_that_only_reuses_rows_promises_no_kl_bound(padded, tmp_path):
    from vocabsurgeon import AddOptions, plan_add

    plan = plan_add(padded, WORDS[:3], AddOptions(reuse_reserved=True))  # 6 entries: the 6 unused rows
    assert plan.to_dict()["rows_after"] == 608
    text = plan.describe()
    assert "KL bound log(1 + k/n) = 0" not in text
    line = ("mean-init KL bound: not covered; all 6 new rows reuse padding or reserved rows, whose old values are "
            "replaced (log(1 + k/n) covers appended rows only; validation measures the KL)")
    assert text.splitlines()[-1] == line
    # issue 32: --json said "kl_bound": 0.0, a bound of zero that nothing guarantees
    d = plan.to_dict()
    assert d["kl_bound"] is None and d["kl_bound_covers"] == line


def test_the_kl_bound_of_a_run_that_reuses_and_appends_covers_the_appended_rows_only(padded, tmp_path):
    out = tmp_path / "out"
    r = add_tokens(padded, out, WORDS, reuse_reserved=True, pad_to_multiple_of=1)  # 8 rows reused, 2 appended
    line = ("mean-init KL bound log(1 + k/n) = 0.00328 for the 2 appended rows only; the 8 reused padding or "
            "reserved rows are not covered (validation measures the KL)")
    assert r.plan.describe().splitlines()[-1] == line
    assert f"| mean-init KL bound | {line} |" in (out / "README.md").read_text(encoding="utf-8")
