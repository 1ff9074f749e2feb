"""`vocabsurgeon inspect`: a checkpoint described before surgery."""

from __future__ import annotations

import click

from ..explore.inspection import INSPECT_MAX_TOKENS
from .options import common_options, emit, hub_options, progress_bars, quiet_hub


@click.command("inspect")
@click.argument("ckpt", type=click.Path(file_okay=False, path_type=str))
@click.option("--corpus", type=click.Path(dir_okay=False, path_type=str),
              help="UTF-8 text for the zero-init risk (default: the corpus shipped with vocabsurgeon).")
@click.option("--max-tokens", default=INSPECT_MAX_TOKENS, show_default=True, type=click.IntRange(min=1),
              help="Corpus tokens run through the model.")
@click.option("--device", default="auto", show_default=True,
              help="Where to run the model: auto (CUDA when present, spread with accelerate), cpu, cuda.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@hub_options("CKPT when it is a Hub repo id", token_use="Used to pull CKPT.")
@common_options
@click.pass_context
def inspect_command(ctx, ckpt, corpus, max_tokens, device, as_json, revision, hf_token):
    """Describe the checkpoint CKPT before surgery: layout, sizes, statistics, zero-init risk.

    Architecture, tied or not, dtype; embedding rows vs tokenizer size vs config vocab_size;
    per matrix the row norms and per-dimension mean and std next to the Xavier std; and, over a
    corpus, log Z of the output softmax with the KL that one zero-initialized token would cause,
    log(1 + 1/Z), and a verdict: safe, caution or dangerous. Changes nothing.

    CKPT is a checkpoint directory or a Hub repo id (org/name, at --revision), pulled as by
    `add`: only config, safetensors weights and tokenizer files, into the Hub cache; a local
    directory of the same spelling wins.

    \b
    Examples:
      vocabsurgeon inspect ckpt/
      vocabsurgeon inspect ckpt/ --corpus domain.txt --json
      vocabsurgeon inspect openai-community/gpt2 --revision main
    """
    from ..explore.inspection import describe, inspect_checkpoint

    quiet_hub(ctx, as_json)
    with progress_bars(ctx) as progress:
        report = inspect_checkpoint(ckpt, corpus, max_tokens=max_tokens, device=device, revision=revision,
                                    token=hf_token, progress=progress)
    if as_json:
        emit(report)
    else:
        click.echo("\n".join(describe(report)))
