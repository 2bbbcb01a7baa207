"""Independent NumPy references and helpers for the kernel tests.

The references never reuse the kernels' index math: the boundary is
resolved by ``numpy.pad`` applied to an *index* array, which gives, for
every column-buffer entry, the flat index of the input element it reads
(or -1 for constant padding).  vol2col, col2vol (its adjoint, a scatter-add
over the same map) and the convolution (per-group matmul) all derive from
that one map.
"""
from __future__ import annotations

import functools
import math
import os

import numpy as np

from cupyconv._dtypes import BFLOAT16
from cupyconv._kernels import launch
from cupyconv.core.problem import ConvProblem

MODES = ("constant", "reflect", "symmetric", "wrap", "edge")
SOURCES = {
    "vol2col": "cuda_src/conv/vol2col.cu",
    "col2vol": "cuda_src/conv/col2vol.cu",
    "implicit_gemm_fprop": "cuda_src/conv/implicit_gemm_fprop.cu",
    "direct_conv": "cuda_src/conv/direct_conv.cu",
}


def hypothesis_settings(max_examples: int):
    """Bounded examples; deterministic unless CUPYCONV_HYPOTHESIS_PROFILE=dev."""
    from hypothesis import HealthCheck, settings
    det = os.environ.get("CUPYCONV_HYPOTHESIS_PROFILE", "ci") != "dev"
    return settings(max_examples=max_examples, deadline=None, derandomize=det, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much])


# ---------------------------------------------------------------------------
# Emulated modules (one build per (mode, source, name set), memoised)
# ---------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _emu_module(mode: str, source: str, names: tuple):
    from cupyconv._emulation import EmulatedModule
    return EmulatedModule(path=source, name_expressions=list(names), mode=mode)


def emu_loader(mode: str = "normal"):
    """A loader ``(source, names) -> EmulatedModule`` for the launch helpers."""
    def load(source, names):
        path = source if source.startswith("cuda_src/") else f"cuda_src/{source}"
        return _emu_module(mode, path, tuple(names))
    return load


# ---------------------------------------------------------------------------
# Problems and arrays
# ---------------------------------------------------------------------------

