"""The checks of validation as records: each knows its figures, its pass/fail rule, its summary line and its card rows.

A record is built from what was measured (validate.py runs the models) or read back from a
report (`from_report`), so the report, the CLI summary and the model card all come from the same
place, and a pass/fail rule is tested on made-up figures without loading a model. A new check is
one class added to CHECKS.

Every limit is compared as `not (value <= limit)`: a NaN figure fails instead of passing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import ClassVar

import numpy as np

from ..kl import kl_figures, within_bound


def over(value: float | None, limit: float) -> bool:
    """Whether a measured figure breaks its limit; NaN (and None) break every limit."""
    return value is None or not (value <= limit)


def _g(x: float | None, spec: str = ".3g") -> str:
    return "n/a" if x is None else format(x, spec)


@dataclass
class Check:
    """Base of the records: `applicable` False (with `reason`) when the model cannot run the check."""

    KEY: ClassVar[str] = ""
    applicable: bool = True
    reason: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_report(cls, report: dict) -> Check | None:
        d = report.get(cls.KEY)
        if d is None:
            return None
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def failures(self) -> list[str]:
        return []

    def summary(self) -> list[str]:
        return []

    def card_rows(self) -> list[str]:
        """Rows of the model card's `| check | value | limit |` table."""
        return []


@dataclass
class KLCheck(Check):
    """KL(p_old || p_new) per position on the corpus (tokenized with the original tokenizer)."""

    KEY: ClassVar[str] = "kl"
    LABEL: ClassVar[str] = ""  # "" for the corpus, "chat " for the chat samples
    mean: float | None = None
    p99: float | None = None
    max: float | None = None
    bound: float = 0.0
    within_bound: bool | None = None
    positions: int = 0
    limit_mean: float = 0.0
    limit_p99: float = 0.0

    @classmethod
    def from_kl(cls, kl: np.ndarray, bound: float, limit_mean: float, limit_p99: float, **extra) -> KLCheck:
        """The figures of a per-position KL array; NaN positions make mean, p99 and max NaN."""
        f = kl_figures(kl)
        if not f["positions"]:
            f.update(mean=0.0, p99=0.0, max=0.0)
        return cls(**f, bound=bound, within_bound=within_bound(f["max"], bound), limit_mean=limit_mean,
                   limit_p99=limit_p99, **extra)

    def failures(self) -> list[str]:
        if not self.applicable:
            return []
        out = []
        label = self.LABEL
        if over(self.mean, self.limit_mean):
            out.append(f"{label}mean KL {self.mean:.4g} nats is over the limit {self.limit_mean:.4g} (--max-kl-mean)")
        if over(self.p99, self.limit_p99):
            out.append(f"{label}p99 KL {self.p99:.4g} nats is over the limit {self.limit_p99:.4g} (--max-kl-p99)")
        return out

    def summary(self) -> list[str]:
        if not self.applicable:
            return []
        return [(f"{self.LABEL or ''}KL(p_old || p_new) over {self.positions} positions{self._where()}: mean "
                f"{_g(self.mean)}, p99 {_g(self.p99)}, max {_g(self.max)} nats (mean-init bound {self.bound:.3g})")]

    def _where(self) -> str:
        return ""

    def card_rows(self) -> list[str]:
        if not self.applicable:
            return []
        name = f"{self.LABEL}KL(p_old ‖ p_new)" if self.LABEL else "KL(p_old ‖ p_new)"
        short = f"{self.LABEL}KL"
        return [
            f"| {name} mean | {_g(self.mean)} nats | {self.limit_mean:.3g} |",
            f"| {short} p99 | {_g(self.p99)} nats | {self.limit_p99:.3g} |",
            (f"| {short} max | {_g(self.max)} nats | mean-init bound log(1 + k/n) = {self.bound:.3g} "
            f"({'within' if self.within_bound else 'above'}) |"),
        ]


@dataclass
class ChatKLCheck(KLCheck):
    """KL on the sample conversations rendered with the chat template (original tokenizer's ids)."""

    KEY: ClassVar[str] = "kl_chat"
    LABEL: ClassVar[str] = "chat "
    samples: int = 0

    def _where(self) -> str:
        return f" of {self.samples} chat-template conversations"


