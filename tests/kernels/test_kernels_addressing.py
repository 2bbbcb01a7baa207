"""Operands the kernels cannot address (a byte stride that is not a multiple of
the itemsize, a complex view aligned below its element size) are rejected by
:func:`launch.addressable` and by every launcher, before any kernel is built or
launched (the CUDA backend copies such operands first)."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

from cupyconv._emulation import emulation_available
from cupyconv._kernels import launch

from kernel_reference import FORWARD_LAUNCHERS, emu_loader, make_problem, small_ints

needs_emulation = pytest.mark.skipif(not emulation_available(), reason="CUDA emulation unavailable")

FAMILIES = ("vol2col", "col2vol", "implicit_gemm_fprop", "direct_conv")


# ---------------------------------------------------------------------------
# 3. Operands the kernels cannot address
# ---------------------------------------------------------------------------

def _misaligned_complex64(shape):
    """complex64 view starting 4 bytes into a float32 buffer (aligned to 4, not 8)."""
    buf = np.zeros(2 * math.prod(shape) + 1, np.float32)[1:]
    a = buf.view(np.complex64).reshape(shape)
    assert a.__array_interface__["data"][0] % 8 == 4
    return a


def _aligned_complex64(shape):
    """complex64 view starting 8 bytes into a float32 buffer."""
    buf = np.zeros(2 * math.prod(shape) + 2, np.float32)[2:]
    return buf.view(np.complex64).reshape(shape)


def _record_view(shape, dtype=np.float64):
    """Field ``b`` of a packed ``(int8, dtype)`` record: byte stride itemsize + 1."""
    rec = np.zeros(math.prod(shape), dtype=[("a", np.int8), ("b", dtype)])
    return rec["b"].reshape(shape)


def _packed_complex128_field(n=6):
    """complex128 field at byte offset 8 of a packed 32-byte record (stride 32: a multiple)."""
    rec = np.zeros(n, dtype=[("a", np.float64), ("z", np.complex128), ("b", np.float64)])
    z = rec["z"]
    assert z.strides == (32,) and z.__array_interface__["data"][0] % 16 == 8
    return z


class _FakeCupyArray:
    """Only what addressable reads of a CuPy array: shape, strides, itemsize, dtype, data.ptr."""

    class _Ptr:
        def __init__(self, ptr):
            self.ptr = ptr

    def __init__(self, ptr, shape, strides, dtype):
        self.data = self._Ptr(ptr)
        self.shape, self.strides, self.dtype = shape, strides, np.dtype(dtype)
        self.itemsize = self.dtype.itemsize


@pytest.mark.parametrize("make, why", [
    (lambda: _misaligned_complex64((3, 3)), "aligned to 8 bytes"),
    (lambda: _packed_complex128_field(), "aligned to 16 bytes"),
    (lambda: _record_view((6,)), "stride 9 of axis 0 is not a multiple of the itemsize 8"),
    (lambda: _record_view((2, 3)), "stride 27 of axis 0 is not a multiple of the itemsize 8"),
    (lambda: _record_view((4,), np.complex64), "multiple of the itemsize 8"),
    (lambda: np.zeros(9, np.uint8)[1:].view(np.float16), "aligned to 2 bytes"),
    (lambda: np.zeros(13, np.uint8)[1:].view(np.float32)[::-1], "aligned to 4 bytes"),
    (lambda: _FakeCupyArray(0x7F0000000004, (4,), (8,), np.complex64), "aligned to 8 bytes"),
    (lambda: _FakeCupyArray(0x7F0000000000, (4,), (12,), np.float64), "multiple of the itemsize"),
])
def test_addressable_rejects(make, why):
    ok, reason = launch.addressable(make())
    assert not ok
    assert re.search(why, reason), reason


@pytest.mark.parametrize("make", [
    lambda: np.zeros((2, 3), np.float64),
    lambda: np.zeros((2, 3), np.complex128)[:, ::-1],
    lambda: np.zeros((4, 6), np.complex64)[1::2, ::3],
    lambda: _aligned_complex64((3, 3)),
    lambda: np.zeros(10, np.uint8)[2:].view(np.float16),
    lambda: np.zeros(6, dtype=[("a", np.complex128), ("z", np.complex128)])["z"],
    lambda: np.broadcast_to(np.zeros((), np.complex128), (3, 4)),
    lambda: np.zeros(0, np.complex128),
    lambda: _FakeCupyArray(0x7F0000000010, (4, 2), (-32, 16), np.complex128),
])
def test_addressable_accepts(make):
    assert launch.addressable(make()) == (True, "")


def test_addressable_is_exported():
    from cupyconv import _kernels
    assert _kernels.addressable is launch.addressable


def _never_load(source, names):
    raise AssertionError(f"a kernel was loaded for an unaddressable operand: {names}")


def _operands(problem, which, bad):
    """x, w, y, bias, col, dx for ``problem`` with operand ``which`` replaced by ``bad(shape)``."""
    shapes = dict(x=problem.x_shape, w=problem.w_shape, y=problem.y_shape, bias=(problem.out_channels,),
                  col=(problem.in_channels * problem.taps, problem.gemm_m), dx=problem.x_shape)
    ops = {k: np.zeros(s, problem.dtype) for k, s in shapes.items()}
    ops[which] = bad(shapes[which])
    return ops


def _launch(family, loader, problem, ops, bias=True):
    if family == "vol2col":
        launch.run_vol2col(loader, problem, ops["x"], ops["col"])
    elif family == "col2vol":
        launch.run_col2vol(loader, problem, ops["col"], ops["dx"])
    else:
        FORWARD_LAUNCHERS[family](loader, problem, ops["x"], ops["w"], ops["y"],
                                  bias=ops["bias"] if bias else None)


_OPERANDS = {"vol2col": ("x", "col"), "col2vol": ("col", "dx"),
             "implicit_gemm_fprop": ("x", "w", "y", "bias"), "direct_conv": ("x", "w", "y", "bias")}
_REJECT_CASES = [(fam, op) for fam, ops in _OPERANDS.items() for op in ops]


@pytest.mark.parametrize("family, operand", _REJECT_CASES)
def test_launchers_reject_misaligned_complex(family, operand):
    problem = make_problem(n=1, c=2, k=2, g=1, s=(4, 3), ks=(2, 2), stride=(1, 1), dilation=(1, 1),
                           padding=1, dtype=np.complex64)
    ops = _operands(problem, operand, _misaligned_complex64)
    with pytest.raises(ValueError, match=rf"^{operand}: data pointer .* not aligned to 8 bytes"):
        _launch(family, _never_load, problem, ops)


@pytest.mark.parametrize("family, operand", _REJECT_CASES)
def test_launchers_reject_record_field_views(family, operand):
    problem = make_problem(n=1, c=2, k=2, g=1, s=(4, 3), ks=(2, 2), stride=(1, 1), dilation=(1, 1),
                           padding=1, dtype=np.float64)
    ops = _operands(problem, operand, _record_view)
    with pytest.raises(ValueError,
                       match=rf"^{operand}: stride \d+ of axis \d is not a multiple of the itemsize 8"):
        _launch(family, _never_load, problem, ops)


def test_launchers_reject_packed_complex128_field():
    problem = make_problem(n=1, c=1, k=1, g=1, s=(6,), ks=(2,), stride=(1,), dilation=(1,),
                           padding=0, dtype=np.complex128)
    x = _packed_complex128_field(6).reshape(problem.x_shape)
    with pytest.raises(ValueError, match="aligned to 16 bytes"):
        launch.run_implicit_gemm_fprop(_never_load, problem, x, np.zeros(problem.w_shape, np.complex128),
                                       np.zeros(problem.y_shape, np.complex128))


@needs_emulation
@pytest.mark.parametrize("family", FAMILIES)
def test_launchers_accept_aligned_views(family):
    """Aligned complex views (offset 8 in a float32 buffer, a record field at offset 16) run."""
    problem = make_problem(n=1, c=2, k=2, g=1, s=(4, 3), ks=(2, 2), stride=(1, 1), dilation=(1, 1),
                           padding=1, dtype=np.complex64, cval=1)
    rng = np.random.default_rng(5)
    plain = {k: small_ints(rng, v.shape, np.complex64)
             for k, v in _operands(problem, "x", np.zeros).items()}
    views = {}
    for k, v in plain.items():
        views[k] = _aligned_complex64(v.shape)
        views[k][...] = v
    assert views["x"].__array_interface__["data"][0] % 16 == 8   # not 16-byte aligned: still fine
    outs = []
    for ops in (plain, views):
        assert all(launch.addressable(a)[0] for a in ops.values())
        _launch(family, emu_loader(), problem, ops)
        outs.append({k: np.array(ops[k]) for k in ("col", "dx", "y")})
    for k in ("col", "dx", "y"):
        np.testing.assert_array_equal(outs[0][k], outs[1][k])
