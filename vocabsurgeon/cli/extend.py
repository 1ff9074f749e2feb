"""`vocabsurgeon extend`: sub-word tokens learned from a corpus, over the surgery options and body it shares with `add`."""

from __future__ import annotations

from pathlib import Path

import click

from ..extend import DEFAULT_INIT, DEFAULT_MIN_COUNT
from .options import common_options, strategies_in_help, surgery_options
from .surgery import run_and_report, surgery_of


@click.command("extend")
@strategies_in_help(DEFAULT_INIT)
@click.argument("src", type=click.Path(file_okay=False, path_type=str))
@click.argument("out", type=click.Path(path_type=str))
@click.option("--corpus", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="UTF-8 text of the new language or domain to learn from (any size: it is streamed).")
@click.option("--new-tokens", required=True, type=click.IntRange(min=1),
              help="How many sub-word tokens to learn (fewer when no other pair occurs --min-count times).")
@click.option("--keep-text", type=click.Path(dir_okay=False, path_type=str),
              help="UTF-8 text that must keep its tokens (e.g. the model's own language): every new token holds a "
                   "character (byte-level BPE: a byte) it lacks, so any text written in its characters keeps its "
                   "tokens.")
@click.option("--min-count", default=DEFAULT_MIN_COUNT, show_default=True, type=click.IntRange(min=1),
              help="A new merge's pair must occur at least this often in the corpus.")
@surgery_options(init_default=DEFAULT_INIT, corpus_flag="--validate-corpus",
                 dry_run_help="Learn the merges, print the plan and write nothing.")
@common_options
@click.pass_context
def extend_command(ctx, src, out, corpus, new_tokens, keep_text, min_count, **flags):
    """Learn sub-word tokens of a new language or domain from CORPUS and add them to SRC, writing OUT.

    Continues the tokenizer's own BPE training: CORPUS is split by the tokenizer's normalizer and
    pre-tokenizer, each word into the pieces the old merges leave, and the most frequent adjacent
    pair is merged, --new-tokens times. The new merges come after every old one and the new tokens
    after the last id, so existing tokens, ids and merges are unchanged and text changes only where
    a new merge's pair occurs; text written only in --keep-text's characters (bytes, for byte-level
    BPE) changes not at all (the plan counts the old text that changes). Byte-level BPE (GPT-2,
    Llama 3, Qwen, SmolLM2) and SentencePiece BPE (Llama 2, Mistral, Gemma; its tokenizer.model
    gets the new pieces); Unigram and WordPiece are refused with the reason. The rows are grown,
    initialized and validated as `add` does them (validation corpus: --validate-corpus).

    \b
    Init strategies (--init, --init-input, --init-output):
    {strategies}

    \b
    Examples:
      vocabsurgeon extend --corpus ja.txt --new-tokens 8000 ckpt/ out/
      vocabsurgeon extend --corpus ru.txt --new-tokens 8000 --keep-text en-sample.txt --dry-run ckpt/ out/
      vocabsurgeon extend --corpus ru.txt --new-tokens 1000 --json HuggingFaceTB/SmolLM2-135M out/ > summary.json
    """
    from ..engine.target import open_target
    from ..extend.pipeline import extend_validate_push
    from ..extend.plan import ExtendOptions, plan_extend

    s = surgery_of(ctx, src, out, flags)
    learn = ExtendOptions(corpus, new_tokens, keep_text, min_count).check()

    def wrote(d: dict) -> str:
        e = d["extend"]
        return (f"Wrote {out}: {e['new_tokens']:,} new tokens, rows {d['rows_before']} -> {d['rows_after']}, corpus "
                f"tokens per byte {e['tokens_per_byte']['before']:.4f} -> {e['tokens_per_byte']['after']:.4f}, "
                f"{d['seconds']:.2f} s")

    run_and_report(
        ctx, s, wrote=wrote,
        plan=lambda progress: plan_extend(
            open_target(src, s.options, revision=s.revision, token=s.token), learn,
            progress=progress.count("reading corpus", Path(corpus).stat().st_size, "B")),
        run=lambda progress, on_plan, on_step: extend_validate_push(
            src, out, learn, s.options, validation=s.validate, push=s.push, revision=s.revision, token=s.token,
            progress=progress, on_plan=on_plan, on_step=on_step))
