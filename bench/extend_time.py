"""`extend`'s time against `add`'s for the same number of new rows (issue 40: "the whole `extend` within 1.5x of
`add`'s time for the same number of rows otherwise").

    python -m bench.extend_time --results bench/RESULTS.md            # 1b checkpoint, 8,000 rows, ~5 min
    python -m bench.extend_time --size tiny --rows 50 --repeats 1     # seconds

The checkpoint is add_bench's generated one (`--size 1b`: Llama-3.2-1B shapes, untied, bf16, 128,256 x 2048,
3.0 GB; its byte-level BPE was trained on the standard library's sources, so Russian is new to it). The corpus is
extend_bench's Russian learning file (Debian's translated messages and manual pages, 7.7 MB; `--corpus`
another). Each in its own
process, interleaved, page cache warm, `--init mean --no-validate`:

- `extend --corpus ru.txt --new-tokens N`: learns N merges, then writes N rows;
- `add --tokens words.txt`: the corpus's most frequent Russian words, as many as give N new rows (`add` skips a
  word that would re-split another: the list is cut where `add --dry-run` adds exactly N);
- both with `--dry-run` (planning only: `extend`'s counting and learning, `add`'s planning), so that the rest,
  the whole run less its dry run, is the writing of the same number of rows by the same surgery.

Reported: medians of wall and CPU seconds (user + system), peak RSS, and the ratios extend / add for the whole
run and for the rest.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from bench import common
from bench.extend_bench import corpus

BEGIN, END = "<!-- extend-time:begin -->", "<!-- extend-time:end -->"
_RU_WORD = re.compile(r"[а-яё]+(?:-[а-яё]+)*", re.IGNORECASE)


def frequent_words(path: Path) -> list[str]:
    """The corpus's Russian words, most frequent first (ties: first seen)."""
    counts = Counter(_RU_WORD.findall(path.read_text(encoding="utf-8")))
    return [w for w, c in counts.most_common() if len(w) > 1 and c > 1]


def dry_run(cmd: list[str]) -> dict:
    """The `--json` plan of a `--dry-run` command."""
    out = subprocess.run(cmd + ["--dry-run", "--json", "-q"], capture_output=True, text=True, env=common.bench_env())
    if out.returncode != 0:
        raise SystemExit(f"bench: {' '.join(cmd)} --dry-run exited {out.returncode}: {out.stderr[-2000:]}")
    return json.loads(out.stdout)


def added_rows(src: Path, words: list[str], tokens: Path) -> tuple[int, dict[str, int]]:
    """(new rows, rows per word added: a word may give two, its bare and its " word" form) of `add --dry-run`."""
    tokens.write_text("\n".join(words) + "\n", encoding="utf-8")
    d = dry_run(common.vocabsurgeon_command() + ["add", "--tokens", str(tokens), "--init", "mean", str(src),
                                                 str(tokens.with_suffix(".out"))])
    return d["rows_after"] - d["rows_before"], Counter(a["token"] for a in d["added"])


def words_for_rows(src: Path, words: list[str], n: int, tokens: Path) -> list[str]:
    """Words of `words`, in order, that `add` turns into exactly `n` new rows: each word's rows are read from a
    dry run of a longer list, words are taken while they fit, and the list is checked by its own dry run (a
    word's skip depends on the others)."""
    pool = words[:n]
    for _ in range(8):
        _, per = added_rows(src, pool, tokens)
        chosen, total = [], 0
        for w in pool:
            if per.get(w) and total + per[w] <= n:
                chosen.append(w)
                total += per[w]
        rows, _ = added_rows(src, chosen, tokens)
        if rows == n:
            return chosen
        pool = words[:int(len(pool) * 1.5) + 1]
    raise SystemExit(f"bench: could not find a word list that adds exactly {n} rows (last: {rows})")


