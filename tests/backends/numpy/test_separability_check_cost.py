"""The separability check's cost (``backends/separable_factors``): a rank bound before
any SVD, the decision cached by a digest of the kernel whatever its size, the SVDs with
BLAS at one thread.  Counted (``numpy.linalg.svd`` patched), never timed.

The bound (``_rank_exceeds``) is only ever below the unfolding's true singular values,
so it never refuses a kernel the SVDs would accept: a sum of up to ``MAX_TERMS`` outer
products passes it at every rank it may have, a random kernel does not.
"""
from __future__ import annotations

from functools import reduce

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import cupyconv
from cupyconv.backends import separable_factors as sf
from cupyconv.backends.numpy import NumpyBackend, threads
from cupyconv.core.problem import ConvProblem, Operands

#: A kernel over 65,536 taps (41^3 = 68,921): the size the check once ran uncached for.
BIG = (41, 41, 41)


@pytest.fixture
def svd_calls(monkeypatch):
    """Every ``numpy.linalg.svd`` call, with whether BLAS was held at one thread."""
    calls, real = [], np.linalg.svd

    def counting(*args, **kwargs):
        calls.append(threads._USERS[0] > 0)
        return real(*args, **kwargs)
    monkeypatch.setattr(np.linalg, "svd", counting)
    sf.clear_cache()
    yield calls
    sf.clear_cache()


