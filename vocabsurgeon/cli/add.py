"""`vocabsurgeon add`: new words as tokens of a checkpoint, over the surgery options and body it shares with `extend`."""

from __future__ import annotations

import dataclasses

import click

from .options import common_options, strategies_in_help, surgery_options
from .surgery import run_and_report, surgery_of


@click.command("add")
@strategies_in_help("mean")
@click.argument("src", type=click.Path(file_okay=False, path_type=str))
@click.argument("out", type=click.Path(path_type=str))
@click.option("--tokens", "tokens_file", type=click.Path(dir_okay=False, path_type=str),
              help="UTF-8 file with one new token per line; '#' starts a comment line (write '\\#' for a "
                   "token that starts with '#'), blank lines are ignored.")
@click.option("-t", "--token", "inline", multiple=True, help="A new token (repeatable), in addition to --tokens.")
@click.option("--special", is_flag=True, help="Add the tokens as special tokens (skipped by decode(skip_special_tokens)).")
@click.option("--strict", is_flag=True, help="Exit 2 before writing when any token is skipped (all or nothing).")
@click.option("--reuse-reserved", is_flag=True,
              help="Put new tokens on every row no token uses and on reserved placeholder tokens "
                   "(<|reserved_special_token_N|>, <unusedN>, [unusedN], <SPECIAL_N>) before appending rows "
                   "(without it, new ids follow the tokenizer's last id, on the padding rows past it).")
@click.option("--gguf-parity", is_flag=True,
              help="Keep only entries that llama.cpp (a GGUF conversion) tokenizes as transformers does: skip the "
                   "words whose only entry it reads otherwise (Llama 2 / Mistral words of 3+ pieces, which it takes "
                   "as added tokens with a space after them; byte-level bare forms that only ignore_merges reaches).")
@surgery_options(init_default="mean", dry_run_help="Print the plan and write nothing.")
@common_options
@click.pass_context
def add_command(ctx, src, out, tokens_file, inline, **flags):
    """Add tokens to the checkpoint SRC and write the new checkpoint to OUT.

    SRC is a checkpoint directory or a Hub repo id (org/name, at --revision); a local directory
    of the same spelling wins. From the Hub only config, safetensors weights, tokenizer,
    generation config, chat template and README.md are downloaded (into the Hub cache), never
    pickle weights. OUT gets a README.md model card that records the surgery (and the validation
    figures); --push-to then uploads OUT as one commit.

    Streams the vocabulary tensors shard by shard (never loads the model), copies untouched shards
    byte for byte, writes OUT atomically and re-reads it before reporting success. New words
    become one token each wherever they occur; text without them tokenizes exactly as before.

    \b
    Init strategies (--init, --init-input, --init-output):
    {strategies}
    New bias entries get the mean bias (--init fitted on a masked-LM head: fitted with the rows on
    masked positions, then lowered to keep the KL bound).

    \b
    Examples:
      vocabsurgeon add --tokens lotr.txt --init mean ckpt/ out/
      vocabsurgeon add --tokens lotr.txt --init-input subword-mean --init-output mean llama/ out/
      vocabsurgeon add --tokens lotr.txt --init fitted --fit-corpus lotr-text.txt --untie gpt2/ out/
      vocabsurgeon add -t '<|tool|>' --special --json ckpt/ out/ > summary.json
      vocabsurgeon add --tokens lotr.txt --push-to me/gpt2-lotr --create-pr openai-community/gpt2 out/
    """
    from ..add.pipeline import add_validate_push
    from ..add.plan import open_target, plan_tokens
    from ..add.wordlist import gather_tokens

    tokens = gather_tokens(tokens_file, inline)
    # Every option is checked before any work, also with --dry-run and --no-validate.
    s = surgery_of(ctx, src, out, flags)
    if s.validation.corpus is not None:  # the plan checks the words validation reads
        s.options = dataclasses.replace(s.options, check_corpus=s.validation.corpus)

    def wrote(d: dict) -> str:
        return (f"Wrote {out}: {len(d['added'])} tokens, rows {d['rows_before']} -> {d['rows_after']}, "
                f"{len(d['files_rewritten'])} shard(s) rewritten, {len(d['files_copied'])} copied, {d['seconds']:.2f} s")

    # Add, validate, the card with its figures, publish, push: the engine's order, which calls back to print. On a
    # validation failure OUT is as it was (the output kept as OUT.rejected) and ValidationFailed exits 3.
    run_and_report(
        ctx, s, wrote=wrote,
        plan=lambda progress: plan_tokens(open_target(src, s.options, revision=s.revision, token=s.token), tokens),
        run=lambda progress, on_plan, on_step: add_validate_push(
            src, out, tokens, s.options, validation=s.validate, push=s.push, revision=s.revision, token=s.token,
            progress=progress, on_plan=on_plan, on_step=on_step))
