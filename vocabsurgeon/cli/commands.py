"""The `vocabsurgeon` command line: a thin click layer that parses, calls the library and prints.

This is the one place that turns library errors into exit codes and one-line messages (see
`errors.py` for the codes). Human output goes to stderr, `--json` output to stdout. Set
VOCABSURGEON_DEBUG=1 to see tracebacks.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import traceback
from pathlib import Path

import click

from .._compat import check_versions
from .._version import __version__
from ..errors import EXIT_INTERNAL, EXIT_INTERRUPTED, InputError, Interrupted, VocabSurgeonError
from ..explore.compare import DEFAULT_K
from ..init import DEFAULT_EPS, MAX_SEED
from ..explore.inspection import INSPECT_MAX_TOKENS
from ..explore.suggest import DEFAULT_MIN_COUNT, DEFAULT_TOP
from ..extend import DEFAULT_INIT as EXTEND_INIT, DEFAULT_MIN_COUNT as DEFAULT_EXTEND_MIN_COUNT
from .options import (
    CREATE_PR_OPTION, HF_TOKEN_HELP, PRIVATE_OPTION, STRATEGY_CHOICE, check_plot_dir, check_plot_here, common_options,
    dtype_option,
    emit, fit_options, hub_options, is_quiet, progress_bars, quiet_hub, restoring_library_settings, setup_logging,
    take_fields, tensor_key_options, two_checkpoint_hub_options, validation_options, validation_options_of,
)


class _Group(click.Group):
    """Turns library exceptions into one line on stderr and a documented exit status."""

    def invoke(self, ctx):
        debug = os.environ.get("VOCABSURGEON_DEBUG") not in (None, "", "0")
        try:
            with restoring_library_settings():
                return super().invoke(ctx)
        except VocabSurgeonError as e:
            if debug:
                traceback.print_exc()
            click.echo(str(e) if isinstance(e, Interrupted) else f"Error: {e}", err=True)
            ctx.exit(e.exit_code)
        except KeyboardInterrupt:
            click.echo("Interrupted; nothing was written.", err=True)
            ctx.exit(EXIT_INTERRUPTED)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as e:  # a bug: one line by default, the traceback on request
            if debug:
                traceback.print_exc()
            click.echo(
                f"Error: internal error {type(e).__name__}: {e}. Please report it; rerun with "
                "VOCABSURGEON_DEBUG=1 for the traceback.",
                err=True,
            )
            ctx.exit(EXIT_INTERNAL)


def _sigterm(signum, frame):  # run cleanups (staging removal) on `kill`, as on Ctrl-C
    raise KeyboardInterrupt


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="vocabsurgeon")
@click.option("-q", "--quiet", is_flag=True, help="Only errors on stderr; no progress bars.")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging on stderr.")
@click.pass_context
def cli(ctx, quiet, verbose):
    """Add new tokens to a Hugging Face checkpoint on disk, streaming, safely and fast.

    \b
    Examples:
      vocabsurgeon add --tokens lotr.txt --init mean ckpt/ out/
      vocabsurgeon add --tokens lotr.txt --dry-run ckpt/ out/
      vocabsurgeon add -t Frodo -t Gandalf --init subword-mean --json ckpt/ out/
      vocabsurgeon add --tokens lotr.txt --push-to me/gpt2-lotr --create-pr openai-community/gpt2 out/
      vocabsurgeon push out/ me/gpt2-lotr --private
      vocabsurgeon trim --corpus en.txt --vocab-size 32000 ckpt/ out/

    Exit status: 0 success, 1 internal error, 2 bad input, 3 validation failed,
    4 push failed, 5 write failed, 130 interrupted.
    """
    ctx.ensure_object(dict)
    ctx.obj.update(quiet=quiet, verbose=verbose)
    setup_logging(quiet, verbose)
    check_versions()  # before anything runs: an older transformers or tokenizers would write something different
    signal.signal(signal.SIGTERM, _sigterm)


def _extend_validation_options(fn):
    """`validate`'s flags for `extend`, whose --corpus is what it learns from: --validate-corpus."""
    return validation_options(fn, corpus_flag="--validate-corpus")


def _strategies_in_help(default: str):
    """`add --help` lists the init strategies from their records (`init.STRATEGIES`), `default` marked."""
    from ..init import strategies_help

    def put(fn):
        fn.__doc__ = fn.__doc__.replace("    {strategies}", strategies_help(indent="      ", default=default))
        return fn

    return put


