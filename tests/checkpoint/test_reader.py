"""Strict reading of untrusted checkpoints: every malformed header or index is refused by name."""

from __future__ import annotations

import json
import struct

import pytest
import torch
from click.testing import CliRunner
from safetensors.torch import save_file

from invariants import tree_digest
from vocabsurgeon.checkpoint.reader import Checkpoint, read_header
from vocabsurgeon.cli.commands import cli
from vocabsurgeon.errors import InputError


def raw_file(path, header: dict | str | bytes, data: bytes, header_len: int | None = None):
    if isinstance(header, dict):
        header = json.dumps(header)
    if isinstance(header, str):
        header = header.encode()
    n = len(header) if header_len is None else header_len
    path.write_bytes(struct.pack("<Q", n) + header + data)
    return path


def entry(dtype, shape, start, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [start, end]}


GOOD = {"a": entry("F32", [2, 2], 0, 16), "b": entry("F32", [2], 16, 24)}


def test_valid_header_round_trips(tmp_path):
    save_file({"a": torch.ones(2, 2), "b": torch.zeros(2)}, str(tmp_path / "m.safetensors"), metadata={"format": "pt"})
    h = read_header(tmp_path / "m.safetensors")
    assert [(t.name, t.dtype, t.shape) for t in h.tensors] == [("a", "F32", (2, 2)), ("b", "F32", (2,))]
    assert h.metadata == {"format": "pt"}


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda p: p.write_bytes(b"\x01\x02"), "m.safetensors: truncated safetensors file (2 bytes); re-download it"),
        (lambda p: raw_file(p, GOOD, b"\0" * 24, header_len=10**6),
         "m.safetensors: safetensors header length 1000000 runs past the end of the file"),
        (lambda p: raw_file(p, b'{"a": \xff}', b""), "m.safetensors: safetensors header is not UTF-8"),
        (lambda p: raw_file(p, "{not json", b""), "m.safetensors: safetensors header is not valid JSON"),
        (lambda p: raw_file(p, {"a": entry("F31", [2], 0, 8)}, b"\0" * 8),
         "m.safetensors: tensor 'a' has unknown dtype 'F31'"),
        (lambda p: raw_file(p, {"a": entry("F32", [3], 0, 8)}, b"\0" * 8),
         "m.safetensors: tensor 'a' has shape [3] (F32) = 12 bytes but data_offsets [0, 8] span 8"),
        (lambda p: raw_file(p, {"a": entry("F32", [2], 0, 8), "b": entry("F32", [2], 4, 12)}, b"\0" * 12),
         "m.safetensors: tensor 'b' overlaps the previous tensor's bytes"),
        (lambda p: raw_file(p, {"a": entry("F32", [2], 8, 0)}, b"\0" * 8),
         "m.safetensors: tensor 'a' has data_offsets [8, 0] out of order (begin > end)"),
        (lambda p: raw_file(p, {"a": entry("F32", [2], 0, 8), "b": entry("F32", [2], 12, 20)}, b"\0" * 20),
         "m.safetensors: gap of 4 bytes before tensor 'b'"),
        (lambda p: raw_file(p, GOOD, b"\0" * 30), "m.safetensors: 6 trailing bytes after the last tensor"),
        (lambda p: raw_file(p, GOOD, b"\0" * 20), "m.safetensors: truncated: tensors need"),
        (lambda p: raw_file(p, '{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, '
                               '"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}', b"\0" * 16),
         "m.safetensors: tensor 'a' appears twice in the safetensors header"),
        (lambda p: p.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n"),
         "m.safetensors: is a Git LFS pointer, not the weights; run `git lfs pull`"),
    ],
    ids=["truncated", "header-too-long", "not-utf8", "not-json", "unknown-dtype", "shape-bytes", "overlap",
         "out-of-order", "gap", "trailing", "short-data", "duplicate", "lfs-pointer"],
)
def test_malformed_headers_are_refused(tmp_path, make, message):
    p = tmp_path / "m.safetensors"
    make(p)
    with pytest.raises(InputError) as e:
        read_header(p)
    assert str(e.value).startswith(message)


def _shard(path, tensors):
    save_file(tensors, str(path))


def _sharded(tmp_path):
    root = tmp_path / "ck"
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 4}))
    _shard(root / "model-00001-of-00002.safetensors", {"model.embed_tokens.weight": torch.ones(4, 2)})
    _shard(root / "model-00002-of-00002.safetensors", {"lm_head.weight": torch.ones(4, 2)})
    index = {"metadata": {"total_size": 64}, "weight_map": {
        "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
        "lm_head.weight": "model-00002-of-00002.safetensors"}}
    (root / "model.safetensors.index.json").write_text(json.dumps(index))
    return root, index


def _set_index(root, index):
    (root / "model.safetensors.index.json").write_text(json.dumps(index))


def test_sharded_checkpoint_opens(tmp_path):
    root, _ = _sharded(tmp_path)
    ck = Checkpoint.open(root)
    assert ck.tensors["lm_head.weight"].file == "model-00002-of-00002.safetensors"
    assert ck.total_size == 64


def _missing_shard(root, index):
    (root / "model-00002-of-00002.safetensors").unlink()


def _absent_tensor(root, index):
    index["weight_map"]["model.norm.weight"] = "model-00002-of-00002.safetensors"
    _set_index(root, index)


def _two_shards(root, index):
    _shard(root / "model-00002-of-00002.safetensors", {"lm_head.weight": torch.ones(4, 2),
                                                       "model.embed_tokens.weight": torch.ones(4, 2)})


