"""float16 through the public API (issue 12): half storage, float32 accumulation, one
rounding at the end -- natively on the CUDA path (the half kernels; here through the
emulator, and on a GPU when one is at hand), in float32 on the CPU -- for every algorithm
and entry point.

The bound every check derives from (docs/semantics.md, "Precision contract"): float16
operands are exact in float32, and a product of two float16 values is exact in float32
(11 + 11 significant bits <= 24), so the only errors are (a) the float32 sums, at most
``2 K u32 (|x| conv |w|)`` with ``u32 = 2**-24`` (Higham's gamma_K, the helpers'
``elementwise_bound``), and (b) the one final rounding to float16, at most
``2**-11 |y|`` (round to nearest).  FFT and Winograd replace (a) by their float32
transform error (``helpers.fft_tolerance``, normwise).  A second rounding in half (a half
accumulator, or half intermediates) would show as errors of many units of 2**-11 and as
results that differ from the correctly rounded reference far more often than the rare
near-tie element.
"""
from __future__ import annotations


import numpy as np
import pytest

import cupyconv
from cupyconv._kernels import launch
from cupyconv._vocabulary import ALGORITHMS

from backends.cuda.conftest import Device
from helpers import (assert_matches_reference, conv_bounds, forget_launches, ref_conv,
                     ref_convolve, rel_norm_error)

F16 = np.dtype(np.float16)
#: unit roundoff of the one final rounding to float16 (binary16: 11 significant bits).
U16 = 2.0**-11
#: unit roundoff of the float32 accumulation.
U32 = 2.0**-24
#: Largest finite float16 (sums above it round to inf).
HALF_MAX = float(np.finfo(F16).max)


def _param(name):
    return pytest.param(name, marks=[pytest.mark.gpu] if name == "cuda" else [], id=name)


@pytest.fixture(params=[_param("numpy"), _param("emulated"), _param("cuda")])
def on(request):
    if request.param not in cupyconv.available_backends():
        pytest.skip(f"backend {request.param!r} is not available here")
    return Device(request.param)


def _forward_algorithms(backend):
    return [n for n, a in ALGORITHMS.items() if backend in a.backends and "forward" in a.ops]


def _half(rng, shape):
    return rng.standard_normal(shape).astype(F16)


#: Least fraction of :func:`_correctly_rounded` outputs per algorithm (default 0.98): the
#: float32 error of a transform is normwise, spread over every output, so a few more of the
#: smaller outputs straddle a rounding boundary (measured ~0.96 on cancelling kernels).
_ROUNDED_FRACTION = {"fft": 0.9, "winograd": 0.9}


def _correctly_rounded(y, ref, abs_conv):
    """Fraction of the outputs without heavy cancellation (``|ref| >= |x| conv |w| / 16``)
    that equal ``float16(ref)``: one rounding of a float32-accurate tap sum (error
    <= 2 K u32 * 16 |ref|, far below half a float16 unit) misses only near-ties (~1%);
    a second rounding in half misses about a fifth to a quarter of them."""
    keep = np.abs(ref) >= np.abs(abs_conv) / 16
    assert keep.mean() > 0.5
    return float(np.mean(y[keep] == ref[keep].astype(F16)))


def _check_half_result(y, ref, bounds, algorithm, what):
    """Within the bound, and the correctly rounded reference almost everywhere."""
    assert y.dtype == F16, (what, y.dtype)
    normwise = algorithm in ("fft", "winograd")
    assert_matches_reference(y, ref, bounds, F16, "fft" if normwise else algorithm, what)
    # relative-norm form of the same contract: one rounding (<= 2**-11) plus the float32
    # sums (2 K u32) -- or, normwise algorithms, a few float32 transform roundings -- all
    # relative to |x| conv |w| (the error scales with the magnitudes summed)
    err = rel_norm_error(y, ref, bounds.abs_conv)
    assert err <= U16 + (64 if normwise else 2 * bounds.k) * U32, (what, err)
    same = _correctly_rounded(y, ref, bounds.abs_conv)
    assert same >= _ROUNDED_FRACTION.get(algorithm, 0.98), (what, same)


# --------------------------------------------------------------- every algorithm


