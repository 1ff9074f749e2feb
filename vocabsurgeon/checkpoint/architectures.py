"""The architecture table: where each model family keeps its vocabulary-sized tensors.

All model knowledge lives in `ARCHITECTURES`; no other module branches on `model_type`. A name matches a
tensor called exactly that or ending in "." + that name (wrappers, bare base models); names absent on disk
are skipped; unknown families fall back to detection from tensor shapes and the config.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from .reader import Checkpoint, same_bytes
from .._compat import older_than
from ..errors import InputError, UnsupportedVersion

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Architecture:
    """One family's vocabulary layout: tensor names, tying, biases and config keys."""

    name: str
    model_types: tuple[str, ...]  # config.json `model_type` values (of `text_config` when nested)
    embedding: tuple[str, ...]  # candidate names of the input embedding, in priority order
    lm_head: tuple[str, ...] = ("lm_head.weight",)  # candidate names of the output matrix
    tie_default: bool = True  # when the config does not say tie_word_embeddings
    aliases: tuple[str, ...] = ()  # other on-disk names of the (tied) input embedding
    biases: tuple[str, ...] = ()  # vocabulary-sized biases of the output layer
    extra: tuple[str, ...] = ()  # other vocabulary-sized matrices (e.g. per-layer embeddings)
    # Config keys (top level or in text_config) that hold a vocabulary size; each one whose value
    # equals the embedding's rows is set to the new row count.
    vocab_keys: tuple[str, ...] = ("vocab_size",)
    # The oldest transformers whose text-only model reads ids past an `extra` matrix that covers only the
    # first ids (that matrix stays as is, so every new id is past it); older ones raise IndexError there.
    partial_extra_since: str = ""
    # Config paths ("audio_config.vocab_offset") of the first id that the family's multimodal model reads as
    # another modality's token: it routes every id from the smallest of them on away from the text embedding
    # (Gemma3nModel.forward: [vision offset, audio offset) to embed_vision, the rest to embed_audio), so a new
    # token needs an id below it (`text_id_limit`).
    modality_offsets: tuple[str, ...] = ()
    notes: str = ""


_DECODER = ("model.embed_tokens.weight", "embed_tokens.weight")

ARCHITECTURES: tuple[Architecture, ...] = (
    Architecture("gpt2", ("gpt2",), ("transformer.wte.weight", "wte.weight")),
    Architecture("llama", ("llama",), _DECODER, tie_default=False),
    Architecture("mistral", ("mistral", "mixtral"), _DECODER, tie_default=False),
    Architecture("qwen2", ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe"), _DECODER, tie_default=False,
                 notes="small sizes tie; the embedding is padded past the tokenizer size"),
    Architecture("gemma", ("gemma", "gemma2", "gemma3_text"), _DECODER,
                 notes="embeddings are scaled by sqrt(hidden) at run time, not on disk"),
    Architecture("gemma3n", ("gemma3n", "gemma3n_text"), _DECODER,
                 extra=("embed_tokens_per_layer.weight",), vocab_keys=("vocab_size", "vocab_size_per_layer_input"),
                 # 5.17-5.20's Gemma3nTextModel indexes the per-layer table with every id (IndexError past
                 # it); their multimodal Gemma3nModel, and every model from 5.21 on, read row 0 there instead.
                 partial_extra_since="5.21.0",
                 modality_offsets=("vision_config.vocab_offset", "audio_config.vocab_offset"),
                 notes="the per-layer table grows only when it covers the whole vocabulary "
                       "(vocab_size_per_layer_input == vocab_size); ids past it get the per-layer inputs of id 0"),
    Architecture("gpt_neox", ("gpt_neox",), ("gpt_neox.embed_in.weight", "embed_in.weight"),
                 lm_head=("embed_out.weight",), tie_default=False),
    Architecture("opt", ("opt",), ("model.decoder.embed_tokens.weight", "decoder.embed_tokens.weight")),
    Architecture("phi", ("phi",), _DECODER, tie_default=False, biases=("lm_head.bias",)),
    Architecture("bert", ("bert",), ("bert.embeddings.word_embeddings.weight", "embeddings.word_embeddings.weight"),
                 lm_head=("cls.predictions.decoder.weight",),
                 biases=("cls.predictions.bias", "cls.predictions.decoder.bias"),
                 notes="the MLM decoder is tied; transformers 5 stores only cls.predictions.bias"),
    Architecture("t5", ("t5", "mt5", "umt5"), ("shared.weight",),
                 aliases=("encoder.embed_tokens.weight", "decoder.embed_tokens.weight"),
                 notes="lm_head is tied or not by tie_word_embeddings (v1.0 tied, v1.1/flan untied)"),
)

