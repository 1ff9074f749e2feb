"""The learner against the trainer's definition: every step recounts every pair of every word and takes the most
frequent, ties to the pair whose pieces came first (first occurrence in the corpus, then the new pieces in the
order made). The learner keeps counts incrementally; its merges, counts and refusals must be the same."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from builders import family_checkpoint

from vocabsurgeon.corpus import count_words, read_paragraphs, words_of
from vocabsurgeon.extend.learn import CHAT_CHARS, CHAT_PAIR, CHAT_WORD, KEEP_CHARS, KEEP_PIECE, learn_merges, word_split
from vocabsurgeon.extend.plan import PACKAGED_CORPUS, ExtendEditor, _mergeable, spelling

REPO = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).parent / "new_language.txt"


def reference(tok, words: Counter, n: int, *, vocab, mergeable, forbidden_words=(), keep_chars=None,
              whole_words=False, min_count=2, new_chars=False):
    """(merges, counts, characters, refused, tokens before, tokens after): the definition, recounted each step."""
    model = tok.model
    forbidden_words = list(forbidden_words)
    keep_chars = set(keep_chars or ())
    refused: Counter = Counter()
    chars = []
    if new_chars:
        lacked = Counter(ch for w, c in words.items() for ch in w for _ in range(c) if ch not in vocab)
        kept = {ch for w in forbidden_words for ch in w}
        for ch, c in lacked.most_common():
            if c < min_count or len(chars) >= n:
                break
            if ch in keep_chars or ch in kept:
                refused[KEEP_CHARS if ch in keep_chars else CHAT_CHARS] += 1
            else:
                chars.append(ch)

    def pieces(w):
        out, run = [], ""
        for ch in w + "\0":
            if ch in chars or ch == "\0":
                out += [t.value for t in model.tokenize(run)] if run else []
                out += [ch] if ch != "\0" else []
                run = ""
            else:
                run += ch
        return out

    seqs, freqs = [pieces(w) for w in words], list(words.values())
    before = sum(len(model.tokenize(w)) * c for w, c in words.items())
    order: dict[str, int] = {}
    for s in seqs + [pieces(w) for w in forbidden_words]:
        for t in s:
            order.setdefault(t, len(order))
    blocked = {q for w in forbidden_words for s in [pieces(w)] for q in zip(s, s[1:])}
    made, dead, merges, counts = set(chars), set(), [], []
    while len(chars) + len(merges) < n:
        pairs = Counter()
        for s, f in zip(seqs, freqs):
            for q in zip(s, s[1:]):
                pairs[q] += f
        chosen = None
        for q in sorted(set(pairs) - dead, key=lambda q: (-pairs[q], order[q[0]], order[q[1]])):
            if pairs[q] < min_count:
                break
            piece = q[0] + q[1]
            why = (CHAT_PAIR if q in blocked else
                   "a byte-fallback or special piece" if not (mergeable(q[0]) and mergeable(q[1])) else
                   "the vocabulary has the piece already" if piece in vocab or piece in made else
                   KEEP_PIECE if keep_chars and set(piece) <= keep_chars else
                   CHAT_WORD if whole_words and piece in forbidden_words else None)
            if why is None:
                chosen = q
                break
            refused[why] += 1
            dead.add(q)
        if chosen is None:
            break
        piece = chosen[0] + chosen[1]
        order[piece] = len(order)
        made.add(piece)
        merges.append(chosen)
        counts.append(pairs[chosen])
        for i, s in enumerate(seqs):
            out, k = [], 0
            while k < len(s):
                if k + 1 < len(s) and (s[k], s[k + 1]) == chosen:
                    out.append(piece)
                    k += 2
                else:
                    out.append(s[k])
                    k += 1
            seqs[i] = out
    after = sum(len(s) * f for s, f in zip(seqs, freqs))
    return merges, counts, chars, dict(refused), before, after


@pytest.mark.parametrize("family, ignore_merges", [("byte-level-gpt2", False), ("byte-level", True),
                                                   ("sp-bpe-meta", False), ("metaspace-bpe", False)])
def test_the_learner_takes_the_merges_that_recounting_every_step_takes(tmp_path, family, ignore_merges):
    src = family_checkpoint(tmp_path / "ckpt", family)
    if ignore_merges:
        data = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
        data["model"]["ignore_merges"] = True
        (src / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    editor = ExtendEditor(src)
    tok, byte_level = editor.tok, family.startswith("byte-level")
    split = None if byte_level else word_split(editor.vocab)
    corpus = tmp_path / "corpus.txt"  # the new language, and English that the keep text shares
    corpus.write_text(CORPUS.read_text(encoding="utf-8") + "\n\n" + (REPO / "fixtures" / "corpus_lotr.txt").read_text(
        encoding="utf-8"), encoding="utf-8")
    words, _ = count_words(tok, corpus, split=split)
    forbidden = words_of(tok, read_paragraphs(PACKAGED_CORPUS)[:6], split)  # as the chat template's words
    vocab = {**editor.vocab, **{c: t["id"] for c, t in editor.added.items()}}
    args = dict(vocab=vocab, mergeable=_mergeable(editor), forbidden_words=forbidden, whole_words=ignore_merges,
                new_chars=not byte_level)
    keep = read_paragraphs(PACKAGED_CORPUS)[6:9]  # --keep-text: a piece made of these characters alone is refused
    for kwargs, n in ((args, 250), ({**args, "keep_chars": spelling(tok, keep, split)}, 120)):
        got = learn_merges(tok, words, n, **kwargs)
        want = reference(tok, words, n, **kwargs)
        assert (got.merges, got.counts, got.chars, got.refused, got.tokens_before, got.tokens_after) == want
        assert len(got.pieces) == n and got.refused  # enough merges to meet ties, refusals and merged new pieces
        assert len(set(got.counts)) < len(got.counts)  # ties were broken
    assert got.refused[KEEP_PIECE] > 0
