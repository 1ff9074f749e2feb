"""Shared pytest fixtures: tiny checkpoints, built once per session and copied per test."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import settings

from builders import tiny_gpt2, tiny_llama
from fakehub import hub  # noqa: F401  (the fake Hub of the pull and push tests, as a fixture everywhere)
from published_models import published  # noqa: F401  (tiny models around published tokenizer files)
from published_models import Unreachable

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"


def pytest_configure(config):
    """Under pytest-xdist (one worker per core), one torch/OpenMP thread per worker and per child process it
    starts: with more, the workers' threads spin-wait on each other's cores."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        import torch

        torch.set_num_threads(1)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    try:
        return (yield)
    except Unreachable as e:  # a fixture's published files: not cached, and no network to fetch them
        pytest.skip(str(e))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """A test that reads published files (fixtures/published.py) skips with the reason where they are not cached
    and the registry cannot be reached (an offline GPU machine); any other error of theirs fails it."""
    try:
        return (yield)
    except Unreachable as e:
        pytest.skip(str(e))


# Property tests draw the same examples on every run (CI on a clean clone must not turn red on a draw that
# no commit caused); `pytest --hypothesis-profile=explore` draws fresh ones to look for new failures.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("explore", max_examples=500, print_blob=True)
settings.load_profile("ci")

_ROOT_LEVEL, _ROOT_HANDLERS = logging.getLogger().level, list(logging.getLogger().handlers)


@pytest.fixture(autouse=True)
def _root_logger_as_it_was():
    """A command run in-process (in a test or a module's fixture) sets the root logger up
    (`logging.basicConfig(force=True)`: ERROR under -q, a stderr handler): give each test the root logger
    of the session's start, so that its caplog sees warnings whatever ran before it."""
    root = logging.getLogger()
    root.setLevel(_ROOT_LEVEL)
    root.handlers[:] = [h for h in root.handlers if type(h) is not logging.StreamHandler or h in _ROOT_HANDLERS]
    yield


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



@pytest.fixture(scope="module", params=["gpt2-tiny", "llama-tiny"])
def fit_setup(request):
    """For the distillation tests, per committed fixture (GPT-2: learned positions; Llama: rotary, a BOS
    prefix): (model, windows of corpus_lotr.txt that use four names, the teacher pass over them, the
    names as FitTokens, their sub-word mean rows)."""
    from vocabsurgeon.init.fitted import causal as fitted
    from vocabsurgeon.init.fitted import check_kind
    from vocabsurgeon.runtime import load_tokenizer, loaded_model

    src = FIXTURES / request.param
    tok = load_tokenizer(src)
    forms = (" Frodo", " Gandalf", " Samwise", " Mordor")
    tokens = [fitted.FitToken(f, tuple(tok(f, add_special_tokens=False).input_ids)) for f in forms]
    with loaded_model(src, "cpu", check_kind(src), remedy="") as lm:
        m = fitted._Model(lm, tok)
        text = (FIXTURES / "corpus_lotr.txt").read_text(encoding="utf-8")
        windows = fitted.word_windows(text, tok, m.prefix, tokens, 32, 8)
        teacher = fitted._teach(m, windows, 8, lambda *a: None)
        yield m, windows, teacher, tokens, fitted.subword_mean(m.E, tokens)