BY_MODEL_TYPE = {mt: a for a in ARCHITECTURES for mt in a.model_types}
BY_NAME = {a.name: a for a in ARCHITECTURES}  # a VocabLayout's architecture -> its row


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
    model_type: str | None = None  # config.json's own name (qwen3), which the table may file under another (qwen2)

    @property
    def kind(self) -> str:
        """What to call the model: its model_type, with the table's family when that differs ("qwen3 (qwen2
        layout)"): a Qwen3 user reading "qwen2" would think the wrong model was read."""
        if not self.model_type or self.model_type == self.architecture:
            return self.architecture
        return f"{self.model_type} ({self.architecture} layout)"

    @property
    def matrices(self) -> list[str]:
        """Every vocabulary-sized 2-D tensor on disk."""
        names = [self.embedding, *self.aliases]
        if self.lm_head:
            names.append(self.lm_head)
        return names + self.extra

    @property
    def all_tensors(self) -> list[str]:
        """Every tensor that grows: the matrices, then the biases."""
        return self.matrices + self.biases


def text_config(config: dict) -> dict:
    """The config that describes the language model: `text_config` when nested, else the config."""
    tc = config.get("text_config")
    return tc if isinstance(tc, dict) else config


def _vocab_keys(config: dict, keys: tuple[str, ...], rows: int) -> list[tuple[str, ...]]:
    """Config paths, top level and in text_config, of the vocabulary sizes that must follow the rows."""
    found = []
    tc = config.get("text_config")
    for node, prefix in ((config, ()), (tc if isinstance(tc, dict) else {}, ("text_config",))):
        for key in keys:
            value = node.get(key)
            if value == rows:
                found.append((*prefix, key))
            elif isinstance(value, int):
                logger.info("config %s is %d, not the %d embedding rows: left as is", ".".join((*prefix, key)),
                            value, rows)
    return found


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

    The family comes from config.json's `model_type` (that of `text_config` when nested) and its
    row of `ARCHITECTURES`; an unknown family, or a known one whose names are not on disk, is
    detected from the shapes: the 2-D tensors with `vocab_size` rows are the matrices, the 1-D
    ones the biases (see `_detect_from_shapes`).

    Args:
        ckpt: the opened checkpoint. Only headers are read, except when config.json says tied and an
            output matrix is stored too: then its values are compared with the embedding's.
        embedding_key / lm_head_key: explicit tensor names that override detection.

    Returns:
        VocabLayout: every tensor that must grow, whether the embeddings are tied, and the config
        keys that hold the vocabulary size.

    Raises:
        InputError: when the tensors cannot be found or are ambiguous; the message says what was
            found and which `--embedding-key` / `--lm-head-key` to pass.
    """
    config = ckpt.config
    tc = text_config(config)
    model_type = tc.get("model_type") or config.get("model_type")
    arch = BY_MODEL_TYPE.get(model_type) or BY_MODEL_TYPE.get(config.get("model_type"))
    for key in (embedding_key, lm_head_key):
        if key and key not in ckpt.tensors:
            raise InputError(f"tensor '{key}' is not in the checkpoint; run `vocabsurgeon inspect` to list tensors")

    tie = config.get("tie_word_embeddings", tc.get("tie_word_embeddings"))
    embedding = embedding_key or (arch and _find(ckpt, arch.embedding))
    if arch is not None and embedding is not None:
        aliases = [n for n in (_find(ckpt, (a,), {embedding}) for a in arch.aliases) if n]
        lm_head = lm_head_key or _find(ckpt, arch.lm_head, {embedding, *aliases})
        tied = arch.tie_default if tie is None else bool(tie)
        biases = [n for n in (_find(ckpt, (b,)) for b in arch.biases) if n]
        extra = [n for n in (_find(ckpt, (e,)) for e in arch.extra) if n]
        rows = ckpt.tensors[embedding].shape[0]
        for n in [e for e in extra if ckpt.tensors[e].shape[0] != rows]:
            logger.info("'%s' has %d rows, not the %d of '%s': it covers part of the vocabulary and stays as is",
                        n, ckpt.tensors[n].shape[0], rows, embedding)
            extra.remove(n)
        name = arch.name
    else:
        what = f"unknown architecture {model_type!r}" if arch is None else f"{arch.name} with unexpected tensor names"
        embedding, lm_head, biases, extra = _detect_from_shapes(ckpt, tc, embedding_key, lm_head_key, what)
        aliases, name = [], arch.name if arch else "unknown"
        tied = (lm_head is None) if tie is None else bool(tie)

    if not tied and lm_head is None:
        raise InputError(
            f"{ckpt.path}: config.json says the embeddings are untied, but no output matrix was found; "
            "pass --lm-head-key NAME (see `vocabsurgeon inspect`)"
        )
    emb = ckpt.tensors[embedding]
    rows = emb.shape[0]
    for n in [*aliases, *([lm_head] if lm_head else []), *extra, *biases]:
        t = ckpt.tensors[n]
        if t.shape[0] != rows:
            raise InputError(
                f"tensor '{n}' has {t.shape[0]} rows but the embedding '{embedding}' has {rows}; "
                "the checkpoint is inconsistent, re-export it"
            )
    if lm_head and tied:
        if _same_values(ckpt, embedding, lm_head):
            # Tied weights stored twice: both are grown with the same new rows.
            logger.info("tied embeddings are stored twice (%s and %s); both grow identically", embedding, lm_head)
        else:
            # transformers 5 writes tie_word_embeddings=true for every T5, yet loads a stored lm_head
            # that differs from the embedding untied; the new rows must follow that.
            logger.warning(
                "%s: config.json says the embeddings are tied, but '%s' and '%s' hold different values; "
                "treating them as untied, as transformers does when it loads them", ckpt.path, embedding, lm_head,
            )
            tied = False
    keys = _vocab_keys(config, arch.vocab_keys if arch else ("vocab_size",), rows)
    return VocabLayout(name, embedding, lm_head, tied, rows, aliases, biases, extra, keys,
                       model_type=config.get("model_type") or model_type)  # gemma3, not its gemma3_text


def check_runs_new_ids(ckpt: Checkpoint, layout: VocabLayout) -> None:
    """Refuse, before anything is written, to add ids the installed transformers cannot run this model on.

    A family's text-only model may read a partial `extra` matrix (one that covers only the first ids and
    stays as is) only from `partial_extra_since` on: older transformers raise IndexError on every new id.

    Raises:
        UnsupportedVersion: one line naming the matrix, the installed transformers and the upgrade.
    """
    arch = BY_NAME.get(layout.architecture)
    if arch is None or not arch.partial_extra_since or isinstance(ckpt.config.get("text_config"), dict):
        return
    partial = [n for n in (_find(ckpt, (e,)) for e in arch.extra)
               if n and n not in layout.extra and ckpt.tensors[n].shape[0] < layout.rows]
    found = partial and older_than("transformers", arch.partial_extra_since)
    if found:
        n = partial[0]
        raise UnsupportedVersion(
            f"{ckpt.path}: transformers {found} runs this {layout.kind} model only on ids below the "
            f"{ckpt.tensors[n].shape[0]} rows of '{n}' (IndexError past them) and every new token's id is past them; "
            f"pip install -U 'transformers>={arch.partial_extra_since}'"
        )


def text_id_limit(config: dict, layout: VocabLayout) -> tuple[int, str] | None:
    """(the first id the multimodal model reads as another modality's token, the config path that says so),
    or None where every id is text (`Architecture.modality_offsets`; only configs that have those sections)."""
    arch = BY_NAME.get(layout.architecture)
    found = []
    for path in arch.modality_offsets if arch else ():
        section, key = path.split(".")
        value = (config.get(section) or {}).get(key) if isinstance(config.get(section), dict) else None
        if isinstance(value, int):
            found.append((value, path))
    return min(found) if found else None


def check_text_ids(ckpt: Checkpoint, layout: VocabLayout, ids: list[int], next_step: str) -> None:
    """Refuse new token ids that the family's multimodal model would read as image or audio tokens.

    Raises:
        InputError: one line naming the config key, the first such id and `next_step`.
    """
    limit = text_id_limit(ckpt.config, layout)
    past = sorted(i for i in ids if limit and i >= limit[0])
    if past:
        cls = (ckpt.config.get("architectures") or [f"the {layout.model_type} model"])[0]
        raise InputError(
            f"{ckpt.path / 'config.json'}: {cls} reads every id from {limit[0]} on ({limit[1]}) as an image or audio "
            f"token, not text, and {len(past)} new token(s) would get ids from {past[0]} on; {next_step}")


def _same_values(ckpt: Checkpoint, a: str, b: str) -> bool:
    """Whether two stored tensors hold the same values (compared as bytes: NaN == NaN here)."""
    ta, tb = ckpt.tensors[a], ckpt.tensors[b]
    if ta.shape != tb.shape or ta.dtype != tb.dtype:
        return False
    return same_bytes(ckpt.path / ta.file, ta.start, ckpt.path / tb.file, tb.start, ta.nbytes)


def _detect_from_shapes(ckpt: Checkpoint, tc: dict, embedding_key, lm_head_key, what: str):
    """(embedding, lm_head, biases, extra) of a family the table does not know, from shapes and names."""
    vocab = tc.get("vocab_size")
    if embedding_key:
        vocab = ckpt.tensors[embedding_key].shape[0]
    if not isinstance(vocab, int):
        raise InputError(
            f"{ckpt.path}: {what} and no vocab_size in config.json; "
            "pass --embedding-key NAME (and --lm-head-key NAME when untied)"
        )
    mats = sorted(n for n, t in ckpt.tensors.items() if len(t.shape) == 2 and t.shape[0] == vocab)
    biases = sorted(n for n, t in ckpt.tensors.items() if len(t.shape) == 1 and t.shape[0] == vocab)
    if embedding_key:
        embedding = embedding_key
    else:
        inputs = [n for n in mats if any(s in n for s in ("embed", "wte", "word_embeddings", "shared"))
                  and not any(s in n for s in ("lm_head", "embed_out", "output"))]
        if len(mats) == 1:
            inputs = mats
        if not mats:
            raise InputError(
                f"{ckpt.path}: {what}: no 2-D tensor has {vocab} rows (vocab_size "
                "in config.json); pass --embedding-key NAME (and --lm-head-key NAME when untied)"
            )
        if len(inputs) != 1:
            raise InputError(
                f"{ckpt.path}: {what}: cannot tell the input embedding among the "
                f"tensors with {vocab} rows {mats}; pass --embedding-key NAME (and --lm-head-key NAME when untied)"
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
            f"{ckpt.path}: {what}: input embedding '{embedding}', but several "
            f"tensors with {vocab} rows could be the output matrix {rest}; pass --lm-head-key NAME "
            "(the others grow too, initialized with the mean)"
        )
    extra = [n for n in rest if n != lm_head]
    logger.warning(
        "%s, detected from the shapes: input embedding %s, output %s, biases %s, "
        "other vocabulary matrices %s; pass --embedding-key/--lm-head-key if this is wrong",
        what, embedding, lm_head or "(tied)", biases or "none", extra or "none",
    )
    return embedding, lm_head, biases, extra


# Families whose tied output is not simply the embedding: T5 scales the decoder output by
# d_model**-0.5 only when tied, and a BERT MLM head has its own transform before the tied decoder.
_NO_UNTIE = {"t5": "T5 scales its decoder output only when tied, so an untied copy would change the logits",
             "bert": "a masked-LM head is not a causal LM's output matrix"}


def untie(ckpt: Checkpoint, layout: VocabLayout) -> VocabLayout:
    """The layout of `layout` with a separate output matrix (`--untie`): a tied model's matrix gets
    an lm_head of its own, whose old rows are the tied matrix's rows, bit for bit.

    A tied model stored once gets a new tensor entry (the family's first lm_head name) that points
    at the embedding's bytes in the same shard: every later step copies, grows and verifies it like
    a stored tensor, and the output file holds it as one. A tied matrix stored twice simply stops
    being tied. The caller sets `tie_word_embeddings` false in the config.

    Raises:
        InputError: the model is not tied, or its family's output is not the tied matrix alone.
    """
    if not layout.tied:
        raise InputError(f"{ckpt.path}: the embeddings are already untied; drop --untie")
    arch = BY_NAME.get(layout.architecture)
    if arch is None or arch.name in _NO_UNTIE:
        why = _NO_UNTIE.get(layout.architecture, "its family is not in the architecture table")
        raise InputError(f"{ckpt.path}: --untie is not supported for {layout.architecture} ({why}); drop --untie")
    if layout.lm_head is not None:  # stored twice already: both exist on disk
        return replace(layout, tied=False)
    name = arch.lm_head[0]
    if layout.embedding not in arch.embedding or name in ckpt.tensors:
        raise InputError(f"{ckpt.path}: --untie needs the embedding at the top level ('{layout.embedding}' is "
                         f"inside a wrapper, or '{name}' exists); drop --untie")
    emb = ckpt.tensors[layout.embedding]
    alias = replace(emb, name=name)  # same file and byte range: the old rows are the embedding's bytes
    ckpt.tensors[name] = alias
    header = ckpt.shards[emb.file]
    header.tensors.append(alias)
    return replace(layout, lm_head=name, tied=False)