@dataclass
class OldOutputsCheck(Check):
    """The old-vocabulary logits (or, without an LM head, the hidden states of old text) must not move."""

    KEY: ClassVar[str] = "old_logits"
    what: str | None = None  # "logits" or "hidden states"
    unchanged: bool | None = None
    max_abs_diff: float | None = None
    tolerance: float | None = None
    how: str = "measured"  # "measured": both models run; "files": one pass, old rows and tensors bit-identical
    missing_weights: list[str] = field(default_factory=list)

    def _what(self) -> str:
        return "old-vocabulary logits" if self.what == "logits" else "hidden states of old text"

    def failures(self) -> list[str]:
        if not self.applicable or self.unchanged:
            return []
        extra = ""
        if self.missing_weights:
            extra = (f"; the checkpoint lacks {len(self.missing_weights)} weight(s) that transformers initializes "
                     f"at random, e.g. {self.missing_weights[0]!r}")
        return [f"{self._what()} changed by up to {_g(self.max_abs_diff, '.4g')} (tolerance {_g(self.tolerance)})"
                + extra]

    def summary(self) -> list[str]:
        if not self.applicable:
            return []
        if self.how == "files":
            return [(f"{self._what()} unchanged by construction (one pass: every old row and other tensor of the "
                    "checkpoint is bit-identical to the original's)")]
        return [f"{self._what()} {'unchanged' if self.unchanged else 'CHANGED'} (max diff {_g(self.max_abs_diff)})"]

    def card_rows(self) -> list[str]:
        if not self.applicable:
            return []
        if self.how == "files":
            return [f"| {self._what()} | unchanged (old rows and other tensors bit-identical) | bit-identical |"]
        return [(f"| {self._what()} | {'unchanged' if self.unchanged else 'changed'} "
                f"(max diff {_g(self.max_abs_diff)}) | {_g(self.tolerance)} |")]


@dataclass
class SamplingCheck(Check):
    """Seeded samples: new tokens after plain prompts; repeats after prompts ending in a new token."""

    KEY: ClassVar[str] = "sampling"
    seed: int = 0
    prompts: int = 0
    tokens: int = 0
    new_token_fraction: float | None = None
    new_word_prompts: int = 0
    stuck_fraction: float | None = None
    self_repeat_rate: float | None = None
    self_prediction_prob_mean: float | None = None
    nonfinite: bool = False  # the model computed NaN/Inf probabilities: nothing could be sampled
    limit_new_token_fraction: float = 0.2
    limit_stuck_fraction: float = 0.5

    def failures(self) -> list[str]:
        if not self.applicable:
            return []
        if self.nonfinite:
            return ["the expanded model computes NaN or Inf next-token probabilities: nothing can be sampled"]
        out = []
        if over(self.new_token_fraction, self.limit_new_token_fraction):
            out.append(f"{self.new_token_fraction:.0%} of tokens sampled after prompts without new words are new "
                       f"tokens (limit {self.limit_new_token_fraction:.0%}, --max-new-token-fraction)")
        if over(self.stuck_fraction, self.limit_stuck_fraction):
            out.append(f"the model repeats a new token after {self.stuck_fraction:.0%} of prompts ending in one "
                       f"(limit {self.limit_stuck_fraction:.0%}, --max-stuck-fraction)")
        return out

    def summary(self) -> list[str]:
        if not self.applicable:
            return []
        if self.nonfinite:
            return ["sampling: NaN or Inf probabilities, nothing sampled"]
        return [(f"sampling: {self.new_token_fraction:.1%} new tokens after plain prompts; stuck on a new "
                f"token after {self.stuck_fraction:.0%} of {self.new_word_prompts} prompts")]

    def card_rows(self) -> list[str]:
        if not self.applicable:
            return []
        if self.nonfinite:
            return ["| sampling | NaN or Inf probabilities | finite |"]
        return [
            (f"| new tokens sampled after plain prompts | {self.new_token_fraction:.1%} | "
            f"{self.limit_new_token_fraction:.0%} |"),
            (f"| prompts ending in a new token that repeat it | {self.stuck_fraction:.0%} | "
            f"{self.limit_stuck_fraction:.0%} |"),
        ]


