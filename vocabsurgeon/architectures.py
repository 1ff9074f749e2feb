"""The architecture table: where each model family keeps its vocabulary-sized tensors.

All model knowledge lives in `ARCHITECTURES`; no other module branches on `model_type`. A name
in the table matches a tensor called exactly that, or one that ends with "." + that name, so a
family's names also match inside wrappers (a multimodal `language_model.`, a bare base model).
Unknown families fall back to detection from tensor shapes and the config.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from .checkpoint import Checkpoint
from .errors import InputError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Architecture:
    """One family's vocabulary layout."""

    name: str
    model_types: tuple[str, ...]
    embedding: tuple[str, ...]  # candidate names of the input embedding, in priority order
    lm_head: tuple[str, ...] = ("lm_head.weight",)  # candidate names of the output matrix
    tie_default: bool = True  # when the config does not say tie_word_embeddings
    aliases: tuple[str, ...] = ()  # other on-disk names of the (tied) input embedding
    biases: tuple[str, ...] = ()  # vocabulary-sized biases of the output layer
    extra: tuple[str, ...] = ()  # other vocabulary-sized matrices (e.g. per-layer embeddings)
    notes: str = ""


_DECODER = ("model.embed_tokens.weight", "embed_tokens.weight")

ARCHITECTURES: tuple[Architecture, ...] = (
    Architecture("gpt2", ("gpt2",), ("transformer.wte.weight", "wte.weight")),
    Architecture("llama", ("llama",), _DECODER, tie_default=False),
    Architecture("mistral", ("mistral", "mixtral"), _DECODER, tie_default=False),
    Architecture("qwen2", ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"), _DECODER, tie_default=False,
                 notes="small sizes tie; the embedding is padded past the tokenizer size"),
    Architecture("gemma", ("gemma", "gemma2", "gemma3_text"), _DECODER,
                 extra=("embed_tokens_per_layer.weight",),
                 notes="embeddings are scaled by sqrt(hidden) at run time, not on disk"),
    Architecture("gpt_neox", ("gpt_neox",), ("gpt_neox.embed_in.weight", "embed_in.weight"),
                 lm_head=("embed_out.weight",), tie_default=False),
    Architecture("opt", ("opt",), ("model.decoder.embed_tokens.weight", "decoder.embed_tokens.weight")),
    Architecture("phi", ("phi",), _DECODER, tie_default=False, biases=("lm_head.bias",)),
    Architecture("bert", ("bert",), ("bert.embeddings.word_embeddings.weight", "embeddings.word_embeddings.weight"),
                 lm_head=("cls.predictions.decoder.weight",),
                 biases=("cls.predictions.bias", "cls.predictions.decoder.bias")),
    Architecture("t5", ("t5", "mt5", "umt5"), ("shared.weight",),
                 aliases=("encoder.embed_tokens.weight", "decoder.embed_tokens.weight")),
)

BY_MODEL_TYPE = {mt: a for a in ARCHITECTURES for mt in a.model_types}


@dataclass
class VocabLayout:
    """The vocabulary-sized tensors of one checkpoint, as found on disk."""

    architecture: str  # a family name from the table, or "unknown"
    embedding: str
    lm_head: str | None  # None when tied and only the embedding is stored
    tied: bool
    rows: int  # rows of the embedding on disk
    aliases: list[str] = field(default_factory=list)  # hold the same matrix as `embedding`
    biases: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)
    vocab_keys: list[tuple[str, ...]] = field(default_factory=list)  # config paths of vocab_size

    @property
    def matrices(self) -> list[str]:
        """Every vocabulary-sized 2-D tensor on disk."""
        names = [self.embedding, *self.aliases]
        if self.lm_head:
            names.append(self.lm_head)
        return names + self.extra

    @property
    def all_tensors(self) -> list[str]:
        return self.matrices + self.biases


def text_config(config: dict) -> dict:
    """The config that describes the language model: `text_config` when nested, else the config."""
    tc = config.get("text_config")
    return tc if isinstance(tc, dict) else config


def _vocab_keys(config: dict) -> list[tuple[str, ...]]:
    keys = []
    if "vocab_size" in config:
        keys.append(("vocab_size",))
    tc = config.get("text_config")
    if isinstance(tc, dict) and "vocab_size" in tc:
        keys.append(("text_config", "vocab_size"))
    return keys


def _find(ckpt: Checkpoint, candidates: tuple[str, ...], exclude: set[str] = frozenset()) -> str | None:
    for cand in candidates:
        hits = [n for n in ckpt.tensors if n not in exclude and (n == cand or n.endswith("." + cand))]
        if len(hits) == 1:
            return hits[0]
        exact = [n for n in hits if n == cand]
        if exact:
            return exact[0]
    return None


