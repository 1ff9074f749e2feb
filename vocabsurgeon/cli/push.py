"""`vocabsurgeon push`: an output uploaded to the Hub as one commit."""

from __future__ import annotations

import click

from .options import CREATE_PR_OPTION, HF_TOKEN_HELP, PRIVATE_OPTION, common_options, echo_pushed, emit, is_quiet, \
    quiet_hub


@click.command("push")
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
@click.option("--unvalidated", is_flag=True,
              help="Push OUT although it is not a validated vocabsurgeon output (--no-validate, or another folder).")
@common_options
@click.pass_context
def push_command(ctx, out, repo_id, private, revision, create_pr, token, message, as_json, unvalidated):
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
    upload before it reaches main. OUT must be an output whose validation passed (or a trim output); pass
    --unvalidated to push anything else.

    \b
    Examples:
      vocabsurgeon push out/ me/gpt2-lotr
      vocabsurgeon push out/ me/gpt2-lotr --create-pr --message "Add LOTR names"
      vocabsurgeon push out/ my-org/llama-tools --private --revision vocab-v2 --json
    """
    from ..checkpoint.hub import check_repo_id, push
    from ..engine.record import pushable
    from ..errors import InputError

    check_repo_id(repo_id)
    ok, what = pushable(out)
    if not ok and not unvalidated:
        raise InputError(f"{what}; validate it first (`vocabsurgeon validate BASE {out}`), or pass --unvalidated to "
                         "push it as it is")
    quiet_hub(ctx, as_json)
    result = push(out, repo_id, private=private, revision=revision, create_pr=create_pr, token=token, message=message)
    if as_json:
        emit(result.to_dict())
    elif not is_quiet(ctx):
        echo_pushed(result.to_dict())
