"""The examples in the library's docstrings run and print what they say (every module, found by walking
the package, so a new module's examples are run without being listed here)."""

import doctest
import importlib
import pkgutil

import pytest

import vocabsurgeon

MODULES = sorted(m.name for m in pkgutil.walk_packages(vocabsurgeon.__path__, "vocabsurgeon.")
                 if not m.name.endswith("__main__"))  # __main__ runs the CLI when imported


@pytest.mark.parametrize("name", ["vocabsurgeon", *MODULES])
def test_docstring_examples_run_as_written(name):
    result = doctest.testmod(importlib.import_module(name), raise_on_error=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed (see the output above)"
