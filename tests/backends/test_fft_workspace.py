"""The FFT's reported workspace is what its run allocates: on both backends that run it
on NumPy arrays (``numpy`` and the emulated CUDA path), the bytes the dispatcher weighs
(``backend.workspace_bytes(problem, "fft")``) bound the peak the run allocates beyond
its result, measured by ``tracemalloc`` (which NumPy reports its buffers to), and are
within a small factor of it.

One case per path the FFT takes: zero padding (same, valid, full), a padded copy
(reflect, wrap), dilation, stride, groups, complex data, integer data (float64
transforms), spectra in the reused per-thread buffers (``arrays.reused``), a long 1-D
depthwise signal (overlap-add), one image and channel (SciPy's ``fftconvolve`` on the
NumPy backend), the input gradient (strided: ``dy`` upsampled; complex: the adjoint's
conjugated weights) and the weight gradient (groups and images regrouped; complex).
"""
from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest

import cupyconv
from cupyconv.backends import arrays
from cupyconv.core.problem import ConvProblem, Operands
from cupyconv.dispatch import backends

#: tracemalloc also counts the Python objects a call makes (the program's environment,
#: tuples, small index arrays): a few KiB whatever the sizes, which no array count holds.
PYTHON_OBJECTS = 16 << 10
#: The reported bytes bound every way the run can go (CuPy's unpruned transforms, NumPy's
#: in-place passes in reused buffers), so on one of them they may be above its peak, by
#: at most this factor (measured: 0.99-2.7x on random problems of 100 kB or more).
FACTOR = 3

_P = ConvProblem.create
CASES = {
    "same": _P(x_shape=(2, 3, 40, 36), w_shape=(4, 3, 5, 5), padding=2, dtype="float32"),
    "valid": _P(x_shape=(2, 3, 40, 36), w_shape=(4, 3, 5, 5), dtype="float32"),
    "full": _P(x_shape=(2, 3, 40, 36), w_shape=(4, 3, 5, 5), padding=4, dtype="float32"),
    "reflect dilated": _P(x_shape=(2, 2, 30, 30), w_shape=(2, 2, 3, 3), padding=2, dilation=2,
                          padding_mode="reflect", dtype="float64"),
    "wrap strided 1-D": _P(x_shape=(1, 4, 3005), w_shape=(3, 4, 4), stride=3, padding=2,
                           padding_mode="wrap", dtype="float64"),
    "3-D strided": _P(x_shape=(1, 2, 20, 18, 16), w_shape=(3, 2, 3, 3, 3), padding=1,
                      stride=2, dtype="float64"),
    "complex groups": _P(x_shape=(2, 4, 24, 24), w_shape=(4, 2, 3, 3), padding=1, groups=2,
                         dtype="complex128"),
    "int32": _P(x_shape=(1, 2, 32, 32), w_shape=(2, 2, 3, 3), padding=1, dtype="int32"),
    "reused spectra": _P(x_shape=(2, 4, 128, 128), w_shape=(4, 4, 7, 7), padding=3,
                         dtype="float32"),
    "one signal": _P(x_shape=(1, 1, 256, 256), w_shape=(1, 1, 9, 9), padding=4,
                     dtype="float32"),
    "long 1-D depthwise": _P(x_shape=(2, 1, 20000), w_shape=(1, 1, 31), padding=15,
                             dtype="float32"),
    "input gradient strided": _P(x_shape=(2, 3, 31, 29), w_shape=(4, 3, 3, 3), padding=1,
                                 stride=2, dtype="float64", op="grad_input"),
    "input gradient complex": _P(x_shape=(2, 4, 21, 7), w_shape=(4, 4, 5, 6), stride=3,
                                 dtype="complex128", op="grad_input"),
    "weight gradient": _P(x_shape=(4, 8, 64, 64), w_shape=(8, 8, 3, 3), padding=1,
                          dtype="float32", op="grad_weight"),
    "weight gradient groups": _P(x_shape=(3, 8, 34, 25), w_shape=(2, 4, 6, 7), groups=2,
                                 stride=2, padding=1, dtype="float64", op="grad_weight"),
    "weight gradient complex": _P(x_shape=(2, 2, 3342), w_shape=(1, 2, 7), stride=2,
                                  dilation=2, padding=1, dtype="complex128",
                                  op="grad_weight"),
}


def _operands(problem, rng):
    def array(shape):
        a = rng.standard_normal(shape)
        if problem.dtype.kind == "c":
            a = a + 1j * rng.standard_normal(shape)
        return np.round(3 * a).astype(problem.dtype)
    shapes = {"forward": ("activation", "filter"), "grad_input": ("output", "filter"),
              "grad_weight": ("activation", "output")}[problem.op]
    shape = {"activation": problem.x_shape, "filter": problem.w_shape,
             "output": problem.y_shape}
    return Operands(**{role: array(shape[role]) for role in shapes})


@pytest.mark.parametrize("backend", ["numpy", "emulated"])
@pytest.mark.parametrize("case", list(CASES))
def test_the_fft_workspace_bounds_what_its_run_allocates(backend, case):
    if backend not in cupyconv.available_backends():
        pytest.skip(f"backend {backend!r} is not available here")
    engine = backends.backend_for(np, backend)
    problem, operands = engine.prepare(CASES[case], _operands(CASES[case],
                                                              np.random.default_rng(0)))
    if not engine.can_implement(problem, "fft")[0]:
        pytest.skip(engine.can_implement(problem, "fft")[1])
    limit = 1 << 40
    reported = engine.workspace_bytes(problem, "fft", limit)
    engine.run(problem, "fft", operands, limit)     # its programs and caches built
    arrays._REUSED.clear()                          # its reused spectra: allocated afresh
    gc.collect()
    tracemalloc.start()
    try:
        y = engine.run(problem, "fft", operands, limit)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    allocated = peak - y.nbytes
    assert allocated <= reported + PYTHON_OBJECTS, (reported, allocated)
    assert reported <= FACTOR * allocated, (reported, allocated)
