"""The CUDA path's GEMMs set cuBLAS's compute type explicitly (issue 12: TF32 only under
``precision="tf32"``, never by an environment variable left to chance) and restore it.  The method is called on a stand-in
whose ``_cupy.matmul`` records the compute type in force (CuPy's compute-type getter needs
a CUDA runtime and driver, so this is a GPU test)."""
from __future__ import annotations

import numpy as np
import pytest

from cupyconv.backends.cuda.runners import CupyRunner  # noqa: E402

from helpers import require_cuda  # noqa: E402

pytestmark = pytest.mark.gpu


class _Recorder:
    def __init__(self, linalg):
        self.seen, self.linalg = [], linalg

    def matmul(self, a, b, out=None):
        self.seen.append(self.linalg.get_compute_type(np.float32))
        return np.matmul(a, b, out=out)


def test_float32_gemm_runs_in_float32_whatever_the_default():
    require_cuda()
    from cupy._core import _routines_linalg as linalg
    stand_in = type("R", (), {})()
    stand_in._cupy = _Recorder(linalg)
    before = linalg.get_compute_type(np.float32)
    try:
        linalg.set_compute_type(np.float32, linalg.COMPUTE_TYPE_TF32)   # as CUPY_TF32=1 would
        a = np.ones((2, 3), np.float32)
        np.testing.assert_array_equal(CupyRunner.matmul(stand_in, a, a.T), a @ a.T)
        assert stand_in._cupy.seen == [linalg.COMPUTE_TYPE_FP32]
        assert linalg.get_compute_type(np.float32) == linalg.COMPUTE_TYPE_TF32   # restored
    finally:
        linalg.set_compute_type(np.float32, before)


def test_tf32_precision_asks_cublas_for_tf32_and_restores():
    """``precision="tf32"`` sets cuBLAS's TF32 compute type for float32 (tensor cores on
    the gemm path) for the call only."""
    require_cuda()
    from cupy._core import _routines_linalg as linalg
    stand_in = type("R", (), {})()
    stand_in._cupy = _Recorder(linalg)
    before = linalg.get_compute_type(np.float32)
    try:
        linalg.set_compute_type(np.float32, linalg.COMPUTE_TYPE_FP32)
        a = np.ones((2, 3), np.float32)
        CupyRunner.matmul(stand_in, a, a.T, precision="tf32")
        CupyRunner.matmul(stand_in, a, a.T)
        assert stand_in._cupy.seen == [linalg.COMPUTE_TYPE_TF32, linalg.COMPUTE_TYPE_FP32]
        assert linalg.get_compute_type(np.float32) == linalg.COMPUTE_TYPE_FP32
    finally:
        linalg.set_compute_type(np.float32, before)