def test_every_forward_algorithm_within_the_float16_bound(on, rng):
    """A dense grouped layer (no separable) and a depthwise layer whose kernels are outer
    products of 4-bit factors (exact in float16, so ``separable`` applies; every
    algorithm), the dense one with a constant border of 0.3 -- rounded to float16 as
    padding float16 data with it would be, on every backend."""
    x = _half(rng, (2, 4, 9, 8))
    w = _half(rng, (6, 2, 3, 3))
    xd = _half(rng, (2, 3, 9, 8))
    factors = rng.integers(-15, 16, size=(3, 2, 3)) / 8
    wd = np.stack([np.outer(f, g) for f, g in factors]).astype(F16)[:, None]
    cval = float(np.float16(0.3))
    dense = dict(groups=2, padding=1, cval=0.3)
    depthwise = dict(groups=3, padding=1)
    cases = [(x, w, dense, dict(dense, cval=cval)), (xd, wd, depthwise, depthwise)]
    for xi, wi, kw, ref_kw in cases:
        ref = ref_conv(xi, wi, dtype=np.float64, **ref_kw)
        bounds = conv_bounds(xi, wi, **ref_kw)
        for method in _forward_algorithms(on.name):
            if method == "separable" and kw is dense:
                continue
            if method == "fft" and kw.get("cval") and on.name != "numpy":
                continue            # the GPU FFT path takes zero padding only
            with on.scope():
                y = cupyconv.conv(on.to_dev(xi), on.to_dev(wi), method=method, **kw)
            _check_half_result(on.to_host(y), ref, bounds, method, f"{on.name} {method} {kw}")


@pytest.mark.parametrize("fn", ["convolve", "correlate"])
def test_signal_functions_within_the_float16_bound(on, fn, rng):
    a, b = _half(rng, (13, 11)), _half(rng, (4, 3))
    for method in ("direct", "gemm", "fft", "auto"):
        for mode in ("full", "same", "valid"):
            with on.scope():
                y = getattr(cupyconv, fn)(on.to_dev(a), on.to_dev(b), mode, method=method)
            ref = ref_convolve(a, b, mode, correlate=fn == "correlate")
            absref = ref_convolve(np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)),
                                  mode, correlate=fn == "correlate")
            y = on.to_host(y)
            assert y.dtype == F16
            err = rel_norm_error(y, ref, absref)
            assert err <= U16 + 64 * U32, (fn, method, mode, err)


# ------------------------------------------------ float32 accumulation, overflow


def _ones_layer():
    """1-D conv, C = 64 channels x 64 taps: K = 4096 products per output.  Output 0 sums
    4096 ones (a half accumulator stalls at 2048: 2048 + 1 rounds back to 2048; float32
    gives 4096, exact in half); output 1 sums 4096 x 16 = 65536 > 65504, which rounds to
    +inf once stored as half (TF PR#12832); output 2 is -inf likewise."""
    x = np.ones((1, 64, 64), F16)
    w = np.stack([np.ones((64, 64)), np.full((64, 64), 16.0),
                  np.full((64, 64), -16.0)]).astype(F16)
    return x, w


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")  # NumPy's
def test_float32_accumulation_and_overflow_every_algorithm(on):
    x, w = _ones_layer()
    for method in _forward_algorithms(on.name):
        if method in ("separable", "winograd"):
            continue                        # 2-D kernels only / at most 7 taps
        with on.scope():
            y = on.to_host(cupyconv.conv(on.to_dev(x), on.to_dev(w), method=method))
        assert y.dtype == F16
        assert y[0, 0, 0] == 4096, (on.name, method, y[0, 0, 0])
        assert np.isposinf(y[0, 1, 0]) and np.isneginf(y[0, 2, 0]), (on.name, method, y)


def test_products_and_partial_sums_beyond_half_range(on):
    """256 * 256 = 65536 overflows half, and 40000 + 40000 does; in float32 neither does,
    and the results (256 and 40000) are representable: float16 inputs, float32 products
    and sums, one rounding."""
    with on.scope():
        for a, b, want in (([256, 256], [-255, 256], 256.0),
                           ([40000, 40000, -40000], [1, 1, 1], 40000.0)):
            a, b = np.array(a, F16), np.array(b, F16)
            for method in ("direct", "implicit_gemm", "gemm"):
                y = on.to_host(cupyconv.convolve(on.to_dev(a), on.to_dev(b), "valid", method=method))
                assert y.dtype == F16 and y[0] == want, (on.name, method, y)


