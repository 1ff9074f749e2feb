"""The NaN of input distillation on a random 30-layer model: rebuild the model, show where the
gradient overflows, and run distillation on it (#23).

The model is the one the first `--init fitted` timing ran on (bench/RESULTS.md, "Fitting time on
a 135M-shaped model"): transformers' own random init of a SmolLM2-135M-shaped Llama (hidden 576,
30 layers, 9/3 heads, 49,152 rows, tied, rms_norm_eps 1e-5, bf16 on disk) with the fixtures'
2,048-token tokenizer, whose <|endoftext|> (2047) is BOS, EOS and pad. transformers zeroes the
pad_token_id row at init, so row 2047, the BOS that starts every window, is 0.

    python -m tools.nan_repro --build                 # the model, ~20 s, into bench/work/tied135-zero-bos
    python -m tools.nan_repro --grad                  # per-layer gradient at the BOS position (one batch)
    python -m tools.nan_repro --fit full plain cache  # distillation: steps skipped, rows not finite
    git worktree add /tmp/old-nan 0c2926c             # the code before b386bb5, then:
    PYTHONPATH=/tmp/old-nan python -m tools.nan_repro --fit old

`--fit` modes: `full` full windows (the prefix cache off) as the code runs them now, `plain` full
windows without the cut at the positions before the first new token (the behaviour before the fix),
`cache` the prefix cache (the default path), `old` whatever `vocabsurgeon` imports (for old code).
Run it on one thread: `taskset -c 1 env OMP_NUM_THREADS=1 python -m tools.nan_repro ...`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from bench import common

FIXTURE = common.REPO / "fixtures" / "llama-tiny"
BOS = 2047


def build(out: Path, seed: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=49_152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                      num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048, rms_norm_eps=1e-5,
                      tie_word_embeddings=True, bos_token_id=BOS, eos_token_id=BOS, pad_token_id=BOS)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    norms = model.get_input_embeddings().weight.detach().float().norm(dim=1)
    print(f"built: |E[{BOS}]| = {float(norms[BOS])}, rows of norm 0: {int((norms == 0).sum())}, "
          f"median row norm {float(norms.median()):.3f}")
    model.save_pretrained(out)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(FIXTURE / f, out / f)


def corpus(src: Path, n_words: int, work: Path) -> tuple[list[str], Path]:
    """`n_words` made-up words and ~120 paragraphs of stdlib docstrings with every 10th word one of them."""
    words = common.make_words(n_words, seed=17, avoid=common.known_words(src))
    lines = [t for t in common.sample_text(words, 60_000, seed=17)[1].split("\n") if t.strip()]
    path = work / f"nan-corpus-{n_words}.txt"
    path.write_text("\n\n".join("\n".join(lines[i:i + 6]) for i in range(0, len(lines), 6)), encoding="utf-8")
    return words, path


def grad(src: Path, text: Path) -> None:
    """One batch of two right-padded windows: the largest gradient per layer at the BOS position and
    elsewhere, and how many positions are not finite."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(src)
    m = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval().requires_grad_(False)
    E = m.get_input_embeddings().weight
    paras = text.read_text(encoding="utf-8").split("\n\n")
    bos = m.config.bos_token_id
    print(f"|E[bos {bos}]| = {float(E[bos].norm())}")
    seqs = [[bos] + tok(p, add_special_tokens=False).input_ids[:47] for p in paras[:2]]
    seqs[1] = seqs[1][:40]
    T = max(map(len, seqs))
    ids = torch.zeros((2, T), dtype=torch.long)
    mask = torch.zeros((2, T), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)], mask[i, :len(s)] = torch.tensor(s), 1
    with torch.no_grad():
        target = m.model(input_ids=ids, attention_mask=mask).last_hidden_state
    emb = E[ids].clone().requires_grad_(True)
    out = m.model(inputs_embeds=emb, attention_mask=mask, output_hidden_states=True)
    hs = out.hidden_states[:-1]  # each layer's input (the residual stream)
    for h in hs:
        h.retain_grad()
    print(f"forward finite: {all(bool(torch.isfinite(h).all()) for h in out.hidden_states)}; "
          f"largest |h| at the BOS position over the layers: {max(float(h[:, 0].detach().abs().max()) for h in hs)}")
    h = out.last_hidden_state
    loss = ((h[:, 10:] - target[:, 10:] - 0.01) ** 2).sum() / h[:, 10:].pow(2).sum()
    loss.backward()
    print(f"loss {loss.item():.3g}; gradient at each layer's input, from the top:")
    for layer in range(len(hs) - 1, -1, -1):
        g = hs[layer].grad
        bad = int((~torch.isfinite(g)).any(-1).sum())
        print(f"  layer {layer:2d}: max |g| BOS {g[:, 0].abs().max().item():.2e}, "
              f"other positions {g[:, 1:].abs().max().item():.2e}, non-finite positions {bad}/{g.shape[0] * g.shape[1]}")


