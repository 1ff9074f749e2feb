"""The fitted init on encoders: BERT-style bodies (sentence-transformers checkpoints) and masked-LM heads.

`fit_encoder_rows` distills the new input rows (`common.adam_passes`) against the frozen model's last hidden
states outside the new words' spans and, for sentence-transformers, its sentence embedding. Contexts: the
corpus's sentences with the words, templates, and on WordPiece the sentences the edited tokenizer splits
anew (`wordpiece_view`). A masked-LM head's rows are fitted after (`mlm.fit_head`). Details:
docs/internals.md.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...errors import InputError
from ...progress import Steps
from .common import (
    ENCODER_WINDOW,
    contexts_found,
    FitOptions,
    FitResult,
    FitToken,
    Window,
    adam_passes,
    find_runs,
    narrow_threads,
    new_token_embeds,
    pad_batch,
    read_fit_corpus,
    subword_mean,
)
from .mlm import fit_head
from ...corpus import paragraphs
from ...runtime import ModelKind, context_length, encode, load_tokenizer, loaded_model, special_ends

logger = logging.getLogger(__name__)

# Weight of 1 - cos(sentence embedding) against the relative MSE of the other positions' hidden
# states (about 2 (1 - cos) per position).
POOLED_WEIGHT = 4.0
# Distillation passes at most (FitOptions.passes None): the held-out loss still falls after a few (bench/RESULTS.md).
ENCODER_PASSES = 10
# Template sentences per word added to a corpus's sentences: short sentences, where the word is a large
# share of the mean pooling, are the hard case a corpus lacks (bench/RESULTS.md).
CORPUS_TEMPLATES = 4
# Sentences of generated contexts, "{}" the word. Used in a seeded order, `contexts_per_word` of them.
TEMPLATES = (
    "{} is mentioned here.", "This sentence is about {}.", "What is {}?", "I read about {} yesterday.",
    "The report describes {} in detail.", "They talked about {} for an hour.", "A short note on {}.",
    "Here is an example of {}.", "We need to understand {} better.", "Is {} important?",
    "She looked up {} in the manual.", "Everyone has heard of {}.",
)
# The corpus's sentences where a new word starts a longer word (WordPiece only; `retokenized_windows`).
RETOKENIZED = True
# Sentences with the word's plural, PLURALS_PER_WORD per word not ending in "s" (WordPiece only):
# "formatters" is formatter ##s with the new word, format ##ters without. With the retokenized sentences
# they raise the worst held-out sentence's cosine; only where the sentence embedding is a target (a
# sentence-transformers pooling): with hidden states the only target they lower it (bench/RESULTS.md).
PLURAL_TEMPLATES = ("The {}s.", "Use {}s.", "All {}s are listed here.", "Some {}s and others.")
PLURALS_PER_WORD = 2
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class Pooling:
    """How a sentence-transformers checkpoint turns hidden states into its sentence embedding."""

    mode: str | None  # "mean", "cls", or None: no sentence embedding modelled
    normalize: bool = False
    note: str = ""  # what is not modelled, for the report


def read_pooling(src: Path) -> Pooling:
    """The Pooling (and Normalize) of the checkpoint's `modules.json`, as sentence-transformers applies them.

    No modules.json (a plain encoder or a masked-LM): Pooling(None). Pooling modes other than mean,
    mean-sqrt-len (the same direction) and CLS, and modules after the pooling other than Normalize,
    are not modelled: Pooling(None) or a note.

    Raises:
        InputError: modules.json or the Pooling config is not valid JSON.
    """
    path = src / "modules.json"
    if not path.is_file():
        return Pooling(None)

    def load(p: Path):
        try:
            return json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise InputError(f"{p}: cannot read it as JSON ({e}); fix the sentence-transformers config or use "
                             "--init subword-mean") from None

    modules = load(path)
    kinds = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules if isinstance(m, dict)]
    pool = next((m for m in modules if isinstance(m, dict) and str(m.get("type", "")).endswith("Pooling")), None)
    if pool is None:
        return Pooling(None, note="modules.json has no Pooling module: hidden states only")
    cfg_path = src / str(pool.get("path", "")) / "config.json"
    cfg = load(cfg_path) if cfg_path.is_file() else {}
    mode = cfg.get("pooling_mode")  # newer configs name it; older ones set one flag per mode
    if mode is None:
        mode = next((m for m, key in (("cls", "pooling_mode_cls_token"), ("mean", "pooling_mode_mean_tokens"),
                                      ("mean_sqrt_len_tokens", "pooling_mode_mean_sqrt_len_tokens"),
                                      ("max", "pooling_mode_max_tokens")) if cfg.get(key)), "mean")
    mode = {"mean_sqrt_len_tokens": "mean", "mean_tokens": "mean", "cls_token": "cls"}.get(mode, mode)
    after = kinds[kinds.index("Pooling") + 1:] if "Pooling" in kinds else []
    others = [k for k in after if k != "Normalize"]
    note = f"modules after the pooling not modelled: {', '.join(others)}" if others else ""
    if mode not in ("mean", "cls"):
        return Pooling(None, note=f"pooling mode {mode!r} not modelled: hidden states only")
    return Pooling(mode, "Normalize" in after, note)


def _window(ids: list[int], r_start: int, r_len: int, ends: tuple[list[int], list[int]], limit: int,
            tokens: list[FitToken]) -> Window | None:
    """The sentence ids cut to `limit` tokens (with the special ends) around a run, centred on it."""
    head, tail = ends
    span = limit - len(head) - len(tail)
    if r_len > span:
        return None
    start = max(0, min(r_start - (span - r_len) // 2, len(ids) - span))
    w = Window(head + ids[start:start + span] + tail, [])
    w.runs = find_runs(w.old, tokens)
    return w


def sentence_windows(text: str, tok, tokens: list[FitToken], ends, limit: int, per_token: int) -> list[Window]:
    """The sentences of `text` (paragraphs split after . ! ?) that hold a new token, in corpus order,
    while that token has fewer than `per_token` windows; each cut to `limit` tokens around it."""
    counts = [0] * len(tokens)
    out = []
    for para in paragraphs(text):
        for sentence in _SENTENCE_END.split(" ".join(para.split())):
            ids = encode(tok, sentence)
            runs = find_runs(ids, tokens)
            first = next((r for r in runs if counts[r.j] < per_token), None)
            if first is None:
                continue
            w = _window(ids, first.start, first.length, ends, limit, tokens)
            if w is None:
                continue
            out.append(w)
            for q in w.runs:
                counts[q.j] += 1
    return out


@dataclass
class Retokenized:
    """A context where the new tokenizer changes more than the new words' pieces (a WordPiece word that
    starts with a new word: "urlopen" is ur ##lo ##pen, then url ##open): old and new ids (a new token j
    as -1 - j), and the (old, new) positions of the words that keep their pieces."""

    old: list[int]
    new: list[int]
    kept: tuple[list[int], list[int]]

    def new_ids(self, n_old: int) -> list[int]:
        return [n_old - 1 - x if x < 0 else x for x in self.new]


def wordpiece_view(tok, tokens: list[FitToken]):
    """For a WordPiece tokenizer, a function: text -> [(old ids, new ids)] per pre-tokenized word, as the
    tokenizer with the new words in its vocabulary (at a word's start) splits it (a new token j as -1 - j);
    None for other tokenizers. Both splits are the `tokenizers` WordPiece model's own, the new one with
    the new words added to a copy of its vocabulary."""
    from tokenizers import models

    backend = getattr(tok, "backend_tokenizer", None)
    model = getattr(backend, "model", None)
    if model is None or type(model).__name__ != "WordPiece" or backend.pre_tokenizer is None:
        return None
    vocab = tok.get_vocab()
    n = max(vocab.values()) + 1
    norm = backend.normalizer.normalize_str if backend.normalizer is not None else (lambda x: x)
    forms = {norm(t.form.strip()): n + j for j, t in enumerate(tokens) if t.pieces}
    edited = models.WordPiece({**vocab, **{f: i for f, i in forms.items() if f not in vocab}},
                              unk_token=model.unk_token, continuing_subword_prefix=model.continuing_subword_prefix,
                              max_input_chars_per_word=model.max_input_chars_per_word)

    def split(m, word: str) -> list[int]:
        return [t.id if t.id < n else n - 1 - t.id for t in m.tokenize(word)]

    def view(text: str):
        words = backend.pre_tokenizer.pre_tokenize_str(norm(text))
        return [(split(model, w), split(edited, w)) for w, _ in words]
    return view


def retokenized_windows(text: str | list[str], tok, tokens: list[FitToken], ends, limit: int,
                        per_token: int) -> list[Retokenized]:
    """The sentences of `text` (split as `sentence_windows` splits them, or a list of sentences) where a new
    word starts a longer word, so that the new tokenizer splits the rest of it anew too, while a token
    of the sentence has fewer than `per_token` of them (every new word of a kept sentence counts); whole
    sentences of at most `limit` tokens with the special ends. Empty for tokenizers other than WordPiece."""
    view = wordpiece_view(tok, tokens)
    if view is None:
        return []
    if isinstance(text, str):
        text = [sentence for para in paragraphs(text)
                for sentence in _SENTENCE_END.split(" ".join(para.split()))]
    head, tail = ends
    counts = [0] * len(tokens)
    out = []
    for sentence in text:
        words = view(sentence)
        changed = [n for o, n in words if n and n[0] < 0 and not (len(n) == 1 and tuple(o) == tokens[-1 - n[0]].pieces)]
        if not any(counts[-1 - n[0]] < per_token for n in changed):
            continue
        old = [x for o, _ in words for x in o]
        if old != encode(tok, sentence) or len(old) + len(head) + len(tail) > limit:
            continue
        olds, news, oi, ni = [], [], len(head), len(head)
        for o, n in words:
            if o == n:  # a word the new tokens leave alone keeps its hidden states
                olds += range(oi, oi + len(o))
                news += range(ni, ni + len(n))
            oi, ni = oi + len(o), ni + len(n)
        out.append(Retokenized(head + old + tail, head + [x for _, n in words for x in n] + tail, (olds, news)))
        for _, n in words:
            if n and n[0] < 0:
                counts[-1 - n[0]] += 1
    return out


def template_windows(tok, tokens: list[FitToken], ends, limit: int, per_token: int, seed: int) -> list[Window]:
    """`per_token` of TEMPLATES per new token, in a seeded order, with the word's text in place of "{}"."""
    rng = np.random.default_rng(seed)
    out = []
    for t in tokens:
        if not t.pieces:
            continue
        for i in rng.permutation(len(TEMPLATES))[:per_token]:
            ids = encode(tok, TEMPLATES[i].format(t.form.strip()))
            runs = [r for r in find_runs(ids, tokens) if tokens[r.j] == t] or find_runs(ids, tokens)
            if runs:  # a form that only exists after a space (byte-level " Frodo") at a sentence start: no run
                w = _window(ids, runs[0].start, runs[0].length, ends, limit, tokens)
                if w is not None:
                    out.append(w)
    return out


def outside(w: Window) -> tuple[list[int], list[int]]:
    """(old positions, new positions) outside the new words' spans: the same token, which must keep its hidden state."""
    olds, news, shift, ri = [], [], 0, 0
    for i in range(len(w.old)):
        while ri < len(w.runs) and i >= w.runs[ri].start + w.runs[ri].length:
            shift += w.runs[ri].length - 1
            ri += 1
        if ri < len(w.runs) and i >= w.runs[ri].start:
            continue
        olds.append(i)
        news.append(i - shift)
    return olds, news


def pool(h, mask, mode: str):
    """(B, hidden) sentence embeddings of hidden states h (B, T, hidden) as sentence-transformers pools them."""
    if mode == "cls":
        return h[:, 0]
    m = mask.to(h.dtype)[..., None]
    return (h * m).sum(1) / m.sum(1).clamp(min=1)


class _Encoder:
    """The frozen encoder body (a masked-LM's base model, or the model itself): hidden states and the input rows."""

    def __init__(self, lm):
        self.model = lm.model.requires_grad_(False)
        self.body = getattr(self.model, "base_model", self.model)
        self.E = self.model.get_input_embeddings().weight.detach()
        self.n = self.E.shape[0]
        self.device = lm.device
        self.max_len = context_length(lm)
        self.pad = getattr(self.model.config, "pad_token_id", None) or 0

    def hidden(self, ids, mask, embeds=None):
        if embeds is not None:
            return self.body(inputs_embeds=embeds, attention_mask=mask).last_hidden_state
        return self.body(input_ids=ids, attention_mask=mask).last_hidden_state


def _teach(enc: _Encoder, windows: list[Window], pooling: Pooling, batch: int, say: Steps) -> tuple[list, list]:
    """The frozen model on each window (old tokenization): (hidden states (T, hidden), sentence embedding or None)."""
    import torch

    hs, ps = [], []
    for s in range(0, len(windows), batch):
        part = windows[s:s + batch]
        ids, mask = pad_batch([w.old for w in part], enc.pad, enc.device)
        with torch.no_grad():
            h = enc.hidden(ids, mask).float()
            p = pool(h, mask, pooling.mode) if pooling.mode else None
        for i, w in enumerate(part):
            hs.append(h[i, :len(w.old)].cpu())
            ps.append(p[i].cpu() if p is not None else None)
        say("model on contexts", min(s + batch, len(windows)), len(windows))
    return hs, ps


def distill_encoder_rows(enc: _Encoder, windows: list[Window | Retokenized], teacher: tuple[list, list], start, pooling: Pooling,
                         opts: FitOptions, say: Steps, passes: int = ENCODER_PASSES):
    """Input rows such that the encoder reading the new tokens keeps the hidden states of every other
    position and the sentence embedding it gives on the words' pieces (see the module docstring)."""
    import torch

    hs, ps = teacher
    usable = [i for i, w in enumerate(windows) if any(x >= enc.n for x in w.new_ids(enc.n))]
    h2 = float(torch.cat([hs[i] for i in usable]).pow(2).sum(-1).mean()) if usable else 1.0
    new_ids = [w.new_ids(enc.n) for w in windows]
    kept = [w.kept if isinstance(w, Retokenized) else outside(w) for w in windows]

    def batch_loss(part, R):
        ids, mask = pad_batch([new_ids[i] for i in part], enc.pad, enc.device)
        h = enc.hidden(None, mask, embeds=new_token_embeds(enc.model.get_input_embeddings(), ids, R)).float()
        loss, count = 0.0, 0
        for b, i in enumerate(part):
            olds, news = kept[i]
            loss = loss + ((h[b, news] - hs[i][olds].to(enc.device)) ** 2).sum()
            count += len(olds)
        loss = loss / (max(count, 1) * h2)
        if pooling.mode:
            p = pool(h, mask, pooling.mode)
            target = torch.stack([ps[i] for i in part]).to(enc.device)
            loss = loss + POOLED_WEIGHT * (1 - torch.nn.functional.cosine_similarity(p, target, dim=-1)).mean()
        return loss

    rms = float(enc.E.float().pow(2).mean().sqrt())
    return adam_passes(start, rms, usable, batch_loss, opts.input_steps, opts.batch_size, opts.lr, opts.seed, say,
                       passes, enc.device)


def fit_encoder_rows(src: Path, kind: ModelKind, tokens: list[FitToken], roles: set[str], opts: FitOptions,
                     say: Steps) -> FitResult:
    """Fit the new input rows of the encoder at `src` for `tokens` (fitted.fit_rows calls this for
    masked and encoder kinds; see the module docstring).

    The input rows are fitted whatever `roles` asks: a tied model (BERT's MLM decoder, or a body
    without a head) has one row, which an encoder reads as input. Where "output" is asked, the
    output rows are those rows when the output matrix is the input embedding, else its sub-word mean.

    Raises:
        InputError: the model cannot be loaded, or the corpus or the sentence-transformers config cannot be read.
    """
    import torch

    t0 = time.perf_counter()
    tok = load_tokenizer(src)
    pooling = read_pooling(src)
    torch.manual_seed(opts.seed)
    report: dict = {"method": "fitted", "roles": ["input"], "model": kind.task,
                    **{k: getattr(opts, k) for k in ("contexts_per_word", "input_steps", "batch_size", "seed")},
                    "target": {"hidden_states": "every position outside the new words' spans",
                               "sentence_embedding": pooling.mode, "normalize": pooling.normalize,
                               "pooled_weight": POOLED_WEIGHT if pooling.mode else None}}
    if pooling.note:
        report["target"]["note"] = pooling.note
    with loaded_model(src, opts.device, kind, remedy="use --init mean or subword-mean", dtype=opts.dtype) as lm:
        enc = _Encoder(lm)
        ends = special_ends(tok)
        limit = max(8, min(ENCODER_WINDOW, enc.max_len))
        if opts.corpus is not None:
            text, sha = read_fit_corpus(opts.corpus)
            windows = sentence_windows(text, tok, tokens, ends, limit, opts.contexts_per_word)
            report["contexts"] = {"source": "corpus", "name": Path(opts.corpus).name, "sha256": sha}
            if CORPUS_TEMPLATES:
                windows += template_windows(tok, tokens, ends, limit, CORPUS_TEMPLATES, opts.seed)
                report["contexts"]["templates_per_word"] = CORPUS_TEMPLATES
        else:
            windows = template_windows(tok, tokens, ends, limit, opts.contexts_per_word, opts.seed)
            report["contexts"] = {"source": "templates", "templates_per_word": opts.contexts_per_word}
        report["contexts"].update(contexts_found(windows, tokens, "the sub-word mean"))
        # The input distillation also reads (the masked-LM head fit does not) the corpus's sentences that a
        # new word retokenizes beyond its pieces, and, with a pooled target, plural templates (WordPiece only).
        fit_windows = list(windows)
        if opts.corpus is not None and RETOKENIZED:
            extra = retokenized_windows(text, tok, tokens, ends, limit, opts.contexts_per_word)
            fit_windows += extra
            report["contexts"]["retokenized"] = len(extra)
        if PLURALS_PER_WORD and pooling.mode:
            rng = np.random.default_rng(opts.seed + 2)
            texts = [PLURAL_TEMPLATES[i].format(t.form.strip()) for t in tokens if t.pieces and not t.form.strip().endswith("s")
                     for i in rng.permutation(len(PLURAL_TEMPLATES))[:PLURALS_PER_WORD]]
            extra = retokenized_windows(texts, tok, tokens, ends, limit, PLURALS_PER_WORD)
            fit_windows = fit_windows + extra
            report["contexts"]["plural_templates"] = len(extra)
        start = subword_mean(enc.E, tokens)
        with narrow_threads(enc.device, enc.E.shape[1]):
            t1 = time.perf_counter()
            teacher = _teach(enc, fit_windows, pooling, opts.batch_size, say)
            passes = opts.passes if opts.passes is not None else ENCODER_PASSES
            rows, distilled = distill_encoder_rows(enc, fit_windows, teacher, start, pooling, opts, say, passes)
            report["input"] = {"start": "subword-mean", "max_passes": passes, **distilled,
                               "seconds": round(time.perf_counter() - t1, 3)}
            result = FitResult(rows.numpy(), None, report)
            out = enc.model.get_output_embeddings() if hasattr(enc.model, "get_output_embeddings") else None
            shared = out is None or out.weight.data_ptr() == enc.E.data_ptr()
            if "output" in roles:
                result.output_rows = result.input_rows if shared else subword_mean(out.weight.detach(), tokens).numpy()
            if out is not None and kind.task == "masked":
                rows, result.bias, report["mlm_head"] = fit_head(enc, tok, out, windows, tokens, result, shared,
                                                                      roles, opts, say)
                if rows is not None:
                    result.output_rows = rows
                    report["roles"] = ["input", "output"]
    report["seconds"] = round(time.perf_counter() - t0, 3)
    logger.info("fitted %d input rows of %s in %.1f s", len(tokens), kind.class_name, report["seconds"])
    return result
