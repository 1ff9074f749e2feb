"""Validation of an expanded checkpoint against its original: KL, sampling, tokenization, usability.

The checks, all on a held-out corpus (default: `vocabsurgeon/data/corpus.txt`, a few KB of prose,
dialogue, numbers and code):

- KL spot check: the corpus is tokenized with the ORIGINAL tokenizer (so it holds no new token);
  at every position KL(p_old || p_new) is computed in float64 with logsumexp, p_new over the full
  new softmax. Mean init guarantees KL <= log(1 + k/n) (k new rows, n old rows of the output
  matrix). The old-vocabulary slice of the new logits must equal the old logits.
- Sampling check: seeded sampling from prompts without new words gives the fraction of generated
  tokens that are new (a broken expansion produces only new tokens); prompts that end in a new
  token show how often the model gets stuck repeating it (a tied row that predicts itself).
- Tokenization check: text without new words keeps its ids, each new word is one token, and the
  corpus decodes as the original tokenizer decodes it.
- Usability (reported, not pass/fail): bits per byte on the corpus paragraphs that contain new
  words, new model with new tokenization next to old model with old tokenization.

Models are loaded with transformers (never `trust_remote_code`), with `device_map="auto"` when
accelerate is installed, so a model bigger than a GPU or than RAM still validates. transformers
is imported lazily: it costs seconds.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from .errors import InputError, ValidationFailed
from .hub import resolve_checkpoints
from .init import kl_bound

logger = logging.getLogger(__name__)

REPORT_NAME = "vocabsurgeon_report.json"
DEFAULT_MAX_TOKENS = 2048  # corpus positions of the KL check (and tokens of the usability check)
MAX_WINDOW = 512  # tokens per forward pass; also capped by the model's context length
PLAIN_PROMPTS = (
    "The weather this morning was",
    "She opened the door and said",
    "In 2019 the company reported",
    "def main():\n    ",
)
NEW_WORD_PREFIXES = ("The next chapter is about", "They met", "Then", "Everyone talked about")
SAMPLE_STEPS = 24  # generated tokens per prompt
STUCK_RUN = 3  # this many copies of one new token in a row count as stuck
PLOT_EXTRA = "pip install 'vocabsurgeon[plot]'"


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


def read_corpus(path: str | os.PathLike | None = None) -> tuple[str, str]:
    """The validation text and its name: the file at `path`, or the packaged default corpus.

    Raises:
        InputError: the file cannot be read, is not UTF-8, or holds no text.
    """
    if path is None:
        return resources.files("vocabsurgeon").joinpath("data/corpus.txt").read_text(encoding="utf-8"), "default"
    p = Path(path)
    try:
        text = p.read_bytes().decode("utf-8")
    except OSError as e:
        raise InputError(f"{p}: cannot read the corpus ({e.strerror}); pass a UTF-8 text file to --corpus") from None
    except UnicodeDecodeError as e:
        raise InputError(f"{p}: invalid UTF-8 at byte {e.start}; save the corpus as UTF-8") from None
    if not text.strip():
        raise InputError(f"{p}: the corpus is empty; pass a file with some text to --corpus")
    return text, str(p)


def require_plot() -> None:
    """Check that matplotlib (the 'plot' extra) is importable, before any long work.

    Raises:
        InputError: it is not installed; the message says how to install it.
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InputError(f"--plot needs matplotlib, which is not installed; install the extra: {PLOT_EXTRA}") from None


def write_kl_plot(kl: np.ndarray, bound: float | None, path: str | os.PathLike, title: str = "") -> Path:
    """Write a histogram of per-position KL (log-scaled axis) to `path`, with the mean-init bound."""
    require_plot()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kl = np.asarray(kl, dtype=np.float64)
    floor = 1e-12  # exact zeros (identical distributions) are drawn at the floor
    vals = np.maximum(kl, floor)
    lo, hi = math.log10(vals.min()), math.log10(max(vals.max(), (bound or floor) * 1.5))
    bins = np.logspace(lo - 0.1, hi + 0.1, 50)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.hist(vals, bins=bins, color="#4477aa")
    ax.set_xscale("log")
    ax.set_xlabel("KL(p_old || p_new) per position (nats)")
    ax.set_ylabel("positions")
    if bound:
        ax.axvline(bound, color="#cc3311", linestyle="--", label=f"mean-init bound log(1+k/n) = {bound:.3g}")
    ax.axvline(max(float(kl.mean()), floor), color="#228833", label=f"mean = {kl.mean():.3g}")
    ax.legend()
    ax.set_title(title or "KL between the original and the expanded model")
    fig.tight_layout()
    out = Path(path)
    try:
        fig.savefig(out, dpi=100)
    except OSError as e:
        raise InputError(f"{out}: cannot write the plot ({e.strerror}); choose another --plot path") from None
    finally:
        plt.close(fig)
    return out


