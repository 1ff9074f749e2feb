"""SentencePiece-style BPE with byte fallback (Llama 2, Mistral, Gemma 2/3): added tokens."""

from __future__ import annotations

import logging

from .base import Entry, Family, Skip
from .shared import has_node, model_pair, model_pieces, split_risks, splitting_note

logger = logging.getLogger(__name__)


def _writes_metaspace(node) -> bool:
    """Whether a normalizer replaces spaces with "▁" (Gemma 2/3: Replace(" ", "▁"), no prepended "▁")."""
    if not isinstance(node, dict):
        return False
    if node.get("type") == "Replace":
        return (node.get("pattern") or {}).get("String") == " " and node.get("content") == "▁"
    return any(_writes_metaspace(n) for n in node.get("normalizers") or [])


def _is_replace(node, pattern: dict, content: str) -> bool:
    return isinstance(node, dict) and node.get("type") == "Replace" and node.get("pattern") == pattern \
        and node.get("content") == content


# A normalizer step that prepends "▁" unless the text already starts with one: what a Metaspace pre-tokenizer
# with prepend_scheme "always" does to each stretch of text (tokenizers' Replace of a zero-width match).
PREPEND_UNLESS_THERE = {"type": "Replace", "pattern": {"Regex": "\\A(?!▁)"}, "content": "▁"}


def prepends_in(node) -> bool:
    """Whether a normalizer writes the leading "▁" (Prepend, or PREPEND_UNLESS_THERE)."""
    if not isinstance(node, dict):
        return False
    if node.get("type") == "Prepend" or node == PREPEND_UNLESS_THERE:
        return True
    return any(prepends_in(n) for n in node.get("normalizers") or [])


def as_meta_layout(data: dict) -> dict:
    """transformers 5's conversion of a SentencePiece BPE `.model` with legacy on (Mistral's and Llama's
    tokenizer.model: add_dummy_prefix, no normalization rule, no user-defined piece), rewritten as Meta's
    tokenizer.json layout, which tokenizes every text to the same ids; any other tokenizer is returned as is.

    That conversion writes normalizer [Replace(" ", "▁"), Replace(/\\A▁/, "▁▁")] and pre-tokenizer
    Metaspace(prepend_scheme "always", split false): each stretch of text between added tokens becomes
    "▁" + the stretch with spaces as "▁", exactly what Meta's normalizer [Prepend("▁"), Replace(" ", "▁")]
    with no pre-tokenizer makes of it (a stretch " x": "▁▁x" both ways; "x": "▁x"). But the two differ
    for new words: Metaspace "always" puts a "▁" after every added token ("Frodo, and" would decode as
    "Frodo , and"), and an added token matched on normalized text ("Frodo") is normalized without the
    "▁" that Prepend gives it in Meta's layout, so it would match inside "▁Frodo" and leave a lone "▁".
    In Meta's layout the family makes each word one added token matched on normalized text (see
    SentencePieceBPE); as converted, the Metaspace BPE family could take only words of two pieces.

    transformers 5's re-save of Meta's Llama 2 tokenizer.json (AutoTokenizer, then save_pretrained) has no
    normalizer and that Metaspace pre-tokenizer: there a stretch that starts with a space gets no second "▁"
    (" Hello" is "▁Hello", not "▁" + "▁Hello"). It is rewritten as the normalizer [Replace(" ", "▁"),
    PREPEND_UNLESS_THERE] and no pre-tokenizer, which does exactly what the Metaspace did, to each stretch:
    the same ids for every text, and the family's added tokens as in Meta's layout.
    """
    norm, pre = data.get("normalizer"), data.get("pre_tokenizer")
    steps = norm.get("normalizers") if isinstance(norm, dict) and norm.get("type") == "Sequence" else None
    if isinstance(pre, dict) and pre.get("type") == "Sequence" and len(pre.get("pretokenizers") or []) == 1:
        pre = pre["pretokenizers"][0]
    if not ((data.get("model") or {}).get("type") == "BPE" and isinstance(pre, dict) and pre.get("type") == "Metaspace"
            and pre.get("replacement") == "▁" and pre.get("prepend_scheme") == "always" and pre.get("split") is False):
        return data
    space = {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}
    if norm is None:  # transformers 5's re-save of Meta's layout
        return {**data, "normalizer": {"type": "Sequence", "normalizers": [space, PREPEND_UNLESS_THERE]},
                "pre_tokenizer": None}
    if not (steps is not None and len(steps) == 2 and _is_replace(steps[0], {"String": " "}, "▁")
            and _is_replace(steps[1], {"Regex": "\\A▁"}, "▁▁")):
        return data
    return {**data, "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"}, space]},
            "pre_tokenizer": None}


