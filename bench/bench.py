"""The benchmark: vocabsurgeon add vs the transformers way vs the copy floor, on a generated Llama checkpoint.

Three steps, each also a subcommand:

    generate  write a Llama-3-style checkpoint (untied, bf16, 3+ shards, byte-level BPE tokenizer)
              tensor by tensor, in little memory
    run       time each way in its own process (wall time, peak RSS from wait4), N times, medians
    many      add 50,000 tokens with vocabsurgeon; encode speed of the tokenizer before vs after

`all` does the three and writes bench/RESULTS.md (between the bench markers; the prose around
them is kept). Sizes: `full` (vocab 128,256, hidden 4096, ~6 GB), `quick` (~0.5 GB), `tiny`
(a few MB, seconds; what tests/benchmarks/test_bench.py runs).

    python bench/bench.py all --size full --repeats 3
    python bench/bench.py all --size tiny --work /tmp/b --results /tmp/b/RESULTS.md

This file imports neither torch nor transformers at module level: the children it measures
pay for their own imports, the parent does not skew them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


@dataclass(frozen=True)
class Size:
    """Shapes of a generated checkpoint."""

    vocab: int  # rows of embed_tokens / lm_head, reserved specials included
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    shard_bytes: int  # greedy shard limit, like save_pretrained's max_shard_size
    specials: int = 256  # <|begin_of_text|>, <|end_of_text|>, <|reserved_special_token_N|>
    new_tokens: int = 1000
    many_tokens: int = 50_000


SIZES = {
    # Llama-3-8B shapes with 9 layers instead of 32: 2 x 1.05 GB vocabulary + 9 x 0.44 GB = 6.0 GB.
    "full": Size(128_256, 4096, 14336, 9, 32, 8, 1_600_000_000),
    "quick": Size(32_256, 1024, 3584, 8, 8, 2, 160_000_000),
    "tiny": Size(1_280, 64, 128, 2, 4, 2, 60_000, specials=16, new_tokens=100, many_tokens=500),
}

# ---------------------------------------------------------------------------------------------
# generate


def _training_files() -> list[Path]:
    """Text to train the BPE on: the standard library's own sources, present wherever Python is."""
    root = Path(sys.base_prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    return sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts)


def build_tokenizer(vocab: int, specials: int) -> dict:
    """A byte-level BPE tokenizer.json with exactly `vocab` ids: `vocab - specials` BPE entries, then specials.

    Trained on the standard library's sources; when the text runs out of pairs before the target
    size, low-priority merges that append a common suffix to existing entries fill it up
    (deterministic, valid BPE: both parts and the result are entries).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    target = vocab - specials
    files = _training_files()
    if target < 5000:
        files = files[:40]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=target, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator((p.read_text(errors="replace") for p in files), trainer)
    data = json.loads(tok.to_str())
    model = data["model"]
    vocab_map: dict[str, int] = model["vocab"]
    merges: list = model["merges"]
    suffixes = [s for s in ("s", "ed", "ing", "er", "ly", "ion", "al", "es", "ic", "ity", "ness", "ment")
                if s in vocab_map]
    words = [p for p in sorted(vocab_map, key=vocab_map.get) if p.startswith("Ġ") and len(p) > 2]
    i = 0
    while len(vocab_map) < target:
        w, s = words[i % len(words)], suffixes[(i // len(words)) % len(suffixes)]
        i += 1
        if w + s not in vocab_map:
            vocab_map[w + s] = len(vocab_map)
            merges.append([w, s])
    names = ["<|begin_of_text|>", "<|end_of_text|>"] + [f"<|reserved_special_token_{j}|>" for j in range(specials - 2)]
    data["added_tokens"] = [
        {"id": target + j, "content": n, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
        for j, n in enumerate(names)
    ]
    return data


def _tensors(s: Size) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) in the order save_pretrained writes a Llama."""
    head_dim = s.hidden // s.heads
    kv = s.kv_heads * head_dim
    out = [("model.embed_tokens.weight", (s.vocab, s.hidden))]
    for i in range(s.layers):
        p = f"model.layers.{i}."
        out += [
            (p + "input_layernorm.weight", (s.hidden,)),
            (p + "mlp.down_proj.weight", (s.hidden, s.intermediate)),
            (p + "mlp.gate_proj.weight", (s.intermediate, s.hidden)),
            (p + "mlp.up_proj.weight", (s.intermediate, s.hidden)),
            (p + "post_attention_layernorm.weight", (s.hidden,)),
            (p + "self_attn.k_proj.weight", (kv, s.hidden)),
            (p + "self_attn.o_proj.weight", (s.hidden, s.hidden)),
            (p + "self_attn.q_proj.weight", (s.hidden, s.hidden)),
            (p + "self_attn.v_proj.weight", (kv, s.hidden)),
        ]
    return out + [("model.norm.weight", (s.hidden,)), ("lm_head.weight", (s.vocab, s.hidden))]