def make_problem(*, n, c, k, g, s, ks, stride, dilation, padding, mode="constant", cval=0,
                 layout="channels_first", dtype=np.float64, flip=False) -> ConvProblem:
    r = len(s)
    if layout == "channels_first":
        x_shape, w_shape = (n, c, *s), (k, c // g, *ks)
    else:
        x_shape, w_shape = (n, *s, c), (k, *ks, c // g)
    return ConvProblem.create(x_shape=x_shape, w_shape=w_shape, stride=stride, padding=padding,
                              dilation=dilation, groups=g, padding_mode=mode, cval=cval,
                              layout=layout, dtype=dtype, flip=flip)


#: spatial extents per rank of the tile tests: M and K/G are non-multiples of every tile
TILE_SHAPES = {1: (37,), 2: (9, 11), 3: (5, 6, 7), 4: (3, 4, 3, 4)}


#: smaller 3-D and 4-D extents for the costliest every-mode cases (the multistage and wgmma
#: tiles): M = 240 and 800 rows, still off every tile, pads still past the 4-D kernel
LEAN_SHAPES = {**TILE_SHAPES, 3: (3, 4, 5), 4: (2, 3, 2, 3)}


def mode_case(mode, c, dtype, layout="channels_last", shapes=TILE_SHAPES):
    """``(rank, problem)`` of the every-mode tile tests: rank 1 + (mode's index) % 4, 2
    groups of ``c / 2`` channels, 70 output channels, kernel 3 (2 at rank 4), pads (2, 1),
    flipped, cval -2 for constant padding; spatial extents ``shapes[rank]``."""
    rank = 1 + MODES.index(mode) % 4
    return rank, make_problem(n=2, c=c, k=70, g=2, s=shapes[rank],
                              ks=(2,) * rank if rank == 4 else (3,) * rank, stride=(1,) * rank,
                              dilation=(1,) * rank, padding=((2, 1),) * rank, mode=mode,
                              layout=layout, dtype=dtype, flip=True,
                              cval=-2 if mode == "constant" else 0)




def spy_kernels(monkeypatch):
    """:func:`helpers.spy_kernels` (imported when called: the ASan children import this
    module with only tests/kernels on their path)."""
    from helpers import spy_kernels as spy
    return spy(monkeypatch)


def small_ints(rng, shape, dtype, scope=3):
    """Small-integer data (exact sums in every dtype)."""
    dt = np.dtype(dtype)
    a = rng.integers(-scope, scope + 1, size=shape)
    if dt.kind == "c":
        a = a + 1j * rng.integers(-scope, scope + 1, size=shape)
    return a.astype(dt)


def to_physical(logical, layout):
    """Channels-first logical array -> the array in ``layout`` order."""
    return logical if layout == "channels_first" else np.moveaxis(logical, 1, -1)


def to_logical(physical, layout):
    return physical if layout == "channels_first" else np.moveaxis(physical, -1, 1)


def make_view(arr, kind):
    """Same values as ``arr`` through a non-trivial view.

    ``contig``: C-contiguous copy; ``flipped``: negative stride on axis 0 and
    the last axis; ``flipped_batch``: on axis 0 only; ``strided``: every other
    element of a larger buffer;
    ``fortran``: Fortran order.
    """
    if kind == "contig":
        return np.array(arr, order="C")  # always a copy: kernels write outputs in place
    # every kind copies (``np.array``; ``np.ascontiguousarray`` returns a one-element or
    # otherwise already contiguous flipped view itself, and the kernel's in-place writes
    # then reached ``arr``, the caller's reference data)
    if kind == "flipped":
        base = np.array(arr[::-1, ..., ::-1], order="C")
        return base[::-1, ..., ::-1]
    if kind == "flipped_batch":   # a negative stride on axis 0 only (the channels stay contiguous)
        return np.array(arr[::-1], order="C")[::-1]
    if kind == "strided":
        base = np.zeros(arr.shape[:-1] + (2 * arr.shape[-1] + 1,), dtype=arr.dtype)
        base[..., 1::2] = arr
        return base[..., 1::2]
    if kind == "fortran":
        return np.array(arr, order="F")
    raise ValueError(kind)


# ---------------------------------------------------------------------------
# References
# ---------------------------------------------------------------------------

def gather_index(problem):
    """(C*taps, N*prod(O)) flat indices into the logical x (-1: constant padding)."""
    n, c, s = problem.batch, problem.in_channels, problem.in_shape
    idx = np.arange(n * c * math.prod(s), dtype=np.int64).reshape((n, c) + tuple(s))
    pads = [(0, 0), (0, 0)] + [tuple(p) for p in problem.padding]
    if problem.padding_mode == "constant":
        idx_p = np.pad(idx, pads, mode="constant", constant_values=-1)
    else:
        idx_p = np.pad(idx, pads, mode=problem.padding_mode)
    rows = []
    for ci in range(c):
        for tap in np.ndindex(*problem.kernel_shape):
            sl = [slice(None), ci]
            for i, kap in enumerate(tap):
                keff = problem.kernel_shape[i] - 1 - kap if problem.flip else kap
                start = problem.dilation[i] * keff
                stop = start + (problem.out_shape[i] - 1) * problem.stride[i] + 1
                sl.append(slice(start, stop, problem.stride[i]))
            rows.append(idx_p[tuple(sl)].reshape(-1))
    return np.stack(rows)


def ref_vol2col(problem, x_logical):
    idx = gather_index(problem)
    flat = np.ascontiguousarray(x_logical).reshape(-1)
    out = np.where(idx >= 0, flat[np.maximum(idx, 0)], np.asarray(problem.cval).astype(x_logical.dtype))
    return out.astype(x_logical.dtype)


def ref_col2vol(problem, col):
    idx = gather_index(problem)
    out = np.zeros(problem.batch * problem.in_channels * math.prod(problem.in_shape), dtype=col.dtype)
    ok = idx >= 0
    np.add.at(out, idx[ok], col.reshape(idx.shape)[ok])
    return out.reshape((problem.batch, problem.in_channels) + tuple(problem.in_shape))


def ref_conv(problem, x_logical, w_logical, bias=None, alpha=1, beta=0, y0=None):
    """y (logical, channels-first) = alpha * conv + beta * y0 + bias.

    bfloat16 is computed in float64 and rounded once (the kernels' float32 epilogue of
    small-integer sums is exact, then rounds once; NumPy's bfloat16 arithmetic would round
    every step)."""
    if problem.dtype == BFLOAT16:
        wide = problem.with_(dtype=np.dtype(np.float64))
        y = ref_conv(wide, x_logical.astype(np.float64), w_logical.astype(np.float64),
                     None if bias is None else bias.astype(np.float64), alpha, beta,
                     None if y0 is None else y0.astype(np.float64))
        return y.astype(problem.dtype)
    g = problem.groups
    col = ref_vol2col(problem, x_logical)
    kg, cg, taps = problem.out_channels // g, problem.in_channels // g, problem.taps
    m = problem.batch * math.prod(problem.out_shape)
    outs = []
    for gi in range(g):
        wg = w_logical[gi * kg:(gi + 1) * kg].reshape(kg, cg * taps)
        outs.append(wg @ col[gi * cg * taps:(gi + 1) * cg * taps])
    y = np.concatenate(outs).reshape((problem.out_channels, problem.batch) + tuple(problem.out_shape))
    y = np.moveaxis(y, 0, 1) * np.asarray(alpha).astype(problem.dtype)
    if beta != 0:
        y = y + np.asarray(beta).astype(problem.dtype) * y0
    if bias is not None:
        y = y + bias.reshape((1, -1) + (1,) * problem.ndim)
    return y.astype(problem.dtype)


# ---------------------------------------------------------------------------
# Forward kernels against the reference
# ---------------------------------------------------------------------------

def inputs(problem, rng, x_view="contig", w_view="contig"):
    """Small-integer logical operands and their physical views."""
    x_log = small_ints(rng, (problem.batch, problem.in_channels) + problem.in_shape, problem.dtype)
    w_log = small_ints(rng, (problem.out_channels, problem.in_channels // problem.groups)
                       + problem.kernel_shape, problem.dtype, scope=2)
    x = make_view(to_physical(x_log, problem.layout), x_view)
    w = make_view(to_physical(w_log, problem.layout), w_view)
    return x_log, w_log, x, w


#: The launcher of each forward kernel family (keyed as ``registry.FAMILIES``).
FORWARD_LAUNCHERS = {"implicit_gemm_fprop": launch.run_implicit_gemm_fprop,
                     "direct_conv": launch.run_direct}


def check_forward(family, problem, loader, rng, *, x_view="contig", w_view="contig", bias=False,
                  alpha=1, beta=0, y_layout_view="contig", run=None, **kwargs):
    """Runs a forward kernel family on small integers (``run``: the launcher, default the
    family's); asserts the exact reference."""
    x_log, w_log, x, w = inputs(problem, rng, x_view, w_view)
    b = small_ints(rng, (problem.out_channels,), problem.dtype) if bias else None
    y0_log = small_ints(rng, (problem.batch, problem.out_channels) + problem.out_shape, problem.dtype)
    y = make_view(to_physical(y0_log, problem.layout), y_layout_view)
    run = FORWARD_LAUNCHERS[family] if run is None else run
    run(loader, problem, x, w, y, bias=b, alpha=alpha, beta=beta, **kwargs)
    ref = ref_conv(problem, x_log, w_log, b, alpha, beta, y0_log)
    np.testing.assert_array_equal(to_logical(y, problem.layout), ref)
    return y


#: Relative-norm bounds of :func:`random_error` for the tiles of 128-byte K-tiles (the
#: multistage and wgmma tiles, 2 x 9 K-tiles on random data), per dtype: TF32 products are
#: exact in float and the float32 sums of K = 576 (16-bit types: 1152) terms err by far less
#: than 2e-5; float16 and bfloat16 add their one final rounding (2**-11, 2**-8 relative).
RANDOM_BOUND = {np.dtype(np.float32): 2e-5, np.dtype(np.float16): 2.0 ** -11 + 2e-5,
                BFLOAT16: 2.0 ** -8 + 2e-5}


def random_error(problem, run, rng):
    """Relative-norm error of ``run(x, w, y)`` (a launcher writing ``y``) on random data
    (float32 operands rounded to TF32, what the TF32 tiles take) against the float64
    convolution of the same operands."""
    from cupyconv.backends.arrays import to_tf32
    dtype = problem.dtype
    x = rng.standard_normal(problem.x_shape).astype(dtype)
    w = rng.standard_normal(problem.w_shape).astype(dtype)
    if dtype == np.float32:
        x, w = to_tf32(x), to_tf32(w)
    y = np.zeros(problem.y_shape, dtype)
    run(x, w, y)
    ref = ref_conv(problem.with_(dtype=np.dtype(np.float64)),
                   to_logical(x, problem.layout).astype(np.float64),
                   to_logical(w, problem.layout).astype(np.float64))
    got = to_logical(y, problem.layout).astype(np.float64)
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


def check_refusals(run, tile, dtype, cases):
    """Each ``(spec, match)`` of ``cases`` (``spec``: ``make_problem`` fields on a 5 x 5,
    3 x 3 problem, plus ``tf32`` and ``x_channels`` ``"reversed"``) makes the launcher ``run``
    raise a ValueError matching ``match`` with ``tile``, before any kernel loads."""
    import pytest

    def never(*_):
        raise AssertionError("no kernel may load")
    for spec, match in cases:
        spec = dict(spec)
        flags = {"tf32": spec.pop("tf32", np.dtype(dtype) == np.float32)}
        reversed_channels = spec.pop("x_channels", None) == "reversed"
        problem = make_problem(n=1, k=8, g=1, s=(5, 5), ks=(3, 3), stride=(1, 1), dilation=(1, 1),
                               padding=((1, 1), (1, 1)), dtype=dtype, **spec)
        x = np.zeros(problem.x_shape, dtype)
        x = x[..., ::-1] if reversed_channels else x
        w = np.zeros(problem.w_shape, dtype)
        with pytest.raises(ValueError, match=match):
            run(never, problem, x, w, np.zeros(problem.y_shape, dtype), tile=tile, **flags)
