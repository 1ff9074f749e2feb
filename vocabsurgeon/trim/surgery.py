"""`trim`: plan which tokens a checkpoint keeps for a corpus, then write the trimmed checkpoint.

Over 500 lines: trim's plan and its gather-write share one record (TrimPlan); its publication is the engine's.

The plan reads headers, configs and the tokenizer and counts the corpus (`count`, `keep`). The write
streams: shards without vocabulary tensors are copied (reflink, in-kernel copy, or --link); a shard
with them gets a new header, its other tensors' bytes copied in the kernel, and the kept rows of each
vocabulary tensor gathered as raw bytes, a bounded block at a time. Then the trimmed tokenizer, the
remapped configs, `vocabsurgeon_idmap.json` (new id -> old id) and a model card; everything is re-read
and checked in a staging directory that is renamed into place only then.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from .._version import __version__
from ..engine.target import MAX_PAD_MULTIPLE, architectures_for
from ..checkpoint.architectures import VocabLayout, detect, text_config
from ..checkpoint.filenames import (CARD_NAME, CONFIG_NAME, GENERATION_CONFIG_NAME, INDEX_NAME, STALE_SLOW_FILES,
                                    TOKENIZER_CONFIG, TOKENIZER_FILE)
from ..checkpoint.hub import Source, resolve_checkpoint
from ..checkpoint.reader import Checkpoint, TensorInfo, read_json, same_bytes
from ..checkpoint.staging import Stage
from ..checkpoint.writer import (Syncer, copy_file, copy_old_bytes, encode_rows, json_text, layout_shard,
                                 write_json)
from ..engine.finish import push_output
from ..engine.job import write_errors
from ..engine.record import record
from ..validation.report import Report
from ..errors import InputError, VocabSurgeonError
from ..corpus import counting_tokenizer
from ..tokenizer.chats import CHATS, chat_template
from ..tokenizer.editor import require_tokenizer_files
from ..tokenizer.opened import convert_slow_tokenizer
from ..tokenizer.encoding import encode_ids
from ..tokenizer.families import detect_family
from .count import TokenCounts, count_tokens
from .keep import MergeTree, choose, must_keep
from .tokenizer import TokenizerVocab, remap_config, remap_tokenizer_config, trimmed

logger = logging.getLogger(__name__)

TRIM_PENDING = "trim"  # the report's `pending`: trim runs no model validation (`record.pushable`)
IDMAP_NAME = "vocabsurgeon_idmap.json"  # {"old_ids": [old id of new id 0, 1, ...]}
GATHER_BYTES = 16 << 20  # rows read per block when gathering: memory O(block), not O(vocab x hidden)


@dataclass
class TrimOptions:
    """Options of `trim`; the CLI flags map one to one. Exactly one of vocab_size and min_count."""

    vocab_size: int | None = None
    min_count: int | None = None
    keep: list[str] = field(default_factory=list)  # pieces as stored (Ġthe, ▁the, ##ing), or text whose tokens stay
    pad_to_multiple_of: int | None = None
    link: bool = False
    fsync: bool = True
    force: bool = False
    embedding_key: str | None = None
    lm_head_key: str | None = None

    def check(self) -> TrimOptions:
        """Raises InputError naming the flag, before any work."""
        if (self.vocab_size is None) == (self.min_count is None):
            raise InputError("pass one of --vocab-size N (keep the N most used tokens) or --min-count K (keep the "
                             "tokens used at least K times)")
        if self.vocab_size is not None and self.vocab_size < 1:
            raise InputError(f"--vocab-size {self.vocab_size}: pass a positive number of tokens")
        if self.min_count is not None and self.min_count < 1:
            raise InputError(f"--min-count {self.min_count}: pass a positive count")
        if self.pad_to_multiple_of is not None and not 1 <= self.pad_to_multiple_of <= MAX_PAD_MULTIPLE:
            raise InputError(f"--pad-to-multiple-of {self.pad_to_multiple_of}: pass a positive integer up to "
                             f"{MAX_PAD_MULTIPLE} (64 or 128 suit tensor cores)")
        return self


@dataclass
class TrimPlan:
    """What `trim` will do; `to_dict()` is the --dry-run / --json view."""

    source: Source
    ckpt: Checkpoint
    layout: VocabLayout
    options: TrimOptions
    data: dict  # the original tokenizer.json
    counts: TokenCounts
    kept: np.ndarray  # sorted old ids; new id i is old id kept[i]
    why: dict[int, str]  # kept ids that stay for a reason other than their count
    rows_after: int

    @property
    def src(self) -> Path:
        return Path(self.source.path)

    @cached_property
    def vocab(self) -> TokenizerVocab:
        return TokenizerVocab(self.data)

    @property
    def vocab_files(self) -> list[str]:
        files = {self.ckpt.tensors[n].file for n in self.layout.all_tensors}
        return [f for f in self.ckpt.shards if f in files]

    @property
    def bytes_saved(self) -> int:
        return sum(self.ckpt.tensors[n].row_bytes * (self.layout.rows - self.rows_after) for n in self.layout.all_tensors)

    def to_dict(self) -> dict:
        vocab, counts = self.vocab, self.counts
        removed = np.setdiff1d(np.array(sorted(vocab.pieces)), self.kept)
        top_removed = removed[np.argsort(-counts.counts[removed], kind="stable")][:20]
        return {
            "input": str(self.src),
            "base": self.source.to_dict(),
            "architecture": self.layout.architecture,
            "model_type": self.layout.model_type,
            "tied": self.layout.tied,
            "tokenizer_family": detect_family(self.data),
            "tokens_before": len(vocab.pieces),
            "tokens_kept": len(self.kept),
            "tokens_removed": len(removed),
            "rows_before": self.layout.rows,
            "rows_after": self.rows_after,
            "padding_rows": self.rows_after - len(self.kept),
            "kept_for": dict(Counter(self.why.values()).most_common()),
            "corpus": {"path": str(counts.path), "bytes": counts.bytes, "tokens": counts.tokens,
                       "tokens_used": int((counts.counts > 0).sum()), "coverage": round(counts.coverage(self.kept), 6)},
            "most_used_removed": [{"token": vocab.pieces[int(i)], "id": int(i), "count": int(counts.counts[i])}
                                  for i in top_removed if counts.counts[i] > 0],
            "tensors": {n: {"rows_before": self.layout.rows, "rows_after": self.rows_after}
                        for n in self.layout.all_tensors},
            "bytes_saved": self.bytes_saved,
            "files_rewritten": self.vocab_files,
            "files_copied": [f for f in self.ckpt.shards if f not in self.vocab_files],
        }

    def describe(self) -> str:
        d = self.to_dict()
        c = d["corpus"]
        lines = [
            f"{self.layout.kind} checkpoint ({'tied' if d['tied'] else 'untied'} embeddings), "
            f"{d['tokenizer_family']} tokenizer",
            f"tokens {d['tokens_before']} -> {d['tokens_kept']} ({d['tokens_removed']} removed), "
            f"rows {d['rows_before']} -> {d['rows_after']} ({d['padding_rows']} padding rows)",
            f"corpus: {c['tokens']:,} tokens, {c['tokens_used']:,} distinct; kept tokens cover {c['coverage']:.2%} "
            "of it",
        ]
        lines += [f"  must stay: {n} {r}" for r, n in d["kept_for"].items()]
        if d["most_used_removed"]:
            lines.append("most used removed: " + ", ".join(f"{r['token']!r} ({r['count']})"
                                                         for r in d["most_used_removed"][:10]))
        lines.append(f"saves {d['bytes_saved']:,} bytes; rewrite {len(d['files_rewritten'])} shard(s), "
                     f"copy {len(d['files_copied'])}")
        return "\n".join(lines)


@dataclass
class TrimResult:
    """What `trim` did: the plan's view plus timings and bytes; `to_dict()` is the --json output."""

    out: Path
    plan: TrimPlan
    seconds: float
    bytes_written: int
    copy_methods: dict[str, str]

    def to_dict(self) -> dict:
        return {**self.plan.to_dict(), "output": str(self.out), "seconds": round(self.seconds, 3),
                "bytes_written": self.bytes_written, "copy_methods": self.copy_methods,
                "tool": f"vocabsurgeon {__version__}"}


