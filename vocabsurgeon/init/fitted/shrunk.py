"""`--init subword-mean-shrunk`: the sub-word mean, its output rows shrunk toward the mean row to the old-text KL limit.

Old text never feeds a new id as input, so only the new output rows (lm_head's; the one shared row when tied)
move its predictions: each adds exp(h . w) to the partition function. The sub-word mean of a piece's output
rows can add much (on SmolLM2 with 8,000 Russian tokens, a KL p99 of 3.1 nats on English text). These rows
are shrunk toward the mean row, w = mean + a (w_sub - mean), with the largest a in [0, 1] that keeps the
held-out old-text KL within fitted's limits (`causal.keep_old_text`, the same held-out text and limits as
`--init fitted`). Nothing is fitted: the frozen model runs once, over the held-out old text.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from ...progress import Steps
from ...runtime import ModelKind, load_tokenizer, loaded_model
from ...tokenizer.chats import chat_samples
from .causal import _Model, keep_old_text, old_text_windows
from .common import FitOptions, FitResult, FitToken, narrow_threads, output_prior

logger = logging.getLogger(__name__)

METHOD = "subword-mean-shrunk"


def shrink_subword_rows(src: Path, kind: ModelKind, tokens: list[FitToken], opts: FitOptions,
                        say: Steps) -> FitResult:
    """The output rows of `tokens` for the causal LM at `src`: their pieces' mean output row, shrunk toward the
    mean row until the held-out old-text KL meets its limits (`fitted.shrink_rows` calls this).

    Returns:
        FitResult with output rows (k, hidden) float64 and a report: the shrink factor a, the limits and the
        held-out KL of the plain sub-word mean ("before_shrink") and of the rows written.
    """
    t0 = time.perf_counter()
    tok = load_tokenizer(src)
    with loaded_model(src, opts.device, kind, remedy="use --init mean or subword-mean", dtype=opts.dtype) as lm:
        m = _Model(lm, tok, init=METHOD)
        with narrow_threads(m.device, m.E.shape[1]):
            chats = chat_samples(src)
            _, held = old_text_windows(tok, m.prefix, m.max_len, m.max_len, opts.old_text_tokens, chats)
            b_new = float(m.b.double().mean()) if m.b is not None else 0.0
            text = "packaged corpus, odd paragraphs" + (f", {len(chats)} chat-template samples" if chats else "")
            W, kept = keep_old_text(m, held, output_prior("subword-mean", m.W, tokens),
                                    output_prior("mean", m.W, tokens), b_new, opts.kl_limit, opts.batch_size, say,
                                    text)
    report = {"method": METHOD, "roles": ["output"], "output": {"start": "subword-mean", **kept},
              "seconds": round(time.perf_counter() - t0, 3)}
    logger.info("sub-word mean output rows of %d tokens shrunk with a = %.3f in %.1f s", len(tokens),
                kept["shrink"]["a"], report["seconds"])
    return FitResult(None, W.numpy(), report)
