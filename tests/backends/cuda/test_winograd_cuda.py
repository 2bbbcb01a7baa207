"""``method="winograd"`` on the CUDA path (transform kernels + batched GEMM), emulated and
on a GPU where there is one, against the float64 tap-loop reference; the input gradient
through Winograd; the accuracy gate and the refusals on the CUDA backend.

Tolerance: the relative-norm bound of ``winograd_cases.bound`` -- direct summation's
``4 K u`` times the N-D error growth of the tiles the plan runs (the CUDA path plans with
``alpha <= registry.WINOGRAD_MAX_ALPHA``, so its own plan sets the growth).  It is not a
tuned number: an indexing error is O(1), far above it.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import cupyconv
from cupyconv import config
from cupyconv._kernels import registry
from cupyconv.backends.cuda import CudaBackend, EmulatedRunner
from cupyconv.backends.cuda import winograd as cuda_winograd
from cupyconv.backends.winograd_conv import plan_tiles
from cupyconv.core import ConvProblem
from cupyconv.dispatch import choose

from helpers import ref_conv
from winograd_cases import (arrays, bound, check_gate_keeps_auto_away, error_over_magnitudes,
                            geometries, kwargs, problem_of)

#: The emulator runs a fiber per CUDA thread: a few examples per (rank, dtype) keep the
#: file's run time in seconds (every rank and dtype compiles its kernel group once).
EXAMPLES = 4


@pytest.mark.parametrize("rank", [1, 2, 3, 4])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
@settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_winograd_matches_the_float64_reference(dev, rank, dtype, data):
    geo = data.draw(geometries(rank))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x, w = arrays(geo, dtype, rng)
    problem = problem_of(geo, x, w).with_(layout="channels_first")
    backend = CudaBackend(EmulatedRunner())
    ok, why = backend.can_implement(problem, "winograd")
    if not ok:
        assert "error growth" in why
        return
    with dev.scope():
        y = dev.to_host(cupyconv.conv(dev.to_dev(x), dev.to_dev(w), method="winograd",
                                      **kwargs(geo)))
    err, ref = error_over_magnitudes(y, x, w, geo)
    assert y.dtype == dtype and y.shape == ref.shape
    plan = plan_tiles(problem, registry.WINOGRAD_MAX_ALPHA)
    assert err <= bound(problem, dtype, plan), err


#: (spatial, kernel, padding, dilation, groups, dtype): stride 1 with constant padding --
#: padding past the kernel's reach (dy cropped), asymmetric, dilated, grouped, complex.
GRAD_CASES = [
    ((7, 6), (3, 3), ((1, 1), (0, 2)), (1, 1), 1, np.float64),
    ((11,), (5,), ((6, 0),), (2,), 2, np.complex128),
    ((5, 4, 5), (3, 2, 3), ((0, 0), (1, 3), (4, 1)), (1, 2, 1), 1, np.float32),
    ((4, 4, 3, 4), (2, 3, 2, 2), ((1, 0), (1, 1), (0, 0), (2, 2)), (1, 1, 1, 2), 2, np.float64),
]


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: f"{len(c[0])}d-{np.dtype(c[5])}")
@pytest.mark.parametrize("layout", ["channels_first", "channels_last"])
def test_grad_input_matches_the_gemm_gradient(dev, rng, case, layout):
    """dx by Winograd (a stride-1 forward convolution of dy with the flipped,
    channel-transposed kernel) on the CUDA path and on NumPy equals gemm's dx (col2vol)."""
    s, ks, pads, dil, g, dtype = case
    x = rng.standard_normal((2, 2 * g) + s)
    w = rng.standard_normal((3 * g, 2) + ks)
    if np.dtype(dtype).kind == "c":
        w = w + 1j * rng.standard_normal(w.shape)
    geo = dict(padding=pads, dilation=dil, groups=g, layout=layout)
    if layout == "channels_last":
        x, w = np.moveaxis(x, 1, -1), np.moveaxis(w, 1, -1)
    x, w = x.astype(dtype), w.astype(dtype)
    dy = cupyconv.conv(x, w, method="gemm", **geo)
    dy = (rng.standard_normal(dy.shape) + (1j * rng.standard_normal(dy.shape)
                                            if np.dtype(dtype).kind == "c" else 0)).astype(dtype)
    ref = cupyconv.conv_grad_input(dy.astype(np.result_type(dtype, np.float64)),
                                   w.astype(np.result_type(dtype, np.float64)), x.shape,
                                   method="gemm", **geo)
    with dev.scope():
        got = dev.to_host(cupyconv.conv_grad_input(dev.to_dev(dy), dev.to_dev(w), x.shape,
                                                   method="winograd", cval=3, **geo))
    cpu = cupyconv.conv_grad_input(dy, w, x.shape, method="winograd", **geo)
    u = np.finfo(dtype).eps / 2
    scale = np.linalg.norm(ref)
    k = 3 * np.prod(ks)              # the reduction length of dx: K/G * prod(KS)
    # gemm's 4 K u with the tiles' growth (<= the 10x gate): the plan is a forward one
    assert got.dtype == dtype and got.shape == x.shape
    assert np.linalg.norm(got - ref) <= 40 * k * u * scale
    assert np.linalg.norm(cpu - ref) <= 40 * k * u * scale


