"""The build's progress bar: kernels done / total and the time left (tqdm optional)."""
from __future__ import annotations

import io
import sys
import types

from cupyconv._compile.progress import ProgressBar


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_plain_bar_on_a_log_prints_lines_with_time_left():
    out = io.StringIO()
    bar = ProgressBar(20, True, "cupyconv build", stream=out, use_tqdm=False)
    for _ in range(20):
        bar.update(1, "sm_90 vol2col float32 3-D")
    bar.close()
    lines = out.getvalue().splitlines()
    assert 2 <= len(lines) <= 11                       # one per tenth, not one per kernel
    assert lines[-1].startswith("cupyconv build [##############################] 20/20 kernels")
    assert "elapsed" in lines[-1] and "left" in lines[-1] and "\r" not in out.getvalue()


def test_plain_bar_on_a_terminal_redraws_one_line():
    out = _Tty()
    bar = ProgressBar(4, True, stream=out, use_tqdm=False)
    bar.update(3, "a")
    assert out.getvalue().startswith("\r") and "3/4 kernels" in out.getvalue()
    bar.update(1, "b")
    assert out.getvalue().endswith("\n") and "4/4 kernels" in out.getvalue()


def test_eta_is_the_average_rate_so_far(monkeypatch):
    clock = iter([100.0, 110.0])
    monkeypatch.setattr("cupyconv._compile.progress.time.perf_counter", lambda: next(clock))
    bar = ProgressBar(10, False)
    bar.done = 2
    assert bar.eta() == 40.0                           # 10 s for 2 kernels: 8 more take 40 s


def test_tqdm_draws_the_bar_when_installed(monkeypatch):
    seen = {}

    class FakeTqdm:
        def __init__(self, **kw):
            seen.update(kw, n=0)

        def update(self, n):
            seen["n"] += n

        def set_postfix_str(self, s, refresh=True):
            seen["label"] = s

        def close(self):
            seen["closed"] = True

    monkeypatch.setitem(sys.modules, "tqdm", types.SimpleNamespace(tqdm=FakeTqdm))
    bar = ProgressBar(5, True, "cupyconv build", stream=io.StringIO())
    bar.update(5, "sm_80 direct_conv float32 2-D")
    bar.close()
    assert seen["total"] == 5 and seen["unit"] == "kernel" and seen["n"] == 5 and seen["closed"]
    assert seen["label"] == "sm_80 direct_conv float32 2-D"


def test_without_tqdm_the_plain_bar_is_used(monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)     # import tqdm raises ImportError
    out = io.StringIO()
    bar = ProgressBar(1, True, stream=out)
    bar.update(1)
    assert bar.bar is None and "1/1 kernels" in out.getvalue()
