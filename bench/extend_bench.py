"""`vocabsurgeon extend` against the recipe users run today, on real Russian and Japanese text, and the learner's speed.

    python -m bench.extend_bench --results bench/RESULTS.md              # compression, N = 1,000 and 8,000
    python -m bench.extend_bench --sizes 32000 --langs ru --results ...  # N = 32,000 rows (the others kept)
    python -m bench.extend_bench --speed --reference 36f3320 --results ...  # 8,000 merges from ~100 MB, and
                                                                            # the same by the learner before (36f3320)

The corpora are real text shipped in Debian packages: the translations of every installed package's messages
(/usr/share/locale/LANG/LC_MESSAGES/*.mo) and the translated manual pages (manpages-ru, manpages-ja,
manpages-ja-dev: `apt-get install manpages-ru manpages-ja manpages-ja-dev`), markup stripped. Every tenth
paragraph is held out and never used to learn. Old text is the English manual pages (man1, the same packages'
own language) and the packaged sample of vocabsurgeon/data/corpus.txt.

For each tokenizer (published GPT-2: byte-level, English-only as SmolLM2's; published Llama 2: SentencePiece BPE
with byte fallback), language and N:
- `extend`: `plan_extend` learns N new tokens; the edited tokenizer is measured as written.
- the recipe: train a BPE of N merges on the same corpus with `tokenizers`' own trainer (the tokenizer's own
  normalizer and pre-tokenizer; SentencePiece: its `SentencePieceBPETokenizer` with byte fallback off), then
  append its pieces that the old vocabulary lacks and their merges after the old ones, as the merge-the-vocabularies
  recipes do (Chinese-LLaMA's merge of SentencePiece models; the same for byte-level merges files).
Measured: held-out tokens per byte (original, extend, extend --keep-text, recipe; for --keep-text and the recipe
also on the new-language paragraphs: those holding a character the keep file lacks), tokens appended, and
old-text paragraphs whose ids changed (with the number holding a character the keep file lacks, the only ones
--keep-text lets change). --speed: word counting and learning 8,000 merges on ~100 MB (every language's messages), wall and
CPU time, peak RSS, with `tokenizers`' own trainer on the same file for scale, and the load average; with
--reference REV, the learner of that revision on the same file, which must give the same words and merges.
"""

from __future__ import annotations

import argparse
import glob
import gettext
import gzip
import json
import re
import resource
import sys
import time
from pathlib import Path

from bench import common as bench

HERE = Path(__file__).resolve().parent
WORK = HERE / "work" / "extend"
BEGIN, END = "<!-- extend:begin -->", "<!-- extend:end -->"
SPEED_BEGIN, SPEED_END = "<!-- extend-speed:begin -->", "<!-- extend-speed:end -->"
_GROFF = re.compile(r"\\f[BIRPC]|\\f\(..|\\\(..|\\[&|^%]|\\s[-+]?\d")


def mo_texts(lang: str) -> list[str]:
    """Every translated message of the installed packages in `lang` (Debian's locale files)."""
    out = []
    for f in sorted(glob.glob(f"/usr/share/locale/{lang}/LC_MESSAGES/*.mo")):
        try:
            with open(f, "rb") as fh:
                catalog = gettext.GNUTranslations(fh)._catalog
        except Exception:  # noqa: BLE001 (a damaged or odd file: left out)
            continue
        out += [v.strip() for k, v in catalog.items() if k and isinstance(v, str) and v.strip()]
    return out


def man_texts(directory: str) -> list[str]:
    """The paragraphs of the manual pages under `directory`, groff requests and font escapes removed."""
    out = []
    for f in sorted(glob.glob(f"{directory}/man*/*.gz")):
        try:
            raw = gzip.open(f).read().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        para: list[str] = []
        for line in raw.splitlines():
            if line.startswith((".", "'")) or not line.strip():
                if para and (not line.strip() or line.startswith((".PP", ".SH", ".SS", ".TP", ".IP", ".LP"))):
                    out.append(" ".join(para))
                    para = []
                continue
            para.append(_GROFF.sub("", line).replace("\\-", "-").replace("\\e", "\\").strip())
        if para:
            out.append(" ".join(para))
    return [p for p in out if len(p) > 20]


