"""The ``separable`` algorithm on the CUDA path (``emulated``, and ``cuda`` on a GPU).

One direct-kernel launch per kernel axis (``backends/cuda/separable.py``) must give the
N-D problem's result:

- ``conv`` depthwise / single channel, ranks 2-4, both layouts, every boundary mode
  (constant with a nonzero ``cval``), stride and dilation, float/complex/integer dtypes
  (hypothesis, plus one fixed case per mode and rank), against the float64 tap-loop
  reference of ``tests/helpers.py``; rank 1 is declined with the reason;
- ``convolve``/``correlate`` in every mode (flips, a batch axis, a one-tap axis whose
  scalar is folded into the last pass), integers exactly;
- ``cupyconv.ndimage`` on the emulated backend against ``scipy.ndimage``: the 1-D-pass
  filters (``gaussian_filter``, ``uniform_filter``) and ``correlate`` with an N-D
  outer-product kernel, which ``auto`` runs as separable passes (spied on);
- refusals: a kernel that is not an outer product raises ``NotSeparable`` naming the
  reconstruction error; depthwise factor sums that differ under a ``cval``; an integer
  ``cval`` the scaled passes cannot represent;
- ``auto``: chooses separable for a large separable Gaussian (the cost model prices the
  passes below direct and FFT) and never for a kernel that does not factor.

Tolerance (floats): the relative-norm error, scaled by ``|x| conv |w|`` (the summed
magnitudes, since outputs may cancel), is at most ``2 u (sum_a K_a + R + 16 T)``:
each pass is a ``K_a``-term sum (Higham's ``gamma_K``, times 2 for products and
complex parts), each of the ``R`` stored intermediates rounds once, and the factors'
outer product differs from the kernel by up to ``ROUNDOFF_UNITS = 8`` units of
roundoff (``16 u``) of its norm, which a ``T``-tap kernel spreads by at most ``T``
(``||dw||_1 <= T ||dw||_inf``).  float16 adds its final rounding (``2**-11``).  An
indexing, boundary or ``cval`` error is O(1) relative, orders above every bound.
"""
from __future__ import annotations

import math
from functools import reduce

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import cupyconv
from cupyconv._kernels import launch
from cupyconv.backends.separable_factors import NotSeparable
from cupyconv.core.problem import ConvProblem, Operands
from cupyconv.dispatch import backend_for, dispatcher
from cupyconv.ndimage.filters import gaussian_kernel1d
from helpers import (FINAL_ROUNDING, PADDING_MODES, conv_bounds, forget_launches, ref_conv,
                     ref_convolve, rel_norm_error, signal_bounds, unit_roundoff)

EXACT = ("int64", "int8", "uint64")


@pytest.fixture
def emulated():
    """Skip where the CPU emulation of the kernels (g++) is not available."""
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("the emulated CUDA path is not available here")
    return backend_for(np, "emulated")


def outer(*factors):
    return reduce(np.multiply.outer, factors)


def tolerance(dtype, kernel_shape):
    """The bound of the module docstring."""
    dtype = np.dtype(dtype)
    u = unit_roundoff(dtype)
    t = math.prod(kernel_shape)
    return 2 * u * (sum(kernel_shape) + len(kernel_shape) + 16 * t) + FINAL_ROUNDING.get(dtype, 0)


def check(dev, y, ref, abs_conv, dtype, kernel_shape, what=""):
    y = dev.to_host(y)
    assert y.shape == ref.shape, (what, y.shape, ref.shape)
    assert y.dtype == np.dtype(dtype), (what, y.dtype, dtype)
    if np.dtype(dtype).kind in "biu":
        # the reference is exact in int64 (small operands); the cast wraps as the engine's
        np.testing.assert_array_equal(y, np.asarray(ref).astype(dtype), err_msg=what)
        return
    err = rel_norm_error(y, ref, abs_conv)
    tol = tolerance(dtype, kernel_shape)
    assert err <= tol, f"{what}: relative norm error {err:.3g} > {tol:.3g}"


