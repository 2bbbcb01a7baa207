"""Exactness, result dtypes, integer promotion, large integers, NaN/Inf.

reliability.md items 13, 14, 19 and tolerance rule (b)1: small integers are
compared bit-exactly; integer oracles are scipy's/numpy's integer direct
paths (exact integer arithmetic, independent of cupyconv).
"""
from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest
import scipy.signal

import cupyconv
from helpers import ref_conv, ref_convolve, small_ints

ALL_METHODS = ("direct", "gemm", "fft", "auto", "implicit_gemm")
TAP_METHODS = ("direct", "gemm", "implicit_gemm")
DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "uint64",
          "float16", "float32", "float64", "complex64", "complex128")


# ------------------------------------------------------------ exact results

@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
@pytest.mark.parametrize("method", TAP_METHODS)
@pytest.mark.parametrize("fn", ["convolve", "correlate"])
def test_small_integers_in_floats_are_exact(fn, method, dtype, rng):
    """K*s**2 = 4*5*3*9 = 540 < 2**24: every partial sum is an exact float."""
    a = small_ints(rng, (6, 7, 5), dtype)
    b = small_ints(rng, (4, 5, 3), dtype)
    for mode in ("full", "same", "valid"):
        y = getattr(cupyconv, fn)(a, b, mode, method=method)
        ref = ref_convolve(a, b, mode, correlate=fn == "correlate", dtype=object)
        np.testing.assert_array_equal(y, ref.astype(dtype))


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32", "int64", "uint64"])
@pytest.mark.parametrize("method", ALL_METHODS)
def test_integer_dtypes_exact_every_method(method, dtype, rng):
    a = small_ints(rng, (9, 6), dtype)
    b = small_ints(rng, (4, 3), dtype)
    want = scipy.signal.convolve(a, b, method="direct")     # integer arithmetic
    np.testing.assert_array_equal(cupyconv.convolve(a, b, method=method), want)
    x = small_ints(rng, (2, 4, 7, 5), dtype)
    w = small_ints(rng, (4, 2, 3, 2), dtype)
    y = cupyconv.conv(x, w, groups=2, padding=1, method=method)
    np.testing.assert_array_equal(y, ref_conv(x, w, groups=2, padding=1, dtype=object)
                                  .astype(dtype))


@pytest.mark.parametrize("method", ALL_METHODS)
def test_int8_wraparound_matches_scipy(method, rng):
    """Large int8 values overflow int8 exactly as scipy's direct path does
    (two's complement, documented in the convolve docstring)."""
    a = rng.integers(-128, 128, size=(40,)).astype(np.int8)
    b = rng.integers(-128, 128, size=(7,)).astype(np.int8)
    want = scipy.signal.convolve(a, b, method="direct")
    got = cupyconv.convolve(a, b, method=method)
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------- result dtype

@pytest.mark.parametrize("d1,d2", list(itertools.combinations_with_replacement(DTYPES, 2)))
def test_result_dtype_independent_of_method(d1, d2, rng):
    """The dtype scipy's direct method returns, for every method (scipy
    test_convolve_method), for convolve and conv alike."""
    a = small_ints(rng, (5,), d1)
    b = small_ints(rng, (3,), d2)
    want = scipy.signal.convolve(a, b, method="direct").dtype
    assert want == np.result_type(a, b)
    for method in ALL_METHODS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            assert cupyconv.convolve(a, b, method=method).dtype == want, method
            assert cupyconv.correlate(b, a, "valid", method=method).dtype == want, method
            assert cupyconv.conv(a[None, None], b[None, None], method=method).dtype == want


@pytest.mark.parametrize("d1,d2,want", [
    ("uint8", "int64", "int64"),
    ("int32", "float32", "float64"),
    ("float16", "float16", "float16"),
    ("bool", "bool", "bool"),
    ("uint64", "uint8", "uint64"),
    ("complex64", "float64", "complex128"),
])
def test_named_result_dtypes(d1, d2, want, rng):
    a, b = small_ints(rng, (4, 3), d1), small_ints(rng, (2, 2), d2)
    for method in ALL_METHODS:
        assert cupyconv.convolve(a, b, method=method).dtype == np.dtype(want)


