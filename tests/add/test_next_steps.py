"""What users do right after `add` (issue 32), run on tiny models: `resize_token_embeddings(len(tokenizer))`,
the output's tokenizer attributes, fine-tuning the new rows (PEFT LoRA with trainable tokens, transformers'
Trainer) and padded batched inference. docs/next-steps.md shows the same calls."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from builders import ALL_FAMILIES, as_transformers_loads, bytelevel_tokenizer, family_checkpoint, save_checkpoint
from invariants import (check_padded_batch_matches_each_text_alone, check_resize_keeps_new_rows,
                        check_same_tokenizer_behaviour, lm_batch, lm_loss, train_steps)
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

from vocabsurgeon import add_tokens
from vocabsurgeon.checkpoint.reader import Checkpoint
from vocabsurgeon.tokenizer.editor import TokenizerEditor

pytestmark = pytest.mark.usefixtures("one_thread")

# Names in both forms; "Éowyn" is an added token that the decoder spells as bytes on byte-level BPE, so classes
# that rebuild the decoder are replaced (the attributes test needs one such case); "defect" is two pieces on
# metaspace-bpe, which takes only those.
WORDS = ["Frodo", "Gandalf", "mithril", "Éowyn", "defect"]
ROWS_MULTIPLE = 64
EMBEDDING = "model.embed_tokens.weight"


@pytest.fixture(scope="module")
def added(tmp_path_factory):
    """Per family: (src, out, the add summary) for a tiny tied Llama whose rows are padded to a multiple of 64
    past its tokenizer, built and added to once."""
    done: dict = {}

    def get(family: str):
        if family not in done:
            root = tmp_path_factory.mktemp(family)
            src = family_checkpoint(root / "src", family, rows_multiple=ROWS_MULTIPLE)
            done[family] = src, root / "out", add_tokens(src, root / "out", WORDS).to_dict()
        return done[family]

    return get


@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_resize_token_embeddings_to_len_tokenizer_keeps_every_new_row_and_runs_each_new_word(family, added):
    """Issue 32, item 1: new ids came after the last row, and this line of every fine-tuning script cut them
    off (IndexError on the first forward pass with a new word)."""
    src, out, d = added(family)
    ids = [a["id"] for a in d["added"]]
    assert ids, d["skipped"]
    # as transformers' add_tokens numbers them: after the last token of tokenizer.json (GemmaTokenizer numbers
    # the <pad> and <mask> it invents for a file without them after it too, here as in the input)
    n_tokens = TokenizerEditor(src).size
    assert ids == list(range(n_tokens, n_tokens + len(ids)))
    assert d["rows_after"] % ROWS_MULTIPLE == 0 and d["rows_after"] >= d["rows_before"]

    check_resize_keeps_new_rows(out, ids)
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    model.resize_token_embeddings(len(tok))
    text = "I saw " + ", ".join(WORDS) + " there."
    x = tok(text, return_tensors="pt").input_ids
    assert set(ids) & set(x[0].tolist())
    with torch.no_grad():
        assert torch.isfinite(model(x).logits).all()
        for i in ids:
            assert torch.isfinite(model(torch.tensor([[i]])).logits).all()

    old, new = Checkpoint.open(src), Checkpoint.open(out)
    n = d["rows_before"]
    keep = [i for i in range(n) if i not in ids]
    assert np.array_equal(old.rows_np(EMBEDDING, 0, n)[keep], new.rows_np(EMBEDDING, 0, n)[keep])


@pytest.mark.floor  # also run with the oldest supported versions (.ci/run)
@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_the_output_tokenizer_behaves_as_the_input_one(family, added):
    """Issue 32, item 2: padding and truncation side, model_max_length, BOS/EOS, special tokens, chat template
    and clean_up_tokenization_spaces, between AutoTokenizer(input) and AutoTokenizer(output)."""
    src, out, d = added(family)
    check_same_tokenizer_behaviour(src, out)


@pytest.mark.floor  # also run with the oldest supported versions (.ci/run)
def test_a_llama_class_over_a_byte_level_file_keeps_its_padding_side_and_bos(added):
    """DeepSeek V3's case: tokenizer_config names LlamaTokenizerFast (left padding) over a byte-level file, which
    transformers loads as that class or as TokenizersBackend (right padding) depending on its version; `add`
    wrote padding_side left and said it was kept where the input loaded with right padding (issue 32), and
    transformers 4.57 lost the BOS, and 5.17 to 5.21 rebuild it with SentencePiece's pipeline (issue 38). The
    output pads, and tokenizes text, as transformers 5.22 on load the input, in every supported version."""
    src, out, d = added("byte-level-llama-class")
    old, new = as_transformers_loads(src), AutoTokenizer.from_pretrained(out)
    assert new.padding_side == old.padding_side
    assert old.bos_token is not None and new.bos_token == old.bos_token
    alone = Tokenizer.from_file(str(out / "tokenizer.json"))
    for text in ("Hello world", "Университет открыл новую библиотеку.", "naïve Zoë 😀🎉"):
        assert new(text).input_ids == old(text).input_ids, text
        assert new(text, add_special_tokens=False).input_ids == alone.encode(text, add_special_tokens=False).ids, text
    assert not any("padding_side" in n and old.padding_side not in n for n in d["tokenizer_notes"]), d["tokenizer_notes"]


# ---------------------------------------------------------------------------------------------
# Fine-tuning and inference on an untied byte-level Llama with padding rows (Qwen-shaped)

TRAIN = ["Frodo and Gandalf went to Mordor.", "Gandalf gave Frodo a coat of mithril.",
         "The mithril coat saved Frodo, said Gandalf.", "Éowyn rode with Gandalf and Frodo.",
         "mithril, said Éowyn."]
OLD = ["The parser returns a list of strings.", "It's 42% faster: don't use os.path here."]


@pytest.fixture(scope="module")
def untied(tmp_path_factory):
    """(src, out, the new ids): 600 tokens and 640 rows, untied, float32; WORDS added."""
    root = tmp_path_factory.mktemp("untied")
    tok = bytelevel_tokenizer(600)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=640, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=False,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    src = save_checkpoint(LlamaForCausalLM(cfg).eval(), tok, root / "src")
    d = add_tokens(src, root / "out", WORDS[:4]).to_dict()
    return src, root / "out", [a["id"] for a in d["added"]]



def test_peft_lora_with_the_new_ids_as_trainable_tokens_learns_saves_merges_and_reloads(untied, tmp_path):
    from peft import LoraConfig, PeftModel, get_peft_model

    src, out, ids = untied
    tok = AutoTokenizer.from_pretrained(out)
    batch = lm_batch(tok, TRAIN)
    assert set(ids) <= set(batch["input_ids"].flatten().tolist())  # the text uses the new words
    base = AutoModelForCausalLM.from_pretrained(out)
    base.resize_token_embeddings(len(tok))
    # the new rows of both matrices train; every other row stays frozen
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                        trainable_token_indices={"embed_tokens": ids, "lm_head": ids})
    model = get_peft_model(base, config)
    before = lm_loss(model, batch)
    train_steps(model, batch, 30)
    after = lm_loss(model, batch)
    assert after < 0.8 * before, (before, after)

    model.save_pretrained(tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
    fresh = AutoModelForCausalLM.from_pretrained(out)
    fresh.resize_token_embeddings(len(tok))
    reloaded = PeftModel.from_pretrained(fresh, tmp_path / "adapter").eval()
    assert lm_loss(reloaded, batch) == pytest.approx(after, rel=1e-5)

    merged = reloaded.merge_and_unload()
    merged.save_pretrained(tmp_path / "merged")
    again = AutoModelForCausalLM.from_pretrained(tmp_path / "merged").eval()
    assert lm_loss(again, batch) == pytest.approx(after, rel=1e-4)
    # frozen: every old row of both matrices as add wrote it; the new input rows trained
    written = Checkpoint.open(out)
    old_ids = [i for i in range(len(tok)) if i not in ids]
    for name, got in (("model.embed_tokens.weight", again.get_input_embeddings().weight),
                      ("lm_head.weight", again.get_output_embeddings().weight)):
        want = torch.from_numpy(written.rows_np(name, 0, len(tok)).astype(np.float32))
        assert torch.equal(got.detach()[old_ids], want[old_ids]), name
        assert not torch.equal(got.detach()[ids], want[ids]), name  # the new rows trained


def test_resize_then_a_few_trainer_steps_lower_the_loss_on_text_with_the_new_words(untied, tmp_path):
    from transformers import Trainer, TrainingArguments

    src, out, ids = untied
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    model.resize_token_embeddings(len(tok))
    batch = lm_batch(tok, TRAIN)
    rows = [{k: v[i] for k, v in batch.items()} for i in range(len(TRAIN))]
    before = lm_loss(model.eval(), batch)
    args = TrainingArguments(output_dir=str(tmp_path / "run"), max_steps=20, learning_rate=1e-2,
                             per_device_train_batch_size=4, report_to=[], save_strategy="no", use_cpu=True,
                             logging_steps=5, disable_tqdm=True, seed=0)
    Trainer(model=model, args=args, train_dataset=rows).train()
    after = lm_loss(model.eval(), batch)
    assert after < 0.8 * before, (before, after)


@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_batches_of_old_and_new_text_give_the_logits_of_each_text_alone(untied, side):
    src, out, ids = untied
    batch_ids = check_padded_batch_matches_each_text_alone(out, [TRAIN[0], OLD[0], "Frodo", OLD[1] + " " + TRAIN[3]],
                                                           side)
    assert set(ids) & set(batch_ids)