def corpus(lang: str) -> tuple[Path, list[str]]:
    """(the learning corpus file, the held-out paragraphs): every tenth paragraph held out."""
    texts = mo_texts(lang) + man_texts(f"/usr/share/man/{lang}")
    if not texts:
        sys.exit(f"no {lang} text: apt-get install manpages-{lang} (and packages with {lang} translations)")
    learn = [t for i, t in enumerate(texts) if i % 10]
    held = [t for i, t in enumerate(texts) if not i % 10]
    WORK.mkdir(parents=True, exist_ok=True)
    path = WORK / f"{lang}.txt"
    text = "\n\n".join(learn)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:  # a run beside this one may be reading it
        path.write_text(text, encoding="utf-8")
    return path, held


def tokens_per_byte(tok, texts: list[str]) -> float:
    from vocabsurgeon.tokenizer.encoding import encode_ids

    return sum(map(len, encode_ids(tok, texts))) / sum(len(t.encode()) for t in texts)


def changed(old, new, texts: list[str]) -> int:
    from vocabsurgeon.tokenizer.encoding import encode_ids

    return sum(a != b for a, b in zip(encode_ids(old, texts), encode_ids(new, texts)))


def recipe(editor, corpus_path: Path, n: int):
    """The recipe: train N merges with `tokenizers` on the corpus, append the missing pieces and their merges."""
    from tokenizers import Tokenizer, models, trainers

    from vocabsurgeon.tokenizer.encoding import merge_parts

    from tokenizers import pre_tokenizers

    data = json.loads(json.dumps(editor.data))
    byte_level = "ByteLevel" in json.dumps(data.get("pre_tokenizer"))
    fresh = Tokenizer(models.BPE(unk_token=None))
    if byte_level:  # the tokenizer's own pipeline
        fresh.normalizer, fresh.pre_tokenizer = editor.tok.normalizer, editor.tok.pre_tokenizer
    else:  # SentencePiece's words, "▁word", as SentencePieceBPETokenizer cuts them
        fresh.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=n + (256 if byte_level else 0), show_progress=False, min_frequency=2,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet() if byte_level else [])
    fresh.train([str(corpus_path)], trainer)
    trained = json.loads(fresh.to_str())["model"]
    vocab, merges = data["model"]["vocab"], data["model"]["merges"]
    as_text = bool(merges) and isinstance(merges[0], str)
    next_id, added = editor.size, 0
    for piece, _ in sorted(trained["vocab"].items(), key=lambda x: x[1]):  # its characters the vocabulary lacks
        if len(piece) == 1 and piece not in vocab:
            vocab[piece], next_id, added = next_id, next_id + 1, added + 1
    for m in trained["merges"]:  # then its merges whose pieces are new, in its order, after the old merges
        a, b = merge_parts(m)
        if a + b not in vocab and a in vocab and b in vocab:
            vocab[a + b], next_id, added = next_id, next_id + 1, added + 1
            merges.append(f"{a} {b}" if as_text else [a, b])
    return Tokenizer.from_str(json.dumps(data)), added


def _published_rows(results: Path | None) -> list[dict]:
    """The rows of the compression table already in `results` (this script's own format), to keep beside new ones."""
    if results is None or not results.exists() or BEGIN not in (text := results.read_text(encoding="utf-8")):
        return []
    rows = []
    for line in text.split(BEGIN, 1)[1].split(END, 1)[0].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) not in (11, 12, 13) or cells[0] not in ("gpt2", "llama2"):
            continue
        num = lambda c: int(c.replace(",", ""))  # noqa: E731
        fresh = cells.pop(8) if len(cells) == 13 else "-"  # 11 or 12 cells: rows from before these columns
        outside = cells.pop(10) if len(cells) == 12 else "-"
        share, kept_new, recipe_new = (None, None, None) if fresh == "-" else (
            float(fresh.split("%")[0]) / 100, *map(float, fresh.split(": ")[1].split(" / ")))
        (ext, rec), (ch, kept, rch), (secs, load) = (cells[8].split(" / "), cells[9].split(" / "),
                                                     cells[10].rstrip(")").split(" ("))
        rows.append({"tokenizer": cells[0], "lang": cells[1], "n": num(cells[2]), "corpus_mb": float(cells[3]),
                     "original": float(cells[4]), "extend": float(cells[5]), "kept": float(cells[6]),
                     "recipe": float(cells[7]), "extend_tokens": num(ext), "recipe_tokens": num(rec),
                     "extend_changed": int(ch), "kept_changed": int(kept), "recipe_changed": int(rch),
                     "seconds": float(secs), "load": load, "outside_keep": None if outside == "-" else num(outside),
                     "held_new_share": share, "kept_new": kept_new, "recipe_new": recipe_new})
    return rows


