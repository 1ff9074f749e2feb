"""Writing: the plan applied to tokenizer.json (`edited`), to tokenizer_config.json (`edited_config`) and to the
SentencePiece .model (`slow_model`), built in memory (`tokenizer_of`) or written to a directory (`write`).

Pure functions over an opened tokenizer (`opened.OpenedTokenizer`), which they leave as it was.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import Tokenizer

from . import sentencepiece_model
from .building import tokenizer_from_data
from ..checkpoint.filenames import TOKENIZER_CONFIG, TOKENIZER_FILE
from ..checkpoint.writer import write_json
from ..errors import InputError, VocabSurgeonError
from .drafting import GAP_PIECE, TokenizerPlan
from .encoding import unpadded
from .families import SentencePieceBPE
from .loading import FILE_AS_WRITTEN_CLASSES, input_class_defaults

if TYPE_CHECKING:
    from .opened import OpenedTokenizer

logger = logging.getLogger(__name__)


def append_merges(model: dict, pairs: list[tuple[str, str]]) -> None:
    """Append `pairs` to the BPE `model`'s merges (a new list), last: the lowest priority, in the file's
    spelling ("a b" in older files, ["a", "b"] otherwise)."""
    merges = model["merges"] = list(model.get("merges") or [])
    as_text = bool(merges) and isinstance(merges[0], str)
    merges.extend(" ".join(pair) if as_text else list(pair) for pair in pairs)


def edited(opened: OpenedTokenizer, plan: TokenizerPlan) -> dict:
    """The tokenizer.json object with the plan applied (opened.data is left as it was)."""
    # Copy only what changes (the top level, the model, its vocab, the added tokens): a deep copy
    # of a 128k-entry tokenizer is slow; merges (copied only when one is appended) and the
    # rest are shared, never modified.
    data = dict(opened.data)
    model = data["model"] = dict(data["model"])
    if isinstance(model.get("vocab"), dict):
        model["vocab"] = dict(model["vocab"])
    elif isinstance(model.get("vocab"), list):  # Unigram pairs are only appended to
        model["vocab"] = list(model["vocab"])
    if data.get("added_tokens") is not None:
        data["added_tokens"] = list(data["added_tokens"])
    vocab = model.get("vocab")
    if plan.set_ignore_merges:
        model["ignore_merges"] = True
    merged = sorted((t for t in plan.new if t.mechanism == "merge"), key=lambda t: t.id)
    if merged:  # appended last: the lowest priority (see families/byte_level_bpe.py)
        pairs = [opened.family.merge_pair(t.form) for t in merged]
        for t, pair in zip(merged, pairs):
            if pair is None or "".join(pair) != t.piece:
                raise VocabSurgeonError(f"internal: token {t.text!r} has no merge pair; nothing was written")
        append_merges(model, pairs)
    # Existing added tokens missing from the model vocabulary get their id there too: on load the
    # library numbers such tokens after the model's entries, which now include the new ones.
    if plan.freed:  # reserved placeholders given up for new tokens (--reuse-reserved)
        data["added_tokens"] = [t for t in data.get("added_tokens") or [] if t["id"] not in plan.freed]
        if isinstance(vocab, dict):
            for content in plan.freed.values():
                vocab.pop(content, None)
    by_id = {t["id"]: t["content"] for t in data.get("added_tokens") or []}
    if isinstance(vocab, list):  # Unigram: the list index is the id
        if plan.gap:
            low = min((s for _, s in vocab), default=0.0) - 10.0
            vocab.extend([by_id[i], 0.0] if i in by_id else [GAP_PIECE.format(i), low] for i in range(*plan.gap))
        for t in sorted(plan.new, key=lambda t: t.id):
            if t.id != len(vocab):
                raise VocabSurgeonError(f"internal: Unigram id {t.id} is not the next index {len(vocab)}")
            vocab.append([t.piece, t.score if t.score is not None else 0.0])
    elif isinstance(vocab, dict):
        if plan.new:
            for i, content in by_id.items():
                vocab.setdefault(content, i)
        for t in plan.new:
            vocab[t.piece] = t.id
    else:
        raise InputError(f"{opened.dir / TOKENIZER_FILE}: the model has no vocabulary; re-download it")
    if opened.family is not None:
        data["decoder"] = opened.family.decoder(plan.new, data.get("decoder"))
    added = data.setdefault("added_tokens", [])
    for t in plan.new:
        if t.mechanism in ("added", "special"):
            added.append({
                "id": t.id, "content": t.piece, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": t.normalized, "special": t.mechanism == "special",
            })
    return data


def tokenizer_of(opened: OpenedTokenizer, data: dict) -> Tokenizer:
    """The tokenizer of `data`, an edit of `opened.data` (`edited`), built in memory without a JSON round trip of
    the vocabulary (issue 38)."""
    return unpadded(tokenizer_from_data(data, opened.built))


def edited_config(opened: OpenedTokenizer, plan: TokenizerPlan) -> dict | None:
    """tokenizer_config.json with new added tokens registered where it lists them.

    When new entries rely on tokenizer.json model options (ignore_merges), the class is set to
    PreTrainedTokenizerFast: transformers 5 rebuilds model-specific classes (GPT2Tokenizer,
    Qwen2Tokenizer, ...) from vocab + merges with hard-coded options, which would drop ours
    and split the new words again. PreTrainedTokenizerFast loads tokenizer.json as written.
    """
    # a converted tokenizer.model with no tokenizer_config.json (Mistral's layout): the BOS, EOS, UNK and special
    # tokens come from the converting class only, so they are written, with tokenizer.json loaded as written
    needs_file_as_written = plan.file_as_written or (opened.converted_from is not None and opened.config is None)
    if opened.config is None and not needs_file_as_written and not plan.freed:
        return None
    cfg = json.loads(json.dumps(opened.config or {}))
    if needs_file_as_written and cfg.get("tokenizer_class") not in FILE_AS_WRITTEN_CLASSES:
        cfg.update(input_class_defaults(opened))
        cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    decoder = cfg.get("added_tokens_decoder")
    for i, content in plan.freed.items():
        if isinstance(decoder, dict):
            decoder.pop(str(i), None)
        for key in ("extra_special_tokens", "additional_special_tokens"):
            if isinstance(cfg.get(key), list) and content in cfg[key]:
                cfg[key].remove(content)
    for t in plan.new:
        if t.mechanism in ("vocab", "merge"):  # model entries: listed as added tokens, converters would take them so
            continue
        if isinstance(decoder, dict):
            decoder[str(t.id)] = {
                "content": t.piece, "lstrip": False, "normalized": t.normalized, "rstrip": False,
                "single_word": False, "special": t.mechanism == "special",
            }
        if t.mechanism == "special":
            for key in ("extra_special_tokens", "additional_special_tokens"):
                if isinstance(cfg.get(key), list):
                    cfg[key].append(t.piece)
                    break
    return cfg


def slow_model(opened: OpenedTokenizer, plan: TokenizerPlan) -> tuple[str, bytes] | None:
    """The input's SentencePiece .model (tokenizer.model) with each new token appended as a piece at its id
    (a merge: a normal piece; an added token: user-defined, matched whole; a special token: control), for a SentencePiece
    BPE tokenizer whose new ids follow the .model's last piece (sentencepiece_model says why it is kept).
    None where the file is absent or cannot hold the plan (reserved ids reused, another family, ids
    elsewhere): the output then leaves it out, as a file without the new tokens."""
    name = opened.slow_file
    if not plan.new or name is None or not name.endswith(".model") or opened.family_name != SentencePieceBPE.name \
            or plan.freed or plan.gap or any(t.mechanism not in ("added", "special", "merge") for t in plan.new):
        return None
    data = (opened.dir / name).read_bytes()
    try:
        count = sentencepiece_model.piece_count(data)
    except ValueError as e:
        logger.info("%s: not read as a SentencePiece model (%s); left out of the output", opened.dir / name, e)
        return None
    new = sorted(plan.new, key=lambda t: t.id)
    if [t.id for t in new] != list(range(count, count + len(new))):
        return None
    kinds = {"special": sentencepiece_model.CONTROL, "merge": sentencepiece_model.NORMAL}
    pieces = [(opened.normalize(t.piece) if t.normalized else t.piece.replace(" ", "▁"),
               kinds.get(t.mechanism, sentencepiece_model.USER_DEFINED)) for t in new]
    return name, sentencepiece_model.with_pieces(data, pieces)


def write(opened: OpenedTokenizer, plan: TokenizerPlan, out_dir: Path, data: dict) -> list[str]:
    """Write the edited tokenizer files into out_dir, `data` as tokenizer.json (`edited`, or extend's edit);
    returns the file names written."""
    write_json(out_dir / TOKENIZER_FILE, data)
    written = [TOKENIZER_FILE]
    if plan.slow_model is not None:
        name, data = plan.slow_model
        (out_dir / name).write_bytes(data)
        written.append(name)
    cfg = edited_config(opened, plan)
    if cfg is not None:
        write_json(out_dir / TOKENIZER_CONFIG, cfg)
        written.append(TOKENIZER_CONFIG)
    logger.info("wrote %s", ", ".join(written))
    return written

