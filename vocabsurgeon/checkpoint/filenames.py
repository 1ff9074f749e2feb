"""The names of the files in a checkpoint directory that vocabsurgeon reads or writes, defined once."""

CONFIG_NAME = "config.json"
GENERATION_CONFIG_NAME = "generation_config.json"
INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
# The slow-tokenizer files transformers converts to tokenizer.json, by the names its classes use
# (LlamaTokenizer, T5Tokenizer, XLM-R/CamemBERT, GPT-2, BERT); see TokenizerEditor.
SLOW_TOKENIZER_FILES = ("tokenizer.model", "spiece.model", "sentencepiece.bpe.model", "vocab.json", "vocab.txt")
# Slow-tokenizer files that would not have the new tokens: left out of the output when
# tokenizer.json is rewritten (and deleted on the Hub by push), so that no loader silently gets the
# old vocabulary from them.
STALE_SLOW_FILES = ("tokenizer.model", "spiece.model", "sentencepiece.bpe.model", "vocab.json", "merges.txt", "vocab.txt")
CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")
CARD_NAME = "README.md"  # the model card
TOKENS_LIST_NAME = "added_tokens.txt"  # the new words, one per line, when the card cannot list them all
REPORT_NAME = "vocabsurgeon_report.json"  # what add and validate did, for pipelines
