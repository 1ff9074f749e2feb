"""The add benchmark: vocabsurgeon add vs the transformers way vs the copy floor, on a generated Llama checkpoint.

    python -m bench.add_bench all --size full --repeats 3
    python -m bench.add_bench all --size tiny --work /tmp/b --results /tmp/b/RESULTS.md

Subcommands: `generate` (the checkpoint), `run` (time each way in its own process, medians), `many`
(50,000 tokens in one run; encode speed before and after), `all` (the three, then its RESULTS.md block).
`run` and `all` end with one `python -m tools.phases` run of `add` and of `add --no-fsync`: the time
split (plan, copy, init, write, fsync, verify) goes into the block, so that a slower phase shows.
Sizes: `8b` (~16 GB, Llama-3-8B's shapes and shards), `full` (~6 GB, its 9 first layers), `1b` (~3 GB,
hidden 2048), `quick` (~0.5 GB), `tiny` (a few MB, seconds: tests/benchmarks/test_bench.py).
The transformers way runs under a memory guard (`--transformers-mem-gib`, `--transformers-timeout`):
past it the child is killed and the block says so ("stopped after N s: ..."), its time a lower bound.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.common import (SIZES, WORK, RESULTS, Guard, Sample, bench_env, drop, du, gb, generate, has_no_validate,
                          known_words, machine, make_words, measure, module_command, read_all, sample_text,
                          vocabsurgeon_command, write_block)

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def commands(src: Path, out: Path, tokens: Path) -> dict[str, list[str]]:
    """The measured commands, by configuration name."""
    vs = vocabsurgeon_command() + ["add", "--tokens", str(tokens), "--init", "mean", "-q"]
    if has_no_validate():
        vs.append("--no-validate")
    me = module_command("add_bench")
    gpu = {"transformers (cuda)": me + ["_transformers", "--device", "cuda", str(src), str(out), str(tokens)]} \
        if _cuda() else {}  # where users have a GPU they load the model onto it: that way is timed too
    return {
        "transformers": me + ["_transformers", str(src), str(out), str(tokens)],
        **gpu,
        "vocabsurgeon": vs + [str(src), str(out)],
        "vocabsurgeon --no-fsync": vs + ["--no-fsync", str(src), str(out)],
        "vocabsurgeon --link": vs + ["--link", str(src), str(out)],
        "floor (copy)": me + ["_floor", str(src), str(out)],
        "floor (link)": me + ["_floor", "--link", str(src), str(out)],
        # what a user's copy costs: sync flushes every dirty page of the machine, not only these
        "cp -r + sync": ["sh", "-c", 'cp -r "$0" "$1" && sync', str(src), str(out)],
    }


# The steps tools/phases.py times, by what they do. Reads are inside "copy" (the old bytes, copy_file_range)
# and "init" (the statistics stream the old rows); "write" is the new rows, the tokenizer, config, index, card.
PHASE_KIND = {"plan_tokens": "plan", "copy_old_bytes": "copy", "copy_file": "copy", "row_stats": "init",
              "all_new_rows": "init",
              "write_rows": "write", "write_metadata_files": "write", "copy_other_files": "write",
              "record": "write", "fsync": "fsync", "fdatasync": "fsync", "verify_tokenizer": "verify",
              "verify_rows": "verify", "verify_checkpoint": "verify", "rows_kept": "verify"}
KINDS = ("plan", "copy", "init", "write", "fsync", "verify")


def phases(src: Path, out: Path, tokens: Path, extra: list[str]) -> dict:
    """One `python -m tools.phases add ... EXTRA` run: every timed step (name, thread, start, seconds) and
    the wall time each kind of step kept busy (the union of its intervals, over all threads)."""
    drop(out)
    os.sync()
    read_all(src)
    cmd = [sys.executable, "-m", "tools.phases", "add", "--tokens", str(tokens), "--init", "mean", "-q"]
    cmd += (["--no-validate"] if has_no_validate() else []) + extra + [str(src), str(out)]
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(cmd, capture_output=True, text=True, env=bench_env(), check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    drop(out)
    if r.returncode != 0:
        raise SystemExit(f"bench: {' '.join(cmd)} exited {r.returncode}:\n{r.stderr[-3000:]}")
    steps, total = [], None
    for line in r.stderr.splitlines():
        f = line.split()
        if len(f) == 3 and f[0] == "total":
            total = float(f[2])
        elif len(f) == 4 and f[0] in PHASE_KIND:
            steps.append({"step": f[0], "thread": f[1], "start": float(f[2]), "seconds": float(f[3])})
    busy = {}
    for kind in KINDS:
        spans = sorted((s["start"], s["start"] + s["seconds"]) for s in steps if PHASE_KIND[s["step"]] == kind)
        t, end = 0.0, None
        for a, b in spans:
            if end is None or a > end:
                t += b - a
                end = b
            elif b > end:
                t += b - end
                end = b
        busy[kind] = t
    return {"extra": " ".join(extra), "steps": steps, "total": total, "busy": busy, "load": load,
            "load_after": os.getloadavg()[0], "cpu": cpu, "command": " ".join(cmd)}


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def transformers_way(src: str, out: str, tokens_file: str, device: str = "cpu") -> None:
    """What users do without vocabsurgeon: load (onto `device`), add_tokens, resize (mean_resizing), save."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    words = Path(tokens_file).read_text(encoding="utf-8").split("\n")
    tok = AutoTokenizer.from_pretrained(src)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16, device_map=None if device == "cpu" else device)
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


