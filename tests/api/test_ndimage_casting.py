"""``cupyconv.ndimage``'s output casting against ``scipy.ndimage``: one body, both.

Under ``config.ndimage_integers = "scipy"`` (the default) SciPy's answer is the
contract, so every drawn call (filter, input dtype, output dtype including bool and the
narrow integers, mode, ``cval`` at and past the dtype's range, input values at the
dtype's extremes) runs through ``test_ndimage.ndimage_dual`` and must give:

- integer and bool outputs equal to SciPy's, element for element: SciPy stores each
  pass with the C cast ``(type)double`` (out of range: INT_MIN, or its low bytes for a
  narrower type), and a multi-pass filter's next pass reads the raw byte a bool output
  holds; the filters drawn have integer taps, or (on the NumPy backend only) sum their
  float taps in SciPy's order;
- float outputs within ``64 * taps * u * scale`` (``u`` the coarser of the input's and
  output's precision), as in test_ndimage;
- the sign of a zero where docs/semantics.md promises it.

The emulated CUDA kernels run a smaller share (integer-valued data and integer taps,
exact in any summation order) to keep the suite's time bounded.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.ndimage as sndi
from hypothesis import given, settings, strategies as st

import cupyconv
from cupyconv import ndimage as cndi
from cupyconv.ndimage.common import c_cast
from ndimage_strategies import MODES, draw_dims
from test_ndimage import ndimage_dual

IN_DTYPES = ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
             "float32", "float64")
OUT_DTYPES = ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
              "uint64", "float32", "float64")
#: Filters whose taps are integers: exact in double, so exact in any summation order.
INTEGER_TAPS = ("correlate1d", "correlate", "convolve", "uniform_filter", "sobel", "prewitt",
                "laplace")
FLOAT_TAPS = ("gaussian_filter", "gaussian_laplace", "gaussian_gradient_magnitude")


def cvals(dtype):
    """``cval`` at and past the input dtype's range (and the int32 boundary C cares about;
    64-bit data: the int32 one only, see :func:`extreme_images`)."""
    dtype = np.dtype(dtype)
    info = np.iinfo(dtype) if dtype.kind in "iu" and dtype.itemsize < 8 else np.iinfo(np.int32)
    edge = (int(info.max), int(info.min), int(info.max) + 1, int(info.min) - 1)
    return st.sampled_from(edge + (0.0, -1, 2**31, -2**31 - 1, 2**32 + 5, 1e12, 300.5))


@st.composite
def extreme_images(draw, dtype, integer_valued=False, budget=60):
    """Small arrays whose values include the dtype's extremes, 0 and ±1."""
    dims = draw_dims(draw, 3, 6, budget)
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if dtype == bool:
        return rng.integers(0, 2, dims).astype(bool)
    if dtype.kind in "iu":
        # 64-bit data: values whose double sums are exact (past 2**53 SciPy's rounding
        # depends on its summation order, test_ndimage's subject, not this file's)
        info = np.iinfo(dtype) if dtype.itemsize < 8 else np.iinfo(np.int32)
        pool = [int(info.min), int(info.max), 0, 1, int(info.max) - 1, int(info.min) + 1]
        pool += [int(v) for v in rng.integers(int(info.min), int(info.max) + 1, 8)]
        if dtype.itemsize == 8:
            pool += [2**40, -2**40 if dtype.kind == "i" else 2**41]
        pool = np.array(pool, dtype=np.int64).astype(dtype)
    else:
        pool = np.array([0.0, -0.0, 1.0, -1.0, 2.0**31, -2.0**31, 3e9, -3e9, 1e12, 255.0,
                         256.0, 65536.0], dtype=np.float64)
        if not integer_valued:
            pool = np.concatenate([pool, [300.7, -300.7, 0.5, -2.5]])
    return rng.choice(pool, size=dims).astype(dtype)


