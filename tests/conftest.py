"""Shared pytest fixtures: tiny checkpoints, built once per session and copied per test."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from builders import tiny_gpt2, tiny_llama

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"


@pytest.fixture(scope="session")
def _built(tmp_path_factory):
    root = tmp_path_factory.mktemp("built")
    return {"gpt2": tiny_gpt2(root / "gpt2"), "llama": tiny_llama(root / "llama")}


@pytest.fixture
def gpt2_ckpt(_built, tmp_path) -> Path:
    """A fresh copy of a tiny tied GPT-2 (single model.safetensors, byte-level BPE)."""
    return Path(shutil.copytree(_built["gpt2"], tmp_path / "gpt2"))


@pytest.fixture
def llama_ckpt(_built, tmp_path) -> Path:
    """A fresh copy of a tiny untied bf16 Llama in 3+ shards."""
    return Path(shutil.copytree(_built["llama"], tmp_path / "llama"))


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a module of fits on the 64-wide fixtures: threads only add OpenMP spin-waits,
    which cost validation 40x on a busy machine (measured: 29 s on 2 threads, 0.7 s on 1). Modules use it
    with `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

