"""Extreme geometry: deciding whether an algorithm applies costs O(rank), whatever the
sizes; a call whose result cannot fit fails at once with our own message.

Each check runs under ``signal.alarm``: an O(size) loop over a dilation of 2**39 (the
Winograd pieces once were one per dilation residue) would take hours, so the alarm
only fires on a regression (no timing is asserted).
"""
from __future__ import annotations

import contextlib
import signal

import numpy as np
import pytest

import cupyconv
from cupyconv._vocabulary import ALGORITHMS, OPS
from cupyconv.core.problem import ConvProblem
from cupyconv.dispatch import backends, dispatcher

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGALRM"), reason="needs SIGALRM")

#: Seconds a bounded step may take on a loaded machine before the alarm says it loops.
BOUND = 10


class Loops(Exception):
    """The alarm fired: the step scales with the sizes."""


@contextlib.contextmanager
def bounded(seconds=BOUND):
    def fire(signum, frame):
        raise Loops(f"still running after {seconds} s")
    previous = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _backends():
    names = ["numpy"] + (["emulated"] if "emulated" in cupyconv.available_backends() else [])
    return names


#: (x_shape, w_shape, geometry): a 2**39 dilation, a 10**6 one over two axes, a 2**40
#: stride over a 2**40-long input (shapes only: no array is made).
EXTREME = [
    ((1, 1, 3), (1, 1, 2), dict(dilation=2**39, padding=2**39)),
    ((1, 2, 5, 4), (2, 2, 3, 3), dict(dilation=10**6, padding=10**6)),
    ((2, 1, 2**40), (1, 1, 3), dict(stride=2**39, dilation=3**20, padding=1)),
]


@pytest.mark.parametrize("backend_name", _backends())
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("case", range(len(EXTREME)))
def test_can_implement_is_bounded_whatever_the_sizes(backend_name, op, case):
    x_shape, w_shape, geo = EXTREME[case]
    problem = ConvProblem.create(x_shape=x_shape, w_shape=w_shape, dtype=np.float64, op=op,
                                 **geo)
    backend = backends.backend_for(np, backend_name)
    asked = 0
    with bounded():
        for name, spec in ALGORITHMS.items():
            if spec.serves(op, backend.name):
                ok, why = backend.can_implement(problem, name)
                assert ok or why
                asked += 1
    assert asked >= 2


@pytest.mark.parametrize("backend_name", _backends())
@pytest.mark.parametrize("method", ["auto", "direct", "implicit_gemm", "gemm", "fft"])
def test_a_result_beyond_memory_fails_at_once_with_our_message(backend_name, method):
    """A 4 TB output (dilation 2**39): ``MemoryError`` naming the bytes, before any
    algorithm is planned, and no advice to raise ``workspace_limit``."""
    with cupyconv.use_backend(backend_name), bounded():
        with pytest.raises(MemoryError, match=r"the result alone needs 4398046511128 bytes") \
                as info:
            cupyconv.conv(np.ones((1, 1, 3)), np.ones((1, 1, 2)), dilation=2**39,
                          padding=2**39, method=method)
    assert "workspace_limit" not in str(info.value)


@pytest.mark.parametrize("backend_name", _backends())
@pytest.mark.parametrize("method", ["auto", "direct"])
def test_a_dilation_of_a_million_runs_without_planning_every_residue(backend_name, method):
    """``dilation=padding=10**6`` on 3 samples: the explicit method is the only one asked,
    ``auto`` declines Winograd by its piece count; the result (tap 0 sees x at offset
    10**6, tap 1 at offset 0) is exact."""
    dispatcher.clear_cache()
    x, w = np.array([[[1.0, 2.0, 3.0]]]), np.array([[[5.0, 7.0]]])
    with cupyconv.use_backend(backend_name), bounded(60):
        y = cupyconv.conv(x, w, dilation=10**6, padding=10**6, method=method)
    want = np.zeros(10**6 + 3)
    want[:3] += 7.0 * x[0, 0]
    want[10**6:] += 5.0 * x[0, 0]
    np.testing.assert_array_equal(y[0, 0], want)


def test_winograd_declines_a_problem_split_into_too_many_pieces():
    problem = ConvProblem.create(x_shape=(1, 1, 3), w_shape=(1, 1, 2), dtype=np.float64,
                                 dilation=10**6, padding=10**6)
    ok, why = backends.backend_for(np).can_implement(problem, "winograd")
    assert not ok and "1000000 Winograd pieces" in why
