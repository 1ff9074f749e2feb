"""The output's files besides the shards: index, config, tokenizer and the input's other files; and the
re-read of the written checkpoint (tensors, shapes, old rows, index) before it may be published.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

from ..checkpoint.filenames import (CONFIG_NAME, INDEX_NAME, REPORT_NAME, SLOW_TOKENIZER_FILES, TOKENIZER_CONFIG,
                                    TOKENIZER_FILE)
from ..checkpoint.reader import Checkpoint, read_header, rows_kept
from ..checkpoint.writer import GrownTensor, write_json
from ..errors import VocabSurgeonError
from .target import Plan

def write_metadata_files(plan: Plan, stage: Path, grown: dict[str, GrownTensor]) -> None:
    ckpt = plan.ckpt
    if ckpt.index is not None:
        index = json.loads(json.dumps(ckpt.index))
        total = 0
        for t in ckpt.tensors.values():
            g = grown.get(t.name)
            total += t.nbytes + (len(g.tail) if g else 0)
        meta = index.setdefault("metadata", {})
        meta["total_size"] = total
        if plan.options.untie:  # the new output matrix lives beside the embedding
            index["weight_map"][plan.layout.lm_head] = ckpt.tensors[plan.layout.lm_head].file
        if isinstance(meta.get("total_parameters"), int):  # transformers writes num_parameters() here
            meta["total_parameters"] += _parameters_added(plan, grown)
        write_json(stage / INDEX_NAME, index)
    config = json.loads(json.dumps(ckpt.config))
    for path in plan.layout.vocab_keys:
        node = config
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = plan.rows_after
    if plan.options.untie:
        config["tie_word_embeddings"] = False
        if isinstance(config.get("text_config"), dict) and "tie_word_embeddings" in config["text_config"]:
            config["text_config"]["tie_word_embeddings"] = False
    if plan.architectures:  # the input has none (the plan's note says so)
        config["architectures"] = plan.architectures
    write_json(stage / CONFIG_NAME, config)
    if plan.tokens.new:
        plan.editor.write(plan.tokens, stage)


def _parameters_added(plan: Plan, grown: dict[str, GrownTensor]) -> int:
    """Parameters the grown tensors add, counted as `model.num_parameters()` counts them: a tied
    matrix and its aliases (T5's encoder/decoder.embed_tokens) are one parameter."""
    added = 0
    for name, g in grown.items():
        if name not in plan.layout.aliases:
            old = plan.ckpt.tensors[name].shape
            added += math.prod(g.shape) - math.prod(old)
    if plan.options.untie:  # the output matrix becomes a parameter of its own, old rows included
        added += math.prod(plan.ckpt.tensors[plan.layout.lm_head].shape)
    return added


# Files that are rewritten above, or that must never be carried over.
_HANDLED = {INDEX_NAME, CONFIG_NAME, TOKENIZER_FILE, TOKENIZER_CONFIG, *SLOW_TOKENIZER_FILES}
_OWN = {REPORT_NAME}  # an earlier output's report describes other weights: the engine writes this one's


def copy_other_files(plan: Plan, stage: Path) -> None:
    src = plan.ckpt.path
    for p in sorted(src.rglob("*")):
        rel = p.relative_to(src)
        if any(part.startswith(".") for part in rel.parts) or rel.parts[0] in ("__pycache__",):
            continue  # .git, .cache, editor files: not part of the checkpoint
        if len(rel.parts) == 1 and (p.name in plan.ckpt.shards or p.name in plan.dropped or p.name in _OWN
                                    or (p.name in _HANDLED and (stage / p.name).exists())):
            continue
        dst = stage / rel
        if p.is_dir():
            dst.mkdir(exist_ok=True)
        elif p.is_file():  # follows symlinks (Hub cache snapshots are links into blobs)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, dst)


def verify_rows(plan: Plan, stage: Path, f: str, grown: dict[str, GrownTensor]) -> None:
    """Re-read rewritten shard `f`'s header and check that each of its vocabulary tensors (`grown`)
    has its new shape and its old rows byte for byte (done while other shards may still be copying)."""
    ckpt = plan.ckpt
    written = {t.name: t for t in read_header(stage / f).tensors}
    for name, g in grown.items():
        t, o = ckpt.tensors[name], written.get(name)
        if o is None or o.shape != g.shape or o.dtype != t.dtype:
            got = f"{o.dtype}{list(o.shape)}" if o else "nothing"
            raise VocabSurgeonError(f"internal: tensor '{name}' written as {got}, expected {t.dtype}{list(g.shape)}")
        if not rows_kept(ckpt.path / t.file, t, stage / f, o.start, except_rows=g.patches):
            raise VocabSurgeonError(f"internal: old rows of '{name}' changed while writing; nothing was published")


def verify_checkpoint(plan: Plan, stage: Path, grown: dict[str, GrownTensor]) -> None:
    """Re-open the whole written checkpoint and check its tensors, shapes and index before calling
    the job done (old rows: `verify_rows`; the tokenizer: `verify_tokenizer`)."""
    ckpt = plan.ckpt
    out = Checkpoint.open(stage)
    if set(out.tensors) != set(ckpt.tensors):
        changed = sorted(set(out.tensors) ^ set(ckpt.tensors))
        raise VocabSurgeonError(f"internal: written checkpoint has tensors {changed} changed; nothing was published")
    for name, t in ckpt.tensors.items():
        o = out.tensors[name]
        want_shape = grown[name].shape if name in grown else t.shape
        if o.shape != want_shape or o.dtype != t.dtype:
            raise VocabSurgeonError(f"internal: tensor '{name}' written as {o.dtype}{list(o.shape)}, "
                                    f"expected {t.dtype}{list(want_shape)}")
    if out.index is not None and out.index["metadata"]["total_size"] != out.total_size:
        raise VocabSurgeonError("internal: index total_size does not match the shards; nothing was published")
    out.close()
