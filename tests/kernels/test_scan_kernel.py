"""The one-flag data scan (cuda_src/conv/data_scan.cu) under the emulator, against NumPy.

One body runs each case on the kernel (``scan_launch.run_scan``) and on the host
(``arrays.host_scan``, NumPy's min/max): the finite flags must agree everywhere, the
magnitudes of integer data exactly, those of floating data exactly too (``max |a|`` is a
selection, not a sum: no rounding enters, so the tolerance is zero for every dtype).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from cupyconv._dtypes import BFLOAT16
from cupyconv._emulation import emulation_available
from cupyconv._kernels import program, registry, scan_launch
from cupyconv.backends.arrays import host_scan
from cupyconv.backends.cuda import EmulatedRunner

from kernel_reference import emu_loader

pytestmark = pytest.mark.skipif(not emulation_available(), reason="CUDA emulation unavailable")

DTYPES = [np.float16, np.float32, np.float64, np.complex64, np.complex128, np.int64] + (
    [BFLOAT16] if BFLOAT16 is not None else [])
#: Non-finite values, each placed alone.
NON_FINITE = [np.nan, np.inf, -np.inf]
#: Element counts around the block size and the grid-stride step (tile non-multiples).
SIZES = [1, 7, registry.THREADS - 1, registry.THREADS + 1, 3 * registry.THREADS + 5]


def _host_magnitude(a):
    """NumPy's ``max |a|`` over the finite values as the kernel defines it (complex: the
    larger of ``|re|`` and ``|im|``)."""
    if a.dtype.kind in "iu":
        return 0 if a.size == 0 else max(-int(a.min()), int(a.max()))
    parts = [a.real, a.imag] if a.dtype.kind == "c" else [a]
    vals = [np.abs(p.astype(np.float64)) for p in parts]
    vals = [v[np.isfinite(v)] for v in vals]
    return max((float(v.max()) for v in vals if v.size), default=0.0)


def _check(arrays, mode="normal"):
    got = scan_launch.run_scan(emu_loader(mode), np, arrays)
    want = host_scan([a for a in arrays if a is not None])
    present = [i for i, a in enumerate(arrays) if a is not None]
    assert [got.finite[i] for i in present] == list(want.finite)
    for i in present:
        assert got.magnitude[i] == _host_magnitude(arrays[i]), (i, arrays[i].dtype)
    return got


def _data(dtype, n, rng):
    if np.dtype(dtype).kind == "i":
        return rng.integers(-1000, 1000, n).astype(dtype)
    a = rng.standard_normal(n) * 100
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(n) * 300
    return a.astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_dtype_finite_and_each_non_finite_anywhere(dtype):
    """Each of NaN, Inf, -Inf at the first, a middle and the last element of each of three
    operands (sizes not multiples of the block), in the real and the imaginary part."""
    rng = np.random.default_rng(1)
    ops = [_data(dtype, n, rng) for n in SIZES[2:]]
    assert _check(ops).all_finite
    if np.dtype(dtype).kind == "i":
        return
    for value in NON_FINITE:
        for k in range(3):
            for at in (0, ops[k].size // 2, ops[k].size - 1):
                bad = [a.copy() for a in ops]
                bad[k][at] = value
                got = _check(bad)
                assert got.finite == tuple(i != k for i in range(3))
                if np.dtype(dtype).kind == "c":
                    bad[k][at] = complex(1.0, value)
                    assert _check(bad).finite == tuple(i != k for i in range(3))


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.float16], ids=str)
def test_huge_magnitudes_and_extremes(dtype):
    """The largest finite value, the most negative integer (|INT64_MIN| = 2^63 in 64 bits),
    subnormals and negative zero."""
    info = np.iinfo(dtype) if np.dtype(dtype).kind == "i" else np.finfo(dtype)
    a = np.zeros(SIZES[3], dtype)
    a[-1] = info.min
    a[3] = info.max
    got = _check([a])
    assert got.magnitude[0] == (2 ** 63 if np.dtype(dtype).kind == "i" else float(info.max))
    if np.dtype(dtype).kind == "f":
        tiny = np.full(SIZES[1], info.smallest_subnormal, dtype)
        tiny[0] = -0.0
        assert _check([tiny]).magnitude[0] == float(info.smallest_subnormal)


def test_empty_and_absent_operands():
    e = np.zeros((0, 3), np.float32)
    got = _check([e, None, np.ones(5, np.float32)])
    assert got.finite == (True, True, True) and got.magnitude == (0.0, 0.0, 1.0)


@pytest.mark.parametrize("mode", ["normal", "reverse"])
def test_strided_views_and_schedule(mode):
    """Negative strides, channels-last transposes, slices of larger buffers, up to ten
    axes that do not merge; the reversed thread/block schedule gives the same words."""
    rng = np.random.default_rng(3)
    base = rng.standard_normal((3, 5, 4, 6, 7))
    views = [base.copy()[:, ::-1, 1:, ::2], base.copy().transpose(0, 2, 3, 4, 1)[..., 1:],
             base.copy()[::2, :, ::-1, :, ::3]]
    views[1][-1, -1, -1, -1, -1] = np.inf
    assert _check(views, mode).finite == (True, False, True)
    ten = rng.standard_normal((2,) * 10)[(slice(None, None, -1),) * 10]
    assert _check([ten], mode).all_finite


@given(n=st.integers(0, 700), at=st.integers(0, 699), step=st.sampled_from([1, 2, -1, -3]),
       value=st.sampled_from([0.5, np.nan, np.inf, -np.inf]),
       dtype=st.sampled_from([np.float32, np.complex128, np.float16]))
def test_random_placements(n, at, step, value, dtype):
    a = _data(dtype, max(n * abs(step), 1), np.random.default_rng(n))[::step][:n]
    if n:
        a[at % n] = value
    _check([a])


def test_one_launch_one_read():
    """A scan is 1 launch, 1 allocation (the zeroed result), 1 synchronisation and 1
    device-to-host copy, whatever the operands."""
    x, w = np.ones((2, 3, 9), np.float32), np.ones((4, 3, 3), np.float32)
    with program.accounting() as counts:
        scan_launch.run_scan(EmulatedRunner().loader, np, [x, w, None])
    assert dict(counts) == {"launches": 1, "allocations": 1, "syncs": 1, "d2h": 1}


def test_refusals():
    with pytest.raises(TypeError, match="one of the dtypes"):
        scan_launch.run_scan(emu_loader(), np, [np.ones(3, np.int32)])
    with pytest.raises(TypeError, match="one of the dtypes"):
        scan_launch.run_scan(emu_loader(), np, [np.ones(3), np.ones(3, np.float32)])
    with pytest.raises(ValueError, match="at most 3"):
        scan_launch.run_scan(emu_loader(), np, [np.ones(3)] * 4)
