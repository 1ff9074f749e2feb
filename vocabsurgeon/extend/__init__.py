"""`vocabsurgeon extend`: learn a new language's or domain's sub-word tokens by continuing the tokenizer's BPE
training (learn.py), plan them as new entries and rows (plan.py), and run `add`'s surgery (pipeline.py)."""

DEFAULT_MIN_COUNT = 2  # a new merge's pair (or a new character) must occur at least this often in the corpus
# The default init: the sub-word mean, its output rows shrunk toward the mean row until held-out old text keeps
# validation's limits (the plain sub-word mean fails them on a real model: docs/extend.md; init/fitted/shrunk.py).
DEFAULT_INIT = "subword-mean-shrunk"
