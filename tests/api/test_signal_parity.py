"""The peers' names: ``fftconvolve``, ``oaconvolve``, ``convolve2d``/``correlate2d``,
``choose_conv_method`` in SciPy's vocabulary, long double, and PyTorch's ``conv``
conventions (``padding_mode`` aliases, unbatched input).

Every SciPy comparison is one test body run by ``helpers.dual_run`` against
``scipy.signal`` and ``cupyconv``: same exception type, or same shape and dtype and
values (integers exactly, floats within an FFT-style normwise bound).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.signal
from hypothesis import given, strategies as st

import cupyconv
from cupyconv._vocabulary import PADDING_MODE_ALIASES, SIGNAL_BOUNDARIES
from helpers import dual_run, random_array

FREQ_DTYPES = ("float64", "float32", "complex128", "complex64", "int32", "int64", "float16",
               "bool")


def _close(s, c, what):
    assert c.shape == s.shape and c.dtype == s.dtype, (what, c.shape, s.shape, c.dtype, s.dtype)
    if s.dtype.kind in "biu":
        np.testing.assert_array_equal(c, s, err_msg=what)
        return
    single = s.dtype in (np.float32, np.complex64, np.float16)
    u = 2.0 ** -10 if s.dtype == np.float16 else 2.0 ** -24 if single else 2.0 ** -53
    scale = max(float(np.abs(s.astype(np.complex128)).max()), 1.0) if s.size else 1.0
    tol = 64 * u * max(math.log2(max(s.size, 2)), 1.0) * math.sqrt(max(s.size, 1)) * scale
    np.testing.assert_allclose(c.astype(np.complex128), s.astype(np.complex128), rtol=0,
                               atol=tol, err_msg=what)


@st.composite
def pair(draw, dtype, max_rank=3, max_dim=6, ones=True):
    """Two operands of one rank; each axis, with probability, 1 in one operand."""
    rank = draw(st.integers(1, max_rank))
    s1, s2 = [], []
    for _ in range(rank):
        a, b = draw(st.integers(1, max_dim)), draw(st.integers(1, max_dim))
        if ones and draw(st.booleans()):
            a, b = draw(st.sampled_from(((1, b), (a, 1), (a, a))))
        s1.append(a)
        s2.append(b)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return random_array(rng, s1, dtype), random_array(rng, s2, dtype)


@pytest.mark.parametrize("fn", ["fftconvolve", "oaconvolve"])
@pytest.mark.parametrize("dtype", FREQ_DTYPES)
@given(data=st.data())
def test_freq_convolves_vs_scipy(fn, dtype, data):
    """Dtypes (SciPy's transform dtypes, the exact product where no axis is left to
    transform), broadcasting batch axes, ``axes`` given as int/sequence/negative."""
    a, b = data.draw(pair(dtype))
    mode = data.draw(st.sampled_from(("full", "same", "valid")))
    nd = a.ndim
    axes = data.draw(st.one_of(st.none(), st.integers(-nd, nd - 1),
                               st.lists(st.integers(0, nd - 1), min_size=1, max_size=nd,
                                        unique=True)))
    if axes is not None:           # SciPy's fftconvolve: the other axes must broadcast
        others = [i for i in range(nd) if i not in np.atleast_1d(np.asarray(axes) % nd)]
        for i in others:
            if a.shape[i] != b.shape[i] and 1 not in (a.shape[i], b.shape[i]):
                b = np.take(b, [0], axis=i)
    res = dual_run(lambda sig, m: getattr(sig, fn)(a, b, mode=mode, axes=axes))
    if res is not None:
        _close(*res, f"{fn} {a.shape} {b.shape} {mode} axes={axes}")


def test_freq_convolves_edge_cases():
    for fn in ("fftconvolve", "oaconvolve"):
        for call in (lambda f: f(np.ones(3), np.ones(0)),         # empty: an empty array
                     lambda f: f(np.array(2.0), np.array(3)),     # 0-d: the product
                     lambda f: f(np.ones((1, 4), np.int64) * 2**40, np.full((3, 1), 3)),
                     lambda f: f(np.arange(6.0).reshape(2, 3), np.ones((2, 2)), axes=1)):
            res = dual_run(lambda sig, m: call(getattr(sig, fn)))
            _close(*res, fn)
        for bad in (lambda f: f(np.ones(3), np.ones((2, 2))),
                    lambda f: f(np.ones((3, 2)), np.ones((2, 2)), axes=[]),
                    lambda f: f(np.ones((3, 2)), np.ones((2, 3)), axes=0),
                    lambda f: f(np.ones(3), np.ones(2), mode="circular")):
            assert dual_run(lambda sig, m: bad(getattr(sig, fn))) is None


@pytest.mark.parametrize("fn", ["convolve2d", "correlate2d"])
@pytest.mark.parametrize("dtype", ["float64", "complex128", "int32", "uint8", "float32"])
@given(data=st.data())
def test_2d_boundaries_vs_scipy(fn, dtype, data):
    """Every boundary name (with its aliases) and ``fillvalue`` (cast to the result dtype,
    a fraction truncated for integers), every mode including the swapped ``valid``."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    a = random_array(rng, tuple(data.draw(st.integers(1, 7)) for _ in range(2)), dtype)
    b = random_array(rng, tuple(data.draw(st.integers(1, 5)) for _ in range(2)), dtype)
    mode = data.draw(st.sampled_from(("full", "same", "valid")))
    boundary = data.draw(st.sampled_from(tuple(SIGNAL_BOUNDARIES)))
    fill = data.draw(st.sampled_from((0, 2, -1.5, 1 + 2j)))
    res = dual_run(lambda sig, m: getattr(sig, fn)(a, b, mode, boundary, fill),
                   accept_error=(ValueError, np.exceptions.ComplexWarning))
    if res is not None:
        _close(*res, f"{fn} {a.shape} {b.shape} {mode} {boundary} {fill}")