def read_keep_file(path: str | os.PathLike) -> list[str]:
    """--keep's lines (a piece as stored, or text whose tokens stay); blank lines and `#` comments skipped."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"{path}: cannot read the keep file ({e.strerror}); pass a UTF-8 file, one token a line") from None
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: invalid UTF-8 at byte {e.start}; save the keep file as UTF-8") from None
    return [line for line in text.split("\n") if line.strip() and not line.startswith("#")]


def _tokenizer_data(directory: Path) -> dict:
    if (directory / TOKENIZER_FILE).is_file():
        return read_json(directory / TOKENIZER_FILE)
    return convert_slow_tokenizer(directory)[0]


def _template_text(path: Path) -> list[str]:
    """The text the chat template itself writes: the sample conversations (`chats.CHATS`) rendered by
    transformers' jinja renderer (without loading a tokenizer: no torch), whole and up to the generation
    prompt, cut at the messages' contents (those are the user's text, not the template's)."""
    template = chat_template(path)
    if template is None:
        return []
    from transformers.utils.chat_template_utils import render_jinja_template

    cfg = read_json(path / TOKENIZER_CONFIG) if (path / TOKENIZER_CONFIG).is_file() else {}
    specials = {k: v.get("content") if isinstance(v, dict) else v for k, v in cfg.items()
                if k.endswith("_token") and isinstance(v, (str, dict))}
    texts = []
    for turns in CHATS:
        for prompt in (False, True):
            use = turns[:max(i for i, (r, _) in enumerate(turns) if r == "user") + 1] if prompt else turns
            try:
                rendered, _ = render_jinja_template([[{"role": r, "content": c} for r, c in use]],
                                                    chat_template=template, add_generation_prompt=prompt, **specials)
            except Exception as e:  # noqa: BLE001 (a template may refuse a role, e.g. no system turn)
                logger.debug("the chat template refuses a sample conversation (%s)", e)
                continue
            texts += rendered
    contents = sorted({c for turns in CHATS for _, c in turns}, key=len, reverse=True)
    for c in contents:
        texts = [p for text in texts for p in text.split(c)]
    return [p for p in dict.fromkeys(texts) if p]


