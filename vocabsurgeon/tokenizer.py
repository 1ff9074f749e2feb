"""Adding tokens to a `tokenizer.json` so new words behave like native words.

Plain `add_tokens` makes an *added token*, matched before pre-tokenization. On byte-level BPE
that leaves a lone "Ġ" before the word (" Frodo" -> "Ġ" + "Frodo"), doubling the cost it was
meant to save. Instead, per family:

- byte-level BPE (GPT-2, Llama 3, Qwen): a word that the pre-tokenizer keeps in one piece gets
  two real vocabulary entries, the bare form ("Frodo") and the word-start form ("ĠFrodo"), as
  native words have, and the BPE model gets `ignore_merges` (as Llama 3 ships) so a pre-token
  that is a whole vocabulary entry maps to it directly. No merges are added, so text without the
  new words tokenizes exactly as before; this is checked on the vocabulary before it is relied on.
  A word the pre-tokenizer splits (e.g. "C++", "Minas Tirith") becomes a pair of added tokens,
  "C++" and " C++".
- special tokens (`--special`): added tokens with `special: true`, skipped by
  `decode(skip_special_tokens=True)`.

Every new token also goes into the model vocabulary at its id, because on load the ids of
`added_tokens` are not authoritative: the library reassigns ids to tokens missing from the model.
"""

from __future__ import annotations

import json
import logging
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tokenizers import Tokenizer

from .checkpoint import read_json
from .errors import InputError, VocabSurgeonError
from .writer import write_json

logger = logging.getLogger(__name__)

TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
MAX_TOKEN_CHARS = 256


@dataclass
class NewToken:
    """One new vocabulary entry (a row of every vocabulary matrix)."""

    text: str  # the word as the user gave it
    form: str  # the text this entry stands for: the word, or " " + word for the word-start form
    piece: str  # the string stored in the tokenizer (e.g. "ĠFrodo")
    id: int
    mechanism: str  # "vocab" (a real BPE entry), "added" or "special" (an added token)
    pieces: list[int] = field(default_factory=list)  # ids of `form` under the original tokenizer


@dataclass
class TokenizerPlan:
    family: str
    new: list[NewToken]
    skipped: list[dict]  # {"token": ..., "reason": ...}
    set_ignore_merges: bool = False

    def to_dict(self) -> dict:
        return {"family": self.family, "new": [asdict(t) for t in self.new], "skipped": self.skipped}


