"""How a SciPy-style call becomes one ConvProblem (``cupyconv.core.signal_map``).

The mapping is shape-level: these tests check the problem it builds (modes
as padding, batch vs per-kernel groups, scipy's ``valid`` swap), that it is
frozen and memoised, and that ``operands``/``finish`` round-trip the
caller's axes.  Results against scipy are tests/api/test_signal_vs_scipy.py.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from cupyconv.core import args
from cupyconv.core.problem import ConvProblem
from cupyconv.core.signal_map import SignalCall, check_mode, signal_call
from helpers import ref_convolve, small_ints

F8 = np.dtype(np.float64)


def _call(s1, s2, mode="full", axes=None, correlate=False, d1=F8, d2=F8):
    return signal_call(s1, np.dtype(d1), s2, np.dtype(d2), mode,
                       args.normalize_axes(axes, len(s1)), correlate)


@pytest.mark.parametrize("mode, padding, out", [
    ("full", ((3, 3),), (13,)),
    ("same", ((2, 1),), (10,)),
    ("valid", ((0, 0),), (7,)),
])
def test_mode_is_padding(mode, padding, out):
    call = _call((10,), (4,), mode)
    p = call.problem
    assert isinstance(p, ConvProblem) and p.flip and p.op == "forward"
    assert p.x_shape == (1, 1, 10) and p.w_shape == (1, 1, 4)
    assert p.padding == padding and p.out_shape == out and call.result_shape == out
    assert not call.swap and call.batch_shape == ()


def test_valid_swap_when_in2_covers_in1():
    call = _call((3, 4), (5, 6), "valid")
    assert call.swap
    assert call.problem.x_shape == (1, 1, 5, 6) and call.problem.w_shape == (1, 1, 3, 4)
    assert call.result_shape == (3, 3)
    with pytest.raises(ValueError, match=r"For 'valid' mode, one must be at least as large"):
        _call((3, 6), (5, 4), "valid")


def test_shared_kernel_batch():
    """in2's batch axis is 1: one shared kernel over a batch of N = 3."""
    call = _call((3, 9), (1, 4), axes=1)
    p = call.problem
    assert not call.per_kernel and call.batch_shape == (3,)
    assert (p.batch, p.in_channels, p.out_channels, p.groups) == (3, 1, 1, 1)
    assert call.result_shape == (3, 12)


def test_per_kernel_batch_is_groups():
    """in2's batch axis is n: one kernel per batch element, as groups."""
    call = _call((1, 9), (3, 4), axes=[-1])
    p = call.problem
    assert call.per_kernel and call.batch_shape == (3,)
    assert (p.batch, p.in_channels, p.out_channels, p.groups) == (1, 3, 3, 3)
    assert call.result_shape == (3, 12)


def test_batch_axis_between_convolved_axes():
    call = _call((5, 2, 4), (3, 2, 2), axes=(0, 2))
    assert call.axes == (0, 2) and call.order == (1, 0, 2)
    assert call.result_shape == (7, 2, 5)


def test_compute_dtype_and_result_dtype():
    call = _call((5,), (2,), d1=np.int8, d2=np.uint8)
    assert call.result_dtype == np.dtype(np.int16)
    assert call.problem.dtype == np.dtype(np.int64)         # exact integer accumulation
    call = _call((5,), (2,), d1=np.float16, d2=np.float16)
    # float16 operands are not widened before dispatch: the backend computes them
    # (natively on the GPU, in float32 on the CPU; docs/semantics.md "Precision contract")
    assert call.result_dtype == np.float16 and call.problem.dtype == np.float16


def test_zero_rank_has_no_problem():
    call = signal_call((), F8, (), np.dtype(np.complex64), "full", None, True)
    assert call.problem is None and call.result_shape == ()
    assert call.result_dtype == np.complex128 and call.correlate


@pytest.mark.parametrize("s1, s2, axes, match", [
    ((5,), (2, 2), None, r"in1 and in2 should have the same dimensionality"),
    ((0, 5), (1, 3), None, r"must be non-empty along the convolution axes"),
    ((3, 5), (2, 3), 1, r"incompatible shapes for in1 and in2: \(3, 5\) and \(2, 3\) "
                        r"\(axis 0 is not convolved"),
])
def test_errors(s1, s2, axes, match):
    with pytest.raises(ValueError, match=match):
        signal_call(s1, F8, s2, F8, "full", args.normalize_axes(axes, len(s1)), False)


def test_check_mode():
    for mode in ("full", "same", "valid"):
        assert check_mode(mode) == mode
    with pytest.raises(ValueError, match=r"Acceptable mode flags are 'full', 'same' or "
                                         r"'valid', not mode='circular'"):
        check_mode("circular")


def test_frozen_and_memoised():
    a = _call((6, 5), (2, 3), "same")
    assert isinstance(a, SignalCall)
    assert _call((6, 5), (2, 3), "same") is a                 # one mapping per signature
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.swap = True
    assert _call((6, 5), (2, 3), "valid") is not a


@pytest.mark.parametrize("s1, s2, mode, axes, correlate", [
    ((6, 5), (2, 3), "same", None, False),
    ((3, 7), (3, 2), "full", 1, True),                    # per-kernel batch, correlate
    ((4, 2, 5), (1, 2, 3), "valid", (0, 2), False),       # batch axis in the middle
    ((2, 3), (4, 5), "valid", None, True),                # swapped correlate
])
def test_operands_and_finish_round_trip(s1, s2, mode, axes, correlate, rng):
    """``finish(conv(operands))`` is the scipy-semantics result (a reference tap loop
    over the logical operands, so the mapping alone is under test)."""
    a, b = small_ints(rng, s1, np.float64), small_ints(rng, s2, np.float64)
    call = _call(s1, s2, mode, axes, correlate)
    ops = call.operands(a, b, np)
    p = call.problem
    assert ops.activation.shape == (p.batch, p.in_channels) + p.in_shape
    assert ops.filter.shape == (p.out_channels, p.in_channels // p.groups) + p.kernel_shape
    y = _logical_conv(p, ops.activation, ops.filter)
    got = call.finish(y, np)
    assert got.shape == call.result_shape
    np.testing.assert_array_equal(got, ref_convolve(a, b, mode, axes=axes,
                                                    correlate=correlate))


def _logical_conv(p, x, w):
    """True convolution (``p.flip``) of logical operands by a tap loop (tests only)."""
    from helpers import ref_conv
    w = np.flip(w, axis=tuple(range(2, w.ndim))) if p.flip else w
    return ref_conv(x, w, padding=p.padding, groups=p.groups)
