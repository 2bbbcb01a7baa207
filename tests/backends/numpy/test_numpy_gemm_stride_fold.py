"""The NumPy backend's ``gemm`` with a strided last axis whose taps fold into the GEMM's
rows over whole padded input rows (``cupyconv.backends.numpy.gemm_stride``): float32
forward, input gradient and weight gradient against tap-loop references, exactly on
small integers, blocked or whole under the workspace limit; where it does not apply.
"""
from __future__ import annotations

import numpy as np
import pytest

import cupyconv
from cupyconv.backends.numpy import cost, gemm, gemm_grid, gemm_stride
from cupyconv.core.problem import ConvProblem, Operands
from helpers import ref_conv, small_ints
from reference_gradients import ref_grad_weight

#: (x shape, w shape, geometry) whose float32 forward and weight gradient fold the
#: strided last axis: 2-D to 5-D, asymmetric padding with a non-zero cval, reflect and
#: wrap boundaries, dilation on the last and on a lead axis, strided lead axes, a
#: convolution (flipped kernel), an odd-length last axis, a lead stride past its kernel
#: (a phase grid no tap reaches).
STRIDE_CASES = [
    ((2, 4, 6, 5, 7, 9), (4, 4, 3, 3, 3, 3), dict(padding=1, stride=2)),
    ((2, 3, 9, 11), (5, 3, 3, 3), dict(padding=((1, 0), (2, 1)), cval=2.0, stride=(1, 2))),
    ((1, 2, 7, 8, 13), (4, 2, 3, 2, 3), dict(padding=2, stride=(1, 2, 2),
                                             dilation=(2, 1, 2))),
    ((2, 4, 6, 10), (3, 4, 3, 3), dict(padding=1, stride=2, padding_mode="reflect")),
    ((1, 4, 5, 6, 9), (4, 4, 2, 3, 4), dict(padding=((0, 1), (1, 1), (2, 1)), stride=(2, 3, 2),
                                            padding_mode="wrap")),
    ((1, 2, 3, 4, 5, 4, 11), (2, 2, 2, 2, 3, 2, 3), dict(padding=1, stride=2, flip=True)),
    ((2, 3, 10, 9), (2, 3, 2, 3), dict(padding=((1, 0), (1, 1)), stride=(3, 2))),
]


def _problem(x_shape, w_shape, op="forward", dtype=np.float32, **geo):
    return ConvProblem.create(x_shape=x_shape, w_shape=w_shape, dtype=dtype, op=op, **geo)


def _reference_geometry(w, geo):
    """``(w, geo)`` for :func:`helpers.ref_conv` (no ``flip``: the kernel reversed)."""
    geo = dict(geo)
    if geo.pop("flip", False):
        w = w[(slice(None),) * 2 + (slice(None, None, -1),) * (w.ndim - 2)]
    return w, geo


def _spy(monkeypatch, name):
    """Calls of ``gemm.<name>`` recorded (it still runs)."""
    ran, real = [], getattr(gemm, name)
    monkeypatch.setattr(gemm, name, lambda *a: ran.append(a[0]) or real(*a))
    return ran


@pytest.mark.parametrize("x_shape,w_shape,geo", STRIDE_CASES)
@pytest.mark.parametrize("leads", [1, 2, None])
def test_stride_folded_forward_is_exact(x_shape, w_shape, geo, leads, rng, monkeypatch):
    """On small integers the folded forward equals the tap-loop reference exactly, in
    blocks of one or two lead positions or whole, its workspace under the limit; the
    public call agrees."""
    ran = _spy(monkeypatch, "stride_folded_forward")
    x = small_ints(rng, x_shape, np.float32)
    w = small_ints(rng, w_shape, np.float32)
    problem = _problem(x_shape, w_shape, **geo)
    limit = (problem.column_bytes() if leads is None
             else leads * gemm_stride.stride_lead_bytes(problem))
    assert gemm_stride.stride_fold_applies(problem, limit)
    stats = {}
    got = gemm.run(problem, Operands(activation=x, filter=w), limit, stats)
    assert len(ran) == 1 and 0 < stats["peak_workspace"] <= limit
    w_ref, geo_ref = _reference_geometry(w, geo)
    np.testing.assert_array_equal(got, ref_conv(x, w_ref, **geo_ref))
    if not geo.get("flip"):
        np.testing.assert_array_equal(
            cupyconv.conv(x, w, method="gemm", workspace_limit=limit, **geo), got)


