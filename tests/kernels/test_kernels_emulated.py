"""Kernel results under the CPU emulation vs independent NumPy references.

Inputs are small integers, so every comparison except the float64
adjointness check is exact.  Geometry is drawn by Hypothesis (deterministic
profile unless CUPYCONV_HYPOTHESIS_PROFILE=nondeterministic) with bounded
sizes; named problems cover tile non-multiples, 64-bit indexing and 6-D/7-D.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import assume, given, strategies as st  # noqa: E402

from cupyconv._emulation import emulation_available  # noqa: E402
from cupyconv._kernels import launch, registry  # noqa: E402

from problem_lists import spatial_geometry  # noqa: E402
from kernel_reference import (FORWARD_LAUNCHERS, MODES, check_forward, emu_loader,  # noqa: E402
                              hypothesis_settings, inputs as _inputs, make_problem, make_view,
                              ref_col2vol, ref_vol2col, small_ints, to_logical, to_physical)

pytestmark = pytest.mark.skipif(not emulation_available(), reason="CUDA emulation unavailable")

F16, F32, F64, C64, C128, I64 = (np.dtype(t) for t in (np.float16, np.float32, np.float64,
                                                        np.complex64, np.complex128, np.int64))
VIEWS = ("contig", "flipped", "strided", "fortran")


# ---------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------

@st.composite
def geometries(draw, rank, *, max_groups=2, max_cpg=3, max_kpg=3, max_batch=2, modes=MODES,
               cpg_step=1):
    """Bounded random convolution geometry with O >= 1 on every axis.

    Input channels per group are ``cpg_step * (1..max_cpg)``.
    """
    geo = draw(spatial_geometry(rank, {1: 7, 2: 5, 3: 4}.get(rank, 3), modes))
    mode, s, ks, stride = geo["mode"], geo["s"], geo["ks"], geo["stride"]
    dil, pads = geo["dilation"], geo["padding"]
    g = draw(st.integers(1, max_groups))
    return dict(n=draw(st.integers(1, max_batch)), c=g * cpg_step * draw(st.integers(1, max_cpg)),
                k=g * draw(st.integers(1, max_kpg)), g=g, s=tuple(s), ks=tuple(ks),
                stride=tuple(stride), dilation=tuple(dil), padding=tuple(pads), mode=mode,
                cval=draw(st.integers(-2, 2)) if mode == "constant" else 0,  # else unused
                layout=draw(st.sampled_from(("channels_first", "channels_last"))),
                flip=draw(st.booleans()))


def _col_shape(problem, n_count):
    return (problem.in_channels * problem.taps, n_count * math.prod(problem.out_shape))


# ---------------------------------------------------------------------------
# vol2col / col2vol
# ---------------------------------------------------------------------------

def check_vol2col(problem, loader, rng, x_view="contig", n0=0, n_count=None, index64=None):
    n_count = problem.batch - n0 if n_count is None else n_count
    x_log, _, x, _ = _inputs(problem, rng, x_view)
    col = np.full(_col_shape(problem, n_count), 99, dtype=problem.dtype)
    launch.run_vol2col(loader, problem, x, col, n0=n0, n_count=n_count, index64=index64)
    ref = ref_vol2col(problem, x_log).reshape(col.shape[0], problem.batch, -1)
    np.testing.assert_array_equal(col, ref[:, n0:n0 + n_count].reshape(col.shape))
    return col


@pytest.mark.parametrize("rank,dtype", [(1, F64), (2, F64), (3, F64), (4, F64), (5, F64),
                                        (2, C128), (1, I64), (3, F32), (2, F16)])
@hypothesis_settings(12)
@given(data=st.data())
def test_vol2col_matches_reference(rank, dtype, data):
    geo = data.draw(geometries(rank))
    problem = make_problem(dtype=dtype, **geo)
    n0 = data.draw(st.integers(0, problem.batch - 1))
    n_count = data.draw(st.integers(1, problem.batch - n0))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    check_vol2col(problem, emu_loader(), rng, data.draw(st.sampled_from(VIEWS)), n0, n_count)


def check_col2vol(problem, loader, rng, dx_view="contig", n0=0, n_count=None, alpha=1, beta=0,
                  index64=None):
    n_count = problem.batch - n0 if n_count is None else n_count
    col = small_ints(rng, _col_shape(problem, n_count), problem.dtype)
    dx0_log = small_ints(rng, (problem.batch, problem.in_channels) + problem.in_shape, problem.dtype)
    dx = make_view(to_physical(dx0_log, problem.layout), dx_view)
    launch.run_col2vol(loader, problem, col, dx, n0=n0, n_count=n_count, alpha=alpha, beta=beta,
                       index64=index64)
    full = np.zeros(_col_shape(problem, problem.batch), dtype=problem.dtype).reshape(
        col.shape[0], problem.batch, -1)
    full[:, n0:n0 + n_count] = col.reshape(col.shape[0], n_count, -1)
    ref = alpha * ref_col2vol(problem, full.reshape(col.shape[0], -1)) + beta * dx0_log
    got = to_logical(dx, problem.layout)
    sel = slice(n0, n0 + n_count)
    np.testing.assert_array_equal(got[sel], ref[sel].astype(problem.dtype))
    rest = np.ones(problem.batch, bool)
    rest[sel] = False
    np.testing.assert_array_equal(got[rest], dx0_log[rest])  # other batches untouched
    return dx


@pytest.mark.parametrize("rank,dtype", [(1, F64), (2, F64), (3, F64), (4, F64), (2, C64), (1, I64),
                                        (2, F16)])
@hypothesis_settings(12)
@given(data=st.data())
def test_col2vol_matches_scatter_reference(rank, dtype, data):
    geo = data.draw(geometries(rank))
    problem = make_problem(dtype=dtype, **geo)
    n0 = data.draw(st.integers(0, problem.batch - 1))
    n_count = data.draw(st.integers(1, problem.batch - n0))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    check_col2vol(problem, emu_loader(), rng, data.draw(st.sampled_from(VIEWS)), n0, n_count,
                  alpha=data.draw(st.sampled_from((1, 2))), beta=data.draw(st.sampled_from((0, 1))))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("rank", [1, 2, 3])
@hypothesis_settings(4)
@given(data=st.data())
def test_col2vol_is_adjoint_of_vol2col(rank, mode, data):
    """<vol2col(x), c> == <x, col2vol(c)> in float64 to 1e-12 relative."""
    geo = data.draw(geometries(rank, modes=(mode,)))
    geo["cval"] = 0  # the adjoint is of the linear part
    problem = make_problem(dtype=F64, **geo)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x_log = rng.standard_normal((problem.batch, problem.in_channels) + problem.in_shape)
    x = np.ascontiguousarray(to_physical(x_log, problem.layout))
    c = rng.standard_normal(_col_shape(problem, problem.batch))
    col = np.zeros_like(c)
    loader = emu_loader()
    launch.run_vol2col(loader, problem, x, col)
    dx = np.zeros_like(x)
    launch.run_col2vol(loader, problem, c, dx)
    lhs, rhs = np.vdot(col, c), np.vdot(to_logical(dx, problem.layout), x_log)
    assert abs(lhs - rhs) <= 1e-12 * max(abs(lhs), np.abs(col).sum() * np.abs(c).max(), 1e-300)


# ---------------------------------------------------------------------------
# Implicit GEMM and direct
# ---------------------------------------------------------------------------

# (2, F16): half storage with float accumulation; small-integer results stay
# below 2**11, so the half outputs are exact too.
GEMM_CASES = [(1, F64), (2, F64), (3, F64), (4, F64), (2, F32), (2, C128), (1, I64), (3, C64),
              (2, F16)]


def fitting_tiles(problem):
    """The compiled implicit-GEMM tiles that can run ``problem`` on any view (not the
    channels-last variants 3 and 4, which need 16-byte aligned channel runs: their own
    tests)."""
    cpg = problem.in_channels // problem.groups
    return [t for t in registry.gemm_tiles(problem.dtype)
            if registry.gemm_tile_fits(t, cpg) and t[3] < 3]


def check_gemm_drawn(problem, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    check_forward("implicit_gemm_fprop", problem, emu_loader(), rng,
                  x_view=data.draw(st.sampled_from(VIEWS)), w_view=data.draw(st.sampled_from(VIEWS)),
                  bias=data.draw(st.booleans()), alpha=data.draw(st.sampled_from((1, 2))),
                  beta=data.draw(st.sampled_from((0, 1))),
                  tile=data.draw(st.sampled_from(fitting_tiles(problem))))


@pytest.mark.parametrize("rank,dtype", GEMM_CASES)
@hypothesis_settings(10)
@given(data=st.data())
def test_implicit_gemm_matches_reference(rank, dtype, data):
    problem = make_problem(dtype=dtype, **data.draw(geometries(rank)))
    check_gemm_drawn(problem, data)


@pytest.mark.parametrize("rank,dtype", [(1, F32), (2, F64), (3, F32), (4, F64)])
@hypothesis_settings(6)
@given(data=st.data())
def test_implicit_gemm_tap_aligned_matches_reference(rank, dtype, data):
    """C/G a multiple of BK: the tap-aligned tiles (taps outer, channel slices inner)."""
    problem = make_problem(dtype=dtype, **data.draw(geometries(rank, max_cpg=2, cpg_step=8)))
    tiles = [t for t in fitting_tiles(problem) if t[3]]
    assert tiles, "every C/G multiple of 8 has a tap-aligned tile"
    check_gemm_drawn(problem, data)


def test_tap_aligned_tile_rejects_unaligned_channels():
    problem = make_problem(n=1, c=12, k=4, g=1, s=(6, 6), ks=(3, 3), stride=(1, 1),
                           dilation=(1, 1), padding=((1, 1), (1, 1)), dtype=F32)
    with pytest.raises(ValueError, match="multiple of 8"):
        check_forward("implicit_gemm_fprop", problem, emu_loader(), np.random.default_rng(0),
                      tile=(128, 64, 8, 1))


@pytest.mark.parametrize("tile", [t for t in registry.gemm_tiles(F32) if t[3] < 3])
@pytest.mark.parametrize("layout", ["channels_first", "channels_last"])
def test_implicit_gemm_tile_non_multiples(tile, layout):
    """M, K/G and gemm_k all off the tile grid (CUTLASS 'C < CTA::K and non-multiples');
    the tap-aligned tiles with C/G = 16 over an odd number of taps instead."""
    c = 16 if tile[3] else 5
    problem = make_problem(n=1, c=c, k=67, g=1, s=(9, 18), ks=(3, 3), stride=(1, 1),
                           dilation=(1, 1), padding=((1, 0), (0, 1)), layout=layout, dtype=F32)
    assert problem.gemm_m % tile[0] and problem.gemm_n % tile[1]
    assert bool(problem.gemm_k % tile[2]) != bool(tile[3])
    check_forward("implicit_gemm_fprop", problem, emu_loader(), np.random.default_rng(0),
                  x_view="strided", tile=tile)


DIRECT_CASES = [(1, F64), (2, F64), (3, F64), (1, C64), (2, I64), (4, F32), (3, F16)]


@pytest.mark.parametrize("rank,dtype", DIRECT_CASES)
@hypothesis_settings(10)
@given(data=st.data())
def test_direct_matches_reference(rank, dtype, data):
    geo = data.draw(geometries(rank, max_cpg=2, max_kpg=2))
    problem = make_problem(dtype=dtype, **geo)
    limits = [lim for lim in (48 * 1024, 12 * 1024, 4 * 1024)
              if launch.can_implement_direct(problem, lim)[0]]
    assume(limits)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    check_forward("direct_conv", problem, emu_loader(), rng,
                  x_view=data.draw(st.sampled_from(VIEWS)), w_view=data.draw(st.sampled_from(VIEWS)),
                  bias=data.draw(st.booleans()), alpha=data.draw(st.sampled_from((1, 2))),
                  beta=data.draw(st.sampled_from((0, 1))), smem_limit=data.draw(st.sampled_from(limits)))


def test_direct_chunks_long_kernels():
    """A 1-D kernel longer than one shared-memory chunk (taps processed in pieces)."""
    problem = make_problem(n=1, c=1, k=1, g=1, s=(1500,), ks=(301,), stride=(1,), dilation=(2,),
                           padding=((5, 7),), mode="reflect", dtype=F64, flip=True)
    _, (kch, kcw) = launch.direct_tile(problem, 4 * 1024)
    assert kcw < 301
    check_forward("direct_conv", problem, emu_loader(), np.random.default_rng(1), smem_limit=4 * 1024)


@pytest.mark.parametrize("dtype", [np.float32, F64, np.complex128, np.float16])
@pytest.mark.parametrize("s, ks, padding, mode", [
    ((70,), (11,), ((5, 5),), "reflect"),          # 1-D: two tap blocks, the second partial
    ((9, 70), (2, 13), ((1, 0), (6, 6)), "wrap"),   # 2-D: a tile edge and three tap blocks
    ((3, 5, 67), (2, 1, 8), 0, "constant"),         # 3-D: exactly one tap block, valid
])
def test_direct_vector_path(dtype, s, ks, padding, mode):
    """Stride and dilation 1 along W take the register-window path (16-byte loads,
    kDirectTapBlock taps per window): windows across tap blocks, tile edges and modes."""
    problem = make_problem(n=2, c=2, k=3, g=1, s=s, ks=ks, stride=(1,) * len(s),
                           dilation=(1,) * len(s), padding=padding, mode=mode, dtype=dtype)
    check_forward("direct_conv", problem, emu_loader(), np.random.default_rng(7), bias=True)


def test_direct_falls_back_to_smaller_tiles():
    """A large stride overflows the preferred tile's input halo; a smaller tile runs it."""
    problem = make_problem(n=1, c=1, k=1, g=1, s=(40, 400), ks=(3, 3), stride=(3, 9),
                           dilation=(1, 1), padding=0, dtype=F64)
    assert launch.direct_tap_chunk(problem) is None             # preferred tile: too big
    tile, _ = launch.direct_tile(problem)
    assert tile != registry.direct_tiles(2)[0]
    check_forward("direct_conv", problem, emu_loader(), np.random.default_rng(0))


