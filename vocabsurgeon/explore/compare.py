"""Looking inside embedding spaces: nearest neighbours of tokens, and KNN-match similarity of two spaces.

Over 500 lines: compare and neighbors share the chunked top-k search and the token matching.

KNN-match similarity: per token, the Jaccard overlap of its K nearest neighbours by inner product (the
model scores with inner products) in each space, averaged over tokens. The n x n score matrix is never
built: a chunk of rows at a time keeps its top K, on the CPU or CUDA with the same torch code.
"""

from __future__ import annotations

import codecs
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from ..checkpoint.architectures import detect
from ..checkpoint.reader import Checkpoint
from ..devices import check_device
from ..errors import InputError
from ..checkpoint.filenames import TOKENIZER_FILE
from ..checkpoint.hub import Source, resolve_checkpoint, resolve_checkpoints
from ..validation.plot import figure
from ..tokenizer.encoding import unpadded
from ..tokenizer.families.pieces import bytes_of

logger = logging.getLogger(__name__)

DEFAULT_K = 10  # the seed's choice: "I find 10 to be reasonable"
METRICS = ("dot", "cosine")
WHICH = ("input", "output")
PERCENTILES = (5, 25, 50, 75, 95)
CHUNK_BYTES = {"cpu": 64 << 20, "cuda": 1 << 30}  # size of one (chunk x n) block of scores


# ----------------------------------------------------------------------------------------------
# The math: chunked top-k and KNN-match over in-memory matrices (NumPy or torch, any float dtype)
# ----------------------------------------------------------------------------------------------


def _device(device):
    """A torch.device from "auto" / "cpu" / "cuda[:i]" / a torch.device (see devices.resolve_device)."""
    import torch

    if isinstance(device, torch.device):
        return device
    from ..devices import resolve_device

    return torch.device(resolve_device(device))


def _as_tensor(matrix):
    import torch

    x = torch.as_tensor(matrix)  # shares memory with a NumPy array: no copy on the CPU
    if x.ndim != 2 or not x.is_floating_point():
        raise InputError(f"expected a 2-D floating-point matrix, got shape {tuple(x.shape)} dtype {x.dtype}")
    return x


