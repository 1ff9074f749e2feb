"""The model card: `write_model_card` renders it without `huggingface_hub.ModelCard` (whose import costs
0.3 s) and writes the bytes that `ModelCard(...).save()` wrote."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
from huggingface_hub import ModelCard
from huggingface_hub.repocard import REGEX_YAML_BLOCK

import vocabsurgeon.engine.modelcard as mc


def _summary(words=("Frodo", "mith|ril", "`tick`"), repo=None, commit=None, tied=True):
    added = []
    for i, w in enumerate(words):
        added += [{"token": w, "form": w, "piece": w, "id": 2048 + 2 * i, "mechanism": "added"},
                  {"token": w, "form": " " + w, "piece": " " + w, "id": 2049 + 2 * i, "mechanism": "added"}]
    return {
        "input": "fixtures/gpt2-tiny", "base": {"name": repo or "fixtures/gpt2-tiny", "repo_id": repo,
                                                "revision": "v1" if repo else None, "commit": commit},
        "architecture": "gpt2", "tied": tied, "tokenizer_family": "byte-level-bpe",
        "tensors": {"transformer.wte.weight": {"rows_before": 2048, "rows_after": 2048 + len(added), "init": "mean"}},
        "init": {"input": "mean", "output": "mean", "bias": "mean", "eps": 1e-05}, "seed": 0,
        "rows_before": 2048, "rows_after": 2048 + len(added), "padding_rows": 0, "added": added,
        "tokenizer_notes": ["a note"], "kl_bound": 0.0029, "tool": "vocabsurgeon 0.1.0",
    }


REPORT = {
    "passed": False, "failures": ["KL p99 above the limit"], "corpus": {"name": "builtin", "positions": 512},
    "model": {"class": "GPT2LMHeadModel"}, "device": "cpu", "dtype": "float32", "skipped": ["sampling on CUDA"],
    "kl": {"applicable": True, "mean": 1e-4, "limit_mean": 1e-2, "p99": 2e-3, "limit_p99": 1e-3, "max": 3e-3,
           "bound": 3e-3, "within_bound": True},
    "sampling": {"applicable": True, "new_token_fraction": 0.01, "limit_new_token_fraction": 0.05,
                 "stuck_fraction": 0.0, "limit_stuck_fraction": 0.5},
    "tokenization": {"one_token_words": 3, "new_words": 3, "old_text_ids_changed": 0, "round_trip_failures": 0},
    "usability": {"applicable": True, "bpb_new": 1.234, "bpb_old": 1.5},
    "old_logits": {"applicable": True, "what": "logits", "unchanged": True, "max_abs_diff": 0.0, "tolerance": 1e-5},
}

BASE_CARDS = {
    "none": None,
    "metadata": "---\nlicense: apache-2.0\nlanguage:\n- en\ntags:\n- tiny\n---\n\n# gpt2-tiny\n\nA tiny GPT-2.\n",
    "tag string": "---\nlicense: mit\ntags: tiny\nbase_model: gpt2\n---\n# x\n",
    "already tagged, odd order": "---\ntags:\n- vocabsurgeon\n- a\nlicense: mit\nzzz: 1\naaa: [1, 2]\n---\n# x\n",
    "crlf": "---\r\nlicense: mit\r\ndatasets:\r\n- c4\r\n---\r\n\r\n# x\r\n",
    "no metadata": "old\n",
    "empty metadata": "---\n\n---\n# x\n",
    "unicode and dates": "---\nlicense: other\nlicense_name: ‘lïcense’\nreleased: 2024-01-02\n---\n# Ünï\n",
    "model-index": ("---\nlicense: mit\nmodel-index:\n- name: m\n  results:\n  - task:\n      type: text-generation\n"
                    "    dataset:\n      name: wiki\n      type: wikitext\n    metrics:\n    - type: ppl\n"
                    "      value: 12.5\n---\n# x\n"),
    "bad model-index": "---\nlicense: mit\nmodel-index: [1, 2]\n---\n# x\n",
    "malformed yaml": "---\nlicense: [unclosed\ntags: {\n---\n# x\n",
    "not a mapping": "---\n- a\n- b\n---\n# x\n",
    "non-string keys": "---\n1: a\nlicense: mit\n---\n# x\n",
}

CASES = [
    pytest.param({"summary": _summary()}, id="local"),
    pytest.param({"summary": _summary(repo="org/gpt2-tiny", commit="0123456789abcdef" * 2, tied=False),
                  "report": REPORT, "plot": "kl.png"}, id="hub base, report"),
    pytest.param({"summary": _summary(words=[f"Elf{i}" for i in range(45)]), "tokens_file": "added_tokens.txt"},
                 id="token list in a file"),
    pytest.param({"summary": _summary(words=[])}, id="no words"),
]


@pytest.mark.floor  # also run with the oldest supported versions (.ci/run)
@pytest.mark.parametrize("base", [c for c in BASE_CARDS.values() if c], ids=[k for k, c in BASE_CARDS.items() if c])
def test_the_yaml_block_is_found_where_huggingface_hub_finds_it(base):
    """Our copy of huggingface_hub's REGEX_YAML_BLOCK splits each card as the installed huggingface_hub does (its
    pattern's spelling changed between releases; what it finds did not)."""
    ours, theirs = mc.REGEX_YAML_BLOCK.search(base), REGEX_YAML_BLOCK.search(base)
    assert (ours is None) == (theirs is None)
    if ours is not None:
        assert (ours.group(2), ours.end()) == (theirs.group(2), theirs.end())