def run(size_name: str, work: Path, repeats: int, skip: set[str], guards: dict[str, Guard] | None = None) -> dict:
    """Generate (if needed) and time every configuration `repeats` times, interleaved; medians and ratios.
    `guards`: the limits (`common.Guard`) a configuration runs under, by name (the transformers way's memory)."""
    size = SIZES[size_name]
    src = work / f"ckpt-{size_name}"
    if not (src / "model.safetensors.index.json").exists():
        t0 = time.perf_counter()
        generate(size, src)
        print(f"generated {src} ({du(src) / 1e9:.2f} GB) in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    vocab = known_words(src)
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
            drop(out)
            os.sync()
            read_all(src)
            s = measure(cmd, work / "child.log", guard=(guards or {}).get(name))
            samples[name].append(s)
            print(f"[{r + 1}/{repeats}] {name}: {s.wall:.2f} s, CPU {s.cpu:.2f} s, {s.rss / 2**20:.0f} MiB, "
                  f"load {s.load:.2f}{', ' + s.stopped if s.stopped else ''}", file=sys.stderr)
            loads.append(os.getloadavg()[0])
    drop(out)
    os.sync()
    split = [phases(src, out, tokens, extra) for extra in ([], ["--no-fsync"])]
    med = {k: {"wall": statistics.median(s.wall for s in v), "rss": statistics.median(s.rss for s in v),
               "cpu": statistics.median(s.cpu for s in v), "walls": [round(s.wall, 3) for s in v],
               "rsss": [s.rss for s in v], "cpus": [round(s.cpu, 2) for s in v], "loads": [round(s.load, 2) for s in v],
               "stopped": [s.stopped for s in v if s.stopped]} for k, v in samples.items()}
    return {"size": size_name, "shape": size.__dict__, "src_bytes": du(src), "shards": len(list(src.glob("*.safetensors"))),
            "vocab_matrix_bytes": size.vocab * size.hidden * 2, "repeats": repeats, "median": med,
            "load": [round(x, 2) for x in loads], "commands": {k: " ".join(v) for k, v in cmds.items()},
            "guards": {k: g.__dict__ for k, g in (guards or {}).items() if k in cmds}, "phases": split}


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
    words = make_words(count, 2, known_words(src))
    tokens = work / f"tokens-many-{count}.txt"
    tokens.write_text("\n".join(words) + "\n", encoding="utf-8")
    out = work / "out-many"
    drop(out)
    cmd = vocabsurgeon_command() + ["add", "--tokens", str(tokens), "--init", "mean", "--link", "-q", "--json"]
    if has_no_validate():
        cmd.append("--no-validate")
    cmd += [str(src), str(out)]
    result = {"tokens": count, "command": " ".join(cmd), "limits": f"timeout {timeout:.0f} s, address space {mem_gb} GiB"}
    try:
        limit = ["prlimit", f"--as={int(mem_gb * 2**30)}"] if mem_gb and shutil.which("prlimit") else []
        s = measure(limit + ["timeout", str(int(timeout))] + cmd, work / "many.log")
    except SystemExit as e:
        lines = [l for l in str(e).splitlines() if l.strip()]
        result["error"] = lines[-1] if len(lines) > 1 else str(e)  # the child's last line says why
        drop(out)
        return result
    summary = json.loads((work / "many.log").read_text())
    result.update(wall=s.wall, rss=s.rss, rows_before=summary["rows_before"], rows_after=summary["rows_after"])
    plain, mixed = sample_text(words, 400_000 if size_name != "tiny" else 20_000, seed=3)
    for label, text in (("plain", plain), ("with_new_words", mixed)):
        before, n_before = encode_seconds(src / "tokenizer.json", text)
        after, n_after = encode_seconds(out / "tokenizer.json", text)
        result[label] = {"chars": len(text), "before_s": before, "after_s": after, "ratio": after / before,
                         "ids_before": n_before, "ids_after": n_after}
    drop(out)
    return result


def markers(block: str = "bench") -> tuple[str, str]:
    """The markers of this script's block in RESULTS.md: `bench` for the figures of record (`--size full`),
    another name (`--block bench-1b`) to keep a run of another size beside them."""
    return f"<!-- {block}:begin -->", f"<!-- {block}:end -->"


def report(res: dict, many_res: dict | None, info: dict, argv: list[str], block: str = "bench") -> str:
    """The markdown block written between the markers of RESULTS.md."""
    med = res["median"]
    begin, end = markers(block)
    L = [begin, "", f"Generated by `python -m bench.add_bench {shlex.join(argv)}` on {time.strftime('%Y-%m-%d %H:%M')}.", ""]
    L += ["**Machine:** " + ", ".join(f"{k} {v}" for k, v in info.items()) + ".", ""]
    sh = res["shape"]
    L += [f"**Checkpoint** (`{res['size']}`): Llama, untied, bf16, vocab {sh['vocab']:,}, hidden {sh['hidden']}, "
          f"{sh['layers']} layers, {gb(res['src_bytes'])} in {res['shards']} shards; "
          f"one vocabulary matrix is {gb(res['vocab_matrix_bytes'])}. {sh['new_tokens']:,} new words, mean init. "
          f"Load average (1 min) during the run: {min(res['load'])}-{max(res['load'])}.", ""]
    L += [f"Medians of {res['repeats']} runs per configuration (runs interleaved, in a shuffled order each round; "
          "page cache warmed by reading every input file before each run; outputs removed and `sync`ed between runs).", ""]
    L += ["| configuration | wall (median) | CPU s (median) | peak RSS (median) | every run: wall s / CPU s (load at start) |",
          "|---|---:|---:|---:|---|"]
    for k, v in med.items():
        runs = ", ".join(f"{w:.2f} / {c:.2f} ({ld:.1f})" for w, c, ld in zip(v["walls"], v.get("cpus", v["walls"]),
                                                                             v.get("loads", [0.0] * len(v["walls"]))))
        L.append(f"| {k} | {v['wall']:.2f} s | {v.get('cpu', 0):.2f} | {gb(v['rss'])} | {runs} |")
    L.append("")
    for k, v in med.items():
        for why in v.get("stopped", []):
            L.append(f"- {k}: {why}; its wall time is a lower bound, its peak RSS what it had reached.")
    if any(v.get("stopped") for v in med.values()):
        guards = ", ".join(f"{k}: " + ", ".join(f"{a} {b}" for a, b in g.items() if b is not None)
                           for k, g in res.get("guards", {}).items())
        L += [f"- limits (`common.Guard`): {guards}", ""]
    rows = []

    def ratio(label, a, b, key, target, better):
        if a in med and b in med:
            r = med[a][key] / med[b][key]
            ok = r >= target if better == "ge" else r <= target
            # a configuration stopped by its guard: its time is a lower bound, so is a ratio over it
            bound = "> " if med[a].get("stopped") and len(med[a]["stopped"]) == len(med[a]["walls"]) else ""
            rows.append(f"| {label} | {bound}{r:.2f} | {'>=' if better == 'ge' else '<='} {target} | "
                        f"{'yes' if ok else '**no**'} |")

    ratio("time: transformers / vocabsurgeon (copy)", "transformers", "vocabsurgeon", "wall", 4, "ge")
    ratio("time: transformers / vocabsurgeon --link", "transformers", "vocabsurgeon --link", "wall", 8, "ge")
    ratio("peak RSS: transformers / vocabsurgeon", "transformers", "vocabsurgeon", "rss", 8, "ge")
    ratio("time: vocabsurgeon / floor (copy)", "vocabsurgeon", "floor (copy)", "wall", 1.3, "le")
    ratio("time: vocabsurgeon --link / floor (link)", "vocabsurgeon --link", "floor (link)", "wall", 1.3, "le")
    if "vocabsurgeon" in med:
        bound = res["vocab_matrix_bytes"] + 100 * 2**20
        r = med["vocabsurgeon"]["rss"]
        rows.append(f"| peak RSS of vocabsurgeon, absolute | {gb(r)} | <= one vocabulary matrix + interpreter "
                    f"({gb(bound)}) | {'yes' if r <= bound else '**no**'} |")
    ratio("time: vocabsurgeon --no-fsync / floor (copy)", "vocabsurgeon --no-fsync", "floor (copy)", "wall", 1.3, "le")
    ratio("time: vocabsurgeon / cp -r + sync", "vocabsurgeon", "cp -r + sync", "wall", 1.3, "le")
    ratio("time: vocabsurgeon --no-fsync / cp -r + sync", "vocabsurgeon --no-fsync", "cp -r + sync", "wall", 1.3, "le")
    ratio("time: transformers / vocabsurgeon --no-fsync", "transformers", "vocabsurgeon --no-fsync", "wall", 1, "ge")
    ratio("time: transformers (cuda) / vocabsurgeon", "transformers (cuda)", "vocabsurgeon", "wall", 1, "ge")
    split = res.get("phases") or []
    if split:  # issue 38: the planning (main thread) under a second for 1,000 words on a 128k vocabulary
        plan = sum(s["seconds"] for s in split[0]["steps"] if s["step"] == "plan_tokens")
        rows.append(f"| planning (`plan_tokens` of `add`, main thread), s | {plan:.2f} | <= 1 | "
                    f"{'yes' if plan <= 1 else '**no**'} |")
    L += ["| ratio | measured | target | met |", "|---|---:|---|---|", *rows, ""]
    L += phase_table(res.get("phases") or [])
    if many_res:
        L += [f"**Adding {many_res['tokens']:,} tokens in one run** (`--link`, mean init):", ""]
        if "error" in many_res:
            L += [f"- did not finish ({many_res['limits']}): {many_res['error']}", ""]
        else:
            L += [f"- wall {many_res['wall']:.1f} s, peak RSS {gb(many_res['rss'])}, rows {many_res['rows_before']:,} "
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
    L += ["```", "", end]
    return "\n".join(L)


def phase_table(split: list[dict]) -> list[str]:
    """The time split of the `tools.phases` runs: busy seconds per kind of step, then every step."""
    if not split:
        return []
    names = [f"`add{' ' + p['extra'] if p['extra'] else ''}`" for p in split]
    L = ["**Where the time goes** (`python -m tools.phases`, one run each, after the runs above; seconds each kind "
         "of step kept busy, over all threads: the copy thread overlaps the main thread's planning and init):", "",
         "| step | " + " | ".join(names) + " |", "|---|" + "---:|" * len(split)]
    for kind in KINDS:
        L.append(f"| {kind} | " + " | ".join(f"{p['busy'][kind]:.2f}" for p in split) + " |")
    L.append("| total (wall) | " + " | ".join(f"{p['total']:.2f}" for p in split) + " |")
    if all("cpu" in p for p in split):
        L.append("| CPU s (user + system, the process) | " + " | ".join(f"{p['cpu']:.2f}" for p in split) + " |")
    L.append("| load average (1 min) | " + " | ".join(f"{p['load']:.2f}" for p in split) + " |")
    L += ["", f"Steps of {names[0]} (thread, start, seconds):", "", "| step | thread | start | seconds |",
          "|---|---|---:|---:|"]
    L += [f"| `{s['step']}` | {s['thread']} | {s['start']:.2f} | {s['seconds']:.2f} |" for s in split[0]["steps"]]
    return L + [""]


def write_results(path: Path, block: str, name: str = "bench") -> None:
    """This script's block (between the markers of `name`) into `path`."""
    write_block(path, block, *markers(name))


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    """Command line of the benchmark; see the module docstring."""
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m bench.add_bench", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p):
        p.add_argument("--size", choices=SIZES, default="quick")
        p.add_argument("--work", type=Path, default=WORK, help="scratch directory (default bench/work)")

    g = sub.add_parser("generate", help="write the checkpoint")
    common(g)
    for name in ("run", "all"):
        p = sub.add_parser(name, help="measure" if name == "run" else "generate, measure, many tokens, RESULTS.md")
        common(p)
        p.add_argument("--repeats", type=int, default=None, help="runs per configuration (default 3; 1 for tiny)")
        p.add_argument("--skip", action="append", default=[], help="a configuration to leave out (repeatable)")
        p.add_argument("--results", type=Path, default=RESULTS)
        p.add_argument("--block", default="bench", help="the block's markers in RESULTS.md (default bench: the "
                       "figures of record; e.g. bench-1b for another size)")
        p.add_argument("--many", type=int, default=None, help="tokens for the many-tokens run (default per size)")
        p.add_argument("--many-timeout", type=float, default=3600)
        p.add_argument("--many-mem-gb", type=float, default=12, help="address-space limit of the many-tokens run")
        p.add_argument("--clean", action="store_true", help="remove the work directory at the end")
        p.add_argument("--transformers-mem-gib", type=float, default=20, help="stop the transformers way when its "
                       "anonymous memory passes this (default 20; the machine's available memory is kept >= 1.5 GiB)")
        p.add_argument("--transformers-timeout", type=float, default=None, help="stop the transformers way after "
                       "this many seconds (its time is then a lower bound)")
    m = sub.add_parser("many", help="add many tokens; encode speed before/after")
    common(m)
    m.add_argument("--many", type=int, default=None)
    m.add_argument("--many-timeout", type=float, default=3600)
    m.add_argument("--many-mem-gb", type=float, default=12)
    t = sub.add_parser("_transformers")
    t.add_argument("--device", default="cpu")
    t.add_argument("src"), t.add_argument("out"), t.add_argument("tokens")
    f = sub.add_parser("_floor")
    f.add_argument("--link", action="store_true"), f.add_argument("src"), f.add_argument("out")
    a = ap.parse_args(argv)

    if a.cmd == "_transformers":
        return transformers_way(a.src, a.out, a.tokens, a.device)
    if a.cmd == "_floor":
        return floor(a.src, a.out, a.link)
    a.work.mkdir(parents=True, exist_ok=True)
    if a.cmd == "generate":
        t0 = time.perf_counter()
        p = generate(SIZES[a.size], a.work / f"ckpt-{a.size}")
        print(f"{p}: {du(p) / 1e9:.2f} GB in {time.perf_counter() - t0:.1f} s")
        return
    if a.cmd == "many":
        print(json.dumps(many(a.size, a.work, a.many, a.many_timeout, a.many_mem_gb), indent=2))
        return
    repeats = a.repeats or (1 if a.size == "tiny" else 3)
    guard = Guard(mem_gib=a.transformers_mem_gib, timeout_s=a.transformers_timeout)
    guards = {"transformers": guard, "transformers (cuda)": guard}
    res = run(a.size, a.work, repeats, set(a.skip), guards)
    many_res = many(a.size, a.work, a.many, a.many_timeout, a.many_mem_gb) if a.cmd == "all" and a.many != 0 else None
    block = report(res, many_res, machine(), argv, a.block)
    print(block)
    (a.work / f"results-{a.size}.json").write_text(json.dumps({"run": res, "many": many_res}, indent=2))
    write_results(a.results, block, a.block)
    if a.clean:
        shutil.rmtree(a.work, ignore_errors=True)


if __name__ == "__main__":
    main()