def fit(src: Path, words: list[str], text: Path, mode: str, steps: int) -> None:
    import torch
    from transformers import AutoTokenizer

    import vocabsurgeon
    from vocabsurgeon.init.fitted import causal as fitted
    from vocabsurgeon.init.fitted import fit_rows

    # the module that runs the distillation (fitted.py before distill.py was split out of it)
    where = sys.modules[fitted.distill_input_rows.__module__]
    saved = {k: getattr(where, k) for k in ("_checked_prefix_cache", "full_hidden") if hasattr(where, k)}
    if mode in ("full", "plain"):
        where._checked_prefix_cache = lambda *a, **k: None
    if mode == "plain":  # full windows, the backward through every position (before the fix)
        where.full_hidden = lambda base, emb, mask, starts: base(inputs_embeds=emb, attention_mask=mask,
                                                                  use_cache=False).last_hidden_state
    tok = AutoTokenizer.from_pretrained(src)
    tokens = [fitted.FitToken(" " + w, tuple(tok(" " + w, add_special_tokens=False).input_ids)) for w in words]
    opts = fitted.FitOptions(corpus=str(text), input_steps=steps)
    if hasattr(opts, "passes"):
        opts.passes = 1
    if hasattr(opts, "depth"):  # the NaN came from the backward through all the layers
        opts.depth = 1.0
    t0 = time.perf_counter()
    try:
        r = fit_rows(src, tokens, {"input"}, opts)
    finally:
        for k, v in saved.items():
            setattr(where, k, v)
    rows = torch.from_numpy(r.input_rows)
    inp = r.report.get("input", {})
    print(f"{mode} ({Path(vocabsurgeon.__file__).parent.parent}): {r.report['contexts']['windows']} windows, "
          f"{len(words)} words, {steps} steps: skipped {inp.get('skipped_steps', 'not counted')}, "
          f"prefix cache {inp.get('prefix_cache', '-')}, final loss {inp.get('final_loss')}, "
          f"rows not finite {int((~torch.isfinite(rows).all(1)).sum())} of {rows.shape[0]}, "
          f"{time.perf_counter() - t0:.0f} s")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=common.WORK / "tied135-zero-bos")
    ap.add_argument("--build", action="store_true", help="build the model (again)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--grad", action="store_true")
    ap.add_argument("--fit", nargs="*", default=[], choices=["full", "plain", "cache", "old"])
    ap.add_argument("--words", type=int, default=10)
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args(argv)
    args.model.parent.mkdir(parents=True, exist_ok=True)
    if args.build or not (args.model / "config.json").exists():
        build(args.model, args.seed)
    words, text = corpus(args.model, args.words, args.model.parent)
    if args.grad:
        grad(args.model, text)
    for mode in args.fit:
        fit(args.model, words, text, mode, args.steps)


if __name__ == "__main__":
    main()
