"""The NumPy backend's ``gemm`` with kernel taps folded into the GEMM's rows
(``cupyconv.backends.numpy.gemm_fold``): forward, stride-1 input gradient (run as a
forward) and float32 weight gradient against tap-loop references, exactly on small
integers, blocked or whole under the workspace limit; within the summation bound on
random floats.
"""
from __future__ import annotations

import numpy as np
import pytest

import cupyconv
from cupyconv.backends.numpy import cost, gemm, gemm_fold, gemm_grid
from cupyconv.core.problem import ConvProblem, Operands
from helpers import assert_elementwise, conv_bounds, ref_conv, small_ints
from reference_gradients import ref_grad_weight

#: (x shape, w shape, geometry) whose forward and float32 weight gradient fold the taps
#: of the last one or two axes (``gemm_fold.fold_axes``): 3-D to 5-D, groups, dilation on
#: a folded axis, asymmetric padding with a non-zero cval, reflect and wrap boundaries
#: with a strided lead axis.
FOLD_CASES = [
    ((2, 4, 5, 6, 7, 8), (8, 4, 3, 3, 3, 3), dict(padding=1)),
    ((1, 6, 7, 9, 10), (2, 6, 3, 3, 3), dict(padding=((1, 0), (1, 2), (2, 1)), cval=2.0)),
    ((2, 8, 6, 7, 9), (8, 4, 3, 3, 3), dict(padding=1, groups=2)),
    ((1, 6, 5, 14, 8), (2, 6, 3, 3, 3), dict(padding=((1, 1), (2, 2), (1, 1)),
                                             dilation=(1, 2, 1))),
    ((1, 4, 4, 5, 6, 7, 6), (4, 4, 2, 2, 3, 3, 3), dict(padding=1, padding_mode="reflect")),
    ((2, 4, 7, 8, 9), (3, 4, 3, 3, 3), dict(padding=((1, 1), (2, 0), (1, 2)),
                                            padding_mode="wrap", stride=(2, 1, 1))),
]
#: (x shape, w shape, geometry) whose stride-1 input gradient runs as a forward that
#: folds (``gemm.forward_applies``): groups, dilation on a folded axis, asymmetric
#: padding with a non-zero cval.
GRAD_INPUT_CASES = [
    FOLD_CASES[0],
    FOLD_CASES[2],
    ((1, 2, 5, 14, 8), (6, 2, 3, 3, 3), dict(padding=((1, 1), (2, 2), (1, 1)),
                                             dilation=(1, 2, 1))),
    ((1, 2, 5, 14, 9), (6, 2, 3, 3, 3), dict(padding=((0, 2), (3, 1), (1, 0)), cval=-1.5)),
]


def _problem(x_shape, w_shape, dtype, op="forward", **geo):
    return ConvProblem.create(x_shape=x_shape, w_shape=w_shape, dtype=dtype, op=op, **geo)


def _fold(problem):
    """``(e, f, folded lead row bytes)`` of the problem gemm's blocks run."""
    run = gemm.as_run(problem)
    e = gemm_grid.grid_axes(run, run.column_bytes())
    f = gemm_fold.fold_axes(run, e, run.column_bytes()) if e else 0
    assert e >= 2 and f >= 1, (e, f)
    return e, f, gemm_fold.fold_row_bytes(run, e, f)


def _spy(monkeypatch, name):
    """Calls of ``gemm.<name>`` recorded (it still runs)."""
    ran, real = [], getattr(gemm, name)
    monkeypatch.setattr(gemm, name, lambda *a: ran.append(a[-1]) or real(*a))
    return ran


def _unfolded(monkeypatch):
    monkeypatch.setattr(gemm, "fold_plan", lambda problem, limit: (0, 0))


@pytest.mark.parametrize("x_shape,w_shape,geo", FOLD_CASES)
@pytest.mark.parametrize("rows", [1, 3, None])
def test_folded_forward_is_exact(x_shape, w_shape, geo, rows, rng, monkeypatch):
    """On small integers the folded forward equals the tap-loop reference exactly, in
    blocks of one or three lead rows or whole, its workspace (columns, product and
    shifted sum) under the limit; the public call agrees."""
    ran = _spy(monkeypatch, "folded_forward")
    x = small_ints(rng, x_shape, np.float64)
    w = small_ints(rng, w_shape, np.float64)
    problem = _problem(x_shape, w_shape, x.dtype, **geo)
    e, f, row = _fold(problem)
    limit = problem.column_bytes() if rows is None else rows * row
    stats = {}
    got = gemm.run(problem, Operands(activation=x, filter=w), limit, stats)
    assert ran == [f]
    assert 0 < stats["peak_workspace"] <= limit
    np.testing.assert_array_equal(got, ref_conv(x, w, **geo))
    np.testing.assert_array_equal(
        cupyconv.conv(x, w, method="gemm", workspace_limit=limit, **geo), got)


