"""``cupyconv.ndimage``'s derivative filters against ``scipy.ndimage``: one body, both.

``sobel``, ``prewitt``, ``laplace``, ``gaussian_laplace``, ``gaussian_gradient_magnitude``,
``generic_laplace`` and ``generic_gradient_magnitude`` run through
``test_ndimage.ndimage_dual`` (the same exception type, or arrays of the same shape and
dtype) with drawn shapes, dtypes (integers of every width, complex), every mode (one, or
one per axis), ``cval``, ``axes``, ``output=`` (dtype or array), and compared with
``test_ndimage.assert_agree``:

- integer and bool outputs exactly (the passes are stored into the output's dtype
  between passes, as SciPy; integer taps are exact, float ones sum in SciPy's order on
  the CPU);
- float outputs within ``64 * taps * u * scale`` per term, ``scale`` the product over
  the filtered axes of the taps' ``sum|w|`` times ``max|x|`` (and ``|cval|``), ``u``
  the coarser precision of input and output (float32 is computed in float32 here, in
  double by SciPy); a gradient magnitude's square root within ``sqrt(naxes)`` of that.
  Complex gradient magnitudes compare their squares (the square root's branch cut on
  the negative reals turns a rounding-level difference into a sign).

The CUDA path (the emulated kernels, and CuPy on a GPU) runs the named fixed cases of
:data:`DEVICE_CASES`; the 64-bit integer policy (``cupyconv.config.ndimage_integers``)
has its own tests.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.ndimage as sndi
from hypothesis import given, strategies as st

import cupyconv
from cupyconv import ndimage as cndi
from cupyconv.ndimage.filters import gaussian_kernel1d
from ndimage_strategies import draw_axes, draw_mode
from test_ndimage import (CVALS, assert_agree, images, ndimage_dual, output_arg,
                          outputs)

#: Input dtypes drawn: test_ndimage's, plus the wider integers (exact below 2**53).
DTYPES = ("float64", "float32", "int64", "uint64", "int32", "uint16", "int16", "uint8",
          "bool", "complex128", "complex64")
SIGMAS = (0.6, 1.0, 1.7)


def magnitude(x, cval):
    return max(float(np.abs(x).max()) if x.size else 0.0, abs(cval))


def compare(s, c, scale, taps, what, in_dtype, root_of=1):
    """``assert_agree`` with a gradient magnitude's allowance (``root_of`` terms)."""
    if root_of > 1 and s.dtype.kind == "c":
        s, c, scale = s * s, c * c, 4 * scale * scale * root_of
    elif root_of > 1:
        scale *= math.sqrt(root_of)
    assert_agree(s, c, scale, taps, None, what, in_dtype)


# ------------------------------------------------------------ Sobel, Prewitt
@pytest.mark.parametrize("fn", ["sobel", "prewitt"])
@pytest.mark.parametrize("dtype", DTYPES)
@given(data=st.data())
def test_sobel_prewitt_vs_scipy(fn, dtype, data):
    x, _ = data.draw(images(dtype, max_rank=3))
    nd = x.ndim
    kw = dict(axis=data.draw(st.integers(-nd, nd - 1)), mode=draw_mode(data, nd),
              cval=data.draw(st.sampled_from(CVALS)))
    out = data.draw(outputs(x))
    res = ndimage_dual(lambda m: getattr(m, fn)(x, output=output_arg(out, x), **kw))
    if res is None:
        return
    smooth = 4 if fn == "sobel" else 3
    compare(*res, magnitude(x, kw["cval"]) * 2 * smooth ** (nd - 1), 3 ** nd,
            f"{fn} {x.dtype} {kw} output={out}", x.dtype)


