"""The domain of the fitting benches: Python's standard-library documentation, and the words `suggest` picks from it.

A user adapting a model to a domain has text of it and asks `vocabsurgeon suggest` for the words
that save the most tokens. Here the text is the docstrings of 40 standard-library modules (real
English technical prose, the same on every machine with the same Python), in paragraphs; every
third paragraph is held out (never seen by the fit), the rest is the fit corpus (`--fit-corpus`),
and the words are `suggest`'s top N on the fit corpus. Python's version is part of the recipe
(docstrings change between releases): the benches record it.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import platform
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

MODULES = ("argparse", "asyncio", "collections", "concurrent.futures", "contextlib", "csv", "dataclasses",
           "datetime", "decimal", "email", "enum", "fractions", "functools", "gettext", "hashlib", "heapq",
           "http.client", "imaplib", "inspect", "ipaddress", "itertools", "json", "logging", "mailbox",
           "multiprocessing", "pathlib", "pickle", "pydoc", "re", "shutil", "socket", "sqlite3", "ssl",
           "statistics", "subprocess", "tarfile", "threading", "typing", "unittest", "urllib.request",
           "zipfile")


def paragraphs() -> list[str]:
    """The docstrings' paragraphs of 200 characters or more, in module and member order, deduplicated."""
    docs = []
    for name in MODULES:
        mod = importlib.import_module(name)
        for _, obj in [("", mod)] + inspect.getmembers(mod):
            docs.append(inspect.getdoc(obj) if obj is mod or getattr(obj, "__module__", "") == name else None)
    return _long_paragraphs(docs)


def _long_paragraphs(docs) -> list[str]:
    """The paragraphs of 200 characters or more of `docs` (None skipped), whitespace joined, without doctests,
    deduplicated in order."""
    seen, out = set(), []
    for doc in docs:
        for p in (doc or "").split("\n\n"):
            p = " ".join(p.split())
            if len(p) >= 200 and p not in seen and ">>>" not in p:
                seen.add(p)
                out.append(p)
    return out


PACKAGES = ("numpy", "click", "jinja2", "huggingface_hub")  # installed with vocabsurgeon or its bench extra


def library_paragraphs() -> list[str]:
    """The larger domain (for 1,000 words): the docstrings' paragraphs of 200 characters or more of every
    file of the standard library and of PACKAGES (read with ast, nothing imported; tests and idlelib left
    out), deduplicated."""
    lib, site = Path(sysconfig.get_paths()["stdlib"]), Path(sysconfig.get_paths()["purelib"])
    roots = [lib] + [site / pkg for pkg in PACKAGES]
    docs = []
    for root, path in sorted((r, p) for r in roots for p in r.rglob("*.py")):
        if {"test", "tests", "idlelib", "site-packages"} & set(path.relative_to(root).parts):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        nodes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                       ast.ClassDef))]
        docs += [ast.get_docstring(n) for n in nodes]
    return _long_paragraphs(docs)


def build(work: Path, ckpt: Path, words: int, large: bool = False) -> tuple[Path, Path, Path]:
    """(fit corpus, held-out text, tokens file) under `work`: the corpus (`large`: `library_paragraphs`)
    split 2:1 by paragraph, and `suggest`'s top `words` on the fit part for `ckpt`'s tokenizer."""
    work.mkdir(parents=True, exist_ok=True)
    paras = library_paragraphs() if large else paragraphs()
    name = "domain-large" if large else "domain"
    fit, held = work / f"{name}-fit.txt", work / f"{name}-held.txt"
    fit.write_text("\n\n".join(p for i, p in enumerate(paras) if i % 3 != 2) + "\n", encoding="utf-8")
    held.write_text("\n\n".join(p for i, p in enumerate(paras) if i % 3 == 2) + "\n", encoding="utf-8")
    tokens = work / f"{name}-words-{ckpt.name}-{words}.txt"
    subprocess.run([sys.executable, "-m", "vocabsurgeon", "suggest", "-q", str(ckpt), "--corpus", str(fit),
                    "--top", str(words), "--min-count", "2", "-o", str(tokens)], check=True)
    return fit, held, tokens


def recipe(large: bool = False) -> str:
    if large:
        return (f"docstrings of every standard-library file and of {', '.join(PACKAGES)}, Python "
                f"{platform.python_version()}")
    return f"docstrings of {len(MODULES)} stdlib modules, Python {platform.python_version()}"
