"""What validation computes with the models: the one body of one-pass and two-pass (`run_models`).

validate.py decides which checkpoints to load and which checks apply; this module runs them: the KL
per position, the old outputs, seeded sampling, greedy chat answers and the bits per byte of the
usability figure, with the new tokens' ids (`NewIds`) telling new from old. One pass loads only the
expanded model (the old logits are its first n columns); two passes load the original first.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..errors import InputError
from .checks import GreedyChatCheck, SamplingCheck, UsabilityCheck
from ..progress import Progress
from ..kl import kl_per_position
from ..corpus import paragraphs
from ..runtime import (
    LoadedModel,
    ModelKind,
    NonFiniteOutput,
    context_length,
    corpus_windows,
    encode,
    loaded_model,
)

PLAIN_PROMPTS = (
    "The weather this morning was",
    "She opened the door and said",
    "In 2019 the company reported",
    "def main():\n    ",
)
NEW_WORD_PREFIXES = ("The next chapter is about", "They met", "Then", "Everyone talked about")
SAMPLE_STEPS = 24  # generated tokens per prompt
GREEDY_STEPS = 16  # tokens of each greedy chat answer
SAMPLED_NEW_WORDS = 4  # new tokens that end a sampling prompt
STUCK_RUN = 3  # this many copies of one new token in a row count as stuck

class NewIds:
    """The ids of the new tokens: every id from `n` (the original's rows) on, and the rows below `n`
    that --reuse-reserved gave to new tokens (Llama 3's reserved tokens, BERT's [unusedN])."""

    def __init__(self, n: int, reused=()):
        self.n = n
        self.reused = frozenset(reused)

    def __contains__(self, t) -> bool:
        return t >= self.n or t in self.reused

    def mask(self, ids: np.ndarray) -> np.ndarray:
        """Which of `ids` are new, as a boolean array."""
        return (ids >= self.n) | np.isin(ids, list(self.reused))


# ---------------------------------------------------------------- what the models compute


def _bits(model: LoadedModel, seqs: list[list[int]], start: int, new: NewIds | None = None,
          vocab: int | None = None, progress: Progress | None = None) -> tuple[float, float, int]:
    """Total bits of predicting each token after position `start` of each sequence; also the
    bits and count of those that are new tokens (in `new`). `vocab`: the softmax over the first
    `vocab` logits only (the original model's, in one pass)."""
    import torch

    total = new_bits = 0.0
    new_count = 0
    for s in seqs:
        lg = model.logits(s)
        lp = (lg[:, :vocab] if vocab is not None else lg).double().log_softmax(-1)  # (T, vocab)
        nxt = np.asarray(s[start:])
        rows = torch.arange(start - 1, len(s) - 1)
        bits = -lp[rows, torch.as_tensor(nxt)].numpy() / math.log(2)  # (T - start,)
        total += float(bits.sum())
        if new is not None:
            is_new = new.mask(nxt)
            new_bits += float(bits[is_new].sum())
            new_count += int(is_new.sum())
        if progress:
            progress.advance(len(s))
    return total, new_bits, new_count


def usability_texts(text: str, new_tok, new: NewIds, max_tokens: int) -> list[str]:
    out, used = [], 0
    for p in paragraphs(text):
        ids = encode(new_tok, p)
        if any(t in new for t in ids) and used < max_tokens:
            out.append(p)
            used += len(ids)
    return out


def _longest_new_run(ids: list[int], new: NewIds) -> int:
    best = run = 0
    prev = None
    for t in ids:
        run = run + 1 if (t in new and t == prev) else (1 if t in new else 0)
        best = max(best, run)
        prev = t
    return best


def sampling_check(model: LoadedModel, old_tok, new: NewIds, new_ids: list[int], seed: int, window: int,
                   max_prompts: int = SAMPLED_NEW_WORDS, progress: Progress | None = None) -> SamplingCheck:
    """Seeded samples: the fraction of new tokens after plain prompts, and how often a prompt ending
    in a new token makes the model repeat it. NaN or Inf probabilities give a failing record."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    prefix = model.prefix(old_tok)
    plain_total = plain_new = 0
    picks = _spread(new_ids, max_prompts)
    stuck = follow = repeat = 0
    self_probs = []
    try:
        for p in PLAIN_PROMPTS:
            ids = prefix + encode(old_tok, p)
            steps = max(0, min(SAMPLE_STEPS, window - len(ids)))
            got = model.sample(ids, steps, gen)
            plain_total += len(got)
            plain_new += sum(t in new for t in got)
            if progress:
                progress.advance(len(ids) + steps)
        for j, t in enumerate(picks):
            ids = prefix + encode(old_tok, NEW_WORD_PREFIXES[j % len(NEW_WORD_PREFIXES)]) + [t]
            steps = max(0, min(SAMPLE_STEPS, window - len(ids)))
            lg = model.logits(ids).double()
            self_probs.append(float(lg[-1].softmax(-1)[t]))
            got = model.sample(ids, steps, gen)
            seq = [t] + got
            if _longest_new_run(seq, new) >= STUCK_RUN:
                stuck += 1
            for a, b in itertools.pairwise(seq):
                if a in new:
                    follow += 1
                    repeat += a == b
            if progress:
                progress.advance(2 * len(ids) + steps)
    except NonFiniteOutput:
        return SamplingCheck(seed=seed, prompts=len(PLAIN_PROMPTS), new_word_prompts=len(picks), nonfinite=True)
    return SamplingCheck(
        seed=seed, prompts=len(PLAIN_PROMPTS), tokens=plain_total,
        new_token_fraction=plain_new / plain_total if plain_total else 0.0, new_word_prompts=len(picks),
        stuck_fraction=stuck / len(picks) if picks else 0.0, self_repeat_rate=repeat / follow if follow else 0.0,
        self_prediction_prob_mean=float(np.mean(self_probs)) if self_probs else 0.0,
    )


def _spread(ids: list[int], m: int) -> list[int]:
    """Up to m ids spread evenly over `ids`."""
    if len(ids) <= m:
        return list(ids)
    return [ids[round(i * (len(ids) - 1) / (m - 1))] for i in range(m)] if m > 1 else [ids[0]]


# ---------------------------------------------------------------- running the models


@dataclass
class Inputs:
    """What the passes run, from the tokenizers: corpus ids, chat texts and prompts, usability paragraphs."""

    corpus_ids: list[int]
    chat_old: list[list[int]]  # the rendered conversations, original tokenizer
    prompts_old: list[list[int]]  # chat prompts, original tokenizer (what the original model is asked)
    prompts_new: list[list[int]]  # the same prompts, new tokenizer (what the expanded model is asked)
    usable: list[str]  # corpus paragraphs that use new words
    n: int
    rows_new: int
    new_token_ids: list[int]
    new: NewIds
    seed: int
    max_tokens: int
    stop: set[int]  # greedy answers end at these ids (end of sequence)


@dataclass
class Measured:
    """What running the model(s) measured; None where the kind of model does not allow it."""

    kl: np.ndarray | None = None  # KL(p_old || p_new) per corpus position
    kl_chat: np.ndarray | None = None  # the same on the chat-template conversations
    what: str | None = None  # "logits" or "hidden states": the old outputs that must not move
    max_diff: float = 0.0  # max |new - old| of those outputs (two-pass)
    max_out: float = 0.0  # max |old output|, the scale of the tolerance
    sampling: SamplingCheck | None = None
    greedy_base: list[list[int]] | None = None  # the original model's greedy answers to the chat prompts
    greedy_new: list[list[int]] | None = None  # the expanded model's
    old_bits: tuple = (0.0, 0.0, 0)
    new_bits: tuple = (0.0, 0.0, 0)
    dtype: str | None = None
    device: str | None = None
    missing: list[str] = field(default_factory=list)  # weights the checkpoint lacks, random at load


class _Windows(NamedTuple):
    prefix: list[int]
    window: int
    corpus: list[list[int]]
    chat: list[list[int]]
    usable_old: list[list[int]]
    usable_new: list[list[int]]


def _windows(model: LoadedModel, inp: Inputs, old_tok, new_tok) -> _Windows:
    prefix, window = model.prefix(old_tok), context_length(model)
    usable_old = [w for p in inp.usable for w in corpus_windows(encode(old_tok, p), prefix, window)]
    usable_new = [w for p in inp.usable for w in corpus_windows(encode(new_tok, p), prefix, window)]
    return _Windows(prefix, window, corpus_windows(inp.corpus_ids, prefix, window, inp.max_tokens),
                    [c[:window] for c in inp.chat_old], usable_old, usable_new)


def _work(w: _Windows, inp: Inputs, kind: ModelKind, passes: int, old_tok) -> int:
    """Tokens through a model in the whole run: the units of the progress bar."""
    units = passes * sum(map(len, w.corpus + (w.chat if kind.has_logits else [])))
    if kind.generates:
        units += sum(map(len, w.usable_old + w.usable_new))
        for p in PLAIN_PROMPTS:  # as sampling_check counts them
            ids = len(w.prefix) + len(encode(old_tok, p))
            units += ids + max(0, min(SAMPLE_STEPS, w.window - ids))
        for j, _ in enumerate(_spread(inp.new_token_ids, SAMPLED_NEW_WORDS)):
            ids = len(w.prefix) + len(encode(old_tok, NEW_WORD_PREFIXES[j % len(NEW_WORD_PREFIXES)])) + 1
            units += 2 * ids + max(0, min(SAMPLE_STEPS, w.window - ids))
        units += sum(len(p) + GREEDY_STEPS for p in inp.prompts_old + inp.prompts_new)
    return units


def _outputs(model: LoadedModel, seqs: list[list[int]], kind: ModelKind, progress: Progress):
    forward = model.logits if kind.has_logits else model.hidden
    for s in seqs:
        out = forward(s)  # (T, vocab) logits or (T, hidden) states
        progress.advance(len(s))
        yield out


def _greedy(model: LoadedModel, prompts: list[list[int]], inp: Inputs, progress: Progress,
            vocab: int | None = None) -> list[list[int]]:
    out = []
    for p in prompts:
        out.append(model.greedy(p, GREEDY_STEPS, vocab=vocab, stop=inp.stop))
        progress.advance(len(p) + GREEDY_STEPS)
    return out


def _check_rows(got: int, want: int, path: Path) -> None:
    if got != want:
        raise InputError(f"{path}: the model has {got} output rows but config says {want}")


def run_models(base: Path | None, new: Path, kind: ModelKind, device: str, inp: Inputs, old_tok, new_tok,
             progress: Progress, dtype: str = "auto", remedy: str = "") -> Measured:
    """Run the expanded model NEW, after the original BASE when one is given (two passes), and measure
    what applies to `kind`.

    With one pass (`base` None: NEW derives from BASE by add, checked from the files), the original's
    logits are the first n columns of the expanded model's, so the original is never loaded. `dtype`:
    what the models run in (devices.DTYPES).
    """
    n = inp.n
    m = Measured(what="logits" if kind.has_logits else "hidden states")
    old_out = old_chat = None  # the original's outputs, two-pass only

    def start(model, passes: int) -> _Windows:
        w = _windows(model, inp, old_tok, new_tok)
        progress.count("validating", _work(w, inp, kind, passes, old_tok), "tok")
        m.dtype, m.device, m.missing = model.dtype, str(model.device), model.missing
        return w

    if base is not None:
        progress.stage(f"original model ({base})")
        with loaded_model(base, device, kind, dtype=dtype, remedy=remedy) as model:
            w = start(model, 2)
            old_out = list(_outputs(model, w.corpus, kind, progress))
            old_chat = list(_outputs(model, w.chat, kind, progress)) if kind.has_logits else []
            if kind.has_logits and old_out:
                _check_rows(old_out[0].shape[-1], n, base)
            if kind.generates:
                m.greedy_base = _greedy(model, inp.prompts_old, inp, progress)
                m.old_bits = _bits(model, w.usable_old, len(w.prefix), progress=progress)

    progress.stage(f"expanded model ({new})" + (", one pass" if base is None else ""))
    with loaded_model(new, device, kind, dtype=dtype, remedy=remedy) as model:
        if base is None:
            w = start(model, 1)
        kls = []
        for i, ln in enumerate(_outputs(model, w.corpus, kind, progress)):
            lo = None if old_out is None else old_out[i]
            if kind.has_logits:
                _check_rows(ln.shape[-1], inp.rows_new, new)
                kls.append(kl_per_position(ln[:, :n] if lo is None else lo, ln))
                ln = ln[:, :n]
            if lo is not None:
                if inp.new.reused:  # rows that --reuse-reserved gave to new tokens changed on purpose
                    keep = [i for i in range(n) if i not in inp.new.reused]
                    ln, lo = ln[..., keep], lo[..., keep]
                m.max_diff = max(m.max_diff, float((ln - lo).abs().max()))
                m.max_out = max(m.max_out, float(lo.abs().max()))
        if kind.has_logits:
            m.kl = np.concatenate(kls) if kls else np.zeros(0)
            chat = [kl_per_position(ln[:, :n] if old_chat is None else old_chat[i], ln)
                    for i, ln in enumerate(_outputs(model, w.chat, kind, progress))]
            m.kl_chat = np.concatenate(chat) if chat else None
        if kind.generates:
            progress.stage("sampling")
            m.sampling = sampling_check(model, old_tok, inp.new, inp.new_token_ids, inp.seed, w.window, progress=progress)
            if base is None and inp.prompts_old:
                progress.stage("chat greedy answers")
                m.greedy_base = _greedy(model, inp.prompts_old, inp, progress, vocab=n)
                m.greedy_new = _greedy(model, inp.prompts_new, inp, progress)
            elif base is not None and inp.prompts_new:
                progress.stage("chat greedy answers")
                m.greedy_new = _greedy(model, inp.prompts_new, inp, progress)
            if base is None:
                m.old_bits = _bits(model, w.usable_old, len(w.prefix), vocab=n, progress=progress)
            m.new_bits = _bits(model, w.usable_new, len(w.prefix), inp.new, progress=progress)
    return m


def greedy_check(m: Measured, inp: Inputs, old_tok, new_tok, reason: str) -> GreedyChatCheck:
    if m.greedy_base is None or m.greedy_new is None:
        return GreedyChatCheck(applicable=False, reason=reason)
    compared = differing = 0
    examples = []
    for i, (a, b) in enumerate(zip(m.greedy_base, m.greedy_new)):
        base_text, new_text = old_tok.decode(a), new_tok.decode(b)
        if any(t in inp.new for t in encode(new_tok, base_text)):
            continue  # the original's answer uses a new word: the expanded model may rightly say it another way
        compared += 1
        if base_text != new_text:
            differing += 1
            examples.append({"prompt": i, "base": base_text, "new": new_text})
    return GreedyChatCheck(prompts=len(m.greedy_base), compared=compared, differing=differing, steps=GREEDY_STEPS,
                           examples=examples[:3])


def usability_check(usable: list[str], m: Measured, ran: bool) -> UsabilityCheck:
    if not ran or not usable:
        return UsabilityCheck(applicable=False, measured_model=ran,
                              reason="the corpus contains none of the new words; pass --corpus with text that "
                                     "uses them" if ran else "the model does not generate text")
    nbytes = sum(len(p.encode("utf-8")) for p in usable)
    return UsabilityCheck(
        paragraphs=len(usable), bytes=nbytes, bpb_old=m.old_bits[0] / nbytes, bpb_new=m.new_bits[0] / nbytes,
        new_tokens_seen=m.new_bits[2], new_token_bits_mean=m.new_bits[1] / m.new_bits[2] if m.new_bits[2] else None,
        measured_model=True,
    )


