"""The CUDA backend's workspace and indexing, on the emulated runner: gemm
chunks its column buffer to the limit, 64-bit indexing is chosen exactly when
offsets pass 2**31, views reach the kernels uncopied, and the backend's answers
(``can_implement``, workspace bytes).  Out-of-memory fallback is the
dispatcher's (tests/dispatch/test_memory_fallback.py).
"""
from __future__ import annotations

import numpy as np
import pytest

import cupyconv
from cupyconv._kernels import launch
from cupyconv.backends.cuda import CudaBackend, EmulatedRunner, algorithms
from cupyconv.core.problem import ConvProblem, Operands
from cupyconv.dispatch import dispatcher
from helpers import ref_conv, small_ints
from problem_lists import INT32_PROBLEMS, INT64_PROBLEMS


def _problem(x, w, **geo):
    return ConvProblem.create(x_shape=x.shape, w_shape=w.shape, dtype=x.dtype, **geo)


@pytest.fixture
def runner():
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("CUDA emulation unavailable")
    return EmulatedRunner()


def test_gemm_chunks_under_workspace_limit(runner, rng):
    x = small_ints(rng, (5, 2, 6, 5), np.float64)
    w = small_ints(rng, (3, 2, 3, 2), np.float64)
    p = _problem(x, w, padding=1)
    per_image = p.column_bytes(1)
    limit = 2 * per_image + per_image // 2         # two images per chunk
    assert algorithms.gemm_batch_chunk(p, limit) == 2
    stats = {}
    y, name = dispatcher.run(p, Operands(activation=x, filter=w), CudaBackend(runner),
                             method="gemm", workspace_limit=limit, stats=stats)
    assert name == "gemm" and stats["algorithm"] == "gemm" and not stats["fallbacks"]
    assert stats["peak_workspace"] == 2 * per_image <= limit
    np.testing.assert_array_equal(y, ref_conv(x, w, padding=1))


def test_backend_answers(runner):
    be = CudaBackend(runner)
    assert be.name == "emulated" and be.xp is np and be.device is EmulatedRunner.NOMINAL
    p = ConvProblem.create(x_shape=(4, 6, 10, 10), w_shape=(8, 3, 3, 3), groups=2, padding=1)
    image = p.column_bytes(1)
    assert be.workspace_bytes(p, "direct") == be.workspace_bytes(p, "implicit_gemm") == 0
    assert be.workspace_bytes(p, "gemm", 3 * image) == 3 * image
    assert be.workspace_bytes(p, "gemm", 100 * image) == 4 * image     # the whole batch
    assert be.min_workspace_bytes(p, "gemm") == image
    assert be.workspace_bytes(p, "fft") > 0
    assert be.default_workspace_limit() == int(EmulatedRunner.NOMINAL.free_memory * 0.5)
    reflect = p.with_(padding_mode="reflect")
    ok, why = be.can_implement(reflect, "fft")
    assert not ok and "zero constant padding" in why
    grad = p.with_(op="grad_input")
    ok, why = be.can_implement(grad, "direct")
    assert not ok and "not grad_input" in why
    assert be.can_implement(grad, "gemm") == (True, "")


def test_memory_limit_is_the_device_memory():
    tight = EmulatedRunner(memory_limit=1000)
    assert tight.device.free_memory == 1000
    assert CudaBackend(tight).available_memory() == 1000
    with pytest.raises(cupyconv.OutOfMemoryError, match=r"workspace of 1008 bytes exceeds the "
                                                        r"emulated memory limit \(1000 bytes\)"):
        tight.workspace((126,), np.float64)


def test_uint64_runs_as_int64(runner, rng):
    """The kernels have no uint64 instantiation: the same bits run as int64."""
    x = small_ints(rng, (1, 2, 7), np.uint64)
    w = small_ints(rng, (2, 2, 3), np.uint64)
    p = _problem(x, w)
    kp, ops = CudaBackend(runner).prepare(p, Operands(activation=x, filter=w))
    assert kp.dtype == np.int64 and ops.activation.dtype == np.int64
    assert np.shares_memory(ops.activation, x)
    with cupyconv.use_backend("emulated"):
        y = cupyconv.conv(x, w, method="direct")
    assert y.dtype == np.uint64
    np.testing.assert_array_equal(y, ref_conv(x, w, dtype=object).astype(np.uint64))


@pytest.mark.parametrize("shapes", INT64_PROBLEMS)
def test_index64_chosen_when_offsets_pass_2_31(shapes):
    x_shape, w_shape = shapes
    p = ConvProblem.create(x_shape=x_shape, w_shape=w_shape, dtype=np.float32)
    strides = (np.cumprod((1,) + x_shape[::-1][:-1])[::-1]).tolist()
    xs = ((strides[0], strides[1], tuple(strides[2:])), (p.batch, p.in_channels, p.in_shape))
    assert launch.choose_index64(p, xs, extra=p.groups * p.gemm_k * p.gemm_m)