def chunk_rows_for(n: int, element_size: int, device) -> int:
    """How many query rows fit one (chunk x n) block of scores of `CHUNK_BYTES` on `device`."""
    budget = CHUNK_BYTES["cuda" if str(device).startswith("cuda") else "cpu"]
    return max(1, min(n, budget // max(1, n * element_size)))


def _iter_topk(x, k: int, *, metric: str, rows, dev, chunk_rows: int | None) -> Iterator[tuple]:
    """Yield (query ids, neighbour ids, scores) per chunk, on `dev`: the top k of q . x_j, j != q.

    x: (n, hidden) torch tensor, already on `dev`. rows: (m,) query row ids (torch int64, on `dev`).
    """
    import torch

    n = x.shape[0]
    if metric == "cosine":
        # divide by norms per chunk instead of normalizing x: no second copy of the matrix
        norms = x.norm(dim=1).clamp_min(torch.finfo(x.dtype).tiny)  # (n,)
    step = chunk_rows or chunk_rows_for(n, x.element_size(), dev)
    for s in range(0, rows.shape[0], step):
        q = rows[s:s + step]  # (c,)
        scores = x[q] @ x.T  # (c, n)
        if metric == "cosine":
            scores /= norms[q, None] * norms[None, :]
        scores[torch.arange(q.shape[0], device=dev), q] = -torch.inf  # the token itself is excluded
        val, idx = scores.topk(k, dim=1)  # (c, k) each, best first
        yield q, idx, val


def _check_k(k: int, n: int, what: str) -> None:
    if k < 1:
        raise InputError(f"--k must be at least 1 (got {k})")
    if k >= n:
        raise InputError(f"--k {k} needs more than {k} tokens, but {what} has {n}; pass a smaller --k")


def top_k(matrix, k: int = DEFAULT_K, *, metric: str = "dot", rows: Sequence[int] | None = None,
          device="cpu", chunk_rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Find each row's k nearest other rows of `matrix` by inner product (or cosine), chunk by chunk.

    Args:
        matrix: (n, hidden) NumPy array or torch tensor, any float dtype (kept: float64 stays exact).
        k: neighbours per row; the row itself is never one of them.
        metric: "dot" (inner product) or "cosine".
        rows: the query rows (default: all n).
        device: "auto", "cpu", "cuda" or a torch.device; the matrix is copied there once.
        chunk_rows: query rows per (chunk x n) block of scores (default: about `CHUNK_BYTES`).

    Returns:
        (ids, scores): (m, k) int64 neighbour row ids and their scores, best first, as NumPy.

    Example:
        >>> ids, scores = top_k(np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0]]), k=1)
        >>> ids[:, 0].tolist()
        [1, 0, 1]
    """
    import torch

    if metric not in METRICS:
        raise InputError(f"--metric {metric!r} is not one of {', '.join(METRICS)}")
    dev = _device(device)
    x = _as_tensor(matrix).to(dev)
    _check_k(k, x.shape[0], "the matrix")
    q = torch.arange(x.shape[0]) if rows is None else torch.as_tensor(list(rows), dtype=torch.int64)
    ids, vals = [], []
    for _, idx, val in _iter_topk(x, k, metric=metric, rows=q.to(dev), dev=dev, chunk_rows=chunk_rows):
        ids.append(idx.cpu())
        vals.append(val.cpu())
    if not ids:
        return np.empty((0, k), np.int64), np.empty((0, k), np.float32)
    return torch.cat(ids).numpy(), torch.cat(vals).numpy()


def knn_match(a, b, k: int = DEFAULT_K, *, device="cpu", chunk_rows: int | None = None,
              progress: Callable[[int], None] | None = None) -> np.ndarray:
    """Score each token's KNN-match similarity between two spaces: Jaccard of its k-NN sets by inner product.

    Row i of `a` and row i of `b` are the same token; the widths may differ. Both matrices are held
    once on `device`; scores are computed a chunk of rows at a time in both spaces and only the top
    k are kept, so the n x n matrix is never built.

    Args:
        a, b: (n, hidden_a) and (n, hidden_b) NumPy arrays or torch tensors.
        k: neighbours per token (the token itself excluded).
        device: "auto", "cpu", "cuda" or a torch.device.
        chunk_rows: rows per chunk (default: about `CHUNK_BYTES` of scores).
        progress: called with the number of rows done after each chunk.

    Returns:
        (n,) float64: |N_a & N_b| / |N_a | N_b| per token, each a value i / (2k - i), i shared neighbours.

    Example:
        >>> x = np.random.default_rng(0).standard_normal((50, 8))
        >>> float(knn_match(x, x, k=5).mean())
        1.0
    """
    import torch

    dev = _device(device)
    xa, xb = _as_tensor(a).to(dev), _as_tensor(b).to(dev)
    n = xa.shape[0]
    if xb.shape[0] != n:
        raise InputError(f"the two matrices must have one row per token each, got {n} and {xb.shape[0]} rows")
    _check_k(k, n, "the vocabulary compared")
    if chunk_rows is None:
        chunk_rows = chunk_rows_for(n, max(xa.element_size(), xb.element_size()), dev)
    rows = torch.arange(n, device=dev)
    out = np.empty(n, np.float64)
    pairs = zip(_iter_topk(xa, k, metric="dot", rows=rows, dev=dev, chunk_rows=chunk_rows),
                _iter_topk(xb, k, metric="dot", rows=rows, dev=dev, chunk_rows=chunk_rows))
    done = 0
    for (q, ia, _), (_, ib, _) in pairs:
        shared = (ia[:, :, None] == ib[:, None, :]).sum(dim=(1, 2))  # (c,): ids within a set are distinct
        out[done:done + q.shape[0]] = (shared.double() / (2 * k - shared).double()).cpu().numpy()
        done += q.shape[0]
        if progress:
            progress(q.shape[0])
    return out


# ----------------------------------------------------------------------------------------------
# Reading a space from a checkpoint: the matrix (streamed from safetensors) and its token strings
# ----------------------------------------------------------------------------------------------


@dataclass
class Space:
    """One vocabulary matrix of a checkpoint, in memory as float32, with the token string of each row."""

    path: Path
    tensor: str  # the safetensors tensor name
    matrix: np.ndarray  # (rows, hidden) float32
    strings: list[str | None]  # the tokenizer's string of each row (None: no token, e.g. padding)
    texts: list[str | None]  # the text each row stands for ("Ġthe" -> " the")
    has_tokenizer: bool

    def text(self, row: int) -> str:
        """The text a row stands for (" the"), or "#id" for a row without a token."""
        t = self.texts[row]
        return f"#{row}" if t is None else t

    def display(self, row: int) -> str:
        """The text of a row quoted so that leading spaces show (' the'), or "#id" for a row without a token."""
        t = self.texts[row]
        return f"#{row}" if t is None else repr(t)


def _readable(tok_json: dict) -> Callable[[str], str]:
    """How to turn a vocabulary piece into the text it stands for, from the tokenizer's decoder."""
    spec = json.dumps(tok_json.get("decoder"), ensure_ascii=False)
    if "ByteLevel" in spec:
        def byte_level(piece: str) -> str:
            raw = bytes_of(piece)  # None for an added token stored as text ("<|endoftext|>", " Frodo")
            return piece if raw is None else raw.decode("utf-8", errors=_HEX_BYTES)

        return byte_level
    if "Metaspace" in spec or "\u2581" in spec:
        return lambda piece: piece.replace("\u2581", " ")
    return lambda piece: piece


