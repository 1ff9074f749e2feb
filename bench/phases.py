"""Where the time of one `vocabsurgeon add` goes: wall-clock start and duration of each phase, per thread.

    python bench/phases.py add --tokens bench/work/tokens-1000.txt --init mean -q --no-validate --link \
        bench/work/ckpt-full bench/work/out

Runs the CLI in this process with the surgery's steps (and the writer's fsyncs) wrapped by a timer,
then prints one line per call to stderr, sorted by start: name, thread, start (s since launch),
duration (s). Unlike cProfile it costs nothing measurable and shows what overlaps the copy thread.
"""

from __future__ import annotations

import functools
import sys
import threading
import time

T0 = time.perf_counter()

import vocabsurgeon.surgery as surgery  # noqa: E402
import vocabsurgeon.writer as writer  # noqa: E402

STEPS = ("plan_add", "copy_old_bytes", "copy_file", "_all_new_rows", "write_rows", "_write_metadata_files",
         "_copy_other_files", "write_model_card", "verify_tokenizer", "_verify", "_old_rows_kept")
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


def main() -> None:
    for name in STEPS:
        setattr(surgery, name, timed(name, getattr(surgery, name)))
    writer.os.fsync = timed("fsync", writer.os.fsync)  # the os module itself: every fsync here is timed
    writer.os.fdatasync = timed("fdatasync", writer.os.fdatasync)
    from vocabsurgeon.cli import main as cli_main

    sys.argv = ["vocabsurgeon"] + sys.argv[1:]
    try:
        cli_main()
    except SystemExit as e:
        code = e.code
    else:
        code = 0
    for name, thread, start, seconds in sorted(log, key=lambda r: r[2]):
        print(f"{name:24s} {thread[:20]:20s} {start:8.3f} {seconds:8.3f}", file=sys.stderr)
    print(f"{'total':24s} {'':20s} {0:8.3f} {time.perf_counter() - T0:8.3f}", file=sys.stderr)
    sys.exit(code)


if __name__ == "__main__":
    main()