@pytest.mark.parametrize("base", list(BASE_CARDS.values()), ids=list(BASE_CARDS))
@pytest.mark.parametrize("case", CASES)
def test_card_text_is_what_model_card_save_wrote(case, base, tmp_path):
    text = mc.model_card_text(**case, base_card=base)
    card = mc.model_card(**case, base_card=base)
    card.save(tmp_path / "saved.md")  # what write_model_card did before
    assert text.encode("utf-8") == (tmp_path / "saved.md").read_bytes()
    again = ModelCard(text)
    assert again.data.to_dict() == card.data.to_dict() and again.text == card.text
    assert mc.TAG in again.data.to_dict()["tags"]


@pytest.mark.parametrize("base", [b for b in BASE_CARDS.values() if b], ids=[k for k, b in BASE_CARDS.items() if b])
def test_base_metadata_is_read_as_model_card_reads_it(base, caplog):
    # What model_card did before: ModelCard(base_card, ignore_metadata_errors=True).data.to_dict(), or a warning.
    from huggingface_hub.repocard_data import ModelCardData

    def ours():
        meta, body = mc._split_card(base)
        return ModelCardData(**meta, ignore_metadata_errors=True), body

    try:
        want = ModelCard(base, ignore_metadata_errors=True)
    except Exception as e:  # noqa: BLE001 (whatever ModelCard raises, the same is raised here)
        with pytest.raises(type(e)):
            ours()
        with caplog.at_level(logging.WARNING, logger="vocabsurgeon.engine.modelcard"):
            text = mc.model_card_text(_summary(), base_card=base)
        assert "the base model card's metadata cannot be read" in caplog.text
        assert ModelCard(text).data.to_dict() == {"tags": [mc.TAG]}
        return
    data, body = ours()
    assert data.to_dict() == want.data.to_dict() and body == want.text


@pytest.mark.parametrize("content", [
    "---\nlicense: mit\n---\n\n# x\n", "---\r\nlicense: mit\r\n---\r\n# x\r\n", "---\rlicense: mit\r---\r# x\r",
    "---\nlicense: mit\n---\n# a\rb\r\rc\r", "---\nb: 1\na: 2\ntags:\n- z\n- z\n---\n", "no metadata at all",
])
def test_as_saved_is_str_of_model_card(content):
    assert mc._as_saved(content) == str(ModelCard(content))


def test_write_model_card_writes_the_same_bytes_and_keeps_the_base_metadata(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "README.md").write_bytes(BASE_CARDS["crlf"].encode())  # `add` copies the base card here
    path = mc.write_model_card(out, _summary(), REPORT, plot=out / "kl.png")
    card = mc.model_card(_summary(), REPORT, base_card=BASE_CARDS["crlf"], plot="kl.png")
    card.save(tmp_path / "saved.md")
    assert path.read_bytes() == (tmp_path / "saved.md").read_bytes()
    # Called again (after validation), it reads its own card back: same metadata, new body.
    mc.write_model_card(out, _summary(), None)
    again = ModelCard(path.read_bytes().decode("utf-8"))
    assert again.data.to_dict() == card.data.to_dict()
    assert "Not run (`--no-validate`)" in again.text


def test_write_model_card_does_not_import_the_repocard_module(tmp_path):
    (tmp_path / "README.md").write_text(BASE_CARDS["model-index"], encoding="utf-8")
    code = ("import sys, vocabsurgeon.engine.modelcard as m; "
            f"m.write_model_card(sys.argv[1], {_summary(repo='org/m')!r}, {REPORT!r}); "
            "print('huggingface_hub.repocard' in sys.modules, 'huggingface_hub.hf_api' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True)
    assert r.stdout.split() == ["False", "False"], r.stderr
    assert ModelCard((tmp_path / "README.md").read_text(encoding="utf-8")).data.to_dict()["base_model"] == "org/m"



@pytest.mark.parametrize("given, shown", [("/home/me/models/gpt2-tiny", "gpt2-tiny"), ("ckpt/", "ckpt")])
def test_a_local_base_is_named_by_its_directory_never_by_its_full_path(given, shown):
    summary = {**_summary(), "input": given, "base": {"name": given, "repo_id": None, "revision": None, "commit": None}}
    text = mc.model_card_text(summary)
    assert f"the local checkpoint `{shown}`" in text
    assert "/home/me" not in text and "ckpt/" not in text


def test_skipped_words_are_listed_with_their_reason():
    skipped = [{"token": "assistant", "reason": "a word of the chat template (it would re-tokenize every prompt)"},
               {"token": "°C", "reason": "the pre-tokenizer splits it (° | C)"}]
    text = mc.model_card_text({**_summary(), "skipped": skipped})
    assert ("### Skipped words\n\n| word | reason |\n|---|---|\n"
            "| `assistant` | a word of the chat template (it would re-tokenize every prompt) |\n"
            "| `°C` | the pre-tokenizer splits it (° / C) |\n") in text
    assert "Skipped words" not in mc.model_card_text(_summary())