@cli.command("add")
@_strategies_in_help("mean")
@click.argument("src", type=click.Path(file_okay=False, path_type=str))
@click.argument("out", type=click.Path(path_type=str))
@click.option("--tokens", "tokens_file", type=click.Path(dir_okay=False, path_type=str),
              help="UTF-8 file with one new token per line; '#' starts a comment line (write '\\#' for a "
                   "token that starts with '#'), blank lines are ignored.")
@click.option("-t", "--token", "inline", multiple=True, help="A new token (repeatable), in addition to --tokens.")
@click.option("--init", default="mean", show_default=True, type=STRATEGY_CHOICE,
              help="Init strategy of the new rows of every matrix.")
@click.option("--init-input", type=STRATEGY_CHOICE, help="Init of the input embedding (untied models).")
@click.option("--init-output", type=STRATEGY_CHOICE, help="Init of the output matrix / lm_head (untied models).")
@click.option("--eps", default=DEFAULT_EPS, show_default=True, type=float,
              help="Noise scale of mean-noise: new rows ~ N(mu, eps * Sigma).")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0, MAX_SEED),
              help="Seed of every random init (deterministic output).")
@click.option("--special", is_flag=True, help="Add the tokens as special tokens (skipped by decode(skip_special_tokens)).")
@click.option("--strict", is_flag=True, help="Exit 2 before writing when any token is skipped (all or nothing).")
@click.option("--pad-to-multiple-of", type=click.IntRange(min=1),
              help="Pad the rows to a multiple of N (tensor cores); padding holds the mean row. Default: the "
                   "checkpoint's own multiple where it has padding rows past the tokenizer (1: no padding).")
@click.option("--reuse-reserved", is_flag=True,
              help="Put new tokens on every row no token uses and on reserved placeholder tokens "
                   "(<|reserved_special_token_N|>, <unusedN>, [unusedN], <SPECIAL_N>) before appending rows "
                   "(without it, new ids follow the tokenizer's last id, on the padding rows past it).")
@click.option("--gguf-parity", is_flag=True,
              help="Keep only entries that llama.cpp (a GGUF conversion) tokenizes as transformers does: skip the "
                   "words whose only entry it reads otherwise (Llama 2 / Mistral words of 3+ pieces, which it takes "
                   "as added tokens with a space after them; byte-level bare forms that only ignore_merges reaches).")
@click.option("--link", is_flag=True, help="Hard-link untouched shards instead of copying them (same filesystem only).")
@click.option("--no-fsync", is_flag=True,
              help="Do not flush the output to disk before renaming it into place: faster on slow disks (up to "
                   "2x in copy mode), still atomic if the process dies, but a power cut may leave a damaged output.")
@click.option("--force", is_flag=True, help="Replace a non-empty output directory.")
@click.option("--device", default="auto", show_default=True,
              help="Where to compute statistics and the forward passes of --init fitted: auto, cpu, cuda.")
@dtype_option
@tensor_key_options
@click.option("--dry-run", is_flag=True, help="Print the plan and write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable summary on stdout.")
@click.option("--no-validate", is_flag=True,
              help="Skip the validation that runs after writing (it loads the new model with transformers, "
                   "and the original too when the output is not a plain expansion of it).")
@hub_options("SRC when it is a Hub repo id", token_use="Used to pull SRC and to push.")
@click.option("--push-to", metavar="REPO_ID", help="Push OUT to this Hub repo (org/name) as one commit, after "
              "validation passed; see `vocabsurgeon push`.")
@click.option("--push-revision", metavar="BRANCH", help="With --push-to: the branch to commit to (created from main "
              "when missing; default main).")
