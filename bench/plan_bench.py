"""Planning time of `vocabsurgeon add --dry-run` on 50,000 real multilingual words and on 50,000 made-up ones.

    python -m bench.plan_bench words                 # writes bench/work/real-words-50k.txt, prints its sha256
    python -m bench.plan_bench plan [--sizes 10000,20000,50000]

`words` draws a list of real words reproducibly from text that ships with the system and with
Python: the standard library's sources (English prose and code identifiers), glibc's locale
sources (month and day names in hundreds of languages, written as <Uxxxx>), freedesktop's MIME
database (descriptions translated into ~80 languages), vim's tutors (Russian, Greek, Japanese,
Chinese, Korean, ...). Words are grouped by script and taken round-robin, so that no script
crowds out the others, then shuffled with a fixed seed. Sources missing on a machine are skipped
(the sha256 printed then differs from bench/RESULTS.md's).

`plan` builds a checkpoint with a 128,256-id byte-level BPE (the benchmark's, Llama 3 sized) and
tiny rows, and times `vocabsurgeon add --dry-run` in a child process for each list and size.

    python -m bench.plan_bench time [--base 36f3320] [--rounds 3] [--results bench/RESULTS.md]

`time` is issue 38's figure: `plan_tokens` (everything `add` does before the tensor copy: reading the
tokenizer, deciding each word's entries, every check) for the 1,000 made-up words of the add bench, on that
checkpoint and on one with Meta's Llama 3 tokenizer files (fixtures/published.py; its chat template makes the
plan load the tokenizer with transformers), by this tree and by the `--base` revision (unpacked from git into
bench/work/rev-BASE/), each in a child process, interleaved; wall and CPU seconds (user + system, all
threads) of the call and of the whole `add --dry-run --json` command, the load average beside each, and
whether both versions print the same plan. Its block of RESULTS.md is `plan-time`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORK = HERE / "work"
REAL = WORK / "real-words-50k.txt"
SEED = 14
WORD = re.compile(r"[^\W\d_][\w'’-]*\w|[^\W\d_]")


def _sources() -> list[tuple[str, str]]:
    """(name, text) of every source present on this machine, in a fixed order."""
    out = []
    stdlib = Path(sys.base_prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    files = sorted(p for p in stdlib.rglob("*.py") if "site-packages" not in p.parts and "test" not in p.parts)
    out.append(("python stdlib", "\n".join(p.read_text(errors="replace") for p in files[:600])))
    locales = Path("/usr/share/i18n/locales")
    if locales.is_dir():
        # the locales themselves (aa_DJ, ru_RU, ...), not the collation and transliteration tables
        text = "\n".join(p.read_text(errors="replace") for p in sorted(locales.iterdir())
                         if p.is_file() and "_" in p.name and not p.name.startswith(("iso", "translit")))
        text = re.sub(r"<U([0-9A-Fa-f]{4,6})>", lambda m: chr(int(m.group(1), 16)), text)
        out.append(("glibc locales", text))
    mime = Path("/usr/share/mime/packages/freedesktop.org.xml")
    if mime.is_file():
        out.append(("freedesktop mime", mime.read_text(errors="replace")))
    tutors = Path("/usr/share/vim").glob("vim*/tutor/tutor.*.utf-8")
    for p in sorted(tutors):
        out.append((f"vim {p.name}", p.read_text(errors="replace")))
    return out


def _script(word: str) -> str:
    """A coarse script name: the first word of the Unicode name of the word's first letter."""
    for c in word:
        if c.isalpha():
            name = unicodedata.name(c, "UNKNOWN")
            return "CJK" if name.startswith(("CJK", "HIRAGANA", "KATAKANA")) else name.split()[0]
    return "OTHER"


def real_words(n: int = 50_000) -> list[str]:
    """`n` distinct real words from `_sources`, scripts taken round-robin, shuffled with SEED."""
    by_script: dict[str, list[str]] = {}
    seen: set[str] = set()
    for _, text in _sources():
        for w in WORD.findall(text):
            if 2 <= len(w) <= 30 and w not in seen:
                seen.add(w)
                by_script.setdefault(_script(w), []).append(w)
    queues = [by_script[s] for s in sorted(by_script)]
    out: list[str] = []
    i = 0
    while len(out) < n and any(queues):
        for q in queues:
            if i < len(q) and len(out) < n:
                out.append(q[i])
        i += 1
    random.Random(SEED).shuffle(out)
    return out


def _checkpoint(path: Path) -> Path:
    """A Llama-layout checkpoint with the 128,256-id byte-level BPE of bench/common.py and 8-wide rows."""
    from bench.common import build_tokenizer

    if (path / "config.json").exists():
        return path
    path.mkdir(parents=True, exist_ok=True)
    data = build_tokenizer(128_256, 256)
    (path / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    return _narrow_llama(path, 128_256)


def _narrow_llama(path: Path, rows: int, **config) -> Path:
    """Untied 8-wide embedding and lm_head of `rows` random rows, and a Llama config.json (plus `config`), at
    `path` beside its tokenizer files."""
    import numpy as np
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    save_file({"model.embed_tokens.weight": rng.standard_normal((rows, 8), dtype=np.float32),
               "lm_head.weight": rng.standard_normal((rows, 8), dtype=np.float32)},
              str(path / "model.safetensors"), metadata={"format": "pt"})
    (path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": rows, "hidden_size": 8,
        **config, "tie_word_embeddings": False}))
    return path


