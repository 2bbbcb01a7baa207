"""Kernels that are a short sum of outer products: ``separable`` with several terms.

A difference of Gaussians is two outer products; a 2-D kernel of matrix rank ``r`` is
``r``.  ``separable_factors.low_rank`` finds such a sum (Jennrich's exact terms from 3-D
up, else sequential SVD) and the passes run once per term (the CUDA path's last pass of
each later term adds into the result):

- detection: the terms reconstruct the kernel within ``term_tolerance``, their norms add
  up to at most ``CANCELLATION_LIMIT`` times the kernel's (sequential SVD's are
  orthogonal), integer kernels and kernels needing more than ``MAX_TERMS`` terms are
  refused;
- ``term_limit``: terms only where they save taps, and under ``auto`` only within the
  cost model's ``slack`` (with ``TERM_MARGIN``);
- results on NumPy, emulated (and a GPU when present) against the float64 reference in
  every boundary mode, with stride, dilation and depthwise groups whose kernels have
  different term counts;
- the dispatcher: the slack is against the next candidate, and data the FFT cannot take
  (a NaN) gives the terms the slack against the candidate after it.

Tolerance: two terms whose norms add up to 1.9x the kernel's (widths 1 and 2), each
within the bound of ``test_separable_cuda.py`` (its passes round as one outer
product's): twice that bound.
"""
from __future__ import annotations

import math
from functools import reduce

import numpy as np
import pytest
from hypothesis import event, given, settings, strategies as st

import cupyconv
from cupyconv.backends import separable_factors as sf
from cupyconv.backends.base import Backend
from cupyconv.core.problem import ConvProblem, Operands
from cupyconv.dispatch import backend_for, run
from cupyconv.dispatch.dispatcher import Choice, ranked_for_data
from cupyconv.ndimage.filters import gaussian_kernel1d
from helpers import PADDING_MODES, conv_bounds, ref_conv, rel_norm_error
from test_separable_cuda import tolerance


def outer(*factors):
    return reduce(np.multiply.outer, factors)


def dog(ndim, radius=3, s1=1.0, s2=2.0):
    """A difference of two isotropic Gaussians: two outer products."""
    return (outer(*[gaussian_kernel1d(s1, 0, radius)] * ndim)
            - outer(*[gaussian_kernel1d(s2, 0, radius)] * ndim))


def problem_for(kernel_shape, **kw):
    nd = len(kernel_shape)
    return ConvProblem.create(x_shape=(1, 1) + (16,) * nd, w_shape=(1, 1) + tuple(kernel_shape),
                              **kw)


# ------------------------------------------------------------------- detection


def test_low_rank_terms_rebuild_the_kernel_without_cancelling(rng):
    """Jennrich's exact terms in 3-D and up (a DoG: two in any rank; a random sum of three
    outer products: three), bounded in size; sequential SVD's orthogonal terms in 2-D and
    where the exact terms would cancel (Gaussians of close widths)."""
    random_rank3 = sum(outer(rng.standard_normal(7), rng.standard_normal(6)) for _ in range(3))
    random_cp3 = sum(outer(*[rng.standard_normal(5) for _ in range(3)]) for _ in range(3))
    close = dog(3, 3, 1.0, 1.1)
    cplx = sum(outer(*[rng.standard_normal(n) + 1j * rng.standard_normal(n) for n in (5, 4, 6)])
               for _ in range(2))
    cases = ((dog(2), 2, True), (random_rank3, 3, True), (dog(3), 2, False),
             (dog(4, 2), 2, False), (dog(5, 2), 2, False), (random_cp3, 3, False),
             (close, 4, True), (cplx, 2, False))
    for kernel, count, orthogonal in cases:
        for dtype in ((np.complex128, np.complex64) if kernel.dtype.kind == "c"
                      else (np.float64, np.float32)):
            k = kernel.astype(dtype)
            terms, err = sf.low_rank(k, dtype)
            assert terms is not None and len(terms) == count, (kernel.shape, dtype)
            limit = sf.ROUNDOFF_UNITS * np.finfo(dtype).eps * math.sqrt(k.size)
            assert err <= limit and sf.term_tolerance(k.shape, dtype) == limit
            parts = [outer(*[f.astype(np.complex128) for f in t]) for t in terms]
            norm = np.linalg.norm(k.astype(np.complex128))
            assert np.linalg.norm(sum(parts) - k) <= limit * norm * 1.01
            assert sum(np.linalg.norm(a) for a in parts) <= sf.CANCELLATION_LIMIT * norm
            for i, a in enumerate(parts):
                for b in parts[i + 1:] if orthogonal else ():
                    assert abs(np.vdot(a, b)) <= 1e-5 * norm ** 2
    assert sf.low_rank(rng.standard_normal((3, 3, 3)), np.float64)[0] is None   # 9 terms
    assert sf.low_rank(np.array([[1, 2], [3, 5]]), np.int64)[0] is None        # exact only
    noisy = dog(2) + 1e-9 * rng.standard_normal((7, 7))
    assert len(sf.low_rank(noisy, np.float64)[0]) == 7        # full rank: every 7x7 is
    p = problem_for((7, 7))                                   # 7 terms, but 3 save taps
    with pytest.raises(sf.NotSeparable, match="no sum of up to 3 outer products"):
        sf.kernel_terms(p, noisy[None, None], sf.term_limit(p))
    assert len(sf.kernel_terms(p, dog(2)[None, None], sf.term_limit(p))) == 2