def test_grad_input_refusals_name_the_reason():
    backend = CudaBackend(EmulatedRunner())
    base = dict(x_shape=(1, 2, 9, 9), w_shape=(2, 2, 3, 3), padding=1, dtype=np.float64,
                op="grad_input")
    strided = ConvProblem.create(stride=2, **base)
    ok, why = backend.can_implement(strided, "winograd")
    assert not ok and "stride-1" in why
    reflect = ConvProblem.create(padding_mode="reflect", **base)
    ok, why = backend.can_implement(reflect, "winograd")
    assert not ok and "constant padding" in why
    assert backend.can_implement(ConvProblem.create(**base), "winograd")[0]
    assert not backend.can_implement(ConvProblem.create(**dict(base, op="grad_weight")),
                                     "winograd")[0]


def test_the_gate_keeps_auto_away_from_lossy_tiles_on_the_cuda_path(restore_config):
    """A tile that fails the error gate is never a candidate of ``auto``; with the limit
    raised, the CUDA path plans within the kernels' alpha <= MAX_ALPHA."""
    backend = CudaBackend(EmulatedRunner())
    ok, lossy = check_gate_keeps_auto_away(backend)
    config.winograd_max_error_growth = 1e6
    assert backend.can_implement(lossy, "winograd")[0]
    plan = plan_tiles(lossy, registry.WINOGRAD_MAX_ALPHA)
    assert all(m + p.r - 1 <= registry.WINOGRAD_MAX_ALPHA
               for pieces, tile in plan for p, m in zip(pieces, tile))
    config.winograd_max_error_growth = 0
    assert "winograd" not in choose(ok, backend).ranked


def test_workspace_limit_chunks_the_batch(dev, rng):
    """V and M for one image at a time: the same result, and the peak stays within it."""
    x = rng.standard_normal((3, 2, 8, 8))
    w = rng.standard_normal((3, 2, 3, 3))
    problem = ConvProblem.create(x_shape=x.shape, w_shape=w.shape, padding=1, dtype=np.float64)
    one = cuda_winograd.min_workspace_bytes(problem)
    assert 0 < one < cuda_winograd.workspace_bytes(problem)
    runner = EmulatedRunner(memory_limit=one)
    y = cuda_winograd.run(problem, x, w, runner, workspace_limit=one)
    assert 0 < runner.peak_workspace <= one
    np.testing.assert_allclose(y, ref_conv(x, w, padding=1), rtol=1e-12, atol=1e-12)
    with pytest.raises(cupyconv.OutOfMemoryError):
        cuda_winograd.run(problem, x, w, runner, workspace_limit=one - 1)


def test_float16_stride_phases_add_in_float32(rng):
    """The orchestration itself on float16 (half input kernel, float32 transforms and GEMM):
    stride phases add in a float32 buffer, rounded to float16 once."""
    x = rng.standard_normal((1, 2, 9)).astype(np.float16)
    w = rng.standard_normal((2, 2, 3)).astype(np.float16)
    problem = ConvProblem.create(x_shape=x.shape, w_shape=w.shape, stride=2, padding=1,
                                 dtype=np.float16)
    y = cuda_winograd.run(problem, x, w, EmulatedRunner())
    ref = ref_conv(x.astype(np.float64), w.astype(np.float64), stride=2, padding=1)
    assert y.dtype == np.float16
    # one float16 rounding of each output (u = 2^-11) plus float32 work
    np.testing.assert_allclose(y, ref, rtol=2.0**-10, atol=2.0**-10 * np.abs(ref).max())
