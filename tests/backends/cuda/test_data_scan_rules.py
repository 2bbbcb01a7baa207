"""Issue 24: the data rules on the CUDA path read the operands with one scan kernel and
one device-to-host copy (``CudaBackend.scan``), and decide what the host scan decides.

One body per rule runs on the host (the NumPy backend's ``host_scan``) and on the CUDA
path (emulated; CuPy where a GPU is present): the verdicts must be equal, and the
CUDA path's account must be 1 launch, 1 synchronisation, 1 copy per rule asked.
"""
from __future__ import annotations

import numpy as np
import pytest

from cupyconv._kernels import program
from cupyconv.backends import winograd_conv
from cupyconv.backends.cuda import CudaBackend, runners
from cupyconv.core.problem import ConvProblem, Operands
from cupyconv.dispatch import dispatcher

#: (dtype, where a value is planted, the value): every dtype of the fft rule, each
#: non-finite value, the last element, the imaginary part, the integer bound's edges.
LIMIT = 2 ** (np.finfo(np.float64).nmant - 1)
CASES = [(np.float32, None, None), (np.float32, -1, np.nan), (np.float64, 0, np.inf),
         (np.float64, -1, -np.inf), (np.complex64, 5, complex(0, np.inf)),
         (np.complex128, -1, complex(np.nan, 0)), (np.float16, 3, np.inf),
         (np.int64, None, None), (np.int64, -1, np.iinfo(np.int64).min),
         (np.int64, 0, LIMIT // 24), (np.int64, 0, -(-LIMIT // 6))]


def _backend(dev):
    return CudaBackend(runners.runner_for(dev.name))


def _operands(dev, dtype, at, value):
    problem = ConvProblem.create(x_shape=(2, 2, 9), w_shape=(3, 2, 3), dtype=dtype)
    x = np.ones(problem.x_shape, dtype)
    w = np.ones(problem.w_shape, dtype)[:, :, ::-1]            # a view, negative stride
    if at is not None:
        x.reshape(-1)[at] = value
    return problem, Operands(activation=dev.to_dev(x), filter=dev.to_dev(w)), \
        Operands(activation=x, filter=w)


@pytest.mark.parametrize("dtype,at,value", CASES, ids=str)
def test_fft_rule_is_one_scan_and_agrees_with_the_host(dev, dtype, at, value):
    problem, ops, host = _operands(dev, dtype, at, value)
    with program.accounting() as counts:
        got = dispatcher.fft_safe(problem, ops, _backend(dev))
    assert got == dispatcher.fft_safe(problem, host)
    assert (counts["launches"], counts["syncs"], counts["d2h"], counts["h2d"]) == (1, 1, 1, 0)


@pytest.mark.parametrize("dtype,at,value", [c for c in CASES if c[0] != np.int64], ids=str)
def test_winograd_rule_is_one_scan_and_agrees_with_the_host(dev, dtype, at, value):
    problem, ops, host = _operands(dev, dtype, at, value)
    backend = _backend(dev)
    with program.accounting() as counts:
        got = backend.data_ok(problem, "winograd", ops)
    assert got == winograd_conv.data_ok(host)
    assert (counts["launches"], counts["syncs"], counts["d2h"]) == (1, 1, 1)


def test_dtypes_the_kernel_lacks_scan_on_the_host(dev):
    """Mixed dtypes (a narrower integer activation) take the host scan, same verdict."""
    backend = _backend(dev)
    a, b = np.arange(5, dtype=np.int32), np.arange(3, dtype=np.int64)
    got = backend.scan([dev.to_dev(a), dev.to_dev(b)])
    assert got.magnitude == (4, 2) and got.all_finite