@pytest.mark.parametrize("x_shape,w_shape,geo", GRAD_INPUT_CASES)
@pytest.mark.parametrize("rows", [1, None])
def test_folded_stride_one_input_gradient_is_the_exact_adjoint(x_shape, w_shape, geo, rows,
                                                              rng, monkeypatch):
    """The stride-1 input gradient, run as the folded forward of the transposed problem,
    is the reference forward's exact adjoint on small integers and equals the unfolded
    engine's, under the limit."""
    ran = _spy(monkeypatch, "folded_forward")
    x = small_ints(rng, x_shape, np.float64)
    w = small_ints(rng, w_shape, np.float64)
    problem = _problem(x_shape, w_shape, x.dtype, op="grad_input", **geo)
    assert gemm.forward_applies(problem)
    e, f, row = _fold(problem)
    dy = small_ints(rng, (problem.batch, problem.out_channels) + problem.out_shape, np.float64)
    ops = Operands(activation=x, filter=w, output=dy)
    limit = problem.column_bytes() if rows is None else rows * row
    stats = {}
    got = gemm.run(problem, ops, limit, stats)
    assert ran == [f] and 0 < stats["peak_workspace"] <= limit
    linear = dict(geo, cval=0)                     # the gradient of the linear part
    assert float(np.vdot(ref_conv(x, w, **linear), dy)) == float(np.vdot(x, got))
    _unfolded(monkeypatch)
    np.testing.assert_array_equal(got, gemm.run(problem, ops, limit, {}))


@pytest.mark.parametrize("x_shape,w_shape,geo", FOLD_CASES)
@pytest.mark.parametrize("rows", [1, None])
def test_folded_weight_gradient_is_exact(x_shape, w_shape, geo, rows, rng, monkeypatch):
    """float32 on small integers: the folded weight gradient equals the tap-loop
    reference exactly, blocked or whole, under the limit; a non-finite input takes the
    channels-last path (the folded columns' extra positions would meet ``dy``'s
    zeros) and gives its result."""
    ran = _spy(monkeypatch, "folded_grad_weight")
    x = small_ints(rng, x_shape, np.float32)
    problem = _problem(x_shape, w_shape, x.dtype, op="grad_weight", **geo)
    e, f, row = _fold(problem)
    dy = small_ints(rng, (problem.batch, problem.out_channels) + problem.out_shape, np.float32)
    limit = problem.column_bytes() if rows is None else rows * row
    stats = {}
    got = gemm.run(problem, Operands(activation=x, output=dy), limit, stats)
    assert ran == [f] and 0 < stats["peak_workspace"] <= limit
    np.testing.assert_array_equal(got, ref_grad_weight(x, dy, w_shape, **geo))
    x[(0,) * x.ndim] = np.nan
    with np.errstate(invalid="ignore"):
        nan_got = gemm.run(problem, Operands(activation=x, output=dy), limit, {})
        monkeypatch.setattr(gemm, "grid_axes", lambda problem, limit: 0)
        nan_want = gemm.run(problem, Operands(activation=x, output=dy), limit, {})
    assert len(ran) == 1
    np.testing.assert_array_equal(nan_got, nan_want)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("cval", [np.inf, np.nan])
