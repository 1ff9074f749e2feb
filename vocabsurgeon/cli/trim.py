"""`vocabsurgeon trim`: the vocabulary cut down to the tokens a corpus uses."""

from __future__ import annotations

from pathlib import Path

import click

from .options import CREATE_PR_OPTION, PRIVATE_OPTION, common_options, echo_pushed, emit, hub_options, is_quiet, \
    progress_bars, quiet_hub, tensor_key_options


@click.command("trim")
@click.argument("src", type=click.Path(file_okay=False, path_type=str))
@click.argument("out", type=click.Path(path_type=str))
@click.option("--corpus", required=True, type=click.Path(path_type=str),
              help="UTF-8 text of the language or domain to keep (any size: it is streamed).")
@click.option("--vocab-size", type=click.IntRange(min=1), help="Keep this many tokens: the most used, with what must stay.")
@click.option("--min-count", type=click.IntRange(min=1), help="Keep the tokens the corpus uses at least this often.")
@click.option("--keep", "keep_file", type=click.Path(dir_okay=False, path_type=str),
              help="UTF-8 file, one a line: a token as stored (Ġthe, ▁the, ##ing), or text whose tokens stay.")
@click.option("--pad-to-multiple-of", type=click.IntRange(min=1),
              help="Pad the rows to a multiple of N (tensor cores); padding holds the mean kept row.")
@click.option("--link", is_flag=True, help="Hard-link untouched shards instead of copying them (same filesystem only).")
@click.option("--no-fsync", is_flag=True, help="Do not flush the output to disk before renaming it into place.")
@click.option("--force", is_flag=True, help="Replace a non-empty output directory (an earlier vocabsurgeon output).")
@tensor_key_options
@click.option("--dry-run", is_flag=True, help="Print the plan (kept and removed tokens, coverage, bytes saved); "
              "write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable summary on stdout.")
@hub_options("SRC when it is a Hub repo id", token_use="Used to pull SRC and to push.")
@click.option("--push-to", metavar="REPO_ID", help="Push OUT to this Hub repo (org/name) as one commit; see "
              "`vocabsurgeon push`.")
@click.option("--push-revision", metavar="BRANCH", help="With --push-to: the branch to commit to (default main).")
@PRIVATE_OPTION
@CREATE_PR_OPTION
@click.option("--message", help="With --push-to: the commit message (default: what was trimmed, to how many tokens).")
@common_options
@click.pass_context
def trim_command(ctx, src, out, corpus, vocab_size, min_count, keep_file, pad_to_multiple_of, link, no_fsync, force,
                 embedding_key, lm_head_key, dry_run, as_json, revision, hf_token, push_to, push_revision, private,
                 create_pr, message):
    """Cut the vocabulary of SRC down to the tokens CORPUS uses and write the checkpoint to OUT.

    Counts the corpus with the original tokenizer and keeps the most used tokens (--vocab-size)
    or those used at least --min-count times, plus what must stay: special and added tokens,
    tokens the configs and chat template use, the byte tokens (or single characters), the
    unknown token, the pieces every kept BPE token is merged from, and --keep. The embedding,
    lm_head and vocabulary-sized biases keep exactly those rows (streamed shard by shard);
    vocabsurgeon_idmap.json maps each new id to its old id. Text whose tokens were all kept
    tokenizes to the same tokens; other text still encodes and decodes as before.

    \b
    Examples:
      vocabsurgeon trim --corpus en.txt --vocab-size 32000 ckpt/ out/
      vocabsurgeon trim --corpus en.txt --min-count 2 --keep keep.txt --dry-run --json ckpt/ out/
    """
    from ..engine.finish import PushOptions
    from ..trim.surgery import TrimOptions, plan_trim, push_trimmed, read_keep_file, write_trim

    push_options = PushOptions.from_flags(push_to, revision=push_revision, private=private, create_pr=create_pr,
                                          token=hf_token, message=message)
    options = TrimOptions(vocab_size=vocab_size, min_count=min_count,
                          keep=read_keep_file(keep_file) if keep_file else [], pad_to_multiple_of=pad_to_multiple_of,
                          link=link, fsync=not no_fsync, force=force, embedding_key=embedding_key,
                          lm_head_key=lm_head_key).check()
    quiet_hub(ctx, as_json)
    quiet = is_quiet(ctx) or as_json
    if not dry_run:
        from ..checkpoint.staging import check_output_path

        check_output_path(Path(src), Path(out), force)  # before the corpus is counted
    size = Path(corpus).stat().st_size if Path(corpus).is_file() else None
    with progress_bars(ctx) as progress:
        plan = plan_trim(src, corpus, options, revision=revision, token=hf_token,
                         progress=progress.count("counting", size, "B"))
        if dry_run:
            if as_json:
                emit({"dry_run": True, **plan.to_dict()})
            else:
                click.echo(plan.describe())
            return
        if not quiet:
            click.echo(plan.describe(), err=True)
        result = write_trim(plan, out, progress.count("writing", plan.ckpt.total_size - plan.bytes_saved, "B"))
    d = result.to_dict()
    if push_options is not None:
        if not quiet:
            click.echo(f"Pushing {out} to {push_to}", err=True)
        d["push"] = push_trimmed(result, push_options).to_dict()
    if as_json:
        emit(d)
    elif not quiet:
        click.echo(f"Wrote {out}: {d['tokens_kept']} of {d['tokens_before']} tokens kept, rows {d['rows_before']} -> "
                   f"{d['rows_after']}, {d['bytes_saved']:,} bytes saved, {d['seconds']:.2f} s", err=True)
        if push_options is not None:
            echo_pushed(d["push"])
