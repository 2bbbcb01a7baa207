"""The ``separable`` algorithm: outer-product kernels as one 1-D pass per axis (CPU).

- detection (``backends/numpy/separable.factor``): integer kernels exactly, float and
  complex kernels within ``8 * sqrt(taps)`` units of roundoff of their norm, anything
  else refused with the reconstruction error;
- results: ``method="separable"`` equals ``direct`` (exactly for integer data) for
  ``conv`` (single channel and depthwise; strides, dilations, every boundary mode and
  ``cval``) and for ``convolve``/``correlate`` (flips, modes, batch axes);
- ``auto`` picks it only for kernels that factor, where the cost model prices it first.
"""
from __future__ import annotations

from functools import reduce

import numpy as np
import pytest
from hypothesis import event, given, strategies as st

import cupyconv
from cupyconv.backends.numpy import separable
from cupyconv.ndimage.filters import gaussian_kernel1d
from helpers import PADDING_MODES


def outer(*factors):
    return reduce(np.multiply.outer, factors)


def test_factor_detects_outer_products():
    g = gaussian_kernel1d(1.3, 0, 4)
    for dtype in (np.float64, np.float32):
        factors, err = separable.factor(outer(g, g, g).astype(dtype), dtype)
        assert factors is not None and err <= 8 * np.finfo(dtype).eps
        np.testing.assert_allclose(outer(*factors), outer(g, g, g), rtol=1e-5)
    sobel = outer(np.array([1, 2, 1]), np.array([1, 0, -1]))
    factors, err = separable.factor(sobel, np.int64)
    assert err == 0 and np.array_equal(outer(*factors), sobel)          # exact integers
    assert all(f.dtype == np.int64 for f in factors)
    z = np.zeros((3, 4), np.int64)
    assert np.array_equal(outer(*separable.factor(z, np.int64)[0]), z)
    c = outer(np.array([1 + 1j, 2, -1j]), np.array([0.5, 1j]))
    factors, err = separable.factor(c, np.complex128)
    np.testing.assert_allclose(outer(*factors), c, atol=1e-14)


def test_factor_refuses_other_kernels():
    rng = np.random.default_rng(0)
    assert separable.factor(rng.standard_normal((3, 3)), np.float64)[0] is None
    near = outer(np.ones(3), np.ones(4)) + 1e-9 * rng.standard_normal((3, 4))
    factors, err = separable.factor(near, np.float64)
    assert factors is None and 1e-11 < err < 1e-8                  # the error is reported
    assert separable.factor(np.array([[1, 2], [3, 5]]), np.int64)[0] is None
    assert separable.factor(np.array([[2, 3], [3, 4]]), np.int64)[0] is None


def test_explicit_separable_names_the_reconstruction_error(rng):
    x, w = rng.standard_normal((12, 12, 12)), rng.standard_normal((3, 3, 3))
    with pytest.raises(ValueError, match=r"relative error of 0\.\d+ \(tolerance .*units "
                                         r"of roundoff"):
        cupyconv.convolve(x, w, method="separable")
    with pytest.raises(ValueError, match="not an exact outer product"):
        cupyconv.convolve(x.astype(int), np.array([[[1, 2], [3, 5]]]), method="separable")
    with pytest.raises(ValueError, match="method='separable' cannot run this problem: "
                                         "separable needs one filter per input channel"):
        cupyconv.conv(rng.standard_normal((1, 2, 8, 8)), rng.standard_normal((3, 2, 3, 3)),
                      method="separable")