# The launch-level chooser keeps 2**20 of headroom below 2**31 for per-thread
# offsets (cupyconv/_kernels/launch.py), so INT32_PROBLEMS[0] (2**16 short of
# the limit; a planning-layer case) legitimately takes the 64-bit variant.
@pytest.mark.parametrize("shapes", INT32_PROBLEMS[1:])
def test_index32_kept_for_small_problems(shapes):
    x_shape, w_shape = shapes
    p = ConvProblem.create(x_shape=x_shape, w_shape=w_shape, dtype=np.float32)
    strides = (np.cumprod((1,) + x_shape[::-1][:-1])[::-1]).tolist()
    xs = ((strides[0], strides[1], tuple(strides[2:])), (p.batch, p.in_channels, p.in_shape))
    assert not launch.choose_index64(p, xs, extra=p.gemm_m)


@pytest.mark.parametrize("runner_fn", ["run_direct", "run_implicit_gemm_fprop"])
def test_forced_index64_gives_the_same_answer(runner, rng, runner_fn):
    x = small_ints(rng, (2, 2, 7, 5), np.float64)
    w = small_ints(rng, (4, 1, 3, 2), np.float64)
    p = _problem(x, w, padding=((1, 0), (2, 1)), groups=2, padding_mode="symmetric")
    outs = []
    for index64 in (False, True):
        y = np.empty((2, 4) + p.out_shape)
        getattr(launch, runner_fn)(runner.loader, p, x, w, y, index64=index64)
        outs.append(y)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], ref_conv(x, w, padding=((1, 0), (2, 1)), groups=2,
                                                    padding_mode="symmetric"))


@pytest.mark.parametrize("method", ["direct", "implicit_gemm", "gemm"])
def test_views_reach_the_kernels_uncopied(runner, rng, monkeypatch, method):
    """Slices, transposes and channels_last views are indexed in place."""
    base = small_ints(rng, (2, 9, 8, 3), np.float64)        # channels_last storage
    x = base[:, ::-1, 1:7]                                   # flipped + sliced view
    w = small_ints(rng, (4, 3, 2, 3), np.float64)
    seen = []
    owner, target = (algorithms, "gemm_program") if method == "gemm" else (launch, {
        "direct": "direct_program", "implicit_gemm": "implicit_gemm_program"}[method])
    real = getattr(owner, target)

    def spy(*args, **kwargs):            # the program builders: x is the first array
        seen.append(next(a for a in args if isinstance(a, np.ndarray)))
        return real(*args, **kwargs)
    monkeypatch.setattr(owner, target, spy)
    with cupyconv.use_backend("emulated"):
        y = cupyconv.conv(x, w, padding=1, layout="channels_last", method=method)
    assert seen and all(np.shares_memory(a, base) for a in seen)
    ref = ref_conv(np.ascontiguousarray(x), w, padding=1, layout="channels_last")
    np.testing.assert_array_equal(y, ref)


def test_choose_conv_method_measures_on_emulated(rng):
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("CUDA emulation unavailable")
    a, b = small_ints(rng, (6, 5, 4), np.float64), small_ints(rng, (2, 3, 2), np.float64)
    with cupyconv.use_backend("emulated"):
        name, times = cupyconv.choose_algorithm(a, b, measure=True)
    assert name in times and set(times) >= {"direct", "gemm"}


def test_device_out_of_memory_in_fft_becomes_a_fallback(runner, rng, monkeypatch):
    """An out-of-memory raised inside the FFT (cuFFT plans, pool spectra; simulated
    by the runner's ``out_of_memory`` types) is the backend's OutOfMemoryError, so
    the dispatcher falls back instead of failing (regression: it escaped as is)."""
    class DeviceOOM(Exception):
        pass

    x = small_ints(rng, (2, 2, 7, 6), np.float64)
    w = small_ints(rng, (3, 2, 3, 3), np.float64)
    p = _problem(x, w, padding=1)
    runner.out_of_memory = (DeviceOOM,)
    backend = CudaBackend(runner)

    def no_memory(problem, operands, constant=None):
        raise DeviceOOM("cuFFT plan: out of memory")
    monkeypatch.setattr("cupyconv.backends.fft_conv.run", no_memory)
    stats = {}
    y, name = dispatcher.run(p, Operands(activation=x, filter=w), backend, method="fft",
                             stats=stats)
    assert name != "fft" and any(s.startswith("fft:") for s in stats["fallbacks"])
    ref = ref_conv(x, w, padding=1)
    if name == "winograd":     # its fractions round: float64 within 1e-13 of the exact sums
        np.testing.assert_allclose(y, ref, rtol=0, atol=1e-13 * np.abs(ref).max())
    else:
        np.testing.assert_array_equal(y, ref)
