"""The output directory: checked before any work, staged beside the target, published by one swap.

Nothing appears under the target name before the engine proved it: a run writes into a staging directory,
which `Stage.publish` renames into place (or swaps with the previous output, under --force) only if the
target is still what it was when the run started. Of two racing runs one wins whole; the other exits
non-zero and changes nothing. A failure, an interrupt or a kill leaves the target as it was.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import logging
import os
import re
import shutil
import time
from pathlib import Path

from ..errors import InputError, OutputExistsError
from .filenames import CARD_NAME, REPORT_NAME

logger = logging.getLogger(__name__)

STAGING_TAG = ".vocabsurgeon-staging-"
REJECTED_SUFFIX = ".rejected"  # where an output that failed validation is kept, beside the target
FILES_KEY = "files"  # the report's list of the files vocabsurgeon wrote: what --force may replace


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale_staging(out: Path) -> list[Path]:
    """Remove staging directories beside `out` left by runs that were killed."""
    removed = []
    for p in out.parent.glob(f".{out.name}{STAGING_TAG}*"):
        try:
            pid = int(p.name.rsplit("-", 2)[-2])
        except (ValueError, IndexError):
            continue
        if not _pid_alive(pid):
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
            logger.info("removed stale staging directory %s", p)
    return removed


def check_output_path(src: Path, out: Path, force: bool) -> None:
    """Refuse, before any work, an output that is the input, inside it, contains it, is or contains the
    current directory, or exists non-empty (without --force; with --force, when it is not an earlier
    vocabsurgeon output or holds files vocabsurgeon did not write)."""
    s, o, here = Path(src).resolve(), out.resolve(), Path.cwd().resolve()
    if o == s or s in o.parents:
        raise InputError(f"{out}: the output may not be the input checkpoint or inside it; choose another directory")
    if o in s.parents:
        raise InputError(f"{out}: the output directory contains the input checkpoint; choose another directory")
    if o == here or o in here.parents:
        # The output appears by a rename onto it; the directory a process works in cannot be replaced that way.
        raise InputError(f"{out}: the output is the current directory or contains it; choose a new directory, "
                         "e.g. out/model")
    if out.exists() and not out.is_dir():
        raise OutputExistsError(f"{out}: exists and is not a directory; choose another output path")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise OutputExistsError(f"{out}: exists and is not empty; pass --force to replace it, or choose another directory")
        if not is_earlier_output(out):
            raise OutputExistsError(
                f"{out}: is not empty and is not an earlier vocabsurgeon output (no {REPORT_NAME} and no model card "
                f"tagged vocabsurgeon), so --force will not delete it; remove it yourself or choose another directory")
        foreign = foreign_files(out)
        if foreign:
            shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
            raise OutputExistsError(
                f"{out}: holds {shown}, which vocabsurgeon did not write, so --force will not replace it; move "
                "them out of it or choose another directory")
    if out.parent.exists() and not out.parent.is_dir():
        raise InputError(f"{out.parent}: is not a directory; choose another output path")


# The tag line of a card's YAML metadata: `- vocabsurgeon` in a tags list, or `tags: vocabsurgeon`.
_TAGGED = re.compile(r"^(?:\s*-\s*|tags:\s*)['\"]?vocabsurgeon['\"]?\s*$", re.M)


def is_earlier_output(path: Path) -> bool:
    """Whether directory `path` looks like what vocabsurgeon writes: its report, or a model card whose
    metadata carries the vocabsurgeon tag."""
    if (path / REPORT_NAME).is_file():
        return True
    try:
        card = (path / CARD_NAME).read_text(encoding="utf-8", errors="replace")[:65536]
    except OSError:
        return False
    parts = card.split("---", 2)
    return card.startswith("---") and len(parts) == 3 and bool(_TAGGED.search(parts[1]))


def written_files(path: Path) -> set[str] | None:
    """The files (relative POSIX paths) that vocabsurgeon wrote into output `path`, from its report; None
    when the report does not list them (an output of an older version, or no report)."""
    try:
        files = json.loads((path / REPORT_NAME).read_text(encoding="utf-8")).get(FILES_KEY)
    except (OSError, ValueError, AttributeError):
        return None
    return set(files) if isinstance(files, list) else None


def listed_files(path: Path) -> list[str]:
    """Every file under directory `path`, as sorted relative POSIX paths."""
    return sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if not p.is_dir())


def foreign_files(path: Path) -> list[str]:
    """The files under earlier output `path` that vocabsurgeon did not write (all of them when its report
    lists none): what --force must not delete."""
    ours = written_files(path)
    return [f for f in listed_files(path) if ours is None or f not in ours]


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (renameat2 RENAME_EXCHANGE); False where the kernel or filesystem lacks it.
    ctypes, not os: Python has no binding, and a swap is what keeps the target from ever being absent."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


@contextlib.contextmanager
def _locked(directory: Path):
    """An exclusive flock on `directory` (the target's parent): publications beside each other take turns."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class Stage:
    """A staging directory beside `out`, published only when asked (`publish`) and removed otherwise.

        with Stage.open(src, out, force) as stage:
            ...write and prove stage.path...
            stage.publish()
    """

    def __init__(self, out: Path, force: bool):
        self.out, self.force = Path(out), force
        self.out.parent.mkdir(parents=True, exist_ok=True)
        sweep_stale_staging(self.out)
        self.seen = _identity(self.out)  # what the target was when the run started
        self.path = self.out.parent / f".{self.out.name}{STAGING_TAG}{os.getpid()}-{time.monotonic_ns() % 10**9}"
        self.path.mkdir()
        self.done: str | None = None  # "published" or "rejected"

    @classmethod
    def open(cls, src: Path, out: str | os.PathLike, force: bool) -> Stage:
        """Check the output path (`check_output_path`), then create the staging directory beside it."""
        check_output_path(Path(src), Path(out), force)
        return cls(Path(out), force)

    def __enter__(self) -> Stage:
        return self

    def __exit__(self, kind, error, tb) -> None:
        if self.done is None:
            self.discard()

    def discard(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    def _lost(self, what: str = "appeared") -> OutputExistsError:
        return OutputExistsError(f"{self.out}: {what} while this run was writing (another run?); nothing was changed")

    def publish(self) -> None:
        """Put the staged output under the target name: a rename, or a swap with the earlier output (--force).

        Raises:
            OutputExistsError: the target changed since the run started (another run published there).
        """
        with _locked(self.out.parent):
            if _identity(self.out) != self.seen:
                raise self._lost("appeared" if self.seen is None else "was replaced")
            replacing = self.seen is not None and any(self.out.iterdir())
            if replacing and not self.force:
                raise self._lost()
            if not replacing:
                try:
                    os.rename(self.path, self.out)  # onto an absent or empty directory
                except OSError as e:
                    if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
                        raise self._lost() from None
                    raise
                old = None
            elif _exchange(self.path, self.out):
                old = self.path  # now holds the earlier output
            else:
                old = self.out.parent / f".{self.out.name}{STAGING_TAG}{os.getpid()}-old"
                os.rename(self.out, old)
                try:
                    os.rename(self.path, self.out)
                except OSError:
                    os.rename(old, self.out)
                    raise
            self.done = "published"
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        fsync_dir(self.out.parent)

    def reject(self) -> Path:
        """Keep the staged output beside the target under a name that says it failed (`OUT.rejected`,
        replacing an earlier rejected output); the target is left as it was. Returns where it is."""
        kept = self.out.parent / f"{self.out.name}{REJECTED_SUFFIX}"
        with _locked(self.out.parent):
            if kept.exists() and not (kept.is_dir() and is_earlier_output(kept) and not foreign_files(kept)):
                kept = self.out.parent / f"{self.out.name}{REJECTED_SUFFIX}-{os.getpid()}"
            if kept.exists() and _exchange(self.path, kept):
                shutil.rmtree(self.path, ignore_errors=True)
            else:
                if kept.exists():
                    shutil.rmtree(kept)
                os.rename(self.path, kept)
            self.done = "rejected"
        fsync_dir(self.out.parent)
        return kept