def _bf16_pool(nbytes: int, seed: int) -> bytes:
    """Random finite bf16 values ~ N(0, 0.02): the bytes every tensor is cut from."""
    import numpy as np

    x = np.random.default_rng(seed).standard_normal(nbytes // 2, dtype=np.float32) * 0.02
    return (x.view(np.uint32) >> 16).astype("<u2").tobytes()


def _write_cyclic(f, pool: bytes, nbytes: int, start: int) -> None:
    """Write `nbytes` taken cyclically from `pool` from an even offset, in pool-sized writes."""
    pos = start % len(pool) & ~1
    while nbytes:
        n = min(nbytes, len(pool) - pos)
        f.write(memoryview(pool)[pos:pos + n])
        nbytes -= n
        pos = 0


def generate(size: Size, out: Path) -> Path:
    """Write the checkpoint to `out` (config, sharded safetensors + index, tokenizer); memory stays ~pool size."""
    out.mkdir(parents=True, exist_ok=True)
    tok_cache = out.parent / f"tokenizer-{size.vocab}.json"
    if not tok_cache.exists():
        tok_cache.write_text(json.dumps(build_tokenizer(size.vocab, size.specials), ensure_ascii=False), encoding="utf-8")
    shutil.copyfile(tok_cache, out / "tokenizer.json")
    bos, eos = size.vocab - size.specials, size.vocab - size.specials + 1
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
        "eos_token": "<|end_of_text|>", "model_max_length": 131072, "clean_up_tokenization_spaces": False,
    }, indent=2) + "\n")
    (out / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": size.vocab,
        "hidden_size": size.hidden, "intermediate_size": size.intermediate, "num_hidden_layers": size.layers,
        "num_attention_heads": size.heads, "num_key_value_heads": size.kv_heads, "head_dim": size.hidden // size.heads,
        "hidden_act": "silu", "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
        "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}, "initializer_range": 0.02,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "dtype": "bfloat16",
        "bos_token_id": bos, "eos_token_id": eos, "attention_bias": False, "mlp_bias": False, "use_cache": True,
    }, indent=2) + "\n")

    shards: list[list[tuple[str, tuple[int, ...], int]]] = [[]]
    used = 0
    for name, shape in _tensors(size):
        nbytes = 2
        for d in shape:
            nbytes *= d
        if shards[-1] and used + nbytes > size.shard_bytes:
            shards.append([])
            used = 0
        shards[-1].append((name, shape, nbytes))
        used += nbytes
    pool = _bf16_pool(min(16 << 20, 2 * size.vocab * size.hidden), seed=size.vocab)
    weight_map, total = {}, 0
    for i, tensors in enumerate(shards, 1):
        fname = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        header, pos = {"__metadata__": {"format": "pt"}}, 0
        for name, shape, nbytes in tensors:
            header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [pos, pos + nbytes]}
            pos += nbytes
            weight_map[name] = fname
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)
        with open(out / fname, "wb", buffering=0) as f:
            f.write(len(raw).to_bytes(8, "little") + raw)
            for j, (name, shape, nbytes) in enumerate(tensors):
                if name.endswith("norm.weight"):
                    import numpy as np

                    f.write((np.ones(shape, np.float32).view(np.uint32) >> 16).astype("<u2").tobytes())
                else:
                    _write_cyclic(f, pool, nbytes, start=7919 * 2 * (len(weight_map) + j))
        total += pos
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2) + "\n")
    return out