@pytest.mark.parametrize("method", ALL_METHODS)
def test_bool_is_logical_or_of_ands(method):
    a = np.array([True, False, False, True, False])
    b = np.array([True, True])
    np.testing.assert_array_equal(cupyconv.convolve(a, b, method=method),
                                  scipy.signal.convolve(a, b, method="direct"))


@pytest.mark.parametrize("method", ALL_METHODS)
def test_float16_accumulates_in_float32(method):
    """16 products of 255*255 sum to 1040400 > 65504: float16 overflows to inf
    (not NaN); 2048 + 1 + ... accumulated in float16 would lose the ones."""
    a = np.full(16, 255, np.float16)
    with np.errstate(over="ignore"):            # the overflow is the point
        y = cupyconv.convolve(a, a, "valid", method=method)
    assert y.dtype == np.float16 and np.isposinf(y).all()
    a = np.array([2048] + [1] * 8, np.float16)
    y = cupyconv.convolve(a, np.ones(9, np.float16), "valid", method=method)
    assert y[0] == np.float16(2056)         # float16 running sum would give 2048


# ------------------------------------------------------ integer promotion

@pytest.mark.parametrize("method", ALL_METHODS)
def test_gh_cupy_6047_uint64_with_uint8_no_overflow(method):
    """cupy#6047: uint64 (x) uint8 was accumulated in uint8."""
    a = np.array([2**40, 3, 2**33 + 7, 250], dtype=np.uint64)
    b = np.array([255, 200, 7], dtype=np.uint8)
    want = np.array([sum(int(a[i]) * int(b[k - i]) for i in range(4) if 0 <= k - i < 3)
                     for k in range(6)], dtype=np.uint64)
    got = cupyconv.convolve(a, b, method=method)
    assert got.dtype == np.uint64
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("method", ALL_METHODS)
def test_mixed_small_ints_compute_in_promoted_type(method):
    a = np.array([100, 120, 127], dtype=np.int8)
    b = np.array([300, 1000], dtype=np.int16)
    got = cupyconv.convolve(a, b, method=method)
    assert got.dtype == np.int16
    np.testing.assert_array_equal(got, np.convolve(a.astype(np.int16), b))


# ---------------------------------------------------------- large integers

@pytest.mark.parametrize("n", [10, 20, 50, 51, 52, 53, 54, 60, 62])
def test_choose_conv_method_large_input(n):
    """scipy test_convolve_method_large_input / test_choose_conv_method:
    int64 2**n goes to an exact (non-FFT) path; direct gives 2**(2n) mod 2**64."""
    z = np.array([2**n], dtype=np.int64)
    if n >= 51:
        assert cupyconv.choose_conv_method(z, z) != "fft"
    want = np.array([2**(2 * n)], dtype=object).astype(np.uint64).astype(np.int64) \
        if 2 * n < 64 else np.array([0], dtype=np.int64)
    np.testing.assert_array_equal(cupyconv.convolve(z, z), want)
    np.testing.assert_array_equal(cupyconv.convolve(z, z, method="direct"), want)


#: (4000, 400) rather than (2000, 200): with the CPU's smaller fixed call cost
#: a 2000-point signal runs numpy.convolve's compiled direct loop faster than FFT.
@pytest.mark.parametrize("n,k", [(4000, 400), (4000, 1000)])
def test_auto_stays_exact_across_the_fft_guard(n, k, rng):
    """Sizes where ``auto`` picks FFT for small values: as the values grow
    towards 2**51 the guard must switch to an exact path before FFT rounding
    could go wrong; every result equals numpy's integer convolution."""
    b = rng.integers(-3, 4, k)
    seen = set()
    for e in range(30, 52, 3):
        a = rng.integers(-2**e, 2**e, n)
        seen.add(cupyconv.choose_conv_method(a, b))
        np.testing.assert_array_equal(cupyconv.convolve(a, b), np.convolve(a, b))
    assert "fft" in seen and len(seen) > 1      # the guard was exercised
    big = rng.integers(2**51 - 2**20, 2**51, n)
    assert cupyconv.choose_conv_method(big, b) != "fft"


# ---------------------------------------------------------------- NaN / Inf