def _merged(old: list[dict], new: list[dict]) -> list[dict]:
    """`new` rows in place of the `old` ones of the same tokenizer, language and N, in table order."""
    key = lambda r: (r["tokenizer"], r["lang"], r["n"])  # noqa: E731
    fresh = {key(r) for r in new}
    return sorted([r for r in old if key(r) not in fresh] + new,
                  key=lambda r: (["gpt2", "llama2"].index(r["tokenizer"]), ["ru", "ja"].index(r["lang"]), r["n"]))


def compression(sizes: list[int], langs: list[str], results: Path | None = None, json_path: Path | None = None,
                tokenizers: tuple[str, ...] = ("gpt2", "llama2")) -> tuple[str, list[dict]]:
    """Rows for each tokenizer, language of `langs` and N of `sizes`; the rows of other (tokenizer, language, N)
    already in `results` are kept."""
    tiny_llama = bench.fixture_module("published").tiny_llama

    from vocabsurgeon.add.plan import AddOptions, open_target
    from vocabsurgeon.extend.plan import (PACKAGED_CORPUS, ExtendOptions, old_text_changes, outside_keep_text,
                                         paragraphs, plan_extend)
    from vocabsurgeon.tokenizer.encoding import unpadded
    from tokenizers import Tokenizer

    man = man_texts("/usr/share/man")
    WORK.mkdir(parents=True, exist_ok=True)
    keep = WORK / "en-keep.txt"  # --keep-text: half of the English pages; the other half is the old text measured
    keep.write_text("\n\n".join(man[0::2][:2000]), encoding="utf-8")
    english = man[1::2][:2000] + paragraphs(PACKAGED_CORPUS)
    published, rows = _published_rows(results), []
    for name in tokenizers:
        ckpt = WORK / f"ckpt-{name}"
        if not (ckpt / "config.json").exists():
            tiny_llama(name, ckpt)
        for lang in langs:
            path, held = corpus(lang)
            for n in sizes:
                t0 = time.perf_counter()
                plan = plan_extend(open_target(ckpt, AddOptions()), ExtendOptions(path, n))
                seconds = time.perf_counter() - t0
                old = plan.tokens.original
                new = unpadded(Tokenizer.from_str(json.dumps(plan.editor.edited(plan.tokens))))
                kept = plan_extend(open_target(ckpt, AddOptions()), ExtendOptions(path, n, keep))
                new_kept = unpadded(Tokenizer.from_str(json.dumps(kept.editor.edited(kept.tokens))))
                # only old text holding a character (byte) that the keep file lacks can change under --keep-text
                held_old = old_text_changes(old, new_kept, "English", english, kept.keep_chars, kept.split)
                rec, appended = recipe(plan.editor, path, n)
                # the held-out paragraphs that --keep-text lets change: those holding a character (byte) the keep file
                # lacks; the others (English messages left untranslated, code) keep the original's tokens
                fresh = [t for t, o in zip(held, outside_keep_text(old, held, kept.keep_chars, kept.split)) if o]
                row = {"tokenizer": name, "lang": lang, "n": n, "corpus_mb": round(path.stat().st_size / 1e6, 1),
                       "original": tokens_per_byte(old, held), "extend": tokens_per_byte(new, held),
                       "recipe": tokens_per_byte(rec, held), "extend_tokens": len(plan.tokens.new),
                       "kept": tokens_per_byte(new_kept, held), "kept_changed": held_old.changed,
                       "recipe_tokens": appended, "extend_changed": changed(old, new, english),
                       "recipe_changed": changed(old, rec, english), "old_texts": len(english),
                       "outside_keep": held_old.outside, "kept_changed_inside_keep": held_old.inside_changed,
                       "kept_refused": kept.learned.refused,
                       "held_new_share": sum(len(t.encode()) for t in fresh) / sum(len(t.encode()) for t in held),
                       "kept_new": tokens_per_byte(new_kept, fresh), "recipe_new": tokens_per_byte(rec, fresh),
                       "seconds": round(seconds, 1), "load": bench.load_average(bench.uptime())}
                print(row, flush=True)
                rows.append(row)
                table = _merged(published, rows)
                bench.publish(_table(table, len(english)), table, results, json_path, BEGIN, END)  # row by row
    return _table(_merged(published, rows), len(english)), rows