def plan_trim(src: str | os.PathLike, corpus: str | os.PathLike, options: TrimOptions, *, revision: str | None = None,
              token: str | None = None, progress: Callable[[int], None] | None = None) -> TrimPlan:
    """Open the checkpoint, count `corpus` with its tokenizer and decide which tokens stay; writes nothing.

    Raises:
        InputError: a checkpoint, tokenizer or corpus that cannot be used, or a --vocab-size below what
            must stay.
    """
    options.check()
    source = resolve_checkpoint(src, revision=revision, token=token)
    path = Path(source.path)
    require_tokenizer_files(path)  # as `add`: a checkpoint without one is refused before any work
    ckpt = Checkpoint.open(path)
    layout = detect(ckpt, options.embedding_key, options.lm_head_key)
    if layout.extra:
        raise InputError(f"{path}: '{layout.extra[0]}' is a per-layer vocabulary table; trim does not support "
                         f"{layout.kind} checkpoints yet")
    cfg_vocab = text_config(ckpt.config).get("vocab_size")
    if isinstance(cfg_vocab, int) and cfg_vocab != layout.rows:
        raise InputError(f"{path / CONFIG_NAME}: vocab_size is {cfg_vocab}, but '{layout.embedding}' has {layout.rows} "
                         "rows; config and weights disagree, refusing to guess")
    data = _tokenizer_data(path)
    vocab = TokenizerVocab(data)
    if vocab.size > layout.rows:
        raise InputError(f"{path / TOKENIZER_FILE}: the tokenizer has ids up to {vocab.size - 1}, but "
                         f"'{layout.embedding}' has only {layout.rows} rows; tokenizer and weights disagree")
    if options.vocab_size is not None and options.vocab_size >= len(vocab.pieces):
        raise InputError(f"--vocab-size {options.vocab_size}: the tokenizer has only {len(vocab.pieces)} tokens; "
                         "pass a smaller size")
    tree = MergeTree(vocab)  # a tokenizer whose merges cannot be closed is refused before the corpus is read
    tok = counting_tokenizer(path)
    counts = count_tokens(tok, corpus, vocab.size, progress=progress)
    configs = [ckpt.config] + ([read_json(path / GENERATION_CONFIG_NAME)]
                               if (path / GENERATION_CONFIG_NAME).is_file() else [])
    chat_ids = {i for ids in encode_ids(tok, _template_text(path)) for i in ids}
    keep_ids = set()
    for line in options.keep:
        if line in vocab.ids:
            keep_ids.add(vocab.ids[line])
        else:
            keep_ids.update(encode_ids(tok, [line])[0])
    must = must_keep(vocab, configs=configs, chat_ids=chat_ids, keep_ids=keep_ids)
    kept, why = choose(counts.counts, must, tree, vocab_size=options.vocab_size, min_count=options.min_count)
    rows_after = len(kept)
    if options.pad_to_multiple_of:
        rows_after = math.ceil(rows_after / options.pad_to_multiple_of) * options.pad_to_multiple_of
    return TrimPlan(source, ckpt, layout, options, data, counts, kept, why, rows_after)


