"""The CLI's shared parts: the options several commands take (`surgery_options`: add's and extend's), their
checks, logging and -q, `--json` output, and progress on stderr (`progress_bars`: tqdm bars on a terminal,
a few lines in a log). Each command has its module (add.py, extend.py, ...); commands.py is the group.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import warnings
from pathlib import Path

import click

from ..init import STRATEGIES

STRATEGY_CHOICE = click.Choice(list(STRATEGIES))


def setup_logging(quiet: bool, verbose: bool) -> None:
    level = logging.ERROR if quiet else (logging.DEBUG if verbose else logging.WARNING)
    logging.basicConfig(level=level, format="%(levelname)s: %(message)s", stream=sys.stderr, force=True)
    if quiet:
        silence_libraries()


# -q means only errors on stderr, but transformers logs through its own handler ("[transformers] ..."),
# draws its own bars, and Python warnings (FutureWarning from a forward) bypass logging. Its settings
# are read when it is imported, which happens later (lazily), hence the environment.
QUIET_ENV = {"TRANSFORMERS_VERBOSITY": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def silence_libraries() -> None:
    warnings.simplefilter("ignore")
    os.environ.update(QUIET_ENV)
    if "transformers" in sys.modules:  # already imported (a caller in the same process): tell it directly
        from transformers.utils import logging as tf_logging

        tf_logging.set_verbosity_error()
        tf_logging.disable_progress_bar()


@contextlib.contextmanager
def restoring_library_settings():
    """Give a caller in the same process (a notebook, CliRunner) back what -q changed."""
    env = {k: os.environ.get(k) for k in QUIET_ENV}
    with warnings.catch_warnings():
        try:
            yield
        finally:
            quieted = any(os.environ.get(k) != v for k, v in env.items())
            for k, v in env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            if quieted and "transformers" in sys.modules:
                from transformers.utils import logging as tf_logging

                tf_logging.set_verbosity_warning()
                tf_logging.enable_progress_bar()


def common_options(fn):
    """-q/--quiet and -v/--verbose on every command too (`vocabsurgeon add -q ...`)."""

    def _set(flag):
        def callback(ctx, param, value):
            if value:
                root = ctx.find_root()
                root.ensure_object(dict)
                root.obj[flag] = True
                setup_logging(root.obj.get("quiet", False), root.obj.get("verbose", False))
            return value
        return callback

    fn = click.option("-v", "--verbose", is_flag=True, expose_value=False, callback=_set("verbose"),
                      help="Debug logging on stderr.")(fn)
    fn = click.option("-q", "--quiet", is_flag=True, expose_value=False, callback=_set("quiet"),
                      help="Only errors on stderr; no progress bars.")(fn)
    return fn


def is_quiet(ctx) -> bool:
    return bool(ctx.find_root().obj.get("quiet"))


def emit(data: dict) -> None:
    click.echo(json.dumps(data, indent=2, ensure_ascii=False))


def check_plot(ctx, param, value):
    """--plot: matplotlib installed and a format it writes; checked before any long work, so that a bad
    name is not found after minutes of validation."""
    if value is not None:
        from ..errors import InputError
        from ..validation.plot import require_plot

        if not value:  # matplotlib would write a file named ".png" in the current directory
            raise InputError("--plot needs a file name, e.g. --plot kl.png")
        require_plot()
        from matplotlib.backend_bases import FigureCanvasBase

        formats = FigureCanvasBase.get_supported_filetypes()
        suffix = Path(value).suffix.lstrip(".").lower()
        if suffix not in formats:
            raise InputError(f"--plot {value}: matplotlib cannot write a '.{suffix}' file; name it .png "
                             f"(or {', '.join('.' + f for f in sorted(formats) if f != 'png')})")
    return value


def check_plot_dir(plot: str | None, created: str | None = None) -> None:
    """--plot's directory exists (or is `created`: add's OUT, made before the plot is drawn)."""
    if plot and not Path(plot).parent.is_dir():
        parent = Path(plot).parent
        if created is None or parent.resolve() != Path(created).resolve():
            from ..errors import InputError

            raise InputError(f"--plot {plot}: the directory {parent} does not exist; create it first")


def check_plot_here(ctx, param, value):
    check_plot(ctx, param, value)
    check_plot_dir(value)
    return value


def validation_options(fn, corpus_flag: str = "--corpus"):
    """The corpus, work bound, plot and pass/fail thresholds of `validate`, shared with `add` (and `extend`,
    whose --corpus is what it learns from: its validation corpus is `corpus_flag` --validate-corpus)."""
    from ..validation.validate import DEFAULT_MAX_TOKENS, Thresholds

    d = Thresholds()
    dest = "corpus" if corpus_flag == "--corpus" else "validate_corpus"
    for decorator in reversed([
        click.option(corpus_flag, dest, type=click.Path(dir_okay=False, path_type=str),
                     help="UTF-8 text to validate on (default: a few KB of prose, dialogue, numbers and code "
                          "shipped with vocabsurgeon)."),
        click.option("--max-tokens", default=DEFAULT_MAX_TOKENS, show_default=True, type=click.IntRange(min=1),
                     help="Corpus tokens of the KL check: bounds the work on big models."),
        click.option("--plot", type=click.Path(dir_okay=False, path_type=str), callback=check_plot,
                     help="Also write a PNG histogram of per-position KL (needs the extra vocabsurgeon[plot])."),
        click.option("--max-kl-mean", default=d.max_kl_mean, show_default=True, type=float,
                     help="Fail when the mean KL(p_old||p_new) in nats is above this (or above the mean-init "
                          "bound log(1+k/n), when that is larger)."),
        click.option("--max-kl-p99", default=d.max_kl_p99, show_default=True, type=float,
                     help="Fail when the 99th percentile of KL in nats is above this (or the bound, when larger)."),
        click.option("--max-new-token-fraction", default=d.max_new_token_fraction, show_default=True, type=float,
                     help="Fail when more of the tokens sampled after prompts without new words are new tokens."),
        click.option("--max-stuck-fraction", default=d.max_stuck_fraction, show_default=True, type=float,
                     help="Fail when more of the prompts ending in a new token make the model repeat it."),
    ]):
        fn = decorator(fn)
    return fn


def quiet_hub(ctx, as_json: bool) -> None:
    """huggingface_hub draws its own progress bars (download, upload); keep them off with -q and --json
    (they are its bars, not the command's progress: see `progress_bars`)."""
    if is_quiet(ctx) or as_json:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()


PRIVATE_OPTION = click.option("--private", is_flag=True, default=None,
                               help="Create the repo private (no effect when it exists; with add, needs --push-to).")
CREATE_PR_OPTION = click.option("--create-pr", is_flag=True,
                                 help="Open a pull request instead of committing to the branch (review, then merge).")
HF_TOKEN_HELP = "Hugging Face token (default: HF_TOKEN, then the stored `hf auth login`)."


def hub_options(which: str, note: str = "", token_use: str = ""):
    """--revision and --hf-token of a command that reads checkpoints given as Hub repo ids.

    `which` says what --revision applies to ("SRC when it is a Hub repo id"), `note` is added to its
    help and `token_use` to the token's. The library resolves the repo ids (`hub.resolve_checkpoints`).
    """
    def decorate(fn):
        fn = click.option("--hf-token", help=f"{HF_TOKEN_HELP} {token_use}".strip())(fn)
        return click.option("--revision", metavar="REV",
                            help=f"Branch, tag or commit of {which} (default: main). {note}".strip())(fn)
    return decorate


def two_checkpoint_hub_options(names: str):
    """hub_options of a command that reads two checkpoints (`names`, e.g. "A and B").

    One --revision, for the one(s) given as repo ids: the usual case is one repo id (the original on
    the Hub) and one local output; per-argument revisions would double the options for the rare
    comparison of two revisions of one repo, which the help's note covers.
    """
    return hub_options(f"whichever of {names} is a Hub repo id, both when both are",
                       "To use two revisions of one repo, download one with `hf download REPO --revision REV "
                       "--local-dir DIR` and pass DIR.")


def tensor_key_options(fn):
    """--embedding-key and --lm-head-key: the vocabulary tensors of an architecture not in the table."""
    fn = click.option("--lm-head-key", help="Name of the output matrix tensor, for architectures not in the table.")(fn)
    return click.option("--embedding-key",
                        help="Name of the input embedding tensor, for architectures not in the table.")(fn)


def fit_options(fn):
    """--untie and the --fit-* options of `add` (`--init fitted`; see fitted/causal.py)."""
    for decorator in reversed([
        click.option("--untie", is_flag=True,
                     help="Tied models: write a separate output matrix (old rows copied bit for bit; config "
                          "tie_word_embeddings false), so --init fitted can fit input and output rows apart."),
        click.option("--fit-corpus", type=click.Path(dir_okay=False, path_type=str),
                     help="--init fitted: UTF-8 text that uses the new words (its paragraphs are the contexts; an "
                          "encoder's, its sentences). Without it the model writes its own contexts from a few "
                          "seeded prompts per word (an encoder: seeded template sentences)."),
        click.option("--fit-contexts", default=8, show_default=True, type=click.IntRange(min=1),
                     help="--init fitted: context windows per new token, at most."),
        click.option("--fit-steps", type=click.IntRange(min=0),
                     help="--init fitted: Adam steps of the input-row distillation, at most. Default: up to 6 "
                          "passes over the contexts (3 with --fit-depth 1, 10 on an encoder), stopping when a pass "
                          "gains < 1% on held-out contexts."),
        click.option("--fit-depth", type=click.FloatRange(min=0, max=1, min_open=True),
                     help="--init fitted, causal LMs: the share of the layers after which the input-row "
                          "distillation matches hidden states; each step runs only those layers. 1: the last "
                          "layer (slower). Default: 0.2."),
        click.option("--fit-context-tokens", default=32, show_default=True, type=click.IntRange(min=8),
                     help="--init fitted, causal LMs: tokens per context window around a word (capped by the "
                          "model's context)."),
        click.option("--fit-output-steps", default=100, show_default=True, type=click.IntRange(min=1),
                     help="--init fitted: L-BFGS iterations of the output-row fit."),
        click.option("--fit-l2", type=click.FloatRange(min=0),
                     help="--init fitted: weight of the L2 pull of the fitted output rows toward their start "
                          "(logit units). Default: 0.3 (a masked-LM head: 0.1, toward the distilled input rows)."),
        click.option("--fit-kl-limit", type=click.FloatRange(min=0),
                     help="--init fitted and subword-mean-shrunk: the held-out old-text KL mean (nats) the new "
                          "output rows are shrunk toward the mean row to keep (a masked-LM head: its fitted new bias "
                          "entries are lowered). Default: the mean-init bound log(1 + k/n)."),
    ]):
        fn = decorator(fn)
    return fn


class Bars:
    """The terminal form of `progress.Progress`: one tqdm bar per count on stderr, with the stages printed
    above them ("running: ..."); nothing when `disable`. A new count closes the counts that are done."""

    def __init__(self, disable: bool):
        self.disable, self.bars, self.units, self.latest = disable, {}, {}, None

    def stage(self, text: str) -> None:
        if not self.disable:
            from tqdm.auto import tqdm

            tqdm.write(f"running: {text}", file=sys.stderr)

    def count(self, name: str, total: int | None, unit: str = ""):
        """A bar for `name`, drawn once it has a total or work done (a step that fails before it
        starts leaves no empty bar above the error)."""
        if self.disable:
            return _ignore
        for done in [n for n, b in self.bars.items()
                     if n != name and b is not None and b.total is not None and b.n >= b.total]:
            self.bars.pop(done).close()
        self.units[name] = (total, unit)
        bar = self.bars.get(name)
        if bar is not None:  # a running count: its total corrected
            if total != bar.total:
                bar.total = total
                bar.refresh()
        else:
            self.bars[name] = None
            if total:
                self._draw(name)

        def advance(n: int) -> None:
            if n:
                self._draw(name).update(n)

        self.latest = advance
        return advance

    def _draw(self, name: str):
        bar = self.bars.get(name)
        if bar is None:
            from tqdm.auto import tqdm

            total, unit = self.units[name]
            in_bytes = unit == "B"
            bar = self.bars[name] = tqdm(total=total, desc=name, unit=unit or "it", unit_scale=in_bytes,
                                         unit_divisor=1024 if in_bytes else 1000, file=sys.stderr, disable=False)
        return bar

    def advance(self, n: int) -> None:
        if self.latest is not None:
            self.latest(n)

    def close(self, finished: bool = True) -> None:
        for bar in self.bars.values():
            if bar is not None:
                bar.close()
        self.bars.clear()


def _ignore(*_args) -> None:
    pass


@contextlib.contextmanager
def progress_bars(ctx):
    """The progress callbacks of a command (`progress.Progress`) until the block ends, on stderr with or
    without --json: tqdm bars (`Bars`) on a terminal, a few lines (`progress.LogLines`) in a log; nothing
    with -q."""
    from ..progress import SILENT, LogLines, Progress

    if is_quiet(ctx):
        yield SILENT
        return
    shown = Bars(False) if sys.stderr.isatty() else LogLines(lambda line: click.echo(line, err=True))
    finished = False
    try:
        yield Progress(stage=shown.stage, count=shown.count, advance=shown.advance)
        finished = True
    finally:
        shown.close(finished)


def dtype_option(fn):
    """--dtype (also from VOCABSURGEON_DTYPE): what the model runs in for validation and --init fitted."""
    from ..devices import DTYPE_ENV, DTYPES

    return click.option("--dtype", type=click.Choice(DTYPES), default="auto", show_default=True, envvar=DTYPE_ENV,
                        help="What the model runs in for validation and --init fitted: auto (the checkpoint's dtype "
                             "on a GPU, float32 on the CPU), checkpoint (its dtype on the CPU too: what a GPU runs), "
                             f"or a dtype. Default from {DTYPE_ENV}.")(fn)


def validation_options_of(validation: dict, *, seed: int, device: str, dtype: str = "auto"):
    """The pipeline's ValidationOptions from the shared validation flags."""
    from ..engine.finish import ValidationOptions
    from ..validation.validate import Thresholds

    v = dict(validation)
    corpus, max_tokens, plot = v.pop("corpus" if "corpus" in v else "validate_corpus"), v.pop("max_tokens"), v.pop("plot")
    return ValidationOptions(corpus=corpus, max_tokens=max_tokens, thresholds=Thresholds(**v), seed=seed,
                             device=device, plot=plot, dtype=dtype)


def take_fields(record: type, flags: dict) -> dict:
    """Remove from `flags` (click's parameters by name) those named like a field of the dataclass `record`
    and return them: the one mapping from a command's flags to its options record."""
    from dataclasses import fields

    return {f.name: flags.pop(f.name) for f in fields(record) if f.name in flags}


def strategies_in_help(default: str):
    """A surgery command's help lists the init strategies from their records (`init.STRATEGIES`), `default`
    marked, where its docstring says `{strategies}`."""
    from ..init import strategies_help

    def put(fn):
        fn.__doc__ = fn.__doc__.replace("    {strategies}", strategies_help(indent="      ", default=default))
        return fn

    return put


def surgery_options(*, init_default: str, corpus_flag: str = "--corpus", dry_run_help: str):
    """The options of a command that grows the rows of a checkpoint and writes it, shared by `add` and
    `extend`: init, padding, how OUT is written, --dry-run and --json, validation (its corpus flag is
    `corpus_flag`: `extend`'s --corpus is what it learns from) and the push. `surgery.surgery_of` reads them."""
    from ..init import DEFAULT_EPS, MAX_SEED

    decorators = [
        click.option("--init", default=init_default, show_default=True, type=STRATEGY_CHOICE,
                     help="Init strategy of the new rows of every matrix."),
        click.option("--init-input", type=STRATEGY_CHOICE, help="Init of the input embedding (untied models)."),
        click.option("--init-output", type=STRATEGY_CHOICE, help="Init of the output matrix / lm_head (untied models)."),
        click.option("--eps", default=DEFAULT_EPS, show_default=True, type=float,
                     help="Noise scale of mean-noise: new rows ~ N(mu, eps * Sigma)."),
        click.option("--seed", default=0, show_default=True, type=click.IntRange(0, MAX_SEED),
                     help="Seed of every random init (deterministic output)."),
        click.option("--pad-to-multiple-of", type=click.IntRange(min=1),
                     help="Pad the rows to a multiple of N (tensor cores); padding holds the mean row. Default: the "
                          "checkpoint's own multiple where it has padding rows past the tokenizer (1: no padding)."),
        click.option("--link", is_flag=True,
                     help="Hard-link untouched shards instead of copying them (same filesystem only)."),
        click.option("--no-fsync", is_flag=True,
                     help="Do not flush the output to disk before renaming it into place: faster on slow disks (up "
                          "to 2x in copy mode), still atomic if the process dies, but a power cut may leave a "
                          "damaged output."),
        click.option("--force", is_flag=True, help="Replace a non-empty output directory."),
        click.option("--device", default="auto", show_default=True,
                     help="Where to compute statistics and the forward passes of --init fitted: auto, cpu, cuda."),
        dtype_option,
        tensor_key_options,
        click.option("--dry-run", is_flag=True, help=dry_run_help),
        click.option("--json", "as_json", is_flag=True, help="Print a machine-readable summary on stdout."),
        click.option("--no-validate", is_flag=True,
                     help="Skip the validation that runs after writing (it loads the new model with transformers, "
                          "and the original too when the output is not a plain expansion of it)."),
        hub_options("SRC when it is a Hub repo id", token_use="Used to pull SRC and to push."),
        click.option("--push-to", metavar="REPO_ID", help="Push OUT to this Hub repo (org/name) as one commit, "
                     "after validation passed; see `vocabsurgeon push`."),
        click.option("--push-revision", metavar="BRANCH", help="With --push-to: the branch to commit to (created "
                     "from main when missing; default main)."),
        PRIVATE_OPTION,
        CREATE_PR_OPTION,
        click.option("--message",
                     help="With --push-to: the commit message (default: what was added, to which model)."),
        fit_options,
        lambda fn: validation_options(fn, corpus_flag=corpus_flag),
    ]

    def decorate(fn):
        for decorator in reversed(decorators):
            fn = decorator(fn)
        return fn

    return decorate


def echo_pushed(d: dict) -> None:
    """The one line that says where a push went (`PushResult.to_dict()`)."""
    where = f"pull request {d['pr_url']}" if d["pr_url"] else d["commit_url"]
    click.echo(f"Pushed {len(d['files'])} files to {d['repo_id']} ({d['revision']}): {where}", err=True)
