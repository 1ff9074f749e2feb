"""`vocabsurgeon compare` and `vocabsurgeon neighbors`: the vocabulary matrices by nearest neighbours."""

from __future__ import annotations

import click

from ..explore.compare import DEFAULT_K
from .options import check_plot_here, common_options, emit, hub_options, is_quiet, progress_bars, quiet_hub, \
    tensor_key_options, two_checkpoint_hub_options


_K_HELP = ("K: how many nearest neighbours of each token, by inner product, the token itself excluded "
           "(10, as in the KNN-match paper).")
_WHICH_OPTION = click.option("--which", type=click.Choice(["input", "output"]), default="input", show_default=True,
                             help="Which matrix: the input embedding, or the output matrix (lm_head; the "
                                  "embedding when tied).")
_DEVICE_OPTION = click.option("--device", default="auto", show_default=True,
                              help="Where to compute the scores: auto (CUDA when present), cpu, cuda.")


@click.command("compare")
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
    with progress_bars(ctx) as progress:
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


@click.command("neighbors")
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
