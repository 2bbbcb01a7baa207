"""Algorithm selection: ``choose_algorithm`` (the engine's names; ``choose_conv_method``
keeps SciPy's "direct"/"fft", tests/api/test_signal_parity.py), ``measure=True``, the
dispatcher's data-free :class:`Choice` under a workspace limit (``auto``
honouring it, per call and through ``config``) and its cache.

The gemm chunking itself is tests/backends/numpy/test_numpy_gemm.py;
autotuning is test_autotune.py.
"""
from __future__ import annotations

import numpy as np
import pytest

import cupyconv
from cupyconv.api.conv import prepare_conv
from cupyconv.dispatch import backend_for, dispatcher
from helpers import random_array, small_ints

#: Every forward algorithm the NumPy backend has (implicit_gemm runs its tap loop).
CANDIDATES = {"direct", "implicit_gemm", "gemm", "fft", "winograd"}
NUMPY = backend_for(np, "numpy")

#: (in1 shape, in2 shape) for ranks 1-6: CuPy's choose_conv_method raises
#: for N-D input, ours must answer for every rank.
ND_SHAPES = [((40,), (5,)), ((9, 8), (3, 3)), ((6, 5, 4), (2, 3, 2)),
             ((4, 3, 4, 3), (2, 2, 2, 2)), ((3, 3, 2, 3, 2), (2, 1, 2, 2, 1)),
             ((2, 3, 2, 2, 3, 2), (1, 2, 2, 1, 2, 2))]


@pytest.mark.parametrize("s1,s2", ND_SHAPES)
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("dtype", ["float64", "complex64", "int32"])
def test_choose_returns_a_method_for_every_rank(s1, s2, mode, dtype, rng):
    a, b = random_array(rng, s1, dtype), random_array(rng, s2, dtype)
    m = cupyconv.choose_algorithm(a, b, mode)
    assert isinstance(m, str) and m in CANDIDATES
    # and the named method runs and agrees with direct (small ints: exact; winograd
    # computes float data only)
    ai, bi = small_ints(rng, s1, "int64"), small_ints(rng, s2, "int64")
    if m == "winograd":
        ai, bi = ai.astype(np.float64), bi.astype(np.float64)
        np.testing.assert_allclose(cupyconv.convolve(ai, bi, mode, method=m),
                                   cupyconv.convolve(ai, bi, mode, method="direct"), atol=1e-9)
        return
    np.testing.assert_array_equal(cupyconv.convolve(ai, bi, mode, method=m),
                                  cupyconv.convolve(ai, bi, mode, method="direct"))


@pytest.mark.parametrize("s1,s2", ND_SHAPES[::2])
def test_measure_times_every_candidate(s1, s2, rng):
    a, b = random_array(rng, s1, "float64"), random_array(rng, s2, "float64")
    name, times = cupyconv.choose_algorithm(a, b, measure=True)
    assert set(times) == CANDIDATES
    assert all(isinstance(t, float) and t > 0 for t in times.values())
    assert name == min(times, key=times.get)


def test_measure_leaves_out_inexact_candidates():
    """Non-finite or huge-integer data: FFT is not even timed."""
    a = np.arange(30.0)
    a[3] = np.nan
    name, times = cupyconv.choose_algorithm(a, np.ones(4), measure=True)
    assert set(times) == CANDIDATES - {"fft", "winograd"} and name in times  # NaN: tile-wide
    big = np.full(30, 2**52, np.int64)
    assert set(cupyconv.choose_algorithm(big, big[:3], measure=True)[1]) == \
        CANDIDATES - {"fft", "winograd"}                                     # float data only
    # SciPy's vocabulary: the FFT is reported as not runnable (infinite time)
    name, times = cupyconv.choose_conv_method(a, np.ones(4), measure=True)
    assert name == "direct" and set(times) == {"direct", "fft"} and times["fft"] == np.inf


def test_measure_zero_rank():
    assert cupyconv.choose_conv_method(2.0, 3.0) == "direct"
    name, times = cupyconv.choose_conv_method(2.0, 3.0, measure=True)
    assert name in times


# ---------------------------------------------------------------- workspace

def _problem(x, w, **kw):
    geo = dict(stride=1, padding=0, dilation=1, groups=1, padding_mode="constant", cval=0,
               layout="channels_first")
    geo.update(kw)
    return prepare_conv(x, w, None, **geo)[0]


