"""The trimmed tokenizer: tokenizer.json with only the kept tokens, renumbered 0..n-1 in their old order,
and the special-token ids of the config files remapped.

BPE keeps the merges whose two parts and result are kept (a derivation that only makes kept tokens
only uses those merges, so it does not change); WordPiece keeps its vocabulary's kept entries (a
longest match among kept pieces is still the longest); Unigram keeps its kept (piece, score) pairs
(the best path over kept pieces is still the best path). The normalizer, pre-tokenizer and decoder
are left as they are.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ..errors import InputError
from ..tokenizer.encoding import merge_parts


@dataclass
class TokenizerVocab:
    """A read-only view of a parsed tokenizer.json: its model type and every id's piece."""

    data: dict

    @property
    def kind(self) -> str:
        """The model type; files of tokenizers < 0.10 (t5-small's) have none: told by their keys."""
        model = self.model
        if model.get("type"):
            return model["type"]
        if "merges" in model:
            return "BPE"
        if isinstance(model.get("vocab"), list):
            return "Unigram"
        return "WordPiece" if "max_input_chars_per_word" in model else "unknown"

    @property
    def model(self) -> dict:
        return self.data["model"]

    @cached_property
    def pieces(self) -> dict[int, str]:
        """id -> piece, for the model's vocabulary and the added tokens."""
        vocab = self.model.get("vocab")
        if self.kind == "Unigram":
            out = {i: p[0] for i, p in enumerate(vocab)}
        elif isinstance(vocab, dict):
            out = {i: p for p, i in vocab.items()}
        else:
            raise InputError(f"a tokenizer.json model of type {self.kind} cannot be trimmed; BPE, WordPiece and "
                             "Unigram can")
        for t in self.data.get("added_tokens") or []:
            out.setdefault(t["id"], t["content"])
        return out

    @cached_property
    def ids(self) -> dict[str, int]:
        """piece -> id of the model's vocabulary (an added token's content where the model lacks it)."""
        out = {p: i for i, p in self.pieces.items()}
        if self.kind == "Unigram":  # a piece listed twice: the model uses the first
            for i, (p, _) in reversed(list(enumerate(self.model["vocab"]))):
                out[p] = i
        elif isinstance(self.model.get("vocab"), dict):
            out.update(self.model["vocab"])
        return out

    @property
    def size(self) -> int:
        return max(self.pieces) + 1

    @property
    def merges(self) -> list[tuple[str, str]]:
        return [merge_parts(m) for m in self.model.get("merges") or []]

    def merged(self, a: str, b: str) -> str:
        """The piece merge (a, b) makes (BPE: the continuing-subword prefix of `b` is dropped)."""
        prefix = self.model.get("continuing_subword_prefix") or ""
        return a + (b[len(prefix):] if prefix and b.startswith(prefix) else b)


def trimmed(data: dict, kept: list[int]) -> dict:
    """tokenizer.json `data` with only the ids `kept` (sorted old ids), renumbered 0..n-1 in that order.

    Raises:
        InputError: a model type that cannot be trimmed.
    """
    vocab = TokenizerVocab(data)
    new_of = {old: new for new, old in enumerate(kept)}
    out = dict(data)
    model = dict(vocab.model)
    if vocab.kind == "Unigram":
        entries = model["vocab"]
        model["vocab"] = [entries[i] for i in kept if i < len(entries)]
        if model.get("unk_id") is not None:
            model["unk_id"] = new_of[model["unk_id"]]
    elif vocab.kind in ("BPE", "WordPiece", "WordLevel"):
        model["vocab"] = {p: new_of[i] for p, i in sorted(model["vocab"].items(), key=lambda x: x[1]) if i in new_of}
        if vocab.kind == "BPE":
            keep = model["vocab"]
            model["merges"] = [m for m, (a, b) in zip(model.get("merges") or [], vocab.merges)
                               if a in keep and b in keep and vocab.merged(a, b) in keep]
    else:
        raise InputError(f"a tokenizer.json model of type {vocab.kind} cannot be trimmed; BPE, WordPiece and "
                         "Unigram can")
    out["model"] = model
    out["added_tokens"] = [{**t, "id": new_of[t["id"]]} for t in data.get("added_tokens") or []]
    if data.get("post_processor"):
        out["post_processor"] = _remap_processor(data["post_processor"], new_of)
    return out


