"""What users do right after `extend`, as after `add` (tests/add/test_next_steps.py): `resize_token_embeddings(len(
tokenizer))`, fine-tuning the new rows on the new language (transformers' Trainer, PEFT LoRA with trainable tokens)
and padded batched inference mixing old and new text. Tiny Llamas whose rows are padded past the tokenizer (as
Qwen's are), so the new ids land after the last token and resize must keep them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from builders import family_checkpoint
from invariants import (check_padded_batch_matches_each_text_alone, check_resize_keeps_new_rows, lm_batch, lm_loss,
                        train_steps)
from transformers import AutoModelForCausalLM, AutoTokenizer

from vocabsurgeon.add.plan import AddOptions, open_target
from vocabsurgeon.checkpoint.reader import Checkpoint
from vocabsurgeon.extend.pipeline import run_extend
from vocabsurgeon.corpus import read_paragraphs
from vocabsurgeon.extend.plan import PACKAGED_CORPUS, ExtendOptions

pytestmark = pytest.mark.usefixtures("one_thread")

CORPUS = Path(__file__).parent / "new_language.txt"  # Russian and Japanese prose, written for these tests
ROWS_MULTIPLE = 64
NEW = [p[:200] for p in read_paragraphs(CORPUS)[:6]]  # Russian and Japanese prose, the corpus extend learns from
OLD = [p[:160] for p in read_paragraphs(PACKAGED_CORPUS)[:2]]  # English


@pytest.fixture(scope="module")
def extended(tmp_path_factory):
    """family -> (src, out, the new ids): a tiny Llama of `family` extended by 40 tokens once per module."""
    done: dict = {}

    def get(family: str):
        if family not in done:
            root = tmp_path_factory.mktemp(family)
            src = family_checkpoint(root / "src", family, rows_multiple=ROWS_MULTIPLE)
            result = run_extend(open_target(src, AddOptions(init="subword-mean")), root / "out",
                                ExtendOptions(CORPUS, 40))
            done[family] = src, root / "out", [t.id for t in result.plan.tokens.new]
        return done[family]

    return get



@pytest.mark.parametrize("family", ["byte-level", "sp-bpe"])
def test_resize_to_len_tokenizer_keeps_the_new_rows_and_new_text_uses_them(extended, family):
    src, out, ids = extended(family)
    assert len(ids) == 40
    check_resize_keeps_new_rows(out, ids)
    tok = AutoTokenizer.from_pretrained(out)
    assert len(tok) == max(ids) + 1  # the new ids follow the tokenizer, before the padding rows
    used = {i for text in NEW for i in tok(text)["input_ids"]}
    assert len(used & set(ids)) >= 10, sorted(used & set(ids))


@pytest.mark.parametrize("family", ["byte-level", "sp-bpe"])
def test_a_few_trainer_steps_on_the_new_language_lower_its_loss(extended, family, tmp_path):
    from transformers import Trainer, TrainingArguments

    src, out, ids = extended(family)
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    model.resize_token_embeddings(len(tok))
    batch = lm_batch(tok, NEW)
    before = lm_loss(model.eval(), batch)
    rows = [{k: v[i] for k, v in batch.items()} for i in range(len(NEW))]
    args = TrainingArguments(output_dir=str(tmp_path / "run"), max_steps=20, learning_rate=1e-2,
                             per_device_train_batch_size=3, report_to=[], save_strategy="no", use_cpu=True,
                             disable_tqdm=True, seed=0)
    Trainer(model=model, args=args, train_dataset=rows).train()
    after = lm_loss(model.eval(), batch)
    assert np.isfinite(after) and after < 0.8 * before, (before, after)


def test_peft_lora_trains_only_the_new_rows_and_reloads(extended, tmp_path):
    from peft import LoraConfig, PeftModel, get_peft_model

    src, out, ids = extended("byte-level")
    tok = AutoTokenizer.from_pretrained(out)
    batch = lm_batch(tok, NEW)
    base = AutoModelForCausalLM.from_pretrained(out)
    base.resize_token_embeddings(len(tok))
    tied = base.config.tie_word_embeddings
    tables = {"embed_tokens": ids} if tied else {"embed_tokens": ids, "lm_head": ids}
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                            trainable_token_indices=tables))
    before = lm_loss(model, batch)
    train_steps(model, batch, 20)
    after = lm_loss(model, batch)
    assert after < 0.9 * before, (before, after)
    model.save_pretrained(tmp_path / "adapter")
    fresh = AutoModelForCausalLM.from_pretrained(out)
    fresh.resize_token_embeddings(len(tok))
    merged = PeftModel.from_pretrained(fresh, tmp_path / "adapter").eval().merge_and_unload()
    assert lm_loss(merged, batch) == pytest.approx(after, rel=1e-4)
    written = Checkpoint.open(out)
    name = next(n for n in written.tensors if n.endswith("embed_tokens.weight"))
    want = torch.from_numpy(written.rows_np(name, 0, len(tok)).astype(np.float32))
    got = merged.get_input_embeddings().weight.detach()
    old = [i for i in range(len(tok)) if i not in set(ids)]
    assert torch.equal(got[old], want[old]) and not torch.equal(got[ids], want[ids])


@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_batches_of_old_and_new_text_give_the_logits_of_each_text_alone(extended, side):
    src, out, ids = extended("sp-bpe")
    batch_ids = check_padded_batch_matches_each_text_alone(out, [NEW[0], OLD[0], NEW[1][:40], OLD[1] + " " + NEW[2]],
                                                           side)
    assert set(ids) & set(batch_ids)
