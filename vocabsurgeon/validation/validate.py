"""Validation of an expanded checkpoint against its original: which checks run, and the report.

Over 500 lines: the one place that decides which checks run and turns measurements into the report.

The checks are records in `checks.py`, measured by `measure.py` on a held-out corpus and chat samples:
finite rows, KL(p_old || p_new) per position, old logits, sampling, chat greedy, tokenization, bits per
byte. One pass when the output came from the base by `add` (its old logits are the new logits' first n
columns), else two. Details: docs/internals.md.
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..checkpoint.architectures import text_config
from ..checkpoint.reader import Checkpoint, rows_kept
from .checks import (
    ChatKLCheck,
    Check,
    FiniteRowsCheck,
    KLCheck,
    OldOutputsCheck,
    SamplingCheck,
    TokenizationCheck,
)
from ..errors import InputError
from ..checkpoint.filenames import CONFIG_NAME, REPORT_NAME  # noqa: F401 (REPORT_NAME: re-exported)
from ..checkpoint.hub import resolve_checkpoints
from ..kl import kl_bound
from .plot import figure, require_plot
from ..progress import Progress
from .measure import Inputs, Measured, NewIds, greedy_check, run_models, usability_check, usability_texts
from .report import Report
from ..devices import check_device, check_dtype
from ..corpus import paragraphs as corpus_paragraphs, read_corpus
from ..runtime import (
    without_padding,
    ModelKind,
    encode,
    load_tokenizer,
    model_kind,
)
from ..tokenizer import contexts, resplit
from ..tokenizer.chats import render_chats
from ..tokenizer.editor import require_tokenizer_files

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "REPORT_NAME",
    "Relation",
    "Thresholds",
    "derived_by_add",
    "read_corpus",
    "validate_checkpoint",
]

DEFAULT_MAX_TOKENS = 2048  # corpus positions of the KL check (and tokens of the usability check)
MAX_LISTED_ROWS = 20  # non-finite row ids listed per tensor
# Assumed forward throughput for the up-front time estimate (float32 multiply-adds per second x2);
# the progress bar's ETA takes over once the first windows have run.
CPU_FLOPS = 4e10
GPU_FLOPS = 5e12


@dataclass
class Thresholds:
    """Pass/fail limits of `validate_checkpoint`; each has a CLI flag of the same name.

    The KL limits are raised to the mean-init bound log(1 + k/n) when that is larger, so that an
    expansion by many tokens with mean init never fails for doing what the bound allows.
    """

    max_kl_mean: float = 0.05  # nats, mean over positions
    max_kl_p99: float = 0.5  # nats, 99th percentile over positions
    max_new_token_fraction: float = 0.2  # of tokens sampled after prompts without new words
    max_stuck_fraction: float = 0.5  # of prompts ending in a new token whose sample repeats it
    old_logits_tolerance: float | None = None  # relative to max |logit|; None: 1e-4 (fp32/fp64), 1e-2 (fp16/bf16)

    def check(self) -> Thresholds:
        """Refuse limits that are not numbers in their range, before any work.

        Raises:
            InputError: a KL limit that is negative or not finite; a fraction outside [0, 1].
        """
        for name in ("max_kl_mean", "max_kl_p99"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise InputError(f"--{name.replace('_', '-')} {v}: must be a finite number of nats >= 0")
        for name in ("max_new_token_fraction", "max_stuck_fraction"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0 <= v <= 1):
                raise InputError(f"--{name.replace('_', '-')} {v}: must be a fraction between 0 and 1")
        t = self.old_logits_tolerance
        if t is not None and not (math.isfinite(t) and t >= 0):
            raise InputError(f"old_logits_tolerance {t}: must be a finite number >= 0")
        return self


def check_options(*, thresholds: Thresholds | None = None, device: str = "auto", max_tokens: int = DEFAULT_MAX_TOKENS,
                  plot: str | os.PathLike | None = None, dtype: str = "auto") -> None:
    """Check the validation options before any work (also under `add --dry-run` and `--no-validate`).

    Raises:
        InputError: a bad limit, device, dtype or --max-tokens, or --plot without matplotlib.
    """
    (thresholds or Thresholds()).check()
    check_device(device)
    check_dtype(dtype)
    if max_tokens < 1:
        raise InputError("--max-tokens must be a positive integer")
    if plot is not None:
        require_plot()


def write_kl_plot(kl: np.ndarray, bound: float | None, path: str | os.PathLike, title: str = "") -> Path:
    """Write a histogram of per-position KL (log-scaled axis) to `path`, with the mean-init bound."""
    kl = np.asarray(kl, dtype=np.float64)
    floor = 1e-12  # exact zeros (identical distributions) are drawn at the floor
    vals = np.maximum(kl, floor)
    lo, hi = math.log10(vals.min()), math.log10(max(vals.max(), (bound or floor) * 1.5))
    bins = np.logspace(lo - 0.1, hi + 0.1, 50)
    with figure(path, title or "KL between the original and the expanded model",
                "KL(p_old || p_new) per position (nats)", "positions") as ax:
        ax.hist(vals, bins=bins, color="#4477aa")
        ax.set_xscale("log")
        if bound:
            ax.axvline(bound, color="#cc3311", linestyle="--", label=f"mean-init bound log(1+k/n) = {bound:.3g}")
        ax.axvline(max(float(kl.mean()), floor), color="#228833", label=f"mean = {kl.mean():.3g}")
    return Path(path)

# ---------------------------------------------------------------- tokenizer and chat texts


class ChatText(NamedTuple):
    """A conversation rendered with the chat template, and whether its own messages use new words."""

    text: str
    uses_new_words: bool


def _uses_new(tok, texts, new: NewIds) -> bool:
    return any(t in new for s in texts for t in encode(tok, s))


def chat_texts(new_tok, new: NewIds, generation_prompt: bool = False) -> list[ChatText]:
    """The sample conversations rendered with the (new) tokenizer's chat template, each marked when its
    own messages (not the template's text) use a new word."""
    return [ChatText(text, _uses_new(new_tok, msgs, new))
            for text, msgs in render_chats(new_tok, generation_prompt)]


def longer_words(old_tok, new_tok, paragraphs: list[str], words: dict[str, set[int]],
                 reported: set[str] | None = None) -> tuple[int, list[dict]]:
    """The corpus's words that hold a new word inside a longer word (resplit.inside: "REQUEST" holds "REQ"),
    each tokenized alone and after a space before and after: (how many were checked, the changes not
    reported). `words`: new word -> its new ids. A change is reported where the new word it holds is in
    `reported` (the plan's longer_words_resplit), or, without a plan, where it is an added token (matched
    anywhere in raw text: the plan reports those per word)."""
    held = resplit.Holders(resplit.corpus_words(paragraphs)).holding(words)
    held = {w: [t for t in ts if resplit.inside(t, w)] for w, ts in held.items()}
    texts = list(dict.fromkeys(v for ts in held.values() for t in ts if t.strip() not in words
                               for v in resplit.variants(t)))  # a new word itself is no old text
    if reported is None:
        added = getattr(new_tok, "added_tokens_decoder", None) or {}
        reported = {w for w, ids in words.items() if ids & set(added)}
    owner = {i: w for w, ids in words.items() for i in ids}
    unreported = []
    for text in texts:
        a, b = encode(old_tok, text), encode(new_tok, text)
        if a == b:
            continue
        culprits = {owner[i] for i in b if i in owner}
        inside = {w for w in culprits if resplit.inside(text, w)}  # not those it holds as a word ("sNaN123")
        if not culprits or inside - reported:
            unreported.append({"text": text, "before": a, "after": b})
    return sum(map(len, held.values())), unreported


def tokenization_check(old_tok, new_tok, text: str, new: NewIds, new_ids: list[int],
                       chats: list[ChatText] = (), reported: set[str] | None = None,
                       new_pieces: bool = False) -> TokenizationCheck:
    """Invariants of the edited tokenizer, on the corpus, on chat-template text and on each new token.

    Paragraphs without new tokens must keep their ids; every new word must be one token, at a
    sentence start and after a space; every paragraph must decode as under the original tokenizer;
    a rendered conversation whose messages use no new word must keep its ids (a template word that
    became a new token, e.g. `assistant`, changes every chat prompt); a corpus word that holds a new word
    inside it ("REQUEST" and "REQ") must keep its ids unless the plan reported it (`longer_words`).
    """
    paragraphs = corpus_paragraphs(text)
    changed, round_trip, with_new = [], [], 0
    for i, p in enumerate(paragraphs):
        a, b = encode(old_tok, p), encode(new_tok, p)
        if any(t in new for t in b):
            with_new += 1
        elif a != b:
            changed.append(i)
        if new_tok.decode(b) != old_tok.decode(a):
            round_trip.append(i)
    chat_changed, chat_new = 0, []
    for c in chats:
        if c.uses_new_words:
            continue
        a, b = encode(old_tok, c.text), encode(new_tok, c.text)
        if a != b:
            chat_changed += 1
            for t in b:
                form = new_tok.decode([t])
                if t in new and form not in chat_new:
                    chat_new.append(form)
    special = set(getattr(new_tok, "all_special_ids", []) or [])
    # Added special tokens (--special) are not in all_special_ids in transformers 5; they stand alone.
    special |= {i for i, t in (getattr(new_tok, "added_tokens_decoder", None) or {}).items() if t.special}
    # Pieces of a lone leading space (as verify_tokenizer counts them): Meta's layout (Mistral's tokenizer.model)
    # encodes " the" as "▁" + "▁the", and so " Frodo" as "▁" + the new token; Llama 2 as transformers 5 builds
    # Meta's file (LlamaTokenizer, legacy) has no such "▁", nor has its output (written in that pipeline).
    # Counted on the edited tokenizer, as it is loaded.
    lead = contexts.space_lead(lambda t: encode(new_tok, t))
    words: dict[str, int] = {}
    ids_of: dict[str, set[int]] = {}
    for t in () if new_pieces else new_ids:  # sub-word pieces (`extend`) are not words: none must be one token
        w = new_tok.decode([t]).strip()
        if w and w not in words:
            words[w] = t
        if w:
            ids_of.setdefault(w, set()).add(t)
    special_words = {w for w, t in words.items() if t in special}
    for w in set(words) - special_words:  # a form that was one token already counts too (" José" on GPT-2)
        for form in (w, " " + w):
            if len(ids := encode(old_tok, form)) == 1:
                ids_of[w].add(ids[0])
    # every context of the table (contexts.CONTEXTS): one token in the core ones, or a failure; elsewhere a
    # word that keeps its old pieces is reported (contexts_not_one_token), as the plan reports it
    own = set(new_ids)
    checked, resplits = longer_words(old_tok, new_tok, paragraphs, {w: ids_of[w] & own for w in words}, reported)
    cases = contexts.cases(list(words), special_words)
    encoded = [encode(new_tok, c.text) for c in cases]
    not_one, seen = [], set()
    elsewhere: dict[str, list[str]] = {}
    for j, w in contexts.misses(cases, encoded, ids_of, lead=lead):
        if cases[j].context.name not in contexts.CORE:
            elsewhere.setdefault(w, []).append(cases[j].text)
        elif w not in seen:
            seen.add(w)
            not_one.append({"word": w, "form": cases[j].text, "ids": encoded[j]})
    return TokenizationCheck(
        paragraphs=len(paragraphs), paragraphs_with_new_tokens=with_new, old_text_ids_changed=len(changed),
        new_words=len(words), one_token_words=len(words) - len(not_one), not_one_token=not_one[:20],
        round_trip_failures=len(round_trip), chat_samples=len(chats), chat_ids_changed=chat_changed,
        chat_new_tokens=chat_new[:20], contexts_not_one_token=elsewhere,
        longer_words_checked=checked, longer_words_changed=len(resplits), longer_words_examples=resplits[:5],
        passed=not changed and not not_one and not round_trip and not chat_changed and not resplits,
    )


def _opened(ckpt: Checkpoint | str | os.PathLike) -> Checkpoint:
    """The checkpoint record itself, or the directory opened into one (`Checkpoint.open` names a missing config)."""
    return ckpt if isinstance(ckpt, Checkpoint) else Checkpoint.open(ckpt)


def _same_model(base: Checkpoint, new: Checkpoint, names: dict) -> None:
    """Refuse, before loading anything, a NEW that is not a model of BASE's kind: validation loads NEW with
    BASE's class, and another architecture's config would build a model of the class's default size."""
    def kind(ck: Checkpoint) -> tuple:
        cfg = text_config(ck.config)
        return ck.config.get("model_type"), cfg.get("hidden_size", cfg.get("n_embd", cfg.get("d_model")))

    (bt, bh), (nt, nh) = kind(base), kind(new)
    if bt != nt or bh != nh:
        what = (f"a {nt} model" if bt != nt else f"hidden size {nh}") + f", {names['base']} " + (
            f"a {bt} model" if bt != nt else f"hidden size {bh}")
        raise InputError(f"{names['new']} is {what}: validate compares an output with the checkpoint it was made "
                         f"from; pass that checkpoint as BASE")


def _vocab_rows(ckpt: Checkpoint) -> int:
    """Rows of the output softmax from config.json (text_config when nested)."""

    v = text_config(ckpt.config).get("vocab_size")
    if not isinstance(v, int) or v < 1:
        raise InputError(f"{ckpt.path / CONFIG_NAME}: no integer vocab_size; cannot tell old rows from new ones")
    return v


# ---------------------------------------------------------------- from the files: finite rows, derived by add


def _reused_ids(old_tok, new_tok, n: int) -> list[int]:
    """Ids below `n` that the new tokenizer gives a token the original did not have there (an unused
    row, or a reserved token renamed): rows --reuse-reserved gave to new tokens."""
    old = {i: t for t, i in old_tok.get_vocab().items() if i < n}
    return sorted(i for t, i in new_tok.get_vocab().items() if i < n and old.get(i) != t)


def finite_rows(ckpt: Checkpoint | str | os.PathLike, rows: int) -> FiniteRowsCheck:
    """Scan every vocabulary-sized tensor (first dimension `rows`: embeddings, lm_head, biases) of
    the checkpoint for rows holding NaN or Inf, streaming from the files."""

    ckpt = _opened(ckpt)
    try:
        names = [t.name for t in ckpt.tensors.values() if t.shape and t.shape[0] == rows
                 and t.dtype in ("F16", "BF16", "F32", "F64")]
        bad: dict[str, list[int]] = {}
        count = 0
        for name in names:
            start = 0
            for chunk in ckpt.stream_rows(name):  # (r, row_size), valid until the next chunk
                ok = np.isfinite(chunk).all(axis=1) if chunk.ndim == 2 else np.isfinite(chunk)
                if not ok.all():
                    ids = (np.flatnonzero(~ok) + start).tolist()
                    count += len(ids)
                    listed = bad.setdefault(name, [])
                    listed.extend(ids[:MAX_LISTED_ROWS - len(listed)])
                start += len(chunk)
    finally:
        ckpt.close()
    return FiniteRowsCheck(tensors=names, nonfinite_rows=bad, nonfinite_count=count)


class Relation(NamedTuple):
    """Whether `new` came from `base` by `add` (so one forward pass of `new` gives both models' outputs), and why not."""

    derived: bool
    reason: str


def _without_vocab_size(cfg: dict) -> dict:
    cfg = {k: v for k, v in cfg.items() if k not in ("vocab_size", "transformers_version")}
    if isinstance(cfg.get("text_config"), dict):
        cfg["text_config"] = _without_vocab_size(cfg["text_config"])
    return cfg


def derived_by_add(base: Checkpoint | str | os.PathLike, new: Checkpoint | str | os.PathLike) -> Relation:
    """Check from the files, without loading a model, that `new` is `base` with rows appended.

    True when the configs are equal but for the vocabulary size, `new` has the same tensors as
    `base` with the same dtypes, every tensor that did not grow is byte-identical, and every grown
    tensor (more rows, same row shape) starts with the base's bytes. Then the new model computes
    the base model's hidden states on old ids, and its first n logits are the base model's.
    """

    a, b = _opened(base), _opened(new)
    base, new = a.path, b.path
    if _without_vocab_size(a.config) != _without_vocab_size(b.config):
        return Relation(False, "the configs differ in more than the vocabulary size")
    try:
        if set(a.tensors) != set(b.tensors):
            diff = sorted(set(a.tensors) ^ set(b.tensors))
            return Relation(False, f"the tensors differ (e.g. '{diff[0]}')")
        for name, ta in a.tensors.items():
            tb = b.tensors[name]
            if ta.dtype != tb.dtype or ta.shape[1:] != tb.shape[1:] or (ta.shape and tb.shape[0] < ta.shape[0]):
                return Relation(False, f"tensor '{name}' changed dtype or shape")
            fa, fb = base / ta.file, new / tb.file
            if fa.exists() and fb.exists() and os.path.samefile(fa, fb):
                continue  # a hard link (add --link): the same bytes
            if not rows_kept(fa, ta, fb, tb.start):
                return Relation(False, f"tensor '{name}' differs from the original's"
                                + (" in its old rows" if tb.shape != ta.shape else ""))
    finally:
        a.close()
        b.close()
    return Relation(True, "every other tensor is byte-identical and the old rows are bit-identical")


class Estimate(NamedTuple):
    """The up-front cost of a validation run, said before it starts (the progress bar refines it)."""

    params: int
    tokens: int
    seconds: float

    def describe(self) -> str:
        secs = self.seconds
        when = f"{secs:.0f} s" if secs < 90 else f"{secs / 60:.0f} min"
        size = f"{self.params / 1e9:.1f}B" if self.params >= 1e9 else (
            f"{self.params / 1e6:.0f}M" if self.params >= 1e6 else f"{self.params / 1e3:.0f}K")
        return f"about {self.tokens:,} tokens through a {size}-parameter model, roughly {when}"


def estimate(ckpt: Checkpoint, tokens: int, device: str) -> Estimate:
    """Seconds to load and run `tokens` through the model `ckpt`, from its parameter count (no load)."""

    params = sum(math.prod(t.shape) for t in ckpt.tensors.values())
    nbytes = ckpt.total_size
    flops = GPU_FLOPS if device.startswith("cuda") else CPU_FLOPS
    load = nbytes / 400e6  # read and widen to float32, about 400 MB/s
    return Estimate(params, tokens, load + 2.0 * params * tokens / flops)


def _skipped(kind: ModelKind) -> list[str]:
    """The checks that cannot run for this kind of model, each with the reason."""
    why = kind.reason
    if kind.task is None:
        return [f"model checks skipped (KL, old logits, sampling, usability): {why}"]
    if kind.task == "encoder":
        return [(f"KL, sampling and usability skipped: {why}; checked that the hidden states of old text "
                "are unchanged instead")]
    if kind.task == "masked":
        return [(f"sampling and usability skipped: {kind.class_name} is a masked language model and does not "
                "generate text")]
    return []


def validate_checkpoint(
    base: str | os.PathLike,
    new: str | os.PathLike,
    corpus: str | os.PathLike | None = None,
    *,
    thresholds: Thresholds | None = None,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    new_token_ids: list[int] | None = None,
    seed: int = 0,
    device: str = "auto",
    dtype: str = "auto",
    plot: str | os.PathLike | None = None,
    progress: Progress | None = None,
    method: str = "auto",
    revision: str | None = None,
    token: str | None = None,
    base_checkpoint: Checkpoint | None = None,
    base_tokenizer=None,
    resplit_reported: set[str] | None = None,
    new_pieces: bool = False,
    remedy: str = "",
    new_name: str | None = None,
) -> Report:
    """Compare the expanded checkpoint `new` with its original `base`; returns the report.

    Args:
        base, new: checkpoint directories, or Hub repo ids (`org/name`) whose safetensors checkpoints
            are downloaded into the Hub cache, as `add_tokens` does; `new` has k more output rows
            than `base` (n).
        corpus: a UTF-8 text file; None for the packaged default corpus.
        thresholds: pass/fail limits (`Thresholds()` defaults).
        max_tokens: corpus tokens of the KL check (and of the usability check).
        new_token_ids: ids of the new tokens (from `AddResult`); None derives them from the new
            tokenizer (its ids >= n).
        seed: seed of the sampling check (same seed, same samples).
        device: "auto" (a GPU when present), "cpu" or "cuda".
        dtype: what the models run in: "auto" (the checkpoint's dtype on a GPU, float32 on the CPU),
            "checkpoint" (its dtype on the CPU too), "float32", "bfloat16" or "float16".
        plot: write a histogram of per-position KL there (needs matplotlib).
        progress: callbacks for stages and work done (`progress.Progress`); none by default.
        method: "auto" (one pass when `new` was derived from `base` by add, else two), "one-pass"
            (refused when not derived) or "two-pass" (both models, always).
        revision: the Hub revision of whichever of `base` and `new` is a repo id (of both when both
            are); refused when both are local directories.
        token: the Hub token (None: HF_TOKEN or the stored login).
        base_checkpoint, base_tokenizer: `base` already opened, and its tokenizer as AutoTokenizer loads it
            (`add`'s plan has both), so neither is read again.
        resplit_reported: the new words the plan reported as re-splitting longer words (its
            longer_words_resplit); None: every added token's word (matched anywhere in raw text).
        new_pieces: the new tokens are sub-word pieces (`extend`), not words: no check that each is one token.
        remedy: what the caller's user can do when a model cannot be run (`add`: "Pass --no-validate ...").
        new_name: how messages name `new` (`add` validates its staging directory under the output's name).

    Returns:
        A `report.Report` (it reads as the dict of its JSON too): `passed`, `failures` (why not, in
        words), `method` ("one-pass" or "two-pass") and
        `method_reason`, one entry per check (`finite`, `kl`, `kl_chat`, `old_logits`, `sampling`,
        `greedy_chat`, `tokenization`, `usability`; see `checks.py`), `thresholds`, `sources`
        (repo id, revision and commit of each checkpoint from the Hub). See README.md.

    Raises:
        InputError: a checkpoint, an option or the corpus cannot be used, `base` and `new` are models of
            different kinds, or a repo id cannot be pulled; before any model is loaded.

    Example:
        >>> r = validate_checkpoint("ckpt/", "out/", max_tokens=512)  # doctest: +SKIP
        >>> r["passed"], r["method"], r["kl"]["mean"] <= r["kl"]["bound"]  # doctest: +SKIP
        (True, 'one-pass', True)
    """
    th = thresholds or Thresholds()
    outer = progress or Progress()
    marks: list[tuple[str, float]] = []  # (stage, start): the report's `seconds`

    def stage(text: str) -> None:
        marks.append((text.split(" (")[0].split(":")[0], time.perf_counter()))
        outer.stage(text)

    progress = replace(outer, stage=stage)
    check_options(thresholds=th, device=device, max_tokens=max_tokens, plot=plot, dtype=dtype)
    if method not in ("auto", "one-pass", "two-pass"):
        raise InputError(f"method {method!r} is not one of auto, one-pass, two-pass")
    sources = dict(zip(("base", "new"), resolve_checkpoints([base, new], revision=revision, token=token)))
    names = {key: s.name for key, s in sources.items()}  # the repo id, else the directory
    if new_name is not None:
        names["new"] = new_name
    base, new = sources["base"].path, sources["new"].path
    for path in (base, new):  # as `add`: a checkpoint without tokenizer files is refused before any work
        require_tokenizer_files(path)
    # Each checkpoint is opened once (config, index, headers) and read from that record from here on;
    # `base_checkpoint` is the one `add` already opened.
    base_ck = base_checkpoint if base_checkpoint is not None and base_checkpoint.path == Path(base) else _opened(base)
    new_ck = _opened(new)
    _same_model(base_ck, new_ck, names)
    n, rows_new = _vocab_rows(base_ck), _vocab_rows(new_ck)
    no_new_rows = InputError(
        f"{names['new']}: vocab_size is {rows_new}, not more than the {n} of {names['base']}; pass the original "
        "first and the expanded checkpoint second")
    if rows_new < n:
        raise no_new_rows
    old_tok = without_padding(base_tokenizer) if base_tokenizer is not None else load_tokenizer(base)
    new_tok = load_tokenizer(new)
    if new_token_ids is None:
        new_token_ids = sorted(i for i in new_tok.get_vocab().values() if i >= n) + _reused_ids(old_tok, new_tok, n)
    new_token_ids = [i for i in new_token_ids if i < rows_new]
    reused = sorted(i for i in new_token_ids if i < n)  # --reuse-reserved: rows of the original given to new tokens
    k = rows_new - n + len(reused)
    if k <= 0:
        raise no_new_rows
    text, corpus_name = read_corpus(corpus)
    progress.stage("tokenizers")
    new_ids = NewIds(n, reused)
    chats = chat_texts(new_tok, new_ids)
    prompts = [c for c in chat_texts(new_tok, new_ids, generation_prompt=True) if not c.uses_new_words]
    tokenization = tokenization_check(old_tok, new_tok, text, new_ids, new_token_ids, chats, resplit_reported,
                                      new_pieces)
    inp = Inputs(
        corpus_ids=encode(old_tok, text), chat_old=[encode(old_tok, c.text) for c in chats],
        prompts_old=[encode(old_tok, c.text) for c in prompts], prompts_new=[encode(new_tok, c.text) for c in prompts],
        usable=usability_texts(text, new_tok, new_ids, max_tokens), n=n, rows_new=rows_new,
        new_token_ids=new_token_ids, new=new_ids,
        seed=seed, max_tokens=max_tokens, stop={t for t in (old_tok.eos_token_id,) if t is not None},
    )
    kind = model_kind(base)
    bound = kl_bound(k, n)
    lim_mean, lim_p99 = max(th.max_kl_mean, bound), max(th.max_kl_p99, bound)

    progress.stage("finite rows")
    finite = finite_rows(new_ck, rows_new)
    ran = kind.task is not None and not finite.nonfinite_count
    if method == "two-pass":
        relation = Relation(False, "two-pass was asked for")
    elif ran or method == "one-pass":  # reads both checkpoints: only when a model will run
        relation = derived_by_add(base_ck, new_ck)
    else:
        relation = Relation(False, "no model was run")
    if method == "one-pass" and not relation.derived:
        raise InputError(f"{names['new']}: one-pass validation needs a checkpoint made from {names['base']} by add, "
                         f"but {relation.reason}; use the two-pass method")
    used = "one-pass" if relation.derived else "two-pass"
    skipped = _skipped(kind)
    m = Measured()
    if finite.nonfinite_count:
        skipped.append(f"model checks not run: {finite.nonfinite_count} row(s) hold NaN or Inf")
    if ran:
        passes = 1 if relation.derived else 2
        tokens = passes * (min(max_tokens, len(inp.corpus_ids)) + sum(map(len, inp.chat_old))) + 600
        progress.stage(f"{used} ({relation.reason}): {estimate(new_ck, tokens, device).describe()}")
        m = run_models(None if relation.derived else base, new, kind, device, inp, old_tok, new_tok, progress, dtype,
                       remedy)
    for what in skipped:
        logger.warning("%s: %s", names["new"], what)

    tol_rel = th.old_logits_tolerance
    if tol_rel is None:
        tol_rel = 1e-2 if m.dtype in ("bfloat16", "float16") else 1e-4
    reason = kind.reason or (skipped[-1] if skipped else "")
    no_chat = "the tokenizer has no chat template" if not chats else reason
    checks: list[Check] = [
        finite,
        KLCheck.from_kl(m.kl, bound, lim_mean, lim_p99) if m.kl is not None else KLCheck(
            applicable=False, reason=reason, bound=bound, limit_mean=lim_mean, limit_p99=lim_p99),
        ChatKLCheck.from_kl(m.kl_chat, bound, lim_mean, lim_p99, samples=len(chats)) if m.kl_chat is not None
        else ChatKLCheck(applicable=False, reason=no_chat if ran else reason, bound=bound, limit_mean=lim_mean,
                         limit_p99=lim_p99),
        OldOutputsCheck(applicable=False, reason=reason) if not ran else OldOutputsCheck(
            what=m.what, unchanged=True, max_abs_diff=0.0, tolerance=tol_rel, how="files", missing_weights=m.missing)
        if relation.derived else OldOutputsCheck(
            what=m.what, unchanged=m.max_diff <= tol_rel * max(1.0, m.max_out), max_abs_diff=m.max_diff,
            tolerance=tol_rel * max(1.0, m.max_out), missing_weights=m.missing),
        SamplingCheck(**{**asdict(m.sampling), "limit_new_token_fraction": th.max_new_token_fraction,
                         "limit_stuck_fraction": th.max_stuck_fraction}) if m.sampling else SamplingCheck(
            applicable=False, reason=reason, limit_new_token_fraction=th.max_new_token_fraction,
            limit_stuck_fraction=th.max_stuck_fraction),
        greedy_check(m, inp, old_tok, new_tok, no_chat if ran else reason),
        tokenization,
        usability_check(inp.usable, m, ran and kind.generates),
    ]
    ends = [t for _, t in marks[1:]] + [time.perf_counter()]
    report = Report.decide(
        checks, skipped, method=used if ran else None, method_reason=relation.reason, **names,
        sources={key: s.to_dict() for key, s in sources.items()},
        model={"kind": kind.task, "class": kind.class_name, "missing_weights": m.missing},
        corpus={"name": corpus_name, "bytes": len(text.encode("utf-8")), "tokens": len(inp.corpus_ids),
                "positions": int(m.kl.size) if m.kl is not None else 0, "chat_samples": len(chats)},
        device=m.device, dtype=m.dtype,
        vocab={"old_rows": n, "new_rows": rows_new, "k": k, "new_tokens": len(new_token_ids)},
        thresholds=asdict(th),
        seconds={name: round(end - start, 3) for (name, start), end in zip(marks, ends)},
    )
    if plot is not None and m.kl is not None:
        write_kl_plot(m.kl, bound, plot, title=f"{Path(names['new']).name}: KL per position ({m.kl.size} positions)")
        report.plot = str(plot)
    logger.info("validation of %s (%s): %s", new, used, "passed" if report.passed else "; ".join(report.failures))
    return report


def next_step(report: Report, init: str | None) -> str:
    """What to try after a failed validation, for the checks that failed: a tokenization failure is the
    tokenizer's (no init changes it); a model check's may be the init's (mean bounds the KL)."""
    failing = {c.KEY for c in report.checks if c.failures()}
    steps = []
    if "tokenization" in failing:
        steps.append("the written tokenizer tokenizes text otherwise than the input, which no --init changes: remove "
                     "the words it names, or report it with the model name and the tokens")
    if failing - {"tokenization", "finite"} and init != "mean":
        steps.append("Try --init mean")
    if not steps:
        return "Pass --no-validate to skip the checks"
    first = steps[0][0].upper() + steps[0][1:]
    return "; ".join([first, *steps[1:]]) + ", or pass --no-validate to skip the checks"
