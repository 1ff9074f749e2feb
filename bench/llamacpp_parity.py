"""llama.cpp against transformers on `add`'s output: ids equal, per published tokenizer family, input and output.

For each family, a tiny Llama around its published tokenizer files (fixtures/published.py) gets WORDS with
`add`; the input and the output are converted with llama.cpp's own convert_hf_to_gguf.py (fixtures/llamacpp.py,
pinned) and tokenized by llama.cpp (llama-cpp-python, vocabulary only) and by transformers' AutoTokenizer:
fixtures/corpus.txt's paragraphs and each word in every context of vocabsurgeon/tokenizer/contexts.py.

    python -m bench.llamacpp_parity --results bench/RESULTS.md
    python -m bench.llamacpp_parity --real gemma3 --results bench/RESULTS.md   # a real checkpoint (bench/real_model.py)
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from bench import common, real_model
from vocabsurgeon import add_tokens
from vocabsurgeon.tokenizer import contexts

FIXTURES = common.REPO / "fixtures"
llamacpp = common.fixture_module("llamacpp")
published = common.fixture_module("published")
# Mistral 7B's files as its Hub repository has them: tokenizer.model (read first by the converter) beside tokenizer.json
BUILDERS = {"mistral-v0.1-hub": published.tiny_mistral_as_published}

BEGIN, END = "<!-- llamacpp-parity:begin -->", "<!-- llamacpp-parity:end -->"
REAL_BEGIN, REAL_END = "<!-- llamacpp-parity-real:begin -->", "<!-- llamacpp-parity-real:end -->"
HEADING = "llama.cpp tokenization parity (issue 32)"
FAMILIES = ["qwen3", "llama3", "gpt2", "gpt4o", "gemma2", "gemma3", "llama2", "mistral-v0.1-hub"]
WORDS = ["Frodo", "Gandalf", "Müller", "Éowyn", "Lothlórien", "Björk", "José", "Zoë", "Kubernetes", "pathlib",
         "getUserName", "tachycardia", "Москва"]


def texts(words: list[str]) -> list[str]:
    """fixtures/corpus.txt's paragraphs, then each word in every context."""
    paragraphs = [p for p in (FIXTURES / "corpus.txt").read_text(encoding="utf-8").split("\n\n") if p.strip()]
    return [*paragraphs, *dict.fromkeys(c.text for c in contexts.cases(words))]


def measure(name: str, work: Path, words: list[str], src: Path | None = None) -> dict:
    """One family's row: ids (and decodings) equal in both runtimes out of all texts, input and output.
    `src`: a real checkpoint instead of a tiny Llama around `name`'s published files (converted vocabulary only)."""
    root = work / name
    shutil.rmtree(root, ignore_errors=True)
    convert_args = ("--vocab-only",) if src is not None else ()
    build = BUILDERS.get(name) or (lambda path: published.tiny_llama(name, path))
    src, out = src or build(root / "src"), root / "out"
    summary = add_tokens(src, out, words, init="mean").to_dict()
    parity = add_tokens(src, root / "parity", words, init="mean", gguf_parity=True).to_dict()
    row = {"family": name, "texts": len(texts(words)), "added": len(summary["added"]),
           "skipped": len(summary["skipped"]), "parity_words": len({a["token"] for a in parity["added"]}),
           "ignore_merges_only": sorted({a["token"] for a in summary["added"]
                                         if a["mechanism"] == "vocab" and summary["tokenizer_family"] == "byte-level-bpe"})}
    for side, ckpt in (("input", src), ("output", out), ("parity", root / "parity")):
        gguf = root / f"{side}.gguf"
        done = llamacpp.convert(ckpt, gguf, *convert_args)
        if done.returncode != 0:  # e.g. GPT-4o's o200k: "BPE pre-tokenizer was not recognized"
            row[f"{side}_ids"] = row[f"{side}_decode"] = None
            row[f"{side}_error"] = done.stderr.strip().splitlines()[-1][-200:]
            continue
        missed = llamacpp.mismatches(ckpt, gguf, texts(words))
        row[f"{side}_ids"] = row["texts"] - sum(m[1] != m[2] for m in missed)
        row[f"{side}_decode"] = row["texts"] - sum(m[3] != m[4] for m in missed)
        row[f"{side}_examples"] = [[m[0][:40], m[1][:8], m[2][:8]] for m in missed if m[1] != m[2]][:3]
    return row


def table(rows: list[dict]) -> str:
    lines = ["| tokenizer | input: ids equal | output: ids equal | output: decodings equal | words added / skipped "
             "| entries only ignore_merges reaches | `--gguf-parity`: ids equal | `--gguf-parity`: words kept |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        n = r["texts"]
        cells = [f"{r[k]}/{n}" if r[k] is not None else f"does not convert ({r[k.split('_')[0] + '_error']})"
                 for k in ("input_ids", "output_ids", "output_decode", "parity_ids")]
        lines.append(f"| {r['family']} | {' | '.join(cells[:3])} | {r['added']} entries / {r['skipped']} | "
                     f"{', '.join(r['ignore_merges_only']) or 'none'} | {cells[3]} | {r['parity_words']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", nargs="*", default=FAMILIES, choices=FAMILIES)
    ap.add_argument("--real", choices=list(real_model.MODELS), help="a real checkpoint (built once) instead of the families")
    ap.add_argument("--real-work", type=Path, default=Path("bench/work"), help="where bench/real_model.py builds it")
    ap.add_argument("--words", nargs="*", default=WORDS)
    ap.add_argument("--work", type=Path, default=Path("bench/work/llamacpp_parity"))
    ap.add_argument("--results", type=Path, help="write the table into this markdown file, between the markers")
    ap.add_argument("--json", type=Path, help="write every figure here")
    args = ap.parse_args(argv)
    rows = []
    if args.real:
        src = real_model.build(args.real_work, args.real)
        rows.append(measure(args.real, args.work, args.words, src))
    for name in [] if args.real else args.families:
        rows.append(measure(name, args.work, args.words))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    what = f"the real {src.name} checkpoint" if args.real else "tiny Llama checkpoints around the published files"
    text = (f"llama-cpp-python {llamacpp.VERSION} (its convert_hf_to_gguf.py and llama.cpp) on {what}, {len(args.words)} "
            f"words in every context and fixtures/corpus.txt's paragraphs; `Llama(vocab_only=True).tokenize` against "
            f"`AutoTokenizer`, no special tokens. {common.uptime()}\n\n{table(rows)}")
    print(text)
    begin, end = (REAL_BEGIN, REAL_END) if args.real else (BEGIN, END)
    if args.results:
        common.write_block(args.results, f"{begin}\n{text}\n{end}", begin, end, HEADING)
    if args.json:
        common.publish(text, rows, None, args.json, BEGIN, END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
