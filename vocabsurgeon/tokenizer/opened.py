"""A checkpoint's tokenizer, opened once: the record the editor's rooms read.

`OpenedTokenizer` reads tokenizer.json (or converts the slow tokenizer's file, `convert_slow_tokenizer`) and
tokenizer_config.json, adopts the pipeline transformers builds on load where it rebuilds the file, detects the
family and checks that the ids agree. Its attributes are set in the constructor and never changed; only
memos of answers grow (encodings, round trips, the pieces that hold a form), and the questions that ask
transformers (`loading.py`) are answered once, when first asked.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from pathlib import Path

from tokenizers import Tokenizer

from . import loading, resplit
from .building import collector_paused, merges_as_pairs, tokenizer_from_data
from ..checkpoint.reader import read_json
from ..errors import InputError
from .encoding import encode_batch, encode_ids, unpadded
from .families import SentencePieceBPE, detect_family, family_of
from .families.pieces import FormIndex, byte_level, text_pieces
from .families.sentencepiece_bpe import as_meta_layout, as_transformers_builds
from ..checkpoint.filenames import CONFIG_NAME, SLOW_TOKENIZER_FILES, TOKENIZER_CONFIG, TOKENIZER_FILE
from .loading import FILE_AS_WRITTEN_CLASSES, PROBES

logger = logging.getLogger(__name__)


class OpenedTokenizer:
    """A checkpoint's fast tokenizer as read: `data` (tokenizer.json as planned on), `tok` (its tokenizer),
    `config` (tokenizer_config.json or None), `family`, and the original's answers (`encode`, `normalize`, ...).
    Families read it (families.base.TokenizerView)."""

    def __init__(self, path: str | Path, *, gguf_parity: bool = False, model_config: dict | None = None):
        self.dir = Path(path)
        self._given_config = model_config  # config.json as the caller read it (None: read here when needed)
        # only entries that llama.cpp reads as transformers does (the families' gguf_parity notes)
        self.gguf_parity = gguf_parity
        file = self.dir / TOKENIZER_FILE
        self.built: dict = {}  # tokenizer_from_data's cache: the original's merges, converted once
        self.converted_from: str | None = None
        self.slow_file = next((f for f in SLOW_TOKENIZER_FILES if (self.dir / f).is_file()), None)
        if require_tokenizer_files(self.dir) is None:
            with collector_paused():
                self.data = merges_as_pairs(read_json(file))
        else:
            self.data, cls = convert_slow_tokenizer(self.dir, self.slow_file)
            self.converted_from = cls
            logger.warning("%s has no %s: converted %s with transformers' %s",
                           self.dir, TOKENIZER_FILE, self.slow_file, cls)
        try:  # from the object just read: its model built from the dict (building.py), the file not parsed again
            self.tok = unpadded(tokenizer_from_data(self.data, self.built))
        except Exception as e:  # the Rust parser raises plain Exception subclasses
            raise InputError(f"{file}: the tokenizers library cannot load it ({e}); re-download it") from None
        if "type" not in (self.data.get("model") or {}):
            # Written by tokenizers < 0.10 (t5-small and t5-base on the Hub): no component names its type and
            # Metaspace has `add_prefix_space`. The library reads it by shape; its own serialization names
            # every type (and loads as the same tokenizer), so the families can tell the model and the output
            # is in the current format.
            self.data = json.loads(Tokenizer.from_file(str(file)).to_str())
            logger.info("%s is in the format of tokenizers < 0.10; read and written in the current one", file)
        cfg = self.dir / TOKENIZER_CONFIG
        self.config = read_json(cfg) if cfg.exists() else None
        # A SentencePiece BPE that transformers rebuilds on load (LlamaTokenizer) is read as AutoTokenizer builds it,
        # which is what users of the checkpoint get: where that differs from the file (Meta's Llama 2 file with
        # legacy true: " a" is "▁" + "▁a" in the file, "▁a" as loaded), the output follows transformers
        # (see as_transformers_builds)
        view = self.data
        self.adopted: str | None = None  # the transformers class whose pipeline the output is written with
        if self.converted_from is None and SentencePieceBPE.matches(self.data) \
                and (self.config or {}).get("tokenizer_class") not in FILE_AS_WRITTEN_CLASSES:
            view = as_transformers_builds(self.data, loading.built_pipeline(self.loaded_original))
            self.adopted = self.loaded_class if view is not self.data else None
        # Metaspace "always" (transformers' LlamaTokenizer with legacy true, or its re-save as a file): read as the
        # normalizer steps that give every text the same ids and let new words be added tokens (see as_meta_layout)
        meta = as_meta_layout(view) if self.converted_from is None else view
        self.rewritten = meta is not view
        if meta is not self.data:
            self.data = meta
            self.tok = unpadded(tokenizer_from_data(self.data, self.built))
        self.family_name = detect_family(self.data)
        fam = family_of(self.data)
        self.family = fam(self) if fam is not None else None  # the family record: how words become entries
        self.model = self.data["model"]
        raw_vocab = self.model.get("vocab")
        if isinstance(raw_vocab, dict):
            self.vocab: dict[str, int] = raw_vocab
        elif isinstance(raw_vocab, list):  # Unigram: [[piece, score], ...], the id is the index
            self.vocab = {p[0]: i for i, p in enumerate(raw_vocab)}
        else:
            self.vocab = {}
        self.added = {t["content"]: t for t in self.data.get("added_tokens") or []}
        self._encoded: dict[str, list[int]] = {}  # text -> ids under this tokenizer (see prefetch)
        self._round_trips: dict[str, str] = {}  # text -> decode(encode(text)) under this tokenizer (see decoded)
        self._held: dict[str, list[str]] = {}  # spelled form -> old pieces that hold it (see holders)
        self._check_ids()

    def _check_ids(self) -> None:
        for content, t in self.added.items():
            vid = self.vocab.get(content)
            if vid is not None and vid != t["id"]:
                raise InputError(
                    f"{self.dir / TOKENIZER_FILE}: token {content!r} has id {t['id']} in added_tokens but "
                    f"{vid} in the model vocabulary; the tokenizer is inconsistent, fix or re-download it"
                )
        # transformers registers tokenizer_config.json's added_tokens_decoder on load: an id named there
        # with other content than tokenizer.json gives the loaded tokenizer a token past the rows.
        decoder = (self.config or {}).get("added_tokens_decoder")
        decoder = decoder if isinstance(decoder, dict) else {}
        by_id = {t["id"]: c for c, t in self.added.items()}
        named = {int(k) for k in decoder if str(k).isdigit()} - set(by_id)  # only the ids named: not all 128k
        if named:
            by_id.update({i: c for c, i in self.vocab.items() if i in named})
        for key, entry in decoder.items():
            content = entry.get("content") if isinstance(entry, dict) else None
            if not str(key).isdigit() or content is None:
                continue
            if int(key) in by_id and by_id[int(key)] != content:
                raise InputError(
                    f"{self.dir / TOKENIZER_CONFIG}: added_tokens_decoder names id {key} {content!r}, but "
                    f"{TOKENIZER_FILE} has {by_id[int(key)]!r} there; the two files disagree, fix or re-download them"
                )

    @property
    def size(self) -> int:
        """One past the largest id the tokenizer can produce."""
        if not self.vocab and not self.added:
            return self.tok.get_vocab_size(with_added_tokens=True)
        return max(max(self.vocab.values(), default=-1), max((t["id"] for t in self.added.values()), default=-1)) + 1

    def has(self, piece: str) -> bool:
        """Whether `piece` is already a vocabulary entry or an added token."""
        return piece in self.vocab or piece in self.added

    def encode(self, text: str) -> list[int]:
        """Ids of `text` under the original tokenizer, without special tokens (cached by `prefetch`)."""
        ids = self._encoded.get(text)
        return ids if ids is not None else self.tok.encode(text, add_special_tokens=False).ids

    def prefetch(self, texts: list[str]) -> None:
        """Encode `texts` in one batched call and remember the ids, for `encode`: the plan asks for
        each form up to twice, and 50,000 words are 200,000 calls into Rust otherwise."""
        texts = [t for t in dict.fromkeys(texts) if t not in self._encoded]
        if texts:
            encs = encode_batch(self.tok)(texts, add_special_tokens=False)
            self._encoded.update(zip(texts, (e.ids for e in encs)))

    @property
    def file(self) -> Path:
        """The tokenizer.json this editor reads (for messages)."""
        return self.dir / TOKENIZER_FILE

    def normalize(self, text: str) -> str:
        """`text` as the tokenizer's normalizer writes it."""
        return self.tok.normalizer.normalize_str(text) if self.tok.normalizer is not None else text

    def text_of(self, piece: str) -> str:
        """The text a model piece stands for ("Ġreturn" -> " return")."""
        return self.tok.decoder.decode([piece]) if self.tok.decoder is not None else piece

    def pretokenize(self, text: str) -> list[str]:
        """The pre-tokens of `text` after normalization, in the model's spelling ("Ġreturn")."""
        text = self.normalize(text)
        if self.tok.pre_tokenizer is None:
            return [text]
        return [p for p, _ in self.tok.pre_tokenizer.pre_tokenize_str(text)]


    def holders(self, words: list[str], corpus: resplit.Holders | None = None) -> dict[str, list[str]]:
        """Old texts that hold each word inside a longer word (`resplit.inside`: a letter next to its letter, a
        digit next to its digit): the vocabulary's entries (found in their own spelling, "Ġ" and "▁" included,
        and decoded) and `corpus`'s words."""
        spell = byte_level if self.family_name == "byte-level-bpe" else (lambda w: self.normalize(w).strip(" ▁"))
        spelled: dict[str, list[str]] = {}
        for w in words:
            for s in {spell(w), w}:
                spelled.setdefault(s, []).append(w)
        todo = {s for s in spelled if s not in self._held}
        if todo:
            old = text_pieces(self.vocab, self.added)
            self.remember_holders(todo, FormIndex(todo).holders(old))
        out: dict[str, list[str]] = {}
        for s, ws in spelled.items():
            for w in ws:
                out.setdefault(w, []).extend(self.text_of(p) for p in self._held[s])
        if corpus is not None:
            for w, texts in corpus.holding(words).items():
                out.setdefault(w, []).extend(texts)
        return {w: held for w, ts in out.items() if (held := [t for t in dict.fromkeys(ts) if resplit.inside(t, w)])}

    def remember_holders(self, forms: set[str], found: dict[str, list[str]]) -> None:
        """Keep the old pieces that hold each of `forms` (spelled as the model spells pieces), from one scan of
        the vocabulary: the families' `split_risks` makes the same scan while drafting, and `holders` reuses it."""
        self._held.update({f: found.get(f, []) for f in forms})

    def decoded(self, texts: list[str]) -> list[str]:
        """How the original tokenizer decodes its own ids of each text (cached: the same texts are
        checked again in each round of the plan)."""
        todo = [t for t in dict.fromkeys(texts) if t not in self._round_trips]
        if todo:
            self._round_trips.update(zip(todo, self.tok.decode_batch(encode_ids(self.tok, todo))))
        return [self._round_trips[t] for t in texts]

    @functools.cached_property  # a scan of the vocabulary that only drafting needs
    def splits_numbers(self) -> bool:
        """Whether the pre-tokenizer cuts numbers into single digits or groups (Llama 3: up to three,
        Qwen and SmolLM: one), so that a token with digits would change how other numbers tokenize."""
        multi = re.compile(r"[▁Ġ]?[0-9]{2,}")  # Llama 2 splits them by its vocabulary: no piece of 2+ digits
        return len(self.pretokenize("1234567")) > 1 or not any(multi.fullmatch(p) for p in self.vocab)

    # What transformers makes of the input (loading.py): cached properties, since each answer imports transformers
    # or loads the tokenizer with it, which a plain add never needs.

    @functools.cached_property
    def model_config(self) -> dict:
        """config.json: as the caller read it, else read here ({} without one)."""
        if self._given_config is not None:
            return self._given_config
        cfg = self.dir / CONFIG_NAME
        return read_json(cfg) if cfg.exists() else {}

    def as_loaded(self):
        """The original as `AutoTokenizer` loads it (loaded once, never modified), or None when transformers
        cannot load it. The plan, its chat samples and validation share it."""
        return self._as_loaded

    @functools.cached_property
    def _as_loaded(self):
        return loading.as_loaded(self)

    @functools.cached_property
    def loaded_original(self) -> Tokenizer | None:
        """The original tokenizer as transformers builds it on load, or None if it cannot."""
        return loading.backend_of(self.as_loaded())

    @property
    def loaded_class(self) -> str | None:
        """The class AutoTokenizer picked for the original, or None if it cannot load it."""
        return type(self.as_loaded()).__name__ if self.loaded_original is not None else None

    def forced_class(self) -> str | None:
        """`loading.forced_class`: the class transformers forces on this model type, or None."""
        return self._forced_class

    @functools.cached_property
    def _forced_class(self) -> str | None:
        return loading.forced_class(self)

    def llama_class_over_byte_level(self) -> str | None:
        """`loading.llama_class_over_byte_level`: LlamaTokenizer(Fast) named over a byte-level file, or None."""
        return self._llama_over_byte_level

    @functools.cached_property
    def _llama_over_byte_level(self) -> str | None:
        return loading.llama_class_over_byte_level(self)

    def loads_otherwise(self) -> tuple[str, str] | None:
        """`loading.loads_otherwise`: (the class that rebuilds the input, a text it gives other ids), or None."""
        return self._loads_otherwise

    @functools.cached_property
    def _loads_otherwise(self) -> tuple[str, str] | None:
        return loading.loads_otherwise(self)

    def class_note(self, why: str) -> str:
        """`loading.class_note`: the note of tokenizer_class set to PreTrainedTokenizerFast, for reason `why`."""
        return loading.class_note(self, why)


