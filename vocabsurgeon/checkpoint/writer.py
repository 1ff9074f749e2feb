"""Writing the new checkpoint: staging directory, byte-copied shards with grown tensors, index, rename.

Shards are written by hand, not with `save_file`, which would decode every tensor of a shard in memory: a
rewritten shard is a new header and byte ranges copied in the kernel; a grown tensor is its old bytes (the
old rows, a contiguous prefix) followed by the new rows. Every file is flushed before the staging directory
is renamed into place; every output file gets the umask's mode (`--link` keeps the input's). Details:
docs/internals.md.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import queue
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sized

import numpy as np

from .reader import DTYPE_SIZES, ShardHeader
from ..errors import InputError, VocabSurgeonError
from ..progress import Advance

logger = logging.getLogger(__name__)

_FICLONE = 0x40049409  # ioctl number of a reflink (btrfs, xfs, ...)
_COPY_CHUNK = 256 << 20  # progress (and cancellation) granularity


def _noop(_: int) -> None:
    pass


@dataclass
class GrownTensor:
    """A tensor that changes: the new shape, the bytes of appended rows, and rows overwritten in place.

    `tail` is the appended rows' bytes: `bytes`, or a sized iterable of byte blocks
    (`init.EncodedRows`: `len()` is the byte count, iterating encodes block by block), so that many
    new rows are never all in memory. `patches` maps an existing row index to its new bytes (only
    with --reuse-reserved); every other old row is copied unchanged.
    """

    shape: tuple[int, ...]
    tail: bytes | Sized  # a Sized Iterable[bytes] when not bytes
    patches: dict[int, bytes] = field(default_factory=dict)


def encode_rows(rows: np.ndarray, dtype: str) -> bytes:
    """float64 rows -> the bytes of a safetensors float dtype (round to nearest even, as torch does)."""
    if dtype == "F64":
        return rows.astype("<f8").tobytes()
    if dtype == "F32":
        return rows.astype("<f4").tobytes()
    if dtype == "F16":
        return rows.astype("<f2").tobytes()
    if dtype == "BF16":
        u = rows.astype(np.float32).view(np.uint32)
        nan = np.isnan(rows)
        bf = ((u + (0x7FFF + ((u >> 16) & 1))) >> 16).astype("<u2")
        bf[nan] = 0x7FC0
        return bf.tobytes()
    raise InputError(f"cannot write new rows as {dtype}; vocabulary tensors must be F16, BF16, F32 or F64")


def _copy_range(src_fd: int, dst_fd: int, offset: int, count: int, progress: Advance,
                dst_offset: int | None = None) -> None:
    """Copy `count` bytes at `offset` of src to dst (at `dst_offset`, or its current position),
    in the kernel when possible."""
    done = 0
    while done < count:
        n = min(_COPY_CHUNK, count - done)
        at = None if dst_offset is None else dst_offset + done
        try:
            copied = os.copy_file_range(src_fd, dst_fd, n, offset + done, at)
        except OSError as e:
            if e.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EPERM):
                raise
            copied = _copy_range_buffered(src_fd, dst_fd, offset + done, n, at)
        if copied == 0:
            raise OSError(errno.EIO, "unexpected end of input file while copying")
        done += copied
        progress(copied)


def _copy_range_buffered(src_fd: int, dst_fd: int, offset: int, count: int, dst_offset: int | None) -> int:
    buf = os.pread(src_fd, min(count, 64 << 20), offset)
    if dst_offset is None:
        _write_all(dst_fd, buf)
    else:
        _pwrite_all(dst_fd, buf, dst_offset)
    return len(buf)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def copy_file(src: Path, dst: Path, *, link: bool = False, progress: Advance = _noop) -> str:
    """Copy a whole file: hard link (opt-in), else reflink, else an in-kernel copy. Returns the method."""
    if link:
        try:
            os.link(src, dst)
            progress(src.stat().st_size)
            return "link"
        except OSError as e:
            logger.warning("cannot hard-link %s (%s); copying instead", src.name, e.strerror)
    size = src.stat().st_size
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        try:
            fcntl.ioctl(fo.fileno(), _FICLONE, fi.fileno())
            progress(size)
            method = "reflink"
        except OSError:
            _copy_range(fi.fileno(), fo.fileno(), 0, size, progress)
            method = "copy"
    shutil.copystat(src, dst, follow_symlinks=True)  # the times (and xattrs) of the input
    os.chmod(dst, new_file_mode())  # but the mode of every other output file (the module's rule)
    return method


def new_file_mode() -> int:
    """The mode a new file gets under the process's umask (0o644 under umask 022).

    Read from /proc/self/status where the kernel shows it: reading it with os.umask means setting
    it for a moment, and a file created by another thread in that moment (the shard copy runs in
    one) would get the wrong mode.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            umask = next(int(line.split()[1], 8) for line in f if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError):
        umask = os.umask(0o022)
        os.umask(umask)
    return 0o666 & ~umask


