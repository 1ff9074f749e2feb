"""Byte-level BPE (GPT-2, Llama 3, Qwen): entries "Frodo" and " Frodo" that only a whole pre-token reaches (issue 39),
merges and added tokens where ignore_merges is not allowed or --gguf-parity asks for what llama.cpp reads alike."""

from __future__ import annotations

import logging
import re

from tokenizers import Regex, pre_tokenizers

from ...errors import InputError
from .base import Entry, Family, Skip
from .pieces import FormIndex, byte_level, bytes_of, parts_of
from .shared import has_node, split_risks, splitting_note

logger = logging.getLogger(__name__)

_BYTE_ALPHABET = set(pre_tokenizers.ByteLevel.alphabet())
# The regex of tokenizers' ByteLevel pre-tokenizer with use_regex (tokenizers/src/pre_tokenizers/byte_level.rs, RE),
# split Isolated: GPT-2's pre-tokens.
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
UNSAFE_FORM = ("its bare form, as an added token, would decode garbled (ByteLevel), and cannot be a vocabulary "
               "entry: {}")
CHANGES_TEXT = "ignore_merges would change how this tokenizer splits existing text"


def split_pattern(pre) -> str | None:
    """The regex whose matches (split Isolated) are this pre-tokenizer's pre-tokens before their bytes
    are spelled, for the two layouts where that is all it does: GPT-2's ByteLevel(use_regex), and
    Sequence[Split(Regex, Isolated), ByteLevel(use_regex=False, no prefix space)] (Llama 3, Qwen,
    DeepSeek). None for any other layout: other pre-tokenizers, a Split of another behavior or a
    string pattern, a prefix space added to each piece (not a match of the regex), several Splits."""
    if not isinstance(pre, dict):
        return None
    if pre.get("type") == "ByteLevel":  # a prefix space is added before the split: pieces are still matches
        return GPT2_PATTERN if pre.get("use_regex", True) else None
    parts = pre.get("pretokenizers") if pre.get("type") == "Sequence" else None
    if not isinstance(parts, list) or len(parts) != 2 or not all(isinstance(x, dict) for x in parts):
        return None
    split, level = parts
    pattern = (split.get("pattern") or {}).get("Regex") if isinstance(split.get("pattern"), dict) else None
    if (split.get("type") != "Split" or not isinstance(pattern, str) or split.get("behavior") != "Isolated"
            or split.get("invert") or level.get("type") != "ByteLevel" or level.get("use_regex", True)
            or level.get("add_prefix_space")):
        return None
    return pattern


LOOKAHEAD = r"(?!\S)"  # the one context-dependent construct these patterns have: "not before a non-space"
_ESCAPES = set("sSdDwWhHrntfvae")  # escapes that match one character by its class, whatever surrounds it
_HEX = re.compile(r"\\x\{[0-9A-Fa-f]+\}|\\x[0-9A-Fa-f]{1,2}|\\u[0-9A-Fa-f]{4}")
_GROUP = re.compile(r"\(\?(?::|[im]+(?:-[im]+)?:)")  # (?: and inline-flag groups (?i: (not x, which changes syntax)


