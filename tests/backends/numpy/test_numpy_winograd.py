"""The ``winograd`` algorithm on the NumPy backend against the float64 tap-loop reference,
and the accuracy gate that keeps ``auto`` away from tiles that would lose precision."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

import cupyconv
from cupyconv import config
from cupyconv.backends.numpy import NumpyBackend, cost, winograd_axis
from cupyconv.core import ConvProblem
from cupyconv.dispatch import choose

from winograd_cases import arrays as _arrays, bound as _bound, geometries, kwargs as _kwargs
from winograd_cases import check_gate_keeps_auto_away, error_over_magnitudes
from winograd_cases import problem_of as _problem


@pytest.mark.parametrize("rank", [1, 2, 3, 4])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
@given(data=st.data())
def test_winograd_matches_the_float64_reference(rank, dtype, data):
    geo = data.draw(geometries(rank))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x, w = _arrays(geo, dtype, rng)
    problem = _problem(geo, x, w)
    ok, why = NumpyBackend().can_implement(problem.with_(layout="channels_first"), "winograd")
    if not ok:
        assert "error growth" in why
        return
    y = cupyconv.conv(x, w, method="winograd", **_kwargs(geo))
    err, ref = error_over_magnitudes(y, x, w, geo)
    assert y.dtype == dtype and y.shape == ref.shape
    assert err <= _bound(problem.with_(layout="channels_first"), dtype,
                         growth=_growth_run(problem.with_(layout="channels_first"))), err


def _growth_run(problem):
    """The 1-D error growth of the last-axis path where ``winograd`` takes it, else None
    (the N-D tiles')."""
    return winograd_axis.growth(problem) if cost.winograd_axis_pays(problem) else None


def test_the_gate_keeps_auto_away_from_lossy_tiles():
    check_gate_keeps_auto_away(NumpyBackend())
    x = np.ones((1, 1, 12, 12), np.float32)
    with pytest.raises(ValueError, match="error growth"):
        cupyconv.conv(x, np.ones((1, 1, 7, 7), np.float32), padding=3, method="winograd")


def test_config_limit_turns_winograd_off_and_on():
    backend = NumpyBackend()
    p = ConvProblem.create(x_shape=(1, 4, 16, 16), w_shape=(4, 4, 3, 3), padding=1,
                           dtype=np.float64)
    try:
        config.winograd_max_error_growth = 0
        assert not backend.can_implement(p, "winograd")[0]
        assert "winograd" not in choose(p, backend).ranked
        config.winograd_max_error_growth = 1e6
        assert backend.can_implement(
            ConvProblem.create(x_shape=(1, 1, 16, 16), w_shape=(1, 1, 7, 7), dtype=np.float32),
            "winograd")[0]
    finally:
        config.winograd_max_error_growth = None


def test_refusals_name_the_reason():
    backend = NumpyBackend()
    ints = ConvProblem.create(x_shape=(1, 1, 8, 8), w_shape=(1, 1, 3, 3), dtype=np.int32)
    assert "float and complex" in backend.can_implement(ints, "winograd")[1]
    onetap = ConvProblem.create(x_shape=(1, 2, 8), w_shape=(2, 2, 1), dtype=np.float64)
    assert "1-tap" in backend.can_implement(onetap, "winograd")[1]
    nan_cval = ConvProblem.create(x_shape=(1, 1, 8), w_shape=(1, 1, 3), padding=1,
                                  cval=np.nan, dtype=np.float64)
    assert "cval" in backend.can_implement(nan_cval, "winograd")[1]


def test_non_finite_data_never_runs_winograd_under_auto():
    """A NaN spreads to its whole tile through the transforms (outputs that never read it)."""
    backend = NumpyBackend()
    x = np.ones((1, 1, 10), np.float64)
    x[0, 0, 4] = np.nan
    w = np.ones((1, 1, 3), np.float64)
    problem = ConvProblem.create(x_shape=x.shape, w_shape=w.shape, dtype=np.float64)
    from cupyconv.core import Operands
    ok, why = backend.data_ok(problem, "winograd", Operands(activation=x, filter=w))
    assert not ok and "non-finite" in why
    y = cupyconv.conv(x, w, method="winograd")
    assert np.isnan(y[0, 0, 0:4]).all()         # F(m, 3) tiles around index 4 ...
    ref = cupyconv.conv(x, w, method="direct")
    assert np.isfinite(ref[0, 0, 0:2]).all()    # ... where direct has finite outputs
