"""bfloat16 (``ml_dtypes.bfloat16``) through the public API (issue 26 item 5): bfloat16
storage, float32 accumulation, one rounding at the end -- natively on the CUDA path for the
direct and implicit-GEMM kernels (``cc::bfloat16``, the m16n8k16 bf16 atom; here through the
emulator), in float32 on the CPU and for every other algorithm.

The bound every check derives from (docs/semantics.md, "Precision contract"): a bfloat16 is
exact in float32 and a product of two is exact in float32 (8 + 8 significant bits <= 24), so
the only errors are the float32 sums, ``2 K u32 (|x| conv |w|)`` with ``u32 = 2**-24``
(``helpers.elementwise_bound``), and the one final rounding to bfloat16, ``2**-8 |y|``
(bfloat16's unit roundoff; ``helpers.FINAL_ROUNDING``).  FFT and Winograd replace the first by
their float32 transform error (normwise).  A second rounding in bfloat16 (a bfloat16
accumulator or intermediate) would show as results that differ from the correctly rounded
float64 reference far more often than the rare near-tie element.
"""
from __future__ import annotations

import numpy as np
import pytest

import cupyconv
from cupyconv._kernels import launch
from cupyconv._vocabulary import ALGORITHMS

from backends.cuda.conftest import Device
from helpers import (PADDING_MODES, assert_matches_reference, conv_bounds, gradient_cases,
                     ref_conv, rel_norm_error)

ml_dtypes = pytest.importorskip("ml_dtypes")
BF16 = np.dtype(ml_dtypes.bfloat16)
#: unit roundoff of the one final rounding to bfloat16 (8 significant bits).
U_BF16 = 2.0 ** -8
#: unit roundoff of the float32 accumulation.
U32 = 2.0 ** -24
#: Least fraction of the outputs (without heavy cancellation) equal to the correctly rounded
#: reference: one rounding of a float32-accurate sum misses only near-ties (~0.1% at bfloat16's
#: spacing); normwise algorithms spread a float32 transform error over every output.
ROUNDED_FRACTION = {"fft": 0.97, "winograd": 0.97}


@pytest.fixture(params=["numpy", "emulated"])
def on(request):
    if request.param not in cupyconv.available_backends():
        pytest.skip(f"backend {request.param!r} is not available here")
    return Device(request.param)


def _bf16(rng, shape):
    return rng.standard_normal(shape).astype(BF16)


def _check(y, ref, scale, k, algorithm, what):
    """bfloat16 result; relative-norm error (scale ``|x| conv |w|``) within one rounding
    plus the float32 sums; the correctly rounded reference almost everywhere."""
    assert y.dtype == BF16, (what, y.dtype)
    normwise = algorithm in ("fft", "winograd", "auto")
    err = rel_norm_error(y.astype(np.float64), ref, scale)
    assert err <= U_BF16 + (64 if normwise else 2 * k) * U32, (what, err)
    keep = np.abs(ref) >= np.abs(scale) / 16
    assert keep.mean() > 0.5, what
    same = float(np.mean(y[keep] == ref[keep].astype(np.float32).astype(BF16)))
    assert same >= ROUNDED_FRACTION.get(algorithm, 0.99), (what, same)


def _forward_algorithms(backend):
    return [n for n, a in ALGORITHMS.items() if backend in a.backends and "forward" in a.ops
            and n != "separable"]


# --------------------------------------------------------------- every algorithm, ranks 1-4

RANK_CASES = {  # rank -> (x shape, w shape, geometry): groups, stride, padding modes
    1: ((2, 4, 19), (6, 2, 5), dict(groups=2, padding=2, padding_mode="reflect")),
    2: ((2, 16, 9, 8), (8, 16, 3, 3), dict(padding=1, cval=0.3)),
    3: ((1, 3, 6, 5, 4), (4, 3, 3, 2, 3), dict(stride=(2, 1, 1), padding=1, padding_mode="wrap")),
    4: ((1, 2, 4, 3, 4, 3), (3, 2, 2, 2, 2, 2), dict(padding=((1, 0),) * 4)),
}


@pytest.mark.parametrize("rank", sorted(RANK_CASES))
def test_conv_within_the_bfloat16_bound(on, rank, rng):
    """conv on ranks 1-4, every forward algorithm of the backend on rank 2, the tap-sum
    kernels on the others (the constant border 0.3 is rounded to bfloat16, as padding
    bfloat16 data with it would be, on every backend)."""
    xs, ws, kw = RANK_CASES[rank]
    x, w = _bf16(rng, xs), _bf16(rng, ws)
    ref_kw = dict(kw, cval=float(np.float32(kw["cval"]).astype(BF16))) if "cval" in kw else kw
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    ref = ref_conv(x64, w64, **ref_kw)
    bounds = conv_bounds(x64, w64, **ref_kw)
    methods = _forward_algorithms(on.name) if rank == 2 else ["direct", "implicit_gemm", "auto"]
    for method in methods:
        if method == "fft" and kw.get("cval") and on.name != "numpy":
            continue                     # the GPU FFT path takes zero padding only
        if method == "winograd" and rank != 2:
            continue
        with on.scope():
            y = cupyconv.conv(x, w, method=method, **kw)
        _check(y, ref, bounds.abs_conv, bounds.k, method, f"{on.name} {method} rank {rank}")
        if method in ("direct", "implicit_gemm", "gemm"):    # the elementwise bound too
            assert_matches_reference(y, ref, bounds, BF16,
                                     method, f"{on.name} {method} rank {rank}")


