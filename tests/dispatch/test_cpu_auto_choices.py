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
    ("3-D 64^3 3^3", (64, 64, 64), (3, 3, 3), "direct"),
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


@pytest.mark.parametrize("shape,kernel", [((512, 512), (5, 5)), ((64, 64, 64), (3, 3, 3))])
def test_ndimage_convolve_ranks_the_tap_loop_above_gemm_and_fft(shape, kernel, cores):
    """ndimage's mirrored boundary (``symmetric``): the tap loop, not gemm or the FFT
    (``separable`` ranks first by the model and is asked of the data)."""
    problem = ConvProblem.create(x_shape=(1, 1) + shape, w_shape=(1, 1) + kernel,
                                 padding=[k // 2 for k in kernel], padding_mode="symmetric",
                                 dtype=np.float32)
    ranked = [a for a in dispatcher.choose(problem, backend_for(np)).ranked
              if a != "separable"]
    assert ranked[0] in ("direct", "implicit_gemm") and "gemm" in ranked[2:], ranked


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
    gemm measured 7-8 ms against the FFT's 4.9-5.8; on ``numpy.matmul`` the model keeps
    gemm (on two cores gemm's blocks spread over both and it keeps gemm either way)."""
    monkeypatch.setattr(cost, "workers", lambda: 1)
    plan = cupyconv.plan_conv((2, 8, 24, 24, 24), (8, 8, 3, 3, 3), np.float32, padding=1,
                              backend="numpy")
    assert plan.algorithm == ("fft" if on_mkl else "gemm")


@pytest.mark.parametrize("op", ["forward", "grad_weight"])
def test_a_4d_layer_on_numpy_matmul_runs_gemm_where_it_beats_the_fft(op, monkeypatch):
    """4-D 8->8 12^4 3^4, batch 1, on one core with the blocks on ``numpy.matmul``
    (OpenBLAS; oneMKL off, as on an AMD CPU): gemm measured 9.1 ms forward and 8.2 for
    the weight gradient against the FFT's 10.8 and 18.8 (process CPU time, load 1.9,
    docs/benchmarks/cpu_cost_fit.md); priced with the oneMKL-fitted work terms alone
    (``cost.CPU["matmul_work"]`` 1) ``auto`` ran the FFT."""
    monkeypatch.setattr(cost, "workers", lambda: 1)
    monkeypatch.setattr(cost.blas, "mkl", lambda: None)
    dispatcher.clear_cache()
    problem = ConvProblem.create(x_shape=(1, 8, 12, 12, 12, 12), w_shape=(8, 8, 3, 3, 3, 3),
                                 padding=1, dtype=np.float32, op=op)
    try:
        ranked = dispatcher.choose(problem, backend_for(np)).ranked
    finally:
        dispatcher.clear_cache()
    assert ranked[0] == "gemm" and ranked.index("fft") == 1, ranked


@pytest.mark.parametrize("channels", [2, 8, 15])
def test_onemkl_narrow_products_cost_more_per_multiply_add(channels, on_mkl):
    """gemm's multiply-add terms for K = 2-15 output channels, against the same layer at
    K = 16 (per multiply-add): ``mkl_narrow / mkl_mac`` times on oneMKL, and no jump on
    ``numpy.matmul``, where the narrow term alone grows as ``1 / K``."""
    def per_mac(k):
        p = ConvProblem.create(x_shape=(2, 8, 24, 24, 24), w_shape=(k, 8, 3, 3, 3),
                               padding=1, dtype=np.float32)
        terms = dict(zip(cost.GEMM_KEYS, cost.gemm_terms(p)))
        return terms["block_mac"] / k
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
    asks no data check of the kernel on these calls."""
    problem = ConvProblem.create(x_shape=x_shape, w_shape=w_shape, groups=groups, padding=1,
                                 dtype=np.float32)
    ranked = dispatcher.choose(problem, backend_for(np)).ranked
    assert ranked[0] in ("direct", "implicit_gemm")
    assert ranked.index("separable") > ranked.index("direct")