@PRIVATE_OPTION
@CREATE_PR_OPTION
@click.option("--message", help="With --push-to: the commit message (default: what was added, to which model).")
@fit_options
@validation_options
@common_options
@click.pass_context
def add_command(ctx, src, out, tokens_file, inline, dry_run, as_json, no_validate, revision, hf_token, push_to, push_revision,
                private, create_pr, message, **flags):
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
    from ..add.pipeline import PushOptions, add_validate_push
    from ..add.plan import AddOptions, open_target, plan_tokens
    from ..add.wordlist import gather_tokens

    tokens = gather_tokens(tokens_file, inline)
    # Every option is checked before any work, also with --dry-run and --no-validate.
    push_options = PushOptions.from_flags(push_to, revision=push_revision, private=private, create_pr=create_pr,
                                          token=hf_token, message=message)
    # The one place the flags become the options record: each AddOptions field is the flag of its name
    # (--no-fsync is fsync=False); the flags left are the validation's.
    flags["fsync"] = not flags.pop("no_fsync")
    options = AddOptions(**take_fields(AddOptions, flags)).check()
    validation_opts = _validation_of(flags, options, out, no_validate)
    if validation_opts.corpus is not None:  # the plan checks the words of the corpus that validation reads
        options = dataclasses.replace(options, check_corpus=validation_opts.corpus)
    quiet_hub(ctx, as_json)
    quiet = is_quiet(ctx)
    if dry_run:
        plan = plan_tokens(open_target(src, options, revision=revision, token=hf_token), tokens)
        _emit_plan(plan, as_json)
        return

    # Add, validate, the card with its figures, push: the library's pipeline, which calls back here
    # to print. On a validation failure OUT stays and ValidationFailed exits 3; on a push failure
    # PushError exits 4.
    done = _run_reporting(ctx, as_json, out, push_to, lambda progress, on_plan, on_step: add_validate_push(
        src, out, tokens, options, validation=None if no_validate else validation_opts, push=push_options,
        revision=revision, token=hf_token, progress=progress, on_plan=on_plan, on_step=on_step))
    summary = done.to_dict()
    if as_json:
        emit(summary)
    elif not quiet:
        click.echo(
            f"Wrote {out}: {len(summary['added'])} tokens, rows {summary['rows_before']} -> {summary['rows_after']}, "
            f"{len(summary['files_rewritten'])} shard(s) rewritten, {len(summary['files_copied'])} copied, "
            f"{summary['seconds']:.2f} s",
            err=True,
        )
        if push_to:
            _echo_pushed(summary["push"])


_K_HELP = ("K: how many nearest neighbours of each token, by inner product, the token itself excluded "
           "(10, as in the KNN-match paper).")
_WHICH_OPTION = click.option("--which", type=click.Choice(["input", "output"]), default="input", show_default=True,
                             help="Which matrix: the input embedding, or the output matrix (lm_head; the "
                                  "embedding when tied).")
_DEVICE_OPTION = click.option("--device", default="auto", show_default=True,
                              help="Where to compute the scores: auto (CUDA when present), cpu, cuda.")


@cli.command("compare")
@click.argument("a", type=click.Path(file_okay=False, path_type=str))
@click.argument("b", type=click.Path(file_okay=False, path_type=str))
@click.option("--k", "k", default=DEFAULT_K, show_default=True, type=int, help=_K_HELP)
@_WHICH_OPTION
@_DEVICE_OPTION
@click.option("--plot", type=click.Path(dir_okay=False, path_type=str), callback=check_plot_here,
              help="Also write a PNG histogram of the per-token scores (needs matplotlib).")
@tensor_key_options
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON on stdout.")
@two_checkpoint_hub_options("A and B")
@common_options
@click.pass_context
def compare_command(ctx, a, b, k, which, device, plot, embedding_key, lm_head_key, as_json, revision, hf_token):
    """Compare the vocabulary matrices of checkpoints A and B by KNN-match similarity.

    For each token, take its K nearest neighbours by inner product (itself excluded) in A and in
    B; its score is the Jaccard overlap of the two sets, from 0 (no neighbour in common) to 1
    (the same K). Prints the mean, percentiles, a histogram and the lowest/highest tokens. Use it
    for before/after fine-tuning, two seeds or two inits.

    Inner product, not cosine: the model scores with inner products (logits are h . W), so a
    row's norm is part of its meaning; the measure is unchanged by rotating a space and does not
    need A and B to have the same width. When the vocabularies differ, the tokens whose strings
    both tokenizers share are compared (neighbours are searched among them) and their number is
    reported. The n x n score matrix is never built: scores are computed in row chunks and only
    the top K are kept.

    A and B are checkpoint directories or Hub repo ids (org/name), pulled as by `add`; a local
    directory of the same spelling wins. One --revision serves the one(s) given as repo ids.

    \b
    Examples:
      vocabsurgeon compare base/ finetuned/
      vocabsurgeon compare seed0/ seed1/ --k 20 --which output --json
      vocabsurgeon compare ckpt/ out/ --plot knn.png
      vocabsurgeon compare openai-community/gpt2 out/gpt2-lotr --revision main
    """
    from ..explore.compare import compare as run_compare, plot_histogram

    quiet_hub(ctx, as_json)
    quiet = is_quiet(ctx) or as_json
    with progress_bars(ctx, as_json) as progress:
        advance = progress.count("comparing", None, "tok")
        result = run_compare(a, b, k, which=which, device=device, embedding_key=embedding_key,
                             lm_head_key=lm_head_key, progress=advance,
                             on_total=lambda n: progress.count("comparing", n, "tok"), revision=revision,
                             token=hf_token)
    if plot:
        plot_histogram(result, plot)
    if as_json:
        emit(result.to_dict() | ({"plot": plot} if plot else {}))
    else:
        click.echo(result.describe())
        if plot and not quiet:
            click.echo(f"Wrote {plot}", err=True)