def _hex_bytes(err: UnicodeDecodeError) -> tuple[str, int]:
    """Show bytes that are not UTF-8 on their own (a piece of a character) as <0xB0>, as byte fallback does."""
    return "".join(f"<0x{b:02X}>" for b in err.object[err.start:err.end]), err.end


_HEX_BYTES = "vocabsurgeon-hex"
codecs.register_error(_HEX_BYTES, _hex_bytes)


def _token_strings(path: Path, rows: int) -> tuple[list[str | None], list[str | None], bool]:
    """Each row's vocabulary string and readable text, from the checkpoint's tokenizer.json."""
    tok_path = path / TOKENIZER_FILE
    if not tok_path.is_file():
        logger.warning("%s: missing; tokens are shown and matched by row id", tok_path)
        return [None] * rows, [None] * rows, False
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_file(str(tok_path))
        raw = json.loads(tok_path.read_text(encoding="utf-8"))
    except Exception as e:  # the library's message is a Rust error: name the file and the fix
        raise InputError(f"{tok_path}: cannot be read by the tokenizers library ({e}); re-download it") from None
    readable = _readable(raw)
    strings: list[str | None] = [None] * rows
    for piece, i in tok.get_vocab(with_added_tokens=True).items():
        if 0 <= i < rows:
            strings[i] = piece
    past = tok.get_vocab_size(with_added_tokens=True) - rows
    if past > 0:
        logger.warning("%s has %d tokens past the %d rows of the matrix; they are left out", tok_path, past, rows)
    return strings, [None if s is None else readable(s) for s in strings], True