# ---------------------------------------------------------------- models and tokenizers


def _quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bars are not ours to show


def load_tokenizer(path: str | os.PathLike):
    """The checkpoint's tokenizer as a user gets it (AutoTokenizer); never runs remote code."""
    _quiet_transformers()
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
    except Exception as e:  # transformers raises many types; the message is what matters
        raise InputError(f"{path}: transformers cannot load the tokenizer ({e}); check the tokenizer files") from None


def resolve_torch_device(device: str = "auto") -> str:
    """"auto" is CUDA when torch sees a GPU, else "cpu"; asking for "cuda" without one is an error."""
    import torch

    if device not in ("auto", "cpu") and not device.startswith("cuda"):
        raise InputError(f"--device {device!r} is not one of auto, cpu, cuda")
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError("--device cuda was asked for but no CUDA device is available; use --device cpu or auto")
    return device


# ---------------------------------------------------------------- what the model computes

# The kinds of model the checks know, read from transformers' own auto mappings, never guessed
# from names:
#   causal   next-token logits: decoder-only LMs, and image-text models run on text alone
#   seq2seq  decoder logits with the encoder fed one end-of-sequence token, so the decoder runs
#            as a plain LM (an encoder input holding the text would let it copy)
#   masked   logits at every position of the unmasked text (BERT's MLM head): KL, no sampling
#   encoder  no language-model head (a sentence-transformers body): hidden states must not move
_KIND_MAPPINGS = (
    ("causal", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
    ("seq2seq", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"),
    ("causal", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES"),
    ("masked", "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
    ("encoder", "MODEL_MAPPING_NAMES"),
)


@dataclass(frozen=True)
class ModelKind:
    """What a checkpoint's transformers class computes, which decides the checks that apply."""

    kind: str | None  # causal, seq2seq, masked, encoder; None: transformers cannot build it
    class_name: str | None
    reason: str = ""  # why some checks cannot run

    @property
    def has_logits(self) -> bool:
        return self.kind in ("causal", "seq2seq", "masked")

    @property
    def generates(self) -> bool:
        return self.kind in ("causal", "seq2seq")


def _class_names(mapping: dict) -> dict[str, tuple[str, ...]]:
    return {mt: (v,) if isinstance(v, str) else tuple(v) for mt, v in mapping.items()}


def model_kind(path: str | os.PathLike) -> ModelKind:
    """The transformers class of a checkpoint and its kind, without loading weights or remote code.

    The class is the first of config.json's `architectures` that transformers has; without one,
    the first auto mapping (causal, seq2seq, image-text, masked, base) that knows the model type.
    """
    _quiet_transformers()
    import transformers
    from transformers import AutoConfig
    from transformers.models.auto import modeling_auto

    try:
        cfg = AutoConfig.from_pretrained(str(path), trust_remote_code=False)
    except Exception as e:  # unknown model type, remote code only, broken config
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return ModelKind(None, None, f"transformers cannot build this model ({first})")
    table = [(kind, _class_names(getattr(modeling_auto, attr, {}))) for kind, attr in _KIND_MAPPINGS]
    for arch in [a for a in (getattr(cfg, "architectures", None) or []) if hasattr(transformers, a)]:
        for kind, names in table:
            if any(arch in v for v in names.values()):
                reason = "" if kind != "encoder" else f"{arch} has no language-model head"
                return ModelKind(kind, arch, reason)
    for kind, names in table:
        for name in names.get(cfg.model_type, ()):
            if hasattr(transformers, name):
                reason = "" if kind != "encoder" else f"{name} has no language-model head"
                return ModelKind(kind, name, reason)
    return ModelKind(None, None, f"transformers has no model class for model type {cfg.model_type!r}")


class LoadedModel:
    """A model loaded for evaluation, with the forward passes the checks need for its kind."""

    def __init__(self, model, kind: ModelKind, missing: list[str] | None = None):
        self.model, self.kind = model, kind
        self.missing = missing or []  # weights the checkpoint lacks (randomly initialized)
        cfg = model.config
        eos = getattr(cfg, "eos_token_id", None)
        eos = eos[0] if isinstance(eos, list) else eos
        self._encoder_ids = [eos if eos is not None else (getattr(cfg, "pad_token_id", None) or 0)]

    @property
    def device(self):
        return self.model.get_input_embeddings().weight.device

    @property
    def dtype(self) -> str:
        return str(self.model.dtype).replace("torch.", "")

    def prefix(self, tok) -> list[int]:
        """What each evaluated sequence starts with: the decoder start token (seq2seq), the BOS
        token, the CLS token (masked LMs), else the encoding of a newline."""
        if self.kind.kind == "seq2seq":
            start = getattr(self.model.config, "decoder_start_token_id", None)
            if start is not None:
                return [start]
        for attr in ("bos_token_id", "cls_token_id"):
            t = getattr(tok, attr, None)
            if t is not None:
                return [t]
        return encode(tok, "\n")

    def _forward(self, x, **kwargs):
        import torch

        if self.kind.kind == "seq2seq":
            enc = torch.tensor([self._encoder_ids], device=x.device)
            return self.model(input_ids=enc, attention_mask=torch.ones_like(enc), decoder_input_ids=x, **kwargs)
        return self.model(input_ids=x, attention_mask=torch.ones_like(x), **kwargs)

    def logits(self, ids: list[int]):
        """Float32 logits (len(ids), vocab) of one sequence, on the CPU."""
        import torch

        x = torch.tensor([ids], device=self.device)
        extra = {"use_cache": False} if self.kind.generates else {}
        with torch.inference_mode():
            return self._forward(x, **extra).logits[0].float().cpu()

    def hidden(self, ids: list[int]):
        """Float32 last hidden states (len(ids), hidden) of one sequence, on the CPU (encoders)."""
        import torch

        x = torch.tensor([ids], device=self.device)
        with torch.inference_mode():
            return self._forward(x).last_hidden_state[0].float().cpu()

    def sample(self, prompt: list[int], steps: int, gen) -> list[int]:
        """Seeded ancestral sampling from the full softmax (temperature 1, no top-k)."""
        import torch

        out: list[int] = []
        with torch.inference_mode():
            if self.kind.kind == "seq2seq":  # a few short steps: no cache needed
                for _ in range(steps):
                    probs = self.logits(prompt + out)[-1].double().softmax(-1)
                    out.append(int(torch.multinomial(probs, 1, generator=gen)))
                return out
            past, x, seen = None, torch.tensor([prompt], device=self.device), len(prompt)
            for _ in range(steps):
                mask = torch.ones((1, seen), dtype=torch.long, device=self.device)
                r = self.model(input_ids=x, attention_mask=mask, past_key_values=past, use_cache=True)
                past = r.past_key_values
                probs = r.logits[0, -1].double().softmax(-1).cpu()
                nxt = int(torch.multinomial(probs, 1, generator=gen))
                out.append(nxt)
                x = torch.tensor([[nxt]], device=self.device)
                seen += 1
        return out


@contextlib.contextmanager
def loaded_model(path: str | os.PathLike, device: str = "auto", kind: ModelKind | None = None) -> Iterator[LoadedModel]:
    """Load a checkpoint for evaluation with its own transformers class, yield it, then free its memory.

    On a GPU the checkpoint's own dtype is kept and accelerate's `device_map="auto"` spreads the
    model over the GPUs, RAM and disk; on the CPU it runs in float32 (fast and exact there), still
    through `device_map="auto"` when accelerate is installed, so a model bigger than RAM is
    offloaded to disk. `trust_remote_code` is never used.

    Raises:
        InputError: transformers cannot build the checkpoint, or leaves some of its weights
            uninitialized (its outputs would be random).
    """
    _quiet_transformers()
    import importlib.util

    import torch
    import transformers

    kind = kind or model_kind(path)
    if kind.kind is None:
        raise InputError(f"{path}: {kind.reason}; validation needs a model class known to transformers "
                         "(remote code is never run). Pass --no-validate to skip the checks")
    cls = getattr(transformers, kind.class_name)
    dev = resolve_torch_device(device)
    kwargs: dict = {"trust_remote_code": False, "dtype": "auto" if dev.startswith("cuda") else torch.float32}
    with tempfile.TemporaryDirectory(prefix="vocabsurgeon-offload-") as offload:
        if importlib.util.find_spec("accelerate") is not None:
            kwargs.update(device_map="auto" if device == "auto" else dev, offload_folder=offload)
        try:
            model, info = cls.from_pretrained(str(path), output_loading_info=True, **kwargs)
        except Exception as e:  # missing weights, out of memory...
            raise InputError(
                f"{path}: transformers cannot load it as {kind.class_name} ({type(e).__name__}: {e}); "
                "Pass --no-validate to skip the checks"
            ) from None
        missing = sorted(info.get("missing_keys") or [])
        if missing:  # e.g. a sentence-transformers body without BERT's pooler: harmless for what is compared
            logger.warning("%s: the checkpoint does not hold %d weight(s) of %s (e.g. %s); transformers "
                           "initializes them at random", path, len(missing), kind.class_name, missing[0])
        if "device_map" not in kwargs and dev != "cpu":
            model = model.to(dev)
        model.eval()
        try:
            yield LoadedModel(model, kind, missing)
        finally:
            del model
            if torch.cuda.is_available():  # hand the GPU memory back before the next model loads
                gc.collect()  # (seconds in a big process, so only where it matters)
                torch.cuda.empty_cache()


def context_length(model: LoadedModel) -> int:
    """Tokens per forward pass: the model's context length, capped at MAX_WINDOW."""
    config = model.model.config
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    n = None
    for key in ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length"):
        n = getattr(cfg, key, None)
        if isinstance(n, int) and n > 0:
            break
    return min(MAX_WINDOW, n) if isinstance(n, int) and n > 0 else MAX_WINDOW


def encode(tok, text: str) -> list[int]:
    """Ids of `text` without special tokens (and without the long-sequence warning)."""
    return list(tok(text, add_special_tokens=False, verbose=False).input_ids)


def corpus_windows(ids: list[int], prefix: list[int], length: int, max_tokens: int | None = None) -> list[list[int]]:
    """Split corpus ids into sequences of at most `length` tokens, each starting with `prefix`,
    covering at most `max_tokens` corpus tokens (all of them when None)."""
    step = max(1, length - len(prefix))
    ids = ids if max_tokens is None else ids[:max_tokens]
    return [prefix + ids[i:i + step] for i in range(0, len(ids), step)]


def kl_per_position(old_logits, new_logits) -> np.ndarray:
    """KL(p_old || p_new) at each position, float64 with logsumexp; p_new over the full new vocabulary.

    old_logits: (T, n); new_logits: (T, n + k), whose first n columns are the old vocabulary.
    """
    lo = old_logits.double()
    ln = new_logits.double()
    n = lo.shape[-1]
    lp_old = lo - lo.logsumexp(-1, keepdim=True)  # (T, n)
    lp_new = ln[:, :n] - ln.logsumexp(-1, keepdim=True)  # (T, n)
    kl = (lp_old.exp() * (lp_old - lp_new)).sum(-1)
    return np.maximum(kl.numpy(), 0.0)  # rounding can give -1e-17 for identical distributions


# ---------------------------------------------------------------- the checks


def tokenization_check(old_tok, new_tok, text: str, n_old: int, new_ids: list[int]) -> dict:
    """Invariants of the edited tokenizer, on the corpus and on each new token.

    Paragraphs without new tokens must keep their ids; every new word must be one token, at a
    sentence start and after a space; every paragraph must decode as under the original tokenizer.
    """
    paragraphs = [p for p in text.split("\n\n") if p.strip()]
    changed, round_trip, with_new = [], [], 0
    for i, p in enumerate(paragraphs):
        a, b = encode(old_tok, p), encode(new_tok, p)
        if any(t >= n_old for t in b):
            with_new += 1
        elif a != b:
            changed.append(i)
        if new_tok.decode(b) != old_tok.decode(a):
            round_trip.append(i)
    special = set(getattr(new_tok, "all_special_ids", []) or [])
    # Added special tokens (--special) are not in all_special_ids in transformers 5; they stand alone.
    special |= {i for i, t in (getattr(new_tok, "added_tokens_decoder", None) or {}).items() if t.special}
    words, not_one = {}, []
    for t in new_ids:
        form = new_tok.decode([t])
        w = form.strip()
        if not w or w in words:
            continue
        words[w] = t
        forms = (w,) if t in special else (w, " " + w)
        bad = [f for f in forms if len(encode(new_tok, f)) != 1]
        if bad:
            not_one.append({"word": w, "form": bad[0], "ids": encode(new_tok, bad[0])})
    return {
        "paragraphs": len(paragraphs),
        "paragraphs_with_new_tokens": with_new,
        "old_text_ids_changed": len(changed),
        "new_words": len(words),
        "one_token_words": len(words) - len(not_one),
        "not_one_token": not_one[:20],
        "round_trip_failures": len(round_trip),
        "passed": not changed and not not_one and not round_trip,
    }


def _bits(model: LoadedModel, seqs: list[list[int]], start: int, n_old: int | None = None) -> tuple[float, float, int]:
    """Total bits of predicting each token after position `start` of each sequence; also the
    bits and count of those that are new tokens (id >= n_old)."""
    import torch

    total = new_bits = 0.0
    new_count = 0
    for s in seqs:
        lp = model.logits(s).double().log_softmax(-1)  # (T, vocab)
        nxt = np.asarray(s[start:])
        rows = torch.arange(start - 1, len(s) - 1)
        bits = -lp[rows, torch.as_tensor(nxt)].numpy() / math.log(2)  # (T - start,)
        total += float(bits.sum())
        if n_old is not None:
            is_new = nxt >= n_old
            new_bits += float(bits[is_new].sum())
            new_count += int(is_new.sum())
    return total, new_bits, new_count


def _usability_texts(text: str, new_tok, n_old: int, max_tokens: int) -> list[str]:
    out, used = [], 0
    for p in (p for p in text.split("\n\n") if p.strip()):
        ids = encode(new_tok, p)
        if any(t >= n_old for t in ids) and used < max_tokens:
            out.append(p)
            used += len(ids)
    return out


def _longest_new_run(ids: list[int], n_old: int) -> int:
    best = run = 0
    prev = None
    for t in ids:
        run = run + 1 if (t >= n_old and t == prev) else (1 if t >= n_old else 0)
        best = max(best, run)
        prev = t
    return best


def sampling_check(model: LoadedModel, old_tok, n_old: int, new_ids: list[int], seed: int, window: int,
                   max_prompts: int = 4) -> dict:
    """Seeded samples: the fraction of new tokens after plain prompts, and how often a prompt ending
    in a new token makes the model repeat it."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    prefix = model.prefix(old_tok)
    plain_total = plain_new = 0
    plain_examples = []
    for p in PLAIN_PROMPTS:
        ids = prefix + encode(old_tok, p)
        steps = max(0, min(SAMPLE_STEPS, window - len(ids)))
        got = model.sample(ids, steps, gen)
        plain_total += len(got)
        plain_new += sum(t >= n_old for t in got)
        plain_examples.append(got)
    picks = _spread(new_ids, max_prompts)
    stuck = 0
    follow = repeat = 0
    self_probs = []
    for j, t in enumerate(picks):
        ids = prefix + encode(old_tok, NEW_WORD_PREFIXES[j % len(NEW_WORD_PREFIXES)]) + [t]
        steps = max(0, min(SAMPLE_STEPS, window - len(ids)))
        lg = model.logits(ids).double()
        self_probs.append(float(lg[-1].softmax(-1)[t]))
        got = model.sample(ids, steps, gen)
        seq = [t] + got
        if _longest_new_run(seq, n_old) >= STUCK_RUN:
            stuck += 1
        for a, b in zip(seq, seq[1:]):
            if a >= n_old:
                follow += 1
                repeat += a == b
    return {
        "applicable": True,
        "seed": seed,
        "prompts": len(PLAIN_PROMPTS),
        "tokens": plain_total,
        "new_token_fraction": plain_new / plain_total if plain_total else 0.0,
        "new_word_prompts": len(picks),
        "stuck_fraction": stuck / len(picks) if picks else 0.0,
        "self_repeat_rate": repeat / follow if follow else 0.0,
        "self_prediction_prob_mean": float(np.mean(self_probs)) if self_probs else 0.0,
    }


def _spread(ids: list[int], m: int) -> list[int]:
    """Up to m ids spread evenly over `ids`."""
    if len(ids) <= m:
        return list(ids)
    return [ids[round(i * (len(ids) - 1) / (m - 1))] for i in range(m)] if m > 1 else [ids[0]]


def _vocab_rows(path: Path) -> int:
    """Rows of the output softmax from config.json (text_config when nested)."""
    from .architectures import text_config
    from .checkpoint import read_json

    cfg_path = path / "config.json"
    if not cfg_path.is_file():
        raise InputError(f"{cfg_path}: missing; pass a Hugging Face checkpoint directory")
    v = text_config(read_json(cfg_path)).get("vocab_size")
    if not isinstance(v, int) or v < 1:
        raise InputError(f"{cfg_path}: no integer vocab_size; cannot tell old rows from new ones")
    return v


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
    plot: str | os.PathLike | None = None,
    progress: Callable[[str], None] | None = None,
    revision: str | None = None,
    token: str | None = None,
) -> dict:
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
        plot: write a histogram of per-position KL there (needs matplotlib).
        progress: called with a short description of each stage.
        revision: the Hub revision of whichever of `base` and `new` is a repo id (of both when both
            are); refused when both are local directories.
        token: the Hub token (None: HF_TOKEN or the stored login).

    Returns:
        A dict: `passed`, `failures` (why not, in words), `kl` (mean, p99, max, bound, ...),
        `old_logits`, `sampling`, `tokenization`, `usability`, `thresholds`, `sources` (repo id,
        revision and commit of each checkpoint from the Hub). See README.md.

    Raises:
        InputError: a checkpoint or the corpus cannot be used, or a repo id cannot be pulled.

    Example:
        >>> r = validate_checkpoint("ckpt/", "out/", max_tokens=512)  # doctest: +SKIP
        >>> r["passed"], r["kl"]["mean"] <= r["kl"]["bound"]  # doctest: +SKIP
        (True, True)
    """
    th = thresholds or Thresholds()
    say = progress or (lambda s: None)
    if max_tokens < 1:
        raise InputError("--max-tokens must be a positive integer")
    if plot is not None:
        require_plot()
    sources = dict(zip(("base", "new"), resolve_checkpoints([base, new], revision=revision, token=token)))
    names = {key: s.name for key, s in sources.items()}  # the repo id, else the directory
    base, new = sources["base"].path, sources["new"].path
    n, rows_new = _vocab_rows(base), _vocab_rows(new)
    k = rows_new - n
    if k <= 0:
        raise InputError(
            f"{names['new']}: vocab_size is {rows_new}, not more than the {n} of {names['base']}; pass the original "
            "first and the expanded checkpoint second"
        )
    text, corpus_name = read_corpus(corpus)
    say("tokenizers")
    old_tok, new_tok = load_tokenizer(base), load_tokenizer(new)
    if new_token_ids is None:
        new_token_ids = sorted(i for i in new_tok.get_vocab().values() if i >= n)
    new_token_ids = [i for i in new_token_ids if n <= i < rows_new]
    tokenization = tokenization_check(old_tok, new_tok, text, n, new_token_ids)
    corpus_ids = encode(old_tok, text)
    usable = _usability_texts(text, new_tok, n, max_tokens)
    kind = model_kind(base)
    bound = kl_bound(k, n)
    m = _ModelFigures()
    if kind.kind is not None:
        m = _run_models(base, new, kind, device, old_tok, new_tok, corpus_ids, usable, n, rows_new,
                        new_token_ids, seed, max_tokens, say)
    skipped = _skipped(kind)
    for what in skipped:
        logger.warning("%s: %s", new, what)

    kl = m.kl
    lim_mean, lim_p99 = max(th.max_kl_mean, bound), max(th.max_kl_p99, bound)
    tol_rel = th.old_logits_tolerance
    if tol_rel is None:
        tol_rel = 1e-2 if m.dtype in ("bfloat16", "float16") else 1e-4
    tol = tol_rel * max(1.0, m.max_out)
    na = {"applicable": False, "reason": kind.reason}
    report = {
        "passed": False,
        "failures": [],
        "complete": not skipped,
        "skipped": skipped,
        **names,
        "sources": {key: s.to_dict() for key, s in sources.items()},
        "model": {"kind": kind.kind, "class": kind.class_name, "missing_weights": m.missing},
        "corpus": {"name": corpus_name, "bytes": len(text.encode("utf-8")), "tokens": len(corpus_ids),
                   "positions": int(kl.size) if kl is not None else 0},
        "device": m.device,
        "dtype": m.dtype,
        "vocab": {"old_rows": n, "new_rows": rows_new, "k": k, "new_tokens": len(new_token_ids)},
        "kl": {**na, "mean": None, "p99": None, "max": None, "bound": bound, "within_bound": None, "positions": 0,
               "limit_mean": lim_mean, "limit_p99": lim_p99} if kl is None else {
            "applicable": True,
            "mean": float(kl.mean()) if kl.size else 0.0,
            "p99": float(np.quantile(kl, 0.99)) if kl.size else 0.0,
            "max": float(kl.max()) if kl.size else 0.0,
            "bound": bound,
            "within_bound": bool(kl.size == 0 or kl.max() <= bound * (1 + 1e-6) + 1e-12),
            "positions": int(kl.size),
            "limit_mean": lim_mean,
            "limit_p99": lim_p99,
        },
        "old_logits": {**na, "what": None, "unchanged": None, "max_abs_diff": None, "tolerance": None}
        if m.what is None else {"applicable": True, "what": m.what, "unchanged": m.max_diff <= tol,
                                "max_abs_diff": m.max_diff, "tolerance": tol},
        "sampling": {**(m.sampling or {**na, "new_token_fraction": None, "stuck_fraction": None}),
                     "limit_new_token_fraction": th.max_new_token_fraction,
                     "limit_stuck_fraction": th.max_stuck_fraction},
        "tokenization": tokenization,
        "usability": _usability_report(usable, m.old_bits, m.new_bits) if m.sampling else {
            **na, "paragraphs": 0, "bytes": 0, "bpb_old": None, "bpb_new": None, "new_tokens_seen": 0,
            "new_token_bits_mean": None},
        "thresholds": asdict(th),
    }
    report["failures"] = _failures(report)
    report["passed"] = not report["failures"]
    if plot is not None and kl is not None:
        write_kl_plot(kl, bound, plot, title=f"{Path(names['new']).name}: KL per position ({kl.size} positions)")
        report["plot"] = str(plot)
    logger.info("validation of %s: %s", new, "passed" if report["passed"] else "; ".join(report["failures"]))
    return report


def _skipped(kind: ModelKind) -> list[str]:
    """The checks that cannot run for this kind of model, each with the reason."""
    why = kind.reason
    if kind.kind is None:
        return [f"model checks skipped (KL, old logits, sampling, usability): {why}"]
    if kind.kind == "encoder":
        return [f"KL, sampling and usability skipped: {why}; checked that the hidden states of old text "
                "are unchanged instead"]
    if kind.kind == "masked":
        return [f"sampling and usability skipped: {kind.class_name} is a masked language model and does not "
                "generate text"]
    return []


@dataclass
class _ModelFigures:
    """What running the two models measured; None where the kind of model does not allow it."""

    kl: np.ndarray | None = None  # KL(p_old || p_new) per position
    what: str | None = None  # "logits" or "hidden states": the old outputs that must not move
    max_diff: float = 0.0  # max |new - old| of those outputs
    max_out: float = 0.0  # max |old output|, the scale of the tolerance
    sampling: dict | None = None
    old_bits: tuple = (0.0, 0.0, 0)
    new_bits: tuple = (0.0, 0.0, 0)
    dtype: str | None = None
    device: str | None = None
    missing: list[str] = field(default_factory=list)  # weights the checkpoint lacks, random in both loads


def _run_models(base: Path, new: Path, kind: ModelKind, device: str, old_tok, new_tok, corpus_ids: list[int],
                usable: list[str], n: int, rows_new: int, new_token_ids: list[int], seed: int, max_tokens: int,
                say) -> _ModelFigures:
    """Run the original model, then the expanded one, on the same inputs; compare what applies to `kind`."""
    m = _ModelFigures(what="logits" if kind.has_logits else "hidden states")
    say(f"original model ({base})")
    with loaded_model(base, device, kind) as model:
        prefix, window = model.prefix(old_tok), context_length(model)
        seqs = corpus_windows(corpus_ids, prefix, window, max_tokens)
        forward = model.logits if kind.has_logits else model.hidden
        old_out = [forward(s) for s in seqs]  # (T, n) logits or (T, hidden) states per window
        m.dtype, m.device, m.missing = model.dtype, str(model.device), model.missing
        if kind.has_logits and old_out and old_out[0].shape[-1] != n:
            raise InputError(f"{base}: the model has {old_out[0].shape[-1]} output rows but config says {n}")
        if kind.generates:
            m.old_bits = _bits(model, [w for p in usable for w in corpus_windows(
                encode(old_tok, p), prefix, window)], len(prefix))

    say(f"expanded model ({new})")
    with loaded_model(new, device, kind) as model:
        forward = model.logits if kind.has_logits else model.hidden
        kls = []
        for s, lo in zip(seqs, old_out):
            ln = forward(s)
            if kind.has_logits:
                if ln.shape[-1] != rows_new:
                    raise InputError(f"{new}: the model has {ln.shape[-1]} output rows but config says {rows_new}")
                kls.append(kl_per_position(lo, ln))
                ln = ln[:, :n]
            m.max_diff = max(m.max_diff, float((ln - lo).abs().max()))
            m.max_out = max(m.max_out, float(lo.abs().max()))
        if kind.has_logits:
            m.kl = np.concatenate(kls) if kls else np.zeros(0)
        if kind.generates:
            say("sampling")
            m.sampling = sampling_check(model, old_tok, n, new_token_ids, seed, window)
            m.new_bits = _bits(model, [w for p in usable for w in corpus_windows(
                encode(new_tok, p), prefix, window)], len(prefix), n)
    return m


def _usability_report(usable: list[str], old_bits: tuple, new_bits: tuple) -> dict:
    if not usable:
        return {"applicable": False, "reason": "the corpus contains none of the new words; pass --corpus with "
                "text that uses them", "paragraphs": 0, "bytes": 0, "bpb_old": None, "bpb_new": None,
                "new_tokens_seen": 0, "new_token_bits_mean": None}
    nbytes = sum(len(p.encode("utf-8")) for p in usable)
    return {
        "applicable": True,
        "paragraphs": len(usable),
        "bytes": nbytes,
        "bpb_old": old_bits[0] / nbytes,  # original model, original tokenization
        "bpb_new": new_bits[0] / nbytes,  # expanded model, new tokenization
        "new_tokens_seen": new_bits[2],
        "new_token_bits_mean": new_bits[1] / new_bits[2] if new_bits[2] else None,
    }


def _failures(r: dict) -> list[str]:
    out = []
    kl, s, o = r["kl"], r["sampling"], r["old_logits"]
    if kl["applicable"] and kl["mean"] > kl["limit_mean"]:
        out.append(f"mean KL {kl['mean']:.4g} nats is over the limit {kl['limit_mean']:.4g} (--max-kl-mean)")
    if kl["applicable"] and kl["p99"] > kl["limit_p99"]:
        out.append(f"p99 KL {kl['p99']:.4g} nats is over the limit {kl['limit_p99']:.4g} (--max-kl-p99)")
    if o["applicable"] and not o["unchanged"]:
        what = "old-vocabulary logits" if o["what"] == "logits" else "hidden states of old text"
        out.append(f"{what} changed by up to {o['max_abs_diff']:.4g} (tolerance {o['tolerance']:.3g})"
                   + (f"; the checkpoint lacks {len(r['model']['missing_weights'])} weight(s) that transformers "
                      f"initializes at random, e.g. {r['model']['missing_weights'][0]!r}"
                      if r["model"]["missing_weights"] else ""))
    if s["applicable"] and s["new_token_fraction"] > s["limit_new_token_fraction"]:
        out.append(f"{s['new_token_fraction']:.0%} of tokens sampled after prompts without new words are new "
                   f"tokens (limit {s['limit_new_token_fraction']:.0%}, --max-new-token-fraction)")
    if s["applicable"] and s["stuck_fraction"] > s["limit_stuck_fraction"]:
        out.append(f"the model repeats a new token after {s['stuck_fraction']:.0%} of prompts ending in one "
                   f"(limit {s['limit_stuck_fraction']:.0%}, --max-stuck-fraction)")
    t = r["tokenization"]
    if t["old_text_ids_changed"]:
        out.append(f"{t['old_text_ids_changed']} corpus paragraph(s) without new words tokenize differently")
    if t["not_one_token"]:
        out.append(f"{len(t['not_one_token'])} new word(s) are not one token, e.g. {t['not_one_token'][0]['form']!r}")
    if t["round_trip_failures"]:
        out.append(f"{t['round_trip_failures']} corpus paragraph(s) decode differently from the original tokenizer")
    return out


def summary_lines(report: dict) -> list[str]:
    """The report in a few human-readable lines (what the CLI prints on stderr)."""
    kl, s, t, u, o = (report[key] for key in ("kl", "sampling", "tokenization", "usability", "old_logits"))
    lines = []
    if kl["applicable"]:
        lines.append(f"KL(p_old || p_new) over {kl['positions']} positions: mean {kl['mean']:.3g}, "
                     f"p99 {kl['p99']:.3g}, max {kl['max']:.3g} nats (mean-init bound {kl['bound']:.3g})")
    if o["applicable"]:
        what = "old-vocabulary logits" if o["what"] == "logits" else "hidden states of old text"
        lines.append(f"{what} {'unchanged' if o['unchanged'] else 'CHANGED'} (max diff {o['max_abs_diff']:.3g})")
    if s["applicable"]:
        lines.append(f"sampling: {s['new_token_fraction']:.1%} new tokens after plain prompts; stuck on a new "
                     f"token after {s['stuck_fraction']:.0%} of {s['new_word_prompts']} prompts")
    lines.append(f"tokenization: {t['one_token_words']}/{t['new_words']} new words one token, "
                 f"{t['old_text_ids_changed']} old paragraphs changed, {t['round_trip_failures']} round-trip failures")
    if u["applicable"]:
        lines.append(f"usability on {u['bytes']} bytes with new words: {u['bpb_new']:.3f} bits/byte "
                     f"(original: {u['bpb_old']:.3f}); new tokens cost {u['new_token_bits_mean'] or 0:.2f} bits each")
    elif s["applicable"]:
        lines.append("usability: not measured (the corpus has none of the new words)")
    lines += [f"WARNING: {w}" for w in report.get("skipped", [])]
    lines.append("PASSED" if report["passed"] else "FAILED: " + "; ".join(report["failures"]))
    return lines


def validate_added(result, corpus: str | os.PathLike | None = None, **kwargs) -> dict:
    """Validate what `apply` wrote (an `AddResult`) and store the report in its output.

    Writes `vocabsurgeon_report.json` into the output directory, which stays in place whatever
    the outcome.

    Raises:
        ValidationFailed: the checks failed; `.report` holds the figures, the message says why.
    """
    out = Path(result.out)
    ids = [t.id for t in result.plan.tokens.new]
    report = validate_checkpoint(result.plan.src, out, corpus, new_token_ids=ids, **kwargs)
    report["init"] = result.plan.to_dict()["init"]
    (out / REPORT_NAME).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if not report["passed"]:
        raise ValidationFailed(
            f"{out}: validation failed: {'; '.join(report['failures'])}. The output is kept for inspection; "
            f"see {out / REPORT_NAME}. Try --init mean, or pass --no-validate to skip the checks",
            report,
        )
    return report