def _table(rows: list[dict], n_old: int) -> str:
    lines = [f"Held-out tokens per byte (lower is better) and old-text paragraphs whose ids changed, "
             f"{bench.machine_line()}. Old text: {n_old:,} paragraphs of English manual pages and the packaged "
             "sample; `--keep-text`: 2,000 other paragraphs of the English pages. Old text outside the keep file: "
             "paragraphs holding a byte (gpt2) or character (llama2) that the keep file lacks, the only ones that "
             "`--keep-text` lets change. New-language text: the held-out paragraphs holding such a character (byte), "
             "their share of the held-out bytes, and their tokens per byte (the rest, English left untranslated or "
             "code, keeps the original's tokens under `--keep-text`)."
             + (" (- : a row measured before `--keep-text` kept text by its characters, when it kept only the file's "
                "pairs.)" if any(r.get("kept_new") is None for r in rows) else ""),
             "", "| tokenizer | text | N | corpus MB | original | extend | extend --keep-text | recipe | new-language "
             "text: share, --keep-text / recipe | tokens added (extend / recipe) | old text changed (extend / "
             "--keep-text / recipe) | old text outside the keep file | extend s (load) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        outside = "-" if r.get("outside_keep") is None else f"{r['outside_keep']:,}"
        fresh = "-" if r.get("kept_new") is None else \
            f"{100 * r['held_new_share']:.0f}%: {r['kept_new']:.4f} / {r['recipe_new']:.4f}"
        lines.append(f"| {r['tokenizer']} | {r['lang']} | {r['n']:,} | {r['corpus_mb']} | {r['original']:.4f} | "
                     f"{r['extend']:.4f} | {r['kept']:.4f} | {r['recipe']:.4f} | {fresh} | {r['extend_tokens']:,} / "
                     f"{r['recipe_tokens']:,} | {r['extend_changed']} / {r['kept_changed']} / {r['recipe_changed']} | "
                     f"{outside} | {r['seconds']} ({r['load']}) |")
    return "\n".join(lines)


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)  # every thread of the process: the Rust pools' too
    return r.ru_utime + r.ru_stime


def reference_learner(rev: str):
    """vocabsurgeon/extend/learn.py as it was at git revision `rev`, as a module (its own counting and learning)."""
    import subprocess
    import types

    src = subprocess.run(["git", "-C", str(HERE.parent), "show", f"{rev}:vocabsurgeon/extend/learn.py"],
                         capture_output=True, text=True, check=True).stdout
    module = types.ModuleType("vocabsurgeon.extend._reference_learn")
    module.__package__ = "vocabsurgeon.extend"  # its relative imports resolve to today's package
    sys.modules[module.__name__] = module
    exec(compile(src, f"{rev}:vocabsurgeon/extend/learn.py", "exec"), module.__dict__)
    return module