def test_jennrich_misses_are_polished_or_contracted_again():
    """Random sums of 3 outer products of 4x4x3 (factors of magnitude 0.5-1.5, random
    signs: no cancellation), real and complex: every one found within the tolerance (one
    pair of Jennrich contractions without polish missed 2 of these 100)."""
    rng = np.random.default_rng(7)

    def factor(n, cplx):
        f = rng.uniform(0.5, 1.5, n) * rng.choice((-1.0, 1.0), n)
        return f + 1j * rng.uniform(0.5, 1.5, n) if cplx else f
    for cplx in (False, True):
        for _ in range(50):
            kernel = sum(outer(*[factor(n, cplx) for n in (4, 4, 3)]) for _ in range(3))
            terms, err = sf.low_rank(kernel, kernel.dtype)
            assert terms is not None and len(terms) == 3, err


def test_term_limit_saves_taps_and_respects_the_slack():
    assert sf.term_limit(problem_for((3, 3))) == 1          # 2 * 6 taps > 9
    assert sf.term_limit(problem_for((9, 9))) == 4          # 4 * 18 < 81 <= 5 * 18
    assert sf.term_limit(problem_for((7, 7, 7))) == sf.MAX_TERMS
    p = problem_for((9, 9))
    assert sf.term_limit(p, 2 * sf.TERM_MARGIN - 1e-9) == 1
    assert sf.term_limit(p, 2 * sf.TERM_MARGIN) == 2
    assert sf.term_limit(p, 0.1) == 1                        # one outer product: always


def test_explicit_refusal_names_the_terms_tried(rng):
    x = rng.standard_normal((20, 20))
    with pytest.raises(ValueError, match=r"relative error of .* no sum of up to 2 outer "
                                         r"products is within a relative error of 8\.88e-15"):
        cupyconv.convolve(x, rng.standard_normal((5, 5)), method="separable")


# --------------------------------------------------------------------- results


@pytest.mark.parametrize("mode", PADDING_MODES)
@pytest.mark.parametrize("rank", [2, 3])
def test_sum_of_terms_matches_reference(any_dev, rank, mode, rng):
    """Depthwise, two groups with different kernels (a DoG and a single Gaussian: the
    second group's missing term is zero), stride, dilation and asymmetric padding; a
    nonzero ``cval`` (one kernel for both groups: the per-term factor sums must agree)."""
    radius = 3 if rank == 2 else 2
    k1 = dog(rank, radius)
    k2 = outer(*[gaussian_kernel1d(1.5, 0, radius)] * rank)
    cval = 1.5 if mode == "constant" else 0.0
    w = np.stack([k1, k1 if cval else k2])[:, None]
    shape = (11, 10, 9)[:rank]
    kw = dict(groups=2, stride=(2,) + (1,) * (rank - 1), dilation=(1, 2) + (1,) * (rank - 2),
              padding=((2, 1), (3, 0), (1, 2))[:rank], padding_mode=mode, cval=cval)
    x = rng.standard_normal((2, 2) + shape)
    ref = ref_conv(x, w, **kw)
    for dtype in (np.float64, np.float32, np.complex128):
        with any_dev.scope():
            y = cupyconv.conv(any_dev.to_dev(x.astype(dtype)), any_dev.to_dev(w.astype(dtype)),
                              method="separable", **kw)
        err = rel_norm_error(any_dev.to_host(y), ref, conv_bounds(x, w, **kw).abs_conv)
        assert err <= 2 * tolerance(dtype, k1.shape), (dtype, err)

