"""`vocabsurgeon extend`: learn a new language's or domain's sub-word tokens by continuing the tokenizer's BPE
training (learn.py), plan them as new entries and rows (plan.py), and run `add`'s surgery (pipeline.py)."""

DEFAULT_MIN_COUNT = 2  # a new merge's pair (or a new character) must occur at least this often in the corpus
# The default init: the sub-word mean reads a new language well, but its output rows moved old text past
# validation's limits on a real model (SmolLM2, 8,000 Russian tokens: KL p99 3.1 nats); shrunk toward the mean
# row until held-out old text keeps fitted's limits (fitted/shrunk.py, docs/extend.md).
DEFAULT_INIT = "subword-mean-shrunk"
