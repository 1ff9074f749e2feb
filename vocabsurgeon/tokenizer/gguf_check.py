"""The text by which llama.cpp's GGUF converter recognises a BPE tokenizer's pre-tokenizer.

`convert_hf_to_gguf.py` (`get_vocab_base_pre`) tokenizes CHECK_TEXT with the checkpoint's tokenizer, hashes the
ids (sha256 of their list) and looks the hash up in its table of known pre-tokenizers (gpt-2, llama-bpe,
smaug-bpe, qwen2, ...). A byte-level BPE tokenizer that gives this text other ids than its published file did is
refused ("BPE pre-tokenizer was not recognized - update get_vocab_base_pre()"), and nothing converts. The text
holds Bulgarian, Chinese and Khmer words and English ones ("apple", "sure", "make"), so a tokenizer extended for
a language, or given an English word as one token, can lose its GGUF conversion. Whatever vocabsurgeon writes
for those families keeps this text's ids: `extend` learns no merge that changes them, `add` skips a word
that would, with the reason.

Copied from llama.cpp (MIT license), conversion/base.py, as vendored by llama-cpp-python 0.3.36 (the converter
the tests pin, fixtures/llamacpp.py; tests/tokenizer/test_gguf_check.py compares the two where it is cached).
"""

CHECK_TEXT = (
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ 🦙🦙 3 33 "
    "333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ ------======= "
    "нещо на Български ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you sure? 'M not "
    "sure I'll make it, 'D you like some tea? We'Ve a'lL"
)

# The families whose GGUF conversion goes through that hash: byte-level BPE (`_set_vocab_gpt2`) and WordPiece (BERT's
# `set_vocab`); SentencePiece layouts convert from their `.model` or as Llama's BPE (`LlamaHfVocab`), without it.
HASHED_FAMILIES = ("byte-level-bpe", "wordpiece")
