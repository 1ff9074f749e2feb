"""`vocabsurgeon extend` against the recipe users run today, on real Russian and Japanese text, and the learner's speed.

    python -m bench.extend_bench --results bench/RESULTS.md              # compression, N = 1,000 and 8,000
    python -m bench.extend_bench --sizes 1000 8000 32000 --results ...   # and 32,000
    python -m bench.extend_bench --speed --results bench/RESULTS.md      # 8,000 merges from ~100 MB

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
Measured: held-out tokens per byte (original, extend, recipe), tokens appended, and old-text paragraphs whose
ids changed. --speed: word counting and learning 8,000 merges on ~100 MB (every language's messages), with
`tokenizers`' own trainer on the same file for scale, and the load average.
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

    from vocabsurgeon.trim.tokenizer import merge_parts

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


def compression(sizes: list[int], results: Path | None = None, json_path: Path | None = None) -> tuple[str, list[dict]]:
    tiny_llama = bench.fixture_module("published").tiny_llama

    from vocabsurgeon.add.plan import AddOptions, open_target
    from vocabsurgeon.extend.plan import PACKAGED_CORPUS, ExtendOptions, paragraphs, plan_extend
    from vocabsurgeon.tokenizer.encoding import unpadded
    from tokenizers import Tokenizer

    man = man_texts("/usr/share/man")
    keep = WORK / "en-keep.txt"  # --keep-text: half of the English pages; the other half is the old text measured
    keep.write_text("\n\n".join(man[0::2][:2000]), encoding="utf-8")
    english = man[1::2][:2000] + paragraphs(PACKAGED_CORPUS)
    rows = []
    for name in ("gpt2", "llama2"):
        ckpt = WORK / f"ckpt-{name}"
        if not (ckpt / "config.json").exists():
            tiny_llama(name, ckpt)
        for lang in ("ru", "ja"):
            path, held = corpus(lang)
            for n in sizes:
                t0 = time.perf_counter()
                plan = plan_extend(open_target(ckpt, AddOptions()), ExtendOptions(path, n))
                seconds = time.perf_counter() - t0
                old = plan.tokens.original
                new = unpadded(Tokenizer.from_str(json.dumps(plan.editor.edited(plan.tokens))))
                kept = plan_extend(open_target(ckpt, AddOptions()), ExtendOptions(path, n, keep))
                new_kept = unpadded(Tokenizer.from_str(json.dumps(kept.editor.edited(kept.tokens))))
                rec, appended = recipe(plan.editor, path, n)
                row = {"tokenizer": name, "lang": lang, "n": n, "corpus_mb": round(path.stat().st_size / 1e6, 1),
                       "original": tokens_per_byte(old, held), "extend": tokens_per_byte(new, held),
                       "recipe": tokens_per_byte(rec, held), "extend_tokens": len(plan.tokens.new),
                       "kept": tokens_per_byte(new_kept, held), "kept_changed": changed(old, new_kept, english),
                       "recipe_tokens": appended, "extend_changed": changed(old, new, english),
                       "recipe_changed": changed(old, rec, english), "old_texts": len(english),
                       "seconds": round(seconds, 1), "load": bench.load_average(bench.uptime())}
                print(row, flush=True)
                rows.append(row)
                bench.publish(_table(rows, len(english)), rows, results, json_path, BEGIN, END)  # row by row
    return _table(rows, len(english)), rows


def _table(rows: list[dict], n_old: int) -> str:
    lines = [f"Held-out tokens per byte (lower is better) and old-text paragraphs whose ids changed, "
             f"{bench.machine_line()}. Old text: {n_old:,} paragraphs of English manual pages and the packaged "
             "sample; `--keep-text`: 2,000 other paragraphs of the English pages.",
             "", "| tokenizer | text | N | corpus MB | original | extend | extend --keep-text | recipe | tokens added "
             "(extend / recipe) | old text changed (extend / --keep-text / recipe) | extend s (load) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['tokenizer']} | {r['lang']} | {r['n']:,} | {r['corpus_mb']} | {r['original']:.4f} | "
                     f"{r['extend']:.4f} | {r['kept']:.4f} | {r['recipe']:.4f} | {r['extend_tokens']:,} / "
                     f"{r['recipe_tokens']:,} | {r['extend_changed']} / {r['kept_changed']} / {r['recipe_changed']} | "
                     f"{r['seconds']} ({r['load']}) |")
    return "\n".join(lines)


def speed(mb: int, n: int) -> tuple[str, list[dict]]:
    """Count and learn `n` merges on ~`mb` MB of every language's messages, with the GPT-2 tokenizer."""
    fetch = bench.fixture_module("published").fetch
    from tokenizers import Tokenizer, models, trainers

    from vocabsurgeon.extend.learn import count_words, learn_merges

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
    t0 = time.perf_counter()
    words, n_bytes = count_words(tok, path)
    t1 = time.perf_counter()
    learned = learn_merges(tok, words, n, vocab=vocab, mergeable=lambda p: True)
    t2 = time.perf_counter()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    fresh = Tokenizer(models.BPE())
    fresh.normalizer, fresh.pre_tokenizer = tok.normalizer, tok.pre_tokenizer
    t3 = time.perf_counter()
    fresh.train([str(path)], trainers.BpeTrainer(vocab_size=256 + n, show_progress=False, min_frequency=2,
                                                 initial_alphabet=__import__("tokenizers").pre_tokenizers.ByteLevel.alphabet()))
    t4 = time.perf_counter()
    up1 = bench.uptime()
    row = {"mb": round(n_bytes / 1e6, 1), "distinct_words": learned.words, "merges": len(learned.merges),
           "count_s": round(t1 - t0, 1), "learn_s": round(t2 - t1, 1), "peak_rss": rss,
           "tokenizers_train_s": round(t4 - t3, 1), "load": f"{bench.load_average(up0)} -> {bench.load_average(up1)}"}
    print(row, flush=True)
    text = "\n".join([
        f"`extend`'s learner on {row['mb']} MB of real text (every installed package's translated messages, all "
        f"languages) with the GPT-2 tokenizer, {bench.machine_line()}, load average {row['load']}:", "",
        "| MB | distinct words | merges | counting s | learning s | total s | peak RSS | `tokenizers` trainer from "
        "scratch, same file and merges (Rust, all cores) s |", "|---|---|---|---|---|---|---|---|",
        f"| {row['mb']} | {row['distinct_words']:,} | {row['merges']:,} | {row['count_s']} | {row['learn_s']} | "
        f"{round(row['count_s'] + row['learn_s'], 1)} | {bench.gb(rss)} | {row['tokenizers_train_s']} |"])
    return text, [row]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="*", default=[1000, 8000])
    ap.add_argument("--speed", action="store_true", help="the learner's speed on ~100 MB instead")
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--results", type=Path, help="write the table into this markdown file, between the markers")
    ap.add_argument("--json", type=Path, help="write every figure here")
    args = ap.parse_args()
    if args.speed:
        text, rows = speed(args.mb, 8000)
        bench.publish(text, rows, args.results, args.json, SPEED_BEGIN, SPEED_END)
    else:
        text, rows = compression(args.sizes, args.results, args.json)
    print(text)


if __name__ == "__main__":
    main()