def encode_header(tensors: list[tuple[str, str, tuple[int, ...], int]], metadata: dict | None,
                  size: int | None = None) -> bytes:
    """A safetensors header (length prefix + JSON padded with spaces) for (name, dtype, shape,
    nbytes) laid out back to back in the given order. The JSON is padded to 8 bytes, or to exactly
    `size` bytes in all (a reservation: the format allows trailing spaces in the header)."""
    obj: dict = {}
    if metadata is not None:
        obj["__metadata__"] = metadata
    pos = 0
    for name, dtype, shape, nbytes in tensors:
        obj[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [pos, pos + nbytes]}
        pos += nbytes
    raw = json.dumps(obj, separators=(",", ":")).encode("utf-8")
    if size is None:
        raw += b" " * (-len(raw) % 8)
    elif len(raw) + 8 > size:
        raise VocabSurgeonError(f"internal: a {len(raw) + 8}-byte header does not fit the {size} bytes reserved")
    else:
        raw += b" " * (size - 8 - len(raw))
    return len(raw).to_bytes(8, "little") + raw


@dataclass
class ShardLayout:
    """Where every tensor of a rewritten shard goes: the new header and each tensor's new offset."""

    header: ShardHeader  # the input shard's header
    head: bytes  # the encoded new header
    starts: dict[str, int]  # absolute offset of each tensor's first byte in the new file
    nbytes: dict[str, int]  # each tensor's new size in bytes
    size: int  # the new file's size
    last: tuple[str, ...] = ()  # the tensors laid out after all the others (the vocabulary tensors)


_PAGE = 4096


def _page_aligned_size(header: ShardHeader, entries: list[tuple[str, str, tuple[int, ...], int]], least: int) -> int:
    """The header size (at least `least`, a multiple of 8) that puts the most old bytes at the same offset within
    a page as in the input shard. The kernel copies such ranges page by page; a range shifted by a few bytes
    copied 1.5x slower (1.6 GB: 0.70-0.78 s aligned, 1.16-1.19 s shifted by 8 bytes, on this project's ext4 disk),
    and a new header's length, which differs from the old one's, shifts every tensor. The padding is spaces,
    which the format allows, at most 4 KiB."""
    by_name = {t.name: t for t in header.tensors}
    weight: dict[int, int] = {}
    rel = 0
    for name, _, _, nbytes in entries:
        old = by_name[name]
        residue = (old.start - rel) % _PAGE  # a header of this size mod the page aligns this tensor's old bytes
        if residue % 8 == 0:
            weight[residue] = weight.get(residue, 0) + old.nbytes
        rel += nbytes
    if not weight:
        return least
    best = max(weight, key=lambda r: (weight[r], -r))
    return least + (best - least) % _PAGE


# More rows than any real matrix: a header laid out with it is at least as long as the real one.
_ANY_ROWS = 10**15


def layout_shard(header: ShardHeader, new_shapes: dict[str, tuple[int, ...]], *, last: tuple[str, ...] = (),
                 head_size: int | None = None) -> ShardLayout:
    """Lay out a rewritten shard: its tensors in their old order, except those in `last`, which
    follow all the others (in their old order); tensors in `new_shapes` take that shape.
    __metadata__ is kept. `head_size` pads the header to a size reserved earlier (`reserve_layout`).
    """
    order = sorted(header.tensors, key=lambda t: (t.name in last, t.start))
    entries = []
    for t in order:
        shape = new_shapes.get(t.name, t.shape)
        nbytes = DTYPE_SIZES[t.dtype]
        for d in shape:
            nbytes *= d
        entries.append((t.name, t.dtype, tuple(shape), nbytes))
    head = encode_header(entries, header.metadata, head_size if head_size is not None else _page_aligned_size(
        header, entries, len(encode_header(entries, header.metadata))))
    starts, sizes, pos = {}, {}, len(head)
    for name, _, _, nbytes in entries:
        starts[name], sizes[name] = pos, nbytes
        pos += nbytes
    return ShardLayout(header, head, starts, sizes, pos, tuple(last))


