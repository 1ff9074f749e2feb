"""A tokenizers.Tokenizer built from a tokenizer.json object, without serializing its vocabulary and merges.

The editor builds the original tokenizer from the object it read and the plan builds the edited one in memory
(issue 38). Through JSON that is json.dumps of a 128k-entry vocabulary and its merges and the Rust parser of
the text again, most of planning's time (bench/RESULTS.md). Here everything but a BPE model's vocabulary and merges
goes through JSON (added tokens, normalizer, pre-tokenizer, post-processor, decoder: a few KB), and the model
is built by tokenizers' own BPE constructor, which runs the builder the parser runs, from the dict and list.
The result is the tokenizer `Tokenizer.from_str(json.dumps(data))` gives (tests/tokenizer/test_building.py
compares their serializations); any other model, or anything this cannot show to be the same, goes through JSON.
"""

from __future__ import annotations

import contextlib
import gc
import json

from tokenizers import Tokenizer, models

# The fields of a BPE model in tokenizer.json, all of which the Python constructor takes.
BPE_OPTIONS = ("dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", "byte_fallback",
               "ignore_merges")


def tokenizer_from_data(data: dict, cache: dict | None = None) -> Tokenizer:
    """The tokenizer of the tokenizer.json object `data` (not modified), as `Tokenizer.from_str(json.dumps(data))`
    builds it. `cache`: a dict the caller keeps between calls on objects that share their merges (the original
    and its edited copies, which append to a copy of the list): the merges as pairs are then converted once.

    Raises:
        Exception: what the tokenizers library raises for a tokenizer it cannot build.
    """
    parts = _bpe_parts(data, cache)
    if parts is None:
        return Tokenizer.from_str(json.dumps(data))
    vocab, merges, options, added_ids = parts
    # The parser numbers each added token by the model: its id in the vocabulary, else the next one (`_bpe_parts`).
    # A model of the added tokens alone, at those ids, numbers them the same; it is then replaced by the real one.
    shell = dict(data)
    shell["model"] = {"type": "BPE", "vocab": added_ids, "merges": []}
    tok = Tokenizer.from_str(json.dumps(shell))
    tok.model = models.BPE(vocab=vocab, merges=merges, **options)
    return tok


@contextlib.contextmanager
def collector_paused():
    """The garbage collector off for a block that only allocates (reading a tokenizer.json: a list per merge,
    280k on Llama 3, in which its full collections find nothing), and back on after (where it was on)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def merges_as_pairs(data: dict) -> dict:
    """`data` (a tokenizer.json object, changed in place and returned) with a BPE model's merges written as
    ["a", "b"] held as ("a", "b") tuples: the pairs the BPE constructor takes (`tokenizer_from_data` then converts
    nothing), written back by json.dumps as the same arrays. Why: the JSON lists are 280k (Llama 3) containers
    that the garbage collector tracks, and every full collection of the process walks them (three or four in a
    plan, that find nothing); a tuple of strings is untracked at its first collection. Anything else
    (merges as "a b" text, another model) is left as it is."""
    model = data.get("model")
    merges = model.get("merges") if isinstance(model, dict) and model.get("type") == "BPE" else None
    if isinstance(merges, list) and merges and set(map(type, merges)) == {list}:
        pairs = list(map(tuple, merges))
        if set(map(len, pairs)) == {2}:
            model["merges"] = pairs
    return data


def _bpe_parts(data: dict, cache: dict | None = None) -> tuple[dict, list[tuple[str, str]], dict, dict[str, int]] | None:
    """(vocab, merges as pairs, the constructor's options, each added token's id) of a BPE model the constructor
    builds as the parser does, or None."""
    model = data.get("model")
    if not isinstance(model, dict) or model.get("type") != "BPE" or set(model) - {"type", "vocab", "merges", *BPE_OPTIONS}:
        return None
    vocab, merges = model.get("vocab"), model.get("merges")
    if not isinstance(vocab, dict) or not isinstance(merges, list):
        return None
    added_ids = _added_ids(data.get("added_tokens") or [], vocab)
    if added_ids is None:
        return None
    pairs = _cached_pairs(merges, cache)
    if pairs is None:
        return None
    options = {k: model[k] for k in BPE_OPTIONS if model.get(k) is not None}
    return vocab, pairs, options, added_ids


def _cached_pairs(merges: list, cache: dict | None) -> list[tuple[str, str]] | None:
    """`_pairs(merges)`, reusing the pairs of the list last converted with `cache` where `merges` starts with it
    (compared item by item: the same objects, so in C at once)."""
    known = cache.get("merges") if cache is not None else None
    if known is not None and len(merges) >= len(known) and merges[:len(known)] == known:
        tail = _pairs(merges[len(known):])
        return None if tail is None else cache["pairs"] + tail
    pairs = _pairs(merges)
    if cache is not None and pairs is not None:
        cache.update(merges=list(merges), pairs=pairs)
    return pairs


def _pairs(merges: list) -> list[tuple[str, str]] | None:
    """The merges as the pairs the constructor takes, or None where the parser would read them otherwise."""
    kinds = set(map(type, merges))  # map and set: C loops over 280k merges, not Python ones
    if kinds <= {list, tuple}:
        pairs = list(map(tuple, merges))
    elif kinds == {str}:  # "a b", the older format: exactly one space, as the parser splits it
        pairs = [tuple(m.split(" ")) for m in merges]
    else:
        return None
    if set(map(len, pairs)) - {2}:
        return None  # the parser's error for it
    return pairs


def _added_ids(added: list, vocab: dict) -> dict[str, int] | None:
    """The id the parser gives each added token (tokenizers' AddedVocabulary.add_tokens, in file order): its id in
    the model's vocabulary, else one past the largest id given so far, or the vocabulary's size when that is
    larger. Given where that is each token's own id in the file (Llama 3's 256 specials after its 128,000 entries),
    so that nothing is guessed: None for anything else (a gap, a token twice, an empty one)."""
    if not isinstance(added, list):
        return None
    out: dict[str, int] = {}
    size, top = len(vocab), None
    for t in added:
        content = t.get("content") if isinstance(t, dict) else None
        if not isinstance(content, str) or not content or content in out:
            return None
        i = vocab.get(content)
        if i is None:
            i = size if top is None or top < size else top + 1
            if t.get("id") != i:
                return None
        elif not isinstance(i, int) or i >= size:
            return None
        out[content] = i
        top = i if top is None else max(top, i)
    return out
