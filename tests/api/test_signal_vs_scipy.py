"""Property tests: ``cupyconv.convolve/correlate`` against ``scipy.signal``.

Every test body is written once and run against both libraries through
``helpers.dual_run`` (CuPy's ``numpy_cupy_allclose`` pattern): both must
return the same shape and dtype, or both raise the same exception type
(``accept_error``) exactly when ``helpers.valid_mode_rejects`` says they must.  Both results are then checked against an independent
float64 (or exact-integer) tap-loop reference: exactly for integers,
elementwise ``c*K*u*(|x| conv |w|)`` for tap-sum methods, normwise for FFT.
Checking scipy against the same reference validates the reference and the
bounds themselves.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.signal
from hypothesis import given, strategies as st

import cupyconv
from helpers import (assert_matches_reference, dual_run, elementwise_bound, is_exact_dtype,
                     random_array, ref_convolve, signal_bounds, valid_mode_rejects)

METHODS = ("direct", "gemm", "fft", "auto", "implicit_gemm")
DTYPES = ("float32", "float64", "complex64", "complex128", "int32", "int64")
MODES = ("full", "same", "valid")
#: Element budgets: small enough that 6-D cases stay fast, large enough that
#: the kernel is often longer than the input on some axis.
IN1_BUDGET, IN2_BUDGET = 60, 24


@st.composite
def shapes(draw, rank, budget, max_dim=5):
    """A shape of ``rank`` axes (each >= 1) with at most ``budget`` elements."""
    dims = []
    left = budget
    for _ in range(rank):
        d = draw(st.integers(1, max(1, min(max_dim, left))))
        dims.append(d)
        left //= d
    return tuple(dims)


@st.composite
def signal_operands(draw, dtype, max_rank=6):
    rank = draw(st.integers(1, max_rank))
    s1 = draw(shapes(rank, IN1_BUDGET))
    s2 = draw(shapes(rank, IN2_BUDGET))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    return random_array(rng, s1, dtype), random_array(rng, s2, dtype)


def _algorithm(method):
    """The algorithm a call ran: known for explicit methods; None for
    ``auto`` (checked with the weaker normwise bound, since it may be FFT)."""
    return None if method == "auto" else method


def check_against_reference(y, a, b, mode, correlate, algorithm, axes=None, what=""):
    """``y`` vs the tap-loop reference with the dtype's bound."""
    ref = ref_convolve(a, b, mode, axes=axes, correlate=correlate,
                       dtype=object if is_exact_dtype(y.dtype) else None)
    bounds = signal_bounds(a, b, mode, axes=axes, correlate=correlate)
    assert_matches_reference(y, ref, bounds, y.dtype, algorithm, what)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("method", METHODS)
@given(data=st.data(), mode=st.sampled_from(MODES), fn=st.sampled_from(["convolve", "correlate"]))
def test_matches_scipy(dtype, method, data, mode, fn):
    a, b = data.draw(signal_operands(dtype))

    def body(sig, m):
        return getattr(sig, fn)(a, b, mode=mode, method=m)

    res = dual_run(body, method)
    if valid_mode_rejects(a.shape, b.shape, mode):
        assert res is None, "valid mode with neither input covering the other must raise"
        return
    assert res is not None, "both raised on operands scipy's convolve accepts"
    ys, yc = res
    assert yc.shape == ys.shape and yc.dtype == ys.dtype
    corr = fn == "correlate"
    scipy_method = method if method in ("auto", "fft") else "direct"
    check_against_reference(ys, a, b, mode, corr, _algorithm(scipy_method), what="scipy")
    check_against_reference(yc, a, b, mode, corr, _algorithm(method),
                            what=f"cupyconv {fn} {method}")


@pytest.mark.parametrize("dtype", ["float64", "complex64", "int64"])
@given(data=st.data(), mode=st.sampled_from(MODES))
def test_auto_equals_chosen_method_bitwise(dtype, data, mode):
    """``auto`` runs exactly the algorithm ``choose_algorithm`` names (and
    ``choose_conv_method`` says ``fft`` exactly when that is the FFT)."""
    a, b = data.draw(signal_operands(dtype, max_rank=4))
    if valid_mode_rejects(a.shape, b.shape, mode):
        with pytest.raises(ValueError, match="For 'valid' mode"):
            cupyconv.choose_algorithm(a, b, mode)
        return
    chosen = cupyconv.choose_algorithm(a, b, mode)
    assert chosen in ("direct", "implicit_gemm", "gemm", "fft")
    assert cupyconv.choose_conv_method(a, b, mode) == ("fft" if chosen == "fft" else "direct")
    np.testing.assert_array_equal(cupyconv.convolve(a, b, mode),
                                  cupyconv.convolve(a, b, mode, method=chosen))


# -------------------------------------------------------------------- axes

@st.composite
def axes_operands(draw, dtype):
    """Operands of rank 2-4 with a non-empty set of convolved axes; every
    other axis is n in one operand and n or 1 in the other (broadcasting
    batch axes, including a per-batch kernel when in2's is n)."""
    rank = draw(st.integers(2, 4))
    axes = draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
    s1, s2 = [], []
    for ax in range(rank):
        if ax in axes:
            s1.append(draw(st.integers(1, 5)))
            s2.append(draw(st.integers(1, 4)))
        else:
            n = draw(st.integers(1, 3))
            which = draw(st.sampled_from(["both", "in1", "in2"]))
            s1.append(1 if which == "in2" else n)
            s2.append(1 if which == "in1" else n)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    a, b = random_array(rng, tuple(s1), dtype), random_array(rng, tuple(s2), dtype)
    # scipy accepts negative axis numbers too
    axes = [ax - rank if draw(st.booleans()) else ax for ax in axes]
    return a, b, axes


