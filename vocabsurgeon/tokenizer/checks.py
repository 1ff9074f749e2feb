"""The plan's checks and the output's verification: each word of a drafted plan one token in every context
(`contexts.py`), the chat template and llama.cpp's check text keeping their ids, longer words re-split
(`resplit.py`), decoding as the original does, and the class transformers loads the output with tokenizing
as the file does (`failed_words`); and the re-read of what was written (`verify_tokenizer`).

Pure functions over an opened tokenizer (`opened.OpenedTokenizer`) and a plan (`drafting.TokenizerPlan`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import Tokenizer

from . import contexts, resplit, writing
from ..checkpoint.filenames import CHAT_TEMPLATE_FILES, TOKENIZER_CONFIG, TOKENIZER_FILE
from ..checkpoint.writer import write_json
from ..errors import InputError, VocabSurgeonError
from .drafting import NewToken, TokenizerPlan
from .encoding import encode_ids, unpadded
from .gguf_check import CHECK_TEXT, HASHED_FAMILIES
from .loading import FILE_AS_WRITTEN_CLASSES

if TYPE_CHECKING:
    from .opened import OpenedTokenizer

logger = logging.getLogger(__name__)


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


def failed_words(opened: OpenedTokenizer, plan: TokenizerPlan, chat: list[str],
                 corpus: resplit.Holders | None = None) -> tuple[dict[str, str], dict, dict]:
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
    tok = writing.tokenizer_of(opened, writing.edited(opened, plan))
    failures: dict[str, str] = {}
    owner = {t.id: t.text for t in plan.new}
    check_resplits(opened, plan, tok, corpus)
    for text, culprits in changed_texts(opened, tok, chat, owner):
        if not culprits:
            raise InputError(f"{opened.dir / TOKENIZER_FILE}: the new tokens change how the rendered chat "
                             "template tokenizes, and no single word is the cause; open an issue with the "
                             "model name and the tokens")
        for w in culprits:
            failures.setdefault(w, f"the chat template's own text has it ({_around(text, w)!r}); adding it "
                                   "would change the ids of every chat prompt")
    # llama.cpp's converter recognises these families by one text's ids: else the output would not convert
    checked = [CHECK_TEXT] if opened.family_name in HASHED_FAMILIES else []
    for text, culprits in changed_texts(opened, tok, checked, owner):
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
            ids = opened.encode(form)
            if len(ids) == 1:
                ids_of[w].add(ids[0])
    cases = contexts.cases(words, special={w for w in words if by_word[w][0].mechanism == "special"})
    # A word the normalizer folds into other text ("m²" is "m2" after NFKC) is stored folded, so text
    # that has the folded form without the word is old text that must keep its ids: inside a word.
    folded = {w: key for w in plain
              if (key := opened.normalize(w).replace("▁", " ").strip()) != w and key.lower() != w.lower()}
    for w, key in folded.items():
        for text in (f"ex{key}.n", f"ex{key}x"):
            old, new_ids = opened.encode(text), tok.encode(text, add_special_tokens=False).ids
            if old != new_ids and w not in failures:
                failures[w] = (f"the tokenizer folds it to {key!r} (Unicode NFKC), and a new {key!r} would change how "
                               f"existing text with {key!r} tokenizes (e.g. {text!r})")
    texts = [c.text for c in cases]
    got_ids = encode_ids(tok, texts)
    decoded = [j for j, c in enumerate(cases) if c.context.decode]
    gots = dict(zip(decoded, tok.decode_batch([got_ids[j] for j in decoded])))
    decode = decode_mismatches(opened, {j: texts[j] for j in decoded}, gots)
    soft: dict[str, list[int]] = {}  # word -> indices of the soft contexts it misses
    missed = set(contexts.misses(cases, got_ids, ids_of, contexts.space_lead(opened.encode)))
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
                           f"{opened.family_name} entries ({mechs}) cannot make it one token there")
        w = next(iter(case.expect))
        if j in decode and w not in failures:
            want, got = decode[j]
            failures[w] = f"{case.text!r} would decode as {got!r}, but the original tokenizer gives {want!r}"
    loader, cls = as_transformers_loads(opened, plan)
    if loader is not None:  # the class rebuilds the tokenizer: it must tokenize as the file does
        # only where the original, loaded the same way, agrees with its own file on that text
        base = opened.loaded_original
        opened.prefetch(texts)
        agree = [b == opened.encode(t) for t, b in zip(texts, encode_ids(base, texts))] if base else [True] * len(texts)
        loaded_ids = encode_ids(loader, texts)
        for j, rebuilt in enumerate(loaded_ids):
            if rebuilt != got_ids[j] and agree[j]:
                for w in cases[j].expect:
                    pieces = [loader.id_to_token(i) for i in rebuilt[:12]]
                    failures.setdefault(w, f"transformers' {cls} rebuilds the tokenizer on load and would encode "
                                           f"{cases[j].text!r} as {pieces}")
        # what users get is the rebuilt tokenizer: a context is reported only where that one misses too
        loaded_missed = set(contexts.misses(cases, loaded_ids, ids_of, contexts.space_lead(opened.encode)))
        file_only = {w: [texts[j] for j in js if (j, w) not in loaded_missed] for w, js in soft.items()}
        soft = {w: [j for j in js if (j, w) in loaded_missed] for w, js in soft.items()}
    else:
        file_only = {}
    return (failures, {w: [texts[j] for j in js] for w, js in soft.items() if w not in failures and js},
            {w: ts for w, ts in file_only.items() if w not in failures and ts})


def changed_texts(opened: OpenedTokenizer, tok: Tokenizer, texts: list[str], owner: dict[int, str]):
    """Each of `texts` (old text that must keep its ids) that the edited tokenizer `tok` gives other ids than
    the original, with the new words whose ids it now holds (in order of appearance)."""
    if not texts:
        return
    for text, want, got in zip(texts, encode_ids(opened.tok, texts), encode_ids(tok, texts)):
        if got != want:
            yield text, [owner[i] for i in dict.fromkeys(got) if i in owner]


def check_resplits(opened: OpenedTokenizer, plan: TokenizerPlan, tok: Tokenizer,
                   corpus: resplit.Holders | None = None) -> None:
    """Tokenize every old text that holds a new word inside a longer word (`holders`) with the original and
    the edited tokenizer `tok`, and report each change per word (`plan.resplits`): where the family's
    entries cannot keep longer words (added tokens, merges, Unigram pieces, WordPiece entries)."""
    held = opened.holders(list(dict.fromkeys(t.text for t in plan.new)), corpus)
    # and made-up ones ("Frodos", "unFrodo"): an added token or a merge re-splits longer words that neither the
    # vocabulary nor the corpora hold (a user's own text), so the word is reported by what its entries do, not by
    # what the plan happens to see. Not for words whose entries are all byte-level entries that only
    # ignore_merges reaches: only a whole pre-token equal to one reaches it, never a longer word.
    whole = opened.family_name == "byte-level-bpe"
    made = {w: resplit.made_up(w) for w in dict.fromkeys(t.text for t in plan.new
                                                         if not (whole and t.mechanism == "vocab"))}
    plan.checked_holders = sum(map(len, held.values())) + sum(map(len, made.values()))
    plan.resplits.update(resplit.changed(opened.tok, tok, held, {t.id: t.text for t in plan.new}, made))


def as_transformers_loads(opened: OpenedTokenizer, plan: TokenizerPlan) -> tuple[Tokenizer | None, str | None]:
    """The edited tokenizer as transformers builds it on load, where the written tokenizer_class
    rebuilds it from vocab, merges and scores (GPT2Tokenizer, LlamaTokenizer, BertTokenizer, ...) or
    transformers forces such a class on the model type (`forced_class`); None where the class loads
    tokenizer.json as written, or no class is named. With it, the name of the class that loaded."""
    cfg = writing.edited_config(opened, plan)
    cls = (cfg or {}).get("tokenizer_class")
    rebuilt = cls is not None and cls not in FILE_AS_WRITTEN_CLASSES
    # a class forced on the model type matters where the entries rely on ignore_merges (it drops the option);
    # asked only then: it imports transformers, which a plain add never does
    if opened.converted_from or not (rebuilt or (plan.set_ignore_merges and opened.forced_class())):
        return None, None
    import shutil
    import tempfile

    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory(prefix="vocabsurgeon-plan-") as d:
        for f in opened.dir.iterdir():  # what the loader reads besides the two files written here
            if f.is_file() and (f.suffix == ".json" or f.name == CHAT_TEMPLATE_FILES[0]) \
                    and f.name not in (TOKENIZER_FILE, TOKENIZER_CONFIG):
                shutil.copyfile(f, Path(d) / f.name)
        write_json(Path(d) / TOKENIZER_FILE, writing.edited(opened, plan))
        write_json(Path(d) / TOKENIZER_CONFIG, cfg)
        try:
            tok = AutoTokenizer.from_pretrained(d, trust_remote_code=False)
        except Exception as e:  # transformers raises many types; the file check above still holds
            logger.warning("transformers cannot load the edited tokenizer in memory (%s: %s); only tokenizer.json "
                           "was checked", type(e).__name__, e)
            return None, None
    backend = getattr(tok, "backend_tokenizer", None)
    return (unpadded(Tokenizer.from_str(backend.to_str())) if backend is not None else None), type(tok).__name__


def decode_mismatches(opened: OpenedTokenizer, texts: dict[int, str],
                      gots: dict[int, str]) -> dict[int, tuple[str, str]]:
    """The texts (index -> text) that the edited tokenizer decodes (`gots`, index -> its decoding) otherwise than
    the original decodes its own ids of them, where the original decodes the text faithfully (as itself or as
    its normalized form: an <unk> or "c + +" there is no standard), as index -> (the original's, the edited's).

    The original's round trip is computed only where it can matter (`decode_mismatch`): with a decoding that is
    the text itself and the normalizer leaving it as it is, no round trip can be a mismatch (most texts)."""
    norms = {j: opened.normalize(t) for j, t in texts.items()} if opened.tok.normalizer is not None else texts
    todo = [j for j, t in texts.items() if may_mismatch(t, norms[j], gots[j])]
    wants = dict(zip(todo, opened.decoded([texts[j] for j in todo])))
    return {j: (want, gots[j]) for j, want in wants.items() if decode_mismatch(texts[j], norms[j], gots[j], want)}


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
    # Group by word once (a scan of plan.new per word is quadratic), and
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
