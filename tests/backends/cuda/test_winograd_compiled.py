"""Issue 24: Winograd as a compiled call, explicit (``conv(..., method="winograd")``) and
planned (``plan_conv(..., method="winograd")``).

The explicit call's NaN/Inf warning is a step of its program (the one-flag scan: 1 launch,
1 synchronisation, 1 copy per repeated call), so it compiles and warns on every call whose
data are not finite; a plan promises its problem, not its data: its first call of each key
scans and warns, a repeated call replays with 0 synchronisations and 0 copies.  The N-D
``G`` is a constant of the program, on the device once.  Every result is compared bit for
bit with the normal path (``config.compiled_calls`` off): the same programs run.
"""
from __future__ import annotations

import contextlib
import warnings

import numpy as np
import pytest

import cupyconv
from cupyconv._kernels import program
from cupyconv.api.compiled import CompiledCall, lookup
from cupyconv.backends.cuda import runners
from helpers import called_twice, small_ints
from test_compiled_calls import normal_path

F32 = np.dtype(np.float32)
#: Where a non-finite value is planted: first element of x, last of w, middle of x.
PLANTS = [("x", 0, np.nan), ("w", -1, np.inf), ("x", 37, -np.inf)]


@contextlib.contextmanager
def caught():
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        yield got


def _winograd_warnings(got):
    return [w for w in got if "Use of winograd convolution" in str(w.message)]


def _arrays(dev, rng, n=2):
    shapes = [(2, 4, 9, 8), (6, 4, 3, 3)] * n
    return [dev.to_dev(small_ints(rng, s, F32)) for s in shapes]


def _planted(dev, x, w, which, at, value):
    x, w = dev.to_host(x).copy(), dev.to_host(w).copy()
    (x if which == "x" else w).reshape(-1)[at] = value
    return dev.to_dev(x), dev.to_dev(w)


def test_explicit_winograd_compiles_and_replays_bit_for_bit(dev, rng):
    """A repeated call is a compiled call (scan + winograd programs) equal to the normal
    path on new data, bit for bit, and to its own first result on the first data."""
    x1, w1, x2, w2 = _arrays(dev, rng)
    with dev.scope():
        first = dev.to_host(called_twice(cupyconv.conv, x1, w1, padding=1,
                                         method="winograd")).copy()
        entry = lookup(cupyconv.conv, x1, w1, padding=1, method="winograd")
        assert isinstance(entry, CompiledCall), entry
        assert [p.name for p in entry.programs] == ["data_scan", "winograd"]
        with program.accounting() as counts:
            again = dev.to_host(cupyconv.conv(x2, w2, padding=1, method="winograd"))
        with normal_path():
            ref = dev.to_host(cupyconv.conv(x2, w2, padding=1, method="winograd"))
        np.testing.assert_array_equal(again, ref)
        np.testing.assert_array_equal(
            dev.to_host(cupyconv.conv(x1, w1, padding=1, method="winograd")), first)
    assert (counts["syncs"], counts["d2h"], counts["h2d"]) == (1, 1, 0), counts


@pytest.mark.parametrize("which,at,value", PLANTS, ids=str)
def test_explicit_winograd_warns_on_every_non_finite_call(dev, rng, which, at, value):
    """Finite first (compiled), then non-finite data with the same key: the replayed
    scan warns, pointing at the caller; the result equals the normal path's (NaN where
    it spreads)."""
    x, w = _arrays(dev, rng, 1)
    bad_x, bad_w = _planted(dev, x, w, which, at, value)
    with dev.scope():
        with caught() as got:
            cupyconv.conv(x, w, padding=1, method="winograd")
            cupyconv.conv(x, w, padding=1, method="winograd")
        assert not _winograd_warnings(got)
        for _ in range(2):
            with caught() as got:
                y = cupyconv.conv(bad_x, bad_w, padding=1, method="winograd")
            found = _winograd_warnings(got)
            assert len(found) == 1 and found[0].filename == __file__, found
        with normal_path(), caught():
            ref = cupyconv.conv(bad_x, bad_w, padding=1, method="winograd")
    np.testing.assert_array_equal(dev.to_host(y), dev.to_host(ref))