def test_direct_rejects_tiles_that_do_not_fit():
    problem = make_problem(n=1, c=1, k=1, g=1, s=(4, 11000), ks=(3, 3), stride=(3, 40),
                           dilation=(1, 1), padding=0, dtype=F64)
    ok, why = launch.can_implement_direct(problem)
    assert not ok and "shared memory" in why
    with pytest.raises(ValueError, match="shared memory"):
        check_forward("direct_conv", problem, emu_loader(), np.random.default_rng(0))


# ---------------------------------------------------------------------------
# High rank, 64-bit indexing, reverse schedule
# ---------------------------------------------------------------------------

def _high_rank_problem(rank, mode="reflect", layout="channels_last", dtype=F64):
    s = (3, 2, 4, 2, 3, 2, 2)[:rank]
    return make_problem(n=2, c=2, k=3, g=1, s=s, ks=(2,) * rank, stride=((1, 2) * 4)[:rank],
                        dilation=(1,) * rank, padding=((1, 2),) * rank, mode=mode, layout=layout,
                        dtype=dtype, flip=True)


@pytest.mark.parametrize("family", ["vol2col", "col2vol", "implicit_gemm_fprop", "direct_conv"])
@pytest.mark.parametrize("rank", [6, 7])
def test_high_rank(family, rank):
    problem = _high_rank_problem(rank)
    rng = np.random.default_rng(rank)
    if family == "vol2col":
        check_vol2col(problem, emu_loader(), rng, "flipped")
    elif family == "col2vol":
        check_col2vol(problem, emu_loader(), rng, "strided", beta=1)
    else:
        check_forward(family, problem, emu_loader(), rng, x_view="flipped", bias=True)


