"""Running models for the checks: loading (transformers, never remote code), devices, forward passes.

What validation and inspect both need, and nothing about pass or fail. transformers is imported
lazily: it costs seconds.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass


from .devices import load_dtype, resolve_device
from .errors import InputError
from .tokenizer.encoding import unpadded

logger = logging.getLogger(__name__)

MAX_WINDOW = 512  # tokens per forward pass; also capped by the model's context length


class NonFiniteOutput(Exception):
    """The model computed NaN or Inf logits (e.g. from NaN rows): sampling cannot go on."""


def _quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # "Loading weights" bars are not ours to show


def load_tokenizer(path: str | os.PathLike):
    """The checkpoint's tokenizer as a user gets it (AutoTokenizer), with padding and truncation off.

    A tokenizer.json may ship `"padding": {"strategy": {"Fixed": 128}}` and a truncation (as
    sentence-transformers models do): every encode of the checks must see the text's own ids.
    Never runs remote code.
    """
    _quiet_transformers()
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(path), trust_remote_code=False)
    except Exception as e:  # transformers raises many types; the message is what matters
        raise InputError(f"{path}: transformers cannot load the tokenizer ({e}); check the tokenizer files") from None
    return without_padding(tok)


def without_padding(tok):
    """A loaded transformers tokenizer with the padding and truncation of its tokenizer.json turned off."""
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is not None:
        unpadded(backend)  # what a tokenizer.json ships (sentence-transformers: Fixed 128) is not ours to apply
    return tok


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

    task: str | None  # causal, seq2seq, masked, encoder; None: transformers cannot build it
    class_name: str | None
    reason: str = ""  # why some checks cannot run

    @property
    def has_logits(self) -> bool:
        return self.task in ("causal", "seq2seq", "masked")

    @property
    def generates(self) -> bool:
        return self.task in ("causal", "seq2seq")


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
        if self.kind.task == "seq2seq":
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

        if self.kind.task == "seq2seq":
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
        """Seeded ancestral sampling from the full softmax (temperature 1, no top-k).

        Raises:
            NonFiniteOutput: the logits hold NaN or Inf.
        """
        import torch

        def pick(row) -> int:
            probs = row.double().softmax(-1).cpu()
            if not bool(torch.isfinite(probs).all()):
                raise NonFiniteOutput("the model's next-token probabilities hold NaN or Inf")
            return int(torch.multinomial(probs, 1, generator=gen))

        return self._decode(prompt, steps, pick)

    def greedy(self, prompt: list[int], steps: int, vocab: int | None = None, stop: set[int] | None = None) -> list[int]:
        """Greedy decoding over the first `vocab` logits (all when None), up to `steps` tokens or a `stop` id.

        With `vocab` = the old rows, an expanded model's answer on a prompt of old ids is the
        original model's answer: the hidden states are the same and the first columns are the
        old logits.
        """
        stop = stop or set()

        def pick(row) -> int:
            row = row[:vocab] if vocab is not None else row
            return int(row.float().argmax())

        return self._decode(prompt, steps, pick, stop)

    def _decode(self, prompt: list[int], steps: int, pick, stop: set[int] | frozenset = frozenset()) -> list[int]:
        """Generate up to `steps` tokens after `prompt`, each chosen by `pick(logits of the last position)`."""
        import torch

        out: list[int] = []
        with torch.inference_mode():
            if self.kind.task == "seq2seq":  # a few short steps: no cache needed
                for _ in range(steps):
                    out.append(pick(self.logits(prompt + out)[-1]))
                    if out[-1] in stop:
                        break
                return out
            past, x, seen = None, torch.tensor([prompt], device=self.device), len(prompt)
            arg = cache_argument(self.model)
            for _ in range(steps):
                mask = torch.ones((1, seen), dtype=torch.long, device=self.device)
                r = self.model(input_ids=x, attention_mask=mask, use_cache=True, **{arg: past})
                past = returned_cache(r)
                nxt = pick(r.logits[0, -1])
                out.append(nxt)
                if nxt in stop:
                    break
                x = torch.tensor([[nxt]], device=self.device)
                seen += 1
        return out


def cache_argument(model) -> str:
    """The keyword a model's forward takes its key/value cache by: `cache` in transformers 5 (where
    `past_key_values` is deprecated, with a warning on every call), `past_key_values` before."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def returned_cache(output):
    """The key/value cache a model's forward returned, under either name (see cache_argument)."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


@contextlib.contextmanager
def loaded_model(path: str | os.PathLike, device: str = "auto", kind: ModelKind | None = None,
                 remedy: str = "", dtype: str = "auto") -> Iterator[LoadedModel]:
    """Load a checkpoint for evaluation with its own transformers class, yield it, then free its memory.

    With `dtype` "auto", on a GPU the checkpoint's own dtype is kept and accelerate's `device_map="auto"`
    spreads the model over the GPUs, RAM and disk; on the CPU it runs in float32 (fast and exact there),
    still through `device_map="auto"` when accelerate is installed, so a model bigger than RAM is
    offloaded to disk. `dtype` "checkpoint" keeps the checkpoint's dtype on the CPU too (what a GPU
    runs, see devices.DTYPES); a dtype name loads in that dtype. `trust_remote_code` is never used.
    `remedy` ends the error messages: what the user can do instead (validation: skip the checks;
    --init fitted: another init).

    Raises:
        InputError: transformers cannot build the checkpoint, or leaves some of its weights
            uninitialized (its outputs would be random).
    """
    _quiet_transformers()
    import importlib.util

    import torch
    import transformers

    kind = kind or model_kind(path)
    if kind.task is None:
        raise InputError(f"{path}: {kind.reason}; validation needs a model class known to transformers "
                         f"(remote code is never run). {remedy}")
    cls = getattr(transformers, kind.class_name)
    dev = resolve_device(device)
    kwargs: dict = {"trust_remote_code": False, "dtype": load_dtype(dtype, dev)}
    with tempfile.TemporaryDirectory(prefix="vocabsurgeon-offload-") as offload:
        if importlib.util.find_spec("accelerate") is not None:
            kwargs.update(device_map="auto" if device == "auto" else dev, offload_folder=offload)
        try:
            model, info = cls.from_pretrained(str(path), output_loading_info=True, **kwargs)
        except Exception as e:  # missing weights, out of memory...
            raise InputError(
                f"{path}: transformers cannot load it as {kind.class_name} ({type(e).__name__}: {e}); {remedy}"
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
    """Ids of `text` without special tokens, padding or truncation (and without the long-sequence warning)."""
    return list(tok(text, add_special_tokens=False, padding=False, truncation=False, verbose=False).input_ids)


def special_ends(tok) -> tuple[list[int], list[int]]:
    """The special ids the tokenizer puts before and after a text ([CLS], [SEP] on BERT)."""
    body = encode(tok, "a")
    full = list(tok("a", add_special_tokens=True, truncation=False).input_ids)
    for i in range(len(full) - len(body) + 1):
        if full[i:i + len(body)] == body:
            return full[:i], full[i + len(body):]
    return [], []



def corpus_windows(ids: list[int], prefix: list[int], length: int, max_tokens: int | None = None) -> list[list[int]]:
    """Split corpus ids into sequences of at most `length` tokens, each starting with `prefix`,
    covering at most `max_tokens` corpus tokens (all of them when None)."""
    step = max(1, length - len(prefix))
    ids = ids if max_tokens is None else ids[:max_tokens]
    return [prefix + ids[i:i + step] for i in range(0, len(ids), step)]
