"""``import cupyconv`` loads no optional dependency: ``ml_dtypes`` (bfloat16), CuPy and
Dask are imported when first used, and bfloat16 still works once the user imports
``ml_dtypes`` after cupyconv."""
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
OPTIONAL = ("ml_dtypes", "cupy", "dask", "threadpoolctl")


def _child(code):
    """The JSON a fresh interpreter prints after running ``code``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(cupyconv.__file__))]
        + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=child_limit(), check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_loads_no_optional_dependency():
    loaded = _child("import sys, json, cupyconv\n"
                    f"print(json.dumps([m for m in {OPTIONAL!r} if m in sys.modules]))")
    assert loaded == []


def test_a_numpy_call_loads_no_optional_dependency():
    """A CPU convolution and an ndimage filter keep ml_dtypes, CuPy and Dask unloaded."""
    loaded = _child("import sys, json, numpy as np, cupyconv\n"
                    "cupyconv.convolve(np.ones((8, 8), np.float32), np.ones((3, 3)), 'same')\n"
                    "cupyconv.ndimage.uniform_filter(np.ones((8, 8), np.float16), 3)\n"
                    f"print(json.dumps([m for m in ('ml_dtypes', 'cupy', 'dask') "
                    "if m in sys.modules]))")
    assert loaded == []


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
