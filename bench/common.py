"""Helpers shared by the benchmark scripts: the generated checkpoint, child-process timing, RESULTS.md blocks.

Imports neither torch nor transformers at module level: the children a bench measures pay for
their own imports, the parent does not skew them.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
WORK = HERE / "work"  # scratch directory of every bench (git-ignored)
RESULTS = HERE / "RESULTS.md"


def bench_env(env: dict | None = None) -> dict:
    """The environment of a measured child: this checkout first on PYTHONPATH, so that `python -m bench.NAME`
    children and `vocabsurgeon` run this checkout's code wherever the bench was started from."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def module_command(name: str) -> list[str]:
    """The command that runs bench script `name` (`bench.NAME`) in a child process (with `bench_env()`)."""
    return [sys.executable, "-m", f"bench.{name}"]


def fixture_module(name: str) -> ModuleType:
    """fixtures/NAME.py as a module (fixtures/ is a folder of scripts and data, not a package)."""
    spec = importlib.util.spec_from_file_location(f"fixtures_{name}", REPO / "fixtures" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


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
    # Llama-3.2-1B shapes (hidden 2048, 16 layers), untied: 2 x 0.5 GB vocabulary + 16 x 0.13 GB = 3.0 GB.
    "1b": Size(128_256, 2048, 8192, 16, 32, 8, 1_600_000_000),
    # Llama-3-8B shapes, all 32 layers: 2 x 1.05 GB vocabulary + 32 x 0.44 GB = 16.1 GB, in ~5 GB shards as Meta
    # publishes it (4 shards, embedding in the first, lm_head in the last).
    "8b": Size(128_256, 4096, 14336, 32, 32, 8, 5_000_000_000),
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


def known_words(src: Path) -> set[str]:
    """Vocabulary entries as words, with and without the byte-level word-start marker."""
    vocab = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    return set(vocab) | {p[1:] for p in vocab if p.startswith("Ġ")}


# ---------------------------------------------------------------------------------------------
# measure


@dataclass
class Sample:
    """One child process: wall seconds, peak RSS (bytes) and CPU seconds (user + system, its children's too);
    the 1-minute load average when it started; and, for a child `measure` stopped (see `Guard`), why."""

    wall: float
    rss: int
    cpu: float | None = None
    load: float | None = None
    stopped: str | None = None


def read_all(path: Path) -> None:
    """Warm the page cache with every input file, the same way before every run."""
    for p in sorted(path.rglob("*")):
        if p.is_file():
            with open(p, "rb", buffering=0) as f:
                while f.read(64 << 20):
                    pass


def drop(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path)
    for p in path.parent.glob(f".{path.name}.vocabsurgeon-staging-*"):
        shutil.rmtree(p, ignore_errors=True)


@dataclass(frozen=True)
class Guard:
    """Limits under which `measure` stops a child instead of letting it take the machine down: its
    anonymous memory (RssAnon + RssShmem of the child and its descendants: the memory the kernel cannot
    drop, unlike the pages of memory-mapped checkpoint files) above `mem_gib`, the machine's
    MemAvailable below `keep_free_gib`, or a wall time above `timeout_s`. Polled every `every_s`
    by a thread beside the blocking `wait4`, so that the wall time of a child that finishes is as
    exact as without it. A stopped child's Sample says why (`stopped`); its wall time is then a
    lower bound. Neither cgroups (v1 here, owned by the VM's agent) nor `systemd-run` (no bus)
    can be used on the bench machine, and `prlimit --as` counts the mapped checkpoint files."""

    mem_gib: float | None = None
    keep_free_gib: float = 1.5
    timeout_s: float | None = None
    every_s: float = 0.2


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants, from /proc/PID/task/TID/children."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def _anon_bytes(pids: list[int]) -> int:
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/status") as f:
                total += sum(int(l.split()[1]) * 1024 for l in f if l.startswith(("RssAnon:", "RssShmem:")))
        except OSError:
            pass
    return total


def mem_available() -> int:
    with open("/proc/meminfo") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("MemAvailable:"))


