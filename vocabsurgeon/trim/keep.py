"""Which tokens a trim keeps: what must stay in every family, the BPE merge closure, and the choice by count.

Must stay, with the reason recorded per id: special and added tokens, the ids the post-processor, the
configs and the chat template use, the unknown token, byte fallback's 256 `<0xNN>` pieces or byte-level
BPE's 256 byte symbols, and where neither exists every single-character piece (WordPiece: also "##" +
character), so that any text the original could encode still encodes. Unigram also keeps its
lowest-scoring piece, which sets the unknown-piece penalty of the Viterbi search. For BPE a kept token
keeps every token it is merged from (`closure`), or its derivation would change.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..errors import InputError
from ..tokenizer.families.pieces import BYTE_PIECE, BYTE_SYMBOLS
from .tokenizer import TokenizerVocab, config_ids, processor_ids


def _has_node(node, kind: str) -> bool:
    if isinstance(node, dict):
        return node.get("type") == kind or any(_has_node(v, kind) for v in node.values())
    if isinstance(node, list):
        return any(_has_node(v, kind) for v in node)
    return False


class MergeTree:
    """For BPE: which merges make each piece, and the closure of a set of ids under "made from"."""

    def __init__(self, vocab: TokenizerVocab):
        self.vocab = vocab
        self.parts: dict[int, list[tuple[int, int]]] = {}
        if vocab.kind != "BPE":
            return
        ids = vocab.ids
        for a, b in vocab.merges:
            made = vocab.merged(a, b)
            if a not in ids or b not in ids or made not in ids:
                missing = next(p for p in (a, b, made) if p not in ids)
                raise InputError(f"tokenizer.json: the merge {a!r} + {b!r} uses {missing!r}, which is not in the "
                                 "vocabulary, so the merges cannot be closed over the kept tokens; fix the tokenizer")
            self.parts.setdefault(ids[made], []).append((ids[a], ids[b]))

    def closure(self, ids: Iterable[int], kept: set[int] | None = None) -> set[int]:
        """`ids` and every id they are merged from, recursively, minus those already in `kept`."""
        kept = kept or set()
        out: set[int] = set()
        stack = [i for i in ids if i not in kept]
        while stack:
            i = stack.pop()
            if i in out or i in kept:
                continue
            out.add(i)
            for a, b in self.parts.get(i, ()):
                stack += (a, b)
        return out


def must_keep(vocab: TokenizerVocab, *, configs: Iterable[dict] = (), chat_ids: Iterable[int] = (),
              keep_ids: Iterable[int] = ()) -> dict[int, str]:
    """id -> why it must stay, for tokenizer `vocab`, the config dicts that name ids (config.json,
    generation_config.json), the ids of the rendered chat template, and --keep's ids."""
    why: dict[int, str] = {}
    size = vocab.size

    def add(ids: Iterable[int], reason: str) -> None:
        for i in ids:
            if 0 <= i < size and i in vocab.pieces:
                why.setdefault(i, reason)

    add((t["id"] for t in vocab.data.get("added_tokens") or [] if t.get("special")), "special token")
    add((t["id"] for t in vocab.data.get("added_tokens") or []), "added token")
    add(processor_ids(vocab.data.get("post_processor")), "post-processor")
    model, ids = vocab.model, vocab.ids
    if vocab.kind == "Unigram":
        if model.get("unk_id") is not None:
            add([model["unk_id"]], "unknown token")
        scores = [s for _, s in model["vocab"]]
        if scores:
            add([int(np.argmin(scores))], "lowest score (sets the unknown-piece penalty)")
    elif model.get("unk_token") in ids:
        add([ids[model["unk_token"]]], "unknown token")
    byte_level = _has_node(vocab.data.get("pre_tokenizer"), "ByteLevel") or _has_node(vocab.data.get("decoder"),
                                                                                       "ByteLevel")
    if model.get("byte_fallback"):
        add((i for p, i in ids.items() if BYTE_PIECE.fullmatch(p)), "byte fallback")
    elif byte_level:
        add((ids[s] for s in BYTE_SYMBOLS if s in ids), "byte symbol")
    else:
        prefix = model.get("continuing_subword_prefix") or ("##" if vocab.kind == "WordPiece" else "")
        add((i for p, i in ids.items() if len(p) == 1 or (prefix and p.startswith(prefix) and len(p) == len(prefix) + 1)),
            "single character")
    for cfg in configs:
        add(config_ids(cfg), "named by the config")
    add(chat_ids, "chat template")
    add(keep_ids, "--keep")
    return why


def choose(counts: np.ndarray, must: dict[int, str], tree: MergeTree, *, vocab_size: int | None = None,
           min_count: int | None = None) -> tuple[np.ndarray, dict[int, str]]:
    """The kept ids (sorted) and the reasons of those kept although not chosen by count.

    With `vocab_size`: the most used tokens (ties by id) with their merge closures, while they fit.
    With `min_count`: every token used at least that often, with its closure.

    Raises:
        InputError: what must stay is more than `vocab_size`.
    """
    why = dict(must)
    for i in tree.closure(must):
        why.setdefault(i, "merged into a token that must stay")
    kept = set(why)
    if vocab_size is not None and len(kept) > vocab_size:
        kinds: dict[str, int] = {}
        for r in why.values():
            kinds[r] = kinds.get(r, 0) + 1
        detail = ", ".join(f"{n} {r}" for r, n in sorted(kinds.items(), key=lambda x: -x[1]))
        raise InputError(f"--vocab-size {vocab_size} is below the {len(kept)} tokens that must stay ({detail}); "
                         f"pass --vocab-size {len(kept)} or more")
    pieces = tree.vocab.pieces
    order = [int(i) for i in np.lexsort((np.arange(len(counts)), -counts)) if int(i) in pieces]  # most used first
    if min_count is not None:
        used = [i for i in order if counts[i] >= min_count]
        closed = tree.closure(used, kept)
        for i in closed - set(used):
            why.setdefault(i, "merged into a kept token")
        kept |= closed
    else:
        for i in order:
            if len(kept) >= vocab_size:
                break
            new = tree.closure([i], kept)
            if new and len(kept) + len(new) <= vocab_size:
                kept |= new
                for j in new - {i}:
                    why.setdefault(j, "merged into a kept token")
    return np.array(sorted(kept), dtype=np.int64), {i: r for i, r in why.items() if i in kept}
