"""The model card (README.md) of a vocabsurgeon output: what was done, to which model, and how it validated.

The base card's YAML metadata is kept and `base_model` is set when the base is a Hub repo. The card is
rendered without `huggingface_hub.ModelCard` (its import costs most of a small `add`); `model_card_text`
gives the text `ModelCard(...).save()` writes, byte for byte. Details: docs/internals.md.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from ..checkpoint.filenames import CARD_NAME, REPORT_NAME, TOKENS_LIST_NAME
from ..checkpoint.writer import write_text_atomic
from ..validation.report import Report, as_report

logger = logging.getLogger(__name__)

MAX_LISTED = 40  # words listed in the card; more go to TOKENS_LIST_NAME
TAG = "vocabsurgeon"
# huggingface_hub.repocard.REGEX_YAML_BLOCK (copied: importing that module is slow), the
# metadata block at the top of a card; tests/add/test_modelcard.py checks that they stay the same.
REGEX_YAML_BLOCK = re.compile(r"^(\s*---(?:\r\n|\r|\n))([\S\s]*?)((?:\r\n|\r|\n)---[ \t]*(\r\n|\n|$))")


def _split_card(content: str) -> tuple[dict, str]:
    """The metadata and the Markdown body of a card, parsed as `RepoCard(content)` parses them.

    Raises:
        yaml.YAMLError: when the metadata block is not YAML.
        ValueError: when it is not a mapping.
    """
    import yaml

    match = REGEX_YAML_BLOCK.search(content)
    if not match:
        return {}, content
    data = yaml.safe_load(match.group(2))
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError("repo card metadata block should be a dict")  # noqa: TRY004 (huggingface_hub's error)
    return data, content[match.end():]


def _line_ending(content: str) -> str:
    """The line ending of a card, as huggingface_hub.repocard._detect_line_ending finds it (LF when none)."""
    cr, lf, crlf = content.count("\r"), content.count("\n"), content.count("\r\n")
    if cr + lf == 0:
        return "\n"
    if crlf == cr and crlf == lf:
        return "\r\n"
    return "\r" if cr > lf else "\n"


def _as_saved(content: str) -> str:
    """The text `ModelCard(content).save()` writes (`str(ModelCard(content))`): the metadata parsed
    and dumped again in its key order, with the line ending of `content`, then the body."""
    from huggingface_hub.repocard_data import ModelCardData

    meta, body = _split_card(content)
    line_break = _line_ending(content)
    yaml_text = ModelCardData(**meta).to_yaml(line_break=line_break, original_order=list(meta))
    return f"---{line_break}{yaml_text}{line_break}---{line_break}{body}"


def _words(summary: dict) -> list[dict]:
    """One entry per new word: its forms and ids (a word may have a bare and a word-start form)."""
    words: dict[str, dict] = {}
    for a in summary.get("added", []):
        w = words.setdefault(a["token"], {"token": a["token"], "forms": [], "ids": [], "mechanism": a["mechanism"]})
        w["forms"].append(a["form"])
        w["ids"].append(a["id"])
    return list(words.values())


def _md(text: str) -> str:
    """Inline code that survives Markdown tables (pipes, backticks)."""
    text = text.replace("|", "\\|")
    tick = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") or text != text.strip() else ""
    return f"{tick}{pad}{text}{pad}{tick}"


def _base_line(summary: dict) -> tuple[str, str | None]:
    from huggingface_hub import constants

    base = summary.get("base") or {}
    repo, rev, commit = base.get("repo_id"), base.get("revision"), base.get("commit")
    at = []
    if rev:
        at.append(f"revision `{rev}`")
    if commit and commit != rev:
        at.append(f"commit `{commit[:12]}`")
    where = f" ({', '.join(at)})" if at else ""
    if repo:
        return f"[{repo}]({constants.ENDPOINT}/{repo}){where}", repo
    # Only the directory's name: the card is published, and a full local path would show the
    # user's directory layout on the Hub.
    return f"the local checkpoint `{_local_name(summary.get('input'))}`{where}", None


def _local_name(path) -> str:
    """The last part of a local path ('.' and 'ckpt/' included), never the directories above it."""
    return Path(str(path or "model")).resolve().name or "model"


def public_base_name(summary: dict) -> str:
    """What public text (the card, a Hub commit message) calls the base: its repo id, or only the
    name of its local directory."""
    return (summary.get("base") or {}).get("repo_id") or _local_name(summary.get("input"))


def kl_bound_line(summary: dict) -> str:
    """The mean-init KL bound of an add summary, in words that stay true when rows are reused.

    log(1 + k/n) bounds the KL of k rows *appended* with the mean. A reused row (padding or a
    reserved token, `--reuse-reserved`) was already in the softmax with its old values, which are
    replaced: the bound does not cover it, and printing "= 0" for a run that only reused rows would
    promise an unchanged model. Validation measures the KL in every case.
    """
    reused = len(summary.get("reused_rows") or [])
    k = summary.get("rows_after", 0) - summary.get("rows_before", 0)
    if not k:
        return (f"mean-init KL bound: not covered; all {reused} new rows reuse padding or reserved rows, whose "
                "old values are replaced (log(1 + k/n) covers appended rows only; validation measures the KL)")
    bound = f"{summary['kl_bound']:.3g}"
    if not reused:
        return f"mean-init KL bound log(1 + k/n) = {bound}"
    return (f"mean-init KL bound log(1 + k/n) = {bound} for the {k} appended rows only; the {reused} reused padding "
            "or reserved rows are not covered (validation measures the KL)")


def _validation_section(report: Report | None, plot_rel: str | None) -> list[str]:
    """The card's validation section: the verdict, then the rows of each check record (`checks.py`)."""
    if report is None or report.pending is not None:
        why = report.pending if report is not None else "--no-validate"
        return ["## Validation", "", f"Not run (`{why}`). Run `vocabsurgeon validate BASE THIS` to check it; "
                "that fills in this section.", ""]
    verdict = "**passed**" if report.passed else "**FAILED**: " + "; ".join(report.failures)
    on = f"{report.corpus['positions']} positions of " if report.corpus.get("positions") else ""
    method = f", {report.method}" if report.method else ""
    lines = [
        "## Validation", "",
        f"Validation {verdict} (on {on}`{report.corpus['name']}`"
        + (f", {report.model['class']}, {report.device}, {report.dtype}" if report.model.get("class") else "") + method
        + ").", "",
        "| check | value | limit |", "|---|---|---|",
    ]
    lines += [row for check in report.checks for row in check.card_rows()]
    if report.skipped:
        lines += ["", *[f"Not checked: {w}." for w in report.skipped]]
    lines.append("")
    if plot_rel:
        lines += [f"![Histogram of per-position KL]({plot_rel})", ""]

    lines += [f"The full report is in [`{REPORT_NAME}`]({REPORT_NAME}).", ""]
    return lines


