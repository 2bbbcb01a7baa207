"""Reliability on awkward valid and invalid input: integer plans stay exact, valid
input does not crash, impossible work fails fast naming the shapes, errors name the
argument, and device facts come from the device's attributes.  Each case was found by
fuzzing or reading the code."""
from __future__ import annotations

import time
import tracemalloc

import numpy as np
import pytest
import scipy.signal

import cupyconv
from cupyconv.backends.cuda.runners import device_static_info
from cupyconv.core.problem import Operands
from cupyconv.core.signal_map import signal_call
from cupyconv.dispatch import backend_for, choose
from cupyconv.dispatch.dispatcher import fft_safe


def _emulated():
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("CUDA emulation unavailable")
    return cupyconv.use_backend("emulated")


# ------------------------------------------------------------ silently wrong numbers
def test_integer_plan_never_returns_rounded_fft_values(rng):
    x = rng.integers(-2**24, 2**24, size=(1, 1, 20000), dtype=np.int64)
    w = rng.integers(-2**24, 2**24, size=(1, 1, 301), dtype=np.int64)
    plan = cupyconv.plan_conv(x.shape, w.shape, np.int64, backend="numpy")
    np.testing.assert_array_equal(plan(x, w), cupyconv.conv(x, w, method="direct"))


def test_uint64_plan_uses_the_int64_kernels(rng):
    with _emulated():
        plan = cupyconv.plan_conv((1, 1, 9), (1, 1, 3), np.uint64)
        assert plan.algorithm != "fft"
        x = rng.integers(0, 2**40, size=(1, 1, 9)).astype(np.uint64)
        w = rng.integers(0, 2**20, size=(1, 1, 3)).astype(np.uint64)
        y = plan(x, w)
    np.testing.assert_array_equal(y, cupyconv.conv(x, w, method="direct"))


def test_integer_guard_sees_the_most_negative_int64():
    a = np.array([np.iinfo(np.int64).min, 1, 2, 3] * 64, dtype=np.int64)
    k = np.arange(1, 40, dtype=np.int64)
    np.testing.assert_array_equal(cupyconv.convolve(a, k),
                                  scipy.signal.convolve(a, k, method="direct"))


@pytest.mark.parametrize("plan_dtype, data", [
    (np.int64, lambda x: 0.6 * x), (np.float64, lambda x: x + 1j)])
def test_plan_refuses_data_it_cannot_hold(plan_dtype, data):
    x, w = np.ones((1, 1, 8)), np.ones((1, 1, 3))
    plan = cupyconv.plan_conv(x.shape, w.shape, plan_dtype, backend="numpy")
    with pytest.raises(TypeError, match=f"x has dtype .*{np.dtype(plan_dtype)}"):
        plan(data(x).astype(np.result_type(data(x))), w.astype(plan_dtype))


def test_plan_rejects_object_dtype():
    with pytest.raises(TypeError, match="dtype"):
        cupyconv.plan_conv((1, 1, 8), (1, 1, 3), object)


def test_fft_plan_keeps_nan_local():
    x = np.ones((1, 1, 4096))
    w = np.ones((1, 1, 301))
    plan = cupyconv.plan_conv(x.shape, w.shape, np.float64, backend="numpy")
    assert plan.algorithm == "fft" and "(if the data are finite" in repr(plan)
    x[0, 0, 10] = np.nan
    y = plan(x, w)
    assert np.isnan(y).sum() == np.isnan(cupyconv.conv(x, w, method="direct")).sum() < y.size


# ---------------------------------------------------------------- crashes on valid input
def test_empty_batch_axis_with_axes():
    assert cupyconv.convolve(np.ones((2, 0, 3)), np.ones((2, 1, 2)), axes=[2]).shape == (2, 0, 4)


def test_choose_conv_method_uint64_on_the_cuda_path():
    with _emulated():
        assert cupyconv.choose_conv_method(np.ones(5, np.uint64), np.ones(3, np.uint64)) != "fft"


@pytest.mark.parametrize("make", [
    lambda a: np.zeros(a.size, dtype=[("pad", "u1"), ("v", "f8")])["v"],    # byte stride 9
    lambda a: np.zeros(2 * a.size + 1, np.float32)[1:].view(np.complex64),  # 4-byte aligned
], ids=["record-field", "misaligned-complex64"])
def test_unaddressable_operands_are_copied(make, rng):
    x = make(np.empty(24))[:24].reshape(1, 2, 12)
    x[...] = rng.integers(-3, 4, size=x.shape)
    w = np.ones((2, 2, 3), dtype=x.dtype)
    with _emulated():
        y = cupyconv.conv(x, w, padding=1, method="implicit_gemm")
    np.testing.assert_array_equal(y, cupyconv.conv(np.ascontiguousarray(x), w, padding=1))


