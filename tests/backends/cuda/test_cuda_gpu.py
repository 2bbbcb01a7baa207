"""GPU-only behaviour: streams and CuPy's memory pool (skipped without a device)."""
from __future__ import annotations

import numpy as np
import pytest

import cupyconv
from helpers import ref_conv, small_ints

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("method", ["direct", "implicit_gemm", "gemm", "fft"])
def test_runs_on_the_current_stream(cupy, rng, method):
    x = small_ints(rng, (2, 3, 17, 9, 5), np.float32)
    w = small_ints(rng, (4, 3, 3, 2, 3), np.float32)
    dx, dw = cupy.asarray(x), cupy.asarray(w)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        y = cupyconv.conv(dx, dw, padding=1, method=method)
        done = cupy.cuda.Event()
        done.record(stream)
    done.synchronize()
    np.testing.assert_allclose(y.get(), ref_conv(x, w, padding=1), rtol=1e-6, atol=1e-4)


def test_pool_limit_forces_fallback(cupy, rng):
    """A memory-pool limit below gemm's column buffer: the answer still comes back."""
    from cupyconv.core.problem import ConvProblem, Operands
    from cupyconv.dispatch import backend_for, dispatcher
    x = small_ints(rng, (4, 8, 32, 32, 32), np.float32)
    w = small_ints(rng, (8, 8, 3, 3, 3), np.float32)
    dx, dw = cupy.asarray(x), cupy.asarray(w)
    p = ConvProblem.create(x_shape=x.shape, w_shape=w.shape, padding=1, dtype=np.float32)
    pool = cupy.get_default_memory_pool()
    limit = pool.get_limit()
    pool.set_limit(size=pool.used_bytes() + 4 * p.output_size * 4)   # y fits, columns do not
    stats = {}
    try:
        y, name = dispatcher.run(p, Operands(activation=dx, filter=dw), backend_for(cupy),
                                 method="gemm", stats=stats, workspace_limit=p.column_bytes())
    finally:
        pool.set_limit(size=limit)
    assert name != "gemm" and stats["fallbacks"]
    np.testing.assert_allclose(y.get(), ref_conv(x, w, padding=1), rtol=1e-6, atol=1e-3)


def test_device_info_is_queried(cupy):
    from cupyconv.backends.cuda import runners
    info = runners.CupyRunner().device
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    assert info.sm_count == props["multiProcessorCount"]
    assert info.bandwidth > 1e11 and info.free_memory > 0
