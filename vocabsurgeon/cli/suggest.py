"""`vocabsurgeon suggest`: the words of a domain corpus that save the most tokens, as a tokens file for `add`."""

from __future__ import annotations

from pathlib import Path

import click

from ..explore.suggest import DEFAULT_MIN_COUNT, DEFAULT_TOP
from .options import common_options, emit, hub_options, is_quiet, progress_bars, quiet_hub, tensor_key_options


@click.command("suggest")
@click.argument("ckpt", type=click.Path(file_okay=False, path_type=str))
@click.option("--corpus", required=True, type=click.Path(path_type=str),
              help="UTF-8 text of the domain (any size: it is streamed).")
@click.option("--top", default=DEFAULT_TOP, show_default=True, type=click.IntRange(min=1),
              help="How many words to propose at most.")
@click.option("--min-count", default=DEFAULT_MIN_COUNT, show_default=True, type=click.IntRange(min=1),
              help="Ignore words that occur fewer times in the corpus.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str),
              help="Write the tokens file here instead of stdout (with --json, also write it).")
@tensor_key_options
@click.option("--json", "as_json", is_flag=True,
              help="Print each word's count, pieces and saving, and tokens per byte before and after, as JSON.")
@hub_options("CKPT when it is a Hub repo id", token_use="Used to pull CKPT.")
@common_options
@click.pass_context
def suggest_command(ctx, ckpt, corpus, top, min_count, output, embedding_key, lm_head_key, as_json, revision,
                    hf_token):
    """Propose the words of a domain corpus that save the most tokens, as a tokens file for `add`.

    Counts the corpus's words as the checkpoint's tokenizer splits them (its pre-tokens, without
    the word-start marker) and ranks them by tokens saved: occurrences x (pieces - 1). Words
    that `add` would skip (already one token, a form that would split an existing token, ...)
    are checked with the same plan as `add --dry-run` and never proposed. The corpus is streamed
    in bounded chunks. The projected tokens per byte counts each proposed word as one token where
    it occurs as a whole word.

    \b
    Examples:
      vocabsurgeon suggest ckpt/ --corpus domain.txt --top 500 -o tokens.txt
      vocabsurgeon add --tokens tokens.txt ckpt/ out/
      vocabsurgeon suggest ckpt/ --corpus domain.txt --json > suggestion.json
    """
    from ..explore.suggest import suggest_tokens

    quiet_hub(ctx, as_json)
    quiet = is_quiet(ctx) or as_json
    size = Path(corpus).stat().st_size if Path(corpus).is_file() else None
    with progress_bars(ctx) as progress:
        result = suggest_tokens(ckpt, corpus, top=top, min_count=min_count,
                                progress=progress.count("counting", size, "B"),
                                embedding_key=embedding_key, lm_head_key=lm_head_key, revision=revision,
                                token=hf_token)
    if output:
        from ..errors import WriteError

        try:
            Path(output).write_text(result.tokens_file(), encoding="utf-8")
        except OSError as e:
            raise WriteError(f"{output}: cannot write the tokens file ({e.strerror})") from None
    if as_json:
        emit(result.to_dict() | ({"output": output} if output else {}))
    elif not output:
        click.echo(result.tokens_file(), nl=False)
    if not quiet:
        click.echo(result.describe(), err=True)
        if not result.words:
            click.echo(f"No word of {corpus} saves a token; nothing to propose.", err=True)
        elif output:
            click.echo(f"Wrote {len(result.words)} words to {output}", err=True)