# ------------------------------------------------------------------------ auto


class _Judge:
    """A backend whose ``separable`` needs two terms (``slack >= 2.5``)."""

    name = "numpy"
    scan, check = Backend.scan, Backend.check        # the data rules' host scan

    def __init__(self):
        self.slacks = []

    def data_ok(self, problem, algorithm, operands, slack=math.inf):
        if algorithm != "separable":
            return True, ""
        self.slacks.append(slack)
        return slack >= 2 * sf.TERM_MARGIN, "needs two terms"


def test_slack_is_against_the_next_candidate_the_data_allows(rng):
    p = problem_for((7, 7))
    choice = Choice("separable", ("separable", "fft", "direct"),
                    {"separable": 1.0, "fft": 1.5, "direct": 10.0}, {}, 0)
    finite = Operands(activation=rng.standard_normal((1, 1, 16, 16)), filter=dog(2)[None, None])
    judge = _Judge()
    assert ranked_for_data(choice, p, finite, backend=judge) == ["fft", "direct"]
    assert judge.slacks == [1.5]
    nan = finite.replace(activation=finite.activation.copy())
    nan.activation[0, 0, 3, 3] = np.nan
    judge = _Judge()
    assert ranked_for_data(choice, p, nan, backend=judge) == ["separable", "direct"]
    assert judge.slacks == [1.5, 10.0]                       # the FFT is out: rescored
    judge = _Judge()
    assert ranked_for_data(choice, p, finite, every=True, backend=judge)[0] == "separable"
    assert judge.slacks == [math.inf]


def test_auto_runs_terms_where_the_fft_cannot(rng):
    """A NaN keeps the FFT out; a 3-D DoG as four terms of passes beats direct's 343 taps
    (the cost model's choice), and the NaN stays local."""
    x = rng.standard_normal((1, 1, 40, 40, 40))
    x[0, 0, 20, 20, 20] = np.nan
    w = dog(3)[None, None]
    problem, *_ = cupyconv.api.conv.prepare_conv(
        x, w, None, stride=1, padding="same", dilation=1, groups=1, padding_mode="constant",
        cval=0, layout="channels_first")
    y, name = run(problem, Operands(activation=x, filter=w), backend_for(np))
    assert name == "separable"
    assert np.isnan(y).sum() == 7 ** 3
    ref = cupyconv.conv(x, w, padding="same", method="direct")
    np.testing.assert_allclose(y, ref, atol=1e-12)


# ------------------------------------------------------------------ properties