@pytest.mark.parametrize("padding_mode", PADDING_MODES)
def test_padding_modes_layouts_and_views(on, padding_mode, rng):
    """Every padding mode, both layouts, a transposed view of x and a reversed view of w
    (no copies on the CUDA path), through the bfloat16 tiles (C/G = 16: the tensor-core
    tile) and the direct kernel."""
    x = _bf16(rng, (2, 32, 7, 6))
    w = _bf16(rng, (8, 16, 3, 3))
    kw = dict(groups=2, padding=((2, 1), (1, 1)), padding_mode=padding_mode)
    ref = ref_conv(x.astype(np.float64), w.astype(np.float64), **kw)
    bounds = conv_bounds(x.astype(np.float64), w.astype(np.float64), **kw)
    for layout in ("channels_first", "channels_last"):
        xl = x if layout == "channels_first" else np.ascontiguousarray(np.moveaxis(x, 1, -1))
        wl = w if layout == "channels_first" else np.moveaxis(w, 1, -1)
        xv = np.ascontiguousarray(xl.swapaxes(-1, -2)).swapaxes(-1, -2)   # a strided view
        wv = np.ascontiguousarray(wl[::-1])[::-1]                          # a reversed view
        want = ref if layout == "channels_first" else np.moveaxis(ref, 1, -1)
        scale = bounds.abs_conv if layout == "channels_first" else np.moveaxis(bounds.abs_conv, 1, -1)
        for method in ("direct", "implicit_gemm"):
            with on.scope():
                y = cupyconv.conv(xv, wv, layout=layout, method=method, **kw)
            _check(y, want, scale, bounds.k, method, f"{on.name} {method} {layout} {padding_mode}")


def test_gradients_and_transpose_within_the_bfloat16_bound(on, rng):
    x, w = _bf16(rng, (2, 16, 7, 6)), _bf16(rng, (16, 8, 3, 3))
    dy = _bf16(rng, (2, 16, 4, 3))
    cases = gradient_cases(x, w, dy, w, stride=2, padding=1, groups=2)
    methods = ("gemm", "fft", "auto") + (("implicit_gemm",) if on.name == "emulated" else ())
    for method in methods:
        for (call, want, scale), k in zip(cases, (8 * 9, 2 * 12, 8 * 9)):
            with on.scope():
                y = call(x, w, dy, w, method=method)
            _check(y, want, scale, k, method, f"{on.name} {method}")


# ------------------------------------------------ float32 accumulation, overflow, cval

def test_float32_accumulation_every_algorithm(on):
    """K = 512 products of 1 * 1: a bfloat16 accumulator stalls at 256 (256 + 1 rounds back
    to 256); float32 reaches 512, exact in bfloat16.  16 * 2^124 * 512 overflows bfloat16's
    3.39e38 only when rounded at the end (the float32 sum is 2^137: inf as a float32 too,
    as on a GPU)."""
    x = np.ones((1, 8, 64), BF16)
    w = np.stack([np.ones((8, 64)), np.full((8, 64), 2.0 ** 120)]).astype(BF16)
    for method in _forward_algorithms(on.name):
        if method == "winograd":
            continue                        # at most 7 taps
        with on.scope(), np.errstate(over="ignore"):
            y = cupyconv.conv(x, w, method=method)
        assert y.dtype == BF16
        assert y[0, 0, 0] == 512, (on.name, method, y[0, 0, 0])
        assert float(y[0, 1, 0]) == 2.0 ** 129 or np.isposinf(float(y[0, 1, 0])), (on.name, method)


def test_constant_border_is_rounded_to_bfloat16(on):
    """cval 1 + 2^-9 is 1 in bfloat16 (round to nearest even): a border of ones."""
    x = np.ones((1, 1, 4), BF16)
    w = np.ones((1, 1, 3), BF16)
    with on.scope():
        y = cupyconv.conv(x, w, padding=1, cval=1 + 2.0 ** -9, method="direct")
    assert (y == 3).all()


# ----------------------------------------------------- native on the CUDA path

@pytest.fixture
def fetched(monkeypatch):
    """``(family, dtype, tile)`` of every kernel the CUDA path fetches."""
    seen = []
    fetch = launch.kernel_for

    def kernel_for(module, family, dtype, *args, **kwargs):
        seen.append((family, np.dtype(dtype), args[2] if len(args) > 2 else kwargs.get("tile")))
        return fetch(module, family, dtype, *args, **kwargs)

    monkeypatch.setattr(launch, "kernel_for", kernel_for)
    return seen


