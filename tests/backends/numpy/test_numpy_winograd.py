"""The ``winograd`` algorithm on the NumPy backend against the float64 tap-loop reference,
and the accuracy gate that keeps ``auto`` away from tiles that would lose precision."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

import cupyconv
from cupyconv import config
from cupyconv.backends.numpy import NumpyBackend
from cupyconv.backends.winograd_conv import plan_tiles
from cupyconv.core import ConvProblem
from cupyconv.core import winograd as wg
from cupyconv.dispatch import choose

from helpers import PADDING_MODES, ref_conv

TORCH_MODE = {"constant": "zeros", "reflect": "reflect", "symmetric": "symmetric",
              "wrap": "circular", "edge": "replicate"}


@st.composite
def geometries(draw, rank):
    """Kernels of 2-7 taps (2-4 above rank 2), stride 1-3, dilation 1-2, groups, layouts,
    every padding mode; every axis has an output."""
    kmax = 7 if rank <= 2 else 4
    smax = {1: 20, 2: 10, 3: 6, 4: 5}[rank]
    mode = draw(st.sampled_from(PADDING_MODES))
    g = draw(st.integers(1, 2))
    geo = dict(mode=mode, groups=g, s=[], ks=[], stride=[], dilation=[], padding=[])
    for _ in range(rank):
        k = draw(st.integers(1 if rank > 1 else 2, kmax))
        d = draw(st.integers(1, 2))
        s = draw(st.integers(1, smax))
        pb = draw(st.integers(0, 2 if mode == "constant" else s - 1 if mode == "reflect" else s))
        pa = draw(st.integers(0, pb))
        pa += max(d * (k - 1) + 1 - (s + pb + pa), 0)
        if mode == "reflect" and pa > s - 1:
            s = max(s, pa + 1)
        geo["s"].append(s)
        geo["ks"].append(k)
        geo["stride"].append(draw(st.integers(1, 3)))
        geo["dilation"].append(d)
        geo["padding"].append((pb, pa))
    if all(k == 1 for k in geo["ks"]):
        geo["ks"][0] = 2
        geo["padding"][0] = (geo["padding"][0][0], geo["padding"][0][1] + 1)
    geo["layout"] = draw(st.sampled_from(("channels_first", "channels_last")))
    geo["n"] = draw(st.integers(1, 2))
    geo["c"] = g * draw(st.integers(1, 3))
    geo["k"] = g * draw(st.integers(1, 3))
    return geo


def _arrays(geo, dtype, rng):
    x = rng.standard_normal((geo["n"], geo["c"]) + tuple(geo["s"]))
    w = rng.standard_normal((geo["k"], geo["c"] // geo["groups"]) + tuple(geo["ks"]))
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(x.shape)
        w = w + 1j * rng.standard_normal(w.shape)
    if geo["layout"] == "channels_last":
        x, w = np.moveaxis(x, 1, -1), np.moveaxis(w, 1, -1)
    return x.astype(dtype), w.astype(dtype)


def _kwargs(geo):
    return dict(stride=tuple(geo["stride"]), dilation=tuple(geo["dilation"]),
                padding=tuple(geo["padding"]), groups=geo["groups"], layout=geo["layout"],
                padding_mode=TORCH_MODE[geo["mode"]])


def _bound(problem, dtype):
    """Relative-norm bound: direct summation's c * K * u times the N-D error growth of the
    tiles run (the product over axes of wg.error_growth); c = 4 covers the complex
    multiply-add and the three transform stages' roundings."""
    u = {4: 2.0**-24, 8: 2.0**-53}[np.dtype(dtype).type(0).real.dtype.itemsize]
    plan = plan_tiles(problem)
    growth = max(math.prod(wg.error_growth(wg.transforms(m, p.r))
                           for p, m in zip(pieces, tile) if p.r > 1)
                 for pieces, tile in plan)
    return 4 * max(problem.gemm_k, 1) * u * max(growth, 1.0)


def _problem(geo, x, w):
    return ConvProblem.create(x_shape=x.shape, w_shape=w.shape, stride=tuple(geo["stride"]),
                              padding=tuple(geo["padding"]), dilation=tuple(geo["dilation"]),
                              groups=geo["groups"], padding_mode=geo["mode"],
                              layout=geo["layout"], dtype=x.dtype)


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
    ref = ref_conv(x, w, stride=geo["stride"], padding=geo["padding"], dilation=geo["dilation"],
                   groups=geo["groups"], padding_mode=geo["mode"], layout=geo["layout"])
    assert y.dtype == dtype and y.shape == ref.shape
    err = np.linalg.norm(y.astype(ref.dtype) - ref) / max(np.linalg.norm(ref), 1e-300)
    assert err <= _bound(problem.with_(layout="channels_first"), dtype), err


def test_the_gate_keeps_auto_away_from_lossy_tiles():
    backend = NumpyBackend()
    ok = ConvProblem.create(x_shape=(2, 16, 24, 24, 24), w_shape=(16, 16, 3, 3, 3),
                            padding=1, dtype=np.float32)
    lossy = ConvProblem.create(x_shape=(2, 16, 24, 24), w_shape=(16, 16, 7, 7), padding=3,
                               dtype=np.float32)
    assert backend.can_implement(ok, "winograd")[0]
    refused, why = backend.can_implement(lossy, "winograd")
    assert not refused and "error growth" in why and "above the limit of 10" in why
    assert "winograd" not in choose(lossy, backend).ranked
    assert "winograd" in choose(ok, backend).ranked
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
