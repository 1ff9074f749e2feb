"""Reading a Hugging Face checkpoint directory: config, strict safetensors headers, row-chunk reads.

Nothing here loads a model. Headers are parsed by hand (8-byte length + JSON), not by `safe_open`, for the
exact byte offset of every tensor (untouched tensors are copied as bytes) and for checks the library does
not make (a duplicate tensor name). Rows are read a chunk at a time (`stream_rows` is the hot path of `add`).
"""

from __future__ import annotations

import json
import logging
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from ..errors import InputError
from .filenames import CONFIG_NAME, INDEX_NAME, SINGLE_NAME

logger = logging.getLogger(__name__)

# Bytes per element of every dtype the safetensors format defines.
DTYPE_SIZES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}
FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")
# How each float dtype is stored, as a NumPy dtype of the same width (bf16 as its raw 16 bits).
_STORAGE = {"F16": np.float16, "BF16": np.uint16, "F32": np.float32, "F64": np.float64}

MAX_HEADER_BYTES = 100 * 1024 * 1024  # the format's own limit
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
LFS_MAGIC = b"version https://git-lfs"
STREAM_CHUNK_BYTES = 2 << 20  # rows read per chunk by `stream_rows`: fits the CPU cache
COMPARE_BYTES = 1 << 20  # read size of `same_bytes`
PARALLEL_COMPARE_BYTES = 64 << 20  # `same_bytes` splits longer ranges among threads


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lives: its shard, dtype, shape and absolute byte range in the file."""

    name: str
    file: str  # shard file name, relative to the checkpoint directory
    dtype: str  # safetensors dtype name, e.g. "BF16"
    shape: tuple[int, ...]
    start: int  # absolute offset of the first byte in the file
    end: int  # absolute offset one past the last byte

    @property
    def nbytes(self) -> int:
        return self.end - self.start

    @property
    def row_bytes(self) -> int:
        """Bytes of one row (one token) of a vocabulary-sized tensor."""
        n = DTYPE_SIZES[self.dtype]
        for d in self.shape[1:]:
            n *= d
        return n


@dataclass
class ShardHeader:
    """The parsed header of one safetensors file."""

    file: str
    header_len: int  # N, the length of the JSON header in bytes
    tensors: list[TensorInfo]  # in header order
    metadata: dict[str, str] | None
    size: int  # file size in bytes


def _reject_duplicates(pairs: list[tuple[str, object]]) -> dict:
    seen: dict = {}
    for k, v in pairs:
        if k in seen:
            raise _Duplicate(k)
        seen[k] = v
    return seen


class _Duplicate(Exception):
    pass


def read_header(path: Path, display: str | None = None) -> ShardHeader:
    """Parse and strictly check the header of a safetensors file.

    Checks: the file is not a Git LFS pointer; the header length fits in the file; the header is
    UTF-8 JSON with no duplicate names; every dtype is known; every shape matches its byte range;
    the data ranges are in order, start at 0, leave no gap, do not overlap, and end at the end of
    the file.

    Raises:
        InputError: naming the file (and tensor) and what to do next.
    """
    name = display or path.name
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if head.startswith(LFS_MAGIC[:8]):
                rest = f.read(200)
                if (head + rest).startswith(LFS_MAGIC):
                    raise InputError(
                        f"{name}: is a Git LFS pointer, not the weights; run `git lfs pull` in the "
                        "checkpoint repository (or download it with huggingface_hub) and retry"
                    )
            if len(head) < 8:
                raise InputError(f"{name}: truncated safetensors file ({size} bytes); re-download it")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER_BYTES or 8 + n > size:
                raise InputError(
                    f"{name}: safetensors header length {n} runs past the end of the file "
                    f"({size} bytes): the file is truncated or not safetensors; re-download it"
                )
            raw = f.read(n)
    except OSError as e:
        raise InputError(f"{name}: cannot read ({e.strerror}); check the path and permissions") from e
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{name}: safetensors header is not UTF-8; the file is corrupt, re-download it") from None
    try:
        obj = json.loads(text, object_pairs_hook=_reject_duplicates)
    except _Duplicate as d:
        raise InputError(
            f"{name}: tensor '{d.args[0]}' appears twice in the safetensors header; the file is "
            "corrupt or hostile, re-export it"
        ) from None
    except json.JSONDecodeError as e:
        raise InputError(f"{name}: safetensors header is not valid JSON ({e.msg}); re-download it") from None
    if not isinstance(obj, dict):
        raise InputError(f"{name}: safetensors header is not a JSON object; re-download it")

    metadata = obj.pop("__metadata__", None)
    if metadata is not None and not (
        isinstance(metadata, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    ):
        raise InputError(f"{name}: __metadata__ must map strings to strings; re-export the file")
    data_start = 8 + n
    tensors: list[TensorInfo] = []
    for tname, entry in obj.items():
        if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= set(entry):
            raise InputError(f"{name}: tensor '{tname}' has a malformed header entry; re-export the file")
        dtype, shape, offs = entry["dtype"], entry["shape"], entry["data_offsets"]
        if dtype not in DTYPE_SIZES:
            raise InputError(
                f"{name}: tensor '{tname}' has unknown dtype {dtype!r}; vocabsurgeon reads "
                f"{', '.join(sorted(DTYPE_SIZES))}"
            )
        if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
            raise InputError(f"{name}: tensor '{tname}' has an invalid shape {shape!r}; re-export the file")
        if not (isinstance(offs, list) and len(offs) == 2 and all(isinstance(o, int) and o >= 0 for o in offs)):
            raise InputError(f"{name}: tensor '{tname}' has invalid data_offsets {offs!r}; re-export the file")
        if offs[0] > offs[1]:
            raise InputError(f"{name}: tensor '{tname}' has data_offsets {offs} out of order (begin > end); re-export the file")
        numel = 1
        for d in shape:
            numel *= d
        if offs[1] - offs[0] != numel * DTYPE_SIZES[dtype]:
            raise InputError(
                f"{name}: tensor '{tname}' has shape {shape} ({dtype}) = {numel * DTYPE_SIZES[dtype]} "
                f"bytes but data_offsets {offs} span {offs[1] - offs[0]}; the file is corrupt, re-export it"
            )
        tensors.append(TensorInfo(tname, name, dtype, tuple(shape), data_start + offs[0], data_start + offs[1]))

    # The data ranges must tile [0, data length) exactly: sorted, no gap, no overlap, no tail.
    pos = data_start
    for t in sorted(tensors, key=lambda t: (t.start, t.end)):
        if t.start < pos:
            raise InputError(f"{name}: tensor '{t.name}' overlaps the previous tensor's bytes; re-export the file")
        if t.start > pos:
            raise InputError(f"{name}: gap of {t.start - pos} bytes before tensor '{t.name}'; re-export the file")
        pos = t.end
    if pos < size:
        raise InputError(f"{name}: {size - pos} trailing bytes after the last tensor; re-download the file")
    if pos > size:
        raise InputError(f"{name}: truncated: tensors need {pos} bytes but the file has {size}; re-download it")
    return ShardHeader(name, n, tensors, metadata, size)


@dataclass
class Checkpoint:
    """A checkpoint directory opened for streaming: config, shard headers, tensor locations."""

    path: Path
    config: dict
    shards: dict[str, ShardHeader]  # file name -> header, in index order
    tensors: dict[str, TensorInfo]
    index: dict | None  # the parsed index json, or None for a single-file checkpoint
    _handles: dict = field(default_factory=dict, repr=False)

    @classmethod
    def open(cls, path: str | os.PathLike) -> "Checkpoint":
        """Open a checkpoint directory and check its config, index and every shard header.

        Raises:
            InputError: for a missing directory/config, pickle-only weights, an inconsistent
                index, or any shard that fails `read_header`.
        """
        root = Path(path)
        if not root.is_dir():
            raise InputError(f"{root}: not a directory; pass a checkpoint directory (config.json + *.safetensors)")
        config = read_json(root / CONFIG_NAME)
        index_path, single = root / INDEX_NAME, root / SINGLE_NAME
        if index_path.exists() and single.exists():
            raise InputError(
                f"{root}: has both {SINGLE_NAME} and {INDEX_NAME}, so the weights are ambiguous; "
                "remove the one that is stale and retry"
            )
        if index_path.exists():
            index = read_json(index_path)
            weight_map = index.get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise InputError(f"{index_path}: has no weight_map; re-export the checkpoint")
            files: list[str] = []
            for tname, fname in weight_map.items():
                if not isinstance(fname, str):
                    raise InputError(f"{index_path}: weight_map entry '{tname}' is not a file name")
                _check_shard_name(index_path, fname)
                if fname not in files:
                    files.append(fname)
            on_disk = {p.name for p in root.glob("*.safetensors")}
            stray = sorted(on_disk - set(files))
            if stray:
                raise InputError(
                    f"{root / stray[0]}: shard is on disk but not in {INDEX_NAME}; remove it or fix the index"
                )
        elif single.exists():
            index, weight_map, files = None, None, [SINGLE_NAME]
        else:
            pickles = sorted(p.name for p in root.iterdir() if p.suffix in PICKLE_SUFFIXES)
            if pickles:
                raise InputError(
                    f"{root / pickles[0]}: pickle checkpoints are refused (loading them can run code); "
                    "convert the model to safetensors first, e.g. with the Hub's convert space or "
                    "`model.save_pretrained(dir, safe_serialization=True)` in a trusted environment"
                )
            raise InputError(f"{root}: no {SINGLE_NAME} or {INDEX_NAME}; pass a safetensors checkpoint directory")

        shards: dict[str, ShardHeader] = {}
        tensors: dict[str, TensorInfo] = {}
        for fname in files:
            fpath = root / fname
            if not fpath.is_file():
                raise InputError(f"{fpath}: shard listed in {INDEX_NAME} is missing; re-download the checkpoint")
            header = read_header(fpath, display=fname)
            shards[fname] = header
            for t in header.tensors:
                if t.name in tensors:
                    raise InputError(
                        f"tensor '{t.name}' is stored in two shards, {tensors[t.name].file} and {fname}; "
                        "remove the stale shard or re-export the checkpoint"
                    )
                tensors[t.name] = t
        if weight_map is not None:
            for tname, fname in weight_map.items():
                t = tensors.get(tname)
                if t is None or t.file != fname:
                    raise InputError(
                        f"{root / INDEX_NAME}: weight_map says tensor '{tname}' is in {fname}, but it is "
                        f"{'not there' if t is None else 'in ' + t.file}; fix the index or re-download"
                    )
            missing = sorted(set(tensors) - set(weight_map))
            if missing:
                raise InputError(
                    f"{root / INDEX_NAME}: tensor '{missing[0]}' (in {tensors[missing[0]].file}) is not in "
                    "weight_map; fix the index or re-download"
                )
        ckpt = cls(root, config, shards, tensors, index)
        stated = ((index or {}).get("metadata") or {}).get("total_size")
        if stated is not None and stated != ckpt.total_size:
            logger.warning("%s: total_size says %s but the shards hold %s bytes; the output gets the right value",
                           INDEX_NAME, stated, ckpt.total_size)
        return ckpt

    @property
    def total_size(self) -> int:
        """Bytes of tensor data, as the index's metadata.total_size should say."""
        return sum(t.nbytes for t in self.tensors.values())

    def _handle(self, file: str):
        h = self._handles.get(file)
        if h is None:
            from safetensors import safe_open

            h = self._handles[file] = safe_open(str(self.path / file), framework="pt")
        return h

    def read_rows(self, name: str, start: int, stop: int):
        """Rows [start, stop) of tensor `name` as a torch tensor, memory-mapped: only those rows are read."""
        t = self.tensors[name]
        return self._handle(t.file).get_slice(name)[start:stop]

    def rows_np(self, name: str, start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) of a float tensor as NumPy, flattened to (rows, row_size): float32
        (exact for F16/BF16/F32) or float64 (F64). Memory-mapped: only those rows are read."""
        t = self.tensors[name]
        if t.dtype not in _STORAGE:
            raise InputError(f"tensor '{name}' has dtype {t.dtype}; vocabulary tensors must be floating point")
        width = t.row_bytes // DTYPE_SIZES[t.dtype]
        count = (stop - start) * width
        raw = np.fromfile(self.path / t.file, dtype=_STORAGE[t.dtype], count=count,
                          offset=t.start + start * t.row_bytes).reshape(stop - start, width)
        if t.dtype == "BF16":  # bf16 is the top half of a float32: widen exactly by a shift
            return (raw.astype(np.uint32) << 16).view(np.float32)
        return raw.astype(np.float32) if t.dtype == "F16" else raw

    def iter_np_chunks(self, name: str, chunk_bytes: int = 4 << 20) -> Iterator[np.ndarray]:
        """Yield consecutive row chunks of `name` from `rows_np`, each about `chunk_bytes` on disk.

        Each chunk is a fresh array the caller may keep; `stream_rows` is the faster way when it
        does not.
        """
        t = self.tensors[name]
        step = max(1, chunk_bytes // max(1, t.row_bytes))
        for s in range(0, t.shape[0], step):
            yield self.rows_np(name, s, min(t.shape[0], s + step))

    def stream_rows(self, name: str, chunk_bytes: int = STREAM_CHUNK_BYTES) -> Iterator[np.ndarray]:
        """Yield every row of float tensor `name` in order, as (rows, row_size) chunks: float32
        (exact for F16/BF16/F32) or float64 (F64), like `rows_np`.

        The chunks are views of two buffers allocated once and refilled for every chunk, so a chunk
        is only valid until the next one is asked for (copy it to keep it). This is the hot loop of
        `add`: fresh 32 MiB arrays per chunk cost more in page faults than the arithmetic, and
        chunks of ~2 MiB stay in the CPU cache between the read, the widening and the sum.
        """
        t = self.tensors[name]
        if t.dtype not in _STORAGE:
            raise InputError(f"tensor '{name}' has dtype {t.dtype}; vocabulary tensors must be floating point")
        rows = t.shape[0]
        width = t.row_bytes // DTYPE_SIZES[t.dtype]
        step = max(1, min(rows, chunk_bytes // max(1, t.row_bytes)))
        raw = np.empty((step, width), dtype=_STORAGE[t.dtype])
        wide = raw if t.dtype in ("F32", "F64") else np.empty((step, width), dtype=np.float32)
        with open(self.path / t.file, "rb", buffering=0) as f:
            f.seek(t.start)
            for s in range(0, rows, step):
                n = min(step, rows - s)
                _read_exactly(f, memoryview(raw[:n]).cast("B"), self.path / t.file)
                if t.dtype == "BF16":  # bf16 is the top half of a float32: widen exactly, in place
                    np.left_shift(raw[:n], 16, out=wide[:n].view(np.uint32), dtype=np.uint32)
                elif t.dtype == "F16":
                    np.copyto(wide[:n], raw[:n])
                yield wide[:n]

    def close(self) -> None:
        self._handles.clear()


def same_bytes(a: Path, a_start: int, b: Path, b_start: int, nbytes: int) -> bool:
    """Whether two byte ranges are equal: memcmp of 1 MiB preads (faster than hashing both).

    os.pread of 1 MiB reuses the same malloc'd memory and stays in the CPU cache; bigger reads (or
    buffered file objects) fault in fresh pages for every read and run several times slower. A long
    range is split among threads (pread releases the GIL).
    """
    fa, fb = os.open(a, os.O_RDONLY), os.open(b, os.O_RDONLY)
    try:
        parts = min(os.cpu_count() or 1, 4) if nbytes >= PARALLEL_COMPARE_BYTES else 1
        cuts = [nbytes * i // parts for i in range(parts + 1)]
        ranges = [(fa, a_start + lo, fb, b_start + lo, hi - lo) for lo, hi in zip(cuts, cuts[1:])]
        if parts == 1:
            return _same_range(*ranges[0])
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(parts, thread_name_prefix="vocabsurgeon-verify") as pool:
            return all(pool.map(lambda r: _same_range(*r), ranges))
    finally:
        os.close(fa)
        os.close(fb)


def rows_kept(src: Path, tensor: TensorInfo, dst: Path, dst_start: int, except_rows: Iterable[int] = ()) -> bool:
    """Whether the rows of `tensor` (stored in file `src`) are byte-identical at `dst_start` in file `dst`,
    but for `except_rows` (rows overwritten on purpose, such as reused reserved rows).

    The one "old bytes unchanged" test of the project: `add` runs it on every rewritten shard before it
    reports success, and validation runs it to know that NEW is BASE with rows appended.
    """
    pos = 0
    for row in sorted(except_rows) + [tensor.shape[0]]:
        end = row * tensor.row_bytes
        if end > pos and not same_bytes(src, tensor.start + pos, dst, dst_start + pos, end - pos):
            return False
        pos = end + tensor.row_bytes
    return True


def _same_range(fa: int, a_start: int, fb: int, b_start: int, nbytes: int) -> bool:
    pos = 0
    while pos < nbytes:
        n = min(COMPARE_BYTES, nbytes - pos)
        x, y = os.pread(fa, n, a_start + pos), os.pread(fb, n, b_start + pos)
        if x != y or len(x) != n:
            return False
        pos += n
    return True


def _read_exactly(f, buf: memoryview, path: Path) -> None:
    got = 0
    while got < len(buf):
        n = f.readinto(buf[got:])
        if not n:
            raise InputError(f"{path}: ended early (truncated while reading?); re-download it")
        got += n


def _check_shard_name(index_path: Path, fname: str) -> None:
    p = Path(fname)
    if p.is_absolute() or ".." in p.parts or len(p.parts) != 1:
        raise InputError(
            f"{index_path}: shard name {fname!r} points outside the checkpoint directory; refusing it "
            "(a shard must be a plain file name)"
        )
    if not fname.endswith(".safetensors"):
        raise InputError(
            f"{index_path}: shard {fname!r} is not a .safetensors file; pickle weights are refused, "
            "convert the checkpoint to safetensors first"
        )


def read_json(path: Path) -> dict:
    """Read a JSON object from a checkpoint file, with an error that names the file."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: missing; a Hugging Face checkpoint directory needs it") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror}); check permissions") from None
    try:
        obj = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise InputError(f"{path}: is not valid UTF-8; the file is corrupt, re-download it") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: is not valid JSON ({e.msg} at line {e.lineno}); the file is truncated or corrupt, "
                         "re-download it") from None
    if not isinstance(obj, dict):
        raise InputError(f"{path}: must hold a JSON object; re-download it")
    return obj