def reserve_layout(header: ShardHeader, growing: tuple[str, ...]) -> tuple[ShardLayout, tuple[str, ...]]:
    """The layout of a shard whose tensors `growing` will gain rows, before it is known how many.

    They are laid out last, and the header gets room for any row count, so the place of every
    other tensor, and of the first growing one, is final: their old bytes can be copied at once
    (`copy_old_bytes(..., names=...)`) while the new tokens are still being planned. Returns the
    layout and the names whose place is final; the real one is `final_layout(reserved, shapes)`.
    """
    by_name = {t.name: t for t in header.tensors}
    growing = tuple(sorted(growing, key=lambda n: by_name[n].start))
    layout = layout_shard(header, {n: (_ANY_ROWS, *by_name[n].shape[1:]) for n in growing}, last=growing)
    placed = tuple(t.name for t in header.tensors if t.name not in growing) + growing[:1]
    return layout, placed


def final_layout(reserved: ShardLayout, new_shapes: dict[str, tuple[int, ...]]) -> ShardLayout:
    """The layout of `reserved` (from `reserve_layout`) once the shapes are known: same places, same header size."""
    layout = layout_shard(reserved.header, new_shapes, last=reserved.last, head_size=len(reserved.head))
    first = reserved.last[:1]
    if any(layout.starts[t.name] != reserved.starts[t.name] for t in reserved.header.tensors
           if t.name not in reserved.last or t.name in first):
        raise VocabSurgeonError("internal: the final layout moved tensors already copied; nothing was published")
    return layout


def copy_old_bytes(src: Path, layout: ShardLayout, dst: Path, progress: Advance = _noop,
                   names: tuple[str, ...] | None = None) -> None:
    """Copy the old bytes of the tensors `names` (default: all) of `src` to their place in `dst`,
    creating it if needed. The header and the new rows are written by `write_rows`, possibly while
    this runs in another thread: nothing here depends on them.
    """
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT, 0o666)  # the umask decides, as for every output file
    try:
        if os.fstat(fd).st_size == 0:
            _pwrite_all(fd, layout.head, 0)  # a placeholder when the shapes are not known yet
        # In the order of the new file: appending runs faster than filling holes left behind
        # (on ext4 the page cache then holds the file in large folios).
        tensors = sorted((t for t in layout.header.tensors if names is None or t.name in names),
                         key=lambda t: layout.starts[t.name])
        with open(src, "rb") as fi:
            for t in tensors:
                _copy_range(fi.fileno(), fd, t.start, t.nbytes, progress, dst_offset=layout.starts[t.name])
    finally:
        os.close(fd)


def write_rows(dst: Path, layout: ShardLayout, grown: dict[str, GrownTensor], progress: Advance = _noop) -> None:
    """Complete the shard `dst`: its header, and the new rows (appended, and overwritten in place) of
    the grown tensors; the old bytes are already there (`copy_old_bytes`). Not flushed to disk: see `Syncer`."""
    by_name = {t.name: t for t in layout.header.tensors}
    fd = os.open(dst, os.O_WRONLY)
    try:
        _pwrite_all(fd, layout.head, 0)
        for name, g in grown.items():
            t = by_name[name]
            start = layout.starts[name]
            for row, data in sorted(g.patches.items()):
                if len(data) != t.row_bytes or not 0 <= row < t.shape[0]:
                    raise VocabSurgeonError(f"internal: bad patch of row {row} of '{name}'")
                _pwrite_all(fd, data, start + row * t.row_bytes)
                progress(len(data))
            if t.nbytes + len(g.tail) != layout.nbytes[name]:
                raise VocabSurgeonError(f"internal: grown tensor '{name}' has {len(g.tail)} tail bytes, not what its shape needs")
            pos = start + t.nbytes
            for block in ([g.tail] if isinstance(g.tail, (bytes, bytearray)) else g.tail):
                _pwrite_all(fd, block, pos)
                pos += len(block)
                progress(len(block))
            if pos != start + layout.nbytes[name]:
                raise VocabSurgeonError(f"internal: grown tensor '{name}' got {pos - start - t.nbytes} tail bytes, "
                                        f"not the {len(g.tail)} announced")
        os.ftruncate(fd, layout.size)
    finally:
        os.close(fd)


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