def make_words(n: int, seed: int, avoid: set[str] = frozenset()) -> list[str]:
    """`n` distinct made-up names ("Vorathil", "Quenmor", ...), none of them in `avoid`."""
    rng = random.Random(seed)
    on, nu, co = "bdfghklmnprstvzq", "aeiouy", ["", "n", "r", "l", "th", "s", "m"]
    out: list[str] = []
    seen = set(avoid)
    while len(out) < n:
        w = "".join(rng.choice(on) + rng.choice(nu) + rng.choice(co) for _ in range(rng.randint(2, 4))).capitalize()
        if w not in seen:
            seen.add(w)
            out.append(w)
    return out


def _known_words(src: Path) -> set[str]:
    """Vocabulary entries as words, with and without the byte-level word-start marker."""
    vocab = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    return set(vocab) | {p[1:] for p in vocab if p.startswith("Ġ")}


# ---------------------------------------------------------------------------------------------
# measure


@dataclass
class Sample:
    """One child process: wall seconds and peak RSS (bytes)."""

    wall: float
    rss: int


def _read_all(path: Path) -> None:
    """Warm the page cache with every input file, the same way before every run."""
    for p in sorted(path.rglob("*")):
        if p.is_file():
            with open(p, "rb", buffering=0) as f:
                while f.read(64 << 20):
                    pass


def _drop(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path)
    for p in path.parent.glob(f".{path.name}.vocabsurgeon-staging-*"):
        shutil.rmtree(p, ignore_errors=True)