# The parts of tokenizer.json that transformers' SentencePiece BPE classes build themselves on load.
PIPELINE = ("normalizer", "pre_tokenizer", "decoder")


def as_transformers_builds(data: dict, built: dict | None) -> dict:
    """`data` with the normalizer, pre-tokenizer and decoder that transformers builds on load (`built`: those
    parts of AutoTokenizer's backend, None where it cannot load) where they differ from the file's, for a
    SentencePiece BPE whose rebuilt pre-tokenizer is Metaspace; any other tokenizer is returned as is.

    transformers 5's LlamaTokenizer does not read tokenizer.json's pipeline: TokenizersBackend.
    convert_to_native_format (tokenization_utils_tokenizers.py) takes only vocab, merges and the post-processor
    from the file for a class with its own __init__, and LlamaTokenizer.__init__ (tokenization_llama.py) sets
    normalizer None, pre-tokenizer Metaspace("▁", split=False) with prepend_scheme from
    tokenization_utils_base._get_prepend_scheme: "always" where tokenizer_config.json says legacy true, "first"
    where it says false or nothing (transformers 5's save_pretrained writes no legacy key), and its own decoder.
    Meta's Llama 2 file ([Prepend("▁"), Replace(" ", "▁")], legacy true) encodes " a" as "▁" + "▁a", as
    SentencePiece does; the LlamaTokenizer that AutoTokenizer builds from it encodes "▁a" (a stretch that
    starts with a space gets no second "▁"; 48 of 105 texts of fixtures/corpus.txt with leading spaces differ).
    Trainers and users load checkpoints with AutoTokenizer, so where the two views of the input differ the
    output follows transformers' (where they agree, it is both): the output's tokenizer.json is written with
    transformers' pipeline, so that its file and AutoTokenizer give the same ids as AutoTokenizer gave the input.
    """
    if built is None or not SentencePieceBPE.matches(data) or not has_node(built.get("pre_tokenizer"), "Metaspace"):
        return data
    if all(data.get(k) == built.get(k) for k in PIPELINE):
        return data
    return {**data, **{k: built.get(k) for k in PIPELINE}}


