"""The oldest versions of the libraries vocabsurgeon is tested with, and the one check that refuses older ones.

Below these versions vocabsurgeon does not fail loudly on its own: it writes something different (transformers
4.46-4.55 lack `from_pretrained(dtype=...)`, 4.57 loads SentencePiece and byte-level files otherwise, so words are
skipped or the BOS is lost while validation passes). So a command, and every library call that reads a
checkpoint (`resolve_checkpoint`), first checks the installed versions and stops with one line naming what was
found and what is needed. pyproject.toml declares the same floors, and CI runs the main job and a subset of the
tests with exactly these versions (constraints-floor.txt); tests/test_compat.py keeps the three equal.
"""

from __future__ import annotations

import functools
from importlib.metadata import PackageNotFoundError, version

from .errors import UnsupportedVersion

# distribution name -> the oldest version CI runs (constraints-floor.txt) and pyproject.toml requires.
# transformers 5.17 and tokenizers 0.23 are what current GPU images ship.
MINIMUM = {
    "transformers": "5.17.0",
    "tokenizers": "0.23.1",
    "huggingface-hub": "1.5.0",
    "safetensors": "0.8.0",
}


def _release(v: str) -> tuple[int, ...]:
    """The release numbers of version string `v` ("5.17.0.dev0" -> (5, 17, 0)): a pre-release of a floor's
    release counts as that release (a source build of the next version is not refused)."""
    from packaging.version import Version

    return Version(v).release


def too_old(installed: dict[str, str | None]) -> list[str]:
    """The packages of `installed` (name -> version, None when absent) below their MINIMUM, each as
    "NAME VERSION found, >= FLOOR needed", in MINIMUM's order.

    Example:
        >>> too_old({"transformers": "4.57.1", "tokenizers": "0.23.2"})
        ['transformers 4.57.1 found, >= 5.17.0 needed']
    """
    out = []
    for name, floor in MINIMUM.items():
        if name not in installed:
            continue
        found = installed[name]
        if found is None:
            out.append(f"{name} not installed, >= {floor} needed")
        elif _release(found) < _release(floor):
            out.append(f"{name} {found} found, >= {floor} needed")
    return out


def installed_versions() -> dict[str, str | None]:
    """The installed version of each package of MINIMUM (None where it is not installed)."""
    found = {}
    for name in MINIMUM:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


@functools.cache
def check_versions() -> None:
    """Refuse to run with a library older than vocabsurgeon is tested with (checked once per process).

    Raises:
        UnsupportedVersion: one line naming each package found below its floor and the upgrade to run.
    """
    old = too_old(installed_versions())
    if old:
        upgrade = " ".join(f"'{n}>={MINIMUM[n]}'" for n in MINIMUM if any(o.startswith(f"{n} ") for o in old))
        raise UnsupportedVersion(
            f"{'; '.join(old)} (vocabsurgeon is tested from these versions on; older ones tokenize and load checkpoints "
            f"otherwise): pip install -U {upgrade}"
        )


def older_than(name: str, release: str) -> str | None:
    """The installed version of package `name` when it is older than `release` (a pre-release of `release`
    counts as it), else None.

    A family whose output an older library reads otherwise names its own floor in the architecture table;
    this is how such a check reads the installed version.
    """
    found = version(name)
    return found if _release(found) < _release(release) else None