def detect(ckpt: Checkpoint, embedding_key: str | None = None, lm_head_key: str | None = None) -> VocabLayout:
    """Find the vocabulary-sized tensors of a checkpoint from its config and tensor names/shapes.

    Args:
        embedding_key / lm_head_key: explicit tensor names that override detection.

    Raises:
        InputError: when the tensors cannot be found or are ambiguous; the message says which
            `--embedding-key` / `--lm-head-key` to pass.
    """
    config = ckpt.config
    tc = text_config(config)
    model_type = tc.get("model_type") or config.get("model_type")
    arch = BY_MODEL_TYPE.get(model_type) or BY_MODEL_TYPE.get(config.get("model_type"))
    for key in (embedding_key, lm_head_key):
        if key and key not in ckpt.tensors:
            raise InputError(f"tensor '{key}' is not in the checkpoint; run `vocabsurgeon inspect` to list tensors")

    tie = config.get("tie_word_embeddings", tc.get("tie_word_embeddings"))
    if arch is not None:
        embedding = embedding_key or _find(ckpt, arch.embedding)
        if embedding is None:
            raise InputError(
                f"{ckpt.path}: a {arch.name} checkpoint without its input embedding "
                f"({' or '.join(arch.embedding)}); pass --embedding-key NAME"
            )
        aliases = [n for n in (_find(ckpt, (a,), {embedding}) for a in arch.aliases) if n]
        lm_head = lm_head_key or _find(ckpt, arch.lm_head, {embedding, *aliases})
        tied = arch.tie_default if tie is None else bool(tie)
        biases = [n for n in (_find(ckpt, (b,)) for b in arch.biases) if n]
        extra = [n for n in (_find(ckpt, (e,)) for e in arch.extra) if n]
        name = arch.name
    else:
        embedding, lm_head, biases, extra = _detect_unknown(ckpt, tc, embedding_key, lm_head_key, model_type)
        aliases, name = [], "unknown"
        tied = (lm_head is None) if tie is None else bool(tie)

    if not tied and lm_head is None:
        raise InputError(
            f"{ckpt.path}: config.json says the embeddings are untied, but no output matrix was found; "
            "pass --lm-head-key NAME (see `vocabsurgeon inspect`)"
        )
    emb = ckpt.tensors[embedding]
    rows = emb.shape[0]
    for n in [*aliases, *( [lm_head] if lm_head else []), *extra, *biases]:
        t = ckpt.tensors[n]
        if t.shape[0] != rows:
            raise InputError(
                f"tensor '{n}' has {t.shape[0]} rows but the embedding '{embedding}' has {rows}; "
                "the checkpoint is inconsistent, re-export it"
            )
    if lm_head and tied:
        # Tied weights stored twice: both are grown with the same new rows.
        logger.info("tied embeddings are stored twice (%s and %s); both grow identically", embedding, lm_head)
    return VocabLayout(name, embedding, lm_head, tied, rows, aliases, biases, extra, _vocab_keys(config))


def _detect_unknown(ckpt: Checkpoint, tc: dict, embedding_key, lm_head_key, model_type):
    vocab = tc.get("vocab_size")
    if embedding_key:
        vocab = ckpt.tensors[embedding_key].shape[0]
    if not isinstance(vocab, int):
        raise InputError(
            f"{ckpt.path}: unknown architecture {model_type!r} and no vocab_size in config.json; "
            "pass --embedding-key NAME (and --lm-head-key NAME when untied)"
        )
    mats = [n for n, t in ckpt.tensors.items() if len(t.shape) == 2 and t.shape[0] == vocab]
    biases = [n for n, t in ckpt.tensors.items() if len(t.shape) == 1 and t.shape[0] == vocab]
    if embedding_key:
        embedding = embedding_key
    else:
        inputs = [n for n in mats if any(s in n for s in ("embed", "wte", "word_embeddings", "shared"))
                  and not any(s in n for s in ("lm_head", "embed_out", "output"))]
        if len(inputs) != 1:
            raise InputError(
                f"{ckpt.path}: unknown architecture {model_type!r}; found vocabulary-sized tensors "
                f"{mats or 'none'}; pass --embedding-key NAME (and --lm-head-key NAME when untied)"
            )
        embedding = inputs[0]
    rest = [n for n in mats if n != embedding]
    if lm_head_key:
        lm_head = lm_head_key
    elif len(rest) == 1:
        lm_head = rest[0]
    elif not rest:
        lm_head = None
    else:
        raise InputError(
            f"{ckpt.path}: unknown architecture {model_type!r}; several candidate output matrices {rest}; "
            "pass --lm-head-key NAME"
        )
    logger.warning(
        "unknown architecture %r: detected embedding %s, output %s, biases %s from shapes",
        model_type, embedding, lm_head or "(tied)", biases or "none",
    )
    return embedding, lm_head, biases, []