def _fftconvolve_quirk(a, b, axes, mode):
    """Cases where ``scipy.signal.fftconvolve(axes=)`` departs from
    ``scipy.signal.convolve`` semantics (which cupyconv follows):

    * ``valid``: fftconvolve drops convolved axes of length 1 before the
      "one must cover the other" check, so (1, 2) vs (2, 1) returns a result
      where ``convolve`` raises ValueError;
    * ``same``: fftconvolve crops *every* axis to ``in1.shape``, so a batch
      axis that in2 broadcasts (in1 has 1, in2 has n) loses n - 1 elements.
    """
    nd = a.ndim
    conv = {ax % nd for ax in axes}
    if mode == "valid":
        return any((a.shape[i] == 1) != (b.shape[i] == 1) for i in conv)
    if mode == "same":
        return any(a.shape[i] == 1 < b.shape[i] for i in range(nd) if i not in conv)
    return False


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex128"])
@pytest.mark.parametrize("method", METHODS)
@given(data=st.data(), mode=st.sampled_from(MODES))
def test_axes_matches_fftconvolve(dtype, method, data, mode):
    a, b, axes = data.draw(axes_operands(dtype))

    def body(sig, m):
        if sig is scipy.signal:
            return sig.fftconvolve(a, b, mode=mode, axes=axes)
        return sig.convolve(a, b, mode=mode, method=m, axes=axes)

    if valid_mode_rejects(a.shape, b.shape, mode, axes):
        with pytest.raises(ValueError, match="For 'valid' mode"):
            cupyconv.convolve(a, b, mode=mode, method=method, axes=axes)
        return
    if _fftconvolve_quirk(a, b, axes, mode):
        # cupyconv alone, against the reference (scipy.signal.convolve semantics)
        yc = cupyconv.convolve(a, b, mode=mode, method=method, axes=axes)
        check_against_reference(yc, a, b, mode, False, _algorithm(method), axes=axes)
        return
    res = dual_run(body, method)
    assert res is not None, "both raised on operands scipy's convolve accepts"
    ys, yc = res
    assert yc.shape == ys.shape
    assert yc.dtype == np.result_type(a, b)
    check_against_reference(ys, a, b, mode, False, "fft", axes=axes, what="scipy fftconvolve")
    check_against_reference(yc, a, b, mode, False, _algorithm(method),
                            axes=axes, what=f"cupyconv {method}")


@pytest.mark.parametrize("method", METHODS)
@given(data=st.data(), mode=st.sampled_from(MODES))
def test_correlate_axes_is_per_batch_correlate(method, data, mode):
    """With ``axes``, each batch element is an independent scipy correlate."""
    a, b, axes = data.draw(axes_operands("complex128"))
    if valid_mode_rejects(a.shape, b.shape, mode, axes):
        with pytest.raises(ValueError, match="For 'valid' mode"):
            cupyconv.correlate(a, b, mode=mode, method=method, axes=axes)
        return
    y = cupyconv.correlate(a, b, mode=mode, method=method, axes=axes)
    check_against_reference(y, a, b, mode, True, _algorithm(method),
                            axes=axes, what=f"correlate {method}")


#: ``(in1 shape, in2 shape, axes)`` where no convolved axis has both operands longer than
#: 1 (``method="fft"`` computes the exact broadcast product) and a batch axis broadcasts.
BROADCAST_PRODUCT_CASES = [
    ((1, 1), (2, 2), [1]),          # in1 shorter than the kernel, in2's batch axis 2
    ((1, 1, 1), (1, 2, 2), [1]),
    ((2, 1), (1, 3), [1]),          # in1's batch axis 2, one shared kernel
    ((1, 3), (2, 1), [1]),          # a one-tap kernel per batch element
]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("correlate", [False, True])
@pytest.mark.parametrize("s1,s2,axes", BROADCAST_PRODUCT_CASES)
def test_broadcast_product_keeps_broadcast_batch_axes(method, mode, correlate, s1, s2, axes):
    """Every method gives ``scipy.signal.convolve``'s shape and values, the batch axes at
    their broadcast extent in ``same`` mode too (SciPy's ``fftconvolve`` alone crops
    them to ``in1``'s)."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal(s1) + 1j * rng.standard_normal(s1)
    b = rng.standard_normal(s2) + 1j * rng.standard_normal(s2)
    fn = cupyconv.correlate if correlate else cupyconv.convolve
    if valid_mode_rejects(a.shape, b.shape, mode, axes):
        with pytest.raises(ValueError, match="For 'valid' mode"):
            fn(a, b, mode=mode, method=method, axes=axes)
        return
    y = fn(a, b, mode=mode, method=method, axes=axes)
    check_against_reference(y, a, b, mode, correlate, _algorithm(method), axes=axes,
                            what=f"{fn.__name__} {method}")


def test_axes_per_batch_kernel_equals_loop():
    """A per-batch kernel (in2's batch axis is n) is one scipy call per row."""
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((3, 9)), rng.standard_normal((3, 4))
    for fn in ("convolve", "correlate"):
        y = getattr(cupyconv, fn)(a, b, axes=[1], method="direct")
        loop = np.stack([getattr(scipy.signal, fn)(a[i], b[i], method="direct")
                         for i in range(3)])
        absconv = np.stack([scipy.signal.convolve(np.abs(a[i]), np.abs(b[i])) for i in range(3)])
        # both sides are within the elementwise bound of the exact result
        assert (np.abs(y - loop) <= 2 * elementwise_bound(absconv, 4, y.dtype)).all(), fn