def dry_run_command(src: Path, words: list[str], name: str, work: Path = WORK) -> list[str]:
    """Write `words` as the tokens file WORK/NAME.txt; the command line of their dry run on `src`."""
    tokens = work / f"{name}.txt"
    tokens.write_text("\n".join(words) + "\n", encoding="utf-8")
    return [sys.executable, "-m", "vocabsurgeon", "add", "--dry-run", "--json", "-q", "--tokens", str(tokens),
            str(src), str(work / "unused-out")]


def time_dry_run(src: Path, words: list[str], name: str) -> dict:
    cmd = dry_run_command(src, words, name)
    t = time.perf_counter()
    r = subprocess.run(cmd, check=False, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{name}: exit {r.returncode}\n{r.stderr[-2000:]}")
    plan = json.loads(r.stdout)
    kept = len({a["token"] for a in plan["added"]})
    return {"list": name, "words": len(words), "seconds": round(wall, 2), "kept": kept,
            "skipped": len(plan["skipped"]), "entries": len(plan["added"])}


def _llama3_checkpoint(path: Path) -> Path:
    """Meta's Llama 3 tokenizer files (tokenizer.json, and tokenizer_config.json with its chat template) with
    8-wide rows: a config transformers loads, so that the plan renders the chat template as on the real model."""
    import shutil

    from bench.common import fixture_module

    if (path / "config.json").exists():
        return path
    files = fixture_module("published").fetch("llama3")
    path.mkdir(parents=True, exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(files / f, path / f)
    return _narrow_llama(path, 128_256, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=2, head_dim=4)


def _revision(rev: str) -> Path:
    """The `vocabsurgeon` package of git revision `rev`, unpacked into WORK/rev-REV/ (once)."""
    import tarfile
    import io

    root = WORK / f"rev-{rev}"
    if not (root / "vocabsurgeon" / "__init__.py").exists():
        repo = HERE.parent
        tar = subprocess.run(["git", "-C", str(repo), "archive", rev, "vocabsurgeon"], check=True,
                             capture_output=True).stdout
        root.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(tar)) as t:
            t.extractall(root, filter="data")
    return root


# the child of `time`: plan_tokens of the vocabsurgeon under sys.argv[1] (its PYTHONPATH, with `python -P`: not the
# working directory's), timed in its own process
_CHILD = """
import json, os, sys, time
import vocabsurgeon
assert vocabsurgeon.__file__.startswith(sys.argv[1]), vocabsurgeon.__file__
from vocabsurgeon.add.plan import AddOptions, open_target, plan_tokens
from vocabsurgeon.add.wordlist import read_tokens_file
words = read_tokens_file(sys.argv[3])
target = open_target(sys.argv[2], AddOptions())
load = os.getloadavg()[0]
w, c = time.perf_counter(), time.process_time()
plan = plan_tokens(target, words)
print(json.dumps({"wall": time.perf_counter() - w, "cpu": time.process_time() - c, "load": load,
                  "entries": len(plan.tokens.new), "skipped": len(plan.tokens.skipped)}))
"""
# the `add --dry-run` command of the vocabsurgeon under sys.argv[1] (its PYTHONPATH, as above)
_COMMAND = ("import sys; root = sys.argv.pop(1); import vocabsurgeon; "
            "assert vocabsurgeon.__file__.startswith(root); sys.argv[0] = 'vocabsurgeon'; "
            "from vocabsurgeon.cli.commands import main; main()")


def time_plans(base: str, rounds: int) -> dict:
    """`plan_tokens` and `add --dry-run` by `base` and by this tree, interleaved (see the module docstring)."""
    import os

    from bench.common import known_words, make_words, measure

    here = HERE.parent
    roots = {base: _revision(base), "this tree": here}
    ckpts = {"bench": _checkpoint(WORK / "plan-ckpt"), "llama3": _llama3_checkpoint(WORK / "plan-llama3")}
    lists = {}
    for name, src in ckpts.items():
        lists[name] = WORK / f"plan-time-{name}.txt"
        lists[name].write_text("\n".join(make_words(1000, 1, known_words(src))) + "\n", encoding="utf-8")
    runs: list[dict] = []
    outputs: dict[tuple[str, str], bytes] = {}
    for r in range(rounds):
        order = list(roots) if r % 2 == 0 else list(roots)[::-1]
        for name, src in ckpts.items():
            for version in order:
                root = str(roots[version])
                env = {**os.environ, "PYTHONPATH": root}
                child = subprocess.run([sys.executable, "-P", "-c", _CHILD, root, str(src), str(lists[name])],
                                       cwd=here, env=env, check=True, capture_output=True, text=True)
                call = json.loads(child.stdout.strip().splitlines()[-1])
                load = os.getloadavg()[0]
                log = WORK / "plan-time.log"
                cmd = ["env", f"PYTHONPATH={root}", sys.executable, "-P", "-c", _COMMAND, root, "add", "--dry-run",
                       "--json", "-q", "--tokens", str(lists[name]), str(src), str(WORK / "unused-out")]
                s = measure(cmd, log)
                outputs[(version, name)] = log.read_bytes()
                runs.append({"round": r + 1, "version": version, "checkpoint": name, "call": call,
                             "command": {"wall": s.wall, "cpu": s.cpu, "load": load}})
                print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    same = {name: outputs[(base, name)] == outputs[("this tree", name)] for name in ckpts}
    return {"base": base, "runs": runs, "same_plan": same, "versions": list(roots)}


def time_report(res: dict, argv: list[str]) -> str:
    """The `plan-time` block of RESULTS.md."""
    from bench.common import machine

    info = machine()
    L = ["<!-- plan-time:begin -->", "",
         f"Generated by `python -m bench.plan_bench {' '.join(argv)}` on {time.strftime('%Y-%m-%d %H:%M')}; "
         f"{info.get('nproc')} cores ({info.get('cpu', '?')}), tokenizers {info.get('tokenizers')}, "
         f"transformers {info.get('transformers')}, vocabsurgeon {info.get('vocabsurgeon commit')}.", "",
         "1,000 made-up words (the add bench's list) into a 128,256-id checkpoint with 8-wide rows: `bench` is the add "
         "bench's byte-level BPE (no chat template: transformers is not imported), `llama3` Meta's Llama 3 files "
         "(its chat template is rendered by transformers, which the plan imports and loads the tokenizer with). "
         "`plan_tokens`: the call alone, in a child process after `open_target`; `add --dry-run`: the whole command "
         "(interpreter start, imports, printing). CPU: user + system seconds of every thread. Each cell: "
         "wall / CPU seconds (load average, 1 min, at the start), one per round; versions interleaved.", "",
         "| checkpoint | version | `plan_tokens` wall / CPU, s (load) | `add --dry-run` wall / CPU, s (load) |",
         "|---|---|---|---|"]
    for name in ("bench", "llama3"):
        for version in res["versions"]:
            rs = [x for x in res["runs"] if x["checkpoint"] == name and x["version"] == version]
            call = ", ".join(f"{x['call']['wall']:.2f} / {x['call']['cpu']:.2f} ({x['call']['load']:.1f})" for x in rs)
            cmd = ", ".join(f"{x['command']['wall']:.2f} / {x['command']['cpu']:.2f} ({x['command']['load']:.1f})"
                            for x in rs)
            label = f"`{version}`" if version != "this tree" else "this tree"
            L.append(f"| {name} | {label} | {call} | {cmd} |")
    L.append("")
    for name, same in res["same_plan"].items():
        L.append(f"- {name}: both versions print {'the same' if same else '**a different**'} `--dry-run --json` plan "
                 f"(byte for byte).")
    L += ["", "<!-- plan-time:end -->"]
    return "\n".join(L)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["words", "plan", "time"])
    ap.add_argument("--sizes", default="10000,20000,50000")
    ap.add_argument("--base", default="36f3320", help="time: the revision compared with this tree")
    ap.add_argument("--rounds", type=int, default=3, help="time: runs of each version, interleaved")
    ap.add_argument("--results", type=Path, default=None, help="time: write the plan-time block into this file")
    args = ap.parse_args(argv)
    WORK.mkdir(exist_ok=True)
    if args.what == "time":
        from bench.common import write_block

        block = time_report(time_plans(args.base, args.rounds), argv)
        print(block)
        if args.results:
            write_block(args.results, block, "<!-- plan-time:begin -->", "<!-- plan-time:end -->")
        return
    if args.what == "words" or not REAL.exists():
        words = real_words()
        REAL.write_text("\n".join(words) + "\n", encoding="utf-8")
        counts: dict[str, int] = {}
        for w in words:
            counts[_script(w)] = counts.get(_script(w), 0) + 1
        print(f"{REAL}: {len(words)} words, sha256 {hashlib.sha256(REAL.read_bytes()).hexdigest()}")
        print("sources:", ", ".join(n for n, _ in _sources()))
        print("scripts:", ", ".join(f"{s} {c}" for s, c in sorted(counts.items(), key=lambda x: -x[1])[:16]))
        if args.what == "words":
            return
    from bench.common import make_words

    src = _checkpoint(WORK / "plan-ckpt")
    real = REAL.read_text(encoding="utf-8").split("\n")[:-1]
    known = set(json.loads((src / "tokenizer.json").read_text())["model"]["vocab"])
    made_up = make_words(50_000, 0, known)
    for n in [int(x) for x in args.sizes.split(",")]:
        for name, words in (("real", real), ("made-up", made_up)):
            print(json.dumps(time_dry_run(src, words[:n], f"{name}-{n}")), flush=True)


if __name__ == "__main__":
    main()