def test_2d_errors_match_scipy():
    for call in (lambda s: s.convolve2d(np.ones(3), np.ones(2)),
                 lambda s: s.correlate2d(np.ones((3, 3)), np.ones((2, 2)), boundary="reflect"),
                 lambda s: s.convolve2d(np.ones((3, 3)), np.ones((2, 2)), boundary="edge"),
                 lambda s: s.convolve2d(np.ones((3, 3)), np.ones((2, 2)), fillvalue=[1, 2]),
                 lambda s: s.convolve2d(np.ones((3, 3)), np.ones((2, 2)), fillvalue="a"),
                 lambda s: s.convolve2d(np.ones((3, 3)), np.ones((2, 2)), mode="circular"),
                 lambda s: s.convolve2d(np.ones((2, 5)), np.ones((3, 2)), mode="valid")):
        assert dual_run(lambda sig, m: call(sig)) is None


def test_choose_conv_method_keeps_scipys_vocabulary():
    rng = np.random.default_rng(3)
    small, big = rng.standard_normal((8, 8)), rng.standard_normal(10**4)
    for a, b in ((small, small[:6, :6]), (big, big[:10**3]), (big, big[:3])):
        method = cupyconv.choose_conv_method(a, b)
        assert method in ("direct", "fft")
        assert method == ("fft" if cupyconv.choose_algorithm(a, b) == "fft" else "direct")
        name, times = cupyconv.choose_conv_method(a, b, measure=True)
        assert set(times) == {"direct", "fft"} and name == min(times, key=times.get)
    assert cupyconv.choose_conv_method(big, big[:10**3]) == "fft"
    # bool: always direct, as SciPy (the engine may still price the FFT cheaper)
    assert cupyconv.choose_conv_method(big > 0, big[:10**3] > 0) == "direct"
    assert cupyconv.choose_algorithm(np.array([2**51]), np.array([2**51])) != "fft"
    # axes= (an extension): the batch axis is not convolved
    stack = rng.standard_normal((4, 3000))
    assert cupyconv.choose_conv_method(stack, stack[:1, :1000], axes=1) in ("direct", "fft")
    assert cupyconv.choose_algorithm(stack, stack[:1, :5], axes=-1) != "fft"


@pytest.mark.parametrize("n", [10, 51, 60])
def test_fft_over_length_one_axes_is_the_exact_product(n):
    """SciPy's FFT path multiplies where no axis is longer than 1 in both operands:
    exact for int64 (no rounding through float64, no warning)."""
    z = np.array([[2**n]], dtype=np.int64)
    k = np.array([[3, -1, 2**n]], dtype=np.int64)
    for fn in ("convolve", "correlate"):
        for mode in ("full", "same", "valid"):
            res = dual_run(lambda sig, m: getattr(sig, fn)(z, k, mode, method="fft"))
            if res is not None:
                s, c = res
                assert c.dtype == s.dtype == np.int64
                np.testing.assert_array_equal(c, s)


