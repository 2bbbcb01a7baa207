"""``separable`` is scale-free: a kernel's factors do not depend on its magnitude.

The factoring normalises the kernel by a power of two first (issue 25.2: a separable
7x7 Gaussian times 1e-200 convolved to all zeros, the squared norm having underflowed;
times 1e200 it was refused with "a relative error of inf", the norm having overflowed).
Here kernels that are sums of one to three outer products, scaled by 1e-300 .. 1e300,
run by ``method="separable"`` and by ``auto`` on every backend (NumPy, emulated, a GPU
when present) and are compared with the float64 reference of the unscaled kernel,
scaled: the relative error must be what the unscaled kernel's would be.

Tolerance: :func:`test_separable_cuda.tolerance` (one outer product's passes) times
the number of terms (each term rounds as one outer product, relative to its own size,
and the terms' sizes add up to at most ``CANCELLATION_LIMIT`` times the kernel's), plus
the unit roundoff of the scaling itself.
"""
from __future__ import annotations

from functools import reduce

import numpy as np
import pytest
import scipy.signal
from hypothesis import HealthCheck, event, given, settings, strategies as st

import cupyconv
from cupyconv.backends import separable_factors as sf
from cupyconv.ndimage.filters import gaussian_kernel1d
from helpers import ref_convolve, rel_norm_error, signal_bounds
from test_separable_cuda import tolerance

#: Scales at the ends of float64's range and in between (a kernel's squared norm
#: under- or overflows from about 1e-162 and 1e154).
SCALES = (1e-300, 1e-200, 1e-163, 1e-20, 1.0, 1e20, 1e155, 1e200, 1e300)


def outer(*factors):
    return reduce(np.multiply.outer, factors)


def _check(y, x, kernel, scale, terms, dtype, what):
    """``y`` (the scaled kernel's result) against the unscaled kernel's reference."""
    y = np.asarray(y.get() if hasattr(y, "get") else y)
    ref = ref_convolve(x, kernel, "full")
    bounds = signal_bounds(x, kernel, "full")
    err = rel_norm_error(y.astype(np.complex128) / scale, ref, bounds.abs_conv)
    limit = terms * sf.CANCELLATION_LIMIT * tolerance(dtype, kernel.shape) + 4 * np.finfo(dtype).eps
    assert err <= limit, (what, err, limit)


@pytest.mark.parametrize("scale", SCALES)
def test_gaussian_at_every_scale(any_dev, scale):
    """The issue's case: a 7x7 Gaussian (one outer product) on ones, every scale, by
    ``separable`` and ``auto``; SciPy's direct sum for the reference."""
    g = gaussian_kernel1d(1.5, 0, 3)
    k = outer(g, g)
    x = np.ones((16, 16))
    ref = scipy.signal.convolve(x, k, method="direct")
    for method in ("separable", "auto"):
        with any_dev.scope():
            y = any_dev.to_host(cupyconv.convolve(any_dev.to_dev(x), any_dev.to_dev(k * scale),
                                                  method=method))
        assert np.abs(y).max() > 0, (method, scale)                  # never silent zeros
        np.testing.assert_allclose(y / scale, ref, rtol=1e-13, atol=1e-15, err_msg=method)


def test_factors_are_those_of_the_unscaled_kernel():
    """The factors of ``k * 2**e`` are ``k``'s, rescaled exactly (the exponent spread
    over the axes); zero and non-finite kernels keep their answers."""
    g = gaussian_kernel1d(1.2, 0, 2)
    k = outer(g, g[:4], g[1:])
    base = sf.factor(k, np.float64)[0]
    for e in (-1000, -997, -3, 0, 5, 998):
        factors, err = sf.factor(np.ldexp(k, e), np.float64)
        assert factors is not None and err <= sf.ROUNDOFF_UNITS * np.finfo(np.float64).eps, e
        rebuilt = outer(*[np.ldexp(f, -(e // 3 + (i < e % 3))) for i, f in enumerate(factors)])
        assert np.array_equal(rebuilt, outer(*base)), e             # k's, rescaled exactly
        top = [int(np.frexp(np.abs(f).max())[1]) for f in factors]
        assert max(top) - min(top) <= 2, (e, top)                  # spread over the axes
    zero = sf.factor(np.zeros((3, 3)), np.float64)
    assert zero[1] == 0.0 and all(not f.any() for f in zero[0])
    for bad in (np.inf, np.nan):
        kk = k.copy()
        kk[1, 1, 1] = bad
        assert sf.factor(kk, np.float64)[0] is None and sf.low_rank(kk, np.float64)[0] is None


@st.composite
def scaled_sums(draw):
    """A sum of 1-3 outer products (2-D or 3-D, float64 or complex128), its data, and a
    scale 10**e with e in [-300, 300] (the ends half of the time)."""
    rank = draw(st.integers(2, 3))
    terms = draw(st.integers(1, 3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    # enough taps that ``terms`` outer products still save taps (term_limit)
    ks = [draw(st.integers(7, 8)) for _ in range(2)] if rank == 2 else [
        4, 4, draw(st.integers(3, 4))]
    cplx = draw(st.booleans())

    def factor(n):
        f = rng.uniform(0.5, 1.5, n) * rng.choice((-1.0, 1.0), n)
        return f + 1j * rng.uniform(0.5, 1.5, n) if cplx else f

    kernel = sum(outer(*[factor(n) for n in ks]) for _ in range(terms))
    x = rng.standard_normal(tuple(n + draw(st.integers(0, 4)) for n in ks))
    exponent = draw(st.one_of(st.sampled_from((-300, 300)), st.integers(-300, 300)))
    return x.astype(kernel.dtype), kernel, 10.0 ** exponent, terms


@settings(max_examples=12, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=scaled_sums())
def test_sums_of_outer_products_at_any_scale(any_dev, case):
    x, kernel, scale, terms = case
    dtype = kernel.dtype
    event(f"{terms} term(s), {kernel.ndim}-D, {dtype}")
    found = sf.low_rank(kernel * scale, dtype)[0] if terms > 1 else sf.factor(
        kernel * scale, dtype)[0]
    assert found is not None and (terms == 1 or len(found) <= terms), (terms, scale)
    for method in ("separable", "auto"):
        with any_dev.scope():
            y = cupyconv.convolve(any_dev.to_dev(x), any_dev.to_dev(kernel * scale),
                                  method=method)
        _check(any_dev.to_host(y), x, kernel, scale, terms, dtype, (method, scale, terms))