def load_space(path: str | Path, which: str = "input", *, embedding_key: str | None = None,
               lm_head_key: str | None = None) -> Space:
    """Read one vocabulary matrix of a checkpoint into memory (float32), streaming its shard chunk by chunk.

    Args:
        path: checkpoint directory (config.json + safetensors).
        which: "input" (the embedding) or "output" (lm_head; the embedding when tied).
        embedding_key / lm_head_key: tensor names for architectures not in the table.

    Raises:
        InputError: a bad checkpoint, `which`, or a row holding NaN/Inf (it would rank first or last).
    """
    if which not in WHICH:
        raise InputError(f"--which {which!r} is not one of {', '.join(WHICH)}")
    path = Path(path)
    ckpt = Checkpoint.open(path)
    try:
        layout = detect(ckpt, embedding_key, lm_head_key)
        name = layout.embedding if which == "input" or layout.lm_head is None else layout.lm_head
        if which == "output" and layout.lm_head is None:
            logger.info("%s: tied embeddings, the output matrix is %s", path, name)
        info = ckpt.tensors[name]
        if len(info.shape) != 2:
            raise InputError(f"{path}: tensor '{name}' has shape {list(info.shape)}, not (vocab, hidden)")
        rows, hidden = info.shape
        matrix = np.empty((rows, hidden), np.float32)  # (rows, hidden): the one copy held in memory
        start = 0
        for chunk in ckpt.iter_np_chunks(name):
            bad = ~np.isfinite(chunk).all(axis=1)
            if bad.any():
                row = start + int(np.argmax(bad))
                raise InputError(f"{path}: tensor '{name}' row {row} holds NaN or Inf; fix or drop that row first")
            matrix[start:start + chunk.shape[0]] = chunk
            start += chunk.shape[0]
    finally:
        ckpt.close()
    strings, texts, has_tok = _token_strings(path, rows)
    return Space(path, name, matrix, strings, texts, has_tok)


# ----------------------------------------------------------------------------------------------
# compare: two checkpoints
# ----------------------------------------------------------------------------------------------


@dataclass
class CompareResult:
    """KNN-match similarity of two checkpoints' vocabulary matrices, per token and summarized."""

    a: Space
    b: Space
    which: str
    k: int
    rows_a: np.ndarray  # (m,) row in A of each compared token
    rows_b: np.ndarray  # (m,) row in B of the same token
    matched_by: str  # "string" (tokenizer.json of both) or "row" (no tokenizer: same row id)
    scores: np.ndarray  # (m,) float64 KNN-match similarity per token
    device: str
    seconds: float  # in all, reading the matrices included
    load_seconds: float = 0.0  # reading both matrices from safetensors
    extremes: int = 10  # how many lowest/highest tokens to_dict lists
    sources: tuple[Source, Source] | None = None  # where A and B came from (None: the directories of a, b)

    def _sources(self) -> tuple[Source, Source]:
        return self.sources or (Source(self.a.path), Source(self.b.path))

    @property
    def mean(self) -> float:
        """The mean KNN-match similarity over the compared tokens: the headline figure."""
        return float(self.scores.mean())

    def histogram(self) -> list[dict]:
        """Tokens per number of shared neighbours: score i / (2k - i) for i = 0..k."""
        shared = np.rint(2 * self.k * self.scores / (1 + self.scores)).astype(np.int64)
        counts = np.bincount(shared, minlength=self.k + 1)
        return [{"shared": i, "score": round(i / (2 * self.k - i), 6), "tokens": int(c)} for i, c in enumerate(counts)]

    def _token(self, j: int) -> dict:
        ra, rb = int(self.rows_a[j]), int(self.rows_b[j])
        return {"token": self.a.text(ra), "id_a": ra, "id_b": rb, "score": round(float(self.scores[j]), 6)}

    def _order(self) -> np.ndarray:
        return np.lexsort((self.rows_a, self.scores))  # by score, then id: deterministic among ties

    def to_dict(self) -> dict:
        """The --json summary: knn_match.mean, k and tokens_compared, plus the distribution and extremes."""
        order = self._order()
        ext = min(self.extremes, len(order))
        src_a, src_b = self._sources()
        return {
            "a": src_a.name, "b": src_b.name, "which": self.which,
            "sources": {"a": src_a.to_dict(), "b": src_b.to_dict()},
            "tensor_a": self.a.tensor, "tensor_b": self.b.tensor,
            "hidden_a": int(self.a.matrix.shape[1]), "hidden_b": int(self.b.matrix.shape[1]),
            "k": self.k, "metric": "dot",
            "tokens_a": len(self.a.strings), "tokens_b": len(self.b.strings),
            "tokens_compared": int(len(self.scores)), "matched_by": self.matched_by,
            "knn_match": {
                "mean": self.mean,
                "std": float(self.scores.std()),
                "percentiles": {f"p{p}": round(float(np.percentile(self.scores, p)), 6) for p in PERCENTILES},
                "histogram": self.histogram(),
            },
            "extremes": ext,
            "lowest": [self._token(int(j)) for j in order[:ext]],
            "highest": [self._token(int(j)) for j in order[::-1][:ext]],
            "device": self.device, "seconds": round(self.seconds, 3), "load_seconds": round(self.load_seconds, 3),
        }

    def describe(self) -> str:
        """A human-readable report of the summary."""
        d = self.to_dict()
        m = d["knn_match"]
        src_a, src_b = self._sources()
        lines = [
            f"KNN-match similarity of {d['which']} matrices, k={self.k} nearest neighbours by inner product",
            f"  A: {src_a.describe()} ({d['tensor_a']}, {d['tokens_a']} x {d['hidden_a']})",
            f"  B: {src_b.describe()} ({d['tensor_b']}, {d['tokens_b']} x {d['hidden_b']})",
            f"  tokens compared: {d['tokens_compared']}"
            + ("" if d["matched_by"] == "string" else " (matched by row id: no tokenizer.json)"),
            f"  mean {m['mean']:.4f}  std {m['std']:.4f}  "
            + "  ".join(f"{p} {v:.3f}" for p, v in m["percentiles"].items()),
            "  shared neighbours  score   tokens",
        ]
        total = max(1, d["tokens_compared"])
        for h in m["histogram"]:
            bar = "#" * round(40 * h["tokens"] / total)
            lines.append(f"  {h['shared']:>17}  {h['score']:.3f}  {h['tokens']:>7}  {bar}")
        order, ext = self._order(), d["extremes"]
        for title, picked in (("lowest", order[:ext]), ("highest", order[::-1][:ext])):
            lines.append(f"  {title}: " + ", ".join(
                f"{self.a.display(int(self.rows_a[j]))} {self.scores[j]:.2f}" for j in picked))
        lines.append(f"  {d['seconds']:.2f} s on {d['device']} ({d['load_seconds']:.2f} s reading the matrices)")
        return "\n".join(lines)