# (the unfolded run of non-finite operands, on the worker threads errstate does not reach)
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("x_shape,w_shape,geo", STRIDE_CASES)
@pytest.mark.parametrize("leads", [1, None])
def test_stride_folded_weight_gradient_is_exact(x_shape, w_shape, geo, leads, rng,
                                                monkeypatch):
    """On small integers the folded weight gradient equals the tap-loop reference
    exactly, blocked or whole, under the limit; a non-finite input takes the unfolded
    path (the folded product meets it with ``D``'s zeros) and gives its result."""
    ran = _spy(monkeypatch, "stride_folded_grad_weight")
    x = small_ints(rng, x_shape, np.float32)
    problem = _problem(x_shape, w_shape, op="grad_weight", **geo)
    dy = small_ints(rng, (problem.batch, problem.out_channels) + problem.out_shape,
                    np.float32)
    limit = (problem.column_bytes() if leads is None
             else leads * gemm_stride.stride_lead_bytes(problem))
    stats = {}
    got = gemm.run(problem, Operands(activation=x, output=dy), limit, stats)
    assert len(ran) == 1 and 0 < stats["peak_workspace"] <= limit
    geo_ref = {k: v for k, v in geo.items() if k != "flip"}
    want = ref_grad_weight(x, dy, w_shape, **geo_ref)
    if geo.get("flip"):
        want = want[(slice(None),) * 2 + (slice(None, None, -1),) * (x.ndim - 2)]
    np.testing.assert_array_equal(got, want)
    x[(0,) * x.ndim] = np.inf
    with np.errstate(invalid="ignore"):
        inf_got = gemm.run(problem, Operands(activation=x, output=dy), limit, {})
        monkeypatch.setattr(gemm, "stride_fold_applies", lambda problem, limit: False)
        inf_want = gemm.run(problem, Operands(activation=x, output=dy), limit, {})
    assert len(ran) == 1
    np.testing.assert_array_equal(inf_got, inf_want)


# (the unfolded run of non-finite operands, on the worker threads errstate does not reach)
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("x_shape,w_shape,geo", STRIDE_CASES)
@pytest.mark.parametrize("images", [1, None])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_stride_folded_input_gradient_is_the_exact_adjoint(x_shape, w_shape, geo, images,
                                                           dtype, rng, monkeypatch):
    """On small integers, float32 and float64, the folded input gradient is the reference
    forward's exact adjoint and equals the unfolded engine's, an image per block or whole, under the
    limit (four images: the least block, an image's grids and ``D``, within the columns'
    bytes); non-finite weights take the unfolded path (the folded product meets them
    with ``D``'s zeros) and give its result."""
    ran = _spy(monkeypatch, "stride_folded_grad_input")
    x_shape = (4,) + x_shape[1:]
    x = small_ints(rng, x_shape, dtype)
    w = small_ints(rng, w_shape, dtype)
    problem = _problem(x_shape, w_shape, op="grad_input", dtype=dtype, **geo)
    dy = small_ints(rng, (problem.batch, problem.out_channels) + problem.out_shape,
                    dtype)
    ops = Operands(activation=x, filter=w, output=dy)
    limit = (problem.column_bytes() if images is None
             else images * gemm_stride.stride_image_bytes(problem))
    stats = {}
    got = gemm.run(problem, ops, limit, stats)
    assert len(ran) == 1 and 0 < stats["peak_workspace"] <= limit
    w_ref, geo_ref = _reference_geometry(w, dict(geo, cval=0))   # the linear part
    assert float(np.vdot(ref_conv(x, w_ref, **geo_ref), dy)) == float(np.vdot(x, got))
    real = gemm.stride_fold_applies
    monkeypatch.setattr(gemm, "stride_fold_applies", lambda problem, limit: False)
    np.testing.assert_array_equal(got, gemm.run(problem, ops, limit, {}))
    monkeypatch.setattr(gemm, "stride_fold_applies", real)
    w[(0,) * w.ndim] = np.inf
    with np.errstate(invalid="ignore"):
        inf_got = gemm.run(problem, ops, limit, {})
        monkeypatch.setattr(gemm, "stride_fold_applies", lambda problem, limit: False)
        inf_want = gemm.run(problem, ops, limit, {})
    assert len(ran) == 1
    np.testing.assert_array_equal(inf_got, inf_want)


