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
    import numpy as np
    from safetensors.numpy import save_file

    from bench.common import build_tokenizer

    if (path / "config.json").exists():
        return path
    path.mkdir(parents=True, exist_ok=True)
    data = build_tokenizer(128_256, 256)
    (path / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    rows = 128_256
    rng = np.random.default_rng(0)
    save_file({"model.embed_tokens.weight": rng.standard_normal((rows, 8), dtype=np.float32),
               "lm_head.weight": rng.standard_normal((rows, 8), dtype=np.float32)},
              str(path / "model.safetensors"), metadata={"format": "pt"})
    (path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": rows, "hidden_size": 8,
        "tie_word_embeddings": False}))
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


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["words", "plan"])
    ap.add_argument("--sizes", default="10000,20000,50000")
    args = ap.parse_args(argv)
    WORK.mkdir(exist_ok=True)
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
