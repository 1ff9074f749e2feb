"""What planning costs grows with the words, not with words x vocabulary (issue 38: 9 s for 1,000 words on Llama 3).

`TokenizerEditor.size` scans every id of the vocabulary (128,256 on Llama 3, 4-5 ms a call); planning read it
once per new token, so 1,000 words (2,000 byte-level entries) cost 2,000 scans. No timing here: the scans are
counted, which is what made the time and does not depend on the machine.
"""

from __future__ import annotations

from vocabsurgeon.add.plan import AddOptions, open_target, plan_tokens
from vocabsurgeon.tokenizer.editor import TokenizerEditor


def test_planning_scans_the_vocabulary_a_fixed_number_of_times(gpt2_ckpt, monkeypatch):
    calls = []
    size = TokenizerEditor.size.fget
    monkeypatch.setattr(TokenizerEditor, "size", property(lambda self: calls.append(1) or size(self)))
    target = open_target(gpt2_ckpt, AddOptions())
    counts = {}
    for n in (10, 200):
        calls.clear()
        plan = plan_tokens(target, [f"Zqxv{chr(97 + i % 26)}{chr(97 + i // 26 % 26)}" for i in range(n)])
        assert len(plan.tokens.new) >= n  # every word planned (byte-level: bare and word-start forms)
        counts[n] = len(calls)
    assert counts[200] == counts[10] <= 10, counts
