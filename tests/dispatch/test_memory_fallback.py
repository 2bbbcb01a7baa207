"""Workspace limits, out-of-memory fallback, 64-bit indexing, no-copy views, caches."""
from __future__ import annotations

import numpy as np
import pytest

import cupyconv
from cupyconv import _engine
from cupyconv._engine import algorithms, runners
from cupyconv._kernels import launch
from cupyconv._problem import ConvProblem
from helpers import INT32_PROBLEMS, INT64_PROBLEMS, ref_conv, small_ints


def _problem(x, w, **geo):
    return ConvProblem.create(x_shape=x.shape, w_shape=w.shape, dtype=x.dtype, **geo)


@pytest.fixture
def emulated():
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("CUDA emulation unavailable")
    return runners.EmulatedRunner()


def test_gemm_chunks_under_workspace_limit(emulated, rng):
    x = small_ints(rng, (5, 2, 6, 5), np.float64)
    w = small_ints(rng, (3, 2, 3, 2), np.float64)
    p = _problem(x, w, padding=1)
    per_image = p.column_bytes(1)
    limit = 2 * per_image + per_image // 2         # two images per chunk
    stats = {}
    with cupyconv.use_backend("emulated"):
        y, name = _engine.execute(p, x, w, method="gemm", workspace_limit=limit,
                                  stats=stats, backend="emulated")
    assert name == "gemm" and stats["algorithm"] == "gemm"
    assert 0 < stats["peak_workspace"] <= limit
    np.testing.assert_array_equal(y, ref_conv(x, w, padding=1))


def test_auto_with_tiny_limit_picks_zero_workspace(emulated, rng):
    x = small_ints(rng, (2, 2, 7, 6), np.float64)
    w = small_ints(rng, (2, 2, 3, 3), np.float64)
    p = _problem(x, w, padding=1)
    names = _engine.candidates(p, x, w, emulated)
    assert "gemm" in names and "fft" in names
    chosen = _engine.choose(p, names, emulated, workspace_limit=16)
    assert algorithms.workspace_bytes(p, chosen, 16) == 0


def test_simulated_oom_falls_back_and_is_right(rng, monkeypatch):
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("CUDA emulation unavailable")
    x = small_ints(rng, (2, 2, 7, 6), np.float64)
    w = small_ints(rng, (3, 2, 3, 3), np.float64)
    p = _problem(x, w, padding=1)
    tight = runners.EmulatedRunner(memory_limit=64)       # every workspace fails
    monkeypatch.setitem(_engine._runners, ("emulated",), tight)
    stats = {}
    y, name = _engine.execute(p, x, w, method="gemm", stats=stats, backend="emulated")
    assert name in ("direct", "implicit_gemm")
    assert any(s.startswith("gemm:") for s in stats["fallbacks"])
    np.testing.assert_array_equal(y, ref_conv(x, w, padding=1))


def test_oom_everywhere_raises_with_bytes(rng, monkeypatch):
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("CUDA emulation unavailable")
    x = small_ints(rng, (1, 1, 6), np.float64)
    w = small_ints(rng, (1, 1, 3), np.float64)
    p = _problem(x, w)

    def no_memory(*args, **kwargs):
        raise runners.OutOfMemoryError("workspace of 123 bytes: injected")
    monkeypatch.setattr(algorithms, "_IMPLS", {k: no_memory for k in algorithms._IMPLS})
    with pytest.raises(cupyconv.OutOfMemoryError, match="123 bytes"):
        _engine.execute(p, x, w, backend="emulated")


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
def test_forced_index64_gives_the_same_answer(emulated, rng, runner_fn):
    x = small_ints(rng, (2, 2, 7, 5), np.float64)
    w = small_ints(rng, (4, 1, 3, 2), np.float64)
    p = _problem(x, w, padding=((1, 0), (2, 1)), groups=2, padding_mode="symmetric")
    outs = []
    for index64 in (False, True):
        y = np.empty((2, 4) + p.out_shape)
        getattr(launch, runner_fn)(emulated.loader, p, x, w, y, index64=index64)
        outs.append(y)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], ref_conv(x, w, padding=((1, 0), (2, 1)), groups=2,
                                                    padding_mode="symmetric"))


@pytest.mark.parametrize("method", ["direct", "implicit_gemm", "gemm"])
def test_views_reach_the_kernels_uncopied(emulated, rng, monkeypatch, method):
    """Slices, transposes and channels_last views are indexed in place."""
    base = small_ints(rng, (2, 9, 8, 3), np.float64)        # channels_last storage
    x = base[:, ::-1, 1:7]                                   # flipped + sliced view
    w = small_ints(rng, (4, 3, 2, 3), np.float64)
    seen = []
    target = "run_vol2col" if method == "gemm" else {
        "direct": "run_direct", "implicit_gemm": "run_implicit_gemm_fprop"}[method]
    real = getattr(launch, target)

    def spy(module, problem, xa, *args, **kwargs):
        seen.append(xa)
        return real(module, problem, xa, *args, **kwargs)
    monkeypatch.setattr(launch, target, spy)
    with cupyconv.use_backend("emulated"):
        y = cupyconv.conv(x, w, padding=1, layout="channels_last", method=method)
    assert seen and all(np.shares_memory(a, base) for a in seen)
    ref = ref_conv(np.ascontiguousarray(x), w, padding=1, layout="channels_last")
    np.testing.assert_array_equal(y, ref)


def test_autotune_caches_winner(emulated, rng, restore_config, monkeypatch):
    x = small_ints(rng, (1, 2, 6, 6), np.float64)
    w = small_ints(rng, (2, 2, 3, 3), np.float64)
    calls = []
    real = algorithms.run

    def counting(problem, xa, wa, name, runner, limit=None):
        calls.append(name)
        return real(problem, xa, wa, name, runner, limit)
    monkeypatch.setattr(algorithms, "run", counting)
    cupyconv.config.autotune = True
    with cupyconv.use_backend("emulated"):
        y1 = cupyconv.conv(x, w, padding=1)
        first = len(calls)
        y2 = cupyconv.conv(x, w, padding=1)
    assert first > 2                       # every candidate was timed once
    assert len(calls) == first + 1         # then the cached winner runs alone
    np.testing.assert_array_equal(y1, y2)


def test_choose_conv_method_measures_on_emulated(rng):
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("CUDA emulation unavailable")
    a, b = small_ints(rng, (6, 5, 4), np.float64), small_ints(rng, (2, 3, 2), np.float64)
    with cupyconv.use_backend("emulated"):
        name, times = cupyconv.choose_conv_method(a, b, measure=True)
    assert name in times and set(times) >= {"direct", "gemm"}


def test_clear_caches_empties_module_caches(emulated, rng):
    x = small_ints(rng, (1, 1, 5), np.float64)
    w = small_ints(rng, (1, 1, 2), np.float64)
    with cupyconv.use_backend("emulated"):
        cupyconv.conv(x, w, method="direct")
    assert runners._emulated_group.cache_info().currsize > 0
    cupyconv.clear_caches()
    assert runners._emulated_group.cache_info().currsize == 0
    assert not _engine._runners
