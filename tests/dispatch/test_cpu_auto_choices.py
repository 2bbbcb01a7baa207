"""What ``auto`` runs on the CPU for single-channel ``convolve`` and ``ndimage`` cases:
the cost model's choice as fitted (docs/benchmarks/auto_vs_fastest.md, measured on a
2-core VM and on one of its cores), so that a refit of the model on other cases cannot
silently move these crossovers again (a refit on channelled layers once made ``auto``
run gemm, 7-22x slower than the tap loop, for ``convolve(a, k, mode="same")``).

Not timed: the choice is read from ``choose_algorithm`` (what ``auto`` runs, after the
data rules: a random kernel is no outer product, so ``separable`` is refused), with the
cores the model spreads work over set to those of the machine it was fitted on.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import cupyconv
from cupyconv.backends.numpy import cost
from cupyconv.core import ConvProblem
from cupyconv.dispatch import backend_for, dispatcher

#: (name, signal shape, kernel shape, what auto runs): single channel, mode="same"
SIGNAL_CASES = [
    ("1-D 65536 k3", (65536,), (3,), "direct"),
    ("2-D 256^2 3x3", (256, 256), (3, 3), "direct"),
    ("2-D 512^2 3x3", (512, 512), (3, 3), "direct"),
    # gemm's columns on the extended grid (one slice per tap and image): 1.56 ms against
    # the tap loop's 1.57 (docs/benchmarks/auto_vs_fastest.md)
    ("3-D 64^3 3^3", (64, 64, 64), (3, 3, 3), "gemm"),
    ("2-D 128^2 31x31", (128, 128), (31, 31), "fft"),
    ("3-D 48^3 7^3", (48, 48, 48), (7, 7, 7), "fft"),
]


@pytest.fixture(params=[1, 2], ids=["1 core", "2 cores"])
def cores(request, monkeypatch):
    monkeypatch.setattr(cost, "workers", lambda: request.param)
    dispatcher.clear_cache()
    yield request.param
    dispatcher.clear_cache()


@pytest.mark.parametrize("name,shape,kernel,want", SIGNAL_CASES,
                         ids=[c[0] for c in SIGNAL_CASES])
def test_auto_runs_the_fitted_choice_for_single_channel_convolve(name, shape, kernel, want,
                                                                 cores, rng):
    a = rng.standard_normal(shape).astype(np.float32)
    k = rng.standard_normal(kernel).astype(np.float32)
    assert cupyconv.choose_algorithm(a, k, mode="same") == want
    assert cupyconv.choose_conv_method(a, k, mode="same") == ("fft" if want == "fft"
                                                              else "direct")


@pytest.mark.parametrize("shape,kernel,first", [
    ((512, 512), (5, 5), ("direct", "implicit_gemm")),
    ((64, 64, 64), (3, 3, 3), ("direct", "implicit_gemm", "gemm")),
], ids=["2-D 512^2 5x5", "3-D 64^3 3^3"])
def test_ndimage_convolve_ranks_the_tap_loop_or_grid_gemm_above_the_fft(shape, kernel, first,
                                                                        cores):
    """ndimage's mirrored boundary (``symmetric``): the tap loop, not gemm (7.8 ms against
    1.4 on 512^2 5x5) or the FFT; on 64^3 3^3 gemm's columns on the extended grid measured
    1.72 ms against the tap loop's 1.59 and the FFT's 3.3-3.6, either of the two first
    (``separable`` ranks first by the model and is asked of the data)."""
    problem = ConvProblem.create(x_shape=(1, 1) + shape, w_shape=(1, 1) + kernel,
                                 padding=[k // 2 for k in kernel], padding_mode="symmetric",
                                 dtype=np.float32)
    ranked = [a for a in dispatcher.choose(problem, backend_for(np)).ranked
              if a != "separable"]
    assert ranked[0] in first, ranked
    if "gemm" in first:
        assert ranked.index("fft") > max(ranked.index(a) for a in ("direct", "gemm")), ranked
    else:
        assert "gemm" in ranked[2:], ranked


@pytest.fixture(params=[True, False], ids=["oneMKL", "numpy.matmul"])
def on_mkl(request, monkeypatch):
    """Price gemm's products as oneMKL's or as ``numpy.matmul``'s, installed or not."""
    monkeypatch.setattr(cost.blas, "mkl", (lambda: {}) if request.param else (lambda: None))
    dispatcher.clear_cache()
    yield request.param
    dispatcher.clear_cache()