@st.composite
def separable_conv(draw):
    rank = draw(st.integers(2, 3))
    groups = draw(st.sampled_from((1, 1, 3)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    ks = [draw(st.integers(1, 4)) for _ in range(rank)]
    ks[0], ks[1] = max(ks[0], 2), max(ks[1], 2)
    s = [draw(st.integers(1, 7)) + k for k in ks]
    w = np.stack([outer(*[rng.integers(-3, 4, k) for k in ks]) for _ in range(groups)])
    x = rng.integers(-9, 10, (2, groups) + tuple(s))
    kw = dict(groups=groups, padding=[(draw(st.integers(0, 3)), draw(st.integers(0, 3)))
                                      for _ in range(rank)],
              stride=[draw(st.integers(1, 2)) for _ in range(rank)],
              dilation=[draw(st.integers(1, 2)) for _ in range(rank)],
              padding_mode=draw(st.sampled_from(PADDING_MODES)))
    if kw["padding_mode"] == "constant" and (groups == 1 or draw(st.booleans())):
        kw["cval"] = draw(st.sampled_from((0, 2, -5)))
    return x, w[:, None], kw


@given(case=separable_conv(), dtype=st.sampled_from(("int64", "float64", "int8",
                                                     "complex128", "float32")))
def test_separable_equals_direct(case, dtype):
    """Every geometry and boundary mode; exactly for integers (int8 wraps as direct)."""
    x, w, kw = case
    x, w = x.astype(dtype), w.astype(dtype)
    try:
        ref = cupyconv.conv(x, w, method="direct", **kw)
    except ValueError:
        event("empty output")
        return                                   # an empty output: nothing to compare
    try:
        got = cupyconv.conv(x, w, method="separable", **kw)
    except ValueError as exc:                    # groups whose factor sums differ + cval
        assert "factor sum" in str(exc) and kw.get("cval", 0) != 0, exc
        event("refused: per-group factor sums differ with a cval")
        return
    event(f"compared {kw['padding_mode']}")
    assert got.dtype == ref.dtype and got.shape == ref.shape
    if np.dtype(dtype).kind in "iu":
        np.testing.assert_array_equal(got, ref)
    else:
        tol = 1e-4 if dtype == "float32" else 1e-10
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * float(np.abs(ref).max() + 1))


@pytest.mark.parametrize("fn", ["convolve", "correlate"])
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
def test_separable_signal_calls(fn, mode, rng):
    x = rng.integers(-50, 50, (4, 13, 11))                       # axis 0: a batch axis
    k = outer(np.array([1]), np.array([1, -2, 4]), np.array([3, 0, 1, 1]))
    ref = getattr(cupyconv, fn)(x, k, mode, method="direct", axes=(1, 2))
    got = getattr(cupyconv, fn)(x, k, mode, method="separable", axes=(1, 2))
    np.testing.assert_array_equal(got, ref)
    xc = rng.standard_normal((9, 10)) + 1j * rng.standard_normal((9, 10))
    kc = outer(np.array([1 + 2j, -1, 0.5j]), np.array([2.0, 1j, 1]))
    np.testing.assert_allclose(getattr(cupyconv, fn)(xc, kc, mode, method="separable"),
                               getattr(cupyconv, fn)(xc, kc, mode, method="direct"),
                               atol=1e-12)


def test_auto_picks_separable_only_for_outer_products(rng):
    """A 7^4 Gaussian on a 16^4 volume: 28 taps per output instead of 2,401."""
    g = gaussian_kernel1d(1.0, 0, 3)
    x = rng.standard_normal((16, 16, 16, 16))
    k = outer(g, g, g, g)
    assert cupyconv.choose_algorithm(x, k, "same") == "separable"
    np.testing.assert_allclose(cupyconv.convolve(x, k, "same"),
                               cupyconv.convolve(x, k, "same", method="fft"), atol=1e-12)
    noise = k + 1e-6 * rng.standard_normal(k.shape)
    assert cupyconv.choose_algorithm(x, noise, "same") != "separable"
    name, times = cupyconv.choose_algorithm(x[:8, :8, :8, :8], noise, "same", measure=True)
    assert "separable" not in times                # refused by the data, not even timed
    assert cupyconv.choose_conv_method(x, k, "same") == "direct"     # SciPy's vocabulary
    ndimg = cupyconv.ndimage.correlate(x, k, mode="mirror")
    import scipy.ndimage
    np.testing.assert_allclose(ndimg, scipy.ndimage.correlate(x, k, mode="mirror"),
                               atol=1e-12)


def test_depthwise_conv_picks_separable(rng):
    g = gaussian_kernel1d(1.5, 0, 4)
    w = np.stack([outer(g, g * (i + 1)) for i in range(3)])[:, None]   # one per channel
    x = rng.standard_normal((2, 3, 64, 64))
    problem, *_ = cupyconv.api.conv.prepare_conv(
        x, w, None, stride=1, padding="same", dilation=1, groups=3, padding_mode="reflect",
        cval=0, layout="channels_first")
    stats = {}
    from cupyconv.core.problem import Operands
    from cupyconv.dispatch import backend_for, run
    y, name = run(problem, Operands(activation=x, filter=w), backend_for(np), stats=stats)
    assert name == "separable"
    np.testing.assert_allclose(y, cupyconv.conv(x, w, groups=3, padding="same",
                                                padding_mode="reflect", method="direct"),
                               atol=1e-12)


def test_separable_is_on_the_cuda_path(rng):
    """(The CUDA path's own tests: tests/backends/cuda/test_separable_cuda.py.)"""
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("the emulated CUDA path is not available here")
    x, k = rng.standard_normal((10, 10)), outer(np.ones(3), np.ones(3))
    with cupyconv.use_backend("emulated"):
        np.testing.assert_allclose(cupyconv.convolve(x, k, method="separable"),
                                   cupyconv.convolve(x, k, method="direct"), atol=1e-13)
        np.testing.assert_allclose(cupyconv.convolve(x, k), cupyconv.convolve(x, k, method="direct"))


def test_depthwise_cval_needs_one_factor_sum_per_axis(rng):
    """With a nonzero cval the filtered padding of an earlier axis is ``cval * sum``:
    groups whose factor sums differ cannot share it, so ``auto`` keeps another algorithm."""
    w = np.stack([outer(np.array([1.0, 2.0]), np.array([1.0, 1.0, 1.0])),
                  outer(np.array([1.0, 5.0]), np.array([1.0, 1.0, 1.0]))])[:, None]
    x = rng.standard_normal((1, 2, 9, 9))
    kw = dict(groups=2, padding=1, cval=2.5)
    with pytest.raises(ValueError, match="factor sum"):
        cupyconv.conv(x, w, method="separable", **kw)
    np.testing.assert_allclose(cupyconv.conv(x, w, **kw),
                               cupyconv.conv(x, w, method="direct", **kw), atol=1e-12)
    same = np.stack([w[0, 0], w[0, 0] * 1.0])[:, None]          # equal sums: separable runs
    np.testing.assert_allclose(cupyconv.conv(x, same, method="separable", **kw),
                               cupyconv.conv(x, same, method="direct", **kw), atol=1e-12)


@pytest.mark.parametrize("backend", ["numpy", "emulated"])
@pytest.mark.parametrize("data", [np.int8, np.uint16, np.int32])
def test_narrow_integer_input_is_exact_by_every_method(backend, data, rng):
    """int32 (int8, uint16) data with an int64 kernel is an int64 result: ``convolve``
    passes the data un-widened (the CPU's separable passes read it as it is, issue 13:
    the widening copy made them 1.15x slower than SciPy's passes), every other algorithm
    and the CUDA path widen it once.  Every method gives the exact integers."""
    if backend not in cupyconv.available_backends():
        pytest.skip(f"backend {backend!r} is not available here")
    binom = np.array([1, 4, 6, 4, 1])
    k = reduce(np.multiply.outer, [binom] * 3)                     # int64
    x = rng.integers(0, 100, (9, 8, 7)).astype(data)
    ref = scipy_reference(x.astype(np.int64), k)
    from cupyconv.core.signal_map import signal_call
    call = signal_call(x.shape, x.dtype, k.shape, k.dtype, "same", (0, 1, 2), False)
    assert call.operands(x, k, np).activation.dtype == data        # not widened here
    with cupyconv.use_backend(backend):
        for method in ("auto", "separable", "direct", "gemm", "fft"):
            y = cupyconv.convolve(x, k, "same", method=method)
            assert y.dtype == np.int64, method
            np.testing.assert_array_equal(y, ref, err_msg=method)


def scipy_reference(x, k):
    import scipy.signal
    return scipy.signal.convolve(x, k, "same", method="direct")