def measure(cmd: list[str], log: Path, env: dict | None = None) -> Sample:
    """Run `cmd` in its own process; wall time and the child's own peak RSS.

    The child is started by GNU time (a ~2 MB process) when it is installed: Linux carries a
    process's RSS high-water mark across exec, so a child forked straight from this Python
    process would inherit this process's peak (numpy, tokenizers) as its own.
    """
    gnu_time = Path("/usr/bin/time")
    rss_file = log.with_suffix(".rss")
    full = [str(gnu_time), "-q", "-f", "%M", "-o", str(rss_file)] + cmd if gnu_time.exists() else cmd
    with open(log, "wb") as lf:
        t0 = time.perf_counter()
        proc = subprocess.Popen(full, stdout=lf, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise SystemExit(f"bench: {' '.join(cmd)} exited {proc.returncode}; its output:\n{tail}")
    if gnu_time.exists():
        return Sample(wall, int(rss_file.read_text().split()[-1]) * 1024)
    return Sample(wall, usage.ru_maxrss * 1024)


def _vocabsurgeon() -> list[str]:
    exe = shutil.which("vocabsurgeon")
    return [exe] if exe else [sys.executable, "-m", "vocabsurgeon"]


def _has_no_validate() -> bool:
    out = subprocess.run(_vocabsurgeon() + ["add", "--help"], capture_output=True, text=True).stdout
    return "--no-validate" in out


def commands(src: Path, out: Path, tokens: Path) -> dict[str, list[str]]:
    """The measured commands, by configuration name."""
    vs = _vocabsurgeon() + ["add", "--tokens", str(tokens), "--init", "mean", "-q"]
    if _has_no_validate():
        vs.append("--no-validate")
    me = [sys.executable, str(Path(__file__).resolve())]
    return {
        "transformers": me + ["_transformers", str(src), str(out), str(tokens)],
        "vocabsurgeon": vs + [str(src), str(out)],
        "vocabsurgeon --link": vs + ["--link", str(src), str(out)],
        "floor (copy)": me + ["_floor", str(src), str(out)],
        "floor (link)": me + ["_floor", "--link", str(src), str(out)],
    }


def transformers_way(src: str, out: str, tokens_file: str) -> None:
    """What users do without vocabsurgeon: load, add_tokens, resize (mean_resizing), save."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    words = Path(tokens_file).read_text(encoding="utf-8").split("\n")
    tok = AutoTokenizer.from_pretrained(src)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16)
    tok.add_tokens([w for w in words if w])
    model.resize_token_embeddings(len(tok), mean_resizing=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)


def floor(src: str, out: str, link: bool) -> None:
    """The physical floor: copy (copy_file_range) the shards that hold vocabulary tensors, hard-link
    (or copy) the other shards, copy the small files; and flush every file to disk as vocabsurgeon
    does, each in a background thread as soon as it is written, so that flushing overlaps copying."""
    import queue
    import threading

    srcp, outp = Path(src), Path(out)
    outp.mkdir(parents=True)
    index = json.loads((srcp / "model.safetensors.index.json").read_text())
    vocab_files = {index["weight_map"][n] for n in ("model.embed_tokens.weight", "lm_head.weight")}
    flush: queue.Queue = queue.Queue()

    def flusher() -> None:
        while (path := flush.get()) is not None:
            fd = os.open(path, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)

    t = threading.Thread(target=flusher)
    t.start()
    for p in sorted(srcp.iterdir(), key=lambda p: (p.name not in vocab_files, p.name)):
        dst = outp / p.name
        if p.suffix == ".safetensors" and p.name not in vocab_files and link:
            os.link(p, dst)
        else:
            with open(p, "rb") as fi, open(dst, "wb") as fo:
                left = os.fstat(fi.fileno()).st_size
                while left:
                    # 256 MiB calls, as vocabsurgeon: 1 GiB calls measured ~1.5x slower here
                    left -= os.copy_file_range(fi.fileno(), fo.fileno(), min(left, 256 << 20))
        flush.put(dst)
    flush.put(outp)
    flush.put(None)
    t.join()


def machine() -> dict:
    """What the figures were measured on."""
    info = {"nproc": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}
    try:
        info["cpu"] = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        kb = next(int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal"))
        info["ram_gib"] = round(kb / 2**20, 1)
    except (OSError, StopIteration):
        pass
    try:
        df = subprocess.run(["df", "-T", str(HERE)], capture_output=True, text=True).stdout.splitlines()[-1].split()
        info["filesystem"] = f"{df[1]} on {df[0]}"
    except (OSError, IndexError):
        pass
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "vocabsurgeon"],
                               capture_output=True, text=True).stdout.strip()
        info["vocabsurgeon commit"] = head.stdout.strip() + (" (plus uncommitted changes)" if dirty else "")
    except OSError:
        pass
    for mod in ("torch", "transformers", "tokenizers", "safetensors"):
        try:
            r = subprocess.run([sys.executable, "-c", f"import importlib.metadata as m; print(m.version('{mod}'))"],
                               capture_output=True, text=True)
            info[mod] = r.stdout.strip()
        except OSError:
            pass
    return info


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run(size_name: str, work: Path, repeats: int, skip: set[str]) -> dict:
    """Generate (if needed) and time every configuration `repeats` times, interleaved; medians and ratios."""
    size = SIZES[size_name]
    src = work / f"ckpt-{size_name}"
    if not (src / "model.safetensors.index.json").exists():
        t0 = time.perf_counter()
        generate(size, src)
        print(f"generated {src} ({_du(src) / 1e9:.2f} GB) in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    vocab = _known_words(src)
    tokens = work / f"tokens-{size.new_tokens}.txt"
    tokens.write_text("\n".join(make_words(size.new_tokens, 1, vocab)) + "\n", encoding="utf-8")
    out = work / "out"
    cmds = {k: v for k, v in commands(src, out, tokens).items() if k not in skip}
    samples: dict[str, list[Sample]] = {k: [] for k in cmds}
    loads = [os.getloadavg()[0]]
    for r in range(repeats):
        order = list(cmds)
        random.Random(r).shuffle(order)  # no configuration always follows the same one (e.g. a big delete)
        for name in order:
            cmd = cmds[name]
            _drop(out)
            os.sync()
            _read_all(src)
            s = measure(cmd, work / "child.log")
            samples[name].append(s)
            print(f"[{r + 1}/{repeats}] {name}: {s.wall:.2f} s, {s.rss / 2**20:.0f} MiB", file=sys.stderr)
            loads.append(os.getloadavg()[0])
    _drop(out)
    os.sync()
    med = {k: {"wall": statistics.median(s.wall for s in v), "rss": statistics.median(s.rss for s in v),
               "walls": [round(s.wall, 3) for s in v], "rsss": [s.rss for s in v]} for k, v in samples.items()}
    return {"size": size_name, "shape": size.__dict__, "src_bytes": _du(src), "shards": len(list(src.glob("*.safetensors"))),
            "vocab_matrix_bytes": size.vocab * size.hidden * 2, "repeats": repeats, "median": med,
            "load": [round(x, 2) for x in loads], "commands": {k: " ".join(v) for k, v in cmds.items()}}


# ---------------------------------------------------------------------------------------------
# many tokens


def sample_text(words: list[str], n_chars: int, seed: int) -> tuple[str, str]:
    """English text (stdlib docstrings), and the same text with every 10th word a new token."""
    import pydoc  # noqa: F401  (docstrings of a few big stdlib modules)
    import argparse as a, collections as c, email as e, logging as lg, pathlib as pl, subprocess as sp  # noqa: E401
    import inspect

    parts = []
    for mod in (a, c, e, lg, pl, sp):
        for _, obj in inspect.getmembers(mod):
            d = inspect.getdoc(obj)
            if d:
                parts.append(d)
    base = "\n".join(parts)
    while len(base) < n_chars:
        base += "\n" + base
    base = base[:n_chars]
    rng = random.Random(seed)
    mixed = " ".join(rng.choice(words) if i % 10 == 9 else w for i, w in enumerate(base.split(" ")))
    return base, mixed


def encode_seconds(tokenizer_json: Path, text: str, repeats: int = 3) -> tuple[float, int]:
    """Best of `repeats` single-threaded encodes of `text` line by line; and the number of ids."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_json))
    lines = text.split("\n")
    best, n = float("inf"), 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        n = sum(len(tok.encode(l, add_special_tokens=False).ids) for l in lines)
        best = min(best, time.perf_counter() - t0)
    return best, n


def many(size_name: str, work: Path, count: int | None, timeout: float, mem_gb: float = 12) -> dict:
    """Add `count` tokens (default the size's many_tokens) in one run; time, RSS, encode speed before/after."""
    size = SIZES[size_name]
    count = count or size.many_tokens
    src = work / f"ckpt-{size_name}"
    if not (src / "model.safetensors.index.json").exists():
        generate(size, src)
    words = make_words(count, 2, _known_words(src))
    tokens = work / f"tokens-many-{count}.txt"
    tokens.write_text("\n".join(words) + "\n", encoding="utf-8")
    out = work / "out-many"
    _drop(out)
    cmd = _vocabsurgeon() + ["add", "--tokens", str(tokens), "--init", "mean", "--link", "-q", "--json"]
    if _has_no_validate():
        cmd.append("--no-validate")
    cmd += [str(src), str(out)]
    result = {"tokens": count, "command": " ".join(cmd), "limits": f"timeout {timeout:.0f} s, address space {mem_gb} GiB"}
    try:
        limit = ["prlimit", f"--as={int(mem_gb * 2**30)}"] if mem_gb and shutil.which("prlimit") else []
        s = measure(limit + ["timeout", str(int(timeout))] + cmd, work / "many.log")
    except SystemExit as e:
        lines = [l for l in str(e).splitlines() if l.strip()]
        result["error"] = lines[-1] if len(lines) > 1 else str(e)  # the child's last line says why
        _drop(out)
        return result
    summary = json.loads((work / "many.log").read_text())
    result.update(wall=s.wall, rss=s.rss, rows_before=summary["rows_before"], rows_after=summary["rows_after"])
    plain, mixed = sample_text(words, 400_000 if size_name != "tiny" else 20_000, seed=3)
    for label, text in (("plain", plain), ("with_new_words", mixed)):
        before, n_before = encode_seconds(src / "tokenizer.json", text)
        after, n_after = encode_seconds(out / "tokenizer.json", text)
        result[label] = {"chars": len(text), "before_s": before, "after_s": after, "ratio": after / before,
                         "ids_before": n_before, "ids_after": n_after}
    _drop(out)
    return result


# ---------------------------------------------------------------------------------------------
# report


def _gb(b: float) -> str:
    return f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / 2**20:.0f} MiB"