def test_constant_border_beyond_half_range_is_inf(on):
    """A ``cval`` beyond 65504 is an infinite border, as ``numpy.pad`` of float16 data
    gives (every backend rounds ``cval`` to float16)."""
    x = np.ones((1, 1, 4), F16)
    w = np.ones((1, 1, 3), F16)
    with on.scope():
        y = on.to_host(cupyconv.conv(on.to_dev(x), on.to_dev(w), padding=1, cval=1e5, method="direct"))
    assert np.isposinf(y[0, 0, [0, -1]]).all() and (y[0, 0, 1:-1] == 3).all()


# ----------------------------------------------------- native on the CUDA path


@pytest.fixture
def kernels(monkeypatch):
    """``(family, dtype)`` of every kernel the CUDA path fetches, and the ``x`` and ``w``
    arrays the direct and implicit-GEMM launchers receive."""
    seen = {"kernels": [], "operands": []}
    fetch = launch.kernel_for

    def kernel_for(module, family, dtype, *args, **kwargs):
        seen["kernels"].append((family, np.dtype(dtype)))
        return fetch(module, family, dtype, *args, **kwargs)

    def recording(real):
        def launcher(module, problem, x, w, *args, **kwargs):
            seen["operands"].append((x, w))
            return real(module, problem, x, w, *args, **kwargs)
        return launcher

    monkeypatch.setattr(launch, "kernel_for", kernel_for)
    for name in ("direct_program", "implicit_gemm_program"):
        monkeypatch.setattr(launch, name, recording(getattr(launch, name)))
    forget_launches()               # memoised programs would not fetch their kernels again
    return seen


@pytest.mark.parametrize("method", ["direct", "implicit_gemm", "gemm"])
def test_cuda_path_runs_the_half_kernels_on_the_callers_arrays(kernels, method, rng):
    """No float32 copy of the operands: the half kernels are launched (``cc::half``
    instantiations), and the direct and implicit-GEMM launchers read the caller's own
    memory (a contiguous channels-first ``x`` and ``w`` need no copy at all)."""
    x, w = _half(rng, (2, 8, 6, 7)), _half(rng, (4, 8, 3, 3))
    with cupyconv.use_backend("emulated"):
        y = cupyconv.conv(x, w, padding=1, method=method)
    assert y.dtype == F16
    families = {"direct": "direct_conv", "implicit_gemm": "implicit_gemm_fprop",
                "gemm": "vol2col"}
    fetched = [d for f, d in kernels["kernels"] if f == families[method]]
    assert fetched and set(fetched) == {F16}, kernels["kernels"]
    assert kernels["operands"] or method == "gemm"
    for xa, wa in kernels["operands"]:
        assert xa.dtype == F16 and np.shares_memory(xa, x) and np.shares_memory(wa, w)


def test_cuda_gradients_compute_in_float32(kernels, rng):
    """The gradients' column GEMM and col2vol run in float32 (col2vol sums overlapping
    columns, a second rounding in half), and the result is rounded once."""
    x, w = _half(rng, (2, 4, 7, 6)), _half(rng, (6, 4, 3, 3))
    dy = _half(rng, (2, 6, 7, 6))
    with cupyconv.use_backend("emulated"):
        dx = cupyconv.conv_grad_input(dy, w, x.shape, padding=1, method="gemm")
        dw = cupyconv.conv_grad_weight(x, dy, w.shape, padding=1, method="gemm")
    assert dx.dtype == dw.dtype == F16
    assert {d for f, d in kernels["kernels"] if f in ("col2vol", "vol2col")} == {
        np.dtype(np.float32)}


# ------------------------------------------------- gradients and entry points