@pytest.mark.parametrize("family", ["vol2col", "col2vol", "implicit_gemm_fprop", "direct_conv"])
def test_forced_int64_indexing(family):
    problem = make_problem(n=2, c=4, k=4, g=2, s=(5, 6), ks=(3, 2), stride=(2, 1), dilation=(1, 2),
                           padding=((4, 1), (2, 3)), mode="symmetric", layout="channels_last",
                           dtype=C128, cval=0)
    rng = np.random.default_rng(3)
    if family == "vol2col":
        check_vol2col(problem, emu_loader(), rng, "flipped", index64=True)
    elif family == "col2vol":
        check_col2vol(problem, emu_loader(), rng, "flipped", index64=True)
    else:
        check_forward(family, problem, emu_loader(), rng, x_view="flipped", w_view="strided",
                      bias=True, beta=1, index64=True)


@pytest.mark.parametrize("family", ["vol2col", "col2vol", "implicit_gemm_fprop", "direct_conv",
                                    "implicit_gemm_fprop tap-aligned",
                                    "implicit_gemm_fprop tensor-core"])
def test_reverse_schedule_matches_normal(family):
    """Threads/blocks scheduled in reverse order give bitwise-identical results."""
    aligned = family.endswith("tap-aligned")
    problem = make_problem(n=2, c=16 if aligned or family.endswith("core") else 3, k=5, g=1,
                           s=(7, 9), ks=(3, 2), stride=(2, 1),
                           dilation=(1, 2), padding=((3, 1), (2, 2)), mode="wrap", dtype=F32, flip=True)
    outs = []
    for mode in ("normal", "reverse"):
        rng = np.random.default_rng(11)
        if family == "vol2col":
            outs.append(check_vol2col(problem, emu_loader(mode), rng))
        elif family == "col2vol":
            outs.append(check_col2vol(problem, emu_loader(mode), rng, beta=1))
        elif aligned:
            outs.append(check_forward("implicit_gemm_fprop", problem, emu_loader(mode), rng,
                                      bias=True, tile=(64, 64, 8, 1)))
        elif family.endswith("tensor-core"):
            outs.append(check_forward("implicit_gemm_fprop", problem.with_(dtype=F64),
                                      emu_loader(mode), rng, bias=True, tile=(64, 64, 8, 2)))
        else:
            outs.append(check_forward(family, problem, emu_loader(mode), rng, bias=True))
    np.testing.assert_array_equal(outs[0], outs[1])