def report(res: dict, many_res: dict | None, info: dict, argv: list[str]) -> str:
    """The markdown block written between the markers of RESULTS.md."""
    med = res["median"]
    L = [BEGIN, "", f"Generated by `python bench/bench.py {' '.join(argv)}` on {time.strftime('%Y-%m-%d %H:%M')}.", ""]
    L += ["**Machine:** " + ", ".join(f"{k} {v}" for k, v in info.items()) + ".", ""]
    sh = res["shape"]
    L += [f"**Checkpoint** (`{res['size']}`): Llama, untied, bf16, vocab {sh['vocab']:,}, hidden {sh['hidden']}, "
          f"{sh['layers']} layers, {_gb(res['src_bytes'])} in {res['shards']} shards; "
          f"one vocabulary matrix is {_gb(res['vocab_matrix_bytes'])}. {sh['new_tokens']:,} new words, mean init. "
          f"Load average (1 min) during the run: {min(res['load'])}-{max(res['load'])}.", ""]
    L += [f"Medians of {res['repeats']} runs per configuration (runs interleaved, in a shuffled order each round; "
          "page cache warmed by reading every input file before each run; outputs removed and `sync`ed between runs).", ""]
    L += ["| configuration | wall (median) | peak RSS (median) | all walls (s) |", "|---|---:|---:|---|"]
    for k, v in med.items():
        L.append(f"| {k} | {v['wall']:.2f} s | {_gb(v['rss'])} | {', '.join(f'{w:.2f}' for w in v['walls'])} |")
    L.append("")
    rows = []

    def ratio(label, a, b, key, target, better):
        if a in med and b in med:
            r = med[a][key] / med[b][key]
            ok = r >= target if better == "ge" else r <= target
            rows.append(f"| {label} | {r:.2f} | {'>=' if better == 'ge' else '<='} {target} | {'yes' if ok else '**no**'} |")

    ratio("time: transformers / vocabsurgeon (copy)", "transformers", "vocabsurgeon", "wall", 4, "ge")
    ratio("time: transformers / vocabsurgeon --link", "transformers", "vocabsurgeon --link", "wall", 8, "ge")
    ratio("peak RSS: transformers / vocabsurgeon", "transformers", "vocabsurgeon", "rss", 8, "ge")
    ratio("time: vocabsurgeon / floor (copy)", "vocabsurgeon", "floor (copy)", "wall", 1.3, "le")
    ratio("time: vocabsurgeon --link / floor (link)", "vocabsurgeon --link", "floor (link)", "wall", 1.3, "le")
    if "vocabsurgeon" in med:
        bound = res["vocab_matrix_bytes"] + 100 * 2**20
        r = med["vocabsurgeon"]["rss"]
        rows.append(f"| peak RSS of vocabsurgeon, absolute | {_gb(r)} | <= one vocabulary matrix + interpreter "
                    f"({_gb(bound)}) | {'yes' if r <= bound else '**no**'} |")
    L += ["| ratio | measured | target | met |", "|---|---:|---|---|", *rows, ""]
    if many_res:
        L += [f"**Adding {many_res['tokens']:,} tokens in one run** (`--link`, mean init):", ""]
        if "error" in many_res:
            L += [f"- did not finish ({many_res['limits']}): {many_res['error']}", ""]
        else:
            L += [f"- wall {many_res['wall']:.1f} s, peak RSS {_gb(many_res['rss'])}, rows {many_res['rows_before']:,} "
                  f"-> {many_res['rows_after']:,}"]
            for label in ("plain", "with_new_words"):
                e = many_res[label]
                L.append(f"- encode {e['chars']:,} chars ({label.replace('_', ' ')}): {e['before_s']:.3f} s before, "
                         f"{e['after_s']:.3f} s after (x{e['ratio']:.2f}); ids {e['ids_before']:,} -> {e['ids_after']:,}")
            L.append("")
    L += ["Commands measured (each in its own process):", "", "```"]
    L += [f"{k}: {v}" for k, v in res["commands"].items()]
    if many_res:
        L.append(f"many: {many_res['command']}")
    L += ["```", "", END]
    return "\n".join(L)


