"""A CPU call the cost model predicts will take over ~2 s shows a tqdm bar (stubbed
prediction, stubbed ``tqdm``); ``config.progress = False``, a short prediction or no
``tqdm`` installed give none, and the result is the same either way."""
from __future__ import annotations

import sys
import types

import numpy as np
import pytest

import cupyconv
from cupyconv import config
from cupyconv.backends.numpy import NumpyBackend, progress
from helpers import ref_conv, small_ints


class _Bars:
    """A stand-in ``tqdm`` module recording every bar it draws."""

    def __init__(self):
        self.made = []
        recorder = self

        class Bar:
            def __init__(self, total, desc, **kwargs):
                self.total, self.desc, self.n, self.closed = total, desc, 0, False
                self.refreshes = 0
                recorder.made.append(self)

            def refresh(self):
                self.refreshes += 1

            def close(self):
                self.closed = True
        self.module = types.SimpleNamespace(tqdm=Bar)


@pytest.fixture
def bars(monkeypatch):
    bars = _Bars()
    monkeypatch.setitem(sys.modules, "tqdm", bars.module)
    monkeypatch.setattr(progress, "TICK_SECONDS", 0.001)
    cupyconv.clear_caches()                 # choices made under the stubbed prediction
    yield bars
    cupyconv.clear_caches()


def _predict(monkeypatch, seconds):
    """Every candidate predicted to take ``seconds`` (the cost model stubbed)."""
    def predict_times(self, problem, algorithms, *args, **kwargs):
        return {name: seconds for name in algorithms}
    monkeypatch.setattr(NumpyBackend, "predict_times", predict_times)


def _call(rng):
    x, w = small_ints(rng, (2, 3, 9, 8), np.float64), small_ints(rng, (4, 3, 3, 3), np.float64)
    y = cupyconv.conv(x, w, padding=1, method="gemm")
    np.testing.assert_array_equal(y, ref_conv(x, w, padding=1))


def test_a_call_predicted_long_draws_a_bar(bars, monkeypatch, rng):
    _predict(monkeypatch, 12.0)
    _call(rng)
    (bar,) = bars.made
    assert bar.total == 12.0 and "gemm" in bar.desc and "predicted" in bar.desc
    assert bar.closed and bar.n == bar.total


@pytest.mark.parametrize("why", ["setting off", "short prediction", "no tqdm"])
def test_no_bar(bars, monkeypatch, rng, why):
    _predict(monkeypatch, 0.5 if why == "short prediction" else 12.0)
    if why == "setting off":
        monkeypatch.setattr(config, "progress", False)
    if why == "no tqdm":
        monkeypatch.setitem(sys.modules, "tqdm", None)      # import tqdm raises ImportError
    _call(rng)
    assert bars.made == []


def test_the_setting_is_validated():
    with pytest.raises(TypeError, match="cupyconv.config.progress must be True or False"):
        config.progress = "no"
