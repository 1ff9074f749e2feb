"""What every command writes alike (issue 46): the same config fields, whichever front-end planned it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from vocabsurgeon import add_tokens, trim_vocabulary
from vocabsurgeon.engine.target import AddOptions, open_target
from vocabsurgeon.extend.pipeline import run_extend
from vocabsurgeon.extend.plan import ExtendOptions

CORPUS = Path(__file__).resolve().parents[1] / "extend" / "new_language.txt"


@pytest.mark.parametrize("command", ["add", "extend", "trim"])
def test_every_command_writes_architectures_into_a_config_without_them(gpt2_ckpt, tmp_path, command):
    src = Path(shutil.copytree(gpt2_ckpt, tmp_path / "bare"))
    config = json.loads((src / "config.json").read_text())
    config.pop("architectures", None)
    (src / "config.json").write_text(json.dumps(config))
    out = tmp_path / "out"
    if command == "add":
        add_tokens(src, out, ["Frodo"])
    elif command == "extend":
        run_extend(open_target(src, AddOptions(init="subword-mean")), out, ExtendOptions(str(CORPUS), 20, None))
    else:
        trim_vocabulary(src, out, CORPUS, vocab_size=400)
    assert json.loads((out / "config.json").read_text())["architectures"] == ["GPT2LMHeadModel"]