# ------------------------------------------------ Laplace, Gaussian derivatives
@pytest.mark.parametrize("fn", ["laplace", "gaussian_laplace", "gaussian_gradient_magnitude"])
@pytest.mark.parametrize("dtype", DTYPES)
@given(data=st.data())
def test_sums_over_axes_vs_scipy(fn, dtype, data):
    x, _ = data.draw(images(dtype, max_rank=3))
    nd = x.ndim
    axes = draw_axes(data, nd)
    naxes = nd if axes is None else len(axes)
    kw = dict(mode=draw_mode(data, naxes), cval=data.draw(st.sampled_from(CVALS)), axes=axes)
    out = data.draw(outputs(x))
    args, scale, taps = (), magnitude(x, kw["cval"]), 3
    if fn == "laplace":
        scale *= 4
    else:
        per_axis = data.draw(st.booleans())
        # gaussian_gradient_magnitude takes sigma per axis of the input, as SciPy
        n = naxes if fn == "gaussian_laplace" else nd
        sigma = (data.draw(st.lists(st.sampled_from(SIGMAS), min_size=n, max_size=n))
                 if per_axis else data.draw(st.sampled_from(SIGMAS)))
        kw.update(data.draw(st.sampled_from(({}, dict(truncate=2.0), dict(radius=2)))))
        args = (sigma,)
        order = 2 if fn == "gaussian_laplace" else 1
        radius = kw.get("radius", int(kw.get("truncate", 4.0) * 1.7 + 0.5))
        sums = [float(np.abs(gaussian_kernel1d(sd, od, radius)).sum())
                for sd in SIGMAS for od in (0, order)]
        scale *= max(sums) ** nd
        taps = (2 * radius + 1) * nd
    res = ndimage_dual(lambda m: getattr(m, fn)(x, *args, output=output_arg(out, x), **kw))
    if res is None:
        return
    compare(*res, scale * naxes, taps, f"{fn} {x.dtype} {args} {kw} output={out}", x.dtype,
            root_of=naxes if fn.endswith("magnitude") else 1)


@pytest.mark.parametrize("fn", ["generic_laplace", "generic_gradient_magnitude"])
@pytest.mark.parametrize("dtype", ("float64", "int16", "complex128"))
@given(data=st.data())
def test_generic_vs_scipy(fn, dtype, data):
    """A user's derivative with ``extra_arguments``/``extra_keywords``, written against the
    module under test (as SciPy's own tests do); it gets an array ``output``."""
    x, rng = data.draw(images(dtype, max_rank=3))
    nd = x.ndim
    axes = draw_axes(data, nd)
    naxes = nd if axes is None else len(axes)
    taps = rng.integers(-2, 3, 3).astype(np.float64)
    kw = dict(mode=draw_mode(data, naxes), cval=data.draw(st.sampled_from(CVALS)), axes=axes,
              extra_arguments=(taps,),
              extra_keywords=dict(origin=data.draw(st.sampled_from((-1, 0, 1)))))
    out = data.draw(outputs(x))

    def body(m):
        def derivative(input, axis, output, mode, cval, weights, origin=0):
            assert isinstance(output, (np.ndarray, type, np.dtype)), output   # as SciPy's
            return m.correlate1d(input, weights, axis, output, mode, cval, origin)
        return getattr(m, fn)(x, derivative, output_arg(out, x), **kw)

    res = ndimage_dual(body)
    if res is None:
        return
    compare(*res, magnitude(x, kw["cval"]) * 4 * naxes, 3, f"{fn} {x.dtype} {kw}", x.dtype,
            root_of=naxes if fn.endswith("magnitude") else 1)


