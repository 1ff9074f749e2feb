"""What a user is about to operate on: layout, sizes, matrix statistics and the zero-init risk.

Nothing is changed. The statistics stream the vocabulary matrices from disk; the zero-init risk
runs the model (transformers, never remote code) over a corpus: at each position, log Z is the
log partition function of the output softmax, and one new token whose output row is zero (logit
0) takes probability 1/(1+Z) from the others, a KL(p_old || p_new) of log(1 + 1/Z). When logits
are large and negative (GPT-2 small), Z is tiny and zero init hands the new tokens almost all the
probability; when Z is large (GPT-2 large) it costs next to nothing.
"""

from __future__ import annotations

import logging
import math
import os

import numpy as np

from ..checkpoint.architectures import detect, text_config
from ..checkpoint.reader import Checkpoint
from ..checkpoint.hub import Source, resolve_checkpoint
from ..kl import kl_added_mass, kl_figures
from ..progress import SILENT, Progress
from ..runtime import (
    context_length,
    corpus_windows,
    encode,
    load_tokenizer,
    loaded_model,
    model_kind,
)
from ..corpus import read_corpus

logger = logging.getLogger(__name__)

INSPECT_MAX_TOKENS = 1024  # corpus tokens run through the model for the zero-init risk (CLI and library alike)

# Verdict on the per-position KL that one zero-initialized token causes (nats).
SAFE_MAX_KL = 0.01  # below this everywhere: safe
DANGEROUS_MEAN_KL = 0.1  # a mean or a max at least this high: dangerous
DANGEROUS_MAX_KL = 1.0
FAR_ROW_NORM = 10.0  # a row whose norm is this many times the matrix's 99th-percentile norm is far outside the rest
MAX_LISTED_ROWS = 20  # row ids listed per warning


def matrix_stats(ckpt: Checkpoint, name: str) -> dict:
    """Statistics of one vocabulary matrix, streamed: row norms, per-dimension mean and std, and
    the std compared with the Xavier normal std sqrt(2 / (rows + hidden)).

    Rows holding NaN or Inf are left out of the figures and listed by id (`nonfinite_row_ids`), as
    are rows whose norm is far outside the others' (`far_row_ids`: above FAR_ROW_NORM x the 99th
    percentile norm, e.g. an init at the wrong scale)."""
    info = ckpt.tensors[name]
    rows = info.shape[0]
    norms, kept = [], []
    total = sq = None
    bad_ids: list[int] = []
    start = 0
    for chunk in ckpt.iter_np_chunks(name):  # (r, hidden)
        c = chunk.astype(np.float64)
        ids = np.arange(start, start + len(c))
        start += len(c)
        with np.errstate(all="ignore"):  # Inf - Inf and the like: those rows are dropped just below
            finite = np.isfinite(c).all(axis=1) & np.isfinite((c * c).sum(1))
        bad_ids += ids[~finite].tolist()
        c = c[finite]
        norms.append(np.linalg.norm(c, axis=1))
        kept.append(ids[finite])
        total = c.sum(0) if total is None else total + c.sum(0)
        sq = (c * c).sum(0) if sq is None else sq + (c * c).sum(0)
    norms_a = np.concatenate(norms) if norms else np.zeros(0)
    kept_a = np.concatenate(kept) if kept else np.zeros(0, dtype=np.int64)
    hidden = info.shape[1] if len(info.shape) > 1 else 1
    n = max(1, norms_a.size)
    mean = total / n if total is not None else np.zeros(hidden)
    std = np.sqrt(np.maximum(sq / n - mean * mean, 0.0)) if sq is not None else np.zeros(hidden)  # (hidden,)
    xavier = math.sqrt(2.0 / (rows + hidden))
    overall = float(np.sqrt(np.mean(std * std)))
    if not norms_a.size:  # every row is NaN or Inf: nothing to describe
        norms_a = np.full(1, np.nan)
    far = kept_a[norms_a > FAR_ROW_NORM * np.quantile(norms_a, 0.99)] if norms_a.size > 1 else kept_a[:0]
    return {
        "shape": list(info.shape),
        "dtype": info.dtype,
        "row_norm": {"mean": float(norms_a.mean()), "std": float(norms_a.std()), "min": float(norms_a.min()),
                     "median": float(np.median(norms_a)), "max": float(norms_a.max())},
        "zero_rows": int((norms_a == 0).sum()),
        "nonfinite_rows": len(bad_ids),
        "nonfinite_row_ids": bad_ids[:MAX_LISTED_ROWS],
        "far_rows": int(far.size),
        "far_row_ids": far[:MAX_LISTED_ROWS].tolist(),
        "dim_mean": {"mean_abs": float(np.abs(mean).mean()), "max_abs": float(np.abs(mean).max()),
                     "norm": float(np.linalg.norm(mean))},
        "dim_std": {"min": float(std.min()), "median": float(np.median(std)), "max": float(std.max()),
                    "rms": overall},
        "xavier_std": xavier,
        "std_over_xavier": overall / xavier,
    }