def test_empty_output_is_a_no_op():
    problem = make_problem(n=0, c=1, k=1, g=1, s=(5,), ks=(3,), stride=(1,), dilation=(1,), padding=0)
    x = np.zeros(problem.x_shape)
    w = np.zeros(problem.w_shape)
    y = np.zeros(problem.y_shape)
    launch.run_implicit_gemm_fprop(emu_loader(), problem, x, w, y)
    launch.run_direct(emu_loader(), problem, x, w, y)
    launch.run_vol2col(emu_loader(), problem, x, np.zeros(0))


@pytest.mark.parametrize("family", ["implicit_gemm_fprop", "direct_conv"])
def test_half_accumulates_in_float(family):
    """4096 products of 1*1: a half accumulator would stall at 2048 (2048 + 1
    rounds back to 2048); float accumulation gives 4096, exact in half.  Sums
    above 65504 overflow to +inf when stored as half (TF PR#12832)."""
    c, taps = (64, 64) if family == "implicit_gemm_fprop" else (1, 4096)
    problem = make_problem(n=1, c=c, k=2, g=1, s=(taps,), ks=(taps,), stride=(1,),
                           dilation=(1,), padding=0, dtype=F16)
    x = np.ones((1, c, taps), F16)
    w = np.stack([np.ones((c, taps), F16), np.full((c, taps), 16, F16)])   # sums 4096, 65536
    y = np.zeros((1, 2, 1), F16)
    run = FORWARD_LAUNCHERS[family]
    run(emu_loader(), problem, x, w, y)
    assert y[0, 0, 0] == 4096
    assert np.isposinf(y[0, 1, 0])
