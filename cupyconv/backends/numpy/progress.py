"""A progress bar for a CPU call the cost model predicts will take long.

:func:`cpu_progress` draws a ``tqdm`` bar on stderr while its block runs when the
predicted time exceeds :data:`PROGRESS_SECONDS`, ``cupyconv.config.progress`` is on and
``tqdm`` imports (the ``progress`` extra; it is imported here, on the first long call,
never at ``import cupyconv``).  The bar counts seconds against the prediction (the
algorithms have no common unit of work to count): a thread advances it every
:data:`TICK_SECONDS`, short of the end until the call returns, and the bar is removed
when it does.
"""
from __future__ import annotations

import contextlib
import threading
import time

from ... import config

__all__ = ["cpu_progress", "PROGRESS_SECONDS", "TICK_SECONDS"]

#: Predicted seconds above which a call shows a bar.
PROGRESS_SECONDS = 2.0
#: Seconds between two updates of the bar.
TICK_SECONDS = 0.25


def _bar(predicted, what):
    """A ``tqdm`` bar of ``predicted`` seconds, or ``None`` (no bar is wanted or possible)."""
    if not config.progress or predicted is None or not predicted > PROGRESS_SECONDS:
        return None
    try:
        from tqdm import tqdm          # optional dependency: the `progress` extra
    except ImportError:
        return None
    return tqdm(total=round(float(predicted), 1), desc=f"cupyconv {what} (predicted)",
                unit="s", leave=False, bar_format="{desc}: {percentage:3.0f}%|{bar}| "
                "{n:.1f}/{total:.1f} s")


def cpu_progress(predicted, what):
    """A context that shows a bar while its block runs when ``predicted`` (seconds) is
    long; else ``contextlib.nullcontext()`` (nothing is set up on a short call)."""
    bar = _bar(predicted, what)
    return contextlib.nullcontext() if bar is None else _ticking(bar)


@contextlib.contextmanager
def _ticking(bar):
    """Advance ``bar`` by the elapsed seconds while the block runs; close it after."""
    done, start = threading.Event(), time.perf_counter()

    def tick():
        while not done.wait(TICK_SECONDS):
            bar.n = min(round(time.perf_counter() - start, 1), 0.99 * bar.total)
            bar.refresh()

    ticker = threading.Thread(target=tick, name="cupyconv-progress", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()
        bar.n = bar.total
        bar.close()
