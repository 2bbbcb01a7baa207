"""The NumPy ``winograd`` along the last axis (``backends/numpy/winograd_axis.py``): its
results against the float64 gemm reference within the error bound of its tile, the
tile it takes, what it refuses, the cost model's choice of it, and its replay by a
repeated ``auto`` call while the data stay finite."""
from __future__ import annotations

import math

import numpy as np
import pytest

import cupyconv
from cupyconv import config
from cupyconv.api.compiled import CompiledCall, lookup
from cupyconv.backends.numpy import NumpyBackend, cost, gemm, winograd_axis
from cupyconv.core import ConvProblem
from cupyconv.core.problem import Operands
from helpers import called_twice, normal_path

#: (name, x shape, w shape, geometry): the path's cases, each a reason it could go wrong.
CASES = [
    ("4-D layer, whole tiles", (1, 8, 6, 5, 4, 12), (8, 8, 3, 3, 3, 3), dict(padding=1)),
    ("2-D, batch, last tile cropped", (3, 4, 9, 13), (5, 4, 3, 3), dict(padding=1)),
    ("groups, asymmetric padding, reflect", (2, 6, 9, 11, 13), (4, 3, 3, 2, 5),
     dict(padding=((1, 0), (2, 1), (0, 3)), groups=2, padding_mode="reflect")),
    ("lead stride and dilation, wrap", (1, 4, 9, 17), (4, 4, 3, 4),
     dict(padding=2, stride=(2, 1), dilation=(2, 1), padding_mode="wrap")),
    ("edge, two taps", (2, 3, 7, 10), (2, 3, 2, 2), dict(padding=((1, 0), (1, 0)),
                                                         padding_mode="edge")),
    ("symmetric, seven taps", (1, 2, 5, 30), (3, 2, 1, 7), dict(padding=3,
                                                                padding_mode="symmetric")),
    ("cval", (1, 4, 9, 17), (4, 4, 3, 4), dict(padding=2, cval=1.5)),
    ("no padding, one lead tap", (3, 2, 5, 7), (2, 2, 1, 3), dict()),
]

DTYPES = [np.float32, np.float64]


def _problem(x, w, op="forward", **geo):
    return ConvProblem.create(x_shape=x.shape, w_shape=w.shape, dtype=x.dtype, op=op, **geo)


def _bound(problem, dtype):
    """Direct summation's 4 K u times the error growth of the path's tile (the bound of
    ``tests/winograd_cases.py``)."""
    u = {4: 2.0**-24, 8: 2.0**-53}[np.dtype(dtype).itemsize]
    return 4 * problem.gemm_k * u * max(winograd_axis.growth(problem), 1.0)


def _error(y, ref):
    return np.linalg.norm(y - ref) / np.linalg.norm(ref)


