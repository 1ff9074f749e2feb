"""Adding tokens to a checkpoint's tokenizer so new words behave like native words, per family.

Every word gets its bare form and its word-start form by the mechanism its family (a record in
`families/`) and every loader honour; one plan loop here gives ids, reserved rows and --special, builds
the edited tokenizer in memory and checks each word in every context (`contexts.py`) and the chat
template (`chats.py`): a word that fails is skipped with its reason. `verify_tokenizer` re-reads what
was written. Details: docs/internals.md.
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib.util
import json
import logging
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tokenizers import Tokenizer

from . import contexts, resplit
from .building import collector_paused, merges_as_pairs, tokenizer_from_data
from ..checkpoint.reader import read_json
from ..errors import InputError, VocabSurgeonError
from .chats import chat_samples
from .encoding import encode_batch, encode_ids, unpadded
from .gguf_check import CHECK_TEXT, HASHED_FAMILIES
from . import sentencepiece_model
from .families import SUPPORTED_FAMILIES, SentencePieceBPE, Skip, detect_family, family_of
from .families.pieces import FormIndex, byte_level, text_pieces
from .families.sentencepiece_bpe import PIPELINE, as_meta_layout, as_transformers_builds
from ..checkpoint.filenames import CHAT_TEMPLATE_FILES, CONFIG_NAME, SLOW_TOKENIZER_FILES, TOKENIZER_CONFIG, TOKENIZER_FILE
from ..checkpoint.writer import write_json

logger = logging.getLogger(__name__)

# tokenizer_config classes that load tokenizer.json without rebuilding it.
FILE_AS_WRITTEN_CLASSES = {"PreTrainedTokenizerFast", "TokenizersBackend"}
# Placeholder tokens that models ship for later use (Llama 3, Gemma, BERT, Mistral's Tekken): --reuse-reserved
# takes them.
RESERVED_TOKEN = re.compile(r"<\|reserved_special_token_\d+\|>|<unused\d+>|\[unused\d+\]|<\|reserved_\d+\|>|<SPECIAL_\d+>")
GAP_PIECE = "<vocabsurgeon unused {}>"  # Unigram placeholders; the space makes them unreachable
# Old text on which pre-tokenizers disagree: contractions, digit runs, spaces and newlines, punctuation, scripts.
PROBES = ("I don't", "it's", "we'll", "THEY'RE", "you've", "O'Neil's", "12345", "3.14159", "2024-11-25", "1,000,000",
          "Hello, world!", "(x) [y] {z}", '"q"', "'r'", "x=y", "a+b", "<tag>", "path/to/file.py", "#1 @me",
          "  two  spaces", "\n\n\tTabbed\r\n", "   end ", "Müller, Björk and Zoë", "naïve", "Москва", "日本語のテキスト",
          "😀🎉.", "getUserName", "snake_case", "CamelCase", "HTTPServer", "iPhone")

def _around(text: str, word: str, width: int = 12) -> str:
    """The part of `text` around the first occurrence of `word` (for a reason shown to the user)."""
    i = text.find(word.strip())
    if i < 0:
        return text[:2 * width]
    return text[max(0, i - width):i + len(word.strip()) + width]


def decode_mismatch(text: str, normalized: str, got: str, want: str) -> bool:
    """Whether the edited tokenizer's decoding `got` of `text` fails the check: it differs from `want`, the
    original's decoding of its own ids, where that one is faithful (the text, or `normalized`, the text as the
    normalizer writes it)."""
    return got != want and want in (text, normalized)


def may_mismatch(text: str, normalized: str, got: str) -> bool:
    """Whether `decode_mismatch(text, normalized, got, want)` is True for some `want`: unless `got` is `text` and
    `normalized` is too (then a mismatch needs a `want` that differs from `text` and is `text`), so that the
    original's round trip is not needed there."""
    return got != text or normalized != text


@dataclass
class NewToken:
    """One new vocabulary entry (a row of every vocabulary matrix)."""

    text: str  # the word as the user gave it
    form: str  # the text this entry stands for: the word, or " " + word for the word-start form
    piece: str  # the string stored in the tokenizer (e.g. "Frodo", " Frodo", "▁Frodo", "Ã\x89owyn")
    id: int
    mechanism: str  # "vocab" (a real model entry), "merge" (an entry and the BPE merge that makes it), "added" or "special"
    pieces: list[int] = field(default_factory=list)  # ids of `form` under the original tokenizer
    normalized: bool = False  # added tokens only: matched on normalized text (uncased WordPiece)
    score: float | None = None  # Unigram only: the piece's log probability


@dataclass
class TokenizerPlan:
    """The new entries, the tokens skipped and why, and what else changes in the tokenizer files."""

    family: str
    new: list[NewToken]
    skipped: list[dict]  # {"token": ..., "reason": ...}
    set_ignore_merges: bool = False
    notes: list[str] = field(default_factory=list)  # what else was changed, for the report
    gap: tuple[int, int] | None = None  # Unigram ids [start, end) filled with placeholders
    original: Tokenizer | None = field(default=None, repr=False, compare=False)  # for verification
    freed: dict[int, str] = field(default_factory=dict)  # reserved tokens given up (--reuse-reserved): id -> content
    file_as_written: bool = False  # tokenizer_config names a class that loads tokenizer.json as written
    # Kept words that are not one token in some context, with those contexts: where the pre-tokenizer
    # joins the text around the word into one pre-token ("(striped" on Llama 3), no entry can be
    # produced there without changing how old text tokenizes; the word keeps its old pieces there.
    contexts: dict[str, list[str]] = field(default_factory=dict)
    # Soft contexts the file as written misses but the class transformers loads it with does not (GPT-4o's o200k
    # as GPT2Tokenizer): not reported, since users get one token there; the re-read of the file expects them.
    file_only_contexts: dict[str, list[str]] = field(default_factory=dict)
    # The input's SentencePiece .model with the new pieces appended (`TokenizerEditor.slow_model`): file name, bytes
    slow_model: tuple[str, bytes] | None = field(default=None, repr=False, compare=False)
    # Kept words whose entries re-split longer words that hold them (resplit.py: every old vocabulary entry and
    # corpus word that has the word inside it, tokenized before and after): word -> up to resplit.EXAMPLES
    # {"text", "before", "after"}. Added tokens and --special tokens are matched anywhere in raw text, by
    # every runtime; a merge inside a longer word where no entry that only the whole word reaches is allowed.
    resplits: dict[str, list[dict]] = field(default_factory=dict)
    checked_holders: int = 0  # old texts (vocabulary entries, corpus words) that hold a new word, checked

    def to_dict(self) -> dict:
        """The plan as plain data (the --json view)."""
        return {"family": self.family, "new": [asdict(t) for t in self.new], "skipped": self.skipped,
                "notes": self.notes, "contexts_not_one_token": self.contexts, "longer_words_resplit": self.resplits}