def zero_init_risk(ckpt_dir: str | os.PathLike, corpus: str | os.PathLike | None = None, *,
                   max_tokens: int = INSPECT_MAX_TOKENS, device: str = "auto", progress: Progress = SILENT) -> dict:
    """log Z of the output softmax over a corpus, and the KL one zero-initialized token would cause.

    `progress` hears the stage "loading the model" and the count "log Z" (corpus tokens run).

    Returns:
        {"log_z": {mean, min, max, p1}, "zero_init_kl": {mean, p99, max}, "positions", "corpus",
        "verdict": "safe" | "caution" | "dangerous", "explanation": plain words}.
    """
    text, name = read_corpus(corpus)
    tok = load_tokenizer(ckpt_dir)
    ids = encode(tok, text)
    kind = model_kind(ckpt_dir)
    if not kind.has_logits:
        return {"applicable": False, "reason": kind.reason, "corpus": name, "positions": 0, "log_z": None,
                "zero_init_kl": None, "verdict": None, "explanation": f"not measured: {kind.reason}"}
    progress.stage("loading the model")
    with loaded_model(ckpt_dir, device, kind) as model:
        seqs = corpus_windows(ids, model.prefix(tok), context_length(model), max_tokens)
        advance = progress.count("log Z", sum(len(s) for s in seqs), "tok")
        parts = []
        for s in seqs:
            parts.append(model.logits(s).double().logsumexp(-1).numpy())
            advance(len(s))
        log_z = np.concatenate(parts)
    if not np.isfinite(log_z).all():  # NaN/Inf rows (listed with the matrices) make every output NaN
        why = "the model's outputs hold NaN or Inf (see the rows listed above)"
        return {"applicable": False, "reason": why, "corpus": name, "positions": int(log_z.size), "log_z": None,
                "zero_init_kl": None, "verdict": None, "explanation": f"not measured: {why}"}
    kl = kl_added_mass(-log_z)  # one token with logit 0 adds mass 1: log(1 + 1/Z)
    verdict, words = _verdict(float(kl.mean()), float(kl.max()))
    return {
        "applicable": True,
        "corpus": name,
        "positions": int(log_z.size),
        "log_z": {"mean": float(log_z.mean()), "min": float(log_z.min()), "p1": float(np.quantile(log_z, 0.01)),
                  "max": float(log_z.max())},
        "zero_init_kl": {k: v for k, v in kl_figures(kl).items() if k != "positions"},
        "verdict": verdict,
        "explanation": words,
    }


def _verdict(mean: float, mx: float) -> tuple[str, str]:
    if mean >= DANGEROUS_MEAN_KL or mx >= DANGEROUS_MAX_KL:
        return "dangerous", (
            "dangerous, like GPT-2 small: the logits are large and negative, so a token initialized with zeros "
            f"would take much of the probability (KL up to {mx:.3g} nats per position); use --init mean"
        )
    if mx < SAFE_MAX_KL:
        return "safe", (
            "safe, like GPT-2 large: the partition function is large, so even a zero-initialized token "
            f"barely changes the predictions (KL at most {mx:.2g} nats); mean init is still the default"
        )
    return "caution", (
        f"caution: one zero-initialized token would cost up to {mx:.3g} nats of KL per position, and k of them "
        "up to k times that; prefer --init mean"
    )