def _limit():
    return NumpyBackend().default_workspace_limit()


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name,x_shape,w_shape,geo", CASES, ids=[c[0] for c in CASES])
def test_the_path_matches_the_float64_reference(name, x_shape, w_shape, geo, dtype, rng):
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    problem = _problem(x, w, **geo)
    assert winograd_axis.applies(problem)
    y = winograd_axis.run(problem, Operands(activation=x, filter=w), _limit(), {})
    ref = cupyconv.conv(x.astype(np.float64), w.astype(np.float64), method="gemm", **geo)
    assert y.dtype == dtype and y.shape == ref.shape
    assert _error(y, ref) <= _bound(problem, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_true_convolution_flips_the_kernel(dtype, rng):
    """``convolve``'s flipped kernel (the problem's ``flip``) through the weight transform."""
    x = rng.standard_normal((2, 3, 8, 11)).astype(dtype)
    w = rng.standard_normal((4, 3, 3, 3)).astype(dtype)
    problem = ConvProblem.create(x_shape=x.shape, w_shape=w.shape, padding=1, flip=True,
                                 dtype=x.dtype)
    y = winograd_axis.run(problem, Operands(activation=x, filter=w), _limit(), {})
    ref = cupyconv.conv(x.astype(np.float64), w[:, :, ::-1, ::-1].astype(np.float64),
                        padding=1, method="gemm")
    assert _error(y, ref) <= _bound(problem, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_the_input_gradient_runs_its_forward_problem(dtype, rng):
    x_shape, w_shape, padding = (2, 4, 10, 9, 11), (6, 4, 3, 2, 3), ((1, 1), (1, 0), (1, 1))
    dy = rng.standard_normal((2, 6, 10, 9, 11)).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    problem = ConvProblem.create(x_shape=x_shape, w_shape=w_shape, padding=padding,
                                 dtype=np.dtype(dtype), op="grad_input")
    assert winograd_axis.applies(problem)
    dx = winograd_axis.run(problem, Operands(output=dy, filter=w), _limit(), {})
    ref = cupyconv.conv_grad_input(dy.astype(np.float64), w.astype(np.float64), x_shape,
                                   padding=padding, method="gemm")
    assert dx.shape == x_shape and _error(dx, ref) <= _bound(problem, dtype)


def test_the_least_workspace_still_runs_it(rng):
    """The grouped problem's blocks under the least workspace the gemm engine takes (one
    output position's columns): the path runs, within its bound."""
    x = rng.standard_normal((2, 8, 6, 7, 12)).astype(np.float32)
    w = rng.standard_normal((8, 8, 3, 3, 3)).astype(np.float32)
    problem = _problem(x, w, padding=1)
    least = gemm.min_workspace_bytes(winograd_axis.inner_problem(problem))
    assert 0 < winograd_axis.workspace_bytes(problem, 0) < winograd_axis.workspace_bytes(
        problem, _limit())
    y = winograd_axis.run(problem, Operands(activation=x, filter=w), least, {})
    ref = cupyconv.conv(x.astype(np.float64), w.astype(np.float64), padding=1, method="gemm")
    assert _error(y, ref) <= _bound(problem, np.float32)


@pytest.mark.parametrize("taps,outputs,want", [
    (3, 12, 4),     # F(4, 3): 6 x 3 = 18 transform positions, against 24 for F(2, 3)
    (3, 6, 2),      # 12 either way: the smaller tile (the smaller error growth)
    (3, 2, 2),      # F(2, 3): one tile
    (2, 5, 2),      # F(2, 2): 3 x 3 = 9, against 10 for F(4, 2)
    (7, 20, 2),     # F(4, 7)'s growth (25.8x) is past the limit
])
def test_the_tile_makes_the_fewest_transform_positions(taps, outputs, want):
    x_shape = (1, 2, 4, outputs + taps - 1)
    problem = ConvProblem.create(x_shape=x_shape, w_shape=(2, 2, 1, taps), dtype=np.float32)
    assert winograd_axis.tile(problem) == want


def test_the_error_gate_bounds_the_tile(rng):
    """``config.winograd_max_error_growth`` picks the tile on every call: a call after
    the gate changed runs the new tile, its grouped problem and price made for it."""
    x = rng.standard_normal((1, 2, 4, 14)).astype(np.float32)
    w = rng.standard_normal((2, 2, 1, 3)).astype(np.float32)
    problem = _problem(x, w)
    ref = cupyconv.conv(x.astype(np.float64), w.astype(np.float64), method="gemm")
    ops = Operands(activation=x, filter=w)
    assert winograd_axis.tile(problem) == 4
    winograd_axis.run(problem, ops, _limit(), {})
    before = cost.winograd_axis_price(problem)
    try:
        config.winograd_max_error_growth = 2.0           # F(2, 3): 1.48
        assert winograd_axis.tile(problem) == 2
        assert winograd_axis.inner_problem(problem).in_shape[-1] == 6
        assert cost.winograd_axis_price(problem) != before
        assert _error(winograd_axis.run(problem, ops, _limit(), {}), ref) <= _bound(
            problem, np.float32)
        config.winograd_max_error_growth = 1.0
        assert winograd_axis.tile(problem) is None and not winograd_axis.applies(problem)
        assert cost.winograd_axis_price(problem) == math.inf
    finally:
        config.winograd_max_error_growth = None


#: (name, x shape, w shape, geometry, dtype): problems the path leaves to the N-D tiles.
REFUSED = [
    ("stride on the last axis", (1, 2, 8, 9), (2, 2, 3, 3), dict(stride=(1, 2)), np.float32),
    ("dilation on the last axis", (1, 2, 8, 9), (2, 2, 3, 3), dict(dilation=(1, 2)),
     np.float32),
    ("one tap on the last axis", (1, 2, 8, 9), (2, 2, 3, 1), dict(), np.float32),
    ("one spatial axis", (1, 2, 20), (2, 2, 3), dict(), np.float32),
    ("complex", (1, 2, 8, 9), (2, 2, 3, 3), dict(), np.complex64),
    ("half precision", (1, 2, 8, 9), (2, 2, 3, 3), dict(), np.float16),
    ("strided input gradient", (1, 2, 8, 9), (2, 2, 3, 3), dict(stride=2, op="grad_input"),
     np.float32),
    ("weight gradient", (1, 2, 8, 9), (2, 2, 3, 3), dict(op="grad_weight"), np.float32),
]


@pytest.mark.parametrize("name,x_shape,w_shape,geo,dtype", REFUSED, ids=[c[0] for c in REFUSED])
def test_it_refuses_what_it_does_not_run(name, x_shape, w_shape, geo, dtype):
    problem = ConvProblem.create(x_shape=x_shape, w_shape=w_shape, dtype=np.dtype(dtype),
                                 **geo)
    assert not winograd_axis.applies(problem)
    assert cost.winograd_axis_price(problem) == math.inf
    assert not cost.winograd_axis_pays(problem)


def test_the_cost_model_prices_winograd_at_the_cheaper_path():
    """A 4-D layer of 8 channels prices the last-axis path under the N-D tiles (which
    NumPy runs at a fraction of BLAS's rate); ``winograd``'s price is the cheaper."""
    problem = ConvProblem.create(x_shape=(1, 8, 12, 12, 12, 12), w_shape=(8, 8, 3, 3, 3, 3),
                                 padding=1, dtype=np.float32)
    axis = cost.winograd_axis_price(problem)
    assert cost.winograd_axis_pays(problem)
    assert cost.predict(problem, "winograd") == axis < cost._winograd_tiles(problem, 1.0)
    assert axis > cost.predict(winograd_axis.inner_problem(problem), "gemm")


def _layer(rng, dtype=np.float32):
    """A layer whose ``auto`` runs the last-axis path on this machine's cost model."""
    x = rng.standard_normal((1, 16, 8, 8, 8, 12)).astype(dtype)
    w = rng.standard_normal((16, 16, 3, 3, 3, 3)).astype(dtype)
    if cupyconv.plan_conv(x.shape, w.shape, x.dtype, padding=1,
                          backend="numpy").algorithm != "winograd":
        pytest.skip("auto does not choose winograd for this layer on this cost model")
    assert cost.winograd_axis_pays(_problem(x, w, padding=1))
    return x, w


def test_auto_replays_the_path_while_the_data_stay_finite(rng):
    """A repeated ``auto`` call replays the path's host program (its data rule a guard:
    every operand finite); on a NaN the guard fails and the normal path runs another
    algorithm, whose NaNs stay where the NaN reaches."""
    x, w = _layer(rng)
    with cupyconv.use_backend("numpy"):
        with normal_path():
            ref = cupyconv.conv(x, w, padding=1)
        np.testing.assert_array_equal(called_twice(cupyconv.conv, x, w, padding=1), ref)
        entry = lookup(cupyconv.conv, x, w, padding=1)
        assert isinstance(entry, CompiledCall)
        assert [p.name for p in entry.programs] == ["numpy winograd"]
        x[0, 0, 0, 0, 0, 0] = np.nan
        y = cupyconv.conv(x, w, padding=1)
        with normal_path():
            again = cupyconv.conv(x, w, padding=1)
    np.testing.assert_array_equal(y, again)
    assert np.isnan(y[0, :, :2, :2, :2, :2]).all() and np.isfinite(y[..., 3:]).all()