class SentencePieceBPE(Family):
    """Added tokens "Frodo" and " Frodo": Metaspace with prepend_scheme "first" puts no "▁" after
    them, so "Frodo, and" decodes as before. A form inside an existing token ("tion" of
    "▁function") splits that token where it occurs: reported, since this family has no other way.

    Meta's own layout (Llama 2, Mistral, CodeLlama: a Prepend("▁") + Replace(" ", "▁") normalizer and
    no pre-tokenizer) normalizes each stretch of text between raw-matched added tokens on its own, so
    a raw "Frodo" would get a "▁" after it ("(Frodo )"). There a word whose normalized form "▁Frodo" is
    two existing pieces is one merge, appended last (transformers, SentencePiece and llama.cpp read it
    alike; the class keeps it); any other word is one added token matched on normalized text, whose
    content is that normalized form where the normalizer leaves it as it is (else "Frodo", which Prepend
    makes "▁Frodo"): the word at a sentence start or after a space; after "(" or a quote the word keeps
    its old pieces (reported per word, not skipped). With an added token, its tokenizer_class
    (LlamaTokenizer, legacy) would be rebuilt on load with Metaspace "always", which
    prepends a "▁" after every added token: the output names PreTrainedTokenizerFast, which loads
    tokenizer.json as written (old text tokenizes the same: the plan checks it). The class cannot be kept
    there: LlamaTokenizer takes only vocab, merges and added tokens from the files, and with legacy true a
    multi-piece word is neither an added token without that "▁" nor a merge chain that leaves old text alone
    (legacy false would drop the "▁" after <s> in a chat prompt). The file is written in the pipeline the class
    builds (as_transformers_builds: " a" is "▁a", as AutoTokenizer gave it), so the ids are AutoTokenizer's.
    Where the class builds Metaspace "first" (no legacy key: transformers 5's re-save), it is kept: the words are
    raw added tokens as above."""

    name = "sentencepiece-bpe"
    why_not_entry = "SentencePiece BPE takes new words only as added tokens"

    @staticmethod
    def matches(data: dict) -> bool:
        return (data.get("model") or {}).get("type") == "BPE" and (
            has_node(data.get("pre_tokenizer"), "Metaspace") or prepends_in(data.get("normalizer"))
            or _writes_metaspace(data.get("normalizer")))

    def prepare(self, words: list[str]) -> None:
        self.risks = split_risks(self.ed, words, lambda f: f.replace(" ", "▁"))

    def prepends_in_normalizer(self) -> bool:
        """Whether the "▁" is written by the normalizer (Meta's layout), not by a Metaspace pre-tokenizer."""
        return prepends_in(self.ed.data.get("normalizer")) and self.ed.data.get("pre_tokenizer") is None

    def entries(self, w: str) -> list[Entry]:
        if self.prepends_in_normalizer():
            # Its content is the normalized form "▁Frodo" where the normalizer leaves that as it is (it prepends
            # only where no "▁" leads): llama.cpp's converter reads tokenizer_config's added tokens with "▁" as
            # a space, and matches " Frodo" in raw text as transformers matches "▁Frodo" in normalized text.
            # Prepend("▁") would make it "▁▁Frodo": there the content stays "Frodo".
            norm = self.ed.normalize(w)
            if self.merge_pair(w) is not None:
                return [Entry(w, norm, "merge")]
            if self.ed.gguf_parity:
                raise Skip(f"--gguf-parity: {norm!r} is {len(model_pieces(self.ed, norm))} pieces, so it can only be "
                           "an added token, which "
                           "llama.cpp reads otherwise (it matches an added token in raw text and puts a '▁' after it); "
                           "a word of two pieces is a merge that both read alike")
            piece = "▁" + w if self.ed.normalize("▁" + w) == norm else w
            return [Entry(w, piece, "added", normalized=True)]
        return [Entry(w, w, "added"), Entry(" " + w, " " + w, "added")]

    def merge_pair(self, form: str) -> tuple[str, str] | None:
        """Meta's layout: the two pieces BPE splits the normalized form ("▁Frodo": "▁Fro" "do") into, if two."""
        return model_pair(self.ed, self.ed.normalize(form)) if self.prepends_in_normalizer() else None

    def admit(self, w: str, entry: Entry) -> bool:
        if entry.form == w and not entry.normalized and entry.mechanism == "added":
            ids = self.ed.encode(" " + w)
            if len(ids) == 1 and ids[0] not in {t["id"] for t in self.ed.added.values()}:
                raise Skip(f"already one token after a space ({' ' + w!r}); an added token for its bare form would split "
                           f"that token wherever it occurs, and {self.why_not_entry}")
        return True

    def rebuild_breaks(self, new) -> str | None:
        if any(t.mechanism == "added" for t in new) and self.prepends_in_normalizer():  # a merge survives a rebuild
            return ("model-specific classes rebuild it with a Metaspace pre-tokenizer that, with legacy true, puts a "
                    "'▁' after every added token")
        return None

    def finish(self, new, notes) -> None:
        note = splitting_note(self.ed, new, self.risks, lambda form: self.why_not_entry)
        if note:
            notes.append(note)
        added = [t for t in new if t.mechanism == "added"]
        if added and self.prepends_in_normalizer():
            note = (f"{len(added)} token(s) (e.g. {added[0].text!r}) are added tokens (no merge of two existing pieces "
                    "makes them); llama.cpp, after a GGUF conversion, matches them in raw text and puts a '▁' after "
                    "each, so its ids differ there (docs/gguf.md; --gguf-parity skips them)")
            notes.append(note)
            logger.info("%s", note)