def trim_vocabulary(src: str | os.PathLike, out: str | os.PathLike, corpus: str | os.PathLike, *,
                    progress: Callable[[int], None] | None = None, revision: str | None = None,
                    token: str | None = None, **options) -> TrimResult:
    """Cut the vocabulary of the checkpoint at `src` to the tokens `corpus` uses, and write it to `out`.

    Args:
        src: a checkpoint directory, or a Hub repo id (`org/name`) pulled into the Hub cache.
        out: the output directory; created atomically, must not exist or be empty (or force=True).
        corpus: a UTF-8 text file of the language or domain (streamed).
        progress: called with the bytes written, as they are written.
        **options: fields of `TrimOptions` (vocab_size or min_count, keep, pad_to_multiple_of, link,
            fsync, force, embedding_key, lm_head_key).

    Returns:
        TrimResult; `result.to_dict()` is what `vocabsurgeon trim --json` prints.

    Example:
        >>> from vocabsurgeon import trim_vocabulary
        >>> r = trim_vocabulary("fixtures/gpt2-tiny", "/tmp/out", "en.txt", vocab_size=400)  # doctest: +SKIP
        >>> r.to_dict()["tokens_kept"]  # doctest: +SKIP
        400
    """
    plan = plan_trim(src, corpus, TrimOptions(**options), revision=revision, token=token)
    return write_trim(plan, out, progress)


def write_trim(plan: TrimPlan, out: str | os.PathLike, progress: Callable[[int], None] | None = None) -> TrimResult:
    """Write `plan` to `out` (atomically: a staging directory renamed into place once verified).

    Raises:
        InputError: an output path that cannot be used.
        VocabSurgeonError: the written checkpoint failed its own verification; nothing was published.
    """
    t0 = time.perf_counter()
    out = Path(out)
    progress = progress or (lambda n: None)
    ckpt, opts = plan.ckpt, plan.options
    methods: dict[str, str] = {}
    with write_errors(out):
        stage = Stage.open(plan.src, out, opts.force)
        with stage:
            syncer = Syncer(enabled=opts.fsync)
            try:
                for f in ckpt.shards:
                    if f in plan.vocab_files:
                        _rewrite_shard(plan, f, stage.path / f, progress)
                        methods[f] = "rewrite"
                    else:
                        methods[f] = copy_file(ckpt.path / f, stage.path / f, link=opts.link, progress=progress)
                    syncer.submit(stage.path / f)
                _write_metadata(plan, stage.path)
                _verify(plan, stage.path)
                for p in sorted(stage.path.rglob("*"), reverse=True):
                    if p not in syncer.submitted:
                        syncer.submit(p)
                syncer.submit(stage.path)
                syncer.wait()
            finally:
                syncer.close()
            written = sum((stage.path / f).stat().st_size for f in ckpt.shards)
            result = TrimResult(out, plan, time.perf_counter() - t0, written, methods)
            record(stage.path, result.to_dict(), Report.not_run(result.to_dict(), TRIM_PENDING), card=False,
                   fsync=opts.fsync)
            stage.publish()
    logger.info("wrote %s in %.2f s", out, result.seconds)
    return result