@pytest.mark.parametrize("dtype", [np.longdouble, np.clongdouble])
def test_long_double_on_the_cpu(dtype):
    """SciPy's direct path takes long double; so does the NumPy backend (every algorithm),
    and the CUDA path says why it cannot."""
    rng = np.random.default_rng(7)
    x = rng.random((9, 8)).astype(dtype)
    y = rng.random((4, 3)).astype(dtype)
    if np.dtype(dtype).kind == "c":
        x, y = x + 0.1j, y - 0.1j
    ref = scipy.signal.convolve(x, y, method="direct")
    tol = 64 * float(np.finfo(dtype).eps) * float(np.abs(ref).max())
    for method in ("direct", "gemm", "fft", "auto"):
        got = cupyconv.convolve(x, y, method=method)
        assert got.dtype == ref.dtype
        np.testing.assert_allclose(got, ref, rtol=0, atol=tol)
    for fn in ("fftconvolve", "oaconvolve"):
        got = getattr(cupyconv, fn)(x, y)
        assert got.dtype == dtype
        np.testing.assert_allclose(got, ref, rtol=0, atol=tol)
    assert cupyconv.choose_conv_method(x, y) in ("direct", "fft")
    if "emulated" in cupyconv.available_backends():
        with cupyconv.use_backend("emulated"), \
                pytest.raises(TypeError, match="long double.*no CUDA kernel"):
            cupyconv.convolve(x, y)


# ------------------------------------------------------------------ PyTorch
@pytest.mark.parametrize("alias,mode", sorted(PADDING_MODE_ALIASES.items()))
def test_conv_accepts_pytorch_padding_modes(alias, mode, rng):
    x, w = rng.standard_normal((2, 3, 7, 6)), rng.standard_normal((4, 3, 3, 2))
    np.testing.assert_array_equal(
        cupyconv.conv(x, w, padding=2, padding_mode=alias),
        cupyconv.conv(x, w, padding=2, padding_mode=mode))
    problem, *_ = cupyconv.api.conv.prepare_conv(
        x, w, None, stride=1, padding=2, dilation=1, groups=1, padding_mode=alias, cval=0,
        layout="channels_first")
    assert problem.padding_mode == mode            # one engine name whatever was passed


@pytest.mark.parametrize("layout", ["channels_first", "channels_last"])
def test_conv_unbatched_input(layout, rng):
    """``x.ndim == w.ndim - 1`` is PyTorch's unbatched ``(C, *S)``: the result drops ``N``."""
    x, w = rng.standard_normal((3, 9, 8)), rng.standard_normal((4, 3, 3, 3))
    bias = rng.standard_normal(4)
    if layout == "channels_last":
        x, w = np.moveaxis(x, 0, -1), np.moveaxis(w, 1, -1)
    kw = dict(padding=1, stride=(2, 1), padding_mode="circular", layout=layout)
    y = cupyconv.conv(x, w, bias, **kw)
    batched = cupyconv.conv(x[None], w, bias, **kw)
    assert y.shape == batched.shape[1:]
    np.testing.assert_array_equal(y, batched[0])
    out = np.empty(y.shape)
    assert cupyconv.conv(x, w, bias, out=out, **kw) is out
    np.testing.assert_array_equal(out, y)
    with pytest.raises(ValueError, match="same number of dimensions"):
        cupyconv.conv(x[0], w)                     # two axes short: neither form


# ------------------------------------------------------------------ CUDA path
@pytest.mark.parametrize("boundary", ["fill", "wrap", "symm"])
def test_parity_functions_on_the_emulated_path(boundary):
    """The CUDA kernels (boundary fused into the gather) give SciPy's results."""
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("the emulated CUDA path is not available here")
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((9, 7)), rng.standard_normal((4, 3))
    ai, bi = rng.integers(-5, 6, (9, 7)), rng.integers(-3, 4, (4, 3))
    x, w = rng.standard_normal((3, 8, 6)), rng.standard_normal((2, 3, 3, 3))
    with cupyconv.use_backend("emulated"):
        for fn in ("convolve2d", "correlate2d"):
            for mode in ("full", "same", "valid"):
                np.testing.assert_allclose(
                    getattr(cupyconv, fn)(a, b, mode, boundary, 1.5),
                    getattr(scipy.signal, fn)(a, b, mode, boundary, 1.5), atol=1e-12)
                np.testing.assert_array_equal(
                    getattr(cupyconv, fn)(ai, bi, mode, boundary, 2),
                    getattr(scipy.signal, fn)(ai, bi, mode, boundary, 2))
        np.testing.assert_allclose(cupyconv.fftconvolve(a, b[:1], "same", axes=1),
                                   scipy.signal.fftconvolve(a, b[:1], "same", axes=1),
                                   atol=1e-12)
        torch_mode = {"fill": "zeros", "wrap": "circular", "symm": "replicate"}[boundary]
        y = cupyconv.conv(x, w, padding=1, padding_mode=torch_mode)       # unbatched
    np.testing.assert_allclose(y, cupyconv.conv(x[None], w, padding=1,
                                                padding_mode=torch_mode)[0], atol=1e-12)
