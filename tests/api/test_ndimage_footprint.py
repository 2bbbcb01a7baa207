"""``ndimage.correlate``/``convolve`` leave out the taps SciPy leaves out.

SciPy's N-D correlation sums only the taps whose weight is above ``DBL_EPSILON`` in
magnitude (a zero, ``1e-20`` and a NaN weight add nothing, not even ``0 * inf``).  One
body per case, both libraries, on the NumPy and the emulated backends: the same NaN and
signed-infinity outputs, finite values within ``K * u * max|x| * sum|w|`` (summation
order; ``u`` of the output's dtype) and a repeated call (a compiled replay) with other weights.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.ndimage as sndi

import cupyconv
from cupyconv import ndimage as cndi

LAPLACE = np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]])


def _planted(shape, dtype=np.float64, values=(np.nan, np.inf, -np.inf)):
    """Random data with the non-finite ``values`` planted at fixed places."""
    x = np.random.default_rng(5).standard_normal(shape)
    flat = x.reshape(-1)
    for i, v in enumerate(values):
        flat[(7 * i + 3) % flat.size] = v
    return x.astype(dtype)


#: id -> (input, weights, keywords): every way a tap is left out.
CASES = {
    "zero taps, NaN and infinities": (_planted((6, 7)), LAPLACE, {}),
    "zero taps, constant border": (_planted((6, 7)), LAPLACE, dict(mode="constant")),
    "zero taps, NaN border": (np.ones((5, 5)), LAPLACE, dict(mode="constant", cval=np.nan)),
    "integer weights with zeros": (_planted((6, 7)), LAPLACE.astype(np.int64), {}),
    "a NaN weight": (_planted((9,), values=()), np.array([np.nan, 1.0, 2.0]), {}),
    "a NaN weight and non-finite data": (_planted((9,)), np.array([1.0, np.nan, 2.0]), {}),
    "tiny weights on huge data": (np.array([0.0, 0.0, 1e30, 0.0, 0.0, 3.0]),
                                  np.array([1e-20, 1.0, 2.2e-16, 3.0]), dict(mode="wrap")),
    "DBL_EPSILON itself": (np.array([1e20, 1.0, -2.0, 5.0]),
                           np.array([np.finfo(np.float64).eps, 1.0]), {}),
    "one zero tap": (_planted((3, 4)), np.zeros((1, 1)), {}),
    "every tap left out": (_planted((4, 4)), np.full((2, 2), 1e-18), {}),
    "float32 data": (_planted((5, 6), np.float32), LAPLACE.astype(np.float32), {}),
    "complex weights, one part tiny": (np.array([0, 0, 1e20, 0, 0], complex),
                                       np.array([1e-20 + 1j, 1 + 1e-20j, np.nan + 2j]), {}),
    "3-D, origin": (_planted((4, 5, 3)), np.pad(np.ones((1, 2, 1)), 1), dict(origin=1)),
}
BACKENDS = ["numpy", pytest.param("emulated", marks=pytest.mark.skipif(
    "emulated" not in cupyconv.available_backends(), reason="CUDA emulation unavailable"))]


def _assert_like_scipy(got, want, x, w):
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg="NaN pattern")
    for sign in (1, -1):
        np.testing.assert_array_equal(got == sign * np.inf, want == sign * np.inf,
                                      err_msg=f"{sign:+d} Inf pattern")
    finite = np.isfinite(want)
    scale = (np.abs(np.where(np.isfinite(x), x, 0)).max()
             * np.abs(np.where(np.isfinite(w), w, 0)).sum())
    eps = np.finfo(want.dtype).eps        # the output's roundoff (float32 data: float32)
    np.testing.assert_allclose(got[finite], want[finite], rtol=0,
                               atol=w.size * eps * max(scale, 1.0))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")     # SciPy's inputs hold inf - inf
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["correlate", "convolve"])
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_left_out_taps_add_nothing(backend, name, case):
    x, w, kw = CASES[case]
    ours, theirs = getattr(cndi, name), getattr(sndi, name)
    with cupyconv.use_backend(backend):
        for weights in (w, np.roll(w, 1)):      # the second call replays with other weights
            _assert_like_scipy(ours(x, weights, **kw), theirs(x, weights, **kw), x, weights)