def inspect_checkpoint(path: str | os.PathLike, corpus: str | os.PathLike | None = None, *,
                       max_tokens: int = INSPECT_MAX_TOKENS, device: str = "auto", run_model: bool = True,
                       revision: str | None = None, token: str | None = None, progress: Progress | None = None) -> dict:
    """Describe a checkpoint before surgery; changes nothing.

    Args:
        path: a Hugging Face checkpoint directory, or a Hub repo id (`org/name`) whose safetensors
            checkpoint is downloaded into the Hub cache, as `add_tokens` does.
        corpus: text for the zero-init risk (None: the packaged default corpus).
        max_tokens: corpus tokens run through the model.
        device: "auto", "cpu" or "cuda".
        run_model: False skips the zero-init risk (no model is loaded).
        revision, token: the Hub revision and token when `path` is a repo id (token None: HF_TOKEN or
            the stored login).
        progress: `progress.Progress` callbacks of the model run (`zero_init_risk`); none by default.

    Returns:
        A dict with `path` (the repo id, else the directory), `source` (repo id, revision and commit),
        `architecture`, `tied`, `dtype`, `rows`, `tokenizer_size`, `config_vocab_size`,
        `padding_rows`, `matrices` (statistics per vocabulary matrix) and `zero_init_risk`.

    Raises:
        InputError: the checkpoint cannot be used, or the repo id cannot be pulled.

    Example:
        >>> r = inspect_checkpoint("ckpt/", max_tokens=512)  # doctest: +SKIP
        >>> r["tied"], r["zero_init_risk"]["verdict"]  # doctest: +SKIP
        (True, 'safe')
    """
    from ..tokenizer.editor import TokenizerEditor

    source = resolve_checkpoint(path, revision=revision, token=token)
    ckpt = Checkpoint.open(source.path)
    lay = detect(ckpt)
    tok_size = TokenizerEditor(ckpt.path).size
    cfg_vocab = text_config(ckpt.config).get("vocab_size")
    matrices = {}
    for name in [lay.embedding] + ([lay.lm_head] if lay.lm_head and not lay.tied else []) + lay.extra:
        matrices[name] = matrix_stats(ckpt, name)
    ckpt.close()
    report = {
        "path": source.name,
        "source": source.to_dict(),
        "architecture": lay.architecture,
        "model_type": lay.model_type,
        "kind": lay.kind,
        "tied": lay.tied,
        "dtype": ckpt.tensors[lay.embedding].dtype,
        "embedding": lay.embedding,
        "lm_head": lay.lm_head or lay.embedding,
        "biases": lay.biases,
        "rows": lay.rows,
        "tokenizer_size": tok_size,
        "config_vocab_size": cfg_vocab,
        "padding_rows": lay.rows - tok_size,
        "matrices": matrices,
    }
    if run_model:
        risk = zero_init_risk(source.path, corpus, max_tokens=max_tokens, device=device,
                              progress=progress or SILENT)
        report["zero_init_risk"] = risk
        report["zero_init_kl"] = risk["zero_init_kl"]
    return report


def describe(report: dict) -> list[str]:
    """The inspect report in human-readable lines (what the CLI prints)."""
    r = report
    src = r.get("source") or {}
    where = Source(r["path"], src.get("repo_id"), src.get("revision"), src.get("commit")).describe()
    lines = [
        f"{where}: {r.get('kind', r['architecture'])}, {'tied' if r['tied'] else 'untied'} embeddings, {r['dtype']}",
        f"rows {r['rows']}, tokenizer {r['tokenizer_size']}, config vocab_size {r['config_vocab_size']}"
        + (f" ({r['padding_rows']} padding/reserved rows past the tokenizer)" if r["padding_rows"] > 0 else ""),
    ]
    for name, m in r["matrices"].items():
        lines.append(
            f"{name} {m['dtype']}{m['shape']}: row norm mean {m['row_norm']['mean']:.3g} "
            f"[{m['row_norm']['min']:.3g}, {m['row_norm']['max']:.3g}], per-dim std median "
            f"{m['dim_std']['median']:.3g}, {m['std_over_xavier']:.2g}x the Xavier std {m['xavier_std']:.2g}"
            + (f", {m['zero_rows']} zero rows" if m["zero_rows"] else "")
        )
        if m.get("nonfinite_rows"):
            more = ", ..." if m["nonfinite_rows"] > len(m["nonfinite_row_ids"]) else ""
            lines.append(f"WARNING: {name}: {m['nonfinite_rows']} row(s) hold NaN or Inf: ids "
                         f"{', '.join(map(str, m['nonfinite_row_ids']))}{more}")
        if m.get("far_rows"):
            more = ", ..." if m["far_rows"] > len(m["far_row_ids"]) else ""
            lines.append(f"WARNING: {name}: {m['far_rows']} row(s) with a norm over {FAR_ROW_NORM:g}x the 99th "
                         f"percentile of the others: ids {', '.join(map(str, m['far_row_ids']))}{more}")
    z = r.get("zero_init_risk")
    if z and not z["applicable"]:
        lines.append(f"zero-init risk {z['explanation']}")
    elif z:
        lines.append(
            f"log Z over {z['positions']} positions: mean {z['log_z']['mean']:.3g}, min {z['log_z']['min']:.3g}; "
            f"one zero-init token: KL mean {z['zero_init_kl']['mean']:.3g}, max {z['zero_init_kl']['max']:.3g} nats"
        )
        lines.append(f"zero init is {z['explanation']}")
    return lines