@st.composite
def two_term_case(draw):
    """A depthwise problem whose kernels are sums of two random outer products (one
    kernel for every group under a nonzero ``cval``), large enough for two terms to save
    taps (``term_limit``), with random geometry, boundary, layout and dtype."""
    rank = draw(st.integers(2, 3))
    ks = [draw(st.integers(5, 6)) if rank == 2 else draw(st.integers(3, 4))
          for _ in range(rank)]
    groups = draw(st.sampled_from((1, 2)))
    stride = [draw(st.integers(1, 2)) for _ in range(rank)]
    dilation = [draw(st.integers(1, 2)) for _ in range(rank)]
    pads = [(draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(rank)]
    mode = draw(st.sampled_from(PADDING_MODES))
    shape = []
    for k, d, (pb, pa) in zip(ks, dilation, pads):
        lo = max(1, d * (k - 1) + 1 - pb - pa, 2 if mode == "reflect" else 1)
        shape.append(draw(st.integers(lo, lo + 3)))
    kw = dict(groups=groups, stride=stride, dilation=dilation, padding=pads,
              padding_mode=mode, layout=draw(st.sampled_from(("channels_first",
                                                              "channels_last"))))
    if mode == "constant":
        kw["cval"] = draw(st.sampled_from((0.0, 2.0)))
    dtype = draw(st.sampled_from(("float64", "float32", "complex128")))
    return (draw(st.integers(1, 2)), groups) + tuple(shape), ks, dtype, kw, draw(
        st.integers(0, 2**16))


@settings(max_examples=30, deadline=None)
@given(case=two_term_case(), where=st.sampled_from(("numpy", "emulated")))
def test_two_term_kernels_match_reference(case, where):
    """Every geometry, boundary and layout; the error bound is the one-product bound
    times the terms' total size (at most ``CANCELLATION_LIMIT``) per term."""
    if where not in cupyconv.available_backends():
        event(f"{where} not available")
        return
    x_shape, ks, dtype, kw, seed = case
    rng = np.random.default_rng(seed)
    cplx = np.dtype(dtype).kind == "c"

    def vec(n):
        v = rng.standard_normal(n)
        return v + 1j * rng.standard_normal(n) if cplx else v

    kernels = [sum(outer(*[vec(k) for k in ks]) for _ in range(2))
               for _ in range(1 if kw.get("cval") else kw["groups"])]
    w = np.stack(kernels * (kw["groups"] if kw.get("cval") else 1))[:, None]
    x = rng.standard_normal(x_shape) + (1j * rng.standard_normal(x_shape) if cplx else 0)
    if kw["layout"] == "channels_last":
        x, w = np.moveaxis(x, 1, -1).copy(), np.moveaxis(w, 1, -1).copy()
    ref = ref_conv(x, w, **kw)
    with cupyconv.use_backend(where):
        y = cupyconv.conv(x.astype(dtype), w.astype(dtype), method="separable", **kw)
    err = rel_norm_error(np.asarray(y), ref, conv_bounds(x, w, **kw).abs_conv)
    event(f"{len(ks)}-D {kw['padding_mode']}")
    assert err <= 2 * sf.CANCELLATION_LIMIT * tolerance(dtype, ks), (err, kw)


class _DeviceLike(np.ndarray):
    """A NumPy array that counts its copies to the host (``.get()``, as CuPy's)."""

    copies = 0

    def get(self):
        type(self).copies += 1
        return np.array(self)


def test_device_weights_are_copied_to_the_host_once_per_call(rng):
    """``auto`` reads a separable kernel's values twice (the data check, then the run;
    three times when the slack check is retried without the FFT): one host copy per
    dispatched call (``runner.host_copy`` inside the dispatcher's ``call_scope``), and a
    new one for the next call, which may see changed weights."""
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("the emulated CUDA path is not available here")
    g = gaussian_kernel1d(1.0, 0, 3).astype(np.float32)
    x = rng.standard_normal((1, 1, 16, 16, 16, 16)).astype(np.float32)
    w = outer(g, g, g, g)[None, None].astype(np.float32).view(_DeviceLike)
    problem, *_ = cupyconv.api.conv.prepare_conv(
        x, w, None, stride=1, padding="same", dilation=1, groups=1, padding_mode="constant",
        cval=0, layout="channels_first")
    backend = backend_for(np, "emulated")
    _DeviceLike.copies = 0
    y, name = run(problem, Operands(activation=x, filter=w), backend)
    assert name == "separable" and _DeviceLike.copies == 1
    run(problem, Operands(activation=x, filter=w), backend)
    assert _DeviceLike.copies == 2
    backend.runner.host_copy(w)
    backend.runner.host_copy(w)                   # outside a call: every read copies
    assert _DeviceLike.copies == 4
    ref = cupyconv.conv(x, np.asarray(w), padding="same", method="direct")
    np.testing.assert_allclose(y, ref, rtol=0, atol=1e-5 * np.abs(ref).max())
