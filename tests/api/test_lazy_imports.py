"""``import cupyconv`` loads no optional dependency: ``ml_dtypes`` (bfloat16), CuPy,
Dask, PyTorch and tqdm are imported when first used, and bfloat16 still works once the
user imports ``ml_dtypes`` after cupyconv.  Nor does it load the CUDA path (the CUDA
backend, the toolchain, the emulator, the kernel table): those load when the ``cuda`` or
``emulated`` backend is first selected."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import cupyconv
from limits import child_limit

#: Modules ``import cupyconv`` must leave unloaded.
OPTIONAL = ("ml_dtypes", "cupy", "dask", "threadpoolctl", "torch", "tqdm")
#: The CUDA path's modules: loaded when the ``cuda`` or ``emulated`` backend is first used.
CUDA_PATH = ("cupyconv.backends.cuda", "cupyconv._compile", "cupyconv._emulation",
             "cupyconv._kernels.registry", "cupyconv._kernels.launch")


def _child(code):
    """The JSON a fresh interpreter prints after running ``code``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(cupyconv.__file__))]
        + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=child_limit(), check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_loads_no_optional_dependency_and_not_the_cuda_path():
    loaded = _child("import sys, json, cupyconv\n"
                    f"print(json.dumps([m for m in {OPTIONAL + CUDA_PATH!r} "
                    "if m in sys.modules]))")
    assert loaded == []


def test_a_numpy_call_loads_no_optional_dependency_and_not_the_cuda_path():
    """CPU calls (signal, layer, ndimage, an explicit fft, which scans its data for
    non-finite values) keep the optional dependencies but threadpoolctl (the CPU thread guard) and
    the CUDA path unloaded."""
    unloaded = tuple(m for m in OPTIONAL if m != "threadpoolctl") + CUDA_PATH
    loaded = _child("import sys, json, numpy as np, cupyconv\n"
                    "cupyconv.convolve(np.ones((8, 8), np.float32), np.ones((3, 3)), 'same')\n"
                    "cupyconv.convolve(np.ones((16, 16)), np.ones((5, 5)), method='fft')\n"
                    "x, w = np.ones((1, 2, 9, 9), np.float32), np.ones((3, 2, 3, 3), np.float32)\n"
                    "cupyconv.conv(x, w, padding='same')\n"
                    "cupyconv.ndimage.uniform_filter(np.ones((8, 8), np.float16), 3)\n"
                    "cupyconv.ndimage.sobel(np.ones((8, 8), np.float32))\n"
                    f"print(json.dumps([m for m in {unloaded!r} if m in sys.modules]))")
    assert loaded == []


def test_the_cuda_path_loads_when_a_cuda_path_backend_is_selected():
    """``available_backends()`` answers from a fresh import, and selecting ``emulated``
    loads the CUDA backend and runs on it (a plan there names its kernel, from the kernel
    table), as on a GPU machine ``cuda`` would."""
    if "emulated" not in cupyconv.available_backends():
        pytest.skip("the emulated backend is unavailable here (no C++ compiler)")
    got = _child("import sys, json, numpy as np, cupyconv\n"
                 "names = cupyconv.available_backends()\n"
                 "before = 'cupyconv.backends.cuda' in sys.modules\n"
                 "with cupyconv.use_backend('emulated'):\n"
                 "    y = cupyconv.convolve(np.arange(6.0), np.ones(2), 'valid')\n"
                 "    said = cupyconv.plan_conv((1, 1, 6), (1, 1, 2), np.float64).explain()\n"
                 "print(json.dumps([names, before, 'cupyconv.backends.cuda' in sys.modules,\n"
                 "                  said, y.tolist()]))")
    names, before, after, said, y = got
    assert names == cupyconv.available_backends()
    assert (before, after) == (False, True)
    assert "CPU emulator of the CUDA kernels" in said and "\nkernel: " in said
    assert y == np.convolve(np.arange(6.0), np.ones(2), "valid").tolist()


def test_bfloat16_works_when_ml_dtypes_is_imported_after_cupyconv():
    pytest.importorskip("ml_dtypes")
    got = _child("import json, numpy as np, cupyconv, ml_dtypes\n"
                 "a = np.arange(12, dtype=np.float32).reshape(3, 4).astype(ml_dtypes.bfloat16)\n"
                 "k = np.ones((2, 2), ml_dtypes.bfloat16)\n"
                 "y = cupyconv.convolve(a, k, 'valid')\n"
                 "print(json.dumps([str(y.dtype), y.astype(np.float32).tolist()]))")
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    want = a[:-1, :-1] + a[1:, :-1] + a[:-1, 1:] + a[1:, 1:]     # small integers: exact
    assert got[0] == "bfloat16" and np.array_equal(np.array(got[1]), want)