def model_card(summary: dict, report: Report | dict | None = None, *, base_card: str | None = None,
               plot: str | None = None, tokens_file: str | None = None):
    """Build the model card of an `add` output as a `huggingface_hub.ModelCard`.

    Its text (`str(card)`) is `model_card_text(...)`, which `write_model_card` writes without
    importing `huggingface_hub.repocard`. The arguments are those of `model_card_text`.

    Example:
        >>> card = model_card({"added": [], "input": "ckpt", "tool": "vocabsurgeon 0.1.0"})
        >>> "vocabsurgeon" in card.data.tags
        True
    """
    from huggingface_hub import ModelCard

    return ModelCard(_card_source(summary, report, base_card=base_card, plot=plot, tokens_file=tokens_file))


def model_card_text(summary: dict, report: Report | dict | None = None, *, base_card: str | None = None,
                    plot: str | None = None, tokens_file: str | None = None) -> str:
    """The text of the model card of an `add` output: what `model_card(...).save()` writes.

    Args:
        summary: `AddResult.to_dict()` or `Plan.to_dict()` (with `tool`).
        report: the validation report, when validation ran.
        base_card: the text of the base model's README.md, whose metadata is kept.
        plot: a path relative to the output of the KL histogram, embedded when given.
        tokens_file: the name of the file listing every new token, when the list is too long.

    Example:
        >>> text = model_card_text({"added": [], "input": "ckpt", "tool": "vocabsurgeon 0.1.0"})
        >>> print(text.split("---")[1].strip())
        tags:
        - vocabsurgeon
    """
    return _as_saved(_card_source(summary, report, base_card=base_card, plot=plot, tokens_file=tokens_file))