# ------------------------------------------------------------------ edge cases
#: Named edge cases: each runs on both libraries and must agree (or raise alike).
EDGE_CASES = {
    "0-d sobel (no axis)": lambda m: m.sobel(np.array(3.0)),
    "0-d laplace (no axes: a copy)": lambda m: m.laplace(np.array(3.0)),
    "empty axes: a copy": lambda m: m.laplace(np.arange(6.0).reshape(2, 3), axes=()),
    "empty generic: a copy": lambda m: m.generic_gradient_magnitude(
        np.arange(6).reshape(2, 3), m.sobel, np.float32, axes=()),
    "empty input": lambda m: m.gaussian_laplace(np.zeros((0, 4)), 1.0),
    "1-d sobel": lambda m: m.sobel(np.array([1, 5, 2, 8, 3])),
    "uint8 wraps between passes": lambda m: m.sobel(np.array([[0, 200, 9], [255, 1, 40]],
                                                             np.uint8), axis=0),
    "int8 gradient magnitude truncates": lambda m: m.gaussian_gradient_magnitude(
        np.array([[0, 100, -100], [50, 3, 7]], np.int8), 0.8),
    "bool output": lambda m: m.laplace(np.eye(4), output=bool),
    "float32 output array": lambda m: m.prewitt(np.eye(4), output=np.zeros((4, 4), np.float32)),
    "sigma 0 everywhere: a copy per term": lambda m: m.gaussian_laplace(np.eye(3), 0.0),
    "per-axis sigma with axes": lambda m: m.gaussian_laplace(np.ones((3, 4, 5)), (1.0, 0.5),
                                                              axes=(2, 0)),
    "gradient magnitude sigma per input axis, axes fewer": lambda m:
        m.gaussian_gradient_magnitude(np.eye(4), (1.0, 2.0), axes=(1,)),
    "complex input": lambda m: m.sobel(np.eye(3) * (1 + 2j), mode="wrap"),
    "complex input, real output dtype": lambda m: m.laplace(np.eye(3) + 1j, output=np.float64),
    "real input, complex output": lambda m: m.sobel(np.eye(3), output=np.complex128),
    "axis out of range": lambda m: m.prewitt(np.eye(3), axis=2),
    "modes of the wrong length": lambda m: m.sobel(np.eye(3), mode=["reflect"]),
    "laplace modes per axes": lambda m: m.laplace(np.ones((3, 4)), mode=["wrap"], axes=(1,)),
    "repeated axes": lambda m: m.laplace(np.ones((3, 4)), axes=(1, 1)),
    "unknown mode": lambda m: m.laplace(np.ones(4), mode="circular"),
    "sigma sequence too long": lambda m: m.gaussian_laplace(np.ones((3, 4)), (1, 1, 1)),
    "gradient magnitude sigma per axes, fewer than the input's": lambda m:
        m.gaussian_gradient_magnitude(np.ones((3, 4)), (1.0,), axes=(1,)),
    "gaussian kwargs": lambda m: m.gaussian_gradient_magnitude(np.eye(5), 1.0, radius=1),
    "bad gaussian kwargs": lambda m: m.gaussian_laplace(np.eye(5), 1.0, radius=-1),
    "output of the wrong shape": lambda m: m.sobel(np.eye(3), output=np.zeros((3, 2))),
    "longdouble input": lambda m: m.laplace(np.ones(4, np.longdouble)),
}


@pytest.mark.parametrize("case", list(EDGE_CASES))
def test_edge_cases_vs_scipy(case):
    res = ndimage_dual(EDGE_CASES[case])
    if res is not None:
        np.testing.assert_allclose(res[1], res[0], rtol=1e-12, atol=1e-12, err_msg=case)


#: Values of one pass stored into a bool output, each with SciPy's result (the C cast to
#: an unsigned char on x86-64: the low byte of the value truncated to int32).
BOOL_CASTS = (256.0, 255.0, -1.0, 257.5, -0.5, np.nan, np.inf, -np.inf, 2.0**31 - 1, 2.0**31,
              -2.0**31, -2.0**31 + 1, 2.0**32 + 1, 3.7e9)


