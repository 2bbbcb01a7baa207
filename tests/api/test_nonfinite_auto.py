"""``auto`` on data with a NaN or an Inf: every public entry point, both backends.

Issue 25.1: with ``fft`` ranked first, the non-finite scan removed it and the next
candidate (``separable``) was promoted without asking its own data rule; a kernel that
is not an outer product then raised ``NotSeparable`` from ``convolve``.  Now every
candidate ``auto`` promotes passes its own rule (the rules themselves, with stand-in
backends, are in tests/dispatch/test_rules.py).

What holds here, for every entry point of :data:`ENTRY_POINTS` on NumPy and emulated
(and a GPU when present): ``auto`` returns what the direct sum returns (``method="direct"``
on NumPy, or SciPy's direct function where the entry point has no ``method``): the same
NaN outputs, the same infinities (with their signs), and the finite values within the
tolerance below.  Kernels are random (``fft`` or ``direct`` first), outer products
(``separable`` first: one term keeps the direct sum's NaN and Inf pattern) and sums of
two (where the terms' signs differ, two infinities meet: ``separable``'s data rule
refuses non-finite data for more than one term).

Tolerance of the finite outputs: each sums at most ``taps`` products; any summation order
(and the FFT of finite data) is within ``taps`` units of roundoff of ``max|x| * sum|w|``
per output; ``8 *`` for the float32 inputs' widened (TF32-free) reference.
"""
from __future__ import annotations

from functools import reduce

import numpy as np
import pytest
import scipy.ndimage
import scipy.signal
from hypothesis import HealthCheck, event, given, settings, strategies as st

import cupyconv
import cupyconv.grad
import cupyconv.ndimage

try:
    import dask.array as da
except ImportError:       # the 'dask' extra is optional
    da = None

#: Planted values.
NON_FINITE = (np.nan, np.inf, -np.inf)
UNIT_ROUNDOFF = {np.dtype(np.float64): 2.0**-53, np.dtype(np.float32): 2.0**-24}


def _conv(x, w, method):
    return cupyconv.conv(x[None, None], w[None, None], method=method)[0, 0]


def _plan(x, w, method, backend):
    plan = cupyconv.plan_conv((1, 1) + x.shape, (1, 1) + w.shape, x.dtype, method=method,
                              backend=backend)
    return plan(x[None, None], w[None, None])[0, 0]


def _operator(x, w, method):
    return cupyconv.ConvOperator(w, x.shape, method=method).matvec(x.ravel())


def _vjp(x, w, method):
    g = np.ones(tuple(a + b - 1 for a, b in zip(x.shape, w.shape)), x.dtype)
    g1, g2 = cupyconv.grad.convolve_vjp(x, w, g, method=method)
    return np.concatenate([np.ravel(g1), np.ravel(g2)])


def _dask(x, w, method):
    chunks = tuple(max(1, n // 2) for n in x.shape)
    return cupyconv.dask.convolve(da.from_array(x, chunks=chunks), w,
                                  method=method).compute(scheduler="synchronous")


#: name -> (cupyconv call of (x, w, method, backend), direct reference of (x, w)).
ENTRY_POINTS = {
    "convolve": (lambda x, w, m, b: cupyconv.convolve(x, w, method=m), None),
    "correlate": (lambda x, w, m, b: cupyconv.correlate(x, w, method=m), None),
    "convolve2d": (lambda x, w, m, b: cupyconv.convolve2d(x, w),
                   lambda x, w: scipy.signal.convolve2d(x, w)),
    "conv": (lambda x, w, m, b: _conv(x, w, m), None),
    "ndimage.convolve": (lambda x, w, m, b: cupyconv.ndimage.convolve(x, w, mode="constant"),
                         lambda x, w: scipy.ndimage.convolve(x, w, mode="constant")),
    "ConvOperator.matvec": (lambda x, w, m, b: _operator(x, w, m), None),
    "convolve_vjp": (lambda x, w, m, b: _vjp(x, w, m), None),
    "plan_conv": (lambda x, w, m, b: _plan(x, w, m, b), None),
}
if da is not None:
    import cupyconv.dask
    ENTRY_POINTS["dask.convolve"] = (lambda x, w, m, b: _dask(x, w, m), None)


def reference(entry, x, w):
    call, direct = ENTRY_POINTS[entry]
    with cupyconv.use_backend("numpy"):
        return np.asarray(direct(x, w) if direct else call(x, w, "direct", "numpy"))


def assert_like_direct(y, ref, x, w, what):
    """The same NaN and signed-Inf outputs as the direct sum, finite values within the
    module docstring's tolerance."""
    y = np.asarray(y.get() if hasattr(y, "get") else y)
    assert y.shape == ref.shape, (what, y.shape, ref.shape)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref), err_msg=f"NaN pattern, {what}")
    for sign in (1, -1):
        np.testing.assert_array_equal(y == sign * np.inf, ref == sign * np.inf,
                                      err_msg=f"{sign:+d} Inf pattern, {what}")
    finite = np.isfinite(ref)
    xf, wf = np.where(np.isfinite(x), x, 0), np.where(np.isfinite(w), w, 0)
    u = UNIT_ROUNDOFF[np.dtype(x.dtype)] * (8 if x.dtype == np.float32 else 1)
    scale = float(np.abs(xf).max()) * float(np.abs(wf).sum())
    np.testing.assert_allclose(y[finite], ref[finite], rtol=0, atol=w.size * u * scale,
                               err_msg=what)


