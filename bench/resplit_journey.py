"""The red-team journey of issue 39 rerun on SmolLM2: does a new word re-split any other word, in any runtime?

As a user runs it, through the CLI: `suggest` on 120 paragraphs of standard-library docstrings (every
261/120-th paragraph of bench/domain.py's, which spans its 41 modules) proposes 50 words; `add --tokens` of
that list writes the output (with its validation) and says which longer words it re-splits
(`longer_words_resplit`). Then, independent of vocabsurgeon's own checks, every string below is tokenized
with the input and the output tokenizer, each alone, after a space and inside a sentence, in three
runtimes: transformers (`AutoTokenizer`), `tokenizers` alone (tokenizer.json) and llama.cpp (the pinned
converter, `--vocab-only`, then `Llama(vocab_only=True)`, as bench/llamacpp_parity.py does):

- every distinct whitespace-separated word of the whole corpus (all paragraphs, not only the 120), and every
  identifier-ish run in it (`\\w+`, and the runs between underscores, `[^\\W_]+`);
- every old vocabulary entry, decoded, that holds a new word as a proper part;
- made-up longer words around each new word (`Xs`, `Xed`, `unX`, `XOf`, ...: what the plan cannot find in
  any vocabulary or corpus, so only the entry itself can keep them).

A string whose ids changed and that is not a new word is one of: explained by new words that occur in it as
words (`word`: the new ids, each expanded to its form's old ids, give back the old ids, and each stands
where neither neighbour continues the word, resplit.inside), a re-split of a word the plan reported
(`reported`), or a re-split nobody reported (`unreported`: the target is 0 in every runtime). Also: the
corpus paragraphs decode to themselves, and the new words are one token alone and after a space.

    OMP_NUM_THREADS=1 nice -n 5 python -m bench.resplit_journey --results bench/RESULTS.md
    ... --gguf-parity --results bench/RESULTS.md                              # merges and added tokens
    ... --words REQ unread BAD stdin subclasses return Handler INET --results bench/RESULTS.md   # the issue's words
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from bench import common, domain
from vocabsurgeon.tokenizer import resplit

llamacpp = common.fixture_module("llamacpp")

BEGIN, END = "<!-- resplit-journey:begin -->", "<!-- resplit-journey:end -->"
HEADING = "A new word never re-splits other words: the journey on SmolLM2 (issue 39)"
SUFFIXES = ("s", "ed", "ing", "able", "less", "ness", "Of", "X")
PREFIXES = ("un", "re", "sub", "my")
FRAME = "See {} here."  # a string inside a sentence
MECHANISMS = {"vocab": "entries only ignore_merges reaches", "merge": "merges", "added": "added tokens",
              "special": "special tokens"}
CLASSES = ("same", "word", "reported", "unreported")  # worst last


def corpus_strings(paragraphs: list[str]) -> list[str]:
    """Every distinct whitespace-separated word of `paragraphs` and every identifier-ish run in them (`\\w+` and
    the runs between underscores), in order of first appearance."""
    out: dict[str, None] = {}
    for p in paragraphs:
        for w in p.split():
            out[w] = None
            out.update(dict.fromkeys(re.findall(r"\w+", w)))
            out.update(dict.fromkeys(resplit.WORD.findall(w)))
    return list(out)


def holding_entries(vocab_texts: list[str], words: list[str]) -> list[str]:
    """The vocabulary entries (decoded) that hold one of `words` as a proper part."""
    return [t for t in dict.fromkeys(vocab_texts) if any(w in t and t.strip() != w for w in words)]


def made_up(words: list[str]) -> list[str]:
    """Longer words around each new word that no vocabulary or corpus needs to hold: suffixes and prefixes."""
    return list(dict.fromkeys([w + s for w in words for s in SUFFIXES] + [p + w for w in words for p in PREFIXES]))


def variants(s: str) -> tuple[str, ...]:
    """A string alone, after a space and inside a sentence."""
    bare = s.strip()
    return (bare, " " + bare, FRAME.format(bare)) if bare else ()


def classify(text: str, old: list[int], new: list[int], forms: dict[int, tuple[str, list[int]]],
             decode_old, reported: set[str]) -> str:
    """How `text`'s ids changed from `old` to `new` (see CLASSES). `forms`: new id -> (its form, e.g. " REQ", the
    form's old ids in this runtime); `decode_old`: old ids -> text; `reported`: the words the plan reported.

    "word" where expanding every new id to its form's old ids gives back `old` and each new id stands where
    its word is a word in `text` (neither neighbour continues it, resplit.inside); else "reported" where the
    text holds a reported word inside a longer word, else "unreported"."""
    if old == new:
        return "same"
    expanded, starts = [], []
    for i in new:
        if i in forms:
            starts.append((len(expanded), forms[i][0]))
            expanded += forms[i][1]
        else:
            expanded.append(i)
    if expanded == old and all(_as_word(text, len(decode_old(old[:k])), form) for k, form in starts):
        return "word"
    if any(resplit.inside(text, w) for w in reported):
        return "reported"
    return "unreported"


def _as_word(text: str, start: int, form: str) -> bool:
    """Whether `form` (" REQ") stands at `start` in `text` as a word: the text has it there, and neither the
    character before its word nor the one after continues the word (resplit.inside on that window)."""
    if text[start:start + len(form)] != form:
        return False
    word = form.strip()
    at = start + len(form) - len(form.lstrip())
    window = text[max(at - 1, 0):at + len(word) + 1]
    return not resplit.inside(window, word)


# ---------------------------------------------------------------------------------------------
# runtimes: each gives (encode texts -> ids lists, decode ids -> text) for a checkpoint directory


def transformers_runtime(ckpt: Path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(ckpt)
    return (lambda texts: tok(list(texts), add_special_tokens=False)["input_ids"],
            lambda ids: tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))


def tokenizers_runtime(ckpt: Path):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(ckpt / "tokenizer.json"))
    return (lambda texts: [e.ids for e in tok.encode_batch(list(texts), add_special_tokens=False)],
            lambda ids: tok.decode(ids, skip_special_tokens=False))


def llamacpp_runtime(gguf: Path):
    import llama_cpp

    llm = llama_cpp.Llama(model_path=str(gguf), vocab_only=True, verbose=False)
    return (lambda texts: [llm.tokenize(t.encode("utf-8"), add_bos=False, special=False) for t in texts],
            lambda ids: llm.detokenize(ids).decode("utf-8", errors="replace"))


# ---------------------------------------------------------------------------------------------


class Clock:
    """Wall and CPU seconds (this process and its children) of each stage."""

    def __init__(self):
        self.stages: dict[str, dict] = {}

    def __call__(self, name: str):
        clock = self

        class _Stage:
            def __enter__(self):
                self.t, self.cpu = time.perf_counter(), _cpu()

            def __exit__(self, *exc):
                clock.stages[name] = {"wall_s": round(time.perf_counter() - self.t, 1),
                                      "cpu_s": round(_cpu() - self.cpu, 1), "load": common.load_average(common.uptime())}
        return _Stage()


def _cpu() -> float:
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


def cli(*args: str, stdout: Path | None = None) -> None:
    """`python -m vocabsurgeon ARGS` as a user runs it (this checkout's package)."""
    with open(stdout, "w") if stdout else open("/dev/null", "w") as out:
        subprocess.run([sys.executable, "-m", "vocabsurgeon", *args], stdout=out, check=True, cwd=common.REPO)


def journey(src: Path, work: Path, n_paragraphs: int, top: int, parity: bool, clock: Clock, reuse: bool = False,
            given: list[str] | None = None) -> dict:
    """suggest, then add, through the CLI; the figures of both (`reuse`: the outputs of an earlier run, where
    there are; `given`: these words instead of suggest's)."""
    tag = run_tag(parity, given)
    work.mkdir(parents=True, exist_ok=True)
    paras = domain.paragraphs()
    sample = [paras[i * len(paras) // n_paragraphs] for i in range(n_paragraphs)]
    corpus, words_file = work / f"corpus-{n_paragraphs}.txt", work / f"words{tag}.txt"
    corpus.write_text("\n\n".join(sample) + "\n", encoding="utf-8")
    if given:
        words_file.write_text("".join(w + "\n" for w in given), encoding="utf-8")
    with clock("suggest"):
        if not given and not (reuse and words_file.exists()):
            cli("suggest", "-q", str(src), "--corpus", str(corpus), "--top", str(top), "-o", str(words_file), "--json",
                stdout=work / "suggest.json")
    words = [w for w in words_file.read_text(encoding="utf-8").splitlines() if w.strip()]
    out = work / f"out{tag}"
    with clock("add"):
        if not (reuse and (out / "tokenizer.json").exists()):
            cli("add", "-q", "--tokens", str(words_file), "--json", "--force", *(["--gguf-parity"] if parity else []),
                str(src), str(out), stdout=work / f"add{tag}.json")
    summary = json.loads((work / f"add{tag}.json").read_text(encoding="utf-8"))
    return {"paragraphs": paras, "sample": len(sample), "words": words, "out": out, "summary": summary, "given": bool(given)}


def run_tag(parity: bool, given: list[str] | None) -> str:
    """"", "-parity", "-words" or "-words-parity": the run's files and RESULTS block."""
    return "".join(t for t, on in (("-words", bool(given)), ("-parity", parity)) if on)


def measure(src: Path, out: Path, work: Path, words: list[str], paragraphs: list[str], summary: dict,
            clock: Clock) -> dict:
    """Every string in every runtime: counts per class, examples of re-splits, decodes, new words one token."""
    from tokenizers import Tokenizer

    added = [a for a in summary["added"]]
    kept = list(dict.fromkeys(a["token"] for a in added))
    reported = set(summary["longer_words_resplit"])
    old_tok = Tokenizer.from_file(str(src / "tokenizer.json"))
    sources = {"corpus words": corpus_strings(paragraphs),
               "vocabulary entries holding a new word": holding_entries(resplit.vocabulary_texts(old_tok), kept),
               "made-up longer words": made_up(kept)}
    strings = {s: src_name for src_name, ss in reversed(sources.items()) for s in ss if s.strip()}
    strings = {s: n for s, n in strings.items() if s.strip() not in kept}  # a new word itself is no old text
    texts = list(dict.fromkeys(v for s in strings for v in variants(s)))
    runtimes = {"transformers": (transformers_runtime, src, out), "tokenizers": (tokenizers_runtime, src, out)}
    if not llamacpp.missing():
        ggufs = {}
        with clock("convert"):
            for side, ckpt in (("input", src), ("output", out)):
                ggufs[side] = work / f"{out.name}-{side}.gguf"
                done = llamacpp.convert(ckpt, ggufs[side], "--vocab-only")
                if done.returncode != 0:
                    raise RuntimeError(f"{ckpt}: convert_hf_to_gguf.py failed: {done.stderr.strip()[-500:]}")
        runtimes["llama.cpp"] = (llamacpp_runtime, ggufs["input"], ggufs["output"])
        pre = {side: llamacpp.pre_tokenizer_type(g) for side, g in ggufs.items()}  # "smollm": no ignore_merges there
    else:
        pre = {}
    rows, ids_by = [], {}
    for name, (make, a, b) in runtimes.items():
        with clock(f"check {name}"):
            enc_old, dec_old = make(a)
            enc_new, dec_new = make(b)
            forms = {x["id"]: (x["form"], enc_old([x["form"]])[0]) for x in added}
            old_ids, new_ids = enc_old(texts), enc_new(texts)
            ids_by[name] = new_ids
            by_text = {t: classify(t, o, n, forms, dec_old, reported) for t, o, n in zip(texts, old_ids, new_ids)}
            pieces = dict(zip(texts, zip(old_ids, new_ids)))
            worst = {s: max((by_text[v] for v in variants(s)), key=CLASSES.index) for s in strings}
            per_source = {n: Counter(worst[s] for s, m in strings.items() if m == n) for n in sources}
            para_old, para_new = enc_old(paragraphs), enc_new(paragraphs)
            para_class = Counter(classify(p, o, n, forms, dec_old, reported)
                                 for p, o, n in zip(paragraphs, para_old, para_new))
            decodes = sum(dec_new(ids) == p for p, ids in zip(paragraphs, para_new))
            singles = [f for w in kept for f in (w, " " + w)]  # one token: a new id, or an old one the form had
            one = [f for f, ids in zip(singles, enc_new(singles)) if len(ids) == 1]
            bad = [t for t in texts if by_text[t] == "unreported"]
            rows.append({
                "runtime": name, "strings": len(strings), "texts": len(texts),
                "classes": dict(Counter(worst.values())), "per_source": {k: dict(v) for k, v in per_source.items()},
                "paragraphs": len(paragraphs), "paragraph_classes": dict(para_class), "decodes": decodes,
                "paragraph_examples": [p[:80] for p, o, n in zip(paragraphs, para_old, para_new)
                                       if classify(p, o, n, forms, dec_old, reported) in CLASSES[2:]][:3],
                "one_token": len(one), "forms": len(singles),
                "examples": [{"text": t, "before": [dec_old([i]) for i in pieces[t][0]],
                              "after": [dec_new([i]) for i in pieces[t][1]]} for t in bad[:5]],
                "reported_examples": [s for s, n in strings.items() if worst[s] == "reported" and n == "corpus words"][:8],
            })
        print(row_line(rows[-1]), flush=True)
    for r in rows:  # the output's ids in this runtime against transformers', text by text
        r["agrees_with_transformers"] = sum(x == y for x, y in zip(ids_by[r["runtime"]], ids_by["transformers"]))
    return {"sources": {k: len(v) for k, v in sources.items()}, "rows": rows, "llamacpp_pre": pre}


def row_line(r: dict) -> str:
    c, p = r["classes"], r["paragraph_classes"]
    paras = f"{p.get('same', 0)} / {p.get('word', 0)} / {p.get('reported', 0)} / {p.get('unreported', 0)}"
    return (f"| {r['runtime']} | {r['strings']:,} ({r['texts']:,} texts) | {c.get('same', 0):,} | {c.get('word', 0):,} | "
            f"{c.get('reported', 0):,} | **{c.get('unreported', 0):,}** | {paras} | {r['decodes']}/{r['paragraphs']} | "
            f"{r['one_token']}/{r['forms']} | {r['agrees_with_transformers']:,}/{r['texts']:,} |"
            if "agrees_with_transformers" in r else
            f"{r['runtime']}: {r['strings']} strings, {c}, paragraphs {paras}, decodes {r['decodes']}/{r['paragraphs']}, "
            f"one token {r['one_token']}/{r['forms']}")


def report(j: dict, m: dict, clock: Clock, parity: bool) -> str:
    s = j["summary"]
    mech = Counter(MECHANISMS.get(a["mechanism"], a["mechanism"]) for a in s["added"])
    kept = list(dict.fromkeys(a["token"] for a in s["added"]))
    skipped = "; ".join(f"{x['token']} ({x['reason'] if len(x['reason']) < 200 else x['reason'][:200] + '...'})"
                        for x in s["skipped"]) or "none"
    v = s.get("validation") or {}
    times = ", ".join(f"{k} {t['wall_s']} s wall / {t['cpu_s']} s CPU at load {t['load']}" for k, t in clock.stages.items()
                      if not (k == "suggest" and j["given"]))
    head = (
        f"SmolLM2-135M-Instruct (bench/real_model.py), {domain.recipe()}: "
        + ("the words given (`--words`, no `suggest`), " if j["given"] else
           f"`suggest --top {len(j['words'])}` on {j['sample']} of the {len(j['paragraphs'])} paragraphs (every "
           f"{len(j['paragraphs'])}/{j['sample']}-th), then ")
        + f"`add --tokens{' --gguf-parity' if parity else ''} --json`: {len(kept)} of {len(j['words'])} words kept, "
        f"{len(s['added'])} entries ({', '.join(f'{k}: {n}' for k, n in mech.most_common())}), skipped: {skipped}; "
        f"the plan's `longer_words_resplit`: "
        f"{', '.join(sorted(s['longer_words_resplit'])) or 'none'} ({s['longer_words_checked']} holders checked); "
        f"validation {'passed' if v.get('passed') else 'FAILED' if v else 'not run'}. Words: {', '.join(j['words'])}.\n\n"
        f"Strings checked: {', '.join(f'{n:,} {k}' for k, n in m['sources'].items())} (without the new words), each "
        f"alone, after a space and in \"{FRAME}\"; a string counts in its worst text. `word`: ids changed only where "
        f"a new word stands as a word; `reported` / `unreported`: a longer word re-split, whose new word the plan "
        f"reported or not. Paragraphs: all {len(j['paragraphs'])}, classed alike and decoded by the output. One token: each "
        f"kept word alone and after a space. Agrees: the output's ids equal transformers', text by text. llama.cpp: "
        f"llama-cpp-python {llamacpp.VERSION}, pre-tokenizer type "
        f"{', '.join(f'{v!r} ({k})' for k, v in m['llamacpp_pre'].items()) or 'not run'}.\n\n"
        f"{common.machine_line()}; {times}. {common.uptime()}\n\n"
        "| runtime | strings | same ids | changed: new word as a word | changed: reported | changed: unreported | "
        "paragraphs: same / word / reported / unreported | paragraphs decode | new words one token | "
        "agrees with transformers |\n|---|---|---|---|---|---|---|---|---|---|")
    lines = [head] + [row_line(r) for r in m["rows"]]
    notes: dict[str, list[str]] = {}  # a note -> the runtimes it holds for (said once where they agree)
    for r in m["rows"]:
        if r["examples"]:
            notes.setdefault("unreported: " + "; ".join(f"{e['text']!r} {e['before']} -> {e['after']}"
                                                        for e in r["examples"]), []).append(r["runtime"])
        if r["reported_examples"] or r["paragraph_examples"]:
            notes.setdefault(f"corpus words re-split where the plan reported the word: "
                             f"{', '.join(map(repr, r['reported_examples'])) or 'none'}; paragraphs re-split: "
                             f"{', '.join(map(repr, r['paragraph_examples'])) or 'none'}", []).append(r["runtime"])
    lines += [f"\n{', '.join(names)}: {note}" for note, names in notes.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=Path("bench/work/resplit-journey"))
    ap.add_argument("--real-work", type=Path, default=Path("bench/work"), help="where bench/real_model.py builds SmolLM2")
    ap.add_argument("--paragraphs", type=int, default=120)
    ap.add_argument("--top", type=int, default=50)
    ap.add_argument("--gguf-parity", action="store_true", help="add with --gguf-parity (merges and added tokens)")
    ap.add_argument("--words", nargs="+", help="add these words instead of suggest's (e.g. the issue's: REQ unread ...)")
    ap.add_argument("--reuse", action="store_true", help="keep the words and output of an earlier run (no timings)")
    ap.add_argument("--results", type=Path, help="write the table into this markdown file, between the markers")
    ap.add_argument("--json", type=Path, help="write every figure here")
    args = ap.parse_args(argv)
    from bench import real_model

    src = real_model.build(args.real_work, "smollm2")
    clock = Clock()
    j = journey(src, args.work, args.paragraphs, args.top, args.gguf_parity, clock, args.reuse, args.words)
    m = measure(src, j["out"], args.work, j["words"], j["paragraphs"], j["summary"], clock)
    text = report(j, m, clock, args.gguf_parity)
    print(text)
    tag = run_tag(args.gguf_parity, args.words)
    begin, end = BEGIN.replace(":begin", f"{tag}:begin"), END.replace(":end", f"{tag}:end")
    if args.results:
        # the other runs' blocks go under the default one's heading (appended after it on a first run)
        common.write_block(args.results, f"{begin}\n{text}\n{end}", begin, end, None if tag else HEADING)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"summary": j["summary"], "words": j["words"], **m, "stages": clock.stages},
                                        indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
