"""``benchmarks.timing.graph_time``'s control flow on a stand-in for CuPy's stream capture
(the real one needs a GPU; the device check runs it): a replay time on success, the reason
and a closed capture when the call cannot be captured."""
from __future__ import annotations

import pathlib
import sys
import types

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from benchmarks.timing import graph_time  # noqa: E402


class _Stream:
    def __init__(self, log, **kw):
        self.log = log

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def synchronize(self):
        pass

    def begin_capture(self):
        self.log.append("begin")

    def end_capture(self):
        self.log.append("end")
        return types.SimpleNamespace(launch=lambda stream: self.log.append("replay"))


class _Event:
    def record(self, stream):
        pass

    def synchronize(self):
        pass


def _fake_cupy(log, elapsed_ms):
    times = iter(elapsed_ms)
    cuda = types.SimpleNamespace(Stream=lambda **kw: _Stream(log, **kw), Event=_Event,
                                 get_elapsed_time=lambda a, b: next(times))
    return types.SimpleNamespace(cuda=cuda)


def test_replays_are_timed(monkeypatch):
    log = []
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(log, [3.0, 1.0, 2.0]))
    calls = []
    seconds, why = graph_time(lambda: calls.append(1), repeat=3)
    assert (seconds, why) == (pytest.approx(2e-3), None)          # median, in seconds
    assert len(calls) == 3                                       # two warm-ups, one capture
    assert log == ["begin", "end"] + ["replay"] * 4              # one untimed replay


def test_a_call_that_cannot_be_captured_is_reported(monkeypatch):
    log = []
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(log, []))
    state = {"n": 0}

    def call():
        state["n"] += 1
        if state["n"] == 3:                                      # inside the capture
            raise RuntimeError("cudaErrorStreamCaptureUnsupported: operation not permitted")

    seconds, why = graph_time(call)
    assert seconds is None and why.startswith("RuntimeError: cudaErrorStreamCapture")
    assert log == ["begin", "end"]                               # the capture was closed
