"""``cupyconv.ndimage`` against ``scipy.ndimage``: one test body, both libraries.

Every property test draws a call (shapes, dtypes, every boundary mode including the
``grid-*`` ones, origins at both bounds, ``axes``, ``output`` as dtype or array, per-axis
sequences where SciPy takes them) and runs it through :func:`ndimage_dual`: both
libraries must raise the same exception type, or both return arrays of the same shape
and dtype whose values agree:

- integer and bool outputs exactly where the kernel is integer-valued (computed exactly
  in int64); for float kernels on the NumPy backend too (the 1-D passes and the tap
  loop sum in SciPy's order), except where the float64 value is within roundoff of an
  integer (the only place truncation can tell two summation orders apart);
- float outputs within ``64 * K * u * max|x| * sum|w|`` (``u`` of the output's
  precision; the FFT and float32 accumulation stay far inside it).

The emulated CUDA path (the GPU kernels on the CPU) runs a fixed subset.
"""
from __future__ import annotations

import doctest
import math
import warnings

import numpy as np
import pytest
import scipy.ndimage as sndi
from hypothesis import event, given, strategies as st

import cupyconv
from cupyconv import ndimage as cndi
from cupyconv._vocabulary import NDIMAGE_MODES
from ndimage_strategies import draw_dims

MODES = tuple(NDIMAGE_MODES)
IN_DTYPES = ("float64", "float32", "int32", "int16", "uint8", "bool", "complex128",
             "complex64")
#: ``output=`` choices for a real and for a complex result (one of each that SciPy refuses).
OUT_CHOICES = (None, "float64", "float32", "int32", "uint8", "int16", "array", "complex128")
COMPLEX_OUT_CHOICES = (None, "complex128", "complex64", "array", "float64")
CVALS = (0.0, 1.5, -2.0)


class BothRaised(Exception):
    """Both libraries raised the same exception type."""


def ndimage_dual(body):
    """Run ``body(module)`` with scipy.ndimage and cupyconv.ndimage; ``(scipy, ours)`` or
    ``None`` when both raised the same exception type."""
    results = {}
    for name, mod in (("scipy", sndi), ("cupyconv", cndi)):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)   # "promoting ... to complex"
                results[name] = body(mod)
        except (ValueError, RuntimeError, TypeError, np.exceptions.AxisError,
                np.exceptions.ComplexWarning) as exc:      # the last: an error in this suite
            results[name] = exc
    s, c = results["scipy"], results["cupyconv"]
    if isinstance(s, Exception) or isinstance(c, Exception):
        assert type(s) is type(c), f"scipy gave {s!r}, cupyconv gave {c!r}"
        _event(f"both raised {type(s).__name__}")
        return None
    _event(f"compared {s.dtype.kind}")
    return s, c


def _event(text):
    try:
        event(text)
    except Exception:  # noqa: BLE001 - outside a hypothesis test (the fixed cases)
        pass


def assert_agree(s, c, scale, taps, float_ref=None, what="", in_dtype=None):
    """``c`` (ours) against ``s`` (SciPy); ``scale`` = max|x| * sum|w| (and |cval|).

    Float tolerance: ``u`` of the coarser of the output's and the input's precision
    (SciPy rounds complex64 inputs' partial products to float32 on the way)."""
    assert type(c) is type(s) and c.shape == s.shape and c.dtype == s.dtype, (
        what, c.shape, s.shape, c.dtype, s.dtype)
    if s.dtype.kind in "biu":
        bad = s != c
        if not bad.any():
            return
        assert float_ref is not None, f"{what}: {bad.sum()} integer outputs differ"
        _event("integer outputs differ only at integer boundaries")
        f = float_ref[bad]
        near = np.abs(f - np.round(f)) <= 1e-9 * np.maximum(1.0, np.abs(f))
        assert near.all(), (f"{what}: integer outputs differ away from an integer boundary: "
                            f"scipy {s[bad][~near][:5]}, ours {c[bad][~near][:5]}, "
                            f"exact {f[~near][:5]}")
        bits = 8 * s.dtype.itemsize
        diff = (s[bad].astype(np.int64) - c[bad].astype(np.int64)) % (2 ** min(bits, 63))
        assert np.isin(diff, (1, 2 ** min(bits, 63) - 1)).all() or s.dtype == bool, what
        return
    single = (np.float32, np.complex64, np.float16)
    u = 2.0 ** -24 if s.dtype in single or in_dtype in single else 2.0 ** -53
    tol = 64 * max(taps, 1) * u * max(scale, 1e-300)
    np.testing.assert_allclose(c, s, rtol=0, atol=tol, err_msg=what)