def test_auto_never_picks_gemm_when_one_position_does_not_fit(rng, restore_config):
    x = random_array(rng, (4, 32, 16, 16), "float64")
    w = random_array(rng, (32, 32, 3, 3), "float64")
    problem = _problem(x, w, padding=1)
    assert dispatcher.choose(problem, NUMPY).algorithm == "gemm"     # the limit matters
    tiny = problem.dtype.itemsize * problem.gemm_k - 1
    choice = dispatcher.choose(problem, NUMPY, tiny)
    assert choice.algorithm not in ("gemm", "fft") and choice.limit == tiny
    assert set(choice.ranked) == {"direct", "implicit_gemm"}
    assert choice.rejected["gemm"] == (f"needs at least {tiny + 1} bytes of workspace but "
                                       f"the workspace limit is {tiny} bytes")
    want = cupyconv.conv(x, w, padding=1, method="direct")
    np.testing.assert_array_equal(
        cupyconv.conv(x, w, padding=1, workspace_limit=tiny), want)
    cupyconv.config.workspace_limit = tiny                           # the global default
    assert dispatcher.choose(problem, NUMPY).algorithm not in ("gemm", "fft")
    np.testing.assert_array_equal(cupyconv.conv(x, w, padding=1), want)


def test_choose_respects_limit_for_fft():
    """With a limit between gemm's per-position need and fft's spectra, fft
    is never picked; with a limit no workspace fits, the zero-workspace
    algorithms remain (and the others say why they were left out)."""
    x = np.ones((1, 1, 4000))
    w = np.ones((1, 1, 400))
    problem = _problem(x, w)
    assert dispatcher.choose(problem, NUMPY).algorithm == "fft"
    limit = NUMPY.workspace_bytes(problem, "fft") - 1
    choice = dispatcher.choose(problem, NUMPY, limit)
    assert "fft" not in choice.ranked and "gemm" in choice.ranked
    assert choice.rejected["fft"].startswith("needs at least")
    choice = dispatcher.choose(problem, NUMPY, 1)
    assert choice.algorithm == "direct" and set(choice.ranked) == {"direct", "implicit_gemm"}
    # (separable declines any 1-D kernel: it needs two kernel axes or more)
    assert set(choice.rejected) == {"gemm", "fft", "separable", "winograd"}
    assert choice.refusal is None


def test_choice_ranks_by_predicted_time():
    problem = _problem(np.ones((2, 3, 12, 12)), np.ones((4, 3, 3, 3)), padding=1)
    choice = dispatcher.choose(problem, NUMPY)
    assert set(choice.ranked) == CANDIDATES and choice.algorithm == choice.ranked[0]
    times = [choice.times[n] for n in choice.ranked]
    assert times == sorted(times)
    assert set(choice.rejected) == {"separable"} and choice.refusal is None   # 3 channels
    assert "one filter per input channel" in choice.rejected["separable"]


def test_gradient_choice_has_no_forward_only_algorithms():
    problem = _problem(np.ones((2, 3, 12, 12)), np.ones((4, 3, 3, 3)), padding=1)
    # winograd serves the input gradient of stride-1, constant-padded problems (issue 15)
    for op, serving in (("grad_input", {"gemm", "fft", "winograd"}),
                        ("grad_weight", {"gemm", "fft"})):
        choice = dispatcher.choose(problem.with_(op=op), NUMPY)
        assert set(choice.ranked) == serving
        assert set(choice.rejected) == {"direct", "implicit_gemm", "separable", "winograd",
                                        "gemm", "fft"} - serving
        assert "does not serve " + op in choice.rejected["direct"]


def test_choice_is_cached_per_problem_and_limit():
    problem = _problem(np.ones((1, 2, 9)), np.ones((3, 2, 2)))
    a = dispatcher.choose(problem, NUMPY)
    assert dispatcher.choose(problem, NUMPY) is a
    assert dispatcher.choose(problem, NUMPY, 10**6) is not a
    assert dispatcher.choose(problem, NUMPY, 10**6) is dispatcher.choose(problem, NUMPY, 10**6)
    dispatcher.clear_cache()
    assert dispatcher.choose(problem, NUMPY) is not a


def test_choice_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(dispatcher._choices, "maxsize", 3)
    dispatcher.clear_cache()
    for n in range(1, 6):
        dispatcher.choose(_problem(np.ones((1, 1, n + 4)), np.ones((1, 1, 2))), NUMPY)
    assert len(dispatcher._choices) == 3
    dispatcher.clear_cache()
    assert not dispatcher._choices