class Syncer:
    """Flushes finished files to disk in a background thread, one after another, so that flushing
    one overlaps writing the next. `wait` returns once every submitted file is on disk and raises the
    first error (fsync reports late write errors such as ENOSPC). A daemon thread: an interrupt
    never waits for a flush."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled  # False (--no-fsync): submit() does nothing
        self._queue: queue.Queue = queue.Queue()
        self._done = threading.Event()
        self._error: BaseException | None = None
        self.submitted: set[Path] = set()
        self._thread = threading.Thread(target=self._run, name="vocabsurgeon-sync", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (path := self._queue.get()) is not None:
            if self._error is None:
                try:
                    _fsync_path(path)
                except BaseException as e:  # handed to wait()
                    self._error = e
        self._done.set()

    def submit(self, path: Path) -> None:
        self.submitted.add(path)
        if self.enabled:
            self._queue.put(path)

    def wait(self, poll: Callable[[], None] = lambda: None) -> None:
        """Wait for every submitted flush; `poll` runs every 0.1 s (e.g. to notice an interrupt)."""
        self._queue.put(None)
        while not self._done.wait(0.1):
            poll()
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        self._queue.put(None)


def _fsync_path(path: Path) -> None:
    """fsync a file, or a directory (its entries)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


BIG_CONTAINER = 1000  # items from which json_text writes a list or object on one line


def json_text(obj, indent: int = 2) -> str:
    """JSON laid out like json.dumps(obj, indent=2, ensure_ascii=False), except that a list or
    object with more than BIG_CONTAINER items (a tokenizer's vocab and merges) is one line.

    With `indent`, json.dumps runs the pure-Python encoder (the C one only does compact output),
    several times slower on a 128k-entry tokenizer.json than the C encoder that the big containers
    go through here. Small files (config, index) come out exactly as json.dumps(indent=2) writes them.
    """
    parts: list[str] = []
    _json_parts(obj, 0, indent, parts)
    return "".join(parts)


_c_dumps = json.JSONEncoder(ensure_ascii=False, check_circular=False).encode  # C-accelerated when compact


def _json_parts(obj, level: int, indent: int, out: list[str]) -> None:
    if isinstance(obj, dict) and obj and len(obj) <= BIG_CONTAINER and all(isinstance(k, str) for k in obj):
        pad = "\n" + " " * (indent * (level + 1))
        out.append("{")
        for i, (k, v) in enumerate(obj.items()):
            out.append(("," if i else "") + pad + _c_dumps(k) + ": ")
            _json_parts(v, level + 1, indent, out)
        out.append("\n" + " " * (indent * level) + "}")
    elif isinstance(obj, (list, tuple)) and obj and len(obj) <= BIG_CONTAINER:
        pad = "\n" + " " * (indent * (level + 1))
        out.append("[")
        for i, v in enumerate(obj):
            out.append(("," if i else "") + pad)
            _json_parts(v, level + 1, indent, out)
        out.append("\n" + " " * (indent * level) + "]")
    else:  # a scalar, an empty or a big container: the C encoder, on one line
        out.append(_c_dumps(obj))


def write_json(path: Path, obj: dict) -> None:
    """Write JSON the way transformers does (indent 2, UTF-8, trailing newline); see `json_text`."""
    path.write_text(json_text(obj) + "\n", encoding="utf-8")


def write_text_atomic(path: Path, text: str, fsync: bool = True) -> None:
    """Write `text` (UTF-8, line endings as given) to `path` whole or not at all: a temporary file beside it,
    flushed, then renamed over it; a full disk leaves the earlier file (or none), never a truncated one."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        if fsync:
            _fsync_path(tmp)
        os.replace(tmp, path)
        if fsync:  # the new entry (and, named, the file: what a flush-before-publish check looks for)
            _fsync_path(path)
            _fsync_path(path.parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