def factor_vectors(rng, n, dtype):
    """One 1-D factor of length ``n``: small integers for the exact dtypes and float16
    (whose rounded outer products would not factor in float32), normal values else."""
    dtype = np.dtype(dtype)
    if dtype.kind in "biu" or dtype == np.float16:
        lo = 0 if dtype.kind == "u" else -2
        f = rng.integers(lo, 3, n)
        f[rng.integers(n)] = 1 if lo == 0 else rng.choice([-1, 1, 2])   # never all zero
        return f.astype(np.float64)
    f = rng.standard_normal(n)
    if dtype.kind == "c":
        f = f + 1j * rng.standard_normal(n)
    return f


def data(rng, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind in "biu":
        lo = 0 if dtype.kind == "u" else -3
        return rng.integers(lo, 4, shape).astype(dtype)
    a = rng.standard_normal(shape)
    if dtype.kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


def depthwise_weights(rng, groups, ks, dtype, same):
    """``(G, 1, *ks)`` outer products, one per group; with ``same`` one kernel for every
    group (a nonzero ``cval`` needs the groups' normalised factors to share their sums,
    ``separable_factors.kernel_factors``)."""
    ws = [outer(*[factor_vectors(rng, k, dtype) for k in ks])
          for _ in range(1 if same else groups)]
    return np.stack(ws * (groups if same else 1))[:, None].astype(dtype)


def run_conv(dev, x, w, kw, method="separable"):
    if kw.get("layout") == "channels_last":
        x, w = np.moveaxis(x, 1, -1).copy(), np.moveaxis(w, 1, -1).copy()
    ref = ref_conv(x, w, **kw, dtype=np.int64 if x.dtype.kind in "biu" else None)
    with dev.scope():
        y = cupyconv.conv(dev.to_dev(x), dev.to_dev(w), method=method, **kw)
    bounds = conv_bounds(x, w, **kw) if x.dtype.kind not in "biu" else None
    return y, ref, None if bounds is None else bounds.abs_conv


# ------------------------------------------------------------------------ conv


@st.composite
def depthwise_case(draw):
    rank = draw(st.integers(2, 4))
    groups = draw(st.sampled_from((1, 2, 3)))
    ks = [draw(st.integers(1, 3)) for _ in range(rank)]
    for a in draw(st.permutations(range(rank)))[:2]:        # two kernel axes or more
        ks[a] = max(ks[a], 2)
    stride = [draw(st.integers(1, 2)) for _ in range(rank)]
    dilation = [draw(st.integers(1, 2)) for _ in range(rank)]
    pads = [(draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(rank)]
    mode = draw(st.sampled_from(PADDING_MODES))
    extra = 2 if rank == 4 else 4
    shape = []
    for k, d, (pb, pa) in zip(ks, dilation, pads):
        lo = max(1, d * (k - 1) + 1 - pb - pa, 2 if mode == "reflect" else 1)
        shape.append(draw(st.integers(lo, lo + extra)))
    dtype = draw(st.sampled_from(("float64", "float32", "complex128", "float16") + EXACT))
    kw = dict(groups=groups, stride=stride, dilation=dilation, padding=pads, padding_mode=mode,
              layout=draw(st.sampled_from(("channels_first", "channels_last"))))
    if mode == "constant":
        kw["cval"] = draw(st.sampled_from((0, 2, 5)))
    return (draw(st.integers(1, 2)), groups) + tuple(shape), ks, dtype, kw, draw(
        st.integers(0, 2**16))


@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=depthwise_case())
def test_depthwise_conv_matches_reference(dev, case):
    """Random geometry, boundary, layout and dtype; ``groups == C_in`` (1: single channel)."""
    x_shape, ks, dtype, kw, seed = case
    rng = np.random.default_rng(seed)
    x = data(rng, x_shape, dtype)
    w = depthwise_weights(rng, kw["groups"], ks, dtype, kw.get("cval", 0) != 0)
    y, ref, abs_conv = run_conv(dev, x, w, kw)
    check(dev, y, ref, abs_conv, dtype, ks, what=str(kw))


@pytest.mark.parametrize("layout", ["channels_first", "channels_last"])
@pytest.mark.parametrize("mode", PADDING_MODES)
@pytest.mark.parametrize("rank", [2, 3, 4])
def test_every_mode_rank_and_layout(dev, rng, rank, mode, layout):
    """Fixed cases: stride 2 on the first axis, dilation 2 on the second, asymmetric
    padding, three groups, a nonzero cval for ``constant``."""
    ks = (3, 2, 3, 2)[:rank]
    stride = (2,) + (1,) * (rank - 1)
    dilation = (1, 2) + (1,) * (rank - 2)
    pads = ((2, 1), (1, 3), (0, 2), (1, 0))[:rank]
    shape = (9, 8, 6, 5)[:rank] if rank < 4 else (7, 6, 5, 4)
    kw = dict(groups=3, stride=stride, dilation=dilation, padding=pads, padding_mode=mode,
              layout=layout)
    if mode == "constant":
        kw["cval"] = 1.5
    x = data(rng, (2, 3) + shape, np.float64)
    w = depthwise_weights(rng, 3, ks, np.float64, same=mode == "constant")
    y, ref, abs_conv = run_conv(dev, x, w, kw)
    check(dev, y, ref, abs_conv, np.float64, ks, what=f"{rank}-D {mode} {layout}")
    xi = data(rng, x.shape, np.int64)
    wi = depthwise_weights(rng, 3, ks, np.int64, same=mode == "constant")
    if mode == "constant":
        kw["cval"] = -4
    y, ref, _ = run_conv(dev, xi, wi, kw)
    check(dev, y, ref, None, np.int64, ks, what=f"int64 {rank}-D {mode} {layout}")


def test_empty_input_axis_with_constant_padding(dev, rng):
    """An empty input axis that constant padding extends: the pass along it reads only
    ``cval`` scaled by the earlier factors' sums."""
    x = np.zeros((1, 1, 5, 0))
    w = outer(np.array([1.0, -2.0, 4.0]), np.array([3.0, 0.5]))[None, None]
    kw = dict(padding=((1, 1), (2, 2)), cval=2.0)
    y, ref, _ = run_conv(dev, x, w, kw)
    assert ref.size and np.abs(ref).max() > 0
    np.testing.assert_allclose(dev.to_host(y), ref, rtol=1e-14)


def test_rank_one_is_declined(dev, rng):
    with dev.scope(), pytest.raises(ValueError, match="kernel over two axes or more"):
        cupyconv.convolve(dev.to_dev(rng.standard_normal(9)), dev.to_dev(np.ones(3)),
                          method="separable")


# -------------------------------------------------------- convolve / correlate

SIGNAL_CASES = [
    # (in1 shape, kernel factors' lengths, axes)          why
    ((9, 8), (3, 4), None),                               # 2-D, even kernel axis
    ((6, 5, 7), (2, 3, 2), None),                         # 3-D
    ((6, 5, 7), (3, 1, 4), None),                         # a one-tap axis: folded scalar
    ((5, 4, 4, 3), (2, 2, 3, 2), None),                   # 4-D
    ((3, 9, 7), (1, 3, 2), (1, 2)),                       # a batch axis, shared kernel
]


@pytest.mark.parametrize("case", SIGNAL_CASES, ids=lambda c: f"{c[0]}*{c[1]}ax{c[2]}")
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("dtype", ["float64", "complex128", "int64"])
def test_convolve_correlate(dev, rng, case, mode, dtype):
    shape, lengths, axes = case
    a = data(rng, shape, dtype)
    b = outer(*[factor_vectors(rng, n, dtype) for n in lengths]).astype(dtype)
    kernel = [n for i, n in enumerate(lengths) if axes is None or i in axes]
    for correlate, fn in ((False, cupyconv.convolve), (True, cupyconv.correlate)):
        ref = ref_convolve(a, b, mode, axes=axes, correlate=correlate,
                           dtype=np.int64 if dtype == "int64" else None)
        with dev.scope():
            y = fn(dev.to_dev(a), dev.to_dev(b), mode, "separable", axes=axes)
        abs_conv = None if dtype == "int64" else signal_bounds(
            a, b, mode, axes=axes, correlate=correlate).abs_conv
        check(dev, y, ref, abs_conv, dtype, kernel, what=f"{fn.__name__} {mode}")


# ------------------------------------------------------------------- ndimage

@pytest.mark.parametrize("mode", ["reflect", "mirror", "nearest", "wrap", "constant"])
def test_ndimage_filters_match_scipy(emulated, mode, rng):
    """``gaussian_filter``/``uniform_filter`` on the emulated backend: SciPy's passes, each
    a 1-D problem through the CUDA path's kernels."""
    scipy_ndimage = pytest.importorskip("scipy.ndimage")
    x = rng.standard_normal((11, 9, 7))
    with cupyconv.use_backend("emulated"):
        g = cupyconv.ndimage.gaussian_filter(x, (1.0, 0.7, 1.3), mode=mode, cval=0.5)
        u = cupyconv.ndimage.uniform_filter(x, (3, 4, 2), mode=mode, cval=-1.0)
    np.testing.assert_allclose(g, scipy_ndimage.gaussian_filter(x, (1.0, 0.7, 1.3), mode=mode,
                                                                cval=0.5), atol=1e-13)
    np.testing.assert_allclose(u, scipy_ndimage.uniform_filter(x, (3, 4, 2), mode=mode,
                                                               cval=-1.0), atol=1e-13)


def _spy_direct(monkeypatch):
    """The kernel shapes of the direct passes the ``separable`` programs build (the
    memoised programs forgotten, so that the next call builds its passes again)."""
    shapes = []
    real = launch.direct_program_on

    def spy(module, problem, *args, **kwargs):
        shapes.append(problem.kernel_shape)
        return real(module, problem, *args, **kwargs)
    forget_launches()
    monkeypatch.setattr(launch, "direct_program_on", spy)
    return shapes


def test_ndimage_correlate_runs_separable_passes(emulated, rng, monkeypatch):
    """An N-D outer-product kernel through ``cupyconv.ndimage.correlate`` (``auto``): four
    1-D direct launches, SciPy's result."""
    scipy_ndimage = pytest.importorskip("scipy.ndimage")
    g = gaussian_kernel1d(1.0, 0, 3)
    k = outer(g, g, g, g)
    x = rng.standard_normal((16, 16, 16, 16))
    shapes = _spy_direct(monkeypatch)
    with cupyconv.use_backend("emulated"):
        y = cupyconv.ndimage.correlate(x, k, mode="mirror")
    assert len(shapes) == 4 and all(sorted(s) == [1, 1, 1, 7] for s in shapes), shapes
    np.testing.assert_allclose(y, scipy_ndimage.correlate(x, k, mode="mirror"), atol=1e-12)


# ------------------------------------------------------------------ refusals

def test_not_separable_names_the_reconstruction_error(dev, rng):
    x, w = rng.standard_normal((9, 9, 9)), rng.standard_normal((3, 3, 3))
    with dev.scope():
        with pytest.raises(NotSeparable, match=r"relative error of 0\.\d+ \(tolerance .*units "
                                               r"of roundoff"):
            cupyconv.convolve(dev.to_dev(x), dev.to_dev(w), method="separable")
        with pytest.raises(NotSeparable, match="not an exact outer product"):
            cupyconv.convolve(dev.to_dev(x.astype(int)), dev.to_dev(np.array([[[1, 2], [3, 5]]])),
                              method="separable")
        with pytest.raises(ValueError, match="separable needs one filter per input channel"):
            cupyconv.conv(dev.to_dev(rng.standard_normal((1, 2, 8, 8))),
                          dev.to_dev(rng.standard_normal((3, 2, 3, 3))), method="separable")
        # auto runs another algorithm on the same kernel
        y = cupyconv.convolve(dev.to_dev(x), dev.to_dev(w))
    np.testing.assert_allclose(dev.to_host(y), ref_convolve(x, w), atol=1e-12)


def test_depthwise_cval_needs_one_factor_sum_per_axis(dev, rng):
    w = np.stack([outer(np.array([1.0, 2.0]), np.ones(3)),
                  outer(np.array([1.0, 5.0]), np.ones(3))])[:, None]
    x = rng.standard_normal((1, 2, 9, 9))
    kw = dict(groups=2, padding=1, cval=2.5)
    with dev.scope():
        with pytest.raises(NotSeparable, match="factor sum"):
            cupyconv.conv(dev.to_dev(x), dev.to_dev(w), method="separable", **kw)
        y = cupyconv.conv(dev.to_dev(x), dev.to_dev(w), **kw)           # auto: another one
    np.testing.assert_allclose(dev.to_host(y), ref_conv(x, w, **kw), atol=1e-12)


def test_integer_cval_the_passes_cannot_represent(emulated, rng):
    """int64 ``cval * (factor sums)`` past 2**53 is not exact as the kernels' float64 fill
    value: the explicit method refuses, ``auto`` runs another algorithm exactly."""
    big = 2**41 + 1              # times the first factor sum 8194: 2**54 + 2**42 + 8194
    w = outer(np.array([2**13 + 1, 1]), np.array([1, 1]))[None, None].astype(np.int64)
    x = rng.integers(-3, 4, (1, 1, 6, 6)).astype(np.int64)
    kw = dict(padding=1, cval=big)
    ref = ref_conv(x, w, **kw, dtype=object).astype(np.int64)
    with cupyconv.use_backend("emulated"):
        with pytest.raises(NotSeparable, match="not exactly representable"):
            cupyconv.conv(x, w, method="separable", **kw)
        np.testing.assert_array_equal(cupyconv.conv(x, w, **kw), ref)
        # a cval whose scaled value stays exact runs separable
        kw["cval"] = 7
        np.testing.assert_array_equal(cupyconv.conv(x, w, method="separable", **kw),
                                      ref_conv(x, w, **kw, dtype=np.int64))


# ----------------------------------------------------------------- auto, memory

def test_auto_chooses_separable_only_for_outer_products(emulated, rng):
    """A 7^4 Gaussian on a 16^4 volume: ``auto`` runs four 1-D passes (28 taps per output
    instead of 2,401); a kernel off an outer product by 1e-6 is priced the same data-free
    but refused by the data rule, so ``auto`` never runs separable for it."""
    g = gaussian_kernel1d(1.0, 0, 3)
    k = outer(g, g, g, g)
    x = rng.standard_normal((16, 16, 16, 16))
    noise = k + 1e-6 * rng.standard_normal(k.shape)
    backend = emulated
    problem = ConvProblem.create(x_shape=(1, 1) + x.shape, w_shape=(1, 1) + k.shape,
                                 padding="same", flip=True)
    assert dispatcher.choose(problem, backend).ranked[0] == "separable"
    with cupyconv.use_backend("emulated"):
        assert cupyconv.choose_algorithm(x, k, "same") == "separable"
        assert cupyconv.choose_algorithm(x, noise, "same") not in ("separable", None)
        for seed in range(3):                           # random kernels never factor
            other = np.random.default_rng(seed).standard_normal(k.shape)
            assert cupyconv.choose_algorithm(x, other, "same") != "separable"
        y = cupyconv.convolve(x, k, "same")
    ok, why = backend.data_ok(problem, "separable",
                              Operands(activation=x[None, None], filter=noise[None, None]))
    assert not ok and "relative error" in why
    import scipy.signal
    np.testing.assert_allclose(y, scipy.signal.fftconvolve(x, k, "same"), atol=1e-12)


def test_small_problem_prefers_one_launch(emulated):
    """The passes cost one launch each: on a small image the single direct launch wins."""
    backend = emulated
    problem = ConvProblem.create(x_shape=(1, 1, 16, 16), w_shape=(1, 1, 3, 3), padding=1)
    times = backend.predict_times(problem, ["direct", "separable"])
    assert times["direct"] < times["separable"]


def test_workspace_is_the_pass_buffers(emulated, rng):
    """The reported peak is the two ping-pong buffers :meth:`workspace_bytes` states; a
    workspace limit below it falls back to an algorithm that fits."""
    x = rng.standard_normal((2, 3, 10, 9, 8))
    w = depthwise_weights(rng, 3, (3, 3, 2), np.float64, False)
    backend = emulated
    problem = ConvProblem.create(x_shape=x.shape, w_shape=w.shape, groups=3, padding=1)
    need = backend.workspace_bytes(problem, "separable")
    # pass 0 -> (2, 3, 10, 9, 8), pass 1 -> (2, 3, 10, 9, 8) (padding 1 keeps 3-tap axes)
    assert need == 2 * (2 * 3 * 10 * 9 * 8) * 8
    stats = {}
    y, name = dispatcher.run(problem, Operands(activation=x, filter=w), backend,
                             method="separable", stats=stats)
    assert name == "separable" and stats["peak_workspace"] == need
    np.testing.assert_allclose(y, ref_conv(x, w, groups=3, padding=1), atol=1e-12)
    stats = {}
    y, name = dispatcher.run(problem, Operands(activation=x, filter=w), backend,
                             method="separable", workspace_limit=need - 1, stats=stats)
    assert name != "separable" and "separable" in stats["fallbacks"][0]
    np.testing.assert_allclose(y, ref_conv(x, w, groups=3, padding=1), atol=1e-12)


@pytest.mark.parametrize("kernel, stride, padding, dilation, mode, dtype, layout", [
    ((3, 5), 1, "same", 1, "constant", np.float32, "channels_first"),
    ((3, 1, 4), 2, 1, 2, "reflect", np.complex64, "channels_last"),
    ((1, 5), (1, 2), ((0, 0), (2, 1)), 1, "wrap", np.int64, "channels_first"),
    ((3, 3, 3, 3), 1, 0, (1, 2, 1, 1), "edge", np.float64, "channels_last"),
])
def test_pass_problems_equal_the_validated_one_axis_problems(kernel, stride, padding,
                                                              dilation, mode, dtype, layout):
    """Each pass problem is the ``ConvProblem.create`` of its one-axis depthwise geometry
    (equal, so the kernels' caches key them alike), though built without validating it
    again."""
    from cupyconv.backends.cuda.separable import pass_problems
    r, g = len(kernel), 3
    spatial = (11,) * r
    problem = ConvProblem.create(
        x_shape=(2, g) + spatial if layout == "channels_first" else (2,) + spatial + (g,),
        w_shape=(g, 1) + kernel if layout == "channels_first" else (g,) + kernel + (1,),
        stride=stride, padding=padding, dilation=dilation, groups=g, padding_mode=mode,
        dtype=dtype, flip=True, layout=layout)
    shape, expected = list(problem.in_shape), []
    for axis in range(r):
        ones = [1] * r
        ks, st, dil, pads = list(ones), list(ones), list(ones), [(0, 0)] * r
        ks[axis], st[axis] = problem.kernel_shape[axis], problem.stride[axis]
        dil[axis], pads[axis] = problem.dilation[axis], problem.padding[axis]
        if ks[axis] == 1 and st[axis] == 1 and pads[axis] == (0, 0):
            continue                                # a scaling: no pass
        expected.append((axis, ConvProblem.create(
            x_shape=(2, g) + tuple(shape), w_shape=(g, 1) + tuple(ks), stride=st,
            padding=pads, dilation=dil, groups=g, padding_mode=mode, dtype=dtype)))
        shape[axis] = problem.out_shape[axis]
    got = pass_problems(problem)
    assert got == tuple(expected)
    assert [hash(p) for _, p in got] == [hash(p) for _, p in expected]