@pytest.mark.parametrize("backend_name", ["numpy", "emulated"])
def test_bool_outputs_are_scipys_c_cast(backend_name):
    import platform
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("SciPy's out-of-range casts are x86-64's here (C leaves them undefined)")
    if backend_name not in cupyconv.available_backends():
        pytest.skip(f"backend {backend_name!r} is not available here")
    x = np.ones(3, bool)
    with cupyconv.use_backend(backend_name):
        ours = [bool(cndi.correlate1d(x, [w])[0]) for w in BOOL_CASTS]
    theirs = [bool(sndi.correlate1d(x, [w])[0]) for w in BOOL_CASTS]
    assert ours == theirs, dict(zip(BOOL_CASTS, zip(ours, theirs)))
    assert theirs[:3] == [False, True, True]      # 256 -> False: a byte, not 'nonzero'


@pytest.mark.parametrize("name", cndi.__all__)
def test_signatures_are_scipys(name):
    """Every public function takes SciPy's parameters, names, kinds and defaults (ours
    are annotated, SciPy's are not: the annotations are left out of the comparison)."""
    import inspect

    def untyped(fn):
        sig = inspect.signature(fn)
        return sig.replace(return_annotation=sig.empty, parameters=[
            p.replace(annotation=p.empty) for p in sig.parameters.values()])
    assert untyped(getattr(cndi, name)) == untyped(getattr(sndi, name))


def test_output_array_is_filled_and_returned():
    x = np.arange(20.0).reshape(4, 5)
    for fn in (lambda m, o: m.sobel(x, 0, o), lambda m, o: m.laplace(x, o),
               lambda m, o: m.gaussian_gradient_magnitude(x, 1.0, o)):
        theirs, ours = np.zeros(x.shape, np.float32), np.zeros(x.shape, np.float32)
        assert fn(cndi, ours) is ours
        fn(sndi, theirs)
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-4)
    inplace = x.copy()                   # output is the input: SciPy's sequence, as SciPy
    assert cndi.sobel(inplace, 1, inplace) is inplace
    np.testing.assert_array_equal(inplace, sndi.sobel(x, 1))


