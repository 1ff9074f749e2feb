"""The check records of validation: pass/fail rules, summary lines and card rows on made-up figures, no model."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vocabsurgeon.validation.checks import (
    CHECKS,
    ChatKLCheck,
    FiniteRowsCheck,
    GreedyChatCheck,
    KLCheck,
    OldOutputsCheck,
    SamplingCheck,
    TokenizationCheck,
    UsabilityCheck,
    failures,
    over,
    read_checks,
)

NAN = float("nan")


def kl(mean, p99=0.0, mx=0.0, bound=0.01, **kw) -> KLCheck:
    return KLCheck(mean=mean, p99=p99, max=mx, bound=bound, within_bound=mx <= bound, positions=10,
                   limit_mean=0.05, limit_p99=0.5, **kw)


@pytest.mark.parametrize("value,limit,broken", [(0.05, 0.05, False), (0.0500001, 0.05, True), (NAN, 0.05, True),
                                                (math.inf, 1e9, True), (None, 1.0, True), (-1.0, 0.0, False)])
def test_over_is_true_for_nan_and_above_the_limit(value, limit, broken):
    assert over(value, limit) is broken


def test_kl_at_the_limit_passes_and_above_fails():
    assert kl(0.05, 0.5).failures() == []
    assert kl(0.06, 0.5).failures() == ["mean KL 0.06 nats is over the limit 0.05 (--max-kl-mean)"]
    assert kl(0.01, 0.7).failures() == ["p99 KL 0.7 nats is over the limit 0.5 (--max-kl-p99)"]


def test_nan_kl_fails_instead_of_passing():
    c = KLCheck.from_kl(np.array([0.001, NAN, 0.002]), bound=0.01, limit_mean=0.05, limit_p99=0.5)
    assert math.isnan(c.mean) and math.isnan(c.p99) and math.isnan(c.max) and c.within_bound is False
    assert c.failures() == ["mean KL nan nats is over the limit 0.05 (--max-kl-mean)",
                            "p99 KL nan nats is over the limit 0.5 (--max-kl-p99)"]


def test_kl_measure_matches_numpy():
    x = np.random.default_rng(0).exponential(0.001, size=1000)
    c = KLCheck.from_kl(x, bound=0.01, limit_mean=0.05, limit_p99=0.5)
    assert c.mean == pytest.approx(x.mean()) and c.p99 == pytest.approx(np.quantile(x, 0.99))
    assert c.max == x.max() and c.positions == 1000 and c.within_bound is bool(x.max() <= 0.01 * (1 + 1e-6) + 1e-12)


def test_chat_kl_says_chat_in_its_failures_summary_and_card():
    c = ChatKLCheck(mean=0.2, p99=0.1, max=0.3, bound=0.01, within_bound=False, positions=390, limit_mean=0.05,
                    limit_p99=0.5, samples=4)
    assert c.failures() == ["chat mean KL 0.2 nats is over the limit 0.05 (--max-kl-mean)"]
    assert c.summary() == [("chat KL(p_old || p_new) over 390 positions of 4 chat-template conversations: mean 0.2, "
                           "p99 0.1, max 0.3 nats (mean-init bound 0.01)")]
    assert c.card_rows()[0] == "| chat KL(p_old ‖ p_new) mean | 0.2 nats | 0.05 |"
    assert "(above) |" in c.card_rows()[2]


def test_not_applicable_checks_neither_fail_nor_print():
    for c in (KLCheck(applicable=False, reason="x", mean=None), SamplingCheck(applicable=False),
              GreedyChatCheck(applicable=False), OldOutputsCheck(applicable=False), ChatKLCheck(applicable=False)):
        assert c.failures() == [] and c.summary() == [] and c.card_rows() == []


def test_sampling_limits_and_nonfinite():
    s = SamplingCheck(new_token_fraction=0.25, stuck_fraction=0.5, new_word_prompts=4, limit_new_token_fraction=0.2,
                      limit_stuck_fraction=0.5)
    assert s.failures() == [("25% of tokens sampled after prompts without new words are new tokens (limit 20%, "
                            "--max-new-token-fraction)")]
    assert SamplingCheck(nonfinite=True).failures() == [
        "the expanded model computes NaN or Inf next-token probabilities: nothing can be sampled"]


def test_greedy_fails_on_any_differing_answer():
    g = GreedyChatCheck(prompts=3, compared=3, differing=1, steps=16,
                        examples=[{"prompt": 0, "base": "Paris.", "new": "<|im_end|>"}])
    assert g.failures() == [("1 of 3 chat prompts get a different greedy answer from the expanded model, e.g. "
                            "'<|im_end|>' instead of 'Paris.'")]
    assert GreedyChatCheck(prompts=3, compared=2, differing=0).failures() == []
    assert g.card_rows() == ["| chat prompts answered as by the original (greedy) | 2/3 | all |"]


def test_old_outputs_rule_and_the_one_pass_wording():
    changed = OldOutputsCheck(what="logits", unchanged=False, max_abs_diff=0.5, tolerance=1e-4,
                              missing_weights=["lm_head.weight"])
    assert changed.failures() == [("old-vocabulary logits changed by up to 0.5 (tolerance 0.0001); the checkpoint lacks "
                                  "1 weight(s) that transformers initializes at random, e.g. 'lm_head.weight'")]
    files = OldOutputsCheck(what="logits", unchanged=True, max_abs_diff=0.0, tolerance=1e-4, how="files")
    assert files.failures() == [] and "by construction" in files.summary()[0]


def test_tokenization_chat_failure_names_the_template_tokens():
    t = TokenizationCheck(new_words=1, one_token_words=1, chat_samples=4, chat_ids_changed=3,
                          chat_new_tokens=["assistant", " assistant"])
    assert t.failures() == [("3 of 4 chat-template conversations tokenize differently: the template's text now holds "
                            "new token(s) 'assistant', ' assistant'; chat prompts change for every user (remove those "
                            "words from the tokens)")]
    assert TokenizationCheck(new_words=2, one_token_words=2).failures() == []


def test_finite_rows_failure_lists_the_ids():
    f = FiniteRowsCheck(tensors=["lm_head.weight"], nonfinite_rows={"lm_head.weight": [600, 603]}, nonfinite_count=2)
    assert f.failures() == [("2 row(s) hold NaN or Inf, e.g. tensor 'lm_head.weight' rows 600, 603; the model's outputs "
                            "are not numbers (re-run add with a finite --eps, or another --init)")]
    assert FiniteRowsCheck(tensors=["x"]).failures() == []


def test_usability_never_fails():
    u = UsabilityCheck(paragraphs=1, bytes=100, bpb_old=1.0, bpb_new=9.0, new_tokens_seen=3, new_token_bits_mean=20.0,
                       measured_model=True)
    assert u.failures() == [] and u.summary()[0].startswith("usability on 100 bytes with new words: 9.000 bits/byte")


def test_records_round_trip_through_a_report():
    checks = [FiniteRowsCheck(tensors=["w"]), kl(0.2), SamplingCheck(new_token_fraction=0.0, stuck_fraction=0.0),
              TokenizationCheck(new_words=1, one_token_words=1)]
    report = {c.KEY: c.to_dict() for c in checks}
    report["kl"]["a_key_from_a_later_version"] = 1  # ignored when read back
    back = read_checks(report)
    assert [type(c) for c in back] == [type(c) for c in checks]  # CHECKS order, absent checks left out
    assert [c.to_dict() for c in back] == [c.to_dict() for c in checks]
    assert failures(back) == ["mean KL 0.2 nats is over the limit 0.05 (--max-kl-mean)"]


def test_every_check_has_its_own_report_key():
    keys = [c.KEY for c in CHECKS]
    assert len(set(keys)) == len(keys) and "" not in keys
