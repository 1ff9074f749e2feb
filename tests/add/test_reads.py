"""One run opens each checkpoint once: `add`, then validation, read the source's and the output's files
through the records the run already holds (the plan's `Checkpoint`, the editor's loaded tokenizer)."""

from __future__ import annotations

import collections
import shutil
import sys
from pathlib import Path

import pytest
import transformers

import vocabsurgeon.checkpoint.reader as reader
from vocabsurgeon import add_validate_push
from vocabsurgeon.engine.finish import ValidationOptions

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def _count_reads(monkeypatch) -> collections.Counter:
    """Counts, per directory: Checkpoint.open, each JSON file read, AutoTokenizer loads."""
    seen: collections.Counter = collections.Counter()
    open_checkpoint = reader.Checkpoint.open.__func__
    read_json = reader.read_json
    from_pretrained = transformers.AutoTokenizer.from_pretrained.__func__

    def counted_open(cls, path, *a, **k):
        seen[("open", Path(path).resolve())] += 1
        return open_checkpoint(cls, path, *a, **k)

    def counted_json(path, *a, **k):
        seen[(Path(path).name, Path(path).resolve().parent)] += 1
        return read_json(path, *a, **k)

    def counted_tokenizer(cls, path, *a, **k):
        seen[("AutoTokenizer", Path(str(path)).resolve())] += 1
        return from_pretrained(cls, path, *a, **k)

    monkeypatch.setattr(reader.Checkpoint, "open", classmethod(counted_open))
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", classmethod(counted_tokenizer))
    for name, module in list(sys.modules.items()):  # every module that imported read_json by name
        if name.startswith("vocabsurgeon") and getattr(module, "read_json", None) is read_json:
            monkeypatch.setattr(module, "read_json", counted_json)
    return seen


@pytest.mark.parametrize("fixture", ["gpt2-tiny", "llama-tiny"])
def test_add_and_validation_open_the_source_and_the_output_once(fixture, tmp_path, monkeypatch):
    src = Path(shutil.copytree(FIXTURES / fixture, tmp_path / "src"))
    out = tmp_path / "out"
    seen = _count_reads(monkeypatch)
    done = add_validate_push(src, out, ["Frodo", "Gandalf"], validation=ValidationOptions(max_tokens=64))
    assert done.report.passed
    src, out = src.resolve(), out.resolve()
    # validation runs on the staging directory (the output before it is published), after the job verified it
    [staged] = {d for (what, d) in seen if what == "open" and d not in (src, out)}
    assert staged.name.startswith(".out.")
    for what in ("open", "config.json", "AutoTokenizer"):
        assert seen[(what, src)] == 1, f"{what} of the source: {seen[(what, src)]} times"
        assert seen[(what, out)] == 0, f"{what} of the published output: {seen[(what, out)]} times"
    assert seen[("AutoTokenizer", staged)] == 1
    assert seen[("open", staged)] == seen[("config.json", staged)] == 2  # the job's verification, then validation's
    # each of the two opens reads the config (and the index of a sharded checkpoint) once
    over = {key: n for key, n in seen.items() if n > (2 if key[1] == staged and key[0] != "AutoTokenizer" else 1)}
    assert over == {}, f"read more than once: {over}"