def _shrink_section(summary: dict) -> list[str]:
    """--init subword-mean-shrunk: the held-out old-text KL of the sub-word mean, the shrink factor, the KL after."""
    f = summary.get("shrink")
    if not f:
        return []
    o = f["output"]
    kl, before, shrink = o["old_text_kl"], o["old_text_kl"]["before_shrink"], o["shrink"]
    lines = ["### Sub-word mean, shrunk", "",
             "New rows: the mean of the rows of each token's pieces under the original tokenizer; the output rows"
             + (" (the shared rows: the embeddings are tied)" if f.get("tied") else "")
             + " shrunk toward the mean row, mean + a (sub-word mean - mean), with the largest a that keeps the "
             "old-text KL of held-out text within its limits.", "", "| | |", "|---|---|"]
    if before.get("mean") is not None:
        lines += [f"| old-text KL of the sub-word mean (held-out) | mean {before['mean']:.3g}, p99 {before['p99']:.3g}, "
                  f"max {before['max']:.3g} nats |",
                  f"| shrink toward the mean row | a = {shrink['a']:.3g} (limits: mean {shrink['limit_mean']:.3g}, "
                  f"p99 {shrink['limit_p99']:.3g} nats) |",
                  f"| old-text KL (held-out) | mean {kl['mean']:.3g}, p99 {kl['p99']:.3g}, max {kl['max']:.3g} nats; "
                  f"bound log(1 + k/n) = {kl['bound']:.3g} |"]
    return lines + [f"| time | {f.get('seconds')} s |", ""]


def _fitted_section(summary: dict) -> list[str]:
    """--untie and --init fitted: the new output matrix, the method, the contexts and the measured figures."""
    lines = []
    untied = summary.get("untied")
    if untied:
        lines += [(f"The tied matrix was untied: `{untied['lm_head']}` is a separate output matrix (old rows copied "
                   f"bit for bit from `{untied['of']}`, {untied['bytes_added']:,} bytes added)."), ""]
    f = summary.get("fitted")
    if not f:
        return lines
    c = f.get("contexts", {})
    source = (f"corpus `{_md(c.get('name', ''))}` (sha256 `{c.get('sha256')}`)" if c.get("source") == "corpus"
              else f"template sentences ({c.get('templates_per_word')} per word, seed {f.get('seed')})"
              if c.get("source") == "templates"
              else f"generated by the model ({c.get('prompts_per_word')} prompts per word, seed {f.get('seed')})")
    pooled = (f.get("target") or {}).get("sentence_embedding")
    method = ("New input rows fitted by distillation (Adam) from forward passes of the frozen base encoder: its hidden "
              "states at the other positions" + (f" and its sentence embedding ({pooled} pooling)" if pooled else "")
              + ", read on the original tokenization."
              + (" The masked-LM head's rows and bias entries: a convex fit on the contexts with the word masked, "
                 "then the bias lowered as needed to keep the old-text KL limits." if (f.get("mlm_head") or {}).get("fitted")
                 else "") if f.get("model") in ("encoder", "masked") else
              "New rows fitted from forward passes of the frozen base model: output rows by a convex, "
              "KL-penalized fit (L-BFGS), input rows by distillation (Adam).")
    lines += ["### Fitted init", "", method, "",
              "| | |", "|---|---|",
              f"| contexts | {source}: {c.get('windows')} windows, {c.get('occurrences')} occurrences of new tokens |",
              f"| roles fitted | {', '.join(f.get('roles', []))}"
              f"{' (tied: one row, fitted as ' + ', '.join(f.get('roles', [])) + ')' if f.get('tied') else ''} |"]
    if "input" in f:
        d = f["input"].get("depth") or {}
        at = (f", hidden states matched after {d['layers']} of {d['of']} layers" if d.get("layers") and d.get("of")
              and d["layers"] < d["of"] else "")
        lines.append(f"| input distillation | {f['input']['steps']} Adam steps from the sub-word mean{at} |")
    o = f.get("output")
    if o:
        kl = o["old_text_kl"]
        lines.append(f"| output fit | {o['lbfgs_evaluations']} L-BFGS evaluations from the {o['start']} row, "
                     f"L2 {o['l2']}, target {o['target']} |")
        if kl.get("mean") is not None:
            before = kl.get("before_shrink") or {}
            if before.get("mean") is not None:
                lines.append(f"| old-text KL as fitted (held-out) | mean {before['mean']:.3g}, p99 {before['p99']:.3g}, "
                             f"max {before['max']:.3g} nats |")
            shrink = o.get("shrink") or {}
            if shrink:
                lines.append(f"| shrink toward the mean row | a = {shrink['a']:.3g} (limits: mean "
                             f"{shrink['limit_mean']:.3g}, p99 {shrink['limit_p99']:.3g} nats) |")
            lines.append(f"| old-text KL (held-out) | mean {kl['mean']:.3g}, p99 {kl['p99']:.3g}, max {kl['max']:.3g} "
                         f"nats; bound log(1 + k/n) = {kl['bound']:.3g} |")
    head = f.get("mlm_head") or {}
    hk = head.get("old_text_kl") or {}
    if hk.get("mean") is not None:
        before = hk.get("before_shift") or {}
        shift = head.get("bias_shift") or 0.0
        fitted_head = bool(head.get("fitted"))
        rows = (f"fitted on {head.get('masked_positions')} masked positions of the contexts (convex, L-BFGS, "
                f"L2 {head.get('l2')}, target {head.get('target')})" if fitted_head else "the tied rows")
        lines += [f"| masked-LM head | {rows}; new bias entries: the {'fitted' if fitted_head else 'mean'} bias"
                  + (f" lowered by {shift:.3g} to keep the limits (mean {hk['limit_mean']:.3g}, p99 "
                     f"{hk['limit_p99']:.3g} nats)" if shift else "") + " |",
                  f"| masked-LM old-text KL (held-out) | mean {hk['mean']:.3g}, p99 {hk['p99']:.3g}, max {hk['max']:.3g} nats"
                  + (f" (before the shift: mean {before['mean']:.3g})" if shift and before.get("mean") is not None else "")
                  + f"; bound log(1 + k/n) = {hk['bound']:.3g} |"]
        nt = head.get("new_token") or {}
        if (nt.get("written") or {}).get("p_mean") is not None:
            lines.append(f"| new token at its masked position (fit contexts) | mean probability "
                         f"{nt['start']['p_mean']:.3g} at the start, {nt['written']['p_mean']:.3g} as written; "
                         f"most probable token at {nt['written']['top1']:.0%} of them |")
    lines += [f"| fitting time | {f.get('seconds')} s |", ""]
    return lines


