"""The progress bar of long builds: kernels done / total and the time left.

``python -m cupyconv build`` and a wheel build draw it on stderr
(:func:`cupyconv._compile.build.compile_groups`).
"""
from __future__ import annotations

import sys
import time
from typing import Optional

__all__ = ["ProgressBar"]


def _clock(seconds: float) -> str:
    """``75.2`` -> ``"1:15"``; ``3725`` -> ``"1:02:05"``."""
    seconds = max(int(round(seconds)), 0)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class ProgressBar:
    """Kernels done / total and the time left, on stderr.

    tqdm draws the bar when it is installed (an optional dependency:
    ``pip install tqdm``); otherwise a plain bar is drawn: one line redrawn
    with ``\\r`` on a terminal, and on a pipe or a log file (a wheel build,
    CI) a new line at every tenth of the work and at most every 15 seconds.

    Parameters
    ----------
    total : int
        Units of work (kernels).
    enabled : bool
        False draws nothing.
    desc : str
        Label in front of the bar.
    stream : file, optional
        Default ``sys.stderr``.
    use_tqdm : bool
        False forces the plain bar.
    """

    #: Seconds between two plain lines when the stream is not a terminal.
    LOG_INTERVAL_S = 15.0

    def __init__(self, total: int, enabled: bool = True, desc: str = "cupyconv build", *,
                 unit: str = "kernel", stream=None, use_tqdm: bool = True):
        self.total, self.done, self.enabled, self.desc, self.unit = total, 0, enabled, desc, unit
        self.stream = sys.stderr if stream is None else stream
        self.start = time.perf_counter()
        self.bar = None
        self._last_line, self._last_tenth = self.start, 0
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        if enabled and use_tqdm:
            try:
                from tqdm import tqdm       # optional dependency; the plain bar is the fallback
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self.bar = tqdm(total=total, unit=unit, desc=desc, file=self.stream)

    def eta(self) -> Optional[float]:
        """Seconds left at the average rate so far (None before the first unit)."""
        if self.done <= 0:
            return None
        elapsed = time.perf_counter() - self.start
        return elapsed / self.done * max(self.total - self.done, 0)

    def line(self, label: str = "") -> str:
        """The plain bar: ``desc [#####.....] 120/1152 kernels, 0:42 elapsed, ~5:58 left  label``."""
        width = 30
        fill = int(width * self.done / max(self.total, 1))
        eta = self.eta()
        left = "time left unknown" if eta is None else f"~{_clock(eta)} left"
        return (f"{self.desc} [{'#' * fill}{'.' * (width - fill)}] {self.done}/{self.total} "
                f"{self.unit}s, {_clock(time.perf_counter() - self.start)} elapsed, {left}"
                + (f"  {label}" if label else ""))

    def update(self, n: int = 1, label: str = "") -> None:
        """Count ``n`` more units done; ``label`` names what just finished."""
        self.done += n
        if not self.enabled:
            return
        if self.bar is not None:
            if label:
                self.bar.set_postfix_str(label, refresh=False)
            self.bar.update(n)
            return
        finished = self.done >= self.total
        if self.tty:
            self.stream.write(f"\r{self.line(label[:40]):<130}" + ("\n" if finished else ""))
        else:
            now = time.perf_counter()
            tenth = int(10 * self.done / max(self.total, 1))
            if not (finished or tenth > self._last_tenth or now - self._last_line >= self.LOG_INTERVAL_S):
                return
            self._last_line, self._last_tenth = now, tenth
            self.stream.write(self.line(label) + "\n")
        self.stream.flush()

    def close(self) -> None:
        """End the bar (tqdm's, or a plain line left unfinished by an error)."""
        if self.bar is not None:
            self.bar.close()
        elif self.enabled and self.tty and self.done < self.total:
            self.stream.write("\n")
            self.stream.flush()
