"""The shard writer: layouts reserved before the row count is known, and files flushed before publishing."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from safetensors.numpy import load_file, save_file

import vocabsurgeon.checkpoint.staging as staging
import vocabsurgeon.checkpoint.writer as writer
from vocabsurgeon import add_tokens
from vocabsurgeon.checkpoint.reader import read_header
from vocabsurgeon.checkpoint.writer import GrownTensor, copy_old_bytes, final_layout, reserve_layout, write_rows

DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64}


@st.composite
def shards(draw):
    """A shard of 2-6 matrices, one or two of which are vocabulary matrices (same row count)."""
    n = draw(st.integers(2, 6))
    rows = draw(st.integers(1, 40))
    names = [f"t{i}" for i in range(n)]
    vocab = draw(st.lists(st.sampled_from(names), min_size=1, max_size=2, unique=True))
    tensors = {}
    for name in names:
        dtype = DTYPES[draw(st.sampled_from(sorted(DTYPES)))]
        shape = (rows, draw(st.integers(1, 9))) if name in vocab else (draw(st.integers(1, 30)), draw(st.integers(1, 9)))
        tensors[name] = np.arange(np.prod(shape), dtype=dtype).reshape(shape) + draw(st.integers(0, 100))
    return tensors, tuple(vocab)


@settings(max_examples=40, deadline=None)
@given(shards(), st.integers(0, 10**6), st.integers(0, 2**32 - 1))
def test_old_bytes_copied_before_the_row_count_is_known_land_where_the_final_layout_puts_them(
        tmp_path_factory, shard, k, seed):
    tensors, vocab = shard
    d = tmp_path_factory.mktemp("shard")
    src, dst = d / "in.safetensors", d / "out.safetensors"
    save_file(tensors, str(src), metadata={"format": "pt"})
    header = read_header(src)
    reserved, placed = reserve_layout(header, vocab)
    copy_old_bytes(src, reserved, dst, names=placed)  # before k is known, as AddJob does
    k = k % 50  # a plausible number of new rows; the header was sized for any
    rng = np.random.default_rng(seed)
    new = {n: rng.standard_normal((k, tensors[n].shape[1])).astype(tensors[n].dtype) for n in vocab}
    grown = {n: GrownTensor((tensors[n].shape[0] + k, tensors[n].shape[1]), new[n].tobytes()) for n in vocab}
    layout = final_layout(reserved, {n: g.shape for n, g in grown.items()})
    assert len(layout.head) == len(reserved.head)
    rest = tuple(n for n in vocab if n not in placed)
    if rest:
        copy_old_bytes(src, layout, dst, names=rest)
    write_rows(dst, layout, grown)
    got = load_file(str(dst))  # the safetensors library reads it, padded header and all
    assert set(got) == set(tensors)
    for name, t in tensors.items():
        want = np.concatenate([t, new[name]]) if name in vocab else t
        assert got[name].dtype == want.dtype and np.array_equal(got[name], want), name
    assert read_header(dst).metadata == {"format": "pt"}
    assert [t.name for t in sorted(read_header(dst).tensors, key=lambda t: t.start)][-len(vocab):] == \
        sorted(vocab, key=lambda n: header.tensors[[t.name for t in header.tensors].index(n)].start)


def test_the_new_header_keeps_the_old_bytes_at_their_offset_within_a_page(tmp_path):
    """The kernel copies a range whose source and destination lie at the same offset within a page 1.5x faster
    than a range shifted by a few bytes; a new header (other shapes, another length) would shift every tensor.
    The header is padded so that the most old bytes keep their page offset: here all but the small ones."""
    rng = np.random.default_rng(0)
    tensors = {"embed": rng.standard_normal((300, 1024)).astype(np.float32),  # rows of 4 KiB, as bf16 rows of 2048
               "norm": np.ones(77, dtype=np.float32),  # shifts what follows off the page
               "w1": rng.standard_normal((512, 1024)).astype(np.float32),
               "w2": rng.standard_normal((256, 1024)).astype(np.float32)}
    src, dst = tmp_path / "in.safetensors", tmp_path / "out.safetensors"
    save_file(tensors, str(src), metadata={"format": "pt"})
    header = read_header(src)
    old = {t.name: t for t in header.tensors}
    least = len(writer.encode_header([(t.name, t.dtype, t.shape, t.nbytes) for t in header.tensors], header.metadata))
    reserved, placed = reserve_layout(header, ("embed",))
    layout = final_layout(reserved, {"embed": (305, 1024)})
    assert len(reserved.head) > least - 8 and (layout.starts["w1"] - old["w1"].start) % 4096 == 0
    assert (layout.starts["w2"] - old["w2"].start) % 4096 == 0
    assert len(layout.head) % 8 == 0 and len(layout.head) < least + 4096 + 128  # under a page of padding
    copy_old_bytes(src, reserved, dst, names=placed)
    new_rows = rng.standard_normal((5, 1024)).astype(np.float32)
    write_rows(dst, layout, {"embed": GrownTensor((305, 1024), new_rows.tobytes())})
    got = load_file(str(dst))  # the padding is spaces in the header, which the format allows
    assert np.array_equal(got["embed"], np.concatenate([tensors["embed"], new_rows]))
    assert all(np.array_equal(got[n], tensors[n]) for n in ("norm", "w1", "w2"))


def test_a_header_that_outgrows_its_reservation_is_an_internal_error():
    from vocabsurgeon.errors import VocabSurgeonError

    with pytest.raises(VocabSurgeonError, match="does not fit"):
        writer.encode_header([("x", "F32", (10**20, 4), 16 * 10**20)], None, size=64)


def test_every_file_is_flushed_to_disk_before_the_output_is_published(monkeypatch, llama_ckpt, tmp_path):
    flushed: list[Path] = []
    at_publish: list[set[Path]] = []
    real_fsync, real_publish = writer._fsync_path, staging.Stage.publish
    monkeypatch.setattr(writer, "_fsync_path", lambda p: (flushed.append(Path(p)), real_fsync(p)))
    monkeypatch.setattr(staging.Stage, "publish", lambda self: (
        at_publish.append({Path(p) for p in flushed}), real_publish(self)))
    out = tmp_path / "out"
    add_tokens(llama_ckpt, out, ["Frodo"], link=True)
    [done] = at_publish
    [stage] = {p for p in done if staging.STAGING_TAG in p.name}
    flushed = {p.relative_to(stage) for p in done if p == stage or stage in p.parents}
    want = {p.relative_to(out) for p in out.rglob("*")} | {Path(".")}
    assert want <= flushed, f"not flushed before the rename: {sorted(map(str, want - flushed))}"


def test_no_fsync_flushes_nothing_and_still_publishes(monkeypatch, llama_ckpt, tmp_path):
    flushed: list[Path] = []
    monkeypatch.setattr(writer, "_fsync_path", flushed.append)
    add_tokens(llama_ckpt, tmp_path / "out", ["Frodo"], fsync=False)
    assert flushed == []
    assert (tmp_path / "out" / "tokenizer.json").exists() and not list(tmp_path.glob(".*vocabsurgeon-staging-*"))


def test_a_failed_plan_after_the_copy_started_leaves_nothing(gpt2_ckpt, tmp_path):
    # AddJob copies shards while it plans; "nothing to add" is only known after planning.
    from vocabsurgeon import InputError

    before = {p: p.stat().st_mtime_ns for p in gpt2_ckpt.rglob("*")}
    vocab = json.loads((gpt2_ckpt / "tokenizer.json").read_text())["model"]["vocab"]
    word = next(w for w in vocab if w.isalpha() and len(w) > 2 and "Ġ" + w in vocab)  # both forms one token
    with pytest.raises(InputError, match="nothing to add"):
        add_tokens(gpt2_ckpt, tmp_path / "out", [word])
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.glob(".*vocabsurgeon-staging-*"))
    assert {p: p.stat().st_mtime_ns for p in gpt2_ckpt.rglob("*")} == before


def test_progress_attached_late_still_counts_every_byte(llama_ckpt, tmp_path):
    from vocabsurgeon.checkpoint.reader import Checkpoint
    from vocabsurgeon.add.plan import open_target, plan_tokens
    from vocabsurgeon.engine.job import AddJob

    seen: list[int] = []
    with AddJob(open_target(llama_ckpt), tmp_path / "out") as job:
        plan = job.use(plan_tokens(job.target, ["Frodo", "Gandalf"]))
        job.progress = seen.append  # as the CLI does once the plan is printed
        result = job.finish()
    assert set(result.copy_methods) == set(plan.rewrite) | set(plan.copy)
    assert all(result.copy_methods[f] == "rewrite" for f in plan.rewrite)
    out = Checkpoint.open(tmp_path / "out")
    copied = sum(out.shards[f].size for f in plan.copy)  # whole files
    rewritten = sum(t.nbytes for t in out.tensors.values() if t.file in plan.rewrite)  # old bytes + new rows
    assert plan.copy and plan.rewrite
    assert sum(seen) == copied + rewritten


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_every_output_file_gets_the_umask_mode_whatever_the_input_modes(llama_ckpt, tmp_path, umask):
    for i, f in enumerate(sorted(llama_ckpt.iterdir())):  # a private download: some files 0600, some 0640
        f.chmod(0o600 if i % 2 else 0o640)
    old = os.umask(umask)
    try:
        r = add_tokens(llama_ckpt, tmp_path / "out", ["Frodo"])
    finally:
        os.umask(old)
    d = r.to_dict()
    assert d["files_copied"] and d["files_rewritten"], "both kinds of shard are in the output"
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "out").iterdir()}
    assert modes == dict.fromkeys(modes, 0o666 & ~umask)


def test_hard_links_are_the_input_files_mode_included(llama_ckpt, tmp_path):
    for f in llama_ckpt.glob("*.safetensors"):
        f.chmod(0o600)
    r = add_tokens(llama_ckpt, tmp_path / "out", ["Frodo"], link=True)
    for f in r.to_dict()["files_copied"]:
        assert stat.S_IMODE((tmp_path / "out" / f).stat().st_mode) == 0o600
