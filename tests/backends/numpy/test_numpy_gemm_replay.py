"""A repeated NumPy ``gemm`` call replays its host program (``cupyconv.api.compiled``):
the forward and both gradients skip validation and the dispatcher on a repeated key, and
every replay equals the normal path bit for bit, on new values of the same key too,
including values that take another of gemm's paths (a non-finite input or weight)."""
from __future__ import annotations

import numpy as np
import pytest

import cupyconv
from cupyconv.api.compiled import CompiledCall, lookup
from helpers import called_twice, normal_path

#: (name, x shape, w shape, geometry): one case per path of ``backends/numpy/gemm.py``.
REPLAY_CASES = [
    ("columns", (2, 4, 7, 13), (5, 4, 3, 2), dict(padding=1)),
    ("grouped strided", (3, 6, 9, 7), (4, 3, 2, 2), dict(groups=2, stride=2)),
    ("extended grid, folded", (2, 4, 5, 6, 7, 8), (8, 4, 3, 3, 3, 3), dict(padding=1)),
    ("strided last axis folded", (2, 4, 6, 5, 7, 9), (4, 4, 3, 3, 3, 3),
     dict(padding=1, stride=2)),
    ("reflect, dilated", (1, 2, 5, 6, 7), (3, 2, 2, 3, 2),
     dict(padding=1, dilation=(1, 2, 1), padding_mode="reflect")),
]

DTYPES = [np.float32, np.float64]


def _calls(x, w, dy, geo):
    """``{op: (public function, arguments)}`` of the three operations at ``method="gemm"``."""
    geo = dict(geo, method="gemm")
    return {"conv": (cupyconv.conv, (x, w), geo),
            "grad_input": (cupyconv.conv_grad_input, (dy, w, x.shape), geo),
            "grad_weight": (cupyconv.conv_grad_weight, (x, dy, w.shape), geo)}


def _operands(rng, x_shape, w_shape, geo, dtype):
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    with normal_path():
        y = cupyconv.conv(x, w, **geo)
    return x, w, rng.standard_normal(y.shape).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name,x_shape,w_shape,geo", REPLAY_CASES,
                         ids=[c[0] for c in REPLAY_CASES])
def test_a_repeated_gemm_call_replays_the_normal_paths_result(name, x_shape, w_shape, geo,
                                                              dtype, rng):
    x, w, dy = _operands(rng, x_shape, w_shape, geo, dtype)
    for op, (fn, args, kwargs) in _calls(x, w, dy, geo).items():
        with normal_path():
            ref = fn(*args, **kwargs)
        np.testing.assert_array_equal(called_twice(fn, *args, **kwargs), ref, err_msg=op)
        entry = lookup(fn, *args, **kwargs)
        assert isinstance(entry, CompiledCall), (op, entry)
        assert [p.name for p in entry.programs] == ["numpy gemm"], (op, entry)
        np.testing.assert_array_equal(fn(*args, **kwargs), ref, err_msg=op)


@pytest.mark.parametrize("name,x_shape,w_shape,geo", REPLAY_CASES,
                         ids=[c[0] for c in REPLAY_CASES])
def test_a_replay_reads_the_new_calls_values(name, x_shape, w_shape, geo, rng):
    """The same arrays refilled between calls (the key unchanged): each replay is the
    normal path's result on the new values, finite or not (a non-finite input or weight
    takes gemm's unfolded path, decided again on every replay)."""
    x, w, dy = _operands(rng, x_shape, w_shape, geo, np.float32)
    calls = _calls(x, w, dy, geo)
    for fn, args, kwargs in calls.values():
        called_twice(fn, *args, **kwargs)
    for fill in ("new values", "inf in x", "nan in w", "finite again"):
        for a in (x, w, dy):
            a[...] = rng.standard_normal(a.shape)
        if fill == "inf in x":
            x.flat[x.size // 2] = np.inf
        elif fill == "nan in w":
            w.flat[0] = np.nan
        for op, (fn, args, kwargs) in calls.items():
            with normal_path():
                ref = fn(*args, **kwargs)
            assert isinstance(lookup(fn, *args, **kwargs), CompiledCall)
            np.testing.assert_array_equal(fn(*args, **kwargs), ref, err_msg=f"{op}, {fill}")


def test_auto_on_a_layer_replays_gemm(rng):
    """``method="auto"`` on a 4-D layer chooses gemm, and its repeated calls replay."""
    geo = dict(padding=1, stride=2)
    x, w, dy = _operands(rng, (2, 4, 8, 8, 8, 8), (4, 4, 3, 3, 3, 3), geo, np.float32)
    if cupyconv.plan_conv(x.shape, w.shape, x.dtype, backend="numpy",
                          **geo).algorithm != "gemm":
        pytest.skip("auto does not choose gemm for this layer on this machine's cost model")
    with normal_path():
        ref = cupyconv.conv(x, w, **geo)
    np.testing.assert_array_equal(called_twice(cupyconv.conv, x, w, **geo), ref)
    entry = lookup(cupyconv.conv, x, w, **geo)
    assert isinstance(entry, CompiledCall) and entry.programs[0].name == "numpy gemm"
