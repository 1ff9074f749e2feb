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
    for what in ("open", "config.json", "AutoTokenizer"):
        assert seen[(what, src)] == 1, f"{what} of the source: {seen[(what, src)]} times"
        assert seen[(what, out)] == 1, f"{what} of the output: {seen[(what, out)]} times"
    over = {key: n for key, n in seen.items() if n > 1}
    assert over == {}, f"read more than once: {over}"
    # the staging directory (the output before its rename) is opened once more, to verify what was written
    staged = [d for (what, d), n in seen.items() if what == "open" and d not in (src, out)]
    assert len(staged) == 1 and seen[("open", staged[0])] == 1 and staged[0].name.startswith(".out.")