def context_variants(pattern: str) -> tuple[str, str] | None:
    """`pattern` with each (?!\\S) made to always fail, and deleted (made to always succeed), or None
    unless (?!\\S) is the only thing in it that depends on text outside a match: no other lookaround,
    anchor (^ $ \\A \\z \\b \\G), back-reference, \\K, atomic group or possessive quantifier (a token
    scan, character classes read as one character each). Anything unknown answers None."""
    fail, true = [], []
    i, n, depth, quantified = 0, len(pattern), 0, False
    while i < n:
        c = pattern[i]
        quant = False
        if c == "\\":
            e = pattern[i + 1:i + 2]
            if e in ("p", "P") and pattern[i + 2:i + 3] == "{":
                j = pattern.find("}", i)
                if j < 0:
                    return None
                tok = pattern[i:j + 1]
            elif e in ("x", "u"):
                m = _HEX.match(pattern, i)
                if m is None:
                    return None
                tok = m.group()
            elif e and (e in _ESCAPES or not e.isalnum()):
                tok = pattern[i:i + 2]
            else:
                return None
        elif depth:  # inside a character class: whatever it holds, it matches one character
            depth += (c == "[") - (c == "]")
            tok = c
        elif c == "[":
            if pattern.startswith(("[]", "[^]"), i):  # a leading "]": read differently by engines
                return None
            depth, tok = 1, c
        elif pattern.startswith(LOOKAHEAD, i):
            fail.append("(?!)")
            i, quantified = i + len(LOOKAHEAD), False
            continue
        elif c == "(":
            m = _GROUP.match(pattern, i)
            if m is None and pattern[i + 1:i + 2] == "?":
                return None
            tok = m.group() if m else c
        elif c in "^$":
            return None
        elif c in "*+?":
            if c == "+" and quantified:  # a possessive quantifier (a*+, a{2}+ in some syntaxes): it never gives back
                return None
            quant, tok = not quantified, c  # "?" after a quantifier makes it lazy: no new quantifier
        else:
            quant, tok = c == "}", c  # "}" ends a {n,m} quantifier (\p{L} is read whole above)
        fail.append(tok)
        true.append(tok)
        quantified = quant
        i += len(tok)
    return ("".join(fail), "".join(true)) if depth == 0 else None


class WholePreTokens:
    """Which byte-level pieces can be a whole pre-token of some text: the only pieces that
    ignore_merges turns into one token (tokenizers' BPE looks the whole pre-token up first).

    For a layout of `split_pattern`, a pre-token is the byte spelling of a piece that the regex P
    split off (Isolated) from a segment of text (between added tokens, after the normalizer: neither
    matters below, whatever the segment is): a match of P, or a gap between matches. So a piece can
    be one only if:
    - it is spelled in the byte alphabet and its bytes are valid UTF-8: a pre-token is whole
      characters, since the regex engine (Oniguruma, on UTF-8) splits between characters
      ("[PAD151665]" passes, "Ã" alone, the first byte of "É", does not);
    - its text T can be a match: if P matched T inside some text, the same path through P matches
      T alone with T's end as the end of the string (P fullmatches T). That path reads only T's
      characters, except (?!\\S) at T's end, which saw the next character or the end of the text
      and succeeds at the end of the string; `context_variants` rejects every other construct that
      looks outside a match. This is checked with the tokenizer's own regex engine (tokenizers'
      Regex, Oniguruma: the same Unicode tables as the pre-tokenizer; the `regex` package's differ,
      e.g. U+0558 is a letter there and not here) as a Split removing \\A(?:P)\\z: T is a match
      only if that removes all of T. "[PAD151665]" is not: no alternative of Qwen's or Llama 3's
      patterns matches "[" then "P" ("[PAD" is matched by [^\\r\\n\\p{L}\\p{N}]?\\p{L}+, never a digit);
    - or it can be a gap (a run of positions at none of which the search finds a match): when P
      with (?!\\S) made to fail matches a prefix of T, that path reads only T's characters, so P
      matches at T's first position inside any text and T is no gap; that match is not empty, as P
      can never match empty text (with (?!\\S) deleted it does not match before "!" alone). The
      patterns of GPT-2, Llama 3 and Qwen match at every character (\\s+, \\p{N}, \\p{L}+ and
      [^\\s\\p{L}\\p{N}]+ cover them all), so they leave no gap at all.
    Both are over-approximations (some T that passes may never be a pre-token); never the reverse.
    tests/tokenizer/test_byte_level_reach.py checks them against the pre-tokenizer itself."""

    def __init__(self, pattern: str, fail: str, true: str):
        self.full = pre_tokenizers.Split(Regex(rf"\A(?:{pattern})\z"), "removed")
        self.starts = pre_tokenizers.Split(Regex(rf"\A(?:{fail})"), "removed")

    @classmethod
    def of(cls, pre) -> WholePreTokens | None:
        """For a tokenizer.json "pre_tokenizer", or None where its pre-tokens are not known this way."""
        pattern = split_pattern(pre)
        variants = context_variants(pattern) if pattern is not None else None
        if variants is None:
            return None
        fail, true = variants
        try:
            empty = pre_tokenizers.Split(Regex(rf"\A(?:{true})!"), "removed").pre_tokenize_str("!") == []
            return None if empty else cls(pattern, fail, true)
        except Exception as e:  # a pattern Oniguruma cannot compile once wrapped: keep the strict check
            logger.info("pre-tokenizer pattern %r: %s", pattern, e)
            return None

    def can_be_whole(self, piece: str) -> bool:
        raw = bytes_of(piece)
        if raw is None:
            return False
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return False
        if self.full.pre_tokenize_str(text) == []:
            return True  # a match of the pattern
        return [p for p, _ in self.starts.pre_tokenize_str(text)] == [text]  # a gap, unless a match starts there