def _remap_processor(node, new_of: dict[int, int]):
    """A post-processor with its special tokens' ids remapped (TemplateProcessing, Bert/Roberta, Sequence)."""
    if isinstance(node, list):
        return [_remap_processor(n, new_of) for n in node]
    if not isinstance(node, dict):
        return node
    node = dict(node)
    kind = node.get("type")
    if kind == "TemplateProcessing":
        node["special_tokens"] = {k: {**v, "ids": [new_of[i] for i in v.get("ids", [])]}
                                  for k, v in (node.get("special_tokens") or {}).items()}
    elif kind in ("BertProcessing", "RobertaProcessing"):
        for key in ("sep", "cls"):
            if isinstance(node.get(key), list) and len(node[key]) == 2:
                node[key] = [node[key][0], new_of[node[key][1]]]
    elif kind == "Sequence":
        node["processors"] = _remap_processor(node.get("processors") or [], new_of)
    return node


def processor_ids(node) -> set[int]:
    """The ids a post-processor inserts (they must stay)."""
    if isinstance(node, list):
        return set().union(*(processor_ids(n) for n in node)) if node else set()
    if not isinstance(node, dict):
        return set()
    kind = node.get("type")
    if kind == "TemplateProcessing":
        return {i for v in (node.get("special_tokens") or {}).values() for i in v.get("ids", [])}
    if kind in ("BertProcessing", "RobertaProcessing"):
        return {node[k][1] for k in ("sep", "cls") if isinstance(node.get(k), list) and len(node[k]) == 2}
    if kind == "Sequence":
        return processor_ids(node.get("processors") or [])
    return set()


# Config keys that hold token ids besides the *_token_id(s) keys (generation_config.json).
_ID_LISTS = ("suppress_tokens", "begin_suppress_tokens")


def _is_id_key(key: str) -> bool:
    return key.endswith(("_token_id", "_token_ids")) or key in _ID_LISTS


def config_ids(config: dict) -> set[int]:
    """Every token id a config (config.json, generation_config.json; nested configs too) names.

        >>> sorted(config_ids({"eos_token_id": [1, 106], "text_config": {"pad_token_id": 0}, "vocab_size": 262144}))
        [0, 1, 106]
    """
    found: set[int] = set()
    for key, value in config.items():
        if isinstance(value, dict):
            found |= config_ids(value)
        elif _is_id_key(key):
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                found.add(value)
            elif isinstance(value, list):
                found |= {v for v in value if isinstance(v, int) and not isinstance(v, bool) and v >= 0}
    return found


def remap_config(config: dict, new_of: dict[int, int]) -> dict:
    """`config` with every token id it names remapped (ids must be kept: see `config_ids`)."""
    out = {}
    for key, value in config.items():
        if isinstance(value, dict):
            out[key] = remap_config(value, new_of)
        elif _is_id_key(key) and isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            out[key] = new_of[value]
        elif _is_id_key(key) and isinstance(value, list):
            out[key] = [new_of[v] if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else v for v in value]
        else:
            out[key] = value
    return out


def remap_tokenizer_config(cfg: dict, new_of: dict[int, int]) -> dict:
    """tokenizer_config.json with `added_tokens_decoder`'s keys (ids) remapped."""
    out = dict(cfg)
    dec = cfg.get("added_tokens_decoder")
    if isinstance(dec, dict):
        out["added_tokens_decoder"] = {str(new_of[int(k)]): v for k, v in dec.items() if int(k) in new_of}
    return out