def convert_slow_tokenizer(directory: str | Path, slow_file: str = SLOW_TOKENIZER_FILES[0]) -> tuple[dict, str]:
    """Build tokenizer.json from a slow tokenizer's file (`tokenizer.model`, T5's `spiece.model`, ...)
    with transformers' converter.

    Returns:
        (the tokenizer.json object, the transformers class that converted it).

    Raises:
        InputError: transformers (with sentencepiece) cannot convert it.
    """
    directory = Path(directory)
    try:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(directory), trust_remote_code=False)
        # A SentencePiece BPE tokenizer.model (Mistral, Llama) converts to a layout where added tokens cannot
        # behave like words; it is rewritten as Meta's equivalent one (same ids for every text).
        data = as_meta_layout(json.loads(tok.backend_tokenizer.to_str()))
    except Exception as e:  # conversion errors come from transformers, sentencepiece and protobuf alike
        raise InputError(
            f"{directory / slow_file}: transformers cannot convert it to tokenizer.json ({type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''}); convert it yourself with "
            "AutoTokenizer.from_pretrained(dir).save_pretrained(dir), or check that sentencepiece and protobuf import"
        ) from None
    if not (directory / TOKENIZER_CONFIG).exists():  # no class named: the .model alone says how text tokenizes
        differs = _differs_from_sentencepiece(directory / slow_file, data)
        if differs is not None:
            import transformers

            text, got, want = differs
            raise InputError(
                f"{directory / slow_file}: transformers {transformers.__version__} converts it otherwise than "
                f"SentencePiece tokenizes it ({text!r}: ids {got}, SentencePiece {want}), and the output would keep "
                "that; upgrade transformers (5.24 converts it as SentencePiece does) or add the model's tokenizer.json"
            )
    return data, type(tok).__name__