def write_block(path: Path, block: str, begin: str = BEGIN, end: str = END, heading: str | None = None) -> None:
    """Put `block` (which starts with `begin` and ends with `end`) into the markdown file `path` in
    place of the one between the same markers, keeping the rest; appended under `## heading` when
    missing, the file created when needed. Every bench script writes RESULTS.md this way."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmark results\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + (f"## {heading}\n\n" if heading else "") + block + "\n"
    path.write_text(text, encoding="utf-8")


def uptime() -> str:
    """`uptime`'s line, recorded with every timed run: the machine may be shared."""
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def machine_line() -> str:
    """The machine in a few words, for a table's heading: cores, torch threads, processor."""
    return (f"{os.cpu_count()} cores, torch threads {os.environ.get('OMP_NUM_THREADS', 'default')}, "
            f"{platform.processor() or platform.machine()}")


def load_average(uptime_line: str) -> str:
    """The 1-minute load average of an `uptime` line."""
    return uptime_line.split("load average:")[-1].split(",")[0].strip()


def runs_parser(doc: str, runs: dict) -> argparse.ArgumentParser:
    """The options of a bench that compares init runs on the domain words (`fitted_bench`, `encoder_bench`)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--runs", nargs="*", default=list(runs), choices=list(runs))
    ap.add_argument("--words", type=int, default=100)
    ap.add_argument("--work", type=Path, default=HERE / "work")
    ap.add_argument("--results", type=Path, help="write the table into this markdown file, between the markers")
    ap.add_argument("--json", type=Path, help="write every figure here")
    return ap


def publish(text: str, rows: list, results: Path | None, json_path: Path | None, begin: str, end: str) -> None:
    """A bench table's two outputs: its block of RESULTS.md (between `begin` and `end`) when `results`
    is given, and its rows as JSON when `json_path` is."""
    if results:
        write_block(results, f"{begin}\n{text}\n{end}", begin, end)
    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(rows, indent=2))


def write_results(path: Path, block: str) -> None:
    """This script's block (between BEGIN and END) into `path`."""
    write_block(path, block)


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    """Command line of the benchmark; see the module docstring."""
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="bench.py", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p):
        p.add_argument("--size", choices=SIZES, default="quick")
        p.add_argument("--work", type=Path, default=HERE / "work", help="scratch directory (default bench/work)")

    g = sub.add_parser("generate", help="write the checkpoint")
    common(g)
    for name in ("run", "all"):
        p = sub.add_parser(name, help="measure" if name == "run" else "generate, measure, many tokens, RESULTS.md")
        common(p)
        p.add_argument("--repeats", type=int, default=None, help="runs per configuration (default 3; 1 for tiny)")
        p.add_argument("--skip", action="append", default=[], help="a configuration to leave out (repeatable)")
        p.add_argument("--results", type=Path, default=HERE / "RESULTS.md")
        p.add_argument("--many", type=int, default=None, help="tokens for the many-tokens run (default per size)")
        p.add_argument("--many-timeout", type=float, default=3600)
        p.add_argument("--many-mem-gb", type=float, default=12, help="address-space limit of the many-tokens run")
        p.add_argument("--clean", action="store_true", help="remove the work directory at the end")
    m = sub.add_parser("many", help="add many tokens; encode speed before/after")
    common(m)
    m.add_argument("--many", type=int, default=None)
    m.add_argument("--many-timeout", type=float, default=3600)
    m.add_argument("--many-mem-gb", type=float, default=12)
    t = sub.add_parser("_transformers")
    t.add_argument("src"), t.add_argument("out"), t.add_argument("tokens")
    f = sub.add_parser("_floor")
    f.add_argument("--link", action="store_true"), f.add_argument("src"), f.add_argument("out")
    a = ap.parse_args(argv)

    if a.cmd == "_transformers":
        return transformers_way(a.src, a.out, a.tokens)
    if a.cmd == "_floor":
        return floor(a.src, a.out, a.link)
    a.work.mkdir(parents=True, exist_ok=True)
    if a.cmd == "generate":
        t0 = time.perf_counter()
        p = generate(SIZES[a.size], a.work / f"ckpt-{a.size}")
        print(f"{p}: {_du(p) / 1e9:.2f} GB in {time.perf_counter() - t0:.1f} s")
        return
    if a.cmd == "many":
        print(json.dumps(many(a.size, a.work, a.many, a.many_timeout, a.many_mem_gb), indent=2))
        return
    repeats = a.repeats or (1 if a.size == "tiny" else 3)
    res = run(a.size, a.work, repeats, set(a.skip))
    many_res = many(a.size, a.work, a.many, a.many_timeout, a.many_mem_gb) if a.cmd == "all" and a.many != 0 else None
    block = report(res, many_res, machine(), argv)
    print(block)
    (a.work / f"results-{a.size}.json").write_text(json.dumps({"run": res, "many": many_res}, indent=2))
    write_results(a.results, block)
    if a.clean:
        shutil.rmtree(a.work, ignore_errors=True)


if __name__ == "__main__":
    main()