class ByteLevelBPE(Family):
    """Two entries per word, "Frodo" and " Frodo" (the space is part of the second), chosen so that a longer
    word that holds the word keeps its old pieces (issue 39; `entries` says which, docs/families.md why):
    - where ignore_merges is allowed, a form that is a whole pre-token is a vocabulary entry that only
      ignore_merges reaches: no longer pre-token ever changes; transformers reaches it, llama.cpp only
      where its pre-tokenizer type sets ignore_merges, and gives the word its old pieces elsewhere;
    - elsewhere, and with --gguf-parity (only what llama.cpp reads as transformers does), a form that an
      added token would break (a bare form the ByteLevel decoder would garble, "Éowyn" -> "Ã\\x89owyn", or a
      form inside an existing token, "return" inside " return") and that is a whole pre-token is one merge
      appended last where BPE splits it into two existing pieces, a garbled form is an added token with a
      Replace step before the decoder that spells it as its bytes (`decoder`); other forms are added tokens.
      The plan reports the longer words these re-split (TokenizerPlan.resplits).
    No merge chain: its first merge would join two pieces of the word wherever they meet ("M" "Ã¼" in
    "Müde"), changing text without the word. Skipped: a garbled form that can be none of these, a
    word whose bare form would split its own word-start token and cannot be an entry."""

    name = "byte-level-bpe"

    @staticmethod
    def matches(data: dict) -> bool:
        return (data.get("model") or {}).get("type") == "BPE" and has_node(data.get("pre_tokenizer"), "ByteLevel")

    def __init__(self, editor):
        super().__init__(editor)
        self._redundant: bool | None = None
        self.blocked: dict[str, str] = {}  # word -> why its bare form can be neither an added token nor an entry
        self.unsafe: list[str] = []  # words whose garbled bare form cannot be an entry here (UNSAFE_FORM)
        self.risks: dict[str, str] = {}
        self.inside_old: set[str] = set()  # garbled forms whose characters an existing token holds
        self.not_for_gguf: set[str] = set()  # words with a form left out by --gguf-parity (only ignore_merges reaches it)

    # --- what this family knows about its tokenizer

    def merges_are_redundant(self) -> bool:
        """True when ignore_merges cannot change how existing text tokenizes.

        With ignore_merges a pre-token that is a whole vocabulary entry maps to that entry; that
        only differs from plain BPE for an entry that BPE does not rebuild as itself. Computed once.
        """
        if self._redundant is None:
            self._redundant = bool(self.ed.model.get("ignore_merges")) or self._all_rebuilt()
        return self._redundant

    def entries_allowed(self) -> bool:
        """True when new vocabulary entries (which rely on ignore_merges) are safe and survive loading:
        the merges are redundant, and transformers does not rebuild the model on load without the option
        (`TokenizerEditor.forced_class`: Qwen2Tokenizer for a qwen2 checkpoint keeps merges, not ignore_merges)."""
        return self.merges_are_redundant() and self.ed.forced_class() is None and self.ed.loads_otherwise() is None

    def no_entries_reason(self) -> str:
        """Why new vocabulary entries are not allowed here (see entries_allowed)."""
        if self.merges_are_redundant() and self.ed.forced_class():
            return (f"transformers loads this model type with {self.ed.forced_class()}, which rebuilds the BPE model "
                    "from vocab and merges without ignore_merges")
        if self.merges_are_redundant() and self.ed.loads_otherwise():
            cls, text = self.ed.loads_otherwise()
            return (f"transformers loads this tokenizer as {cls}, which rebuilds it from vocab and merges without "
                    f"ignore_merges and with its own pre-tokenizer; loading tokenizer.json as written instead would "
                    f"change how old text tokenizes (e.g. {text!r})")
        return CHANGES_TEXT

    def _all_rebuilt(self) -> bool:
        """Whether the merges rebuild, as itself, every vocabulary entry that can be a whole
        pre-token (WholePreTokens): ignore_merges changes nothing for the others, e.g. the
        "[PAD151665]" entries that transformers' GGUF conversion of Qwen2.5 appends (issue #20).
        Where the pre-tokenizer's layout is not one WholePreTokens knows, every entry must be rebuilt.

        The answer does not depend on the order of the scan, which starts from the last entry: an entry its merges
        do not rebuild is in practice one added after training (a vocabulary extended without merges, a
        conversion's padding entries, the plan bench's filler merges), after the trained ones, so that such a
        tokenizer is answered at once instead of after every trained entry; where
        every entry is rebuilt (GPT-2, Qwen3, GPT-4o) each is tokenized either way."""
        # One call into Rust per piece: a batched encode costs more in its Encoding objects than the merges
        # themselves, and certifying a merge tree in Python costs more than the calls it saves (bench/RESULTS.md)
        tokenize, added = self.ed.tok.model.tokenize, self.ed.added
        reach: WholePreTokens | None | bool = False  # built at the first entry not rebuilt
        unreached = []
        for piece in reversed(self.ed.vocab):
            if piece in added:
                continue
            got = tokenize(piece)
            if len(got) != 1 or got[0].value != piece:
                if reach is False:
                    reach = WholePreTokens.of(self.ed.data.get("pre_tokenizer"))
                if reach is not None and not reach.can_be_whole(piece):
                    unreached.append(piece)
                    continue
                logger.info("vocabulary entry %r is not rebuilt by its merges%s", piece,
                            "" if reach is None else ", and can be a whole pre-token")
                return False
        if unreached:
            logger.info("%d vocabulary entries are not rebuilt by their merges (e.g. %r) but can never be a whole "
                        "pre-token: ignore_merges leaves them alone", len(unreached), unreached[0])
        return True

    @staticmethod
    def garbled(form: str) -> bool:
        """Whether the ByteLevel decoder would read an added token `form` as bytes ("Éowyn" as
        "\\ufffdowyn"): all its characters are byte symbols, not all ASCII (ASCII ones stand for themselves)."""
        return not form.isascii() and all(c in _BYTE_ALPHABET for c in form)

    def whole(self, form: str) -> bool:
        """Whether `form` is one pre-token, so a vocabulary entry for it can be produced."""
        return self.ed.pretokenize(form) == [byte_level(form)]

    def merge_pair(self, form: str) -> tuple[str, str] | None:
        """The two model pieces the original tokenizer splits `form` into, if two."""
        ids = self.ed.encode(form)
        if len(ids) != 2:
            return None
        a, b = (self.ed.tok.id_to_token(i) for i in ids)
        if any(x is None or x in self.ed.added or x not in self.ed.vocab for x in (a, b)):
            return None
        return a, b

    def splits_word_start(self, w: str) -> bool:
        """Whether the original tokenizer has " w" as one model token, which an added token `w` would
        split (added tokens are matched in raw text before pre-tokenization)."""
        ids = self.ed.encode(" " + w)
        return len(ids) == 1 and ids[0] == self.ed.vocab.get(byte_level(" " + w))

    def why_not_entry(self, form: str) -> str:
        """Why `form` cannot be a vocabulary entry (one with ignore_merges)."""
        if not self.whole(form):
            return f"the pre-tokenizer splits {form!r}"
        return self.no_entries_reason()

    # --- the hooks of the plan loop

    def prepare(self, words: list[str]) -> None:
        garbled = {w for w in words if self.garbled(w)}
        if garbled:
            old = [p for p in self.ed.vocab if p not in self.ed.added] + list(self.ed.added)
            self.inside_old = set(parts_of(old, garbled))
        else:
            self.inside_old = set()
        # garbled bare forms that will be entries (not added tokens): an added token inside one would split it
        garbled_entries = [byte_level(w) for w in words if w in garbled and self.whole(w) and (
            self.merge_pair(w) or not self.repairable(w) or self.splits_word_start(w))]
        self.risks = split_risks(self.ed, words, byte_level, garbled_entries)

    def entries(self, w: str) -> list[Entry]:
        out = []
        for form in (w, " " + w):
            garbled = self.garbled(form)
            whole = self.whole(form)
            # A form that is a whole pre-token is never an added token (matched anywhere in raw text, by every
            # runtime, it would re-split each longer word that holds it: "REQ" in "REQUEST"; issue 39):
            # - where ignore_merges is allowed, an entry that only it reaches: it applies to a whole pre-token equal
            #   to the entry alone, so no longer word ever changes. transformers reaches it; llama.cpp only for the
            #   pre-tokenizer types where it applies ignore_merges (llama-bpe), and elsewhere gives the word its
            #   old pieces: old text keeps its ids there too (a note says so). Not a merge: a merge appended last
            #   also joins its two pieces inside a longer pre-token whose old pieces hold them ("additionally");
            # - elsewhere (and with --gguf-parity, which writes only what llama.cpp reads as transformers does)
            #   one merge where BPE splits the form in two, else an added token: the plan reports per word the
            #   longer words they re-split (TokenizerPlan.resplits).
            if self.ed.gguf_parity:  # as before issue 39: an entry only where an added token would break
                whole = whole and (garbled or form in self.risks)
            if whole and self.entries_allowed() and not self.ed.gguf_parity:
                out.append(Entry(form, byte_level(form), "vocab"))
            elif whole and self.merge_pair(form):
                out.append(Entry(form, byte_level(form), "merge"))
            elif whole and garbled and self.repairable(form) and not (form == w and self.splits_word_start(w)):
                out.append(Entry(form, form, "added"))
            elif whole and self.entries_allowed():  # --gguf-parity
                self.not_for_gguf.add(w)  # its other form may still be written: this one keeps its old pieces
            elif whole and garbled:
                out.append(Entry(form, byte_level(form), "vocab"))
            elif garbled:
                parts = " | ".join(self.ed.text_of(p) for p in self.ed.pretokenize(form))
                raise Skip(f"the pre-tokenizer splits it ({parts}), so it can only be an added token, which the "
                           "ByteLevel decoder would garble (all its characters are byte symbols)")
            else:
                out.append(Entry(form, form, "added"))
        return out

    def repairable(self, form: str) -> bool:
        """Whether an added token for the garbled `form` can decode as written: the output is loaded as
        its tokenizer.json is written (no class rebuilds its decoder), and no existing token holds the
        characters of `form` (the Replace step of `decoder` would change how that token decodes)."""
        return (form not in self.inside_old and form not in self.ed.vocab and form not in self.ed.added
                and self.ed.forced_class() is None and self.ed.loads_otherwise() is None)

    def decoder(self, new, decoder: dict | None) -> dict | None:
        """The input's decoder, after a Replace step that spells each garbled added token as its bytes
        ("Müller" -> "MÃ¼ller"): ByteLevel reads each character of a token as a byte symbol, and would
        decode it as "M\\xfcller". A new added token that holds one (" Müller") is spelled whole first,
        longest first, so that no step changes part of another."""
        garbled = {t.piece for t in new if t.mechanism == "added" and self.garbled(t.piece)}
        if not garbled or not has_node(decoder, "ByteLevel"):
            return decoder
        index = FormIndex(garbled)
        forms = sorted({t.piece for t in new if t.mechanism == "added" and (t.piece in garbled or index.inside(t.piece))},
                       key=len, reverse=True)
        steps = [{"type": "Replace", "pattern": {"String": f}, "content": byte_level(f)} for f in forms]
        return {"type": "Sequence", "decoders": [*steps, decoder]}

    def rebuild_breaks(self, new) -> str | None:
        garbled = next((t.piece for t in new if t.mechanism == "added" and self.garbled(t.piece)), None)
        if garbled is None:
            return None
        return f"model-specific classes rebuild its decoder, which would decode added tokens such as {garbled!r} as bytes"

    def admit(self, w: str, entry: Entry) -> bool:
        if entry.mechanism == "added" and entry.form == w and self.splits_word_start(w):
            self.blocked[w] = self.why_not_entry(w)
            return False
        if entry.mechanism == "vocab" and not self.entries_allowed():
            self.unsafe.append(w)  # a garbled bare form: neither an added token nor an entry is safe
            # the word is skipped whole (its word-start form alone would not be one word)
            raise Skip(UNSAFE_FORM.format(self.no_entries_reason()))
        return True

    def skip_reason(self, w: str) -> str | None:
        if w in self.not_for_gguf:
            return ("--gguf-parity: each of its forms that is not one token already can only be a vocabulary entry "
                    "that ignore_merges reaches, which llama.cpp splits for most pre-tokenizers")
        if w in self.blocked:
            return (f"already one token after a space ({' ' + w!r}); its bare form would split that token as an "
                    f"added token, and cannot be a vocabulary entry: {self.blocked[w]}")
        return None

    def finish(self, new, notes) -> None:
        self._demote_shadowed(new)
        if self.blocked:
            w = next(iter(self.blocked))
            note = (f"{len(self.blocked)} token(s) skipped (e.g. {w!r}): already one token after a space; the bare "
                    f"form would split that token as an added token, and cannot be a vocabulary entry "
                    f"({self.blocked[w]})")
            notes.append(note)
        if self.unsafe:
            note = (f"{len(self.unsafe)} token(s) skipped (e.g. {self.unsafe[0]!r}): "
                    f"{UNSAFE_FORM.format(self.no_entries_reason())}")
            notes.append(note)
        note = splitting_note(self.ed, new, self.risks, self.why_not_entry)
        if note:
            notes.append(note)
        entries = [t for t in new if t.mechanism == "vocab"]
        if entries:
            note = (f"{len(entries)} token(s) (e.g. {entries[0].form!r}) are vocabulary entries that only ignore_merges "
                    "reaches, so that no longer word that holds them changes (an added token or a merge would re-split "
                    "it): transformers gives them one token, llama.cpp only where its pre-tokenizer type applies "
                    "ignore_merges (llama-bpe), and their old pieces elsewhere (docs/gguf.md; --gguf-parity writes "
                    "merges and added tokens instead, which llama.cpp reads alike)")
            notes.append(note)
            logger.info("%s", note)

    def _demote_shadowed(self, new) -> None:
        """A new entry (vocab or merge) that contains a new added token (" Resto" and an added
        "Resto", "tion" and an added "tio") would be split by it, since added tokens are matched
        first: make the entry an added token too (the longer one is then matched first), until no
        entry contains one."""
        while True:
            added = {byte_level(t.form) for t in new if t.mechanism == "added"}
            if not added:
                return
            index = FormIndex(added)  # once per round, not per entry: linear in the number of words
            shadowed = [t for t in new if t.mechanism in ("vocab", "merge") and index.inside(t.piece)]
            if not shadowed:
                return
            for t in shadowed:
                logger.info("token %r: %r contains a new added token; it becomes an added token", t.text, t.form)
                t.mechanism, t.piece = "added", t.form

    def needs_ignore_merges(self, new) -> bool:
        needs = any(t.mechanism == "vocab" for t in new) and not self.ed.model.get("ignore_merges")
        if needs and not self.merges_are_redundant():
            words = sorted({t.text for t in new if t.mechanism == "vocab"})
            raise InputError(
                f"{self.ed.file}: this BPE vocabulary has entries its merges do not rebuild, so ignore_merges would "
                f"change existing tokenization; tokens {words} cannot be added safely. Open an issue with the model name"
            )
        return needs