@pytest.mark.parametrize("method, family, dtype", [
    ("direct", "direct_conv", BF16), ("implicit_gemm", "implicit_gemm_fprop", BF16),
    ("gemm", "vol2col", BF16)])
def test_cuda_path_kernels(fetched, method, family, dtype, rng):
    """direct, implicit_gemm and gemm launch the bfloat16 kernels (the implicit GEMM its
    tensor-core tile: C = 16 fits BK = 16; gemm its bfloat16 vol2col, whose columns the
    runner's GEMM multiplies with float32 sums)."""
    x, w = _bf16(rng, (2, 16, 6, 7)), _bf16(rng, (8, 16, 3, 3))
    with cupyconv.use_backend("emulated"):
        y = cupyconv.conv(x, w, padding=1, method=method)
    assert y.dtype == BF16
    got = [(d, t) for f, d, t in fetched if f == family]
    assert got and {d for d, _ in got} == {dtype}, fetched
    if method == "implicit_gemm":
        assert all(t is not None and t[3] >= 2 for _, t in got), got


# ------------------------------------------------- entry points

def test_entry_points_keep_bfloat16_and_agree(on, rng):
    a, b = _bf16(rng, (10, 9)), _bf16(rng, (3, 3))
    x, w = _bf16(rng, (2, 3, 8, 8)), _bf16(rng, (4, 3, 3, 3))
    with on.scope():
        y = cupyconv.conv(x, w, padding=1, method="direct")
        plan = cupyconv.plan_conv(x.shape, w.shape, BF16, padding=1, method="direct",
                                  backend=on.name)
        assert plan.problem.dtype == BF16
        np.testing.assert_array_equal(plan(x, w), y)
        op = cupyconv.ConvOperator(b, a.shape, "same", method="direct")
        assert op.dtype == BF16
        np.testing.assert_array_equal(op.matvec(a.ravel()).reshape(a.shape),
                                      cupyconv.convolve(a, b, "same", method="direct"))
        assert op.rmatvec(a.ravel()).dtype == BF16
        assert cupyconv.conv(x, w, np.ones(4, BF16)).dtype == BF16
        assert cupyconv.convolve2d(a, b).dtype == BF16
        assert cupyconv.convolve(a, b.astype(np.float32)).dtype == np.float32
    with pytest.raises(ValueError, match="tf32"):
        cupyconv.conv(x, w, precision="tf32")


NDIMAGE_CASES = {  # name -> call on (input, weights): weights bfloat16 where the filter takes any
    "convolve": lambda nd, a, k: nd.convolve(a, k, mode="mirror"),
    "correlate1d": lambda nd, a, k: nd.correlate1d(a, k[1], axis=0, mode="wrap"),
    "gaussian_filter": lambda nd, a, k: nd.gaussian_filter(a, 1.5),
    "uniform_filter1d": lambda nd, a, k: nd.uniform_filter1d(a, 4, axis=1),
    "sobel": lambda nd, a, k: nd.sobel(a),
}


@pytest.mark.parametrize("name", sorted(NDIMAGE_CASES))
def test_ndimage_and_scipy_names_within_the_bfloat16_bound(on, name, rng):
    """cupyconv.ndimage computes bfloat16 input in float32 and returns bfloat16 (one
    rounding), as it does float16; fftconvolve returns float32 (scipy.fft's dtype)."""
    import cupyconv.ndimage as nd
    a, k = _bf16(rng, (14, 12)), _bf16(rng, (3, 3))
    call = NDIMAGE_CASES[name]
    with cupyconv.use_backend("numpy"):
        ref = call(nd, a.astype(np.float64), k.astype(np.float64))
        scale = np.abs(call(nd, np.abs(a.astype(np.float64)), np.abs(k.astype(np.float64))))
    with on.scope():
        y = call(nd, a, k)
        f = cupyconv.fftconvolve(a, k)
    assert y.dtype == BF16 and f.dtype == np.float32
    err = rel_norm_error(y.astype(np.float64), ref, scale if name != "sobel" else ref)
    assert err <= U_BF16 + 64 * U32, (name, err)


def test_dask_blocks_stay_bfloat16_and_match_in_memory(rng):
    da = pytest.importorskip("dask.array")
    import cupyconv.dask as cdask
    x, w = _bf16(rng, (2, 3, 12, 11)), _bf16(rng, (4, 3, 3, 3))
    with cupyconv.use_backend("numpy"):
        y = cdask.conv(da.from_array(x, chunks=(1, 3, 5, 6)), w, padding=1, method="direct")
        assert y.dtype == BF16
        np.testing.assert_array_equal(y.compute(), cupyconv.conv(x, w, padding=1,
                                                                 method="direct"))