def test_a_few_output_channels_on_onemkl_plan_the_fft(on_mkl, monkeypatch):
    """3-D 8->8 24^3 3^3, batch 2, on one core (benchmarks/auto_vs_fastest.py's row):
    with 8 output channels gemm's products are (positions, 216) @ (216, 8), which oneMKL
    runs at about a third of its rate for 16 or more (``cost.CPU["mkl_narrow"]``), so
    gemm measured 7-8 ms against the FFT's 4.9-5.8 and ranks below it; on
    ``numpy.matmul`` the model keeps gemm (on two cores gemm's blocks spread over both and
    it keeps gemm either way).  On oneMKL the model plans ``winograd`` along the last axis
    (:mod:`cupyconv.backends.numpy.winograd_axis`, whose folded products are 24 rows
    wide), unmeasured on oneMKL; on ``numpy.matmul`` it measured 2.1 ms against gemm's
    2.2 and the FFT's 5.0 (one core, process CPU time, medians of 11, 2026-12-07)."""
    monkeypatch.setattr(cost, "workers", lambda: 1)
    dispatcher.clear_cache()
    problem = ConvProblem.create(x_shape=(2, 8, 24, 24, 24), w_shape=(8, 8, 3, 3, 3),
                                 padding=1, dtype=np.float32)
    try:
        ranked = dispatcher.choose(problem, backend_for(np)).ranked
    finally:
        dispatcher.clear_cache()
    if on_mkl:
        assert ranked[0] in ("fft", "winograd"), ranked
        assert ranked.index("fft") < ranked.index("gemm"), ranked
    else:
        assert ranked[0] == "gemm", ranked


@pytest.mark.parametrize("op", ["forward", "grad_weight"])
def test_a_4d_layer_on_numpy_matmul_runs_gemm_where_it_beats_the_fft(op, monkeypatch):
    """4-D 8->8 12^4 3^4, batch 1, on one core with the blocks on ``numpy.matmul``
    (OpenBLAS; oneMKL off, as on an AMD CPU): gemm measured 9.1 ms forward and 8.2 for
    the weight gradient against the FFT's 10.8 and 18.8 (process CPU time, load 1.9,
    docs/benchmarks/cpu_cost_fit.md); priced with the oneMKL-fitted work terms alone
    (``cost.CPU["matmul_work"]`` 1) ``auto`` ran the FFT.  The forward runs ``winograd``
    along the last axis first (3.5 ms against gemm's 4.5 and the FFT's 11.7, one core,
    process CPU time, medians of 11, 2026-12-07; it has no weight gradient)."""
    monkeypatch.setattr(cost, "workers", lambda: 1)
    monkeypatch.setattr(cost.blas, "mkl", lambda: None)
    dispatcher.clear_cache()
    problem = ConvProblem.create(x_shape=(1, 8, 12, 12, 12, 12), w_shape=(8, 8, 3, 3, 3, 3),
                                 padding=1, dtype=np.float32, op=op)
    try:
        ranked = dispatcher.choose(problem, backend_for(np)).ranked
    finally:
        dispatcher.clear_cache()
    first = ("winograd", "gemm") if op == "forward" else ("gemm",)
    assert ranked[:len(first) + 1] == first + ("fft",), ranked