def push_trimmed(result: TrimResult, options) -> object:
    """Push the written output of `result` to the Hub as one commit (`options`: `pipeline.PushOptions`).

    Raises:
        PushError: the push failed; the message says the output is written and how to retry the push alone.
    """
    base = Path(result.plan.source.name).name if not result.plan.source.repo_id else result.plan.source.repo_id
    message = options.message or (f"Trim the vocabulary of {base} to {len(result.plan.kept)} tokens with "
                                   f"vocabsurgeon {__version__}")
    return push_output(result.out, options, message)


def _rewrite_shard(plan: TrimPlan, f: str, dst: Path, progress: Callable[[int], None]) -> None:
    """Shard `f` with its vocabulary tensors cut to the kept rows (then the padding rows); the other
    tensors' bytes are copied in the kernel."""
    ckpt, header = plan.ckpt, plan.ckpt.shards[f]
    mine = tuple(n for n in plan.layout.all_tensors if ckpt.tensors[n].file == f)
    shapes = {n: (plan.rows_after, *ckpt.tensors[n].shape[1:]) for n in mine}
    layout = layout_shard(header, shapes, last=mine)
    copy_old_bytes(ckpt.path / f, layout, dst, progress, names=tuple(t.name for t in header.tensors if t.name not in mine))
    fd = os.open(dst, os.O_WRONLY)
    try:
        os.pwrite(fd, layout.head, 0)
        for name in mine:
            pos = _gather(ckpt.path / f, ckpt.tensors[name], plan.kept, fd, layout.starts[name], progress)
            pad = plan.rows_after - len(plan.kept)
            if pad:
                data = encode_rows(np.repeat(_mean_row(ckpt, name, plan.kept)[None], pad, axis=0), ckpt.tensors[name].dtype)
                _pwrite_all(fd, data, pos)
                progress(len(data))
        os.ftruncate(fd, layout.size)
    finally:
        os.close(fd)