def _differs_from_sentencepiece(model_file: Path, data: dict) -> tuple[str, list[int], list[int]] | None:
    """A probe text that `data`, transformers' conversion of the SentencePiece BPE file `model_file`, gives other
    ids than SentencePiece itself does, with both; None where they agree (or it is no SentencePiece BPE file).

    transformers 5.17 to 5.23 convert a tokenizer.model with no tokenizer_config.json (Mistral's own layout)
    without the leading "▁" and with its merges in another order ("Hello": "Hello", not "▁Hello")."""
    if (data.get("model") or {}).get("type") != "BPE":
        return None
    try:
        import sentencepiece

        sp = sentencepiece.SentencePieceProcessor(model_file=str(model_file))
    except Exception:  # not a SentencePiece file (vocab.json, vocab.txt): nothing to compare with
        return None
    texts = list(PROBES)
    for text, got, want in zip(texts, encode_ids(unpadded(Tokenizer.from_str(json.dumps(data))), texts), sp.encode(texts)):
        if got != want:
            return text, got, want
    return None


def require_tokenizer_files(directory: str | Path) -> str | None:
    """The tokenizer check every command makes before any work: `directory` holds tokenizer.json, or a
    slow tokenizer file to convert from.

    Returns:
        None when tokenizer.json is there, else the name of the slow file (the first of SLOW_TOKENIZER_FILES).

    Raises:
        InputError: neither is there (one line that says how to save the tokenizer).
    """
    directory = Path(directory)
    if (directory / TOKENIZER_FILE).exists():
        return None
    slow = next((f for f in SLOW_TOKENIZER_FILES if (directory / f).is_file()), None)
    if slow is None:
        raise InputError(
            f"{directory / TOKENIZER_FILE}: missing, and there is no slow tokenizer file "
            f"({', '.join(SLOW_TOKENIZER_FILES)}) to convert; vocabsurgeon edits fast tokenizers (tokenizer.json). "
            "Save the tokenizer with transformers (AutoTokenizer.from_pretrained(dir).save_pretrained(dir)) first"
        )
    return slow
