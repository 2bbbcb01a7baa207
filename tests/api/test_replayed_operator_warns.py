"""A ``ConvOperator`` warns of NaN or Inf data on every call, replayed calls included.

``matvec`` and ``rmatvec`` replay compiled programs (the operator's own cache); the
data scan that decides the warning of ``fft`` and ``winograd`` is a step of those
programs and is replayed with them (a plan's replay leaves it out: it promised its
problem, and warned on its first call with each key).
"""
from __future__ import annotations

import numpy as np
import pytest

import cupyconv
from cupyconv.api.compiled import CompiledCall, lookup

BACKENDS = [b for b in ("numpy", "emulated") if b in cupyconv.available_backends()]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("method", ["fft", "winograd"])
@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_a_replayed_operator_call_warns_of_non_finite_data(backend, method, value):
    op = cupyconv.ConvOperator(np.ones((3, 3)), (6, 6), method=method)
    v, u = np.ones(op.shape[1]), np.ones(op.shape[0])
    with cupyconv.use_backend(backend):
        clean = op.matvec(v), op.rmatvec(u)
        assert np.array_equal(op.matvec(v), clean[0])         # compiled, no warning
        assert np.array_equal(op.rmatvec(u), clean[1])
        v[4], u[5] = value, value
        for _ in range(3):
            with pytest.warns(RuntimeWarning, match="NAN or inf"):
                op.matvec(v)
            with pytest.warns(RuntimeWarning, match="NAN or inf"):
                op.rmatvec(u)
        if backend == "emulated":              # the warning came from a replay, not the
            assert isinstance(lookup(op.matvec, v), CompiledCall)   # normal path
            assert isinstance(lookup(op.rmatvec, u), CompiledCall)
