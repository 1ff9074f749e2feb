"""The plan records every command hands the engine: the options of the surgery (`AddOptions`), the
checkpoint and its vocabulary tensors (`Target`), and what will change (`Plan`: printable for --dry-run,
the summary of --json). Reads headers and config only; a front-end (add, extend) fills in the tokens.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..checkpoint.architectures import VocabLayout, check_runs_new_ids, detect, text_config, untie
from ..checkpoint.hub import Source, resolve_checkpoint
from ..checkpoint.reader import Checkpoint
from ..devices import check_device, check_dtype
from ..errors import InputError
from ..init import DEFAULT_EPS, check_eps, check_seed, get_strategy
from ..kl import kl_bound
from ..tokenizer.editor import TokenizerEditor, TokenizerPlan
from .modelcard import kl_bound_line

logger = logging.getLogger(__name__)

# --pad-to-multiple-of: tensor cores want 8 to 128; a larger multiple only adds dead rows (2**70 would
# exhaust memory planning them).
MAX_PAD_MULTIPLE = 4096


# The largest padding multiple inferred from a checkpoint's row count (OLMo 2's 100,352 rows divide by
# 2048; tensor cores need no more than 128).
MAX_DEFAULT_MULTIPLE = 128


@dataclass
class AddOptions:
    """Options of `add`; the CLI flags map one to one."""

    init: str = "mean"  # both matrices, unless init_input / init_output say otherwise
    init_input: str | None = None
    init_output: str | None = None
    seed: int = 0
    eps: float = DEFAULT_EPS
    special: bool = False
    link: bool = False
    fsync: bool = True  # flush every file to disk before the rename (False: atomic, not power-cut safe)
    force: bool = False
    device: str = "auto"
    dtype: str = "auto"  # what --init fitted runs the model in (devices.DTYPES)
    embedding_key: str | None = None
    lm_head_key: str | None = None
    pad_to_multiple_of: int | None = None
    reuse_reserved: bool = False
    gguf_parity: bool = False  # only entries llama.cpp reads as transformers does (words without one: skipped)
    strict: bool = False  # any skipped token is an error (exit 2), raised while planning: before writing
    untie: bool = False  # tied models: write a separate output matrix (tie_word_embeddings false)
    # --init fitted (see fitted/causal.py): contexts from this corpus (None: the model generates them), bounds
    fit_corpus: str | None = None
    fit_contexts: int = 8  # windows per new token, at most
    fit_context_tokens: int = 32  # tokens per window (fitted.FitOptions.context_tokens)
    fit_steps: int | None = None  # Adam steps of the input distillation, at most (None: passes decide)
    fit_depth: float | None = None  # share of the layers distillation matches after (None: fitted.DISTILL_DEPTH)
    fit_output_steps: int = 100  # L-BFGS iterations of the output fit
    fit_l2: float | None = None  # L2 prior weight of the output fit (None: the default for the start row)
    fit_prior: str | None = None  # output rows' prior (fitted.common.OUTPUT_STARTS); None: the sub-word mean
    fit_kl_limit: float | None = None  # held-out old-text KL mean the output rows are shrunk to; None: log(1 + k/n)
    # The validation corpus (None: the packaged one): the plan checks its words that hold a new word, as
    # validation does (set by `add`'s pipeline and CLI from the validation options; not a flag of its own)
    check_corpus: str | None = None

    def check(self) -> AddOptions:
        """The checks that need no checkpoint, each option and across options (before any download).

        Raises:
            InputError: naming the flag and a value that works.
        """
        check_eps(self.eps)
        check_device(self.device)
        check_dtype(self.dtype)
        for s in {self.init, self.init_input, self.init_output} - {None}:
            get_strategy(s)
        check_seed(self.seed)
        if self.pad_to_multiple_of is not None and not 1 <= self.pad_to_multiple_of <= MAX_PAD_MULTIPLE:
            raise InputError(f"--pad-to-multiple-of {self.pad_to_multiple_of}: pass a positive integer up to "
                             f"{MAX_PAD_MULTIPLE} (64 or 128 suit tensor cores)")
        if self.fit_depth is not None and not 0 < self.fit_depth <= 1:
            raise InputError(f"--fit-depth {self.fit_depth}: must be a share of the model's layers in (0, 1]")
        if self.fit_corpus is not None and "fitted" not in {self.init, self.init_input, self.init_output}:
            raise InputError("--fit-corpus is for --init fitted (or --init-input/--init-output fitted); pass one")
        if self.fit_corpus is not None and not Path(self.fit_corpus).is_file():
            raise InputError(f"{self.fit_corpus}: no such file; pass a UTF-8 text file that uses the new words to "
                             "--fit-corpus")
        return self


@dataclass
class Target:
    """What `add` knows before reading the tokenizer: the checkpoint, its vocabulary tensors and the
    options. Enough to lay out and start copying every shard (`AddJob`)."""

    src: Path
    ckpt: Checkpoint
    layout: VocabLayout
    options: AddOptions
    source: Source | None = None  # where src came from (a Hub repo id and commit), for the model card

    def strategy_for(self, name: str) -> str:
        """The init strategy of one vocabulary tensor."""
        lay = self.layout
        if name in (lay.embedding, *lay.aliases):
            init = self.options.init_input
            # untied input rows that the init does not take from the model (subword-mean-shrunk's are the plain
            # sub-word mean): recorded as what they are
            return (get_strategy(init).untied_input or init) if not lay.tied else init
        if name == lay.lm_head:
            return self.options.init_input if lay.tied else self.options.init_output
        return "mean"

    @property
    def vocab_files(self) -> list[str]:
        """Shard files that hold vocabulary tensors, in checkpoint order."""
        files = {self.ckpt.tensors[n].file for n in self.layout.all_tensors}
        return [f for f in self.ckpt.shards if f in files]


@dataclass
class Plan:
    """What `add` will do; `to_dict()` is the --dry-run / --json view."""

    target: Target
    editor: TokenizerEditor
    tokens: TokenizerPlan
    rows_before: int
    rows_after: int
    rewrite: list[str]  # shard files that hold vocabulary tensors
    copy: list[str]  # shard files copied untouched
    dropped: list[str] = field(default_factory=list)  # stale slow-tokenizer files left out
    architectures: list[str] | None = None  # written into config.json, which lacks them (`architectures_for`)

    def __post_init__(self):
        if self.architectures is None and self.tokens.new:  # every front-end's output gets them
            self.architectures = architectures_for(self.ckpt, self.layout)
            if self.architectures:
                self.tokens.notes.append(ARCHITECTURES_NOTE.format(self.architectures))

    src = property(lambda self: self.target.src)
    ckpt = property(lambda self: self.target.ckpt)
    layout = property(lambda self: self.target.layout)
    options = property(lambda self: self.target.options)
    source = property(lambda self: self.target.source)

    @property
    def k(self) -> int:
        """Rows appended (new tokens past the old rows, plus padding)."""
        return self.rows_after - self.rows_before

    @property
    def row_ids(self) -> list[int]:
        """Every row that gets new values: the new tokens' ids (some inside the old rows with
        --reuse-reserved), then the padding rows."""
        ids = [t.id for t in self.tokens.new]
        appended = set(i for i in ids if i >= self.rows_before)
        return ids + [i for i in range(self.rows_before, self.rows_after) if i not in appended]

    def nothing_to_add(self) -> InputError:
        """The error for a plan without new tokens: why each token was skipped, when not simply
        because it is already a token."""
        odd = [s for s in self.tokens.skipped if not s["reason"].startswith("already in the vocabulary")
               and s["reason"] != "already a special token"]
        if not odd:
            return InputError("every token is already in the vocabulary; nothing to add (see --dry-run for details)")
        return InputError(f"nothing to add: {len(self.tokens.skipped)} token(s) skipped, e.g. {odd[0]['token']!r}: "
                          f"{odd[0]['reason']} (see --dry-run for details)")

    def fit_segment(self):
        """`FitOptions.segment` of the fitted init: None, as added words are matched longest first (`extend`'s
        plan gives its merges' own segmentation)."""
        return None

    def verify_tokenizer(self, stage: Path) -> None:
        """Re-read the tokenizer files written into `stage` and check them (`extend`'s plan checks its own edit).

        Raises:
            VocabSurgeonError: a check failed (a bug: nothing is published).
        """
        from ..tokenizer.editor import verify_tokenizer

        verify_tokenizer(stage, self.tokens)

    def strategy_for(self, name: str) -> str:
        """The init strategy of one vocabulary tensor (`Target.strategy_for`)."""
        return self.target.strategy_for(name)

    def to_dict(self) -> dict:
        lay = self.layout
        source = self.source or Source(self.src)
        d = {
            "input": str(self.src),
            "base": source.to_dict(),
            "architecture": lay.architecture,
            "model_type": lay.model_type,
            "tied": lay.tied,
            "tokenizer_family": self.tokens.family,
            "tensors": {n: {"rows_before": self.rows_before, "rows_after": self.rows_after,
                            "init": self.strategy_for(n)} for n in lay.all_tensors},
            "init": {"input": self.strategy_for(lay.embedding),
                     "output": self.options.init_input if lay.tied else self.options.init_output,
                     "bias": "mean", "eps": self.options.eps},
            "seed": self.options.seed,
            "rows_before": self.rows_before,
            "rows_after": self.rows_after,
            "padding_rows": len(self.row_ids) - len(self.tokens.new),
            "reused_rows": [t.id for t in self.tokens.new if t.id < self.rows_before],
            "freed_tokens": {str(i): c for i, c in self.tokens.freed.items()},
            "added": [{"token": t.text, "form": t.form, "piece": t.piece, "id": t.id, "mechanism": t.mechanism}
                      for t in self.tokens.new],
            "skipped": self.tokens.skipped,
            "contexts_not_one_token": self.tokens.contexts,
            "longer_words_resplit": self.tokens.resplits,
            "longer_words_checked": self.tokens.checked_holders,
            "tokenizer_notes": self.tokens.notes,
            # None where every new row reuses an old one: log(1 + k/n) covers appended rows only
            "kl_bound": kl_bound(self.k, self.rows_before) if self.k else None,
            "untied": self.untie_report(),
            "files_rewritten": self.rewrite,
            "files_copied": self.copy,
            "bytes_to_write": self.bytes_to_write,
        }
        d["kl_bound_covers"] = kl_bound_line(d) if self.tokens.new else None  # what kl_bound says, in words
        return d

    @property
    def bytes_to_write(self) -> int:
        """The bytes of the shards as they are now (the new rows come on top)."""
        return sum(self.ckpt.shards[f].size for f in self.rewrite + self.copy)

    def untie_report(self) -> dict | None:
        """With --untie: the new output matrix and the bytes it adds to the checkpoint."""
        if not self.options.untie:
            return None
        t = self.ckpt.tensors[self.layout.lm_head]
        return {"lm_head": t.name, "of": self.layout.embedding, "bytes_added": self.rows_after * t.row_bytes}

    def describe(self) -> str:
        d, lay = self.to_dict(), self.layout
        lines = [
            f"{lay.kind} checkpoint ({'tied' if d['tied'] else 'untied'} embeddings), "
            f"{d['tokenizer_family']} tokenizer",
            f"rows {d['rows_before']} -> {d['rows_after']} "
            f"({len(d['added'])} tokens, {d['padding_rows']} padding rows)",
            f"init: input {d['init']['input']}, output {d['init']['output']}, biases mean",
        ]
        show = 30  # a long token list is summarized; --json has all of it
        for a in d["added"][:show]:
            stored = f" stored as {a['piece']!r}" if a["piece"] not in (a["form"], a["form"].strip()) else ""
            lines.append(f"  + {a['id']:>7}  {a['form']!r} ({a['mechanism']}{stored})")
        if len(d["added"]) > show:
            lines.append(f"  + ... and {len(d['added']) - show} more (see --json)")
        for s in d["skipped"][:show]:
            lines.append(f"  = skipped {s['token']!r}: {s['reason']}")
        if len(d["skipped"]) > show:
            lines.append(f"  = ... and {len(d['skipped']) - show} more skipped")
        lines.extend(f"note: {n}" for n in d["tokenizer_notes"])
        lines.append(f"rewrite {len(self.rewrite)} shard(s): {', '.join(self.rewrite)}")
        if self.copy:
            lines.append(f"copy {len(self.copy)} shard(s) byte for byte{' (hard links)' if self.options.link else ''}")
        if d["untied"]:
            lines.append(f"untie: new output matrix '{d['untied']['lm_head']}' ({d['untied']['bytes_added']:,} bytes)")
        if d["added"]:
            lines.append(d["kl_bound_covers"])
        return "\n".join(lines)


def open_target(src: str | os.PathLike, options: AddOptions | None = None, *, revision: str | None = None,
                token: str | None = None) -> Target:
    """Open the checkpoint and find its vocabulary tensors; reads headers and config only.

    `src` is a checkpoint directory, or a Hub repo id (`org/name`, at `revision`) whose safetensors
    checkpoint is downloaded into the Hub cache first; a local directory wins over a repo id.

    Raises:
        InputError: for anything about the checkpoint or the options that cannot be used.
    """
    options = (options or AddOptions()).check()  # before any download
    source = resolve_checkpoint(src, revision=revision, token=token)
    _refuse_remote_code(Path(source.path))
    ckpt = Checkpoint.open(source.path)
    layout = detect(ckpt, options.embedding_key, options.lm_head_key)
    if options.untie:
        layout = untie(ckpt, layout)
    check_runs_new_ids(ckpt, layout)
    inp, outp = options.init_input or options.init, options.init_output or options.init
    if layout.tied:
        if options.init_input and options.init_output and options.init_input != options.init_output:
            raise InputError(
                f"the embeddings are tied (one matrix plays both roles), so --init-input {options.init_input} and "
                f"--init-output {options.init_output} cannot differ; pass one --init"
            )
        inp = outp = options.init_input or options.init_output or options.init
    cfg_vocab = text_config(ckpt.config).get("vocab_size")
    if isinstance(cfg_vocab, int) and cfg_vocab != layout.rows:
        raise InputError(
            f"{ckpt.path / 'config.json'}: vocab_size is {cfg_vocab}, but '{layout.embedding}' has {layout.rows} "
            "rows; config and weights disagree, refusing to guess"
        )
    return Target(Path(source.path), ckpt, layout, replace(options, init_input=inp, init_output=outp), source)


def architectures_for(ckpt: Checkpoint, layout: VocabLayout) -> list[str] | None:
    """The `architectures` an output's config.json gets where the input's has none and the model's class is
    known (transformers' class for its model type, as validation loads it): llama.cpp's converter picks its
    model by them and refuses a config without ("Failed to detect model architecture"). Every command that
    writes a checkpoint writes them."""
    if ckpt.config.get("architectures") or layout.architecture == "unknown":
        return None
    from ..runtime import model_kind

    cls = model_kind(ckpt.path).class_name
    return [cls] if cls else None


ARCHITECTURES_NOTE = ("config.json has no 'architectures': written as {} (the model class transformers has for its "
                      "model type), which llama.cpp's converter needs to detect the model")


def padding_multiple(rows: int, tokens: int) -> int | None:
    """The multiple a checkpoint's rows were padded to, kept when rows are appended: the largest power of
    two up to `MAX_DEFAULT_MULTIPLE` that divides `rows`, where `rows` is more than the `tokens` the
    tokenizer has (padding rows) and that power is at least 8; None otherwise (rows are appended one per
    token, as before).

    Example:
        >>> padding_multiple(151936, 151669), padding_multiple(50304, 50277), padding_multiple(600, 600)
        (128, 128, None)
    """
    if rows <= tokens:
        return None
    m = min(rows & -rows, MAX_DEFAULT_MULTIPLE)  # rows & -rows: the largest power of two dividing rows
    return m if m >= 8 else None


def _refuse_remote_code(src: Path) -> None:
    # We never import code from a checkpoint; say so when it ships some, since users may expect it to run.
    if any(src.glob("*.py")):
        logger.warning("%s ships Python files; they are copied but never imported or run", src)