def _card_source(summary: dict, report: Report | dict | None = None, *, base_card: str | None = None,
                 plot: str | None = None, tokens_file: str | None = None) -> str:
    """The card as assembled (the metadata as YAML, then the body), before `ModelCard` re-renders it."""
    from huggingface_hub.repocard_data import ModelCardData

    meta: dict = {}
    if base_card:
        try:  # what ModelCard(base_card, ignore_metadata_errors=True).data.to_dict() gives
            meta = ModelCardData(**_split_card(base_card)[0], ignore_metadata_errors=True).to_dict()
        except Exception as e:  # malformed YAML in a stranger's card: keep going without it
            logger.warning("the base model card's metadata cannot be read (%s); it is not carried over", e)
    base_text, repo = _base_line(summary)
    if repo:
        meta["base_model"] = repo
    tags = meta.get("tags") or []
    tags = [tags] if isinstance(tags, str) else list(tags)
    meta["tags"] = tags + [TAG] if TAG not in tags else tags
    data = ModelCardData(**meta)

    words = _words(summary)
    init = summary.get("init", {})
    tied = summary.get("tied")
    title = repo.split("/")[-1] if repo else _local_name(summary.get("input"))
    extend = summary.get("extend")
    if extend:  # `vocabsurgeon extend`: sub-word pieces learned from a corpus, not words
        head = [
            f"# {title} + {len(words)} new sub-word token{'s' if len(words) != 1 else ''}", "",
            f"This checkpoint is {base_text} with {len(words)} sub-word tokens learned from "
            f"`{Path(extend['corpus']).name}` ({extend['corpus_bytes']:,} bytes) by {summary.get('tool', 'vocabsurgeon')} "
            "`extend`, which continues the tokenizer's BPE training: the new merges come after every old one. The old "
            "rows of every vocabulary matrix are bit-identical to the base model's and every other tensor is "
            "byte-identical; old tokens, ids and merges are unchanged, and text changes tokens only where a new "
            f"merge's pair occurs. The corpus's tokens per byte: {extend['tokens_per_byte']['before']:.4f} -> "
            f"{extend['tokens_per_byte']['after']:.4f}.", ""]
    else:
        head = [
            f"# {title} + {len(words)} new word{'s' if len(words) != 1 else ''}", "",
            f"This checkpoint is {base_text} with {len(words)} new word(s) added to its vocabulary by "
            f"{summary.get('tool', 'vocabsurgeon')}. The old rows of every vocabulary "
            "matrix are bit-identical to the base model's and every other tensor is byte-identical; text without the "
            "new words tokenizes exactly as before.", ""]
    lines = [
        *head,
        "## Surgery", "",
        "| | |", "|---|---|",
        f"| base model | {base_text} |",
        f"| architecture | {summary.get('model_type') or summary.get('architecture')}, "
        f"{'tied' if tied else 'untied'} embeddings, "
        f"{summary.get('tokenizer_family')} tokenizer |",
        f"| vocabulary rows | {summary.get('rows_before')} → {summary.get('rows_after')} "
        f"({len(summary.get('added', []))} tokens, {summary.get('padding_rows', 0)} padding rows) |",
        f"| init | input embedding: `{init.get('input')}`; output: `{init.get('output')}`; biases: "
        f"`{init.get('bias', 'mean')}` |",
        f"| seed | {summary.get('seed')} |",
        f"| eps (mean-noise) | {init.get('eps')} |",
        (f"| mean-init KL bound log(1 + k/n) | {summary.get('kl_bound', 0.0):.3g} nats |"
         if not summary.get("reused_rows") else f"| mean-init KL bound | {kl_bound_line(summary)} |"),
        f"| tool | {summary.get('tool', 'vocabsurgeon')} |", "",
    ]
    tensors = summary.get("tensors") or {}
    if tensors:
        lines += ["### Init per matrix", "", "| tensor | rows | init |", "|---|---|---|"]
        lines += [f"| `{n}` | {t['rows_before']} → {t['rows_after']} | `{t['init']}` |" for n, t in tensors.items()]
        lines.append("")
    lines += ["### New tokens", ""]
    if tokens_file:
        lines += [f"{len(words)} words ({len(summary.get('added', []))} tokens); the full list is in "
                  f"[`{tokens_file}`]({tokens_file}), one word per line.", ""]
    elif words:
        lines += ["| word | forms | ids | mechanism |", "|---|---|---|---|"]
        lines += [f"| {_md(w['token'])} | {', '.join(_md(repr(f)) for f in w['forms'])} | "
                  f"{', '.join(str(i) for i in w['ids'])} | {w['mechanism']} |" for w in words]
        lines.append("")
    else:
        lines += ["None.", ""]
    skipped = summary.get("skipped") or []
    if skipped:  # what was asked for and not added: a reader of the card should not look for it
        lines += ["### Skipped words", "", "| word | reason |", "|---|---|"]
        lines += [f"| {_md(s['token'])} | {s['reason'].replace('|', '/')} |" for s in skipped[:MAX_LISTED]]
        if len(skipped) > MAX_LISTED:
            lines.append(f"| ... | and {len(skipped) - MAX_LISTED} more (see `{REPORT_NAME}` or `--json`) |")
        lines.append("")
    notes = summary.get("tokenizer_notes") or []
    if notes:
        lines += ["Notes:", ""] + [f"- {n}" for n in notes] + [""]
    lines += _fitted_section(summary)
    lines += _shrink_section(summary)
    lines += _validation_section(as_report(report), plot)
    return f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(lines)