def _nonfinite_case(kind):
    x = np.arange(1.0, 43.0).reshape(6, 7)
    w = np.array([[1.0, 0.0], [2.0, -1.0]])
    if kind == "nan_x":
        x[3, 2] = np.nan
    elif kind == "inf_x":
        x[1, 4] = np.inf                  # meets the zero weight: inf*0 = NaN
    elif kind == "nan_w":
        w[1, 1] = np.nan
    elif kind == "inf_both":
        x[5, 3] = -np.inf
        w[0, 0] = np.inf
    return x, w


def _same_nonfinite_pattern(got, want):
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    fin = np.isfinite(want)
    np.testing.assert_array_equal(got[fin], want[fin])   # small integers: exact


@pytest.mark.parametrize("kind", ["nan_x", "inf_x", "nan_w", "inf_both"])
@pytest.mark.parametrize("method", TAP_METHODS + ("auto",))
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
def test_nonfinite_stay_local_like_scipy_direct(kind, method, mode):
    x, w = _nonfinite_case(kind)
    with warnings.catch_warnings(), np.errstate(invalid="ignore"):
        # auto must not take the FFT path (which warns)
        warnings.filterwarnings("error", message="Use of fft convolution")
        got = cupyconv.convolve(x, w, mode, method=method)
    _same_nonfinite_pattern(got, scipy.signal.convolve(x, w, mode, method="direct"))
    if kind.endswith("_x"):
        assert np.isfinite(got).any()
    # (a non-finite *weight* meets the zero padding at every output: 0*NaN is
    # NaN in scipy's direct path too, and the pattern check above pins that)


@pytest.mark.parametrize("kind", ["nan_x", "inf_x", "nan_w"])
@pytest.mark.parametrize("method", TAP_METHODS + ("auto",))
def test_conv_nonfinite_local(kind, method):
    x, w = _nonfinite_case(kind)
    x4 = np.stack([x, 2 * x])[None]                       # (1, 2, 3, 4)
    w4 = np.stack([np.stack([w, w]), np.stack([w, 0 * w])])  # (2, 2, 2, 2)
    with warnings.catch_warnings(), np.errstate(invalid="ignore"):
        warnings.filterwarnings("error", message="Use of fft convolution")
        got = cupyconv.conv(x4, w4, padding=1, method=method)
        _same_nonfinite_pattern(got, ref_conv(x4, w4, padding=1))


@pytest.mark.parametrize("val", [np.nan, np.inf])
def test_fft_nan_spreads_and_warns(val):
    """scipy test_fft_nan: the FFT path warns and poisons every output."""
    rng = np.random.default_rng(43876432987)
    sig = rng.standard_normal(1000)
    sig[100] = val
    coeffs = scipy.signal.firwin(200, 0.2)
    with pytest.warns(RuntimeWarning, match="Use of fft convolution"), \
            np.errstate(invalid="ignore"):
        y = cupyconv.convolve(sig, coeffs, mode="same", method="fft")
    assert not np.isfinite(y).any()
    with pytest.warns(RuntimeWarning, match="Use of fft convolution"), \
            np.errstate(invalid="ignore"):
        cupyconv.conv(sig[None, None], coeffs[None, None], method="fft")


def test_auto_never_picks_fft_for_nonfinite():
    """A size ``auto`` sends to FFT when finite goes elsewhere with NaN/Inf."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(4000), rng.standard_normal(400)
    assert cupyconv.choose_conv_method(a, b) == "fft"
    for val in (np.nan, np.inf, -np.inf):
        bad = a.copy()
        bad[2000] = val
        assert cupyconv.choose_conv_method(bad, b) != "fft"
        assert cupyconv.choose_conv_method(b, bad) != "fft"
        with warnings.catch_warnings(), np.errstate(invalid="ignore"):
            warnings.filterwarnings("error", message="Use of fft convolution")
            y = cupyconv.convolve(bad, b)
        # exactly the b.size outputs that see the bad sample are non-finite
        nonfinite = ~np.isfinite(y)
        assert nonfinite.sum() == b.size
        np.testing.assert_array_equal(
            nonfinite, ~np.isfinite(scipy.signal.convolve(bad, b, method="direct")))