def test_a_non_finite_boundary_takes_the_unfolded_weight_gradient(cval, rng, monkeypatch):
    """A non-finite constant boundary with a finite input: the folded weight gradient is
    not taken (its extra positions would meet the boundary with zeros of ``dy``) and the
    result is the channels-last path's, NaN for NaN."""
    x_shape, w_shape, geo = FOLD_CASES[0]
    geo = dict(geo, cval=cval)
    ran = _spy(monkeypatch, "folded_grad_weight")
    x = small_ints(rng, x_shape, np.float32)
    problem = _problem(x_shape, w_shape, x.dtype, op="grad_weight", **geo)
    dy = small_ints(rng, (problem.batch, problem.out_channels) + problem.out_shape, np.float32)
    ops = Operands(activation=x, output=dy)
    with np.errstate(invalid="ignore"):
        got = gemm.run(problem, ops, problem.column_bytes(), {})
        monkeypatch.setattr(gemm, "grid_axes", lambda problem, limit: 0)
        monkeypatch.setattr(gemm, "fold_plan", lambda problem, limit: (0, 0))
        want = gemm.run(problem, ops, problem.column_bytes(), {})
    assert ran == []
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("x_shape,w_shape,geo", [FOLD_CASES[0], FOLD_CASES[4]])
def test_folded_float32_results_are_within_the_summation_bound(x_shape, w_shape, geo, rng):
    """Random float32 data: the folded forward and weight gradient (a different
    summation order from the unfolded GEMM's) stay within the elementwise bound
    ``c * K * u * (|x| conv |w|)`` of the float64 reference, ``K`` the terms summed."""
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    problem = _problem(x_shape, w_shape, x.dtype, **geo)
    _fold(problem)
    y = cupyconv.conv(x, w, method="gemm", **geo)
    bounds = conv_bounds(x, w, **geo)
    assert_elementwise(y, ref_conv(x, w, **geo), bounds.abs_conv, bounds.k, np.float32,
                       "forward")
    dy = rng.standard_normal(y.shape).astype(np.float32)
    _fold(_problem(x_shape, w_shape, x.dtype, op="grad_weight", **geo))
    dw = cupyconv.conv_grad_weight(x, dy, w_shape, method="gemm", **geo)
    scale = ref_grad_weight(np.abs(x), np.abs(dy), w_shape, **geo)
    terms = problem.batch * int(np.prod(problem.out_shape))
    assert_elementwise(dw, ref_grad_weight(x, dy, w_shape, **geo), scale, terms, np.float32,
                       "weight gradient")


@pytest.mark.parametrize("op", ["forward", "grad_weight"])
def test_a_limit_below_one_folded_row_runs_unfolded(op, rng, monkeypatch):
    """Where one folded lead row does not fit the workspace limit the taps are not
    folded: the result is still exact and the workspace under the limit; at exactly one
    row they fold."""
    x_shape, w_shape, geo = FOLD_CASES[1]
    ran = _spy(monkeypatch, "folded_forward" if op == "forward" else "folded_grad_weight")
    x = small_ints(rng, x_shape, np.float32)
    w = small_ints(rng, w_shape, np.float32)
    problem = _problem(x_shape, w_shape, x.dtype, op=op, **geo)
    _, _, row = _fold(problem)
    dy = small_ints(rng, (problem.batch, problem.out_channels) + problem.out_shape, np.float32)
    ops = Operands(activation=x, filter=w, output=dy)
    want = ref_conv(x, w, **geo) if op == "forward" else ref_grad_weight(x, dy, w_shape, **geo)
    for limit, folds in ((row - 1, False), (row, True)):
        stats = {}
        got = gemm.run(problem, ops, limit, stats)
        assert bool(ran) == folds and 0 < stats["peak_workspace"] <= limit
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("x_shape,w_shape,folded", [
    ((1, 8, 12, 12, 12, 12), (8, 8, 3, 3, 3, 3), 9),
    ((2, 4, 10, 10, 10, 10), (8, 4, 3, 3, 3, 3), 3),
    ((1, 4, 7, 7, 7, 7, 7), (4, 4, 3, 3, 3, 3, 3), 9),
    ((4, 8, 64, 64), (8, 8, 3, 3), 1),
], ids=["4-D 8->8 12^4", "4-D 4->8 10^4", "5-D 4->4 7^5", "2-D 8->8 64^2"])
def test_few_channel_layers_fold_as_many_taps_as_the_gemm_rows_allow(x_shape, w_shape,
                                                                     folded):
    """``fold_axes`` folds the taps of as many trailing axes as keep the GEMM's rows
    ``K * |A|`` within 72 and within the folded depth (the benchmark's 4-D and 5-D layers);
    a shallow 2-D GEMM (depth 72) folds none.  The cost model prices the same fold
    (``cost.grid_columns``)."""
    problem = _problem(x_shape, w_shape, np.float32, padding=1)
    e = gemm_grid.grid_axes(problem, problem.column_bytes())
    f = gemm_fold.fold_axes(problem, e, problem.column_bytes())
    assert (int(np.prod(w_shape[len(w_shape) - f:])) if f else 1) == folded
    waste, full, taps, ext = cost.grid_columns(problem)
    assert taps == folded and ext >= full