# ------------------------------------------------------------------ strategies
@st.composite
def images(draw, dtype, max_rank=4, budget=240):
    dims = draw_dims(draw, max_rank, 9, budget)
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if dtype == bool:
        x = rng.integers(0, 2, dims).astype(bool)
    elif dtype.kind in "iu":
        lo = 0 if dtype.kind == "u" else -40
        x = rng.integers(lo, 40, dims).astype(dtype)
    else:
        x = rng.standard_normal(dims) * 10
        if dtype.kind == "c":
            x = x + 1j * rng.standard_normal(dims)
        x = x.astype(dtype)
    return x, rng


def kernel(rng, shape, kind):
    if kind == "int":
        return rng.integers(-3, 4, shape).astype(np.int64)
    if kind == "dyadic":            # exact float sums: integer outputs must agree exactly
        return rng.integers(-4, 5, shape) / 4.0
    w = rng.standard_normal(shape)
    return w + 1j * rng.standard_normal(shape) if kind == "complex" else w


def origin_for(draw, k):
    """An origin inside SciPy's bounds, the bounds themselves half of the time."""
    lo, hi = -(k // 2), (k - 1) // 2
    return draw(st.one_of(st.sampled_from((lo, hi)), st.integers(lo, hi)))


def outputs(x, w=None):
    cplx = x.dtype.kind == "c" or (w is not None and np.asarray(w).dtype.kind == "c")
    return st.sampled_from(COMPLEX_OUT_CHOICES if cplx else OUT_CHOICES)


def output_arg(choice, x, w=None):
    if choice == "array":
        cplx = x.dtype.kind == "c" or (w is not None and np.asarray(w).dtype.kind == "c")
        dtype = np.complex128 if cplx else np.float32
        return np.full(x.shape, 7, dtype=dtype)
    return choice


def scale_of(x, w, cval):
    return (max(float(np.abs(x).max()) if x.size else 0.0, abs(cval))
            * float(np.abs(np.asarray(w, dtype=np.complex128)).sum()))


def float_reference(fn, x, *a, **kw):
    """SciPy's result in float64 (the value before any truncation)."""
    if x.dtype.kind == "c":
        return None
    kw = dict(kw, output=np.float64)
    return fn(x, *a, **kw)


# ------------------------------------------------------------------ N-D filters
@pytest.mark.parametrize("fn", ["correlate", "convolve"])
@pytest.mark.parametrize("dtype", IN_DTYPES)
@given(data=st.data())
def test_correlate_convolve_vs_scipy(fn, dtype, data):
    x, rng = data.draw(images(dtype))
    nd = x.ndim
    use_axes = data.draw(st.booleans()) and nd > 1
    if use_axes:
        axes = data.draw(st.permutations(range(nd)).map(
            lambda p: p[:max(1, len(p) - 1)]))
        axes = tuple(a - nd if i % 2 else a for i, a in enumerate(axes))   # negative too
    else:
        axes = None
    naxes = nd if axes is None else len(axes)
    wshape = tuple(data.draw(st.integers(1, 5)) for _ in range(naxes))
    kind = data.draw(st.sampled_from(("float", "int", "dyadic", "complex")))
    w = kernel(rng, wshape, kind)
    mode = data.draw(st.sampled_from(MODES))
    cval = data.draw(st.sampled_from(CVALS))
    per_axis = data.draw(st.booleans())
    origin = ([origin_for(data.draw, k) for k in wshape] if per_axis
              else origin_for(data.draw, min(wshape)))
    out = data.draw(outputs(x, w))
    kw = dict(mode=mode, cval=cval, origin=origin, axes=axes)

    res = ndimage_dual(lambda m: getattr(m, fn)(x, w, output_arg(out, x, w), **kw))
    if res is None:
        return
    s, c = res
    ref = None
    if s.dtype.kind in "biu" and w.dtype.kind != "c":
        ref = float_reference(getattr(sndi, fn), x, w, **kw)
    assert_agree(s, c, scale_of(x, w, cval), w.size, ref, f"{fn} {x.dtype} {kw}", x.dtype)


@pytest.mark.parametrize("fn", ["correlate1d", "convolve1d"])
@pytest.mark.parametrize("dtype", IN_DTYPES)
@given(data=st.data())
def test_1d_vs_scipy(fn, dtype, data):
    x, rng = data.draw(images(dtype))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    k = data.draw(st.integers(1, 11))
    kind = data.draw(st.sampled_from(("float", "int", "dyadic", "complex", "symmetric")))
    w = kernel(rng, k, "float" if kind == "symmetric" else kind)
    if kind == "symmetric":
        w = w + w[::-1]
    mode = data.draw(st.sampled_from(MODES))
    cval = data.draw(st.sampled_from(CVALS))
    out = data.draw(outputs(x, w))
    kw = dict(axis=axis, mode=mode, cval=cval, origin=origin_for(data.draw, k))
    res = ndimage_dual(lambda m: getattr(m, fn)(x, w, output=output_arg(out, x, w), **kw))
    if res is None:
        return
    s, c = res
    ref = float_reference(getattr(sndi, fn), x, w, **kw) if w.dtype.kind != "c" else None
    assert_agree(s, c, scale_of(x, w, cval), k, ref, f"{fn} {x.dtype} k={k} {kw}", x.dtype)


@pytest.mark.parametrize("dtype", IN_DTYPES)
@given(data=st.data())
def test_gaussian_vs_scipy(dtype, data):
    x, rng = data.draw(images(dtype, max_rank=3))
    nd = x.ndim
    one_d = data.draw(st.booleans())
    mode = (data.draw(st.lists(st.sampled_from(MODES), min_size=nd, max_size=nd))
            if not one_d and data.draw(st.booleans()) else data.draw(st.sampled_from(MODES)))
    sigma = data.draw(st.one_of(st.sampled_from((0.0, 0.5, 1.0, 1.7)),
                                st.lists(st.sampled_from((0.0, 0.8, 1.3)), min_size=nd,
                                         max_size=nd)))
    order = data.draw(st.sampled_from((0, 1, 2)))
    truncate = data.draw(st.sampled_from((4.0, 2.0, 1.0)))
    radius = data.draw(st.sampled_from((None, 0, 2)))
    cval = data.draw(st.sampled_from(CVALS))
    out = data.draw(outputs(x))
    if one_d:
        sigma = sigma[0] if isinstance(sigma, list) else sigma
        sigma = sigma or 0.9
        axis = data.draw(st.integers(-nd, nd - 1))
        kw = dict(axis=axis, order=order, mode=mode, cval=cval, truncate=truncate,
                  radius=radius)
        fn = "gaussian_filter1d"
    else:
        axes = data.draw(st.sampled_from((None, (0,), (-1, 0))))
        if axes is not None and isinstance(sigma, list):
            sigma = sigma[:len(axes)]
            mode = mode[:len(axes)] if isinstance(mode, list) else mode
        kw = dict(order=order, mode=mode, cval=cval, truncate=truncate, radius=radius,
                  axes=axes)
        fn = "gaussian_filter"

    res = ndimage_dual(lambda m: getattr(m, fn)(x, sigma, output=output_arg(out, x), **kw))
    if res is None:
        return
    s, c = res
    ref = float_reference(getattr(sndi, fn), x, sigma, **kw)
    if ref is not None and s.dtype.kind in "biu" and not one_d:
        ref = None if nd > 1 else ref      # passes truncate in between: compare per pass
    taps = 2 * (radius if radius is not None else int(truncate * 1.7 + 0.5)) + 1
    scale = max(float(np.abs(x).max()), abs(cval)) * 4.0 ** order * 3
    assert_agree(s, c, scale, taps * nd, ref, f"{fn} {x.dtype} sigma={sigma} {kw}",
                 x.dtype)


@pytest.mark.parametrize("dtype", IN_DTYPES)
@given(data=st.data())
def test_uniform_vs_scipy(dtype, data):
    x, rng = data.draw(images(dtype, max_rank=3))
    nd = x.ndim
    one_d = data.draw(st.booleans())
    cval = data.draw(st.sampled_from(CVALS))
    out = data.draw(outputs(x))
    if one_d:
        size = data.draw(st.integers(1, 7))
        kw = dict(axis=data.draw(st.integers(-nd, nd - 1)), mode=data.draw(st.sampled_from(MODES)),
                  cval=cval, origin=origin_for(data.draw, size))
        fn = "uniform_filter1d"
        taps = size
    else:
        sizes = data.draw(st.lists(st.integers(1, 6), min_size=nd, max_size=nd))
        per_axis = data.draw(st.booleans())
        size = sizes if per_axis else sizes[0]
        origin = ([origin_for(data.draw, s) for s in sizes] if per_axis
                  else origin_for(data.draw, sizes[0]))
        mode = (data.draw(st.lists(st.sampled_from(MODES), min_size=nd, max_size=nd))
                if per_axis else data.draw(st.sampled_from(MODES)))
        kw = dict(mode=mode, cval=cval, origin=origin)
        fn = "uniform_filter"
        taps = math.prod(sizes)
    res = ndimage_dual(lambda m: getattr(m, fn)(x, size, output=output_arg(out, x), **kw))
    if res is None:
        return
    s, c = res
    ref = float_reference(getattr(sndi, fn), x, size, **kw) if one_d else None
    scale = max(float(np.abs(x).max()), abs(cval))
    assert_agree(s, c, scale, taps, ref, f"{fn} {x.dtype} size={size} {kw}", x.dtype)


# ------------------------------------------------------------------ fixed cases
def test_mode_table_matches_scipy():
    """docs/semantics.md's table: each ndimage mode pads as the engine mode it maps to,
    including pads wider than the axis (repeated reflections, several periods)."""
    rng = np.random.default_rng(1)
    for n in (1, 2, 3, 5):
        for k in (1, 2, 4, 7, 12):
            for origin in range(-(k // 2), (k - 1) // 2 + 1):
                x, w = rng.standard_normal(n), rng.standard_normal(k)
                pb = k // 2 + origin
                for mode, engine in NDIMAGE_MODES.items():
                    extra = dict(constant_values=2.5) if engine == "constant" else {}
                    xp = np.pad(x, (pb, k - 1 - pb), mode=engine, **extra)
                    ref = np.array([xp[i:i + k] @ w for i in range(n)])
                    np.testing.assert_allclose(
                        sndi.correlate1d(x, w, mode=mode, cval=2.5, origin=origin), ref,
                        rtol=1e-12, atol=1e-12, err_msg=f"{mode} n={n} k={k}")
                    np.testing.assert_allclose(
                        cndi.correlate1d(x, w, mode=mode, cval=2.5, origin=origin), ref,
                        rtol=1e-12, atol=1e-12, err_msg=f"{mode} n={n} k={k}")


def test_scipy_docstring_examples_bitwise():
    """SciPy's own examples, integer outputs included, give SciPy's printed arrays."""
    a = np.arange(50, step=2).reshape((5, 5))
    np.testing.assert_array_equal(cndi.gaussian_filter(a, sigma=1), sndi.gaussian_filter(a, 1))
    b = np.array([[1, 2, 0, 0], [5, 3, 0, 4], [0, 0, 0, 7], [9, 3, 0, 0]])
    k = np.array([[1, 1, 1], [1, 1, 0], [1, 0, 0]])
    for mode in MODES:
        np.testing.assert_array_equal(cndi.convolve(b, k, mode=mode, cval=1),
                                      sndi.convolve(b, k, mode=mode, cval=1))
    c = np.array([2, 8, 0, 4, 1, 9, 9, 0])
    np.testing.assert_array_equal(cndi.uniform_filter1d(c, size=3), [4, 3, 4, 1, 4, 6, 6, 3])
    np.testing.assert_array_equal(cndi.correlate1d(c, [1, 3]), [8, 26, 8, 12, 7, 28, 36, 9])
    np.testing.assert_array_equal(cndi.convolve1d(c, [1, 3]), [14, 24, 4, 13, 12, 36, 27, 0])
    rng = np.random.default_rng(5)
    img = rng.integers(0, 256, (40, 37)).astype(np.uint8)
    for sigma in (0.7, 1.0, 2.5):
        np.testing.assert_array_equal(cndi.gaussian_filter(img, sigma),
                                      sndi.gaussian_filter(img, sigma))
    np.testing.assert_array_equal(cndi.uniform_filter(img, 5), sndi.uniform_filter(img, 5))


def test_docstrings_run():
    from cupyconv.ndimage import filters
    result = doctest.testmod(filters, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 8 and result.failed == 0


def test_output_semantics():
    x = np.arange(12.0).reshape(3, 4)
    w = np.ones((3, 1))
    out = np.empty((3, 4), np.float32)
    assert cndi.correlate(x, w, out) is out                  # the array passed is returned
    np.testing.assert_allclose(out, sndi.correlate(x, w))
    inplace = x.copy()                                       # output may be the input
    assert cndi.correlate(inplace, w, inplace) is inplace
    np.testing.assert_array_equal(inplace, sndi.correlate(x, w))
    assert cndi.correlate(x, w, np.int16).dtype == np.int16
    assert cndi.correlate(x.astype(np.float32), w).dtype == np.float32
    assert cndi.correlate(x.astype(np.float32), 1j * w).dtype == np.complex64   # input's rule
    with pytest.warns(UserWarning, match="promoting"):
        assert cndi.correlate(x + 0j, w, np.float64).dtype == np.complex128
    assert cndi.gaussian_filter(np.zeros((0, 3)), 1).shape == (0, 3)
    assert cndi.correlate(np.array(5.0), np.array(2.0)) == 10.0             # 0-d
    assert cndi.uniform_filter(np.arange(5), size=1).tolist() == [0, 1, 2, 3, 4]
    # float16 is an extension (SciPy rejects it): computed in float32
    h = cndi.gaussian_filter(np.linspace(0, 1, 9, dtype=np.float16), 1)
    assert h.dtype == np.float16
    np.testing.assert_allclose(h, sndi.gaussian_filter(np.linspace(0, 1, 9), 1), atol=2e-3)


@pytest.mark.parametrize("call", [
    lambda m: m.correlate(np.ones(3), np.ones(2), mode="foo"),
    lambda m: m.correlate(np.ones(3), np.ones(2), mode=["reflect"]),
    lambda m: m.correlate(np.ones(3), np.ones((2, 2))),
    lambda m: m.correlate(np.ones(3), np.ones(2), origin=(0, 0)),
    lambda m: m.correlate(np.ones(3), np.ones(2), origin=1),
    lambda m: m.convolve(np.ones(3), np.ones(2), origin=1),
    lambda m: m.correlate(np.ones(3), np.ones(2), origin=0.5),
    lambda m: m.correlate(np.ones(3), np.ones(2), cval=1j, mode="constant"),
    lambda m: m.correlate(np.ones(3), 1j * np.ones(2), cval=1j),
    lambda m: m.correlate(np.ones(3, np.longdouble), np.ones(2)),
    lambda m: m.correlate(np.ones(3) + 0j, np.ones(2), output="float64"),
    lambda m: m.correlate(np.ones(3) + 0j, np.ones(2), output=np.zeros(3)),
    lambda m: m.correlate(np.ones(3), np.ones(2), output=np.zeros(4)),
    lambda m: m.correlate(np.ones(3), np.ones(2), output="U3"),
    lambda m: m.correlate(np.ones((3, 3)), np.ones(2), axes=(2,)),
    lambda m: m.correlate(np.ones((3, 3)), np.ones((0, 2))),
    lambda m: m.correlate1d(np.ones((3, 3)), np.ones(2), axis=2),
    lambda m: m.correlate1d(np.ones((3, 3)), np.ones((2, 1))),
    lambda m: m.correlate1d(np.ones((3, 3)), np.ones(0)),
    lambda m: m.correlate1d(np.array(5.0), [2.0]),
    lambda m: m.uniform_filter1d(np.arange(5), size=0),
    lambda m: m.uniform_filter1d(np.arange(5), size=2.0),
    lambda m: m.uniform_filter1d(np.arange(5), size=3, origin=2),
    lambda m: m.uniform_filter(np.arange(5), size=(3, 3)),
    lambda m: m.gaussian_filter1d(np.arange(5.0), sigma=1, radius=-1),
    lambda m: m.gaussian_filter1d(np.arange(5.0), sigma=1, order=-1),
    lambda m: m.gaussian_filter(np.arange(5.0), sigma=1, axes=(0, 0)),
    lambda m: m.gaussian_filter(np.ones((3, 3)), sigma=1, axes=(0, 2)),
])
def test_errors_match_scipy(call):
    """Bad arguments raise the exception type SciPy raises (code catching it still works)."""
    assert ndimage_dual(call) is None


#: SciPy parity on degenerate input (issue 25, item 7): ``None`` weights are SciPy's 0-d
#: array (a RuntimeError, not an AttributeError), and SciPy's N-D correlate of an empty
#: input returns before it checks the dtypes (an empty complex array from uint8 data).
DEGENERATE_CASES = {
    "correlate-None": lambda m: m.correlate(np.ones((4, 4)), None),
    "convolve-None": lambda m: m.convolve(np.ones((4, 4)), None),
    "correlate-None-axes": lambda m: m.correlate(np.ones((4, 4)), None, axes=(1,)),
    "correlate1d-None": lambda m: m.correlate1d(np.ones(4), None),
    "convolve1d-None": lambda m: m.convolve1d(np.ones(4), None),
    "empty-uint8-to-complex": lambda m: m.correlate(np.zeros((0, 4), np.uint8), np.ones((3, 3)),
                                                    output=np.complex128),
    "empty-convolve-to-complex": lambda m: m.convolve(np.zeros((3, 0), np.uint8), np.ones(2),
                                                      output="complex64", axes=1),
    "empty-into-complex-array": lambda m: m.correlate(np.zeros((0, 4), np.int16), np.ones((1, 2)),
                                                      output=np.zeros((0, 4), np.complex128)),
    "empty-1d-to-complex": lambda m: m.correlate1d(np.zeros((0, 4), np.uint8), np.ones(3),
                                                   output=np.complex128),
    "nonempty-uint8-to-complex": lambda m: m.correlate(np.zeros((2, 4), np.uint8),
                                                       np.ones((3, 3)), output=np.complex128),
}


@pytest.mark.parametrize("name", sorted(DEGENERATE_CASES))
def test_gh25_degenerate_input_matches_scipy(name):
    try:
        res = ndimage_dual(DEGENERATE_CASES[name])
    except IndexError:          # convolve1d(a, None) indexes the 0-d array, in SciPy too
        with pytest.raises(IndexError):
            sndi.convolve1d(np.ones(4), None)
        with pytest.raises(IndexError):
            cndi.convolve1d(np.ones(4), None)
        return
    if res is not None:
        s, c = res
        assert (c.dtype, c.shape) == (s.dtype, s.shape)
        np.testing.assert_array_equal(c, s)


# ------------------------------------------------------------------ CUDA path
EMULATED_CASES = [
    ("correlate", "float64", mode) for mode in MODES] + [
    ("convolve", "float32", "reflect"), ("convolve", "int32", "mirror"),
    ("convolve", "uint8", "nearest"), ("correlate", "complex128", "wrap"),
    ("gaussian_filter", "float32", "reflect"), ("gaussian_filter", "uint8", "mirror"),
    ("uniform_filter", "float64", "grid-wrap"), ("uniform_filter", "int16", "constant"),
    ("correlate1d", "float64", "grid-mirror"), ("uniform_filter1d", "float32", "nearest"),
]


@pytest.mark.parametrize("fn,dtype,mode", EMULATED_CASES)
def test_emulated_path_vs_scipy(fn, dtype, mode):
    """The CUDA kernels (boundary fused into the gather) on the CPU emulator."""
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("the emulated CUDA path is not available here")
    rng = np.random.default_rng(len(fn) * 31 + len(mode))
    x = (rng.standard_normal((9, 8, 7)) * 20)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(x.shape)
    x = (np.abs(x) if np.dtype(dtype).kind == "u" else x).astype(dtype)
    if fn in ("correlate", "convolve"):
        w = rng.integers(-3, 4, (3, 4, 2)) if dtype in ("int32", "uint8") else \
            rng.standard_normal((3, 4, 2))
        a, kw = (w,), dict(mode=mode, cval=1.5, origin=(1, -2, 0))
        taps = w.size
    elif fn == "correlate1d":
        w = rng.standard_normal(5)
        a, kw, taps = (w,), dict(axis=1, mode=mode, origin=-2), 5
    elif fn.startswith("gaussian"):
        a, kw, taps = (1.3,), dict(mode=mode), 3 * 11
    else:
        a, kw, taps = (3,), dict(mode=mode, cval=2), 27
    with cupyconv.use_backend("emulated"):
        ours = getattr(cndi, fn)(x, *a, **kw)
    ref = getattr(sndi, fn)(x, *a, **kw)
    fref = float_reference(getattr(sndi, fn), x, *a, **kw) if ref.dtype.kind in "iu" else None
    if fn == "gaussian_filter" and fref is not None:
        fref = None                      # truncation between passes: checked exactly below
        assert np.abs(ours.astype(np.int64) - ref).max() <= 1
        return
    scale = float(np.abs(x).max()) * float(np.abs(np.asarray(a[0])).sum() or 1) + 2
    assert_agree(ref, ours, scale, taps, fref, f"emulated {fn} {dtype} {mode}", x.dtype)