def _match_rows(a: Space, b: Space) -> tuple[np.ndarray, np.ndarray, str]:
    """The rows of the tokens both spaces share, by vocabulary string (by row id without tokenizers)."""
    if a.has_tokenizer and b.has_tokenizer:
        in_b = {s: i for i, s in enumerate(b.strings) if s is not None}
        pairs = [(i, in_b[s]) for i, s in enumerate(a.strings) if s is not None and s in in_b]
        ra = np.array([p[0] for p in pairs], np.int64)
        rb = np.array([p[1] for p in pairs], np.int64)
        return ra, rb, "string"
    if a.has_tokenizer != b.has_tokenizer:
        missing = b.path if a.has_tokenizer else a.path
        logger.warning("%s has no %s: tokens are matched by row id", missing, TOKENIZER_FILE)
    n = min(len(a.strings), len(b.strings))
    return np.arange(n), np.arange(n), "row"


def _take(matrix: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """matrix[rows], as a view (no copy) when `rows` is 0..m-1, the usual case."""
    if len(rows) and rows[0] == 0 and rows[-1] == len(rows) - 1 and np.array_equal(rows, np.arange(len(rows))):
        return matrix[: len(rows)]
    return matrix[rows]


def compare(path_a: str | Path, path_b: str | Path, k: int = DEFAULT_K, *, which: str = "input",
            device="auto", chunk_rows: int | None = None, embedding_key: str | None = None,
            lm_head_key: str | None = None, progress: Callable[[int], None] | None = None,
            on_total: Callable[[int], None] | None = None, revision: str | None = None,
            token: str | None = None) -> CompareResult:
    """Compare two checkpoints' vocabulary matrices by KNN-match similarity over the tokens both share.

    Tokens are matched by their vocabulary string in each tokenizer.json (so a checkpoint with
    added tokens compares with its source over the source's tokens), and neighbours are searched
    among the shared tokens only, so that both neighbour sets come from the same candidates.

    Args:
        path_a, path_b: checkpoint directories, or Hub repo ids (`org/name`) whose safetensors
            checkpoints are downloaded into the Hub cache, as `add_tokens` does.
        k: neighbours per token by inner product, the token itself excluded.
        which: "input" (embedding) or "output" (lm_head, the embedding when tied).
        device: "auto", "cpu" or "cuda".
        progress: called with the rows done after each chunk; on_total: called once with the total.
        revision: the Hub revision of whichever of A and B is a repo id (of both when both are);
            refused when both are local directories.
        token: the Hub token (None: HF_TOKEN or the stored login).

    Raises:
        InputError: for bad checkpoints, no shared token, k too large for the shared vocabulary, or
            a repo id that cannot be pulled.
    """
    check_device(device)  # before any download or read
    src_a, src_b = resolve_checkpoints([path_a, path_b], revision=revision, token=token)  # downloads: not timed
    started = time.perf_counter()
    dev = _device(device)
    reading = time.perf_counter()
    a = load_space(src_a.path, which, embedding_key=embedding_key, lm_head_key=lm_head_key)
    b = load_space(src_b.path, which, embedding_key=embedding_key, lm_head_key=lm_head_key)
    loaded = time.perf_counter()
    rows_a, rows_b, matched_by = _match_rows(a, b)
    if len(rows_a) == 0:
        raise InputError(f"{src_a.name} and {src_b.name} share no token string; compare checkpoints of the same "
                         "tokenizer family")
    if matched_by == "string" and (len(rows_a) < len(a.strings) or len(rows_b) < len(b.strings)):
        logger.warning("the vocabularies differ: comparing the %d tokens both share (A has %d rows, B %d)",
                       len(rows_a), len(a.strings), len(b.strings))
    _check_k(k, len(rows_a), "the shared vocabulary")
    if on_total:
        on_total(len(rows_a))
    scores = knn_match(_take(a.matrix, rows_a), _take(b.matrix, rows_b), k, device=dev, chunk_rows=chunk_rows,
                       progress=progress)
    return CompareResult(a, b, which, k, rows_a, rows_b, matched_by, scores, str(dev), time.perf_counter() - started,
                         loaded - reading, sources=(src_a, src_b))


def plot_histogram(result: CompareResult, path: str | Path) -> Path:
    """Write a PNG bar chart of the KNN-match distribution (tokens per number of shared neighbours)."""
    hist = result.histogram()
    title = f"{result.a.path.name} vs {result.b.path.name} ({result.which}, {len(result.scores)} tokens)"
    with figure(path, title, f"KNN-match similarity (Jaccard of {result.k}-NN sets by inner product)", "tokens") as ax:
        ax.bar([h["score"] for h in hist], [h["tokens"] for h in hist], width=0.6 / result.k)
        ax.axvline(result.mean, color="C3", linestyle="--", label=f"mean {result.mean:.3f}")
    return Path(path)


# ----------------------------------------------------------------------------------------------
# neighbors: one checkpoint, a few tokens
# ----------------------------------------------------------------------------------------------


@dataclass
class Neighbors:
    """The nearest neighbours of one token: (row, readable text, score), best first."""

    query: str  # as the user gave it
    row: int | None  # None when the query names no row (see `error`)
    token: str  # readable text of the row
    neighbors: list[tuple[int, str, float]] = field(default_factory=list)
    error: str | None = None  # why the query names no row; the other queries are still answered

    def to_dict(self) -> dict:
        """The --json form: the query, its row and text, and the neighbours best first (or the error)."""
        if self.error is not None:
            return {"query": self.query, "error": self.error}
        return {"query": self.query, "id": self.row, "token": self.token,
                "neighbors": [{"id": i, "token": t, "score": s} for i, t, s in self.neighbors]}

    def describe(self, display: Callable[[str], str] = repr) -> str:
        """Human-readable lines: the token, then one neighbour per line with its score."""
        lines = [f"{display(self.token)} (id {self.row}):"]
        for rank, (i, t, s) in enumerate(self.neighbors, 1):
            lines.append(f"  {rank:>3}  {s:>10.4f}  {display(t)} (id {i})")
        return "\n".join(lines)


def find_row(space: Space, query: str) -> int:
    """The row of a token given as its vocabulary string ("Ġthe"), its text (" the") or "#id"."""
    rows = len(space.strings)
    if query.startswith("#") and query[1:].isdigit():
        row = int(query[1:])
        if row >= rows:
            raise InputError(f"{query}: {space.path} has rows 0..{rows - 1} in '{space.tensor}'; pass a smaller id")
        return row
    for i, s in enumerate(space.strings):  # the exact vocabulary string first
        if s == query:
            return i
    for i, t in enumerate(space.texts):  # then the text it stands for
        if t == query:
            return i
    if not space.has_tokenizer:
        raise InputError(f"{query!r}: {space.path} has no {TOKENIZER_FILE}; name rows by id, e.g. '#42'")
    from tokenizers import Tokenizer

    tok = unpadded(Tokenizer.from_file(str(space.path / TOKENIZER_FILE)))  # padding would append pad ids
    ids = tok.encode(query, add_special_tokens=False).ids
    model = json.loads(tok.to_str())["model"]
    unk = model.get("unk_id") if model.get("type") == "Unigram" else tok.token_to_id(model.get("unk_token") or "")
    if len(ids) == 1 and ids[0] < rows and ids[0] != unk:
        return ids[0]  # the tokenizer's own reading of the query: "Hello" is "hello" when uncased
    pieces = " ".join(space.display(i) if i < rows else f"#{i}" for i in ids)
    raise InputError(
        f"{query!r} is not one token of {space.path / TOKENIZER_FILE} (it splits into {pieces}); pass one "
        "of those pieces, a row as '#id', or add the word first with `vocabsurgeon add`"
    )


def neighbors(path: str | Path, queries: Sequence[str], k: int = DEFAULT_K, *, metric: str = "dot",
              which: str = "input", device="auto", embedding_key: str | None = None,
              lm_head_key: str | None = None, revision: str | None = None,
              token: str | None = None) -> list[Neighbors]:
    """List the k nearest neighbours (by inner product or cosine, itself excluded) of each token in a checkpoint.

    Args:
        path: checkpoint directory, or a Hub repo id (org/name, at `revision`, with `token`) pulled
            into the Hub cache as `add_tokens` does; a local directory of the same spelling wins.
        queries: tokens as vocabulary strings ("Ġthe"), their text (" the", "Frodo") or rows ("#42").
        metric: "dot" (inner product, what the model computes) or "cosine" (direction only).
        which: "input" (embedding) or "output" (lm_head, the embedding when tied).

    Returns:
        One `Neighbors` per query, in order. A query that is not one row (the message shows its
        pieces) gets `error` set and no neighbours; the others are answered all the same.

    Raises:
        InputError: a bad option, or a checkpoint that cannot be read.
    """
    if metric not in METRICS:
        raise InputError(f"--metric {metric!r} is not one of {', '.join(METRICS)}")
    check_device(device)  # before any download or read
    src = resolve_checkpoint(path, revision=revision, token=token)
    space = load_space(src.path, which, embedding_key=embedding_key, lm_head_key=lm_head_key)
    _check_k(k, len(space.strings), f"'{space.tensor}'")
    rows: list[int | None] = []
    errors: list[str | None] = []
    for q in queries:
        try:
            rows.append(find_row(space, q))
            errors.append(None)
        except InputError as e:
            rows.append(None)
            errors.append(str(e))
    found = [r for r in rows if r is not None]
    ids, scores = top_k(space.matrix, k, metric=metric, rows=found, device=device) if found else ([], [])
    answers = iter(zip(ids, scores))
    out = []
    for q, r, err in zip(queries, rows, errors):
        if r is None:
            out.append(Neighbors(q, None, "", error=err))
            continue
        nid, ns = next(answers)
        out.append(Neighbors(q, r, space.text(r),
                             [(int(i), space.text(int(i)), float(s)) for i, s in zip(nid, ns)]))
    return out