@cli.command("neighbors")
@click.argument("ckpt", type=click.Path(file_okay=False, path_type=str))
@click.argument("tokens", nargs=-1, required=True)
@click.option("--k", "k", default=DEFAULT_K, show_default=True, type=int,
              help="K: how many nearest neighbours of each token, the token itself excluded.")
@click.option("--metric", type=click.Choice(["dot", "cosine"]), default="dot", show_default=True,
              help="dot: inner product, what the model computes (norm matters); cosine: direction only.")
@_WHICH_OPTION
@_DEVICE_OPTION
@tensor_key_options
@click.option("--json", "as_json", is_flag=True, help="Print the neighbours as JSON on stdout.")
@hub_options("CKPT when it is a Hub repo id", token_use="Used to pull CKPT.")
@common_options
@click.pass_context
def neighbors_command(ctx, ckpt, tokens, k, metric, which, device, embedding_key, lm_head_key, as_json, revision, hf_token):
    """List the K nearest neighbours of each TOKEN in the checkpoint CKPT, with their scores.

    A TOKEN is a vocabulary string ('Ġthe'), the text it stands for (' the', 'Frodo') or a row
    id ('#42'). Use it to see where an init put a new token: a subword-mean 'Frodo' should sit
    near its pieces and other names. Inner product (--metric dot, the default) is what the
    model computes, so a large-norm row is everyone's neighbour; --metric cosine shows direction
    only. CKPT is a checkpoint directory or a Hub repo id (org/name, at --revision), pulled as by
    `add`; a local directory of the same spelling wins.

    \b
    Examples:
      vocabsurgeon neighbors out/ Frodo ' Frodo' --metric cosine
      vocabsurgeon neighbors ckpt/ ' the' '#42' --k 5 --which output --json
      vocabsurgeon neighbors openai-community/gpt2 ' king' --metric cosine
    """
    from ..explore.compare import neighbors as find

    quiet_hub(ctx, as_json)
    found = find(ckpt, list(tokens), k, metric=metric, which=which, device=device,
                 embedding_key=embedding_key, lm_head_key=lm_head_key, revision=revision, token=hf_token)
    if as_json:
        emit({"checkpoint": ckpt, "k": k, "metric": metric, "which": which,
               "tokens": [n.to_dict() for n in found]})
    else:
        click.echo("\n".join(n.describe() for n in found if n.error is None))
    failed = [n for n in found if n.error is not None]
    for n in failed:
        click.echo(f"Error: {n.error}", err=True)
    if failed:  # every other query was answered; the exit status still says that one was not
        ctx.exit(2)


@cli.command("suggest")
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
    with progress_bars(ctx, as_json) as progress:
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


@cli.command("trim")
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
    with progress_bars(ctx, as_json) as progress:
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
            _echo_pushed(d["push"])


@cli.command("extend")
@_strategies_in_help(EXTEND_INIT)
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
@click.option("--min-count", default=DEFAULT_EXTEND_MIN_COUNT, show_default=True, type=click.IntRange(min=1),
              help="A new merge's pair must occur at least this often in the corpus.")
@click.option("--init", default=EXTEND_INIT, show_default=True, type=STRATEGY_CHOICE,
              help="Init strategy of the new rows of every matrix.")
