"""The CPU cost model's FFT price on the few-channel 4-D and 5-D layers of
benchmarks/torch_layers.py: ``auto`` (the dispatcher's ranking on one core, gemm's
blocks on ``numpy.matmul``, as on the AMD development VM) runs whichever of gemm and
the FFT measured faster per operation (docs/benchmarks/cpu_cost_fit.md: one core,
process CPU time, 2026-12-07).  Priced at the full linear convolution's lengths, the
gradients' FFT cost 1.3-4.2x its points and ``auto`` ran gemm for the two input
gradients while gemm was the slower there (their taps unfolded), and with the spectra allocated afresh per call the FFT measured up to 2x slower.

Not timed: the choice is read from the dispatcher's ranking.
"""
from __future__ import annotations

import numpy as np
import pytest

from cupyconv.backends import fft, fft_conv
from cupyconv.backends.numpy import cost
from cupyconv.core import ConvProblem
from cupyconv.dispatch import backend_for, dispatcher

LAYER_10 = ((2, 4, 10, 10, 10, 10), (8, 4, 3, 3, 3, 3))
LAYER_12 = ((1, 8, 12, 12, 12, 12), (8, 8, 3, 3, 3, 3))
LAYER_5D = ((1, 4) + (7,) * 5, (4, 4) + (3,) * 5)

#: (layer, dtype, operation, what runs, the ms measured: gemm / fft).  The float32 input
#: gradients run gemm since its taps fold into the GEMM's rows (backends/numpy/gemm_fold;
#: before: 8.8-10.0 / 5.8-6.1 and 6.1-6.6 / 4.7-5.3).
CHOICES = [
    (LAYER_5D, np.float32, "grad_input", "gemm", "4.2-4.6 / 5.8-6.6"),
    (LAYER_10, np.float32, "grad_input", "gemm", "3.5-5.0 / 5.0-6.5"),
    (LAYER_10, np.float64, "grad_weight", "fft", "7.7-8.1 / 6.2-7.1"),
    (LAYER_12, np.float64, "grad_weight", "gemm", "13.1-13.6 / 15.8-16.0"),
    (LAYER_12, np.float32, "grad_weight", "gemm", "7.8-9.5 / 11.3-11.6"),
    (LAYER_10, np.float32, "forward", "gemm", "3.7-4.0 / 4.4-4.7"),
]


@pytest.fixture
def one_core_matmul(monkeypatch):
    monkeypatch.setattr(cost, "workers", lambda: 1)
    monkeypatch.setattr(cost.blas, "mkl", lambda: None)
    dispatcher.clear_cache()
    yield
    dispatcher.clear_cache()


@pytest.mark.parametrize("layer,dtype,op,want,measured", CHOICES,
                         ids=[f"{c[0][0][2:]} {np.dtype(c[1]).name} {c[2]}" for c in CHOICES])
def test_auto_runs_the_faster_of_gemm_and_the_fft(layer, dtype, op, want, measured,
                                                  one_core_matmul):
    problem = ConvProblem.create(x_shape=layer[0], w_shape=layer[1], padding=1,
                                 dtype=np.dtype(dtype), op=op)
    ranked = [a for a in dispatcher.choose(problem, backend_for(np)).ranked
              if a in ("gemm", "fft")]
    assert ranked[0] == want, (ranked, measured)


def test_a_gradients_fft_is_priced_at_the_lengths_it_transforms():
    """The 5-D input gradient's transposed forward transforms 9^5 points per signal (the
    window of :func:`~cupyconv.backends.fft.fft_window`), not the 12^5 of its full
    linear convolution; its price grows with those lengths."""
    problem = ConvProblem.create(x_shape=LAYER_5D[0], w_shape=LAYER_5D[1], padding=1,
                                 dtype=np.dtype(np.float32), op="grad_input")
    forward = fft_conv.transposed_forward(problem)
    assert fft_conv.transform_lengths(forward) == (9,) * 5
    assert fft.fast_len(7 + 2 * 2) == 12
    longer = ConvProblem.create(x_shape=(1, 4) + (8,) * 5, w_shape=LAYER_5D[1], padding=1,
                                dtype=np.dtype(np.float32), op="grad_input")
    assert fft_conv.transform_lengths(fft_conv.transposed_forward(longer)) == (10,) * 5
    assert cost.predict(longer, "fft") > cost.predict(problem, "fft")