def test_gradients_and_transpose_within_the_float16_bound(on, rng):
    x, w = _half(rng, (2, 4, 7, 6)), _half(rng, (6, 2, 3, 3))
    dy = _half(rng, (2, 6, 4, 3))
    geo = dict(stride=2, padding=1, groups=2)
    x64, w64, dy64 = (a.astype(np.float64) for a in (x, w, dy))
    with cupyconv.use_backend("numpy"):                 # float64 references
        want_dx = cupyconv.conv_grad_input(dy64, w64, x.shape, **geo)
        want_dw = cupyconv.conv_grad_weight(x64, dy64, w.shape, **geo)
        want_t = cupyconv.conv_transpose(x64, w64.reshape(4, 3, 3, 3), groups=2)
        abs_dx = cupyconv.conv_grad_input(np.abs(dy64), np.abs(w64), x.shape, **geo)
        abs_dw = cupyconv.conv_grad_weight(np.abs(x64), np.abs(dy64), w.shape, **geo)
        abs_t = cupyconv.conv_transpose(np.abs(x64), np.abs(w64).reshape(4, 3, 3, 3),
                                        groups=2)
    for method in ("gemm", "fft"):
        with on.scope():
            got = (cupyconv.conv_grad_input(on.to_dev(dy), on.to_dev(w), x.shape, method=method,
                                            **geo),
                   cupyconv.conv_grad_weight(on.to_dev(x), on.to_dev(dy), w.shape, method=method,
                                             **geo),
                   cupyconv.conv_transpose(on.to_dev(x), on.to_dev(w.reshape(4, 3, 3, 3)),
                                           groups=2, method=method))
        for y, want, scale, k in zip(got, (want_dx, want_dw, want_t), (abs_dx, abs_dw, abs_t),
                                     (6 * 9, 2 * 4 * 3, 4 * 9)):
            y = on.to_host(y)
            assert y.dtype == F16
            err = rel_norm_error(y, want, scale)
            assert err <= U16 + max(2 * k, 64) * U32, (on.name, method, err)
            same = _correctly_rounded(y, want, scale)
            assert same >= _ROUNDED_FRACTION.get(method, 0.98), (on.name, method, same)


def test_entry_points_keep_their_dtypes_and_agree(on, rng):
    """Every entry point returns what it returned before float16 went native (SciPy's
    dtypes), and the plan, the operator and the in-memory call compute the same values."""
    a, b = _half(rng, (10, 9)), _half(rng, (3, 3))
    x, w = _half(rng, (2, 3, 8, 8)), _half(rng, (4, 3, 3, 3))
    with on.scope():
        d = on.to_dev
        y = cupyconv.conv(d(x), d(w), padding=1)
        plan = cupyconv.plan_conv(x.shape, w.shape, F16, padding=1, backend=on.name)
        assert plan.problem.dtype == F16
        np.testing.assert_array_equal(on.to_host(plan(d(x), d(w))), on.to_host(y))
        op = cupyconv.ConvOperator(d(b), a.shape, "same", method="direct")
        assert op.dtype == F16
        np.testing.assert_array_equal(
            on.to_host(op.matvec(d(a).ravel())).reshape(a.shape),
            on.to_host(cupyconv.convolve(d(a), d(b), "same", method="direct")))
        assert op.rmatvec(d(a).ravel()).dtype == F16
        assert cupyconv.conv(d(x), d(w), d(np.ones(4, F16))).dtype == F16
        assert cupyconv.convolve2d(d(a), d(b)).dtype == F16
        assert cupyconv.fftconvolve(d(a), d(b)).dtype == np.float32     # scipy.fft's dtype
        assert cupyconv.convolve(d(a), d(b).astype(np.float32)).dtype == np.float32
    with pytest.raises(ValueError, match="tf32"):
        cupyconv.conv(x, w, precision="tf32")


def test_cpu_choice_is_the_float32_choice():
    """The NumPy backend computes float16 as float32 (``prepare``), so ``auto`` ranks and
    caches exactly the float32 problem's algorithms."""
    a, b = np.ones((64, 64), F16), np.ones((5, 5), F16)
    with cupyconv.use_backend("numpy"):
        assert cupyconv.choose_algorithm(a, b) == cupyconv.choose_algorithm(
            a.astype(np.float32), b.astype(np.float32))


def test_dask_blocks_stay_float16_and_match_in_memory(rng):
    da = pytest.importorskip("dask.array")
    import cupyconv.dask as cdask
    x, w = _half(rng, (2, 3, 12, 11)), _half(rng, (4, 3, 3, 3))
    a, b = _half(rng, (20, 13)), _half(rng, (3, 4))
    with cupyconv.use_backend("numpy"):
        y = cdask.conv(da.from_array(x, chunks=(1, 3, 5, 6)), w, padding=1, method="direct")
        assert y.dtype == F16
        np.testing.assert_array_equal(y.compute(), cupyconv.conv(x, w, padding=1,
                                                                 method="direct"))
        s = cdask.convolve(da.from_array(a, chunks=7), b, "same", method="direct")
        assert s.dtype == F16
        np.testing.assert_array_equal(s.compute(), cupyconv.convolve(a, b, "same",
                                                                     method="direct"))
