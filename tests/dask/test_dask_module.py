"""Import behaviour, a distributed end-to-end run and CuPy chunks."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import scipy.signal

import cupyconv
from helpers import require_cuda
from limits import child_limit

da = pytest.importorskip("dask.array")
cdask = pytest.importorskip("cupyconv.dask")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _python(code):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=child_limit())


def test_core_import_does_not_import_dask():
    proc = _python("""
        import sys, cupyconv
        assert not any(m == "dask" or m.startswith("dask.") for m in sys.modules), "dask imported"
        import cupyconv.dask
        assert "dask.array" in sys.modules
    """)
    assert proc.returncode == 0, proc.stderr


def test_missing_dask_names_the_extra():
    proc = _python("""
        import sys
        sys.modules["dask"] = None            # as if Dask were not installed
        import cupyconv
        try:
            import cupyconv.dask
        except ImportError as exc:
            print(exc)
        else:
            raise SystemExit("no ImportError")
    """)
    assert proc.returncode == 0, proc.stderr
    assert "pip install -e '.[dask]'" in proc.stdout and "from a checkout" in proc.stdout


def test_local_cluster_end_to_end():
    distributed = pytest.importorskip("distributed")
    rng = np.random.default_rng(3)
    vol = rng.standard_normal((24, 20, 18))
    psf = rng.standard_normal((5, 3, 4))
    x = rng.standard_normal((3, 2, 17, 16))
    w = rng.standard_normal((4, 2, 3, 3))
    with distributed.LocalCluster(processes=False, n_workers=2, threads_per_worker=1,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        y1 = cdask.convolve(da.from_array(vol, chunks=(7, 10, 5)), psf, "same")
        y2 = cdask.correlate(da.from_array(vol, chunks=8), psf, "valid")
        y3 = cdask.conv(da.from_array(x, chunks=(2, 1, 6, 5)), w, stride=2, padding=1,
                        padding_mode="reflect")
        r1, r2, r3 = client.compute([y1, y2, y3], sync=True)
    np.testing.assert_allclose(r1, scipy.signal.convolve(vol, psf, "same"), atol=1e-10)
    np.testing.assert_allclose(r2, scipy.signal.correlate(vol, psf, "valid"), atol=1e-10)
    np.testing.assert_allclose(r3, cupyconv.conv(x, w, stride=2, padding=1,
                                                 padding_mode="reflect"), atol=1e-12)


def _cupy_or_skip():
    return require_cuda()


@pytest.mark.gpu
def test_cupy_chunks():
    cupy = _cupy_or_skip()
    rng = np.random.default_rng(4)
    vol = rng.standard_normal((20, 18, 16))
    psf = rng.standard_normal((3, 5, 3))
    xd = da.from_array(cupy.asarray(vol), chunks=(8, 7, 16), asarray=False)
    y = cdask.convolve(xd, cupy.asarray(psf), "same")
    assert isinstance(y._meta, cupy.ndarray)
    got = y.compute()
    assert isinstance(got, cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(got), scipy.signal.convolve(vol, psf, "same"),
                               atol=1e-10)
    x = rng.standard_normal((2, 3, 12, 10))
    w = rng.standard_normal((4, 3, 3, 3))
    yc = cdask.conv(da.from_array(cupy.asarray(x), chunks=(1, 3, 5, 4), asarray=False),
                    cupy.asarray(w), padding="same", padding_mode="wrap").compute()
    np.testing.assert_allclose(cupy.asnumpy(yc), cupyconv.conv(x, w, padding="same",
                                                               padding_mode="wrap"), atol=1e-10)


def test_numpy_chunks_with_cupy_kernel_is_a_type_error():
    from helpers import FakeCupyArray

    with pytest.raises(TypeError, match="in1 is a NumPy .* in2 is a CuPy"):
        cdask.convolve(da.ones(8, chunks=4), FakeCupyArray((3,)))
    with pytest.raises(TypeError, match="x is a NumPy .* w is a CuPy"):
        cdask.conv(da.ones((1, 1, 8), chunks=4), FakeCupyArray((1, 1, 3)))