def write_model_card(out: str | os.PathLike, summary: dict, report: Report | dict | None = None, *,
                     plot: str | os.PathLike | None = None, base_card: str | None = None, fsync: bool = True) -> Path:
    """Write the model card README.md into the output directory `out`; returns its path.

    The metadata of `base_card` (default: the README.md already in `out`, which `add` copies from
    the base, or the card of an earlier call) is kept. Called again after validation, it rewrites
    the card with the figures. When there are more than MAX_LISTED new words, `added_tokens.txt`
    lists them all. The KL histogram `plot` is embedded when it lies inside `out`.

    Example:
        >>> from vocabsurgeon import add_tokens, validate_checkpoint, write_model_card  # doctest: +SKIP
        >>> r = add_tokens("ckpt/", "out/", ["Frodo"])  # doctest: +SKIP
        >>> write_model_card("out/", r.to_dict(), report=validate_checkpoint("ckpt/", "out/"))  # doctest: +SKIP
    """
    out = Path(out)
    card_path = out / CARD_NAME
    if base_card is None and card_path.is_file():
        base_card = card_path.read_text(encoding="utf-8", errors="replace")
    words = _words(summary)
    tokens_file = None
    if len(words) > MAX_LISTED:
        tokens_file = TOKENS_LIST_NAME
        write_text_atomic(out / tokens_file, "".join(w["token"] + "\n" for w in words), fsync)
    plot_rel = None
    if plot is not None:
        try:
            plot_rel = Path(plot).resolve().relative_to(out.resolve()).as_posix()
        except ValueError:
            logger.info("the plot %s is outside %s; it is not embedded in the model card", plot, out)
    # Not model_card(...).save(): importing ModelCard costs more than the rest (see the module docstring).
    text = model_card_text(summary, report, base_card=base_card, plot=plot_rel, tokens_file=tokens_file)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(card_path, text, fsync)  # as ModelCard.save: line endings kept
    return card_path
