"""Algorithms are registered objects: each backend holds a table of algorithm classes in
the vocabulary's order, and an explicit ``method=`` asks only that algorithm."""
from __future__ import annotations

import numpy as np
import pytest

import cupyconv
from cupyconv._vocabulary import ALGORITHMS, OPS
from cupyconv.backends.base import Algorithm
from cupyconv.core.problem import ConvProblem, Operands
from cupyconv.dispatch import backends, dispatcher


def _backends():
    return ["numpy"] + (["emulated"] if "emulated" in cupyconv.available_backends() else [])


@pytest.mark.parametrize("name", _backends())
def test_table_holds_every_algorithm_the_vocabulary_gives_the_backend(name):
    backend = backends.backend_for(np, name)
    served = [n for n, a in ALGORITHMS.items() if any(a.serves(op, backend.name) for op in OPS)]
    assert list(backend.algorithms) == served
    for algorithm_name, entry in backend.algorithms.items():
        assert isinstance(entry, Algorithm) and entry.name == algorithm_name
        assert entry.backend is backend


class _Spy:
    """Counts the questions each algorithm of a backend is asked."""

    def __init__(self, backend, monkeypatch):
        self.asked = {}
        for name, entry in backend.algorithms.items():
            for question in ("can_implement", "workspace", "min_workspace", "predict",
                             "assess"):
                monkeypatch.setattr(entry, question, self._counting(
                    name, getattr(entry, question)))

    def _counting(self, name, method):
        def counted(*args, **kwargs):
            self.asked[name] = self.asked.get(name, 0) + 1
            return method(*args, **kwargs)
        return counted


@pytest.mark.parametrize("name", _backends())
@pytest.mark.parametrize("method", ["direct", "gemm", "fft"])
def test_explicit_method_asks_only_that_algorithm(name, method, monkeypatch, restore_config):
    backend = backends.backend_for(np, name)
    spy = _Spy(backend, monkeypatch)
    x, w = np.ones((1, 2, 9, 8)), np.ones((3, 2, 3, 3))
    dispatcher.clear_cache()
    with cupyconv.use_backend(name):
        y = cupyconv.conv(x, w, padding=1, method=method)
    np.testing.assert_allclose(y[0, 0, 4, 4], 18.0)
    assert set(spy.asked) == {method}


@pytest.mark.parametrize("name", _backends())
def test_auto_asks_the_algorithms_whose_floor_can_win_and_the_rest_when_read(
        name, monkeypatch, restore_config):
    backend = backends.backend_for(np, name)
    spy = _Spy(backend, monkeypatch)
    dispatcher.clear_cache()
    with cupyconv.use_backend(name):
        cupyconv.conv(np.ones((1, 2, 9, 8)), np.ones((3, 2, 3, 3)), padding=1)
    problem = ConvProblem.create(x_shape=(1, 2, 9, 8), w_shape=(3, 2, 3, 3), padding=1)
    choice = dispatcher.choose(backend.prepare(problem, Operands())[0], backend)
    floors = backend.time_floors(problem, list(backend.algorithms))
    unasked = set(backend.algorithms) - set(spy.asked)
    assert choice.algorithm in spy.asked
    assert all(floors[n] > choice.time_of(choice.algorithm) for n in unasked)
    assert set(choice.times) | set(choice.rejected) == set(ALGORITHMS)   # read: all asked
    assert set(spy.asked) == set(backend.algorithms)
