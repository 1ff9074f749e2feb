"""Where the time of one `vocabsurgeon add` goes: wall-clock start and duration of each phase, per thread.

    python -m tools.phases add --tokens bench/work/tokens-1000.txt --init mean -q --no-validate --link \
        bench/work/ckpt-full bench/work/out

Runs the CLI in this process with the surgery's steps (and the writer's fsyncs) wrapped by a timer,
then prints one line per call to stderr, sorted by start: name, thread, start (s since launch),
duration (s). Unlike cProfile it costs nothing measurable and shows what overlaps the copy thread.

    python -m tools.phases --free-copy add ...

is the lower bound of any reordering of the copy: the rewritten shards' old bytes are not copied
(the file gets its header and is extended sparse, no data), and the old-row check compares the
input with itself (the same bytes read, from the page cache). Everything else, the main thread's
whole critical path, runs as in a real run. The output is not a valid checkpoint; it is removed.
"""

from __future__ import annotations

import functools
import sys
import threading
import time

T0 = time.perf_counter()

import vocabsurgeon.add.pipeline as add  # noqa: E402
import vocabsurgeon.checkpoint.writer as writer  # noqa: E402
import vocabsurgeon.engine.job as job  # noqa: E402
import vocabsurgeon.engine.outputs as outputs  # noqa: E402
import vocabsurgeon.init.rows as rows  # noqa: E402
import vocabsurgeon.tokenizer.editor as editor  # noqa: E402

# (module, name): each step, patched where its caller looks it up
STEPS = ((add, "plan_tokens"), (job, "copy_old_bytes"), (job, "copy_file"), (rows, "row_stats"),
         (job, "all_new_rows"), (job, "write_rows"), (job, "write_metadata_files"), (job, "copy_other_files"),
         (job, "record"), (editor, "verify_tokenizer"), (job, "verify_rows"), (job, "verify_checkpoint"),
         (outputs, "rows_kept"))
log: list[tuple[str, str, float, float]] = []


def timed(name: str, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            log.append((name, threading.current_thread().name, t - T0, time.perf_counter() - t))
    return wrapper


def _free_copy() -> None:
    import os

    from vocabsurgeon.checkpoint.reader import same_bytes

    def copy_nothing(src, layout, dst, progress=None, names=None):
        os.close(os.open(dst, os.O_WRONLY | os.O_CREAT, 0o644))  # write_rows extends it, sparse

    def kept_self(src, t, dst, dst_start, except_rows=()):
        return same_bytes(src, t.start, src, t.start, t.nbytes)

    job.copy_old_bytes = copy_nothing
    outputs.rows_kept = kept_self


def main() -> None:
    free = sys.argv[1:2] == ["--free-copy"]
    if free:
        del sys.argv[1]
        _free_copy()
    for module, name in STEPS:
        setattr(module, name, timed(name, getattr(module, name)))
    writer.os.fsync = timed("fsync", writer.os.fsync)  # the os module itself: every fsync here is timed
    writer.os.fdatasync = timed("fdatasync", writer.os.fdatasync)
    from vocabsurgeon.cli.commands import main as cli_main

    sys.argv = ["vocabsurgeon"] + sys.argv[1:]
    try:
        cli_main()
    except SystemExit as e:
        code = e.code
    else:
        code = 0
    for name, thread, start, seconds in sorted(log, key=lambda r: r[2]):
        print(f"{name:24s} {thread[:20]:20s} {start:10.6f} {seconds:10.6f}", file=sys.stderr)
    print(f"{'total':24s} {'':20s} {0:10.6f} {time.perf_counter() - T0:10.6f}", file=sys.stderr)
    if free:  # the output directory of a --free-copy run has holes instead of weights: removed
        import shutil

        shutil.rmtree(sys.argv[-1], ignore_errors=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