def _gaussian(shape):
    axes = [np.exp(-0.5 * ((np.arange(n) - n // 2) / (n / 6)) ** 2) for n in shape]
    return reduce(np.multiply.outer, axes)


def _separable_check(x_shape, kernel):
    """The NumPy backend's data check for ``separable`` on a single-channel problem."""
    problem = ConvProblem.create(x_shape=(1, 1) + x_shape, w_shape=(1, 1) + kernel.shape,
                                 padding=[k // 2 for k in kernel.shape], dtype=kernel.dtype)
    ops = Operands(activation=np.ones((1, 1) + x_shape, kernel.dtype), filter=kernel[None, None])
    return NumpyBackend().data_ok(problem, "separable", ops)


def test_a_random_large_kernel_is_refused_without_any_svd(svd_calls, rng):
    k = rng.standard_normal(BIG)
    for _ in range(3):
        ok, why = _separable_check((48, 48, 48), k)
        assert not ok and "rank bound" in why
    assert svd_calls == []


def test_a_large_separable_kernel_is_factored_once(svd_calls):
    k = _gaussian(BIG)
    assert _separable_check((48, 48, 48), k)[0]
    first = len(svd_calls)
    assert first >= 3                             # one per axis
    if threads.blas_controller() is not None:     # BLAS at one thread (threadpoolctl)
        assert all(svd_calls)
    for _ in range(2):
        assert _separable_check((48, 48, 48), k.copy())[0]   # equal bytes: cached
    assert len(svd_calls) == first
    changed = k.copy()
    changed[0, 0, 0] *= 1.5                       # other bytes: checked afresh
    _separable_check((48, 48, 48), changed)
    assert len(svd_calls) > first


def test_auto_on_a_large_random_kernel_runs_no_svd(svd_calls, rng):
    """The public call: ``auto`` ranks separable first for a 41^3 kernel, the data check
    refuses it by the bound, and the result is the FFT's (SciPy's answer)."""
    import scipy.signal
    a = rng.standard_normal((24, 24, 24))
    k = rng.standard_normal(BIG)
    for _ in range(2):
        y = cupyconv.convolve(a, k, mode="same")
    assert svd_calls == []
    want = scipy.signal.fftconvolve(a, k, mode="same")
    np.testing.assert_allclose(y, want, rtol=0, atol=1e-9 * np.abs(want).max())


def test_explicit_separable_names_the_measured_error(rng):
    """``method="separable"`` on a kernel the bound refuses still names its error."""
    with pytest.raises(ValueError, match=r"relative error of 0\.\d+ \(tolerance"):
        cupyconv.convolve(np.ones((6, 6)), rng.standard_normal((5, 5)), method="separable")


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(2, 9), min_size=2, max_size=4),
       rank=st.integers(1, sf.MAX_TERMS), seed=st.integers(0, 2**32 - 1),
       complex_=st.booleans())
def test_the_bound_never_refuses_a_short_sum_of_outer_products(shape, rank, seed, complex_):
    rng = np.random.default_rng(seed)

    def vector(n):
        v = rng.standard_normal(n)
        return v + 1j * rng.standard_normal(n) if complex_ else v
    k = sum(reduce(np.multiply.outer, [vector(n) for n in shape]) for _ in range(rank))
    k = k / np.abs(k).max()
    norm = float(np.linalg.norm(k))
    tol = sf.term_tolerance(k.shape, np.float64) * norm
    for r in range(rank, sf.MAX_TERMS + 1):
        assert not sf._rank_exceeds(k, r, tol)
    if rank == 1:
        assert sf.factor(k, k.dtype)[0] is not None


@settings(max_examples=20, deadline=None)
@given(rows=st.integers(sf.MAX_TERMS + 1, 20), rest=st.integers(sf.MAX_TERMS + 1, 400),
       seed=st.integers(0, 2**32 - 1))
def test_the_bound_refuses_a_random_kernel(rows, rest, seed):
    """A random unfolding has full rank: refused at rank 1 and at ``MAX_TERMS``."""
    k = np.random.default_rng(seed).standard_normal((rows, rest))
    tol = sf.term_tolerance(k.shape, np.float32) * float(np.linalg.norm(k))
    assert sf._rank_exceeds(k, 1, tol) and sf._rank_exceeds(k, sf.MAX_TERMS, tol)


@pytest.fixture
def factor_calls(monkeypatch):
    """Every :func:`kernel_terms` call the cached verdict makes."""
    calls, real = [], sf.kernel_terms

    def counting(*args, **kwargs):
        calls.append(args[1].copy())
        return real(*args, **kwargs)
    monkeypatch.setattr(sf, "kernel_terms", counting)
    sf.clear_cache()
    yield calls
    sf.clear_cache()


@pytest.mark.parametrize("kernel", [(3, 3), (5, 5, 5), BIG], ids=["3x3", "5^3", "41^3"])
def test_auto_decides_on_a_kernel_once_and_afresh_on_new_bytes(factor_calls, kernel, rng):
    """``auto``'s verdict on ``separable`` is cached by the kernel's bytes (small kernels)
    or their digest (large): a repeated call factors nothing and returns the same refusal;
    a kernel of other bytes, same shape, is decided afresh (here an outer product, which
    passes)."""
    k = rng.standard_normal(kernel)
    shape = tuple(2 * n for n in kernel)
    first = _separable_check(shape, k)
    assert not first[0] and "cannot run this kernel" in first[1]
    for _ in range(3):
        assert _separable_check(shape, k.copy()) == first
    assert len(factor_calls) == 1
    assert _separable_check(shape, _gaussian(kernel)) == (True, "")
    assert len(factor_calls) == 2


def test_the_cached_verdict_is_the_uncached_one(rng):
    """The same ``(ok, reason)`` as :func:`kernel_terms` decides without the cache, for a
    kernel whose flipped taps differ (true convolution and correlation are both keys)."""
    k = rng.standard_normal((1, 1, 4, 3))
    for flip in (True, False):
        problem = ConvProblem.create(x_shape=(1, 1, 8, 8), w_shape=k.shape, flip=flip,
                                     dtype=np.float64)
        sf.clear_cache()
        try:
            want = (len(sf.kernel_terms(problem, k, 2, exact_error=False)), "")
        except sf.NotSeparable as exc:
            want = (0, str(exc))
        sf.clear_cache()
        assert sf.term_count(problem, k, 2) == want
        assert sf.term_count(problem, k, 2) == want             # from the cache