@click.option("--init-input", type=STRATEGY_CHOICE, help="Init of the input embedding (untied models).")
@click.option("--init-output", type=STRATEGY_CHOICE, help="Init of the output matrix / lm_head (untied models).")
@click.option("--eps", default=DEFAULT_EPS, show_default=True, type=float,
              help="Noise scale of mean-noise: new rows ~ N(mu, eps * Sigma).")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0, MAX_SEED),
              help="Seed of every random init (deterministic output).")
@click.option("--pad-to-multiple-of", type=click.IntRange(min=1),
              help="Pad the rows to a multiple of N (tensor cores); padding holds the mean row. Default: the "
                   "checkpoint's own multiple where it has padding rows past the tokenizer (1: no padding).")
@click.option("--link", is_flag=True, help="Hard-link untouched shards instead of copying them (same filesystem only).")
@click.option("--no-fsync", is_flag=True, help="Do not flush the output to disk before renaming it into place.")
@click.option("--force", is_flag=True, help="Replace a non-empty output directory.")
@click.option("--device", default="auto", show_default=True,
              help="Where to compute statistics and the forward passes of --init fitted: auto, cpu, cuda.")
@dtype_option
@tensor_key_options
@click.option("--dry-run", is_flag=True, help="Learn the merges, print the plan and write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable summary on stdout.")
@click.option("--no-validate", is_flag=True, help="Skip the validation that runs after writing (as in `add`).")
@hub_options("SRC when it is a Hub repo id", token_use="Used to pull SRC and to push.")
@click.option("--push-to", metavar="REPO_ID", help="Push OUT to this Hub repo (org/name) as one commit, after "
              "validation passed; see `vocabsurgeon push`.")
@click.option("--push-revision", metavar="BRANCH", help="With --push-to: the branch to commit to (default main).")
@PRIVATE_OPTION
@CREATE_PR_OPTION
@click.option("--message", help="With --push-to: the commit message (default: what was added, to which model).")
@fit_options
@_extend_validation_options
@common_options
@click.pass_context
def extend_command(ctx, src, out, corpus, new_tokens, keep_text, min_count, dry_run, as_json, no_validate, revision,
                   hf_token, push_to, push_revision, private, create_pr, message, **flags):
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
    from ..engine.finish import PushOptions
    from ..engine.target import AddOptions, open_target
    from ..extend.pipeline import extend_validate_push
    from ..extend.plan import ExtendOptions, plan_extend

    push_options = PushOptions.from_flags(push_to, revision=push_revision, private=private, create_pr=create_pr,
                                          token=hf_token, message=message)
    flags["fsync"] = not flags.pop("no_fsync")
    options = AddOptions(**take_fields(AddOptions, flags)).check()
    validation_opts = _validation_of(flags, options, out, no_validate)
    learn = ExtendOptions(corpus, new_tokens, keep_text, min_count).check()
    quiet_hub(ctx, as_json)
    quiet = is_quiet(ctx)
    if dry_run:
        with progress_bars(ctx, as_json) as progress:
            plan = plan_extend(open_target(src, options, revision=revision, token=hf_token), learn,
                               progress=progress.count("reading corpus", Path(corpus).stat().st_size, "B"))
        _emit_plan(plan, as_json)
        return

    done = _run_reporting(ctx, as_json, out, push_to, lambda progress, on_plan, on_step: extend_validate_push(
        src, out, learn, options, validation=None if no_validate else validation_opts, push=push_options,
        revision=revision, token=hf_token, progress=progress, on_plan=on_plan, on_step=on_step))
    summary = done.to_dict()
    if as_json:
        emit(summary)
    elif not quiet:
        e = summary["extend"]
        click.echo(f"Wrote {out}: {e['new_tokens']:,} new tokens, rows {summary['rows_before']} -> "
                   f"{summary['rows_after']}, corpus tokens per byte {e['tokens_per_byte']['before']:.4f} -> "
                   f"{e['tokens_per_byte']['after']:.4f}, {summary['seconds']:.2f} s", err=True)
        if push_to:
            _echo_pushed(summary["push"])


def _validation_of(flags: dict, options, out: str, no_validate: bool):
    """`add`'s and `extend`'s validation options from their flags, checked before any work."""
    validation_opts = validation_options_of(flags, seed=options.seed, device=options.device, dtype=options.dtype)
    if no_validate and validation_opts.plot:
        raise InputError("--plot draws the validation's KL histogram; drop --no-validate or --plot")
    check_plot_dir(validation_opts.plot, created=out)
    validation_opts.check()
    return validation_opts