def _stray_shard(root, index):
    _shard(root / "model-00003-of-00002.safetensors", {"x": torch.ones(1)})


def _shard_name(name):
    def f(root, index):
        index["weight_map"]["lm_head.weight"] = name
        _set_index(root, index)
    return f


def _both(root, index):
    _shard(root / "model.safetensors", {"x": torch.ones(1)})


@pytest.mark.parametrize(
    "breakit,message",
    [
        (_missing_shard, "{root}/model-00002-of-00002.safetensors: shard listed in model.safetensors.index.json is "
                         "missing; re-download the checkpoint"),
        (_absent_tensor, "{root}/model.safetensors.index.json: weight_map says tensor 'model.norm.weight' is in "
                         "model-00002-of-00002.safetensors, but it is not there; fix the index or re-download"),
        (_two_shards, "tensor 'model.embed_tokens.weight' is stored in two shards, model-00001-of-00002.safetensors "
                      "and model-00002-of-00002.safetensors; remove the stale shard or re-export the checkpoint"),
        (_stray_shard, "{root}/model-00003-of-00002.safetensors: shard is on disk but not in "
                       "model.safetensors.index.json; remove it or fix the index"),
        (_shard_name("../evil.safetensors"), "{root}/model.safetensors.index.json: shard name '../evil.safetensors' "
                                             "points outside the checkpoint directory"),
        (_shard_name("/etc/passwd.safetensors"), "{root}/model.safetensors.index.json: shard name "
                                                 "'/etc/passwd.safetensors' points outside the checkpoint directory"),
        (_shard_name("pytorch_model-00001.bin"), "{root}/model.safetensors.index.json: shard 'pytorch_model-00001.bin' "
                                                 "is not a .safetensors file; pickle weights are refused"),
        (_both, "{root}: has both model.safetensors and model.safetensors.index.json, so the weights are ambiguous"),
    ],
    ids=["missing-shard", "absent-tensor", "two-shards", "stray-shard", "dotdot", "absolute", "bin", "both"],
)
def test_broken_index_is_refused_by_the_cli(tmp_path, breakit, message):
    root, index = _sharded(tmp_path)
    breakit(root, index)
    before = tree_digest(root)
    r = CliRunner().invoke(cli, ["add", "-t", "Frodo", str(root), str(tmp_path / "out")])
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith("Error: " + message.format(root=root))
    assert len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
    assert tree_digest(root) == before


def test_wrong_total_size_is_recomputed(llama_ckpt, tmp_path):
    idx = llama_ckpt / "model.safetensors.index.json"
    index = json.loads(idx.read_text())
    index["metadata"]["total_size"] = 1
    idx.write_text(json.dumps(index))
    r = CliRunner().invoke(cli, ["add", "-t", "Frodo", str(llama_ckpt), str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    out = Checkpoint.open(tmp_path / "out")
    assert out.index["metadata"]["total_size"] == out.total_size != 1


# ------------------------------------------------------------------------------------------------
# Streaming reads and byte comparison (the hot paths of add)

import numpy as np  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from vocabsurgeon.checkpoint.reader import same_bytes  # noqa: E402


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("chunk_bytes", [1, 100, 1000, 1 << 20])
def test_stream_rows_match_rows_np(tmp_path, dtype, chunk_bytes):
    x = (torch.randn(37, 5, 3) * 3).to(dtype)
    (tmp_path / "config.json").write_text("{}")
    save_file({"pre": torch.ones(3), "w": x, "post": torch.zeros(2)}, str(tmp_path / "model.safetensors"))
    ck = Checkpoint.open(tmp_path)
    want = ck.rows_np("w", 0, 37)
    got = np.concatenate([c.copy() for c in ck.stream_rows("w", chunk_bytes=chunk_bytes)])
    assert got.dtype == want.dtype and got.shape == (37, 15)
    assert np.array_equal(got, want)
    assert np.array_equal(got, x.reshape(37, 15).to(torch.float64).numpy())


def test_stream_rows_of_a_truncated_file_is_an_input_error(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    save_file({"w": torch.ones(100, 4)}, str(tmp_path / "model.safetensors"))
    ck = Checkpoint.open(tmp_path)
    with open(tmp_path / "model.safetensors", "r+b") as f:
        f.truncate(f.seek(0, 2) - 10)
    with pytest.raises(InputError, match="ended early"):
        list(ck.stream_rows("w", chunk_bytes=64))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 5000), flip=st.integers(0, 10**9), a_off=st.integers(0, 7), b_off=st.integers(0, 7),
       same=st.booleans())
def test_same_bytes_finds_any_differing_byte(tmp_path_factory, n, flip, a_off, b_off, same):
    import vocabsurgeon.checkpoint.reader as checkpoint

    d = tmp_path_factory.mktemp("cmp")
    data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8).tobytes()
    other = bytearray(data)
    if not same and n:
        other[flip % n] ^= 0x40
    (d / "a").write_bytes(b"x" * a_off + data + b"tail")
    (d / "b").write_bytes(b"y" * b_off + bytes(other))
    # Small thresholds, so that the parallel split and several reads per part are exercised too.
    old = checkpoint.COMPARE_BYTES, checkpoint.PARALLEL_COMPARE_BYTES
    checkpoint.COMPARE_BYTES, checkpoint.PARALLEL_COMPARE_BYTES = 97, 300
    try:
        assert same_bytes(d / "a", a_off, d / "b", b_off, n) == (same or n == 0)
        assert not same_bytes(d / "a", a_off, d / "b", b_off, n + 1)  # past the end of b
    finally:
        checkpoint.COMPARE_BYTES, checkpoint.PARALLEL_COMPARE_BYTES = old