@pytest.mark.parametrize("x_shape,w_shape,geo,why", [
    ((2, 4, 6, 5, 7, 9), (4, 4, 3, 3, 3, 3), dict(padding=1, stride=2, dtype=np.float64),
     "float64 forward"),
    ((2, 4, 6, 5, 7, 9), (4, 4, 3, 3, 3, 3), dict(padding=1), "stride 1"),
    ((2, 4, 6, 5, 7, 9), (4, 4, 3, 3, 3, 1), dict(padding=1, stride=2), "one tap"),
    ((2, 4, 6, 5, 7, 9), (4, 2, 3, 3, 3, 3), dict(padding=1, stride=2, groups=2), "groups"),
    ((2, 12, 6, 5, 7, 9), (4, 12, 3, 3, 3, 3), dict(padding=1, stride=2), "long runs"),
    ((2, 4, 6, 5, 7, 9), (32, 4, 3, 3, 3, 3), dict(padding=1, stride=2), "too many rows"),
    ((2, 4, 6, 5, 7, 19), (4, 4, 3, 3, 3, 3), dict(padding=1, stride=3), "stride 3"),
    ((2, 4, 6, 5, 7, 9), (4, 4, 3, 3, 3, 3), dict(padding=1, stride=(2, 2, 2, 1),
                                                  op="grad_input"), "input gradient, stride 1"),
])
def test_stride_fold_is_refused_where_it_does_not_pay(x_shape, w_shape, geo, why):
    """Not taken: a float64 forward or weight gradient (no faster), a last axis of
    stride 1 (the extended grid's case), a single tap, groups, columns whose runs already
    reach ``FLAT_MIN_RUN``, more folded rows than ``FOLD_MAX_ROWS``, positions past
    ``STRIDE_FOLD_MAX_WASTE`` per output; the cost model prices no folded last axis
    there."""
    problem = _problem(x_shape, w_shape, **geo)
    limit = problem.column_bytes()
    assert not gemm_stride.stride_fold_applies(problem, limit), why
    grid = cost.grid_columns(problem)
    assert grid is None or grid[2] == 1 or gemm_grid.grid_axes(problem, limit), why


def test_a_limit_below_one_lead_position_runs_unfolded(rng, monkeypatch):
    """Where one lead position's folded workspace does not fit the limit the unfolded
    columns run: exact, under the limit; at exactly that many bytes it folds."""
    x_shape, w_shape, geo = STRIDE_CASES[0]
    ran = _spy(monkeypatch, "stride_folded_forward")
    x = small_ints(rng, x_shape, np.float32)
    w = small_ints(rng, w_shape, np.float32)
    problem = _problem(x_shape, w_shape, **geo)
    lead = gemm_stride.stride_lead_bytes(problem)
    for limit, folds in ((lead - 1, False), (lead, True)):
        stats = {}
        got = gemm.run(problem, Operands(activation=x, filter=w), limit, stats)
        assert bool(ran) == folds and 0 < stats["peak_workspace"] <= limit
        np.testing.assert_array_equal(got, ref_conv(x, w, **geo))


@pytest.mark.parametrize("op,waste", [("forward", 15 / 7), ("grad_weight", 15 / 7),
                                      ("grad_input", 15 / 7 * 8 ** 3 / 7 ** 3)])
def test_the_cost_model_prices_the_folded_columns(op, waste):
    """``cost.grid_columns`` of a folded problem: ``J / O_r`` positions per output (the
    input gradient: over the lead axes' phase grid, ``M = 8`` rows for ``O = 7``), rows
    of ``J`` elements, the last axis's taps folded (the benchmark's strided 4-D layer:
    ``J = 15`` for ``O_r = 7``); the input gradient's adds are not priced serially."""
    problem = _problem((2, 4, 14, 14, 14, 14), (4, 4, 3, 3, 3, 3), padding=1, stride=2,
                       op=op)
    assert gemm_stride.row_length(problem) == 15
    got = cost.grid_columns(problem)
    assert got[1:] == (15, 3, 15) and got[0] == pytest.approx(waste)
    assert cost.gemm_serial(problem) == 0.0


@pytest.mark.parametrize("contiguous", [True, False])
def test_rows_copy_equals_an_assignment(contiguous, rng):
    """``gemm_grid.copy_rows`` (void-dtype rows where both last axes are contiguous, an
    assignment otherwise) writes what ``dst[...] = src`` writes."""
    src = rng.standard_normal((3, 4, 6, 7)).astype(np.float32)
    if not contiguous:
        src = src[..., ::2]
    dst = np.zeros((3, 4, 8, 9), np.float32)
    want = dst.copy()
    inner = (slice(None), slice(None), slice(1, 7), slice(2, 2 + src.shape[-1]))
    want[inner] = src
    gemm_grid.copy_rows(dst[inner], src)
    np.testing.assert_array_equal(dst, want)
