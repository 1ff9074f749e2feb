"""`vocabsurgeon trim` on a real model (bench/real_model.py: SmolLM2-135M-Instruct, or Gemma 3 270M) cut to 32k
and 16k tokens with an English corpus, against the original and against the transformers way.

    python -m bench.trim_bench                  # SmolLM2: figures between the trim markers of bench/RESULTS.md
    python -m bench.trim_bench --model gemma3   # Gemma 3 270M: between the trim-gemma3 markers
    python -m bench.trim_bench --tokens 2000    # a quicker quality pass (held-out tokens)

The English corpus is the docstrings of the standard library's files and of the installed packages of
PACKAGES, read with ast: every other file is trim corpus, the others' docstrings (disjoint files, the
same domain) are the held-out text. Measured for each size:
- file size and parameters before/after;
- wall time and peak RSS of `vocabsurgeon trim` (its own process, GNU time, as bench.py measures), and
  the time of its write alone (`--json`'s seconds: the corpus counted and the plan made before),
  of the transformers way (load the model, index_select the kept rows, write the trimmed tokenizer,
  save_pretrained; it is handed the kept ids, so it does no counting) and of copying the checkpoint;
- held-out bits per byte of each model on the same text pieces (each piece after the BOS token, so
  every byte is predicted), the held-out coverage (share of the original's tokens kept) and
  KL(p_new || p_old) = -log p_old(kept) per position (mean, p99), from the original model's logits;
- greedy continuations (20 tokens) of 20 held-out prompts: the share identical to the original's;
- the lm_head matmul time for 256 positions.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import shutil
import statistics
import sys
import sysconfig
import time
from pathlib import Path

from bench import common as bench  # measure(): wall time and peak RSS of a child process
from bench import real_model

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

MARKERS = {"smollm2": ("<!-- trim:begin -->", "<!-- trim:end -->"),
           "gemma3": ("<!-- trim-gemma3:begin -->", "<!-- trim-gemma3:end -->")}
SIZES = (32768, 16384)
MAX_CORPUS = 20_000_000  # characters of the English corpus
# Packages whose docstrings join the standard library's (technical English, tens of MB), where installed
PACKAGES = ("transformers", "huggingface_hub", "numpy", "click", "jinja2", "tokenizers", "safetensors", "torch",
            "matplotlib", "sympy", "scipy", "pandas", "IPython", "docutils", "botocore", "accelerate", "peft",
            "sentence_transformers", "hypothesis", "_pytest")


def _docstrings(path: Path) -> list[str]:
    """The docstrings of one Python file, read with ast (nothing is imported)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return []
    nodes = [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    return [d for n in nodes if (d := ast.get_docstring(n)) and len(d) > 80]


def corpora(work: Path) -> tuple[Path, list[str]]:
    """The English corpus file (docstrings of every other file of the standard library and PACKAGES) and
    the held-out paragraphs (the other files' docstrings, shuffled)."""
    lib, site = Path(sysconfig.get_paths()["stdlib"]), Path(sysconfig.get_paths()["purelib"])
    roots = [lib] + [site / pkg for pkg in PACKAGES if (site / pkg).is_dir()]
    skip = {"test", "tests", "idlelib", "site-packages"}
    files = sorted(p for root in roots for p in root.rglob("*.py")
                   if not skip & set(p.relative_to(root).parts) and (root != lib or "site-packages" not in p.parts))
    train, held, size = [], [], 0
    for i, f in enumerate(files):
        docs = _docstrings(f)
        if i % 2 == 0 and size < MAX_CORPUS:
            train += docs
            size += sum(map(len, docs))
        elif i % 2 == 1:
            held += docs
    path = work / "trim-en.txt"
    path.write_text("\n\n".join(train), encoding="utf-8")
    pieces = [p.strip() for doc in held for p in doc.split("\n\n") if len(p.strip()) > 200]
    random.Random(0).shuffle(pieces)  # a sample across the libraries, not their first files
    return path, pieces


def transformers_way(src: str, out: str, idmap: str) -> None:
    """Load, index_select the kept rows, set the trimmed tokenizer, save_pretrained."""
    import torch
    from transformers import AutoModelForCausalLM

    from vocabsurgeon.trim.tokenizer import trimmed

    kept = torch.tensor(json.loads(Path(idmap).read_text())["old_ids"])
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    emb = model.get_input_embeddings()
    new = torch.nn.Embedding(len(kept), emb.weight.shape[1])
    new.weight.data = emb.weight.data.index_select(0, kept).clone()
    model.set_input_embeddings(new)
    if not model.config.tie_word_embeddings:
        head = model.get_output_embeddings()
        lin = torch.nn.Linear(head.weight.shape[1], len(kept), bias=head.bias is not None)
        lin.weight.data = head.weight.data.index_select(0, kept).clone()
        model.set_output_embeddings(lin)
    model.config.vocab_size = len(kept)
    model.tie_weights()
    model.save_pretrained(out)
    data = json.loads((Path(src) / "tokenizer.json").read_text(encoding="utf-8"))
    (Path(out) / "tokenizer.json").write_text(json.dumps(trimmed(data, kept.tolist())), encoding="utf-8")
    for f in ("tokenizer_config.json", "special_tokens_map.json"):
        if (Path(src) / f).is_file():
            shutil.copyfile(Path(src) / f, Path(out) / f)


def _vs() -> list[str]:
    return [sys.executable, "-m", "vocabsurgeon"]


def speed(src: Path, corpus: Path, work: Path, size: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out, tf, cp = work / f"trim-{src.name}-{size}", work / f"trim-{src.name}-{size}-tf", work / f"trim-{src.name}-{size}-copy"
    for p in (out, tf, cp):
        shutil.rmtree(p, ignore_errors=True)
    log = work / f"trim-{src.name}-{size}.log"
    vs = bench.measure(_vs() + ["trim", "-q", "--json", "--corpus", str(corpus), "--vocab-size", str(size), str(src),
                                str(out)], log, env)
    text = log.read_text(encoding="utf-8")
    write = json.loads(text[text.index("{"):])["seconds"]
    me = bench.module_command("trim_bench")
    tw = bench.measure(me + ["_transformers", str(src), str(tf), str(out / "vocabsurgeon_idmap.json")],
                       work / f"trim-{src.name}-{size}-tf.log", env)
    copy = bench.measure(["cp", "-r", str(src), str(cp)], work / f"trim-{src.name}-{size}-copy.log")
    shutil.rmtree(tf, ignore_errors=True)
    shutil.rmtree(cp, ignore_errors=True)
    return {"vocabsurgeon": vs, "write": write, "transformers": tw, "copy": copy, "out": out}


def quality(src: Path, outs: dict[int, Path], pieces: list[str], max_tokens: int, prompts: list[str],
            new_tokens: int) -> dict:
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(min(2, os.cpu_count() or 1))
    res: dict = {}

    def run(path: Path, kept_of: dict[int, np.ndarray] | None):
        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        bos = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
        bits, nbytes, toks, logp_kept = 0.0, 0, 0, {s: [] for s in (kept_of or {})}
        covered = {s: 0 for s in (kept_of or {})}
        used = 0
        for p in pieces:
            ids = tok(p, add_special_tokens=False).input_ids[:400]
            if used >= max_tokens:
                break
            text = tok.decode(ids)
            x = torch.tensor([[bos] + ids])
            with torch.no_grad():
                lp = model(x).logits[0, :-1].double().log_softmax(-1)
            bits += float(-lp[torch.arange(len(ids)), torch.tensor(ids)].sum()) / np.log(2)
            nbytes += len(text.encode("utf-8"))
            toks += len(ids)
            used += len(ids)
            for s, kept in (kept_of or {}).items():
                logp_kept[s] += lp[:, torch.from_numpy(kept)].logsumexp(-1).tolist()
                covered[s] += int(np.isin(ids, kept).sum())
        gens = []
        for q in prompts:
            x = tok(q, return_tensors="pt", add_special_tokens=False).input_ids
            x = torch.cat([torch.tensor([[bos]]), x], 1)
            with torch.no_grad():
                y = model.generate(x, max_new_tokens=new_tokens, do_sample=False, pad_token_id=tok.eos_token_id)
            gens.append(tok.decode(y[0, x.shape[1]:], skip_special_tokens=True))
        return {"bits": bits, "bytes": nbytes, "tokens": toks, "gens": gens, "logp_kept": logp_kept,
                "covered": covered}

    kept_of = {s: np.array(json.loads((o / "vocabsurgeon_idmap.json").read_text())["old_ids"]) for s, o in outs.items()}
    t0 = time.perf_counter()
    base = run(src, kept_of)
    res["original"] = {"bpb": base["bits"] / base["bytes"], "tokens": base["tokens"], "bytes": base["bytes"]}
    for s, o in outs.items():
        r = run(o, None)
        kl = -np.array(base["logp_kept"][s])
        res[s] = {"bpb": r["bits"] / r["bytes"], "tokens": r["tokens"], "bytes": r["bytes"],
                  "kl_mean": float(kl.mean()), "kl_p99": float(np.quantile(kl, 0.99)),
                  "coverage": base["covered"][s] / base["tokens"],
                  "same_generations": sum(a == b for a, b in zip(base["gens"], r["gens"])) / len(prompts)}
    res["seconds"] = time.perf_counter() - t0
    return res


def lm_head_time(rows: int, hidden: int, positions: int = 256, repeats: int = 30) -> float:
    import torch

    w, h = torch.randn(rows, hidden), torch.randn(positions, hidden)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        h @ w.T
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _params(path: Path) -> int:
    from vocabsurgeon.checkpoint.reader import Checkpoint

    ck = Checkpoint.open(path)
    n = 0
    for t in ck.tensors.values():
        k = 1
        for d in t.shape:
            k *= d
        n += k
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(MARKERS), default="smollm2", help="bench/real_model.py's model")
    ap.add_argument("--tokens", type=int, default=16000, help="held-out tokens scored per model")
    ap.add_argument("--prompts", type=int, default=20, help="held-out prompts continued greedily")
    ap.add_argument("--new-tokens", type=int, default=20, help="tokens generated per prompt")
    ap.add_argument("--no-write", action="store_true", help="print the table, leave RESULTS.md alone")
    args = ap.parse_args()
    work = HERE / "work"
    src = real_model.build(work, args.model).resolve()  # bench/work/NAME may be a link: cp -r copies the target
    corpus, pieces = corpora(work)
    config = json.loads((src / "config.json").read_text(encoding="utf-8"))
    hidden, rows = config["hidden_size"], config["vocab_size"]
    prompts = [" ".join(p.split()[:12]) for p in pieces[::max(1, len(pieces) // args.prompts)]][:args.prompts]
    load = os.getloadavg()[0]
    runs = {s: speed(src, corpus, work, s) for s in SIZES}
    q = quality(src, {s: runs[s]["out"] for s in SIZES}, pieces, args.tokens, prompts, args.new_tokens)
    size0, params0 = (src / "model.safetensors").stat().st_size, _params(src)
    head0 = lm_head_time(rows, hidden)
    lines = [
        f"{real_model.MODELS[args.model].description}, {rows:,} tokens; English corpus "
        f"{corpus.stat().st_size / 1e6:.1f} MB (docstrings of every other file of the standard library and "
        f"PACKAGES), held-out {q['original']['bytes']:,} bytes ({q['original']['tokens']:,} tokens) of the other "
        f"files' docstrings; load average {load:.1f} at the start ({os.cpu_count()} cores), so the times are under "
        "load.",
        "",
        "| | original | " + " | ".join(f"{s:,}" for s in SIZES) + " |",
        "|---|---|" + "---|" * len(SIZES),
        f"| file size (MB) | {size0 / 1e6:.1f} | "
        + " | ".join(f"{(runs[s]['out'] / 'model.safetensors').stat().st_size / 1e6:.1f}" for s in SIZES) + " |",
        f"| parameters (M) | {params0 / 1e6:.1f} | " + " | ".join(f"{_params(runs[s]['out']) / 1e6:.1f}" for s in SIZES)
        + " |",
        f"| held-out bits per byte | {q['original']['bpb']:.4f} | "
        + " | ".join(f"{q[s]['bpb']:.4f} (x{q[s]['bpb'] / q['original']['bpb']:.4f})" for s in SIZES) + " |",
        "| held-out coverage (original tokens kept) | 1 | " + " | ".join(f"{q[s]['coverage']:.4f}" for s in SIZES) + " |",
        "| KL(p_new ‖ p_old) mean / p99 (nats) | 0 | "
        + " | ".join(f"{q[s]['kl_mean']:.4f} / {q[s]['kl_p99']:.4f}" for s in SIZES) + " |",
        f"| greedy continuations identical ({len(prompts)} prompts, {args.new_tokens} tokens) | | "
        + " | ".join(f"{q[s]['same_generations']:.0%}" for s in SIZES) + " |",
        f"| lm_head matmul, 256 positions (ms) | {head0 * 1e3:.2f} | "
        + " | ".join(f"{lm_head_time(s, hidden) * 1e3:.2f}" for s in SIZES) + " |",
        "| vocabsurgeon trim: s / peak RSS MB | | "
        + " | ".join(f"{runs[s]['vocabsurgeon'].wall:.2f} / {runs[s]['vocabsurgeon'].rss / 2**20:.0f}" for s in SIZES)
        + " |",
        "| its write alone (after counting and planning): s | | "
        + " | ".join(f"{runs[s]['write']:.2f}" for s in SIZES) + " |",
        "| transformers way: s / peak RSS MB | | "
        + " | ".join(f"{runs[s]['transformers'].wall:.2f} / {runs[s]['transformers'].rss / 2**20:.0f}" for s in SIZES)
        + " |",
        "| copying the checkpoint (cp -r): s | | " + " | ".join(f"{runs[s]['copy'].wall:.2f}" for s in SIZES) + " |",
    ]
    table = "\n".join(lines)
    print(table)
    if not args.no_write:
        begin, end = MARKERS[args.model]
        bench.write_block(HERE / "RESULTS.md", f"{begin}\n{table}\n{end}", begin, end,
                          heading=f"trim on {real_model.MODELS[args.model].name} (issue 29)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_transformers":
        transformers_way(*sys.argv[2:5])
    else:
        main()