def read_tokens_file(path: str | Path) -> list[str]:
    """Read new tokens: UTF-8, one per line. Every problem names the line and nothing is written.

    Raises:
        InputError: invalid UTF-8, an empty or whitespace-padded line, a control character, a
            duplicate, or a token longer than MAX_TOKEN_CHARS characters.
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise InputError(f"{p}: cannot read the tokens file ({e.strerror})") from None
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    tokens: list[str] = []
    seen: dict[str, int] = {}
    for no, bline in enumerate(lines, 1):
        if bline.endswith(b"\r"):
            bline = bline[:-1]
        try:
            tok = bline.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InputError(f"{p}:{no}: invalid UTF-8 at byte {e.start}; save the file as UTF-8") from None
        if not tok.strip():
            raise InputError(f"{p}:{no}: empty or whitespace-only token; remove the line")
        if tok != tok.strip():
            raise InputError(
                f"{p}:{no}: token {tok!r} has leading or trailing whitespace; remove it "
                "(word-start forms like ' Frodo' are added automatically)"
            )
        bad = [c for c in tok if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Cn") and c not in "\u200d"]
        if bad:
            raise InputError(f"{p}:{no}: token {tok!r} contains control character U+{ord(bad[0]):04X}; remove it")
        if len(tok) > MAX_TOKEN_CHARS:
            raise InputError(f"{p}:{no}: token is {len(tok)} characters, over the limit of {MAX_TOKEN_CHARS}; shorten it")
        if tok in seen:
            raise InputError(f"{p}:{no}: token {tok!r} duplicates line {seen[tok]}; remove one of them")
        seen[tok] = no
        tokens.append(tok)
    if not tokens:
        raise InputError(f"{p}: no tokens in the file; write one token per line")
    return tokens


def detect_family(data: dict) -> str:
    """Name the tokenizer family of a parsed tokenizer.json."""
    model = data.get("model") or {}
    mtype = model.get("type")

    def has(node, kind: str) -> bool:
        if not isinstance(node, dict):
            return False
        if node.get("type") == kind:
            return True
        return any(has(n, kind) for n in node.get("pretokenizers") or node.get("normalizers") or [])

    if mtype == "BPE" and has(data.get("pre_tokenizer"), "ByteLevel"):
        return "byte-level-bpe"
    if mtype == "BPE" and (has(data.get("pre_tokenizer"), "Metaspace") or has(data.get("normalizer"), "Prepend")):
        return "sentencepiece-bpe"
    if mtype == "Unigram":
        return "unigram"
    if mtype == "WordPiece":
        return "wordpiece"
    return f"other ({mtype})"


class TokenizerEditor:
    """A checkpoint's fast tokenizer, opened for adding tokens."""

    def __init__(self, path: str | Path):
        self.dir = Path(path)
        file = self.dir / TOKENIZER_FILE
        if not file.exists():
            raise InputError(
                f"{file}: missing; vocabsurgeon edits fast tokenizers (tokenizer.json). Convert the "
                "tokenizer with transformers (AutoTokenizer.from_pretrained(dir).save_pretrained(dir)) first"
            )
        self.data = read_json(file)
        try:
            self.tok = Tokenizer.from_str(json.dumps(self.data))
        except Exception as e:  # the Rust parser raises plain Exception subclasses
            raise InputError(f"{file}: the tokenizers library cannot load it ({e}); re-download it") from None
        cfg = self.dir / TOKENIZER_CONFIG
        self.config = read_json(cfg) if cfg.exists() else None
        self.family = detect_family(self.data)
        self.model = self.data["model"]
        self.vocab: dict[str, int] = self.model.get("vocab") if isinstance(self.model.get("vocab"), dict) else {}
        self.added = {t["content"]: t for t in self.data.get("added_tokens") or []}
        self._check_ids()

    def _check_ids(self) -> None:
        for content, t in self.added.items():
            vid = self.vocab.get(content)
            if vid is not None and vid != t["id"]:
                raise InputError(
                    f"{self.dir / TOKENIZER_FILE}: token {content!r} has id {t['id']} in added_tokens but "
                    f"{vid} in the model vocabulary; the tokenizer is inconsistent, fix or re-download it"
                )

    @property
    def size(self) -> int:
        """One past the largest id the tokenizer can produce."""
        ids = list(self.vocab.values()) + [t["id"] for t in self.added.values()]
        if not ids:
            return self.tok.get_vocab_size(with_added_tokens=True)
        return max(ids) + 1

    def has(self, piece: str) -> bool:
        return piece in self.vocab or piece in self.added

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def _pretokenize(self, text: str) -> list[str]:
        if self.tok.normalizer is not None:
            text = self.tok.normalizer.normalize_str(text)
        if self.tok.pre_tokenizer is None:
            return [text]
        return [p for p, _ in self.tok.pre_tokenizer.pre_tokenize_str(text)]

    def _merges_are_redundant(self) -> bool:
        """True when ignore_merges cannot change how existing text tokenizes.

        With ignore_merges a pre-token that is a whole vocabulary entry maps to that entry; that
        only differs from plain BPE for an entry that BPE does not rebuild as itself.
        """
        if self.model.get("ignore_merges"):
            return True
        bpe = self.tok.model
        for piece in self.vocab:
            if piece in self.added:
                continue
            if [t.value for t in bpe.tokenize(piece)] != [piece]:
                logger.info("vocabulary entry %r is not rebuilt by its merges", piece)
                return False
        return True

    def plan(self, words: list[str], *, special: bool = False, first_id: int | None = None) -> TokenizerPlan:
        """Decide the new entries and their ids (from `first_id`, default `size`)."""
        next_id = self.size if first_id is None else first_id
        new: list[NewToken] = []
        skipped: list[dict] = []
        vocab_ok = self.family == "byte-level-bpe" and not special and self._merges_are_redundant()
        if self.family == "byte-level-bpe" and not special and not vocab_ok:
            logger.warning("this BPE vocabulary has entries its merges do not rebuild; new words become added tokens")
        for w in words:
            existing = self.added.get(w)
            if existing is not None and existing.get("special"):
                skipped.append({"token": w, "reason": "already a special token"})
                continue
            if special:
                if self.has(w):
                    skipped.append({"token": w, "reason": "already in the vocabulary (not promoted to special)"})
                    continue
                new.append(NewToken(w, w, w, next_id, "special", self.encode(w)))
                next_id += 1
                continue
            forms = [w, " " + w]
            pre = [self._pretokenize(f) for f in forms]
            if vocab_ok and all(len(p) == 1 for p in pre):
                entries = [(f, p[0], "vocab") for f, p in zip(forms, pre)]
            else:
                entries = [(f, f, "added") for f in forms]
            added_any = False
            for form, piece, mech in entries:
                if self.has(piece):
                    continue
                new.append(NewToken(w, form, piece, next_id, mech, self.encode(form)))
                next_id += 1
                added_any = True
            if not added_any:
                skipped.append({"token": w, "reason": "already in the vocabulary"})
        set_ignore = any(t.mechanism == "vocab" for t in new) and not self.model.get("ignore_merges")
        return TokenizerPlan(self.family, new, skipped, set_ignore)

    def edited(self, plan: TokenizerPlan) -> dict:
        """The tokenizer.json object with the plan applied."""
        data = json.loads(json.dumps(self.data))
        model = data["model"]
        vocab = model.get("vocab")
        if not isinstance(vocab, dict):
            raise InputError(
                f"{self.dir / TOKENIZER_FILE}: {plan.family} tokenizers are not supported yet; "
                "open an issue with the model name"
            )
        if plan.set_ignore_merges:
            model["ignore_merges"] = True
        added = data.setdefault("added_tokens", [])
        for t in plan.new:
            vocab[t.piece] = t.id
            if t.mechanism in ("added", "special"):
                added.append({
                    "id": t.id, "content": t.piece, "single_word": False, "lstrip": False, "rstrip": False,
                    "normalized": False, "special": t.mechanism == "special",
                })
        return data

    def edited_config(self, plan: TokenizerPlan) -> dict | None:
        """tokenizer_config.json with new added tokens registered where it lists them."""
        if self.config is None:
            return None
        cfg = json.loads(json.dumps(self.config))
        decoder = cfg.get("added_tokens_decoder")
        for t in plan.new:
            if t.mechanism == "vocab":
                continue
            if isinstance(decoder, dict):
                decoder[str(t.id)] = {
                    "content": t.piece, "lstrip": False, "normalized": False, "rstrip": False,
                    "single_word": False, "special": t.mechanism == "special",
                }
            if t.mechanism == "special":
                for key in ("extra_special_tokens", "additional_special_tokens"):
                    if isinstance(cfg.get(key), list):
                        cfg[key].append(t.piece)
                        break
        return cfg

    def write(self, plan: TokenizerPlan, out_dir: Path) -> list[str]:
        """Write the edited tokenizer files into out_dir; returns the file names written."""
        (out_dir / TOKENIZER_FILE).write_text(
            json.dumps(self.edited(plan), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        written = [TOKENIZER_FILE]
        cfg = self.edited_config(plan)
        if cfg is not None:
            write_json(out_dir / TOKENIZER_CONFIG, cfg)
            written.append(TOKENIZER_CONFIG)
        return written


def verify_tokenizer(out_dir: Path, plan: TokenizerPlan) -> None:
    """Reload the written tokenizer and check each new token's id and that its form is one token.

    Raises:
        InputError: when the tokenizers library assigns a different id than the row we initialized.
    """
    tok = Tokenizer.from_file(str(out_dir / TOKENIZER_FILE))
    for t in plan.new:
        got = tok.token_to_id(t.piece)
        if got != t.id:
            raise VocabSurgeonError(
                f"token {t.text!r}: the reloaded tokenizer gives id {got}, but row {t.id} was initialized "
                "for it; this is a bug, please report it"
            )
        ids = tok.encode(t.form, add_special_tokens=False).ids
        if ids != [t.id]:
            raise VocabSurgeonError(
                f"token {t.text!r}: {t.form!r} encodes to {ids}, not the single id {t.id}; this is a bug, "
                "please report it"
            )