@dataclass
class GreedyChatCheck(Check):
    """Greedy answers to chat prompts: the expanded model (new tokenizer) must answer as the original
    (original tokenizer) does, where the answer involves no new word."""

    KEY: ClassVar[str] = "greedy_chat"
    prompts: int = 0
    compared: int = 0  # prompts whose original answer holds no new word
    differing: int = 0
    steps: int = 0
    examples: list[dict] = field(default_factory=list)  # {"prompt", "base", "new"} of differing answers

    def failures(self) -> list[str]:
        if not self.applicable or not self.differing:
            return []
        e = self.examples[0] if self.examples else {}
        return [(f"{self.differing} of {self.compared} chat prompts get a different greedy answer from the expanded "
                f"model, e.g. {e.get('new', '')[:60]!r} instead of {e.get('base', '')[:60]!r}")]

    def summary(self) -> list[str]:
        if not self.applicable:
            return []
        return [(f"chat greedy answers: {self.compared - self.differing}/{self.compared} as the original's "
                f"({self.steps} tokens each)")]

    def card_rows(self) -> list[str]:
        if not self.applicable:
            return []
        return [(f"| chat prompts answered as by the original (greedy) | {self.compared - self.differing}/"
                f"{self.compared} | all |")]


@dataclass
class TokenizationCheck(Check):
    """Old text keeps its ids, each new word is one token, decode as before; chat-template text too."""

    KEY: ClassVar[str] = "tokenization"
    paragraphs: int = 0
    paragraphs_with_new_tokens: int = 0
    old_text_ids_changed: int = 0
    new_words: int = 0
    one_token_words: int = 0
    not_one_token: list[dict] = field(default_factory=list)
    round_trip_failures: int = 0
    chat_samples: int = 0
    chat_ids_changed: int = 0  # rendered conversations without new words whose ids changed
    chat_new_tokens: list[str] = field(default_factory=list)  # new tokens that the template text now holds
    # word -> the texts of contexts.CONTEXTS (beyond a sentence start and after a space) where it is not one
    # token: reported, as the plan reports them (brackets and quotes joined to the word by the pre-tokenizer)
    contexts_not_one_token: dict[str, list[str]] = field(default_factory=dict)
    # corpus words that hold a new word inside them ("REQUEST" and "REQ"), checked; those whose ids changed
    # without the plan reporting it (longer_words_resplit), with up to 5 {"text", "before", "after"}
    longer_words_checked: int = 0
    longer_words_changed: int = 0
    longer_words_examples: list[dict] = field(default_factory=list)
    passed: bool = True

    def failures(self) -> list[str]:
        out = []
        if self.old_text_ids_changed:
            out.append(f"{self.old_text_ids_changed} corpus paragraph(s) without new words tokenize differently")
        if self.not_one_token:
            out.append(f"{len(self.not_one_token)} new word(s) are not one token, e.g. {self.not_one_token[0]['form']!r}")
        if self.round_trip_failures:
            out.append(f"{self.round_trip_failures} corpus paragraph(s) decode differently from the original tokenizer")
        if self.chat_ids_changed:
            held = f": the template's text now holds new token(s) {', '.join(map(repr, self.chat_new_tokens[:5]))}" \
                if self.chat_new_tokens else ""
            out.append(f"{self.chat_ids_changed} of {self.chat_samples} chat-template conversations tokenize "
                       f"differently{held}; chat prompts change for every user (remove those words from the tokens)")
        if self.longer_words_changed:
            out.append(f"{self.longer_words_changed} corpus word(s) that hold a new word inside them tokenize "
                       f"differently and the plan did not report it, e.g. {self.longer_words_examples[0]['text']!r}")
        return out

    def summary(self) -> list[str]:
        chat = (f", {self.chat_ids_changed}/{self.chat_samples} chat-template conversations changed"
                if self.chat_samples else "")
        elsewhere = ""
        if self.contexts_not_one_token:
            w, texts = next(iter(self.contexts_not_one_token.items()))
            elsewhere = (f"; {len(self.contexts_not_one_token)} keep their old pieces in some contexts "
                         f"(e.g. {texts[0]!r})")
        longer = (f", {self.longer_words_changed}/{self.longer_words_checked} longer words holding a new word "
                  "changed unreported" if self.longer_words_checked else "")
        return [f"tokenization: {self.one_token_words}/{self.new_words} new words one token, "
                f"{self.old_text_ids_changed} old paragraphs changed, {self.round_trip_failures} round-trip failures"
                + chat + longer + elsewhere]

    def card_rows(self) -> list[str]:
        rows = [
            f"| new words that are one token | {self.one_token_words}/{self.new_words} | all |",
            f"| old paragraphs tokenized differently | {self.old_text_ids_changed} | 0 |",
            f"| decode round-trip failures | {self.round_trip_failures} | 0 |",
        ]
        if self.chat_samples:
            rows.append(f"| chat-template conversations tokenized differently | {self.chat_ids_changed}/"
                        f"{self.chat_samples} | 0 |")
        return rows