def test_a_plan_scans_each_key_only_until_it_compiles(dev, rng):
    x, w = _arrays(dev, rng, 1)
    bad_x, bad_w = _planted(dev, x, w, "x", -1, np.nan)
    plan = cupyconv.plan_conv(x.shape, w.shape, F32, padding=1, method="winograd",
                              backend=dev.name)
    assert "does not scan" in plan.explain()
    for _ in range(2):                 # the first call of its key, and the one recording it
        with caught() as got:
            plan(bad_x, bad_w)
        assert len(_winograd_warnings(got)) == 1
    with program.accounting() as counts, caught() as got:
        y = plan(bad_x, bad_w)                            # the promise: no scan
    assert not _winograd_warnings(got)
    assert (counts["syncs"], counts["d2h"], counts["h2d"]) == (0, 0, 0), counts
    assert "; repeated calls replay (CompiledCall(winograd:" in plan.explain()
    with normal_path(), caught():
        ref = plan(bad_x, bad_w)
    np.testing.assert_array_equal(dev.to_host(y), dev.to_host(ref))
    xs = dev.xp.asarray(dev.to_host(bad_x)[:, :, ::-1])    # another key (strides): scans
    with caught() as got:
        plan(xs, bad_w)
    assert len(_winograd_warnings(got)) == 1


def test_the_weight_transform_is_a_program_constant(dev, rng, monkeypatch):
    """The N-D G is a constant of the program (on the device once, in the transform's
    float64): a repeated call neither builds, hashes nor copies it."""
    x, w = _arrays(dev, rng, 1)
    with dev.scope():
        called_twice(cupyconv.conv, x, w, padding=1, method="winograd")
        entry = lookup(cupyconv.conv, x, w, padding=1, method="winograd")
        wino = entry.programs[-1]
        g = dict(wino.constants)["g0"]
        assert g.dtype == np.float64 and g.shape[1] == 9       # (prod alpha, 3 x 3 taps)
        asked = []
        monkeypatch.setattr(runners._Constants, "constant",
                            lambda self, host: asked.append(host) or pytest.fail("hashed"))
        with program.accounting() as counts:
            cupyconv.conv(x, w, padding=1, method="winograd")
    assert asked == [] and counts["h2d"] == 0


#: ``(dtype, max ulps of the compute dtype)``: the kernel and the array-module path both
#: sum in binary64, in different orders (the kernel tap by tap with fused multiply-adds,
#: the GEMM blocked), so ``U`` may differ by the last bit after the one rounding to the
#: compute dtype (float32: at most 1 ulp; float64 and complex128: a few ulps of binary64).
U_ULPS = [(np.float32, 1), (np.float64, 4), (np.complex64, 1), (np.complex128, 4)]


@pytest.mark.parametrize("dtype,ulps", U_ULPS, ids=lambda v: str(v))
def test_the_weight_kernel_equals_the_array_module_transform(dev, rng, dtype, ulps):
    """Every piece's ``U`` from the weight-transform launch against the array-module
    path (widening, G GEMM, rounding) on a flipped, strided 2-D problem (stride 2: four
    polyphase pieces of different taps); the workspace estimate holds the ``U``s."""
    from cupyconv._kernels import program as prog_mod
    from cupyconv.backends.cuda import winograd
    from cupyconv.core.problem import ConvProblem
    problem = ConvProblem.create(x_shape=(1, 3, 11, 10), w_shape=(4, 3, 5, 3), stride=2,
                                 padding=2, dtype=dtype, flip=True)
    w = small_ints(rng, problem.w_shape, dtype) * dtype(0.37)
    x = dev.to_dev(small_ints(rng, problem.x_shape, dtype))
    wd = dev.to_dev(w[:, :, ::-1])[:, :, ::-1]                     # a view: negative strides
    runner = runners.runner_for(dev.name)
    prog = winograd.winograd_program(problem, x, wd, runner)
    bound = prog_mod.execute(prog, dev.xp, dict(x=x, w=wd))
    plan = winograd._plan(problem)
    wide = winograd.winograd_conv.wide_weights(problem, w)
    cdtype = np.dtype(winograd.wl.compute_dtype(problem.dtype))
    names = [n for n, _, _ in prog.allocations if n.startswith("u")]
    assert len(names) == len(plan) > 1
    held = sum(int(np.prod(s)) * np.dtype(d).itemsize for n, s, d in prog.allocations
               if n != "y")
    assert held <= winograd.workspace_bytes(problem)     # U counted in the estimate
    for i, (pieces, tile, _) in enumerate(plan):
        taps = (slice(None), slice(None)) + tuple(p.taps for p in pieces)
        ref = winograd.winograd_conv.transform_weights(wide[taps], 1, tile, cdtype, np)
        got = dev.to_host(bound[f"u{i}"])
        real = np.finfo(cdtype).eps * ulps
        np.testing.assert_allclose(got, ref, rtol=real, atol=real * np.abs(ref).max())