def _emit_plan(plan, as_json: bool) -> None:
    """A --dry-run's plan: its JSON on stdout with --json, else its description."""
    if as_json:
        emit({"dry_run": True, **plan.to_dict()})
    else:
        click.echo(plan.describe())


def _run_reporting(ctx, as_json: bool, out: str, push_to: str | None, run):
    """Run `add`'s or `extend`'s pipeline, `run(progress, on_plan, on_step)`, printing as it calls back: the plan,
    each step, the validation's figures once; with --json, what was finished when validation, the push or an
    interrupt stopped it. Returns the pipeline's result."""
    from ..errors import PushError, ValidationFailed

    quiet = is_quiet(ctx)
    shown = []

    def planned(plan) -> None:
        if not quiet and not as_json:
            click.echo(plan.describe(), err=True)

    def step(name: str, done) -> None:
        if quiet or as_json:
            return
        if done.report is not None and not shown:  # the validation's figures, once, before the next step
            shown.append(True)
            click.echo("\n".join(done.report.summary_lines()), err=True)
        if name == "validate":
            click.echo(f"Validating {done.result.out} against {done.result.plan.src} (--no-validate skips this)",
                       err=True)
        elif name == "push":
            click.echo(f"Pushing {out} to {push_to}", err=True)

    try:
        with progress_bars(ctx, as_json) as progress:
            done = run(progress, planned, step)
    except ValidationFailed as e:
        if as_json:
            emit(e.finished.to_dict())
        elif not quiet and e.report:
            click.echo("\n".join(e.report.summary_lines()[:-1]), err=True)
        raise
    except PushError as e:
        if as_json and getattr(e, "finished", None) is not None:
            emit({**e.finished.to_dict(), "push": {"error": str(e)}})
        raise
    except Interrupted as e:
        if as_json and getattr(e, "finished", None) is not None:  # interrupted after the output was written
            emit({**e.finished.result.to_dict(), "interrupted": str(e)})
        raise
    step("done", done)
    return done


def _echo_pushed(d: dict) -> None:
    where = f"pull request {d['pr_url']}" if d["pr_url"] else d["commit_url"]
    click.echo(f"Pushed {len(d['files'])} files to {d['repo_id']} ({d['revision']}): {where}", err=True)


@cli.command("push")
@click.argument("out", type=click.Path(file_okay=False, path_type=str))
@click.argument("repo_id")
@PRIVATE_OPTION
@click.option("--revision", metavar="BRANCH",
              help="The branch to commit to, created from main when missing (default: main); with --create-pr, "
                   "the branch the pull request targets.")
@CREATE_PR_OPTION
@click.option("--token", "--hf-token", "token", help=HF_TOKEN_HELP)
@click.option("--message", help="The commit message (default: \"Upload OUT with vocabsurgeon VERSION\").")
@click.option("--json", "as_json", is_flag=True,
              help="Print repo, revision, commit url, pr url and files as JSON on stdout.")
@common_options
@click.pass_context
def push_command(ctx, out, repo_id, private, revision, create_pr, token, message, as_json):
    """Upload the checkpoint OUT (written by `add`) to the Hub repo REPO_ID as one commit.

    Creates the repo if needed, then commits an explicit list of files: the safetensors weights
    and index, config, tokenizer and generation files, chat template, the model card README.md,
    the validation report and plot. Stray files (staging leftovers, *.tmp, .DS_Store, __pycache__,
    locks, pickle files) are never sent. Remote files that would contradict the upload (old
    shards, pickle weights, slow-tokenizer files without the new tokens) are deleted in the same
    commit.

    A Hub commit is atomic: files are uploaded first, then one commit call makes them visible. An
    interrupted push leaves the branch as it was; rerun the same command and only what the Hub
    does not have yet is uploaded. Use --create-pr (or --revision BRANCH) to review a large
    upload before it reaches main.

    \b
    Examples:
      vocabsurgeon push out/ me/gpt2-lotr
      vocabsurgeon push out/ me/gpt2-lotr --create-pr --message "Add LOTR names"
      vocabsurgeon push out/ my-org/llama-tools --private --revision vocab-v2 --json
    """
    from ..checkpoint.hub import push

    quiet_hub(ctx, as_json)
    result = push(out, repo_id, private=private, revision=revision, create_pr=create_pr, token=token, message=message)
    if as_json:
        emit(result.to_dict())
    elif not is_quiet(ctx):
        _echo_pushed(result.to_dict())


