"""`vocabsurgeon validate`: an expanded checkpoint checked against its original."""

from __future__ import annotations

import click

from ..init import MAX_SEED
from .options import check_plot_dir, common_options, dtype_option, emit, is_quiet, progress_bars, quiet_hub, \
    two_checkpoint_hub_options, validation_options


@click.command("validate")
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
    with progress_bars(ctx) as progress:
        report = validate_checkpoint(base, new, corpus, thresholds=thresholds, max_tokens=max_tokens, seed=seed,
                                     device=device, dtype=dtype, plot=plot, revision=revision, token=hf_token,
                                     progress=progress,
                                     method=method)
    # An output published without validation (--no-validate) gets its report and card filled in.
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
