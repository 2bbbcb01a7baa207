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