@cli.command("validate")
@click.argument("base", type=click.Path(file_okay=False, path_type=str))
@click.argument("new", type=click.Path(file_okay=False, path_type=str))
@validation_options
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0, MAX_SEED), help="Seed of the sampling check.")
@click.option("--device", default="auto", show_default=True,
              help="Where to run the models: auto (CUDA when present, spread with accelerate), cpu, cuda.")
@dtype_option
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
@click.option("--method", type=click.Choice(["auto", "one-pass", "two-pass"]), default="auto", show_default=True,
              help="one-pass runs only NEW (its first n logits are BASE's) and needs NEW made from BASE by add, "
                   "checked from the files; two-pass runs both models; auto picks one-pass when it applies.")
@two_checkpoint_hub_options("BASE and NEW")
@common_options
@click.pass_context
def validate_command(ctx, base, new, seed, device, dtype, as_json, method, corpus, max_tokens, plot, revision, hf_token,
                     **limits):
    """Check that the expanded checkpoint NEW is safe to use, against its original BASE.

    First, no row of NEW's vocabulary tensors may hold NaN or Inf (read from the files). Then, on
    a held-out corpus tokenized with the original tokenizer: KL(p_old||p_new) at every position
    (mean, p99, max, next to the mean-init bound log(1+k/n)) and unchanged old-vocabulary logits;
    seeded samples (how many new tokens appear after prompts without new words, and how often a
    new token makes the model repeat it); the tokenizer invariants; and, where the corpus uses the
    new words, bits per byte of both models (reported, not pass/fail). With a chat template, a few
    rendered conversations get the KL and tokenization checks too, and greedy answers to chat
    prompts must stay the same.

    When NEW was made from BASE by add (checked from the files), only NEW is loaded and run once:
    BASE's logits are its first n logits (--method auto; the report's "method" says which ran).

    BASE and NEW are checkpoint directories or Hub repo ids (org/name), pulled as by `add`; a
    local directory of the same spelling wins. BASE is often the original model on the Hub:
    one --revision serves the one(s) given as repo ids.

    Exit status 0 when every check passes, 3 when one fails (the reason is printed), 2 on bad input.

    \b
    Examples:
      vocabsurgeon validate ckpt/ out/
      vocabsurgeon validate ckpt/ out/ --corpus lotr_chapter.txt --json > report.json
      vocabsurgeon validate ckpt/ out/ --plot kl.png --max-tokens 512
      vocabsurgeon validate openai-community/gpt2 out/gpt2-lotr --revision main
    """
    from ..errors import ValidationFailed
    from ..engine.finish import record_validation
    from ..validation.validate import Thresholds, check_options, validate_checkpoint

    thresholds = Thresholds(**limits)
    check_options(thresholds=thresholds, device=device, max_tokens=max_tokens, plot=plot, dtype=dtype)
    check_plot_dir(plot)
    quiet_hub(ctx, as_json)
    quiet = is_quiet(ctx) or as_json
    with progress_bars(ctx, as_json) as progress:
        report = validate_checkpoint(base, new, corpus, thresholds=thresholds, max_tokens=max_tokens, seed=seed,
                                     device=device, dtype=dtype, plot=plot, revision=revision, token=hf_token,
                                     progress=progress,
                                     method=method)
    # An add output whose validation was interrupted gets its report and card filled in.
    filled = record_validation(new, report, plot)
    if as_json:
        emit(report.to_dict())
    elif not is_quiet(ctx):
        click.echo("\n".join(report.summary_lines()[:-1]), err=True)
        if plot:
            click.echo(f"Wrote {plot}", err=True)
        if filled:
            click.echo(f"Wrote the report and the model card's validation section into {new}", err=True)
    if not report.passed:
        raise ValidationFailed(f"{new}: validation failed: {'; '.join(report.failures)}", report)
    if not quiet:
        click.echo("Validation passed.", err=True)


@cli.command("inspect")
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
    report = inspect_checkpoint(ckpt, corpus, max_tokens=max_tokens, device=device, revision=revision,
                                token=hf_token)
    if as_json:
        emit(report)
    else:
        click.echo("\n".join(describe(report)))


def main() -> None:
    cli(prog_name="vocabsurgeon")


if __name__ == "__main__":
    main()
