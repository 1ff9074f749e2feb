"""PNG figures of the checks (`validate --plot`, `compare --plot`): one place that needs matplotlib.

matplotlib is the optional 'plot' extra, so it is imported only here and only when a plot is asked for;
`require_plot` lets a command refuse a missing extra before any long work.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

from ..errors import InputError

PLOT_EXTRA = "pip install 'vocabsurgeon[plot]'"


def require_plot() -> None:
    """Check that matplotlib (the 'plot' extra) is importable, before any long work.

    Raises:
        InputError: it is not installed; the message says how to install it.
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InputError(f"--plot needs matplotlib, which is not installed; install the extra: {PLOT_EXTRA}") from None


@contextlib.contextmanager
def figure(path: str | Path, title: str, xlabel: str, ylabel: str) -> Iterator:
    """Yield the axes of a 7x4 inch figure; on exit add the labels and legend and write it as a PNG to `path`.

    Raises:
        InputError: matplotlib is missing, or `path` cannot be written (the message names it).
    """
    require_plot()
    import matplotlib

    matplotlib.use("Agg")  # no display: write files only
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    try:
        yield ax
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend()
        fig.tight_layout()
        try:
            fig.savefig(Path(path), dpi=100)
        except OSError as e:
            raise InputError(f"{path}: cannot write the plot ({e.strerror}); choose another --plot path, "
                             "in a directory that exists and is writable") from None
    finally:
        plt.close(fig)