def _gather(src: Path, t: TensorInfo, kept: np.ndarray, fd: int, at: int, progress: Callable[[int], None]) -> int:
    """Write the rows `kept` of tensor `t` (raw bytes, unchanged) at offset `at` of `fd`; returns the end offset."""
    rb = t.row_bytes
    step = max(1, GATHER_BYTES // rb)
    with open(src, "rb", buffering=0) as fi:
        for lo in range(0, t.shape[0], step):
            sel = kept[np.searchsorted(kept, lo):np.searchsorted(kept, lo + step)]
            if not len(sel):
                continue
            first, last = int(sel[0]), int(sel[-1]) + 1
            raw = os.pread(fi.fileno(), (last - first) * rb, t.start + first * rb)
            if len(raw) != (last - first) * rb:
                raise VocabSurgeonError(f"{src}: ends inside tensor '{t.name}'; re-download the checkpoint")
            rows = np.frombuffer(raw, dtype=np.uint8).reshape(last - first, rb)[sel - first]
            _pwrite_all(fd, rows.tobytes(), at)
            at += rows.nbytes
            progress(rows.nbytes)
    return at


def _mean_row(ckpt: Checkpoint, name: str, kept: np.ndarray) -> np.ndarray:
    """The mean of the kept rows of `name` (float64): the value of padding rows, as `add --init mean` pads."""
    total, n = None, 0
    step = max(1, GATHER_BYTES // ckpt.tensors[name].row_bytes)
    for lo in range(0, len(kept), step):
        ids = kept[lo:lo + step]
        rows = ckpt.rows_np(name, int(ids[0]), int(ids[-1]) + 1)[ids - ids[0]].astype(np.float64)
        total = rows.sum(0) if total is None else total + rows.sum(0)
        n += len(ids)
    shape = ckpt.tensors[name].shape[1:]
    return (total / n).reshape(shape) if shape else (total / n).reshape(())


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


ADDED_TOKENS_FILE = "added_tokens.json"  # older transformers: {content: id} of the added tokens
_HANDLED = {INDEX_NAME, CONFIG_NAME, GENERATION_CONFIG_NAME, TOKENIZER_FILE, TOKENIZER_CONFIG, CARD_NAME, IDMAP_NAME,
            ADDED_TOKENS_FILE}


def _write_metadata(plan: TrimPlan, stage: Path) -> None:
    """Index, configs with ids remapped, trimmed tokenizer, id map, other files, model card."""
    ckpt, lay = plan.ckpt, plan.layout
    new_of = {int(old): new for new, old in enumerate(plan.kept)}
    if ckpt.index is not None:
        index = json.loads(json.dumps(ckpt.index))
        meta = index.setdefault("metadata", {})
        removed_rows = lay.rows - plan.rows_after
        meta["total_size"] = ckpt.total_size - plan.bytes_saved
        if isinstance(meta.get("total_parameters"), int):  # transformers' num_parameters(): aliases count once
            meta["total_parameters"] -= sum(math.prod(ckpt.tensors[n].shape[1:]) * removed_rows
                                            for n in lay.all_tensors if n not in lay.aliases)
        write_json(stage / INDEX_NAME, index)
    config = remap_config(ckpt.config, new_of)
    architectures = architectures_for(ckpt, lay)
    if architectures:  # as every command's output has them
        config["architectures"] = architectures
    for path in lay.vocab_keys:
        node = config
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = plan.rows_after
    write_json(stage / CONFIG_NAME, config)
    if (ckpt.path / GENERATION_CONFIG_NAME).is_file():
        write_json(stage / GENERATION_CONFIG_NAME, remap_config(read_json(ckpt.path / GENERATION_CONFIG_NAME), new_of))
    if (ckpt.path / TOKENIZER_CONFIG).is_file():
        write_json(stage / TOKENIZER_CONFIG, remap_tokenizer_config(read_json(ckpt.path / TOKENIZER_CONFIG), new_of))
    if (ckpt.path / ADDED_TOKENS_FILE).is_file():
        added = read_json(ckpt.path / ADDED_TOKENS_FILE)
        write_json(stage / ADDED_TOKENS_FILE, {t: new_of[i] for t, i in added.items() if i in new_of})
    (stage / TOKENIZER_FILE).write_text(json_text(trimmed(plan.data, [int(i) for i in plan.kept])) + "\n",
                                        encoding="utf-8")
    write_json(stage / IDMAP_NAME, {"old_ids": [int(i) for i in plan.kept], "rows_before": lay.rows,
                                    "padding_rows": plan.rows_after - len(plan.kept)})
    skip = _HANDLED | set(ckpt.shards) | set(STALE_SLOW_FILES)  # slow-tokenizer files would hold the old vocabulary
    for p in sorted(ckpt.path.rglob("*")):
        rel = p.relative_to(ckpt.path)
        if any(part.startswith(".") for part in rel.parts) or rel.parts[0] == "__pycache__":
            continue
        if len(rel.parts) == 1 and p.name in skip:
            continue
        if p.is_dir():
            (stage / rel).mkdir(exist_ok=True)
        elif p.is_file():
            (stage / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, stage / rel)
    (stage / CARD_NAME).write_text(model_card_text(plan), encoding="utf-8")


def model_card_text(plan: TrimPlan) -> str:
    """The output's README.md: what was trimmed, on what corpus, and what it guarantees."""
    d = plan.to_dict()
    c = d["corpus"]
    front = ["---", *([f"base_model: {plan.source.repo_id}"] if plan.source.repo_id else []),
             "tags:", "- vocabsurgeon", "- vocabulary-trimming", "---"]
    return "\n".join([
        *front,
        "",
        f"# {plan.source.name}, vocabulary trimmed",
        "",
        f"Trimmed with `vocabsurgeon trim` ({__version__}) from {d['tokens_before']:,} to {d['tokens_kept']:,} tokens "
        f"(rows {d['rows_before']:,} -> {d['rows_after']:,}), keeping the tokens that `{Path(c['path']).name}` uses "
        f"most ({c['tokens']:,} tokens, {c['coverage']:.2%} of them kept) and every token that must stay.",
        "",
        f"New id i is old id `old_ids[i]` in [`{IDMAP_NAME}`]({IDMAP_NAME}).",
        "",
        "Text whose tokens were all kept tokenizes to the same tokens (ids through the map); other text still "
        "encodes and decodes as before, into kept pieces. The kept rows are the original rows byte for byte, so "
        "over the kept tokens the model's next-token distribution is the original's renormalized.",
        "",
    ])


def _verify(plan: TrimPlan, stage: Path) -> None:
    """Re-open the written checkpoint: every tensor there with its shape, the kept rows and every other
    tensor byte for byte, the index's total_size, and the tokenizer's pieces through the id map."""
    ckpt = plan.ckpt
    out = Checkpoint.open(stage)
    if set(out.tensors) != set(ckpt.tensors):
        raise VocabSurgeonError("internal: the written checkpoint lost or gained tensors; nothing was published")
    vocab_names = set(plan.layout.all_tensors)
    for name, t in ckpt.tensors.items():
        o = out.tensors[name]
        shape = (plan.rows_after, *t.shape[1:]) if name in vocab_names else t.shape
        if o.shape != shape or o.dtype != t.dtype:
            raise VocabSurgeonError(f"internal: tensor '{name}' written as {o.dtype}{list(o.shape)}, expected "
                                    f"{t.dtype}{list(shape)}; nothing was published")
        if name not in vocab_names and not same_bytes(ckpt.path / t.file, t.start, stage / o.file, o.start, t.nbytes):
            raise VocabSurgeonError(f"internal: tensor '{name}' changed while copying; nothing was published")
        if name in vocab_names and not _rows_equal(ckpt.path / t.file, t, stage / o.file, o, plan.kept):
            raise VocabSurgeonError(f"internal: kept rows of '{name}' differ from the original; nothing was published")
    if out.index is not None and out.index["metadata"]["total_size"] != out.total_size:
        raise VocabSurgeonError("internal: index total_size does not match the shards; nothing was published")
    out.close()
    from tokenizers import Tokenizer

    new = Tokenizer.from_file(str(stage / TOKENIZER_FILE))
    pieces = plan.vocab.pieces
    if new.get_vocab_size(with_added_tokens=True) != len(plan.kept) or any(
            new.id_to_token(n) != pieces[int(o)] for n, o in enumerate(plan.kept)):
        raise VocabSurgeonError("internal: the written tokenizer does not match the id map; nothing was published")


def _rows_equal(src: Path, t: TensorInfo, dst: Path, o: TensorInfo, kept: np.ndarray) -> bool:
    """Whether written tensor `o` starts with the rows `kept` of `t`, byte for byte (a block at a time)."""
    rb = t.row_bytes
    step = max(1, GATHER_BYTES // rb)
    with open(src, "rb", buffering=0) as fa, open(dst, "rb", buffering=0) as fb:
        for lo in range(0, len(kept), step):
            ids = kept[lo:lo + step]
            first, last = int(ids[0]), int(ids[-1]) + 1
            a = np.frombuffer(os.pread(fa.fileno(), (last - first) * rb, t.start + first * rb), np.uint8)
            b = os.pread(fb.fileno(), len(ids) * rb, o.start + lo * rb)
            if a.reshape(last - first, rb)[ids - first].tobytes() != b:
                return False
    return True