@pytest.mark.parametrize("shape,w_shape,dtype", [
    ((2, 4, 10, 10, 10, 10), (8, 4, 3, 3, 3, 3), np.float32),
    ((1, 8, 12, 12, 12, 12), (8, 8, 3, 3, 3, 3), np.float64),
], ids=["4-D 4->8 10^4 float32", "4-D 8->8 12^4 float64"])
def test_few_channel_4d_forwards_run_gemm_on_the_extended_grid(shape, w_shape, dtype,
                                                                monkeypatch):
    """benchmarks/torch_layers.py's 4-D layers, forward, on one core with the blocks on
    ``numpy.matmul``: gemm's columns on the extended grid (``cost.grid_columns``) measured
    3.7-3.8 ms against the FFT's 4.6-8.9 (10^4 float32) and 12.0 against 15.7 (12^4
    float64; process CPU time, load 0.5-0.7, docs/benchmarks/cpu_cost_fit.md); priced as
    the channels-last columns ``auto`` ran the FFT on both.  ``winograd`` along the last
    axis, whose grouped problem runs on the same grid, ranks first on both: 2.4 ms
    against gemm's 2.4 (10^4 float32) and 5.9 against 8.7 (12^4 float64; one core,
    process CPU time, medians of 11, 2026-12-07)."""
    monkeypatch.setattr(cost, "workers", lambda: 1)
    monkeypatch.setattr(cost.blas, "mkl", lambda: None)
    dispatcher.clear_cache()
    problem = ConvProblem.create(x_shape=shape, w_shape=w_shape, padding=1, dtype=dtype)
    try:
        ranked = dispatcher.choose(problem, backend_for(np)).ranked
    finally:
        dispatcher.clear_cache()
    assert cost.grid_columns(problem) is not None
    assert ranked[:3] == ("winograd", "gemm", "fft"), ranked


@pytest.mark.parametrize("channels", [2, 8, 15])
def test_onemkl_narrow_products_cost_more_per_multiply_add(channels, on_mkl, monkeypatch):
    """gemm's multiply-add terms for K = 2-15 output channels, against the same layer at
    K = 16 (per multiply-add): ``mkl_narrow / mkl_mac`` times on oneMKL, and no jump on
    ``numpy.matmul``, where the narrow term alone grows as ``1 / K``.  The taps stay in
    the columns (a fold's tail adds multiply-adds that depend on ``K``)."""
    monkeypatch.setattr(cost.gemm_fold, "FOLD_MIN_DEPTH", math.inf)

    def per_mac(k):
        p = ConvProblem.create(x_shape=(2, 8, 24, 24, 24), w_shape=(k, 8, 3, 3, 3),
                               padding=1, dtype=np.float32)
        terms = dict(zip(cost.GEMM_KEYS, cost.gemm_terms(p)))
        return (terms["block_mac"] + terms["grid_mac"]) / k
    ratio = per_mac(channels) / per_mac(16)
    want = cost.CPU["mkl_narrow"] / cost.CPU["mkl_mac"] if on_mkl else 1.0
    assert ratio == pytest.approx(want)


@pytest.mark.parametrize("x_shape,w_shape,groups", [
    ((1, 1, 256, 256), (1, 1, 3, 3), 1),
    ((2, 32, 56, 56), (32, 1, 3, 3), 32),
], ids=["256^2 3x3", "depthwise 32ch 56^2 3x3"])
def test_the_tap_loop_ranks_above_separable_passes_on_small_3x3_problems(
        x_shape, w_shape, groups, cores):
    """Even an outer-product kernel runs the tap loop here: the separable passes' fixed
    cost per pass (``separable_pass``) and per output row and tap of the last axis
    (``separable_run``) made them measure 0.24-0.27 ms against the tap loop's 0.21 on
    256^2 3x3, 0.81-0.85 against 0.55-0.65 on the depthwise layer (one core), so ``auto``
    asks no data check of the kernel on these calls.  On the depthwise layer gemm's
    columns on the extended grid (one slice per channel and tap) measured 0.40 ms, ahead
    of both (docs/benchmarks/auto_vs_fastest.md)."""
    problem = ConvProblem.create(x_shape=x_shape, w_shape=w_shape, groups=groups, padding=1,
                                 dtype=np.float32)
    ranked = dispatcher.choose(problem, backend_for(np)).ranked
    assert ranked[0] in (("direct", "implicit_gemm") if groups == 1 else ("gemm",)), ranked
    assert ranked.index("separable") > ranked.index("direct")