def speed(mb: int, n: int, reference: str | None = None) -> tuple[str, list[dict]]:
    """Count and learn `n` merges on ~`mb` MB of every language's messages, with the GPT-2 tokenizer; then
    `tokenizers`' own trainer on the same file; with `reference`, the learner of that git revision on the same
    file, whose words (in order) and merges (in order, with their counts) must be the same."""
    fetch = bench.fixture_module("published").fetch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from vocabsurgeon.corpus import count_words
    from vocabsurgeon.extend.learn import learn_merges

    WORK.mkdir(parents=True, exist_ok=True)
    path = WORK / "all-languages.txt"
    if not path.exists() or path.stat().st_size < mb * 1e6 * 0.9:
        with open(path, "w", encoding="utf-8") as f:
            size = 0
            for lang in sorted(p.split("/")[-1] for p in glob.glob("/usr/share/locale/*")):
                for t in mo_texts(lang):
                    size += f.write(t + "\n\n")
                if size >= mb * 1e6:
                    break
    tok = Tokenizer.from_file(str(fetch("gpt2") / "tokenizer.json"))
    vocab = tok.get_vocab()
    up0 = bench.uptime()
    c0, t0 = _cpu(), time.perf_counter()
    words, n_bytes = count_words(tok, path)
    c1, t1 = _cpu(), time.perf_counter()
    learned = learn_merges(tok, words, n, vocab=vocab, mergeable=lambda p: True)
    c2, t2 = _cpu(), time.perf_counter()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    up1 = bench.uptime()
    fresh = Tokenizer(models.BPE())
    fresh.normalizer, fresh.pre_tokenizer = tok.normalizer, tok.pre_tokenizer
    c3, t3 = _cpu(), time.perf_counter()
    fresh.train([str(path)], trainers.BpeTrainer(vocab_size=256 + n, show_progress=False, min_frequency=2,
                                                 initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    c4, t4 = _cpu(), time.perf_counter()
    up2 = bench.uptime()
    row = {"mb": round(n_bytes / 1e6, 1), "distinct_words": learned.words, "merges": len(learned.merges),
           "count_s": round(t1 - t0, 1), "count_cpu_s": round(c1 - c0, 1), "learn_s": round(t2 - t1, 1),
           "learn_cpu_s": round(c2 - c1, 1), "peak_rss": rss, "tokenizers_train_s": round(t4 - t3, 1),
           "tokenizers_train_cpu_s": round(c4 - c3, 1),
           "load": f"{bench.load_average(up0)} -> {bench.load_average(up1)} -> {bench.load_average(up2)}"}
    if reference:
        old = reference_learner(reference)
        c5, t5 = _cpu(), time.perf_counter()
        # revisions before the corpus module counted words in learn.py; later ones count as today
        old_words, _ = getattr(old, "count_words", count_words)(tok, path)
        c6, t6 = _cpu(), time.perf_counter()
        old_learned = old.learn_merges(tok, old_words, n, vocab=vocab, mergeable=lambda p: True)
        c7, t7 = _cpu(), time.perf_counter()
        row.update({"reference": reference, "reference_count_s": round(t6 - t5, 1),
                    "reference_count_cpu_s": round(c6 - c5, 1), "reference_learn_s": round(t7 - t6, 1),
                    "reference_learn_cpu_s": round(c7 - c6, 1), "reference_load": bench.load_average(bench.uptime()),
                    "same_words": list(old_words.items()) == list(words.items()),
                    "same_merges": (old_learned.merges, old_learned.counts, old_learned.refused,
                                    old_learned.tokens_after) == (learned.merges, learned.counts, learned.refused,
                                                                  learned.tokens_after)})
    print(row, flush=True)
    lines = [
        f"`extend`'s learner on {row['mb']} MB of real text (every installed package's translated messages, all "
        f"languages) with the GPT-2 tokenizer, {bench.machine_line()}; load average {row['load']} (before counting, "
        "after learning, after the `tokenizers` trainer). Seconds are wall (CPU: user + sys of every thread):", "",
        "| MB | distinct words | merges | counting s | learning s | total s | peak RSS | `tokenizers` trainer from "
        "scratch, same file and merges (Rust, all cores) s |", "|---|---|---|---|---|---|---|---|",
        f"| {row['mb']} | {row['distinct_words']:,} | {row['merges']:,} | {row['count_s']} ({row['count_cpu_s']}) | "
        f"{row['learn_s']} ({row['learn_cpu_s']}) | {round(row['count_s'] + row['learn_s'], 1)} "
        f"({round(row['count_cpu_s'] + row['learn_cpu_s'], 1)}) | {bench.gb(rss)} | {row['tokenizers_train_s']} "
        f"({row['tokenizers_train_cpu_s']}) |"]
    if reference:
        lines += ["", f"The learner of `{reference}` (the one before) on the same file, in the same run: counting "
                  f"{row['reference_count_s']} s ({row['reference_count_cpu_s']} CPU), learning "
                  f"{row['reference_learn_s']} s ({row['reference_learn_cpu_s']} CPU), load "
                  f"{row['reference_load']}; the same words in the same order: {row['same_words']}; the same merges "
                  f"in the same order with the same counts: {row['same_merges']}."]
    return "\n".join(lines), [row]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[1000, 8000])
    ap.add_argument("--speed", action="store_true", help="the learner's speed on ~100 MB instead")
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--reference", metavar="REV", help="--speed: also run the learner of this git revision on the "
                    "same file and check that its words and merges are the same")
    ap.add_argument("--langs", nargs="*", default=["ru", "ja"], choices=["ru", "ja"])
    ap.add_argument("--tokenizers", nargs="*", default=["gpt2", "llama2"], choices=["gpt2", "llama2"])
    ap.add_argument("--results", type=Path, help="write the table into this markdown file, between the markers")
    ap.add_argument("--json", type=Path, help="write every figure here")
    args = ap.parse_args()
    if args.speed:
        text, rows = speed(args.mb, 8000, args.reference)
        bench.publish(text, rows, args.results, args.json, SPEED_BEGIN, SPEED_END)
    else:
        text, rows = compression(args.sizes, args.langs, args.results, args.json, tuple(args.tokenizers))
    print(text)


if __name__ == "__main__":
    main()
