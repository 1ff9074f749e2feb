"""What `trim` writes: kept rows byte for byte, untouched shards and tensors byte for byte, the index, the
configs' ids, the id map, padding, ties; and what must stay (closure, bytes, --keep, chat template)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from invariants import raw_bytes, tree_digest
from vocabsurgeon import trim_vocabulary
from vocabsurgeon.checkpoint.architectures import detect
from vocabsurgeon.checkpoint.reader import Checkpoint
from vocabsurgeon.trim.keep import MergeTree
from vocabsurgeon.trim.surgery import IDMAP_NAME, TrimOptions, plan_trim
from vocabsurgeon.trim.tokenizer import TokenizerVocab

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "fixtures" / "corpus.txt"


def _old_ids(out: Path) -> list[int]:
    return json.loads((out / IDMAP_NAME).read_text())["old_ids"]


def test_sharded_llama_keeps_rows_bytes_and_shards(llama_ckpt, tmp_path):
    before = tree_digest(llama_ckpt)
    r = trim_vocabulary(llama_ckpt, tmp_path / "out", CORPUS, vocab_size=300, pad_to_multiple_of=64)
    out = tmp_path / "out"
    assert tree_digest(llama_ckpt) == before  # the input is never modified
    a, b = Checkpoint.open(llama_ckpt), Checkpoint.open(out)
    la, lb = detect(a), detect(b)
    kept = np.array(_old_ids(out))
    assert len(kept) == 300 and lb.rows == 320 and not lb.tied
    for name in a.tensors:
        if name in la.all_tensors:
            old = np.frombuffer(raw_bytes(a, name), np.uint8).reshape(a.tensors[name].shape[0], -1)
            new = np.frombuffer(raw_bytes(b, name), np.uint8).reshape(320, -1)
            assert np.array_equal(new[:300], old[kept]), name
            # padding rows: the mean kept row (bf16), the same in every padding row
            assert (new[300:] == new[300]).all()
        else:
            assert raw_bytes(a, name) == raw_bytes(b, name), name
    d = r.to_dict()
    for f in d["files_copied"]:
        assert (llama_ckpt / f).read_bytes() == (out / f).read_bytes()
    assert d["files_copied"] and d["files_rewritten"]
    assert b.index["metadata"]["total_size"] == b.total_size
    assert set(b.index["weight_map"]) == set(b.tensors)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["vocab_size"] == 320
    old_cfg = json.loads((llama_ckpt / "config.json").read_text())
    assert cfg["eos_token_id"] == list(kept).index(old_cfg["eos_token_id"])


def test_tied_stays_tied_and_special_ids_follow(tmp_path):
    from builders import bytelevel_tokenizer, tiny_checkpoint

    tok = bytelevel_tokenizer(600)
    tok.add_special_tokens({"eos_token": "<|tool|>"})  # an added token past the trained vocabulary: id 600
    src = tiny_checkpoint(tmp_path / "src", tok)
    eos = tok.convert_tokens_to_ids("<|tool|>")
    cfg = json.loads((src / "config.json").read_text())
    cfg["eos_token_id"] = eos
    (src / "config.json").write_text(json.dumps(cfg))
    (src / "generation_config.json").write_text(json.dumps({"eos_token_id": [eos, 0], "pad_token_id": eos}))
    tc = json.loads((src / "tokenizer_config.json").read_text())
    # transformers 4 wrote the added tokens here too, by id, and in added_tokens.json
    tc["added_tokens_decoder"] = {str(eos): {"content": "<|tool|>", "special": True}}
    (src / "tokenizer_config.json").write_text(json.dumps(tc))
    (src / "added_tokens.json").write_text(json.dumps({"<|tool|>": eos}))
    trim_vocabulary(src, tmp_path / "out", CORPUS, min_count=2)
    out = tmp_path / "out"
    kept = _old_ids(out)
    new = kept.index(eos)
    assert new == len(kept) - 1 < eos  # the ids moved
    assert detect(Checkpoint.open(out)).tied
    assert Tokenizer.from_file(str(out / "tokenizer.json")).token_to_id("<|tool|>") == new
    assert json.loads((out / "config.json").read_text())["eos_token_id"] == new
    assert json.loads((out / "generation_config.json").read_text()) == {"eos_token_id": [new, kept.index(0)],
                                                                          "pad_token_id": new}
    assert json.loads((out / "tokenizer_config.json").read_text())["added_tokens_decoder"] == {
        str(new): {"content": "<|tool|>", "special": True}}
    assert json.loads((out / "added_tokens.json").read_text()) == {"<|tool|>": new}
    card = (out / "README.md").read_text()
    assert card.startswith("---\ntags:\n- vocabsurgeon\n") and IDMAP_NAME in card


def test_every_kept_bpe_token_keeps_what_it_is_merged_from(gpt2_ckpt, tmp_path):
    plan = plan_trim(gpt2_ckpt, CORPUS, TrimOptions(vocab_size=300))
    vocab = TokenizerVocab(plan.data)
    kept = {vocab.pieces[int(i)] for i in plan.kept}
    merges = vocab.merges
    assert all(a in kept and b in kept for a, b in merges if a + b in kept)
    # byte-level: the 256 byte symbols stay, so any text still encodes
    assert plan.why and sum(r == "byte symbol" for r in plan.why.values()) == 256
    # the closure made room for itself: exactly 300, and tokens picked by count come with their parts
    assert len(plan.kept) == 300 and "merged into a kept token" in plan.why.values()


def test_keep_file_pieces_and_text_stay(gpt2_ckpt, tmp_path):
    plan = plan_trim(gpt2_ckpt, CORPUS, TrimOptions(vocab_size=260))
    vocab = TokenizerVocab(plan.data)
    rare = next(p for i, p in sorted(vocab.pieces.items(), reverse=True) if len(p) > 3 and i not in set(plan.kept.tolist()))
    plan2 = plan_trim(gpt2_ckpt, CORPUS, TrimOptions(vocab_size=300, keep=[rare, "Frodo"]))
    kept = {vocab.pieces[int(i)] for i in plan2.kept}
    assert rare in kept and plan2.why[vocab.ids[rare]] == "--keep"
    tok = Tokenizer.from_file(str(gpt2_ckpt / "tokenizer.json"))
    assert all(t in kept for t in tok.encode("Frodo", add_special_tokens=False).tokens)


def test_unigram_keeps_its_lowest_scoring_piece(tmp_path):
    from builders import family_tokenizer, tiny_checkpoint

    src = tiny_checkpoint(tmp_path / "src", family_tokenizer("unigram-file"))
    plan = plan_trim(src, CORPUS, TrimOptions(min_count=5))
    scores = [s for _, s in plan.data["model"]["vocab"]]
    assert int(np.argmin(scores)) in set(plan.kept.tolist())


def test_chat_template_tokens_stay(gpt2_ckpt, tmp_path):
    cfg = json.loads((gpt2_ckpt / "tokenizer_config.json").read_text())
    cfg["chat_template"] = ("{% for m in messages %}{{ 'Speaker ' + m['role'] + ' zebra:' + m['content'] + '\\n' }}"
                            "{% endfor %}")
    (gpt2_ckpt / "tokenizer_config.json").write_text(json.dumps(cfg))
    plan = plan_trim(gpt2_ckpt, CORPUS, TrimOptions(vocab_size=300))
    tok = Tokenizer.from_file(str(gpt2_ckpt / "tokenizer.json"))
    ids = tok.encode("Speaker assistant zebra:", add_special_tokens=False).ids
    assert {plan.why.get(i) for i in ids} & {"chat template"}
    assert set(ids) <= set(plan.kept.tolist())


@pytest.mark.parametrize("opts", [dict(vocab_size=300), dict(min_count=2)])
def test_the_plan_reports_coverage_and_bytes(gpt2_ckpt, opts):
    d = plan_trim(gpt2_ckpt, CORPUS, TrimOptions(**opts)).to_dict()
    row = 32 * 4  # n_embd 32, float32
    assert d["bytes_saved"] == (d["rows_before"] - d["rows_after"]) * row
    assert 0 < d["corpus"]["coverage"] <= 1 and d["corpus"]["tokens"] > 1000
    if "min_count" in opts:  # every token used twice or more is kept
        assert all(r["count"] < 2 for r in d["most_used_removed"])


def test_merges_that_cannot_be_closed_are_refused(gpt2_ckpt):
    data = json.loads((gpt2_ckpt / "tokenizer.json").read_text())
    data["model"]["merges"].insert(0, ["Ġzz", "qq"])
    from vocabsurgeon.errors import InputError

    with pytest.raises(InputError, match="merge 'Ġzz' \\+ 'qq' uses 'Ġzz', which is not in the vocabulary"):
        MergeTree(TokenizerVocab(data))