def _watch(proc: subprocess.Popen, guard: Guard, t0: float, done, verdict: dict) -> None:
    """The guard's thread: stop `proc`'s process group (started in its own session) past a limit."""
    import signal

    peak = 0
    while not done.wait(guard.every_s):
        pids = _tree(proc.pid)
        anon = _anon_bytes(pids)
        peak = max(peak, anon)
        verdict["peak_anon"] = peak
        why = None
        if guard.mem_gib is not None and anon > guard.mem_gib * 2**30:
            why = f"its anonymous memory reached {anon / 2**30:.1f} GiB (limit {guard.mem_gib:g} GiB)"
        elif mem_available() < guard.keep_free_gib * 2**30:
            why = (f"the machine's available memory fell under {guard.keep_free_gib:g} GiB "
                   f"(the child's anonymous memory {anon / 2**30:.1f} GiB)")
        elif guard.timeout_s is not None and time.perf_counter() - t0 > guard.timeout_s:
            why = f"not finished within {guard.timeout_s:g} s (anonymous memory {anon / 2**30:.1f} GiB)"
        if why:
            verdict["stopped"] = f"stopped after {time.perf_counter() - t0:.0f} s: {why}"
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return


def measure(cmd: list[str], log: Path, env: dict | None = None, guard: Guard | None = None) -> Sample:
    """Run `cmd` in its own process; wall time and the child's own peak RSS.

    The child is started by GNU time (a ~2 MB process) when it is installed: Linux carries a
    process's RSS high-water mark across exec, so a child forked straight from this Python
    process would inherit this process's peak (numpy, tokenizers) as its own.
    With a `guard`, a child past its limits is killed and reported (`Sample.stopped`), not raised.
    """
    import threading

    gnu_time = Path("/usr/bin/time")
    rss_file = log.with_suffix(".rss")
    full = [str(gnu_time), "-q", "-f", "%M", "-o", str(rss_file)] + cmd if gnu_time.exists() else cmd
    load = os.getloadavg()[0]
    verdict: dict = {}
    with open(log, "wb") as lf:
        t0 = time.perf_counter()
        proc = subprocess.Popen(full, stdout=lf, stderr=subprocess.STDOUT, env=bench_env(env),
                                start_new_session=guard is not None)
        done = threading.Event()
        watcher = threading.Thread(target=_watch, args=(proc, guard, t0, done, verdict)) if guard else None
        if watcher:
            watcher.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        done.set()
        if watcher:
            watcher.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime  # wait4 counts the child's reaped children (GNU time's child)
    if "stopped" in verdict:
        return Sample(wall, max(usage.ru_maxrss * 1024, verdict.get("peak_anon", 0)), cpu, load, verdict["stopped"])
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        if proc.returncode < 0 or proc.returncode == 137 or "Killed" in tail[-200:]:
            # killed from outside (the kernel's OOM killer): a result, not a failure of the bench
            anon = verdict.get("peak_anon", 0) / 2**30
            why = f"killed (exit {proc.returncode}) after {wall:.0f} s; anonymous memory {anon:.1f} GiB"
            if guard is not None:
                return Sample(wall, usage.ru_maxrss * 1024, cpu, load, why)
        raise SystemExit(f"bench: {' '.join(cmd)} exited {proc.returncode}; its output:\n{tail}")
    if gnu_time.exists():
        return Sample(wall, int(rss_file.read_text().split()[-1]) * 1024, cpu, load)
    return Sample(wall, usage.ru_maxrss * 1024, cpu, load)


def vocabsurgeon_command() -> list[str]:
    exe = shutil.which("vocabsurgeon")
    return [exe] if exe else [sys.executable, "-m", "vocabsurgeon"]


def has_no_validate() -> bool:
    out = subprocess.run(vocabsurgeon_command() + ["add", "--help"], capture_output=True, text=True).stdout
    return "--no-validate" in out



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


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


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


# ---------------------------------------------------------------------------------------------
# report


def gb(b: float) -> str:
    return f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / 2**20:.0f} MiB"


def write_block(path: Path, block: str, begin: str, end: str, heading: str | None = None) -> None:
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
    ap.add_argument("--work", type=Path, default=WORK)
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