# Why a LlamaTokenizer(Fast) class over a byte-level tokenizer.json is replaced (`llama_class_over_byte_level`)
BYTE_LEVEL_UNDER_LLAMA = ("transformers 5.17 to 5.21 rebuild a byte-level tokenizer.json under LlamaTokenizer with "
                          "SentencePiece's pre-tokenizer, which gives most text other ids; 5.22 on load it as written")

# What a tokenizer class may set for itself (LlamaTokenizer pads on the left) that a tokenizer loaded as
# written (PreTrainedTokenizerFast) takes from tokenizer_config.json only.
CLASS_ATTRIBUTES = ("padding_side", "truncation_side", "model_input_names")


def class_defaults(name: str | None, cfg: dict, loaded=None) -> dict:
    """What the tokenizer AutoTokenizer loaded (`loaded`, the instance), or else transformers' class `name`,
    sets by default and PreTrainedTokenizerFast sets otherwise, where tokenizer_config.json `cfg` does not
    set it: written when the class is replaced, so that the tokenizer loaded as written pads, truncates and
    names its special tokens as the input did. The instance decides where there is one: a class name is not
    what loads (DeepSeek V3 names LlamaTokenizerFast, which pads left, over a byte-level file that
    transformers 5 loads as TokenizersBackend, which pads right), and a converted tokenizer.model
    (Mistral's) gets its BOS, EOS and UNK from the converting class, not from any file."""
    if name in FILE_AS_WRITTEN_CLASSES or (name is None and loaded is None):
        return {}
    try:
        from transformers import PreTrainedTokenizerFast
        from transformers.models.auto.tokenization_auto import tokenizer_class_from_name

        source = loaded if loaded is not None else tokenizer_class_from_name(name)
    except Exception:  # an old or broken transformers: the class keeps its own defaults unknown
        return {}
    if source is None:
        return {}
    out = {k: getattr(source, k) for k in CLASS_ATTRIBUTES
           if k not in cfg and getattr(source, k, None) is not None
           and getattr(source, k) != getattr(PreTrainedTokenizerFast, k)}
    if loaded is not None:
        out.update({k: v for k, v in loaded.special_tokens_map.items()
                    if k.endswith("_token") and isinstance(v, str) and k not in cfg})
        extra = getattr(loaded, "extra_special_tokens", None)  # Mistral v0.3's [INST] and 768 [control_N]
        if extra and isinstance(extra, list) and not {"extra_special_tokens", "additional_special_tokens"} & set(cfg):
            out["extra_special_tokens"] = [str(t) for t in extra]
    return out


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