def test_docstrings_run():
    import doctest
    from cupyconv.ndimage import derivatives
    result = doctest.testmod(derivatives, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 7 and result.failed == 0


@pytest.mark.parametrize("fn", ["sobel", "prewitt", "laplace"])
@pytest.mark.parametrize("dtype", ["uint8", "int16", "uint16"])
def test_small_integer_derivatives_sum_in_the_engine_as_scipy(fn, dtype, monkeypatch):
    """Integer taps on 8/16-bit data sum exactly in float32, so on the CPU these passes
    run in the engine rather than in ``scipy.ndimage`` (docs/semantics.md), and every
    output (wrapped between the passes, every axis and mode) is SciPy's."""
    from cupyconv.ndimage import common
    calls = []
    real = common._scipy_line
    monkeypatch.setattr(common, "_scipy_line", lambda *a, **k: calls.append(1) or real(*a, **k))
    info = np.iinfo(dtype)
    rng = np.random.default_rng(len(fn) + len(dtype))
    x = rng.integers(max(info.min, -3000), min(info.max, 3000) + 1, (40, 33, 70)).astype(dtype)
    for mode in ("reflect", "constant", "nearest", "mirror", "wrap"):
        for axis in ((0, 1, 2) if fn != "laplace" else (None,)):
            kw = dict(mode=mode, cval=7) if axis is None else dict(axis=axis, mode=mode, cval=7)
            np.testing.assert_array_equal(getattr(cndi, fn)(x, **kw),
                                          getattr(sndi, fn)(x, **kw), err_msg=f"{mode} {axis}")
    assert calls == []


@pytest.mark.parametrize("fn", ["gaussian_laplace", "gaussian_gradient_magnitude"])
@pytest.mark.parametrize("shape", [(30, 41), (12, 13, 14), (5, 6, 7, 4)])
def test_gaussian_sums_share_smoothing_passes_bit_for_bit(fn, shape, monkeypatch):
    """With every axis filtered in one mode, the terms share the input smoothed along
    the axes before theirs (n(n+1)/2 + n - 1 passes instead of n**2), and each term's
    passes are still SciPy's in SciPy's order: float64 and integer outputs are SciPy's
    bit for bit (per-axis sigma, truncate, radius and modes included)."""
    from cupyconv.ndimage import derivatives
    passes = []
    real = derivatives.gaussian_filter1d
    monkeypatch.setattr(derivatives, "gaussian_filter1d",
                        lambda *a, **k: passes.append(1) or real(*a, **k))
    rng = np.random.default_rng(sum(shape))
    n = len(shape)
    x = rng.standard_normal(shape) * 30
    cases = [((1.5,), {}), (([0.7 + 0.4 * i for i in range(n)],), dict(mode="wrap")),
             ((1.0,), dict(truncate=2.0, mode=["nearest"] * n)),
             ((2.0,), dict(radius=[1 + i for i in range(n)], mode="constant", cval=4.0)),
             ((1.2,), dict(output=np.int32, mode="mirror"))]
    for args, kw in cases:
        passes.clear()
        ours, theirs = getattr(cndi, fn)(x, *args, **kw), getattr(sndi, fn)(x, *args, **kw)
        assert ours.dtype == theirs.dtype
        np.testing.assert_array_equal(ours, theirs, err_msg=f"{args} {kw}")
        assert len(passes) == n * (n + 1) // 2 + n - 1, (args, kw)


# ------------------------------------------------------------------ CUDA path
#: (function, dtype, arguments): the derivative filters on the CUDA kernels.
DEVICE_CASES = [
    ("sobel", "float64", dict(axis=0, mode="reflect")),
    ("sobel", "uint8", dict(axis=-1, mode=["nearest", "wrap", "mirror"])),
    ("prewitt", "int32", dict(axis=1, mode="constant", cval=3)),
    ("prewitt", "complex128", dict(axis=2, mode="grid-wrap")),
    ("laplace", "float32", dict(mode="mirror")),
    ("laplace", "int16", dict(mode=["grid-constant", "reflect"], axes=(2, 0), cval=-2)),
    ("gaussian_laplace", "float64", dict(sigma=1.1, mode="nearest")),
    ("gaussian_laplace", "uint8", dict(sigma=(0.8, 1.3), axes=(0, 2), mode="reflect")),
    ("gaussian_gradient_magnitude", "float32", dict(sigma=0.9, mode="grid-mirror")),
    ("gaussian_gradient_magnitude", "int64", dict(sigma=1.0, mode="wrap", axes=(1,))),
]


@pytest.mark.parametrize("fn,dtype,kw", DEVICE_CASES,
                         ids=[f"{f}-{d}-{i}" for i, (f, d, _) in enumerate(DEVICE_CASES)])
def test_device_path_vs_scipy(dev, fn, dtype, kw, monkeypatch):
    """The passes on the CUDA kernels (boundary fused into the gather; never handed to
    SciPy, not even integer lines on the emulated backend): float results within the
    per-term bound (the kernels sum in another order), integer outputs within one per
    pass of SciPy's (a float pass truncated differently at a roundoff tie) and exactly
    for integer taps."""
    from cupyconv.ndimage import common

    def not_here(*a, **k):
        raise AssertionError("a pass on the CUDA path ran scipy.ndimage")
    monkeypatch.setattr(common, "_scipy_line", not_here)
    rng = np.random.default_rng(len(fn) * 7 + len(dtype))
    x = rng.standard_normal((6, 5, 4)) * 20
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(x.shape)
    x = (np.abs(x) if np.dtype(dtype).kind == "u" else x).astype(dtype)
    kw = dict(kw)
    args = (kw.pop("sigma"),) if "sigma" in kw else ()
    ref = getattr(sndi, fn)(x, *args, **kw)
    with dev.scope():
        ours = dev.to_host(getattr(cndi, fn)(dev.to_dev(x), *args, **kw))
    assert ours.dtype == ref.dtype and ours.shape == ref.shape
    if ref.dtype.kind in "iu":
        exact = fn in ("sobel", "prewitt", "laplace")
        diff = np.abs(ours.astype(np.int64) - ref.astype(np.int64))
        assert diff.max() <= (0 if exact else 3), (fn, dtype, kw)
        return
    single = ref.dtype in (np.float32, np.complex64)
    u = 2.0 ** -24 if single else 2.0 ** -53
    scale = float(np.abs(x).max()) * 4 ** 3 * 3
    np.testing.assert_allclose(ours, ref, rtol=0, atol=64 * 27 * u * scale, err_msg=fn)


# ------------------------------------------------------- 64-bit integer policy
BIG = np.array([2**60 + 1, 3, 2**62 + 5, 7, 2**53 + 1], np.uint64)


@pytest.fixture
def exact_integers():
    old = cupyconv.config.ndimage_integers
    cupyconv.config.ndimage_integers = "exact"
    yield
    cupyconv.config.ndimage_integers = old


def exact_correlation(x, taps, dtype):
    """Python-integer reference, ``reflect`` boundary, wrapped into `dtype`."""
    ext = [int(v) for v in x[:1]] + [int(v) for v in x] + [int(v) for v in x[-1:]]
    bits = 8 * np.dtype(dtype).itemsize
    res = [sum(t * ext[i + j] for j, t in enumerate(taps)) % 2**bits for i in range(len(x))]
    return np.array(res, dtype=np.uint64).astype(dtype)


@pytest.mark.parametrize("fn,taps", [("laplace", (1, -2, 1)), ("sobel", (-1, 0, 1))])
def test_64bit_integers_round_as_scipy_by_default(fn, taps):
    """The default (``"scipy"``): past 2**53 the sum runs in float64, as SciPy's, so
    64-bit integer outputs are SciPy's exactly (and not the exact sum)."""
    for x in (BIG, BIG.astype(np.int64)):
        ours, theirs = getattr(cndi, fn)(x), getattr(sndi, fn)(x)
        np.testing.assert_array_equal(ours, theirs)
        assert not np.array_equal(ours, exact_correlation(x, taps, x.dtype))   # it rounded


@pytest.mark.parametrize("fn,taps", [("laplace", (1, -2, 1)), ("sobel", (-1, 0, 1))])
def test_64bit_integers_exact_under_the_switch(exact_integers, fn, taps):
    for x in (BIG, BIG.astype(np.int64)):
        np.testing.assert_array_equal(getattr(cndi, fn)(x), exact_correlation(x, taps, x.dtype))


def test_32bit_data_with_huge_weights_follow_the_policy(exact_integers):
    x = np.array([2**31 - 1, 2**31 - 3, 5], np.int32)
    w = np.array([2**30 + 1, 2**30 - 1, 3])
    exact = cndi.correlate1d(x, w, output=np.int64)
    cupyconv.config.ndimage_integers = "scipy"
    rounded = cndi.correlate1d(x, w, output=np.int64)
    np.testing.assert_array_equal(rounded, sndi.correlate1d(x, w, output=np.int64))
    expect = [sum(int(t) * int(v) for t, v in zip(w, win))
              for win in ([x[0], x[0], x[1]], [x[0], x[1], x[2]], [x[1], x[2], x[2]])]
    np.testing.assert_array_equal(exact, expect)
    assert not np.array_equal(rounded, exact)


def test_integer_policy_value_is_checked():
    """The config refuses an unknown policy on assignment and keeps the one in force."""
    old = cupyconv.config.ndimage_integers
    with pytest.raises(ValueError, match="ndimage_integers"):
        cupyconv.config.ndimage_integers = "exactly"
    assert cupyconv.config.ndimage_integers == old
    np.testing.assert_array_equal(cndi.laplace(BIG), sndi.laplace(BIG))