def call_of(data, fn, x):
    """``(args, kwargs, taps, weight_sum)`` of a drawn call of ``fn`` on ``x``."""
    nd = x.ndim
    mode = data.draw(st.sampled_from(MODES))
    kw = dict(mode=mode)
    if fn in ("correlate1d", "correlate", "convolve"):
        shape = (data.draw(st.integers(1, 4)),) if fn == "correlate1d" else tuple(
            data.draw(st.integers(1, 3)) for _ in range(nd))
        w = np.random.default_rng(data.draw(st.integers(0, 999))).integers(-2, 3, shape)
        w = w.astype(data.draw(st.sampled_from((np.int64, np.float64))))
        if fn == "correlate1d":
            kw["axis"] = data.draw(st.integers(-nd, nd - 1))
        return (w,), kw, w.size, float(np.abs(w).sum())
    if fn == "uniform_filter":
        # a power of two: SciPy's running sum of integer-valued data is exact then (with
        # another size or fractional data it rounds, and a truncated output may differ
        # by one next to an integer: test_ndimage's subject)
        size = data.draw(st.sampled_from((2, 4)))
        return (size,), kw, size ** nd, 1.0
    if fn in ("sobel", "prewitt"):
        kw["axis"] = data.draw(st.integers(-nd, nd - 1))
        return (), kw, 3 ** nd, 2.0 * 4.0 ** (nd - 1)
    if fn == "laplace":
        return (), kw, 3 * nd, 4.0 * nd
    sigma = data.draw(st.sampled_from((0.5, 0.8)))
    kw["truncate"] = 2.0
    return (sigma,), kw, 5 ** nd * nd, 4.0 * nd


def check_call(data, fn, in_dtype, out_dtype, integer_valued=False):
    x = data.draw(extreme_images(in_dtype, integer_valued or fn == "uniform_filter"))
    a, kw, taps, wsum = call_of(data, fn, x)
    kw["cval"] = data.draw(cvals(in_dtype))
    res = ndimage_dual(lambda m: getattr(m, fn)(x, *a, output=np.dtype(out_dtype), **kw))
    if res is None:
        return
    s, c = res
    what = f"{fn}{a} {x.dtype}->{out_dtype} {kw}"
    assert c.dtype == s.dtype and c.shape == s.shape, what
    if s.dtype.kind in "biu":
        # SciPy's bool output holds the raw byte; ours is canonical: compare truth values
        bad = np.nonzero(s != c)
        assert not bad[0].size, f"{what}: scipy {s[bad][:5]}, ours {c[bad][:5]}\n{x}"
        return
    single = np.dtype(out_dtype) == np.float32 or np.dtype(in_dtype) == np.float32
    u = 2.0 ** -24 if single else 2.0 ** -53
    scale = max(float(np.abs(x.astype(np.float64)).max()), abs(float(kw["cval"]))) * wsum
    np.testing.assert_allclose(c, s, rtol=0, atol=64 * taps * u * max(scale, 1.0),
                               err_msg=what)


@pytest.mark.parametrize("fn", INTEGER_TAPS + FLOAT_TAPS)
@given(data=st.data())
def test_output_casting_matches_scipy(fn, data):
    """NumPy backend: every filter, input and output dtype, mode and extreme ``cval``."""
    check_call(data, fn, data.draw(st.sampled_from(IN_DTYPES)),
               data.draw(st.sampled_from(OUT_DTYPES)))


@pytest.mark.parametrize("fn", ("correlate", "uniform_filter", "sobel", "laplace"))
@settings(max_examples=6)
@given(data=st.data())
def test_output_casting_matches_scipy_on_the_cuda_kernels(fn, data):
    """The emulated CUDA kernels: a bounded share, integer data and integer taps."""
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("the emulated CUDA path is not available here")
    in_dtype = data.draw(st.sampled_from(("bool", "int8", "uint16", "int32", "float64")))
    # a uint64 output stores a negative pass result as 2**63 (SciPy's C cast); the next
    # pass's double sums past 2**53 then round in SciPy's order (its running sum lost
    # 68 + 126 beside 2**63), which the CUDA kernels do not keep: there only the filters
    # whose passes all read the input (laplace adds its terms in the integer output)
    outs = OUT_DTYPES if fn in ("correlate", "laplace") else tuple(
        d for d in OUT_DTYPES if d != "uint64")
    with cupyconv.use_backend("emulated"):
        check_call(data, fn, in_dtype, data.draw(st.sampled_from(outs)), integer_valued=True)


def test_issue_cases_match_scipy():
    """The reported cases: bool outputs of multi-pass filters, out-of-range integers."""
    cases = [
        lambda m: m.uniform_filter(np.array([[0., 5., 4.]]), 2, output=bool),
        lambda m: m.gaussian_filter(np.array([[4, 5], [0, 5]], np.int32), .5, output=bool,
                                    mode="wrap"),
        lambda m: m.gaussian_gradient_magnitude(np.array([[4, 5, 0], [0, 5, 9]], np.int32),
                                                .5, output=bool),
        lambda m: m.laplace(np.array([2**30, -2**30, 2**30], np.int32)),
        lambda m: m.sobel(np.array([-2**31, 5, 0], np.int32)),
        lambda m: m.correlate1d(np.array([-2**31 + 1, 0, 2**31 - 1], np.int32), [1, 0, -1],
                                output=np.uint8),
    ]
    for case in cases:
        s, c = case(sndi), case(cndi)
        assert s.dtype == c.dtype
        np.testing.assert_array_equal(c, s)


