"""`vocabsurgeon extend`: learn a new language's or domain's sub-word tokens by continuing the tokenizer's BPE
training (learn.py), plan them as new entries and rows (plan.py), and run `add`'s surgery (pipeline.py)."""

DEFAULT_MIN_COUNT = 2  # a new merge's pair (or a new character) must occur at least this often in the corpus