@dataclass
class UsabilityCheck(Check):
    """Bits per byte on corpus paragraphs with the new words: reported, never pass/fail."""

    KEY: ClassVar[str] = "usability"
    paragraphs: int = 0
    bytes: int = 0
    bpb_old: float | None = None  # original model, original tokenization
    bpb_new: float | None = None  # expanded model, new tokenization
    new_tokens_seen: int = 0
    new_token_bits_mean: float | None = None
    measured_model: bool = False  # the model ran (only generating models); False: nothing to say

    def summary(self) -> list[str]:
        if self.applicable:
            return [(f"usability on {self.bytes} bytes with new words: {self.bpb_new:.3f} bits/byte "
                    f"(original: {self.bpb_old:.3f}); new tokens cost {self.new_token_bits_mean or 0:.2f} bits each")]
        return ["usability: not measured (the corpus has none of the new words)"] if self.measured_model else []

    def card_rows(self) -> list[str]:
        if self.applicable:
            return [(f"| bits per byte on text with the new words | {self.bpb_new:.3f} (original model: "
                    f"{self.bpb_old:.3f}) | reported |")]
        if self.measured_model:
            return ["| bits per byte on text with the new words | not measured (no new words in the corpus) | |"]
        return []


@dataclass
class FiniteRowsCheck(Check):
    """Every row of the expanded checkpoint's vocabulary tensors is finite (no NaN or Inf), read from the files."""

    KEY: ClassVar[str] = "finite"
    tensors: list[str] = field(default_factory=list)
    nonfinite_rows: dict[str, list[int]] = field(default_factory=dict)  # tensor -> row ids (at most 20 each)
    nonfinite_count: int = 0

    def failures(self) -> list[str]:
        if not self.nonfinite_count:
            return []
        name, ids = next(iter(self.nonfinite_rows.items()))
        more = "" if len(ids) >= self.nonfinite_count else ", ..."
        return [(f"{self.nonfinite_count} row(s) hold NaN or Inf, e.g. tensor '{name}' rows "
                f"{', '.join(map(str, ids[:10]))}{more}; the model's outputs are not numbers (re-run add with a "
                "finite --eps, or another --init)")]

    def summary(self) -> list[str]:
        if not self.nonfinite_count:
            return []
        return ["NaN/Inf rows: " + "; ".join(f"{n}: {', '.join(map(str, ids))}" for n, ids in
                                               self.nonfinite_rows.items())]

    def card_rows(self) -> list[str]:
        return [f"| rows holding NaN or Inf | {self.nonfinite_count} | 0 |"]


# The checks in report order: the report keys, the summary lines and the card rows follow it.
CHECKS: tuple[type[Check], ...] = (FiniteRowsCheck, KLCheck, ChatKLCheck, OldOutputsCheck, SamplingCheck,
                                   GreedyChatCheck, TokenizationCheck, UsabilityCheck)


def read_checks(report: dict) -> list[Check]:
    """The check records of a report (those it holds), in CHECKS order."""
    return [c for c in (cls.from_report(report) for cls in CHECKS) if c is not None]


def failures(checks: list[Check]) -> list[str]:
    return [f for c in checks for f in c.failures()]
