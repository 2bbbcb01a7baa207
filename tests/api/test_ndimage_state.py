"""1-D ndimage passes on size-1 axes of complex, Fortran-ordered data: no state between calls.

Issue 25.8: one hypothesis example once reported a relative error of 1.2e23 for
``convolve1d`` of a complex64 Fortran-order ``(1, 1, 3, 3, 1)`` input along its size-1
axis 4 (``mirror``, ``origin=-2``, ``output=complex64``) and never again: the mark of
state leaking between calls (a memo keyed too loosely, an uninitialised buffer, an
``out`` reused).  This family, on every backend: shapes with size-1 axes (the filtered
axis one of them half the time), C or Fortran order or a transposed view, complex64 and
complex128 data, real and complex weights, every mode, origins at and inside SciPy's
bounds, every output choice (``None``, a dtype, an array filled with 7 + 7j, which must
be overwritten).  Each example runs its call, then a different call of the family, then
the first again: the repeat must return the same bits, and both must agree with SciPy
(tolerance: ``test_ndimage.assert_agree``, ``64 * taps`` units of roundoff of
``max|x| * sum|w|``).
"""
from __future__ import annotations

import numpy as np
import scipy.ndimage as sndi
from hypothesis import HealthCheck, event, given, settings, strategies as st

from cupyconv import ndimage as cndi
from test_ndimage import MODES, assert_agree, origin_for, scale_of

#: ``output=`` choices of a complex result.
OUTPUTS = (None, "complex64", "complex128", np.complex64, "array")


@st.composite
def size_one_calls(draw):
    """``(fn, x, w, kwargs, output choice)`` of the module docstring's family."""
    nd = draw(st.integers(2, 6))
    shape = [draw(st.sampled_from((1, 1, 2, 3))) for _ in range(nd)]
    ones = [a for a, n in enumerate(shape) if n == 1]
    if not ones:
        shape[draw(st.integers(0, nd - 1))] = 1
        ones = [a for a, n in enumerate(shape) if n == 1]
    axis = draw(st.sampled_from(ones)) if draw(st.booleans()) else draw(st.integers(0, nd - 1))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dtype = draw(st.sampled_from((np.complex64, np.complex128)))
    layout = draw(st.sampled_from(("C", "F", "transposed")))
    if layout == "transposed":
        shape = shape[::-1]
    x = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    x = np.asfortranarray(x) if layout == "F" else (x.T if layout == "transposed" else x)
    k = draw(st.integers(1, 7))
    w = rng.standard_normal(k)
    kind = draw(st.sampled_from(("float64", "float32", "complex")))
    w = w + 1j * rng.standard_normal(k) if kind == "complex" else w.astype(kind)
    mode = draw(st.sampled_from(MODES))
    cval = 0.0 if kind == "complex" else draw(st.sampled_from((0.0, 1.5)))
    kw = dict(axis=axis if draw(st.booleans()) else axis - nd, mode=mode, cval=cval,
              origin=origin_for(draw, k))
    fn = draw(st.sampled_from(("convolve1d", "correlate1d")))
    return fn, x, w, kw, draw(st.sampled_from(OUTPUTS))


def _call(module, case, dev=None):
    fn, x, w, kw, out = case
    move = (lambda a: a) if dev is None else dev.to_dev
    output = move(np.full(x.shape, 7 + 7j, np.complex128)) if out == "array" else out
    y = getattr(module, fn)(move(x), move(w), output=output, **kw)
    if out == "array":
        assert y is None or y is output
        y = output
    return np.asarray(y if dev is None else dev.to_host(y))


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=size_one_calls(), other=size_one_calls())
def test_size_one_axes_repeat_exactly_and_match_scipy(any_dev, case, other):
    fn, x, w, kw, out = case
    event(f"axis of size {x.shape[kw['axis']]}, {x.dtype}, {kw['mode']}")
    ref = _call(sndi, case)
    with any_dev.scope():
        first = _call(cndi, case, any_dev)
        between = _call(cndi, other, any_dev)
        again = _call(cndi, case, any_dev)
    np.testing.assert_array_equal(again, first, err_msg=f"a repeat differs: {case}")
    what = f"{fn} {x.shape} {x.dtype} {'F' if x.flags.f_contiguous else 'C'} {kw} {out}"
    assert_agree(ref, first, scale_of(x, w, kw["cval"]), w.size, None, what, x.dtype)
    ofn, ox, ow, okw, _ = other
    assert_agree(_call(sndi, other), between, scale_of(ox, ow, okw["cval"]), ow.size, None,
                 f"{ofn} {ox.shape} {okw}", ox.dtype)


def test_issue_case_repeated_with_calls_between(any_dev):
    """The reported example, a hundred times, with other calls of other shapes between."""
    rng = np.random.default_rng(25)
    x = np.asfortranarray((rng.standard_normal((1, 1, 3, 3, 1))
                           + 1j * rng.standard_normal((1, 1, 3, 3, 1))).astype(np.complex64))
    w = rng.standard_normal(5)
    kw = dict(axis=4, mode="mirror", origin=-2, output=np.complex64)
    ref = sndi.convolve1d(x, w, **kw)
    one_sample = (x * w.sum()).astype(x.dtype)          # every tap reads the one sample
    assert_agree(one_sample, ref, scale_of(x, w, 0.0), w.size, None, "scipy", x.dtype)
    with any_dev.scope():
        for i in range(100):
            y = any_dev.to_host(cndi.convolve1d(any_dev.to_dev(x), any_dev.to_dev(w), **kw))
            assert y.dtype == np.complex64
            assert_agree(ref, y, scale_of(x, w, 0.0), w.size, None, f"call {i}", x.dtype)
            z = any_dev.to_dev(rng.standard_normal((i % 5 + 1, 4)).astype(np.float32))
            cndi.correlate1d(z, any_dev.to_dev(rng.standard_normal(i % 4 + 1)), axis=0,
                             mode=MODES[i % len(MODES)])