@pytest.mark.parametrize("out_dtype", [d for d in OUT_DTYPES if d != "float32"])
def test_c_cast_spelled_out_equals_scipy_store(out_dtype):
    """The device-independent spelling of the C cast (what CuPy arrays run) stores what
    SciPy stores, for values in range, past every integer type's range, and non-finite."""
    values = np.array([0.0, -0.0, 1.5, -1.5, 127.9, 128.0, 255.5, 256.0, 300.7, -300.7,
                       65535.0, 65536.7, -65537.0, 2**31 - 1, 2**31, -2**31, -2**31 - 1,
                       2**32 + 5, 2**32 - 1, -2**32, 2**53, 2**63, -2**63, 2**64, 2**65,
                       -2**65, 1e300, -1e300, np.inf, -np.inf, np.nan], dtype=np.float64)
    scipy_store = sndi.correlate1d(values, [1.0], output=np.dtype(out_dtype))
    with np.errstate(all="ignore"):
        ours = c_cast(values, np.dtype(out_dtype), np, spelled_out=True)
        fast = c_cast(values, np.dtype(out_dtype), np)
    np.testing.assert_array_equal(ours, scipy_store)
    np.testing.assert_array_equal(fast, scipy_store)
    if np.dtype(out_dtype).kind in "iu":      # the exact int64 path: values below 2**53
        exact = np.round(values[np.abs(values) < 2**53]).astype(np.int64)
        np.testing.assert_array_equal(
            c_cast(exact, np.dtype(out_dtype), np),
            sndi.correlate1d(exact.astype(np.float64), [1.0], output=np.dtype(out_dtype)))


def test_signed_zeros_as_documented():
    """The sign of a zero result where docs/semantics.md promises SciPy's: the N-D
    ``correlate``/``convolve`` and the uniform filters give +0.0 (SciPy's sums start from
    +0.0); a one-tap 1-D pass keeps the product's sign, as SciPy's loop."""
    neg = np.full(4, -0.0)
    cases = (lambda m: m.uniform_filter(neg, 3),
             lambda m: m.uniform_filter1d(neg, 2, mode="constant", cval=-0.0),
             lambda m: m.correlate1d(neg, [1.0]),
             lambda m: m.correlate1d(np.full(4, 0.0), [-2.0]),
             lambda m: m.correlate(np.full((2, 3), -0.0), [[3.0]]),
             lambda m: m.correlate(np.full((3, 3), -0.0), np.ones((2, 2)), mode="nearest"),
             lambda m: m.convolve(np.full((3, 4), -0.0), [[1.0, 2.0, 1.0]]))
    for backend in ("numpy", "emulated"):
        if backend not in cupyconv.available_backends():
            continue
        with cupyconv.use_backend(backend):
            for case in cases:
                s, c = case(sndi), case(cndi)
                np.testing.assert_array_equal(np.signbit(c), np.signbit(s), err_msg=backend)
                np.testing.assert_array_equal(c, s)


#: Weights the emulated backend's ``auto`` runs on the direct kernel and as separable
#: passes (positive, so every product with a -0.0 input is -0.0).
ZERO_SUM_WEIGHTS = {"direct": np.arange(1.0, 10.0).reshape(3, 3) ** 2,
                    "separable": np.outer([1.0, 2.0, 1.0], [1.0, 3.0, 1.0])}


@pytest.mark.parametrize("kernel", sorted(ZERO_SUM_WEIGHTS))
def test_cuda_kernels_give_plus_zero_without_a_pass_over_the_result(kernel, monkeypatch,
                                                                    restore_config):
    """The CUDA kernels' sums start from +0.0, so an N-D ``correlate`` of only -0.0
    products is SciPy's +0.0 with no host pass over the result; the CPU tap loop, whose
    sums start from a product, takes that pass."""
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("the emulated CUDA backend is unavailable")
    from cupyconv.ndimage import common
    passes = []
    real = common._plus_zero
    monkeypatch.setattr(common, "_plus_zero", lambda y: passes.append(y.shape) or real(y))
    restore_config.compiled_calls = False
    x, w = np.full((9, 11), -0.0), ZERO_SUM_WEIGHTS[kernel]
    expected = sndi.correlate(x, w)
    for backend, wanted in (("numpy", 1), ("emulated", 0)):
        passes.clear()
        with cupyconv.use_backend(backend):
            y = cndi.correlate(x, w)
        np.testing.assert_array_equal(np.signbit(y), np.signbit(expected), err_msg=backend)
        assert len(passes) == wanted, backend