@functools.lru_cache(maxsize=1)
def _types_with_incorrect_hub_class() -> frozenset[str] | set:
    """transformers' MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS, read from the installed tokenization_auto.py's
    source without importing it: importing transformers costs seconds, more than a whole `add --no-validate`,
    and the list is a literal set of strings. Where the source cannot be read as such, an object that holds
    every model type, so that `forced_class` imports transformers and asks it (the source of truth)."""

    class _Every(set):
        def __contains__(self, item) -> bool:
            return True

    try:
        spec = importlib.util.find_spec("transformers")
        if spec is None or spec.origin is None:
            return frozenset()  # no transformers: nothing is forced
        source = Path(spec.origin).parent / "models" / "auto" / "tokenization_auto.py"
        for node in ast.parse(source.read_text(encoding="utf-8")).body:
            target = node.target if isinstance(node, ast.AnnAssign) else (
                node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
            if isinstance(target, ast.Name) and target.id == "MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS":
                return frozenset(ast.literal_eval(node.value))
        return frozenset()  # a transformers without the list (forced_class then finds nothing either)
    except (OSError, SyntaxError, ValueError):
        return _Every()

class TokenizerEditor:
    """A checkpoint's fast tokenizer, opened for adding tokens."""

    def __init__(self, path: str | Path, *, gguf_parity: bool = False, model_config: dict | None = None):
        self.dir = Path(path)
        self.model_config = model_config  # config.json as the caller read it (None: read here when needed)
        # only entries that llama.cpp reads as transformers does (the families' gguf_parity notes)
        self.gguf_parity = gguf_parity
        file = self.dir / TOKENIZER_FILE
        self._built: dict = {}  # tokenizer_from_data's cache: the original's merges, converted once
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
            self.tok = unpadded(tokenizer_from_data(self.data, self._built))
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
            view = as_transformers_builds(self.data, self._built_pipeline())
            self.adopted = self._loaded_class if view is not self.data else None
        # Metaspace "always" (transformers' LlamaTokenizer with legacy true, or its re-save as a file): read as the
        # normalizer steps that give every text the same ids and let new words be added tokens (see as_meta_layout)
        meta = as_meta_layout(view) if self.converted_from is None else view
        self.rewritten = meta is not view
        if meta is not self.data:
            self.data = meta
            self.tok = unpadded(tokenizer_from_data(self.data, self._built))
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
        self._round_trips: dict[str, str] = {}  # text -> decode(encode(text)) under this tokenizer (see _decoded)
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

    def reusable_ids(self, rows: int) -> list[tuple[int, str | None]]:
        """Rows that --reuse-reserved may take, in order: rows no token maps to, then reserved
        placeholder tokens (`<|reserved_special_token_N|>`, `<unusedN>`, `[unusedN]`, Tekken's `<SPECIAL_N>`),
        as (id, content)."""
        if not isinstance(self.model.get("vocab"), dict):
            raise InputError(
                f"{self.dir / TOKENIZER_FILE}: --reuse-reserved needs a BPE or WordPiece vocabulary; "
                f"this {self.family_name} tokenizer's ids are list positions. Drop --reuse-reserved"
            )
        used = set(self.vocab.values()) | {t["id"] for t in self.added.values()}
        unused = [(i, None) for i in range(rows) if i not in used]
        reserved = {t["id"]: c for c, t in self.added.items() if RESERVED_TOKEN.fullmatch(c)}
        reserved.update({i: c for c, i in self.vocab.items() if RESERVED_TOKEN.fullmatch(c) and c not in self.added})
        return unused + sorted((i, c) for i, c in reserved.items() if i < rows)

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

    def plan(self, words: list[str], *, special: bool = False, first_id: int | None = None,
             reuse: list[tuple[int, str | None]] | None = None, chat: list[str] | None = None,
             corpus: list[str] | None = None) -> TokenizerPlan:
        """Decide the new entries and their ids: first from `reuse` (see `reusable_ids`), then
        from `first_id` (default `size`) on.

        The edited tokenizer is built in memory and every word is checked in every context
        (`_failures`); a word that fails is skipped with its reason and the rest planned again,
        so that a dry run says exactly what the real run does. `chat`: old texts that must keep
        their ids (default: the rendered chat template, `chat_samples`). `corpus`: texts (the validation
        and fit corpora) whose words that hold a new word are checked with the vocabulary's (`holders`).

        Raises:
            InputError: new ids inside the tokenizer, or an unsupported tokenizer family.
        """
        size = self.size  # one scan of the ids
        start = size if first_id is None else first_id
        if start < size:
            raise InputError(f"new ids must start at or after {size}, the tokenizer's size; got {start}")
        new, skipped, notes = self._draft(words, special)
        chat = chat_samples(self.dir, self.config, self.as_loaded) if chat is None else chat
        self._corpus = resplit.Holders(resplit.corpus_words(corpus)) if corpus else None
        failed: dict[str, str] = {}
        while True:
            plan = self._numbered(new, skipped, notes, start, reuse)
            failures, plan.contexts, plan.file_only_contexts = self._failures(plan, chat)
            if not failures:
                break
            failed.update(failures)
            new = [t for t in new if t.text not in failures]
            order = {w: i for i, w in enumerate(words)}  # reported in the user's order
            skipped = skipped + [{"token": w, "reason": failures[w]} for w in sorted(failures, key=order.__getitem__)]
        if failed:
            w = next(iter(failed))
            note = f"{len(failed)} token(s) skipped after checking the edited tokenizer (e.g. {w!r}): {failed[w]}"
            plan.notes.append(note)
        if plan.resplits:
            w, seen = next(iter(plan.resplits.items()))
            ex = seen[0]
            note = (f"{len(plan.resplits)} kept token(s) re-split longer words that hold them (e.g. {w!r}: {ex['text']!r} "
                    f"{ex['before']} -> {ex['after']}): "
                    + ("--gguf-parity writes merges and added tokens, which llama.cpp reads as transformers does"
                       if self.gguf_parity and self.family_name == "byte-level-bpe" else
                       "this tokenizer allows no entry that only the whole word reaches")
                    + " (docs/families.md: added tokens are matched anywhere in raw text, by every runtime); each word's "
                    "longer words: longer_words_resplit in --json")
            plan.notes.append(note)
        if plan.contexts:
            w, where = next(iter(plan.contexts.items()))
            note = (f"{len(plan.contexts)} kept token(s) are not one token in some contexts (e.g. {w!r} in {where[0]!r}), "
                    "which this tokenizer's entries cannot reach without changing how old text tokenizes: there the "
                    "word keeps its old pieces (each word's contexts: contexts_not_one_token in --json)")
            plan.notes.append(note)
        return plan

    def _numbered(self, new: list[NewToken], skipped: list[dict], notes: list[str], start: int,
                  reuse: list[tuple[int, str | None]] | None) -> TokenizerPlan:
        """The plan of the entries `new` with their ids: `reuse` first, then counting from `start`."""
        pool = list(reuse or [])
        freed: dict[int, str] = {}
        counter = iter(range(start, 1 << 62))
        numbered = []
        for t in new:
            if pool:
                i, content = pool.pop(0)
                if content is not None:
                    freed[i] = content
            else:
                i = next(counter)
            t = copy.copy(t)  # dataclasses.replace re-runs __init__: 20 ms for 2,000 entries
            t.id = i
            numbered.append(t)
        new, notes = numbered, list(notes)
        set_ignore = self.family is not None and self.family.needs_ignore_merges(new)
        why_as_written = ("model-specific classes rebuild it from vocab and merges and would drop ignore_merges"
                          if set_ignore else self.family.rebuild_breaks(new) if self.family is not None else None)
        if not why_as_written and self.llama_class_over_byte_level():
            why_as_written = BYTE_LEVEL_UNDER_LLAMA
        if why_as_written and (self.config or {}).get("tokenizer_class") not in FILE_AS_WRITTEN_CLASSES:
            notes.append(self.class_note(why_as_written))
        gap = None
        if isinstance(self.model.get("vocab"), list) and new and start > len(self.model["vocab"]):  # Unigram
            gap = (len(self.model["vocab"]), start)
            taken = {t["id"] for t in self.added.values()}
            free = [i for i in range(*gap) if i not in taken]
            if free:
                notes.append(f"Unigram ids {free[0]}..{free[-1]} (rows already in the checkpoint) hold placeholder "
                             f"pieces {GAP_PIECE.format('N')!r} that are never produced, so new ids match their rows")
        if self.adopted and new:
            notes.append(f"{TOKENIZER_FILE} written with the pipeline transformers' {self.adopted} builds on load, not "
                         "the file's own normalizer and pre-tokenizer, which tokenize some text otherwise (e.g. text that "
                         "starts with a space): the output gives text without new words the ids AutoTokenizer gave it")
        elif self.rewritten and new:
            notes.append(f"{TOKENIZER_FILE}'s Metaspace pre-tokenizer (prepend_scheme 'always') written as normalizer "
                         "steps that give every text the same ids, so that new words are added tokens matched on "
                         "normalized text (as in Meta's Llama 2 layout)")
        if self.converted_from:
            # with no tokenizer_config.json, only the converting class knew the BOS, EOS, UNK and special tokens
            written = (f"; {TOKENIZER_CONFIG} written with tokenizer_class PreTrainedTokenizerFast"
                       + "".join(f", {k} {f'({len(v)} tokens)' if isinstance(v, list) else repr(v)}"
                                 for k, v in self._class_defaults().items())
                       if self.config is None and not why_as_written else "")
            notes.append(f"{self.slow_file} converted to {TOKENIZER_FILE} with transformers' {self.converted_from}{written}")
        if reuse is not None:
            taken = [t.id for t in new if t.id < start]
            notes.append(
                f"--reuse-reserved: {len(taken)} new tokens took existing rows"
                + (f" ({len(freed)} of them reserved tokens, e.g. {next(iter(freed.values()))!r})" if freed else "")
                + f"; {len(new) - len(taken)} rows appended"
            )
        return TokenizerPlan(self.family_name, new, list(skipped), set_ignore, notes, gap, self.tok, freed,
                             file_as_written=bool(why_as_written))

    def _failures(self, plan: TokenizerPlan, chat: list[str]) -> tuple[dict[str, str], dict, dict]:
        """Words of `plan` that the edited tokenizer, built in memory, does not make one token
        everywhere, each with the reason: checked at a sentence start, after a space, before
        punctuation and next to another new word, decoding as the original does (where it decodes
        the text faithfully); and words whose new ids appear in `chat` (old text: the rendered chat
        template), which must keep its ids.

        Returns:
            (the failing words with their reasons, the kept words that are not one token in brackets,
            quotes or before "'s", with those texts). Those contexts do not skip a word: where they
            fail, the pre-tokenizer joins "(" or '"' to the word, so no entry can be produced there
            without changing old text (Llama 3's "(striped"), and the word keeps its old pieces there.
        """
        if not plan.new:
            return {}, {}, {}
        tok = self.edited_tokenizer(plan)
        failures: dict[str, str] = {}
        owner = {t.id: t.text for t in plan.new}
        self._check_resplits(plan, tok)
        for text, culprits in self._changed(tok, chat, owner):
            if not culprits:
                raise InputError(f"{self.dir / TOKENIZER_FILE}: the new tokens change how the rendered chat "
                                 "template tokenizes, and no single word is the cause; open an issue with the "
                                 "model name and the tokens")
            for w in culprits:
                failures.setdefault(w, f"the chat template's own text has it ({_around(text, w)!r}); adding it "
                                       "would change the ids of every chat prompt")
        # llama.cpp's converter recognises these families by one text's ids: else the output would not convert
        checked = [CHECK_TEXT] if self.family_name in HASHED_FAMILIES else []
        for text, culprits in self._changed(tok, checked, owner):
            for w in culprits:
                failures.setdefault(w, "llama.cpp's GGUF converter recognises this tokenizer by the ids it gives one "
                                       f"fixed text, which holds it ({_around(text, w)!r}); as one token it "
                                       "would make the output refuse to convert to GGUF")
        by_word: dict[str, list[NewToken]] = {}
        for t in plan.new:
            by_word.setdefault(t.text, []).append(t)
        words = [w for w in by_word if w not in failures]
        ids_of = {w: {t.id for t in by_word[w]} for w in words}
        plain = [w for w in words if by_word[w][0].mechanism != "special"]
        for w in plain:  # a form that is one existing token ("return" when " return" is one) counts too
            for form in (w, " " + w):
                ids = self.encode(form)
                if len(ids) == 1:
                    ids_of[w].add(ids[0])
        cases = contexts.cases(words, special={w for w in words if by_word[w][0].mechanism == "special"})
        # A word the normalizer folds into other text ("m²" is "m2" after NFKC) is stored folded, so text
        # that has the folded form without the word is old text that must keep its ids: inside a word.
        folded = {w: key for w in plain
                  if (key := self.normalize(w).replace("▁", " ").strip()) != w and key.lower() != w.lower()}
        for w, key in folded.items():
            for text in (f"ex{key}.n", f"ex{key}x"):
                old, new_ids = self.encode(text), tok.encode(text, add_special_tokens=False).ids
                if old != new_ids and w not in failures:
                    failures[w] = (f"the tokenizer folds it to {key!r} (Unicode NFKC), and a new {key!r} would change how "
                                   f"existing text with {key!r} tokenizes (e.g. {text!r})")
        texts = [c.text for c in cases]
        got_ids = encode_ids(tok, texts)
        decoded = [j for j, c in enumerate(cases) if c.context.decode]
        gots = dict(zip(decoded, tok.decode_batch([got_ids[j] for j in decoded])))
        decode = self._decode_mismatches({j: texts[j] for j in decoded}, gots)
        soft: dict[str, list[int]] = {}  # word -> indices of the soft contexts it misses
        missed = set(contexts.misses(cases, got_ids, ids_of, self.space_lead()))
        for j, case in enumerate(cases):
            for w in case.expect:
                if w in failures or (j, w) not in missed:
                    continue
                if case.context.soft:
                    soft.setdefault(w, []).append(j)
                    continue
                ids = got_ids[j]
                pieces = [tok.id_to_token(i) for i in ids[:12]] + (["..."] if len(ids) > 12 else [])
                mechs = "/".join(dict.fromkeys(t.mechanism for t in by_word[w]))
                failures[w] = (f"would not be one token in {case.text!r} (it would encode as {pieces}): the "
                               f"{self.family_name} entries ({mechs}) cannot make it one token there")
            w = next(iter(case.expect))
            if j in decode and w not in failures:
                want, got = decode[j]
                failures[w] = f"{case.text!r} would decode as {got!r}, but the original tokenizer gives {want!r}"
        loader, cls = self._as_transformers_loads(plan)
        if loader is not None:  # the class rebuilds the tokenizer: it must tokenize as the file does
            # only where the original, loaded the same way, agrees with its own file on that text
            base = self._original_as_loaded()
            self.prefetch(texts)
            agree = [b == self.encode(t) for t, b in zip(texts, encode_ids(base, texts))] if base else [True] * len(texts)
            loaded_ids = encode_ids(loader, texts)
            for j, rebuilt in enumerate(loaded_ids):
                if rebuilt != got_ids[j] and agree[j]:
                    for w in cases[j].expect:
                        pieces = [loader.id_to_token(i) for i in rebuilt[:12]]
                        failures.setdefault(w, f"transformers' {cls} rebuilds the tokenizer on load and would encode "
                                               f"{cases[j].text!r} as {pieces}")
            # what users get is the rebuilt tokenizer: a context is reported only where that one misses too
            loaded_missed = set(contexts.misses(cases, loaded_ids, ids_of, self.space_lead()))
            file_only = {w: [texts[j] for j in js if (j, w) not in loaded_missed] for w, js in soft.items()}
            soft = {w: [j for j in js if (j, w) in loaded_missed] for w, js in soft.items()}
        else:
            file_only = {}
        return (failures, {w: [texts[j] for j in js] for w, js in soft.items() if w not in failures and js},
                {w: ts for w, ts in file_only.items() if w not in failures and ts})

    def _changed(self, tok: Tokenizer, texts: list[str], owner: dict[int, str]):
        """Each of `texts` (old text that must keep its ids) that the edited tokenizer `tok` gives other ids than
        the original, with the new words whose ids it now holds (in order of appearance)."""
        if not texts:
            return
        for text, want, got in zip(texts, encode_ids(self.tok, texts), encode_ids(tok, texts)):
            if got != want:
                yield text, [owner[i] for i in dict.fromkeys(got) if i in owner]

    def _check_resplits(self, plan: TokenizerPlan, tok: Tokenizer) -> None:
        """Tokenize every old text that holds a new word inside a longer word (`holders`) with the original and
        the edited tokenizer `tok`, and report each change per word (`plan.resplits`): where the family's
        entries cannot keep longer words (added tokens, merges, Unigram pieces, WordPiece entries)."""
        held = self.holders(list(dict.fromkeys(t.text for t in plan.new)), self._corpus)
        # and made-up ones ("Frodos", "unFrodo"): an added token or a merge re-splits longer words that neither the
        # vocabulary nor the corpora hold (a user's own text), so the word is reported by what its entries do, not by
        # what the plan happens to see. Not for words whose entries are all byte-level entries that only
        # ignore_merges reaches: only a whole pre-token equal to one reaches it, never a longer word.
        whole = self.family_name == "byte-level-bpe"
        made = {w: resplit.made_up(w) for w in dict.fromkeys(t.text for t in plan.new
                                                             if not (whole and t.mechanism == "vocab"))}
        plan.checked_holders = sum(map(len, held.values())) + sum(map(len, made.values()))
        plan.resplits.update(resplit.changed(self.tok, tok, held, {t.id: t.text for t in plan.new}, made))

    def splits_numbers(self) -> bool:
        """Whether the pre-tokenizer cuts numbers into single digits or groups (Llama 3: up to three,
        Qwen and SmolLM: one), so that a token with digits would change how other numbers tokenize."""
        if not hasattr(self, "_splits_numbers"):  # Llama 2 splits them by its vocabulary: no piece of 2+ digits
            multi = re.compile(r"[▁Ġ]?[0-9]{2,}")
            self._splits_numbers = len(self.pretokenize("1234567")) > 1 or not any(multi.fullmatch(p) for p in self.vocab)
        return self._splits_numbers

    def space_lead(self) -> int:
        """How many pieces the original gives a lone leading space before a word: 0 where " a" is
        one piece ("Ġa"), 1 where the space is a piece of its own (Llama 2's normalizer: "▁" + "▁a")."""
        return contexts.space_lead(self.encode)

    def forced_class(self) -> str | None:
        """The tokenizer class transformers loads this checkpoint with whatever tokenizer_class says, or None.

        transformers 5 lists model types whose Hub tokenizer_config.json names a wrong class
        (tokenization_auto.MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS: qwen2, phi3, internlm2, ...) and loads
        them with the class it registers for the type (Qwen2Tokenizer), which builds its own BPE model
        from vocab and merges: tokenizer.json's model options (ignore_merges) are lost. Read from
        config.json's model_type; None without one, or with a transformers that has no such list (the
        in-memory load of the plan still checks what loads)."""
        if not hasattr(self, "_forced_class"):
            self._forced_class = None
            cfg = self.dir / CONFIG_NAME
            config = self.model_config if self.model_config is not None else read_json(cfg) if cfg.exists() else {}
            model_type = config.get("model_type")
            if model_type is None or model_type not in _types_with_incorrect_hub_class():
                return None
            try:
                from transformers.models.auto import tokenization_auto as auto
            except Exception:  # noqa: BLE001 - no transformers list: nothing is known to be forced
                return None
            if model_type in getattr(auto, "MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS", ()):
                name = (getattr(auto, "TOKENIZER_MAPPING_NAMES", {}).get(model_type) or "").removesuffix("Fast")
                if name and name not in FILE_AS_WRITTEN_CLASSES | {"PythonBackend"}:
                    self._forced_class = name
        return self._forced_class

    def class_note(self, why: str) -> str:
        """The note of a plan whose tokenizer_config.json gets tokenizer_class PreTrainedTokenizerFast, for reason `why`."""
        kept = "".join(f", {k} {f'({len(v)} tokens)' if isinstance(v, list) else repr(v)} kept"
                       for k, v in self._class_defaults().items())
        return (f"tokenizer_class {(self.config or {}).get('tokenizer_class')} -> PreTrainedTokenizerFast, so "
                f"transformers loads tokenizer.json as written ({why}{kept})")

    def llama_class_over_byte_level(self) -> str | None:
        """The class tokenizer_config.json names where it is LlamaTokenizer(Fast) over a byte-level tokenizer.json
        (DeepSeek V3's layout), else None.

        transformers 5.22 on load such a file as written (TokenizersBackend); 5.17 to 5.21 rebuild it with
        LlamaTokenizer's SentencePiece pipeline (Metaspace), which gives most text other ids (a Russian paragraph
        three). So the input is read as 5.22 loads it and the output names PreTrainedTokenizerFast, which every
        supported transformers loads as written. The test is transformers 5.22's own (tokenization_auto.py: no
        auto_map, the model type not Mistral's, '"ByteLevel"' in tokenizer.json: here in its pipeline)."""
        if not hasattr(self, "_llama_over_byte_level"):
            self._llama_over_byte_level = None
            cfg = self.config or {}
            declared = cfg.get("tokenizer_class")
            if self.converted_from is None and isinstance(declared, str) \
                    and declared.removesuffix("Fast") == "LlamaTokenizer" and not cfg.get("auto_map") \
                    and '"ByteLevel"' in json.dumps([self.data.get(k) for k in PIPELINE]):
                config_file = self.dir / CONFIG_NAME
                config = self.model_config if self.model_config is not None \
                    else read_json(config_file) if config_file.exists() else {}
                try:
                    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES
                except Exception:  # noqa: BLE001 - no mapping to ask: no model type is Mistral's
                    TOKENIZER_MAPPING_NAMES = {}
                mapped = TOKENIZER_MAPPING_NAMES.get(config.get("model_type")) or ""
                if not isinstance(mapped, str) or mapped.removesuffix("Fast") != "MistralCommonBackend":
                    self._llama_over_byte_level = declared
        return self._llama_over_byte_level

    def loads_otherwise(self) -> tuple[str, str] | None:
        """Where transformers loads the input with a class that rebuilds the tokenizer (tokenizer_class, or
        `forced_class`) and the rebuilt one tokenizes old text otherwise than tokenizer.json as written does:
        (the class, a text whose ids differ), else None (cached).

        GPT-4o's published files name GPT2Tokenizer over o200k's tokenizer.json: transformers 5 rebuilds it
        with GPT-2's regex ("don't" is "Ġdon" + "'t"; the file's regex gives "Ġdon't"). Switching such a
        checkpoint to PreTrainedTokenizerFast would change old text, so the class stays, and a word that
        needs tokenizer.json loaded as written is skipped. Checked on PROBES, texts where pre-tokenizers
        disagree (contractions, digits, spaces, punctuation, scripts)."""
        if not hasattr(self, "_loads_otherwise"):
            self._loads_otherwise = None
            declared = (self.config or {}).get("tokenizer_class")
            rebuilds = self.forced_class() or (declared if declared not in FILE_AS_WRITTEN_CLASSES else None)
            base = self._original_as_loaded() if rebuilds and not self.converted_from else None
            if base is not None:
                for text, want, got in zip(PROBES, encode_ids(self.tok, list(PROBES)), encode_ids(base, list(PROBES))):
                    if want != got:
                        self._loads_otherwise = (self._loaded_class or rebuilds, text)
                        break
        return self._loads_otherwise

    def _original_as_loaded(self) -> Tokenizer | None:
        """The original tokenizer as transformers builds it on load (cached), or None if it cannot;
        `_loaded_class` is then the class AutoTokenizer picked."""
        if not hasattr(self, "_loaded_original"):
            self._loaded_class: str | None = None
            loaded = self.as_loaded()
            self._loaded_original = None
            if loaded is not None:
                self._loaded_original = unpadded(Tokenizer.from_str(loaded.backend_tokenizer.to_str()))
                self._loaded_class = type(loaded).__name__
        return self._loaded_original

    def as_loaded(self):
        """The original as `AutoTokenizer` loads it (loaded once per editor, never modified here), or None
        when transformers cannot load it. The plan, its chat samples and validation share it."""
        if not hasattr(self, "_as_loaded"):
            try:
                from transformers import AutoTokenizer, PreTrainedTokenizerFast

                # as transformers >= 5.22 loads it (5.17 to 5.21 rebuild it with Metaspace: llama_class_over_byte_level)
                loader = PreTrainedTokenizerFast if self.llama_class_over_byte_level() else AutoTokenizer
                self._as_loaded = loader.from_pretrained(str(self.dir), trust_remote_code=False)
            except Exception as e:  # transformers raises many types; then every difference counts
                logger.info("transformers cannot load %s (%s: %s)", self.dir, type(e).__name__, e)
                self._as_loaded = None
        return self._as_loaded

    def _class_defaults(self) -> dict:
        """`class_defaults` of the input: what the tokenizer AutoTokenizer loads sets that tokenizer_config.json
        does not (the class named there where transformers cannot load it)."""
        cfg = self.config or {}
        return class_defaults(cfg.get("tokenizer_class"), cfg, self.as_loaded())

    def _built_pipeline(self) -> dict | None:
        """The normalizer, pre-tokenizer and decoder of the original as transformers builds it on load, or None."""
        tok = self._original_as_loaded()
        if tok is None:
            return None
        data = json.loads(tok.to_str())
        return {k: data.get(k) for k in PIPELINE}

    def _as_transformers_loads(self, plan: TokenizerPlan) -> tuple[Tokenizer | None, str | None]:
        """The edited tokenizer as transformers builds it on load, where the written tokenizer_class
        rebuilds it from vocab, merges and scores (GPT2Tokenizer, LlamaTokenizer, BertTokenizer, ...) or
        transformers forces such a class on the model type (`forced_class`); None where the class loads
        tokenizer.json as written, or no class is named. With it, the name of the class that loaded."""
        cfg = self.edited_config(plan)
        cls = (cfg or {}).get("tokenizer_class")
        rebuilt = cls is not None and cls not in FILE_AS_WRITTEN_CLASSES
        # a class forced on the model type matters where the entries rely on ignore_merges (it drops the option);
        # asked only then: it imports transformers, which a plain add never does
        if self.converted_from or not (rebuilt or (plan.set_ignore_merges and self.forced_class())):
            return None, None
        import shutil
        import tempfile

        from transformers import AutoTokenizer

        with tempfile.TemporaryDirectory(prefix="vocabsurgeon-plan-") as d:
            for f in self.dir.iterdir():  # what the loader reads besides the two files written here
                if f.is_file() and (f.suffix == ".json" or f.name == CHAT_TEMPLATE_FILES[0]) \
                        and f.name not in (TOKENIZER_FILE, TOKENIZER_CONFIG):
                    shutil.copyfile(f, Path(d) / f.name)
            write_json(Path(d) / TOKENIZER_FILE, self.edited(plan))
            write_json(Path(d) / TOKENIZER_CONFIG, cfg)
            try:
                tok = AutoTokenizer.from_pretrained(d, trust_remote_code=False)
            except Exception as e:  # transformers raises many types; the file check above still holds
                logger.warning("transformers cannot load the edited tokenizer in memory (%s: %s); only tokenizer.json "
                               "was checked", type(e).__name__, e)
                return None, None
        backend = getattr(tok, "backend_tokenizer", None)
        return (unpadded(Tokenizer.from_str(backend.to_str())) if backend is not None else None), type(tok).__name__

    def _decode_mismatches(self, texts: dict[int, str], gots: dict[int, str]) -> dict[int, tuple[str, str]]:
        """The texts (index -> text) that the edited tokenizer decodes (`gots`, index -> its decoding) otherwise than
        the original decodes its own ids of them, where the original decodes the text faithfully (as itself or as
        its normalized form: an <unk> or "c + +" there is no standard), as index -> (the original's, the edited's).

        The original's round trip is computed only where it can matter (`decode_mismatch`): with a decoding that is
        the text itself and the normalizer leaving it as it is, no round trip can be a mismatch (most texts)."""
        norms = {j: self.normalize(t) for j, t in texts.items()} if self.tok.normalizer is not None else texts
        todo = [j for j, t in texts.items() if may_mismatch(t, norms[j], gots[j])]
        wants = dict(zip(todo, self._decoded([texts[j] for j in todo])))
        return {j: (want, gots[j]) for j, want in wants.items() if decode_mismatch(texts[j], norms[j], gots[j], want)}

    def _decoded(self, texts: list[str]) -> list[str]:
        """How the original tokenizer decodes its own ids of each text (cached: the same texts are
        checked again in each round of `plan`)."""
        todo = [t for t in dict.fromkeys(texts) if t not in self._round_trips]
        if todo:
            self._round_trips.update(zip(todo, self.tok.decode_batch(encode_ids(self.tok, todo))))
        return [self._round_trips[t] for t in texts]

    def _draft(self, words: list[str], special: bool) -> tuple[list[NewToken], list[dict], list[str]]:
        """The entries of each word by its family's mechanisms (ids not yet given: -1), the words
        skipped and why, and notes for the report."""
        new: list[NewToken] = []
        skipped: list[dict] = []
        notes: list[str] = []
        claimed: dict[str, str] = {}
        planned: dict[str, str] = {}  # piece -> the word that took it
        family = self.family
        if family is None and not special:
            raise InputError(f"{self.file}: {self.family_name} tokenizers are not supported (supported: "
                             f"{', '.join(SUPPORTED_FAMILIES)}); open an issue with the model name")
        self.prefetch([f for w in words for f in ((w,) if special else (w, " " + w))])
        if not special:
            family.prepare(words)
        for w in words:
            existing = self.added.get(w)
            if existing is not None and existing.get("special"):
                skipped.append({"token": w, "reason": "already a special token"})
                continue
            if special:
                if self.has(w):
                    skipped.append({"token": w, "reason": "already in the vocabulary (not promoted to special)"})
                    continue
                new.append(NewToken(w, w, w, -1, "special", self.encode(w),
                                    score=family.special_score if family is not None else None))
                continue
            norm, why = family.normalization(w, claimed)
            if why is None and any(c.isdigit() for c in w) and self.splits_numbers():
                why = ("it has digits, and this tokenizer splits numbers into single digits or short groups before the "
                       "vocabulary is looked up; a token with digits would change how other numbers tokenize")
            if why is None:
                mine: list[NewToken] = []
                taken_by = None
                try:
                    for e in family.entries(w):
                        if e.piece in planned:
                            taken_by = planned[e.piece]
                            continue
                        if self.has(e.piece) or (e.mechanism == "added" and len(self.encode(e.form)) == 1):
                            continue  # this form is one token already
                        if family.admit(w, e):
                            mine.append(NewToken(w, e.form, e.piece, -1, e.mechanism, self.encode(e.form),
                                                 e.normalized, e.score))
                except Skip as e:
                    why = str(e)
                else:
                    earlier = (f"the same token as {taken_by!r}, earlier in the list (this tokenizer "
                               f"{'normalizes' if self.normalize(w) != w else 'stores'} it as that token's piece)"
                               if taken_by is not None else None)
                    why = None if mine else family.skip_reason(w) or earlier or "already in the vocabulary"
            if why is not None:
                skipped.append({"token": w, "reason": why})
                continue
            planned.update((t.piece, w) for t in mine)
            new.extend(mine)
            if norm is not None and any(t.piece == norm for t in mine):
                note = f"token {w!r} is stored as {norm!r}: the tokenizer normalizes text (e.g. lowercases) before lookup"
                notes.append(note)
        if not special:
            family.finish(new, notes)
        return new, skipped, notes

    def edited(self, plan: TokenizerPlan) -> dict:
        """The tokenizer.json object with the plan applied (self.data is left as it was)."""
        # Copy only what changes (the top level, the model, its vocab, the added tokens): a deep copy
        # of a 128k-entry tokenizer is slow; merges (copied only when one is appended) and the
        # rest are shared, never modified.
        data = dict(self.data)
        model = data["model"] = dict(data["model"])
        if isinstance(model.get("vocab"), dict):
            model["vocab"] = dict(model["vocab"])
        elif isinstance(model.get("vocab"), list):  # Unigram pairs are only appended to
            model["vocab"] = list(model["vocab"])
        if data.get("added_tokens") is not None:
            data["added_tokens"] = list(data["added_tokens"])
        vocab = model.get("vocab")
        if plan.set_ignore_merges:
            model["ignore_merges"] = True
        merged = sorted((t for t in plan.new if t.mechanism == "merge"), key=lambda t: t.id)
        if merged:  # appended last: the lowest priority (see families/byte_level_bpe.py)
            merges = model["merges"] = list(model.get("merges") or [])
            as_text = bool(merges) and isinstance(merges[0], str)  # "a b" (older files) or ["a", "b"]
            for t in merged:
                pair = self.family.merge_pair(t.form)
                if pair is None or "".join(pair) != t.piece:
                    raise VocabSurgeonError(f"internal: token {t.text!r} has no merge pair; nothing was written")
                merges.append(" ".join(pair) if as_text else list(pair))
        # Existing added tokens missing from the model vocabulary get their id there too: on load the
        # library numbers such tokens after the model's entries, which now include the new ones.
        if plan.freed:  # reserved placeholders given up for new tokens (--reuse-reserved)
            data["added_tokens"] = [t for t in data.get("added_tokens") or [] if t["id"] not in plan.freed]
            if isinstance(vocab, dict):
                for content in plan.freed.values():
                    vocab.pop(content, None)
        by_id = {t["id"]: t["content"] for t in data.get("added_tokens") or []}
        if isinstance(vocab, list):  # Unigram: the list index is the id
            if plan.gap:
                low = min((s for _, s in vocab), default=0.0) - 10.0
                vocab.extend([by_id[i], 0.0] if i in by_id else [GAP_PIECE.format(i), low] for i in range(*plan.gap))
            for t in sorted(plan.new, key=lambda t: t.id):
                if t.id != len(vocab):
                    raise VocabSurgeonError(f"internal: Unigram id {t.id} is not the next index {len(vocab)}")
                vocab.append([t.piece, t.score if t.score is not None else 0.0])
        elif isinstance(vocab, dict):
            if plan.new:
                for i, content in by_id.items():
                    vocab.setdefault(content, i)
            for t in plan.new:
                vocab[t.piece] = t.id
        else:
            raise InputError(f"{self.dir / TOKENIZER_FILE}: the model has no vocabulary; re-download it")
        if self.family is not None:
            data["decoder"] = self.family.decoder(plan.new, data.get("decoder"))
        added = data.setdefault("added_tokens", [])
        for t in plan.new:
            if t.mechanism in ("added", "special"):
                added.append({
                    "id": t.id, "content": t.piece, "single_word": False, "lstrip": False, "rstrip": False,
                    "normalized": t.normalized, "special": t.mechanism == "special",
                })
        return data

    def edited_tokenizer(self, plan: TokenizerPlan) -> Tokenizer:
        """The tokenizer of `edited(plan)`, built in memory without a JSON round trip of the vocabulary (issue 38)."""
        return unpadded(tokenizer_from_data(self.edited(plan), self._built))

    def edited_config(self, plan: TokenizerPlan) -> dict | None:
        """tokenizer_config.json with new added tokens registered where it lists them.

        When new entries rely on tokenizer.json model options (ignore_merges), the class is set to
        PreTrainedTokenizerFast: transformers 5 rebuilds model-specific classes (GPT2Tokenizer,
        Qwen2Tokenizer, ...) from vocab + merges with hard-coded options, which would drop ours
        and split the new words again. PreTrainedTokenizerFast loads tokenizer.json as written.
        """
        # a converted tokenizer.model with no tokenizer_config.json (Mistral's layout): the BOS, EOS, UNK and special
        # tokens come from the converting class only, so they are written, with tokenizer.json loaded as written
        needs_file_as_written = plan.file_as_written or (self.converted_from is not None and self.config is None)
        if self.config is None and not needs_file_as_written and not plan.freed:
            return None
        cfg = json.loads(json.dumps(self.config or {}))
        if needs_file_as_written and cfg.get("tokenizer_class") not in FILE_AS_WRITTEN_CLASSES:
            cfg.update(self._class_defaults())
            cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
        decoder = cfg.get("added_tokens_decoder")
        for i, content in plan.freed.items():
            if isinstance(decoder, dict):
                decoder.pop(str(i), None)
            for key in ("extra_special_tokens", "additional_special_tokens"):
                if isinstance(cfg.get(key), list) and content in cfg[key]:
                    cfg[key].remove(content)
        for t in plan.new:
            if t.mechanism in ("vocab", "merge"):  # model entries: listed as added tokens, converters would take them so
                continue
            if isinstance(decoder, dict):
                decoder[str(t.id)] = {
                    "content": t.piece, "lstrip": False, "normalized": t.normalized, "rstrip": False,
                    "single_word": False, "special": t.mechanism == "special",
                }
            if t.mechanism == "special":
                for key in ("extra_special_tokens", "additional_special_tokens"):
                    if isinstance(cfg.get(key), list):
                        cfg[key].append(t.piece)
                        break
        return cfg

    def slow_model(self, plan: TokenizerPlan) -> tuple[str, bytes] | None:
        """The input's SentencePiece .model (tokenizer.model) with each new token appended as a piece at its id
        (a merge: a normal piece; an added token: user-defined, matched whole; a special token: control), for a SentencePiece
        BPE tokenizer whose new ids follow the .model's last piece (sentencepiece_model says why it is kept).
        None where the file is absent or cannot hold the plan (reserved ids reused, another family, ids
        elsewhere): the output then leaves it out, as a file without the new tokens."""
        name = self.slow_file
        if not plan.new or name is None or not name.endswith(".model") or self.family_name != SentencePieceBPE.name \
                or plan.freed or plan.gap or any(t.mechanism not in ("added", "special", "merge") for t in plan.new):
            return None
        data = (self.dir / name).read_bytes()
        try:
            count = sentencepiece_model.piece_count(data)
        except ValueError as e:
            logger.info("%s: not read as a SentencePiece model (%s); left out of the output", self.dir / name, e)
            return None
        new = sorted(plan.new, key=lambda t: t.id)
        if [t.id for t in new] != list(range(count, count + len(new))):
            return None
        kinds = {"special": sentencepiece_model.CONTROL, "merge": sentencepiece_model.NORMAL}
        pieces = [(self.normalize(t.piece) if t.normalized else t.piece.replace(" ", "▁"),
                   kinds.get(t.mechanism, sentencepiece_model.USER_DEFINED)) for t in new]
        return name, sentencepiece_model.with_pieces(data, pieces)

    def write(self, plan: TokenizerPlan, out_dir: Path) -> list[str]:
        """Write the edited tokenizer files into out_dir; returns the file names written."""
        write_json(out_dir / TOKENIZER_FILE, self.edited(plan))
        written = [TOKENIZER_FILE]
        if plan.slow_model is not None:
            name, data = plan.slow_model
            (out_dir / name).write_bytes(data)
            written.append(name)
        cfg = self.edited_config(plan)
        if cfg is not None:
            write_json(out_dir / TOKENIZER_CONFIG, cfg)
            written.append(TOKENIZER_CONFIG)
        logger.info("wrote %s", ", ".join(written))
        return written


def verify_tokenizer(out_dir: Path, plan: TokenizerPlan) -> None:
    """Reload the written tokenizer and check each new token's id, one-token-ness and decoding.

    The ids of tokenizer.json are not authoritative on load, so each new piece must map back to
    the row initialized for it; each new word must be one token at a sentence start and after a
    space; and a sentence with it must decode as the original tokenizer decodes it.

    Raises:
        VocabSurgeonError: when any check fails (a bug: the output is not published).
    """
    tok = unpadded(Tokenizer.from_file(str(out_dir / TOKENIZER_FILE)))
    for t in plan.new:
        got = tok.token_to_id(t.piece)
        if got != t.id:
            raise VocabSurgeonError(
                f"token {t.text!r}: the reloaded tokenizer gives id {got}, but row {t.id} was initialized "
                "for it; this is a bug, please report it"
            )
    if plan.original is not None:
        for i, t in plan.original.get_added_tokens_decoder().items():
            if i in plan.freed:
                continue  # a reserved placeholder given up for a new token
            if tok.token_to_id(t.content) != i:
                raise VocabSurgeonError(
                    f"token {t.content!r}: the reloaded tokenizer gives id {tok.token_to_id(t.content)}, but it was "
                    f"{i} before; this is a bug, please report it"
                )
    # Group by word once (a scan of plan.new per word is quadratic: hours for 50,000 words), and
    # encode and decode in batches (one call into Rust per check instead of one per word).
    by_word: dict[str, list[NewToken]] = {}
    for t in plan.new:
        by_word.setdefault(t.text, []).append(t)
    words = list(by_word)
    special = {w for w in words if by_word[w][0].mechanism == "special"}
    plain = [w for w in words if w not in special]
    original = plan.original
    lead = contexts.space_lead(lambda t: original.encode(t, add_special_tokens=False).ids) if original else 0
    # every context of the table: a word is one token there, or the plan reported the context (a soft one)
    cases = contexts.cases(words, special)
    ids_of: dict[str, set[int] | None] = {w: {t.id for t in by_word[w]} for w in words}
    if original is not None:  # a form that was one token already counts too (" José" on GPT-2)
        forms = [(w, f) for w in plain for f in (w, " " + w)]
        for (w, _), ids in zip(forms, encode_ids(original, [f for _, f in forms])):
            if len(ids) == 1:
                ids_of[w].add(ids[0])
    else:
        ids_of = {w: ids_of[w] if w in special else None for w in words}
    for j, w in contexts.misses(cases, encode_ids(tok, [c.text for c in cases]), ids_of, lead):
        case = cases[j]
        if case.context.soft and (case.text in plan.contexts.get(w, ()) or
                                  case.text in plan.file_only_contexts.get(w, ())):
            continue
        ids = tok.encode(case.text, add_special_tokens=False).ids
        what = f"encodes to {ids}, not its id {by_word[w][0].id}" if w in special else \
            f"{case.text!r} encodes to {ids}, not one token" + (
                " (a context the plan did not report in contexts_not_one_token)" if case.context.soft else "")
        raise VocabSurgeonError(f"token {w!r}: {what}; this is a bug, please report it")
    if plan.original is None:
        return
    texts = [c.text for c in contexts.cases(plain, names=("repeated",))]
    wants = plan.original.decode_batch(encode_ids(plan.original, texts))
    gots = tok.decode_batch(encode_ids(tok, texts))
    for w, text, want, got in zip(plain, texts, wants, gots):
        # Only where the original decodes the text faithfully: an <unk> or "c + +" there is no standard.
        if got != want:
            normalized = plan.original.normalizer.normalize_str(text) if plan.original.normalizer else text
            if want in (text, normalized):
                raise VocabSurgeonError(
                    f"token {w!r}: {text!r} decodes as {got!r}, but the original tokenizer gives {want!r}; "
                    "this is a bug, please report it"
                )