def run(size_name: str, n: int, repeats: int, work: Path, ru: Path | None = None) -> dict:
    src = work / f"ckpt-{size_name}"
    if not (src / "model.safetensors.index.json").exists():
        common.generate(common.SIZES[size_name], src)
    ru = ru or corpus("ru")[0]
    tokens = work / f"tokens-extend-time-{n}.txt"
    words = words_for_rows(src, frequent_words(ru), n, tokens)
    tokens.write_text("\n".join(words) + "\n", encoding="utf-8")
    out = work / "out-extend-time"
    vs = common.vocabsurgeon_command()
    tail = ["--init", "mean", "--no-validate", "--device", "cpu", "-q", str(src), str(out)]
    runs = {"extend": vs + ["extend", "--corpus", str(ru), "--new-tokens", str(n)] + tail,
            "add": vs + ["add", "--tokens", str(tokens)] + tail,
            "extend --dry-run": vs + ["extend", "--corpus", str(ru), "--new-tokens", str(n), "--dry-run"] + tail,
            "add --dry-run": vs + ["add", "--tokens", str(tokens), "--dry-run"] + tail}
    samples: dict[str, list] = {k: [] for k in runs}
    loads = [round(os.getloadavg()[0], 2)]
    for r in range(repeats):
        for label in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
            common.drop(out)
            os.sync()
            common.read_all(src)
            s = common.measure(runs[label], work / "extend-time.log")
            samples[label].append(s)
            loads.append(round(os.getloadavg()[0], 2))
            print(f"[{r + 1}/{repeats}] {label}: {s.wall:.2f} s, CPU {s.cpu:.2f} s, {s.rss / 2**20:.0f} MiB, "
                  f"load {loads[-1]}", file=sys.stderr, flush=True)
    common.drop(out)
    planned = dry_run(runs["extend"])
    rows = {"extend": planned["rows_after"] - planned["rows_before"], "add": added_rows(src, words, tokens)[0]}
    return {"size": size_name, "shape": common.SIZES[size_name], "bytes": common.du(src), "rows": n,
            "words": len(words), "corpus_bytes": ru.stat().st_size, "load": (min(loads), max(loads)),
            "checked_rows": rows,
            "wall": {k: statistics.median(s.wall for s in v) for k, v in samples.items()},
            "walls": {k: [round(s.wall, 2) for s in v] for k, v in samples.items()},
            "cpu": {k: statistics.median(s.cpu for s in v) for k, v in samples.items()},
            "rss": {k: statistics.median(s.rss for s in v) for k, v in samples.items()}}


def report(d: dict, argv: list[str]) -> str:
    s, w, c = d["shape"], d["wall"], d["cpu"]
    L = [BEGIN, "", f"Generated by `python -m bench.extend_time {' '.join(argv)}` on {time.strftime('%Y-%m-%d %H:%M')}.",
         "", "**Machine:** " + ", ".join(f"{k} {v}" for k, v in common.machine().items()) + ".", "",
         f"{d['rows']:,} new rows on the generated {d['size']} checkpoint (Llama, untied, bf16, vocab {s.vocab:,}, "
         f"hidden {s.hidden}, {s.layers} layers, {common.gb(d['bytes'])}; byte-level BPE from the standard library's "
         f"sources): `extend` learns them from the Russian corpus ({d['corpus_bytes'] / 1e6:.1f} MB, Debian's "
         f"translated messages and manual pages unless `--corpus`), `add` takes "
         f"the corpus's {d['words']:,} most frequent Russian words that give as many rows. `--init mean "
         f"--no-validate --device cpu`, each in its own process, interleaved, page cache warm; load average "
         f"{d['load'][0]}-{d['load'][1]}:", "",
         "| run | wall (median) | all walls (s) | CPU s (median) | peak RSS (median) |", "|---|---:|---|---:|---:|"]
    for k in w:
        L.append(f"| `{k}` | {w[k]:.2f} s | {', '.join(map(str, d['walls'][k]))} | {c[k]:.2f} | "
                 f"{common.gb(d['rss'][k])} |")
    rest_e, rest_a = w["extend"] - w["extend --dry-run"], w["add"] - w["add --dry-run"]
    L += ["", "| ratio extend / add | wall | CPU |", "|---|---:|---:|",
          f"| whole run | **{w['extend'] / w['add']:.2f}** | {c['extend'] / c['add']:.2f} |",
          f"| the rest (run less its dry run: writing the rows) | **{rest_e / rest_a:.2f}** | "
          f"{(c['extend'] - c['extend --dry-run']) / (c['add'] - c['add --dry-run']):.2f} |",
          "", f"Rows: extend {d['checked_rows']['extend']:,}, add {d['checked_rows']['add']:,} "
          "(`add --dry-run --json` of the word list).", "", END]
    return "\n".join(L)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m bench.extend_time", description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=list(common.SIZES), default="1b")
    ap.add_argument("--rows", type=int, default=8000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--work", type=Path, default=common.WORK)
    ap.add_argument("--corpus", type=Path, help="the Russian corpus (default: extend_bench's learning file)")
    ap.add_argument("--results", type=Path, help="write the block into this markdown file, between its markers")
    a = ap.parse_args(argv)
    a.work.mkdir(parents=True, exist_ok=True)
    text = report(run(a.size, a.rows, a.repeats, a.work, a.corpus), argv)
    print(text)
    if a.results:
        common.write_block(a.results, text, BEGIN, END,
                           heading="extend's time against add's for the same rows (issue 40)")


if __name__ == "__main__":
    main()
