"""Cases that previously failed (opt_einsum's "previously failed" list).

Each test names the failing call and what it used to do; the fix is in the
module named in the docstring.  Append new ones at the end.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.signal

import cupyconv
from cupyconv.backends.cuda import CudaBackend
from cupyconv.backends.numpy import NumpyBackend
from helpers import small_ints


def test_regression_1_correlate_axes_per_batch_kernel():
    """``correlate(a, b, axes=1)`` with a (3, 5), b (3, 2) flipped in2 along
    the *batch* axis too, pairing row i of a with row 2-i of b (max error
    4.2).  Fix (_signal.py): flip only the convolved axes."""
    rng = np.random.default_rng(0)
    a = small_ints(rng, (3, 5), np.complex128)
    b = small_ints(rng, (3, 2), np.complex128)
    want = np.stack([scipy.signal.correlate(a[i], b[i], method="direct") for i in range(3)])
    for method in ("direct", "gemm"):         # small integers: exact
        np.testing.assert_array_equal(cupyconv.correlate(a, b, axes=1, method=method), want)
    y = cupyconv.correlate(a, b, axes=1, method="fft")
    np.testing.assert_array_equal(np.round(y), want)   # errors ~1e-15, rows were off by ~10


@pytest.mark.parametrize("s1,s2", [((0, 5), (1, 3)), ((1, 5), (0, 3)), ((0, 5), (0, 3))])
def test_regression_2_empty_batch_axis(s1, s2):
    """``convolve(zeros((0, 5)), ones((1, 3)), axes=1)`` raised numpy's
    "operands could not be broadcast" (batch extent max(0, 1) = 1), and
    (1, 5) * (0, 3) raised "groups must be >= 1, got groups=0".  Fix
    (_signal.py): broadcast 1 against 0 to 0; an empty batch runs as an
    empty shared-kernel batch."""
    for fn in (cupyconv.convolve, cupyconv.correlate):
        y = fn(np.ones(s1), np.ones(s2), axes=1)
        assert y.shape == (0, 7) and y.dtype == np.float64


def test_regression_3_out_checked_before_work(monkeypatch):
    """A wrong ``out=`` was only rejected after the whole convolution had
    run.  Fix (_signal.py, _conv.py; now cupyconv/api/calls.py ``check_out``):
    ``out=`` is checked before dispatch."""
    def forbidden(*a, **k):
        raise AssertionError("work started")
    for backend in (NumpyBackend, CudaBackend):
        monkeypatch.setattr(backend, "run", forbidden)
    with pytest.raises(ValueError, match="out has shape"):
        cupyconv.conv(np.ones((1, 1, 5)), np.ones((1, 1, 2)), out=np.empty((1, 1, 5)))
    with pytest.raises(TypeError, match="out has real dtype"):
        cupyconv.convolve(np.ones(5), np.ones(2) * 1j, out=np.empty(6))


def test_regression_4_lossy_cval_is_an_error():
    """``conv(real x, cval=1+1j)`` silently dropped the imaginary part and
    ``conv(int x, cval=2.5)`` silently padded with 2.  Fix (_conv.py):
    TypeError when cval cannot be represented in the compute dtype."""
    x, w = np.arange(6.0)[None, None], np.ones((1, 1, 3))
    with pytest.raises(TypeError, match=r"cval=\(1\+1j\) is complex but the inputs are real"):
        cupyconv.conv(x, w, padding=1, cval=1 + 1j)
    with pytest.raises(TypeError, match=r"cval=2.5 is not an integer"):
        cupyconv.conv(x.astype(np.int64), w.astype(np.int64), padding=1, cval=2.5)
    # representable values still work, complex cval with complex data too
    y = cupyconv.conv(x.astype(complex), w, padding=1, cval=1 + 1j, method="direct")
    assert y[0, 0, 0] == 1 + 1j + 0 + 1
    assert cupyconv.conv(x.astype(np.int64), w.astype(np.int64), padding=1,
                         cval=2.0)[0, 0, 0] == 3


@pytest.mark.parametrize("cval", [np.nan, np.inf])
def test_regression_5_auto_nonfinite_cval_not_fft(cval):
    """``conv(x, w, padding=1, cval=nan)`` with finite x, w: ``auto`` chose
    FFT, warned, and turned every output into NaN although only the two
    border outputs see the padding.  Fix (_dispatch.py): a non-finite
    constant pad excludes FFT like non-finite data."""
    x, w = np.arange(6.0)[None, None], np.ones((1, 1, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = cupyconv.conv(x, w, padding=1, cval=cval)
    np.testing.assert_array_equal(y[0, 0, 1:-1], [3.0, 6.0, 9.0, 12.0])
    assert not np.isfinite(y[0, 0, [0, -1]]).any()
