"""Hugging Face Hub I/O: pull a checkpoint by repo id (safetensors only) and push an output as one commit.

Pull downloads only what surgery reads into huggingface_hub's cache; pickle weights are never requested.
Push uploads an explicit file list in one atomic commit. Every Hub failure becomes `PushError` (push) or
`InputError` (pull) with a one-line next step. Details: docs/internals.md.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .._compat import check_versions
from .._version import __version__
from .reader import PICKLE_SUFFIXES, Checkpoint
from .filenames import (
    CARD_NAME, CHAT_TEMPLATE_FILES, CONFIG_NAME, GENERATION_CONFIG_NAME, INDEX_NAME, SINGLE_NAME, STALE_SLOW_FILES,
    TOKENIZER_CONFIG, TOKENIZER_FILE,
)
from ..errors import InputError, PushError

logger = logging.getLogger(__name__)

# `org/name`, as the Hub spells repo ids; a bare name is never taken for a repo id (too easy to confuse
# with a mistyped local directory).
REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")

# Files that surgery reads or carries over, at the repository root. Weights are added from the index.
PULL_FILES = (
    CONFIG_NAME, GENERATION_CONFIG_NAME, TOKENIZER_FILE, TOKENIZER_CONFIG, "special_tokens_map.json",
    "added_tokens.json", *CHAT_TEMPLATE_FILES, CARD_NAME, "preprocessor_config.json",
    "processor_config.json", "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json",
)
# sentence-transformers module configs (1_Pooling/config.json, 2_Normalize/config.json)
_MODULE_CONFIG = re.compile(r"\d+_[A-Za-z]+/config\.json")

# What a vocabsurgeon output may contain and push uploads; anything else in the directory is left out.
PUSH_SUFFIXES = (".safetensors", ".json", ".jinja", ".md", ".txt", ".png", ".model", ".py")
PUSH_NAMES = ("LICENSE", "NOTICE")
# Never uploaded, whatever the suffix says: temp files, locks, caches.
_NEVER_SUFFIXES = (".tmp", ".lock", ".pyc", ".part", ".incomplete", "~") + PICKLE_SUFFIXES


@dataclass(frozen=True)
class Source:
    """Where a checkpoint came from: a local directory, or a Hub repo downloaded into the cache."""

    path: Path  # the directory surgery reads (a cache snapshot for a repo id)
    repo_id: str | None = None  # the Hub repo, when known
    revision: str | None = None  # the revision asked for (branch, tag or commit)
    commit: str | None = None  # the commit it resolved to

    @property
    def name(self) -> str:
        """What the model card calls the base model: the repo id, else the path as given."""
        return self.repo_id or str(self.path)

    def to_dict(self) -> dict:
        """name, repo_id, revision and commit: what reports record of where a checkpoint came from."""
        return {"name": self.name, "repo_id": self.repo_id, "revision": self.revision, "commit": self.commit}

    def describe(self) -> str:
        """The name, with the commit when it came from the Hub: 'org/name (commit 0123456789ab)'."""
        return f"{self.name} (commit {self.commit[:12]})" if self.repo_id and self.commit else self.name


@dataclass
class PushResult:
    """What `push` did; `to_dict()` is the `vocabsurgeon push --json` output."""

    repo_id: str
    revision: str  # the branch committed to (or the PR's target branch)
    repo_url: str
    commit_url: str
    commit: str
    pr_url: str | None
    files: list[str]  # uploaded, in commit order
    deleted: list[str] = field(default_factory=list)  # stale remote files removed in the same commit
    skipped: list[str] = field(default_factory=list)  # files in the output that are not part of the checkpoint

    def to_dict(self) -> dict:
        return asdict(self)


# ---------------------------------------------------------------------------------------------- pull

def resolve_checkpoint(src: str | os.PathLike, revision: str | None = None, token: str | None = None) -> Source:
    """The checkpoint directory for `src`: a local directory as is, or a Hub repo id pulled into the cache.

    A local path always wins over a repo id of the same spelling. A path that does not exist and is
    not shaped like `org/name` is returned as is, so that reading it fails with the usual message.

    Raises:
        UnsupportedVersion: transformers, tokenizers, huggingface-hub or safetensors is older than supported.

    Example:
        >>> resolve_checkpoint("fixtures/gpt2-tiny").path
        PosixPath('fixtures/gpt2-tiny')
    """
    check_versions()  # every library call that reads a checkpoint comes here first
    path = Path(src)
    if not is_repo_id(src):
        if revision is not None and path.exists():
            raise InputError(f"{path}: --revision is for Hub repo ids, but this is a local directory; drop --revision")
        return _cached_source(path)
    return pull(str(src), revision=revision, token=token)


def resolve_checkpoints(srcs, revision: str | None = None, token: str | None = None) -> list[Source]:
    """`resolve_checkpoint` for each of several checkpoints, `revision` applying to those that are repo ids.

    One revision serves every repo id among `srcs` (local directories are read as they are); when
    none is a repo id, a `revision` is refused as `resolve_checkpoint` refuses it for one directory.

    Example:
        >>> [s.path for s in resolve_checkpoints(["fixtures/gpt2-tiny", "fixtures/llama-tiny"])]
        [PosixPath('fixtures/gpt2-tiny'), PosixPath('fixtures/llama-tiny')]
    """
    srcs = list(srcs)
    from_hub = [is_repo_id(s) for s in srcs]
    if not any(from_hub):  # nothing for the revision to apply to: say so, as for one local directory
        from_hub = [True] * len(srcs)
    return [resolve_checkpoint(s, revision if h else None, token) for s, h in zip(srcs, from_hub)]


def is_repo_id(src: str | os.PathLike) -> bool:
    """Whether `src` is read from the Hub: shaped like `org/name`, and no local path of that spelling exists."""
    return not Path(src).exists() and REPO_ID.fullmatch(str(src)) is not None


def _cached_source(path: Path) -> Source:
    # A Hub cache snapshot (.../models--org--name/snapshots/<commit>) still knows its repo and commit.
    parts = path.resolve().parts
    if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
        org_name = parts[-3][len("models--"):].split("--")
        if len(org_name) == 2:
            return Source(path, "/".join(org_name), None, parts[-1])
    return Source(path)


def pull(repo_id: str, revision: str | None = None, token: str | None = None) -> Source:
    """Download what surgery needs from the Hub repo `repo_id` into huggingface_hub's cache.

    Lists the repo, then fetches config, tokenizer and generation files, chat template, README.md
    and exactly the safetensors files that the index names. Pickle weights (.bin, .pt, ...) are
    never downloaded. Offline (HF_HUB_OFFLINE=1) a previous download in the cache is used.

    Raises:
        InputError: the repo or revision does not exist or cannot be read, it has no safetensors
            weights, or the Hub cannot be reached and nothing is cached.
    """
    from huggingface_hub import HfApi, constants, hf_hub_download, snapshot_download

    api = HfApi(endpoint=constants.ENDPOINT, token=token)
    where = f"{repo_id}" + (f" at revision {revision}" if revision else "")
    try:
        info = api.model_info(repo_id, revision=revision)
    except Exception as e:  # offline or unreachable: a previous download may be in the cache
        if _http_status(e) is None and _is_connection_error(e):
            return _from_cache(repo_id, revision, token, e)
        raise InputError(_pull_message(e, repo_id, revision)) from None
    files = {s.rfilename for s in info.siblings or []}
    commit = info.sha
    try:
        if INDEX_NAME in files:
            index_path = hf_hub_download(repo_id, INDEX_NAME, revision=commit, token=token, endpoint=constants.ENDPOINT)
            weights = _index_shards(Path(index_path), where)
            missing = sorted(set(weights) - files)
            if missing:
                raise InputError(f"{where}: {INDEX_NAME} names {missing[0]}, which the repo does not have; "
                                 "the repo is incomplete, pick another revision")
            weights.append(INDEX_NAME)
        elif SINGLE_NAME in files:
            weights = [SINGLE_NAME]
        else:
            pickles = sorted(f for f in files if f.endswith(PICKLE_SUFFIXES))
            if pickles:
                raise InputError(
                    f"{where}: has only pickle weights ({pickles[0]}); they are refused and never downloaded. "
                    "Use a revision or a copy of the model with safetensors weights (e.g. a refs/pr/N branch "
                    "from the Hub's convert space)"
                )
            raise InputError(f"{where}: no {SINGLE_NAME} or {INDEX_NAME} in the repo; pass a safetensors checkpoint")
        wanted = weights + sorted(f for f in files if f in PULL_FILES or _MODULE_CONFIG.fullmatch(f))
        # A slow tokenizer is read (and converted) only where there is no tokenizer.json; a SentencePiece .model
        # (small) always, since `add` keeps tokenizer.model, extended, for llama.cpp's converter (docs/gguf.md)
        wanted += sorted(f for f in files if f in STALE_SLOW_FILES and (TOKENIZER_FILE not in files or f.endswith(".model")))
        logger.info("downloading %d files of %s (commit %s)", len(wanted), repo_id, commit)
        # By the revision asked for, not the commit: the cache then records the branch, for offline reruns.
        path = snapshot_download(repo_id, revision=revision, allow_patterns=[_literal(f) for f in wanted],
                                 token=token, endpoint=constants.ENDPOINT)
    except InputError:
        raise
    except Exception as e:
        raise InputError(_pull_message(e, repo_id, revision)) from None
    return Source(Path(path), repo_id, revision, Path(path).name)


def _from_cache(repo_id: str, revision: str | None, token: str | None, error: Exception) -> Source:
    from huggingface_hub import constants, snapshot_download

    try:
        path = snapshot_download(repo_id, revision=revision, local_files_only=True, token=token,
                                 endpoint=constants.ENDPOINT)
    except Exception:
        raise InputError(_pull_message(error, repo_id, revision)) from None
    logger.warning("%s: the Hub cannot be reached; using the copy in the cache (%s)", repo_id, path)
    return Source(Path(path), repo_id, revision, Path(path).name)


def _literal(name: str) -> str:
    # allow_patterns are fnmatch patterns: escape the few characters that would make a name a pattern.
    return re.sub(r"([*?\[])", r"[\1]", name)


def _index_shards(index_path: Path, where: str) -> list[str]:
    try:
        weight_map = json.loads(index_path.read_text(encoding="utf-8"))["weight_map"]
        shards = list(dict.fromkeys(weight_map.values()))
    except (ValueError, KeyError, TypeError, AttributeError):
        raise InputError(f"{where}: {INDEX_NAME} has no readable weight_map; pick another revision") from None
    for s in shards:
        if not isinstance(s, str) or "/" in s or "\\" in s or not s.endswith(".safetensors"):
            raise InputError(f"{where}: {INDEX_NAME} names {s!r}; shard names must be plain .safetensors file names")
    return shards


def _pull_message(e: Exception, repo_id: str, revision: str | None) -> str:
    from huggingface_hub import constants

    status = _http_status(e)
    name = type(e).__name__
    if name == "RevisionNotFoundError":
        return f"{repo_id}: revision {revision!r} not found on the Hub; check --revision (a branch, tag or commit)"
    if name == "GatedRepoError":
        return (f"{repo_id}: the repo is gated; accept its conditions on the Hub page, then log in "
                "(`hf auth login`) or set HF_TOKEN")
    if status == 401 or name == "RepositoryNotFoundError" or status == 404:
        return (f"{repo_id}: not a local directory, and not found on the Hub (or private: log in with "
                "`hf auth login` or set HF_TOKEN); check the spelling")
    if status == 403:
        return f"{repo_id}: your token may not read this repo; use a token with read access to it"
    if _is_offline(e):
        return (f"{repo_id}: not a local directory, and not in the cache while offline (HF_HUB_OFFLINE is set); "
                "unset HF_HUB_OFFLINE to download it, or pass a local directory")
    if status is None and _is_connection_error(e):
        return (f"{repo_id}: cannot reach the Hub at {constants.ENDPOINT} and it is not in the cache; check the "
                "network (or HF_ENDPOINT), or pass a local directory")
    if status is not None:
        return f"{repo_id}: the Hub answered HTTP {status} while downloading; retry later"
    return f"{repo_id}: download failed ({name}: {_first_line(e)}); retry, or pass a local directory"


# ---------------------------------------------------------------------------------------------- push

def checkpoint_files(out: str | os.PathLike) -> tuple[list[str], list[str]]:
    """The files of the output directory `out` that belong to the checkpoint, and those left out.

    Checks the checkpoint first (config, index and every shard header), so a broken or half-written
    directory is never published. Dot files and directories (staging leftovers, .DS_Store, .cache),
    __pycache__, temp and lock files, pickle files and unknown kinds are left out.

    Returns:
        (files, skipped): POSIX paths relative to `out`; files in upload order (small files first).

    Raises:
        InputError: `out` is not a readable safetensors checkpoint.
    """
    root = Path(out)
    if not root.is_dir():
        raise InputError(f"{root}: not a directory; pass the output directory of `vocabsurgeon add`")
    ckpt = Checkpoint.open(root)
    ckpt.close()
    files, skipped = [], []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if p.is_dir():
            continue
        posix = rel.as_posix()
        if _is_junk(posix) or not p.is_file():
            skipped.append(posix)
        elif p.name.endswith(".safetensors"):
            (files if posix in ckpt.shards else skipped).append(posix)
        elif p.name.endswith(PUSH_SUFFIXES) or p.name in PUSH_NAMES:
            files.append(posix)
        else:
            skipped.append(posix)
    files.sort(key=lambda f: (f.endswith(".safetensors"), f))
    return files, skipped


def _is_junk(posix: str) -> bool:
    """Temp files, locks, caches and pickles: never part of a checkpoint, left out without a warning."""
    parts = posix.split("/")
    return any(part.startswith(".") or part == "__pycache__" for part in parts) or parts[-1].endswith(_NEVER_SUFFIXES)


def _stale_remote(remote: list[str], ours: list[str]) -> list[str]:
    """Remote files that would contradict the pushed checkpoint: old weights and slow-tokenizer files."""
    keep = set(ours)
    return sorted(
        f for f in remote
        if f not in keep and "/" not in f
        and (f.endswith((".safetensors", *PICKLE_SUFFIXES)) or f in STALE_SLOW_FILES
             or f in (INDEX_NAME, "pytorch_model.bin.index.json"))
    )


def check_repo_id(repo_id: str) -> None:
    """Raises InputError (one line, with an example) when `repo_id` is not `org/name`."""
    if not REPO_ID.fullmatch(repo_id):
        raise InputError(f"{repo_id!r}: not a Hub repo id; pass it as org/name, e.g. me/gpt2-lotr")


def push(
    out: str | os.PathLike,
    repo_id: str,
    *,
    private: bool | None = None,
    revision: str | None = None,
    create_pr: bool = False,
    token: str | None = None,
    message: str | None = None,
) -> PushResult:
    """Upload the checkpoint in `out` to the Hub repo `repo_id` as one commit.

    Creates the repo if needed (`private` applies only then), creates the branch `revision` from
    main if it does not exist (unless `create_pr`), and commits the files of `checkpoint_files(out)`
    together with the deletion of remote files that would contradict them (old shards, pickle
    weights, slow-tokenizer files without the new tokens). With `create_pr` the commit opens a pull
    request against `revision` (default main) instead of changing it.

    Args:
        out: the output directory of `add`.
        repo_id: `org/name` on the Hub.
        private: create the repo private (ignored when it exists).
        revision: the branch to commit to (default main).
        create_pr: open a pull request instead of committing to the branch.
        token: a Hub token; None for huggingface_hub's usual order (HF_TOKEN, then the stored login).
        message: the commit message (default: "Upload <dir> with vocabsurgeon <version>").

    Returns:
        PushResult; `to_dict()` is what `vocabsurgeon push --json` prints.

    Raises:
        InputError: `out` is not a checkpoint, or `repo_id` is not `org/name`.
        PushError: the Hub refused or could not be reached; the message says what to do next.

    Example:
        >>> r = push("out/", "me/gpt2-lotr", create_pr=True)  # doctest: +SKIP
        >>> r.pr_url  # doctest: +SKIP
        'https://huggingface.co/me/gpt2-lotr/discussions/1'
    """
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete, HfApi, constants

    check_repo_id(repo_id)
    out = Path(out)
    files, skipped = checkpoint_files(out)
    unknown = [f for f in skipped if not _is_junk(f)]
    if unknown:
        logger.warning("not uploaded (not a kind of file a checkpoint holds): %s", ", ".join(unknown))
    logger.info("not uploaded: %s", ", ".join(skipped) or "nothing")
    message = message or f"Upload {out.resolve().name} with vocabsurgeon {__version__}"
    branch = revision or constants.DEFAULT_REVISION
    api = HfApi(endpoint=constants.ENDPOINT, token=token)
    size = sum((out / f).stat().st_size for f in files)
    if size > 5 * 2**30 and branch == constants.DEFAULT_REVISION and not create_pr:
        logger.info("large upload (%.1f GiB) to main; --create-pr or --revision BRANCH lets you review it first",
                    size / 2**30)
    stage = "creating the repo"
    try:
        repo_url = api.create_repo(repo_id, private=private, exist_ok=True)
        if revision and not create_pr and revision != constants.DEFAULT_REVISION:
            stage = f"creating the branch {revision}"
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        stage = "listing the repo"
        deleted = _stale_remote(api.list_repo_files(repo_id, revision=branch), files)
        ops = [CommitOperationAdd(path_in_repo=f, path_or_fileobj=str(out / f)) for f in files]
        ops += [CommitOperationDelete(path_in_repo=f) for f in deleted]
        stage = "uploading and committing"
        logger.info("committing %d files (%d deletions) to %s@%s", len(files), len(deleted), repo_id, branch)
        info = api.create_commit(repo_id, operations=ops, commit_message=message, revision=revision,
                                 create_pr=create_pr)
    except (InputError, PushError):
        raise
    except Exception as e:
        raise PushError(_push_message(e, repo_id, branch, stage)) from None
    return PushResult(repo_id=repo_id, revision=branch, repo_url=str(repo_url), commit_url=info.commit_url,
                      commit=info.oid, pr_url=info.pr_url, files=files, deleted=deleted, skipped=skipped)


def _push_message(e: Exception, repo_id: str, branch: str, stage: str) -> str:
    from huggingface_hub import constants

    status = _http_status(e)
    name = type(e).__name__
    unchanged = f"nothing was committed to {repo_id}"
    if status == 401:
        return (f"push to {repo_id}: not logged in or the token is invalid (HTTP 401); run `hf auth login`, "
                "set HF_TOKEN, or pass --token")
    if status == 403:
        return (f"push to {repo_id}: your token may not write there (HTTP 403): the namespace is someone else's or "
                "the token is read-only; push to your own namespace or use a token with write access")
    if name == "RevisionNotFoundError":
        return f"push to {repo_id}: branch {branch!r} not found (HTTP 404); create it, or pass another --revision"
    if status == 404:
        return (f"push to {repo_id}: repo or branch not found (HTTP 404) while {stage}; check the repo id and "
                f"--revision; {unchanged}")
    if _is_offline(e):
        return f"push to {repo_id}: HF_HUB_OFFLINE is set, so nothing can be uploaded; unset it and rerun"
    if status is None and _is_connection_error(e):
        when = ("the commit either happened completely or not at all; check the repo's history, then rerun: files "
                "already uploaded are not sent again") if stage.startswith("uploading") else unchanged
        return (f"push to {repo_id}: cannot reach the Hub at {constants.ENDPOINT} while {stage} ({name}); {when}")
    if status is not None:
        return (f"push to {repo_id}: the Hub answered HTTP {status} while {stage}; {unchanged}. Rerun the same "
                "command: files already uploaded are not sent again")
    if isinstance(e, ValueError):  # huggingface_hub's checks, e.g. README.md metadata the Hub rejects
        return f"push to {repo_id}: {_first_line(e)}; {unchanged}"
    return f"push to {repo_id}: failed while {stage} ({name}: {_first_line(e)}); {unchanged}"


# ---------------------------------------------------------------------------------------------- errors

def _http_status(e: BaseException) -> int | None:
    response = getattr(e, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def _is_offline(e: BaseException) -> bool:
    names = {c.__name__ for c in type(e).__mro__}
    return "OfflineModeIsEnabled" in names or (
        "LocalEntryNotFoundError" in names and "HF_HUB_OFFLINE" in str(e))


def _is_connection_error(e: BaseException) -> bool:
    # httpx's transport errors (ConnectError, ReadError, RemoteProtocolError, timeouts) are not OSErrors;
    # match them by name so that this does not depend on which HTTP client huggingface_hub uses.
    names = {c.__name__ for c in type(e).__mro__}
    return bool(names & {"TransportError", "NetworkError", "TimeoutException", "RemoteProtocolError",
                         "ConnectionError", "OfflineModeIsEnabled", "LocalEntryNotFoundError"})


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
