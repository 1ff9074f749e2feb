"""A new word in context: the one table of texts in which a new word must be one token.

The plan, the post-write check and validation all take their contexts from CONTEXTS and their verdicts
from `misses`. A *soft* context (after "(" or a quote) does not skip a word; it is reported.

    >>> [c.text for c in cases(["Frodo"], names=CORE)]
    ['Frodo', ' Frodo']
    >>> misses(cases(["Frodo"], names=CORE), [[7], [0, 7]], {"Frodo": {7}}, lead=0)
    [(1, 'Frodo')]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Context:
    """One kind of text around a new word; "{w}" is the word, "{next}" another new word."""

    name: str
    template: str
    decode: bool = False  # the text must also decode as the original tokenizer decodes it
    soft: bool = False  # not one token here is reported, not a reason to skip (see the module docstring)
    alone: str | None = None  # "word": the text is exactly the one token; "space": one plus a lone space's pieces


CONTEXTS = (
    Context("alone", "{w}", alone="word"),  # a sentence start
    Context("after a space", " {w}", alone="space"),
    Context("before punctuation", "{w}."),
    Context("repeated", "{w}, {w}.", decode=True),
    Context("brackets", "({w})", decode=True, soft=True),
    Context("square brackets", "[{w}]", decode=True, soft=True),
    Context("quotes", '"{w}"', decode=True, soft=True),
    Context("single quotes", "'{w}'", decode=True, soft=True),
    Context("after an equals sign", "x={w}", decode=True, soft=True),
    Context("possessive at a sentence start", "{w}'s", decode=True, soft=True),
    Context("possessive", "I saw {w}'s", decode=True, soft=True),
    Context("next to another new word", "{w} {next}"),
)
BY_NAME = {c.name: c for c in CONTEXTS}
CORE = ("alone", "after a space")  # what every written tokenizer and every validation checks
SPECIAL = ("alone",)  # special tokens stand alone; the pre-tokenizer never sees them


@dataclass(frozen=True)
class Case:
    """One text to encode: a context filled in with a word (and its neighbour)."""

    context: Context
    text: str
    expect: dict[str, int]  # word -> occurrences the ids must hold


def cases(words: list[str], special: frozenset[str] | set[str] = frozenset(), names: tuple[str, ...] | None = None
          ) -> list[Case]:
    """The texts of `words` in the contexts `names` (None: all), special tokens alone only. A word
    is paired with the next word of the list unless one contains the other."""
    out = []
    plain = [w for w in words if w not in special]
    for w in words:
        if w in special:
            out += [Case(BY_NAME[n], w, {w: 1}) for n in SPECIAL if names is None or n in names]
    # each context once: whether it pairs the word with the next, and how often it holds the word
    chosen = [(c, "{next}" in c.template, c.template.count("{w}")) for c in CONTEXTS if names is None or c.name in names]
    for i, w in enumerate(plain):
        nxt = plain[(i + 1) % len(plain)]
        for c, paired, n in chosen:
            if paired:
                if nxt == w or w in nxt or nxt in w:
                    continue
                out.append(Case(c, c.template.format(w=w, next=nxt), {w: 1, nxt: 1}))
            else:
                out.append(Case(c, c.template.format(w=w), {w: n}))
    return out


def misses(cases_: list[Case], encoded: list[list[int]], ids_of: dict[str, set[int] | None], lead: int
           ) -> list[tuple[int, str]]:
    """The (case index, word) pairs where a word is not one token: its ids do not occur as often as
    the word does (`ids_of[w]` None: any id), or, for a text that is the word alone, the text is not
    that one token (plus `lead` pieces of a lone leading space where the tokenizer has them: see
    `space_lead`)."""
    out = []
    sizes = {"word": 1, "space": 1 + lead}
    for j, (case, ids) in enumerate(zip(cases_, encoded)):
        size = sizes.get(case.context.alone or "")
        for w, n in case.expect.items():
            want = ids_of.get(w)
            count = n if want is None else sum(map(want.__contains__, ids))  # the ids that are the word's
            if count != n or (size is not None and len(ids) != size):
                out.append((j, w))
    return out


def space_lead(encode: Callable[[str], list[int]]) -> int:
    """How many pieces a tokenizer gives a lone leading space before a word: 0 where " a" is one piece
    ("Ġa"), 1 where the space is a piece of its own (Meta's Llama 2 layout: "▁" + "▁a"), so that
    " Frodo" is one token there after that piece.

        >>> space_lead(lambda text: list(text))  # one id per character: " a" is two, "a" one
        1
    """
    return max(0, len(encode(" a")) - len(encode("a")))