# ------------------------------------------------------------------ memory, fail fast
def test_huge_full_convolution_fails_fast_naming_the_shapes():
    a = np.broadcast_to(np.float32(1), (600, 600, 600))       # no memory behind it
    t0 = time.perf_counter()
    with pytest.raises(MemoryError, match=r"x\(1, 1, 600, 600, 600\).*bytes.*cupyconv.dask"):
        cupyconv.convolve(a, a, mode="full")
    assert time.perf_counter() - t0 < 5


def test_finiteness_scan_allocates_no_input_sized_temporary():
    x = np.ones((1, 1, 2**20))                     # 8 MiB
    problem = signal_call((2**20,), x.dtype, (3,), x.dtype, "full", (0,), False).problem
    tracemalloc.start()
    ok, _ = fft_safe(problem, Operands(activation=x, filter=np.ones((1, 1, 3))))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert ok and peak < 2**16


# ------------------------------------------------------------------ named errors
BAD_CONV = [
    (dict(out=[0]), TypeError, "out must be"),
    (dict(out=3), TypeError, "out must be"),
    (dict(stride=2**70), ValueError, "stride=.*too large"),
    (dict(padding=2**70), ValueError, "padding=.*too large"),
    (dict(cval=10**400), ValueError, "cval"),
    (dict(workspace_limit=-1), ValueError, "workspace_limit"),
    (dict(workspace_limit=0), ValueError, "workspace_limit"),
    (dict(workspace_limit=1.5), TypeError, "workspace_limit"),
    (dict(stride="2"), TypeError, "stride must be an int or a sequence"),
    (dict(cval=1.0, padding=1, padding_mode="reflect"), ValueError, "cval.*padding_mode"),
]


@pytest.mark.parametrize("kwargs, exc, match", BAD_CONV)
def test_conv_errors_name_the_argument(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        cupyconv.conv(np.ones((1, 1, 8)), np.ones((1, 1, 3)), **kwargs)


def test_read_only_out_is_rejected_before_work(monkeypatch):
    out = np.empty((1, 1, 6))
    out.flags.writeable = False
    monkeypatch.setattr(cupyconv.dispatch.dispatcher, "run", None)     # must not be reached
    with pytest.raises(ValueError, match="read-only"):
        cupyconv.conv(np.ones((1, 1, 8)), np.ones((1, 1, 3)), out=out)


@pytest.mark.parametrize("x_shape, exc", [("1255", TypeError), ((1, 1, 5.5), TypeError),
                                          ((-1, 1, 5), ValueError)])
def test_plan_shapes_are_checked(x_shape, exc):
    with pytest.raises(exc, match="x_shape"):
        cupyconv.plan_conv(x_shape, (1, 1, 3), np.float64)


def test_axes_forms():
    with pytest.raises(TypeError, match="axes"):
        cupyconv.convolve(np.ones((3, 4)), np.ones((1, 2)), axes=1.0)
    np.testing.assert_array_equal(
        cupyconv.convolve(np.ones((3, 4)), np.ones((2, 1)), axes=np.array(0)),
        cupyconv.convolve(np.ones((3, 4)), np.ones((2, 1)), axes=0))


def test_gradient_cval_must_be_a_number():
    with pytest.raises(TypeError, match="cval"):
        cupyconv.conv_grad_input(np.ones((1, 1, 6)), np.ones((1, 1, 3)), (1, 1, 8), cval="a")


# ------------------------------------------------------------ what emulation cannot see
def test_device_clocks_come_from_attributes():
    """CUDA 13's cudaDeviceProp has no clockRate/memoryClockRate: attributes are queried."""
    props = dict(name=b"H200", major=9, minor=0, multiProcessorCount=132,
                 sharedMemPerBlock=49152)                   # no clock fields at all
    values = {13: 1_980_000, 36: 3_201_000, 37: 5120}
    info = device_static_info(0, lambda attr, dev: values[attr], props)
    assert info["clock_hz"] == 1.98e9 and info["bandwidth"] == 2 * 3.201e9 * 5120 / 8
    with pytest.raises(RuntimeError, match="clock"):
        device_static_info(0, lambda attr, dev: 0, props)