def _kernel(rng, shape, kind):
    if kind == "random":
        return rng.standard_normal(shape)
    terms = 1 if kind == "outer" else 2
    return sum(reduce(np.multiply.outer, [rng.uniform(0.2, 1.0, n) for n in shape])
               for _ in range(terms)) * rng.choice((-1.0, 1.0))


@st.composite
def planted(draw):
    """2-D data (up to 40 x 40) and a kernel (up to 15 x 15) with 1-3 NaN/Inf planted
    in the data (or, one time in eight, in the kernel) at random places."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    xs = tuple(draw(st.integers(8, 40)) for _ in range(2))
    ws = tuple(draw(st.integers(2, min(15, n))) for n in xs)
    kind = draw(st.sampled_from(("random", "outer", "two terms")))
    dtype = np.dtype(draw(st.sampled_from(("float64", "float32"))))
    x, w = rng.standard_normal(xs), _kernel(rng, ws, kind)
    target = w if draw(st.integers(0, 7)) == 0 else x
    for _ in range(draw(st.integers(1, 3))):
        index = tuple(draw(st.integers(0, n - 1)) for n in target.shape)
        target[index] = draw(st.sampled_from(NON_FINITE))
    return x.astype(dtype), w.astype(dtype), kind


@pytest.mark.filterwarnings("ignore::RuntimeWarning")      # inf - inf in the references
@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=planted(), entry=st.sampled_from(tuple(ENTRY_POINTS)))
def test_auto_on_non_finite_data_is_the_direct_sum(any_dev, case, entry):
    x, w, kind = case
    event(f"{entry}, {kind} kernel")
    ref = reference(entry, x, w)
    with any_dev.scope():
        y = ENTRY_POINTS[entry][0](any_dev.to_dev(x), any_dev.to_dev(w), "auto", any_dev.name)
    assert_like_direct(any_dev.to_host(y), ref, x, w, (entry, kind, x.shape, w.shape))


@pytest.mark.parametrize("entry", tuple(ENTRY_POINTS))
def test_issue_reproducer_every_entry_point(any_dev, entry, rng):
    """The issue's case: 32 x 32 data with one NaN, a random 15 x 15 kernel (fft ranked
    first on NumPy; separable second, which must not be run on this kernel)."""
    x = rng.standard_normal((32, 32))
    x[1, 1] = np.nan
    w = rng.standard_normal((15, 15))
    with any_dev.scope():
        y = ENTRY_POINTS[entry][0](any_dev.to_dev(x), any_dev.to_dev(w), "auto", any_dev.name)
    assert_like_direct(any_dev.to_host(y), reference(entry, x, w), x, w, entry)


def test_plan_names_its_fallbacks_in_order():
    """A plan cannot see the data: its ``repr`` names what a call runs instead, each
    fallback with the rule it needs, down to one that takes any values."""
    plan = cupyconv.plan_conv((1, 1, 512, 512), (1, 1, 31, 31), np.float64, backend="numpy")
    ranked = plan.choice.ranked
    assert plan.algorithm == ranked[0] == "fft" and ranked[1] == "separable"
    assert (f"algorithm='fft' (if the data are finite and integer results exact in float64; "
            f"else 'separable' if the kernel is an outer product or a short sum of them, "
            f"else {ranked[2]!r})") in repr(plan)
