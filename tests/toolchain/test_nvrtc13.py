"""The kernel sources compile with NVRTC 13.x too (the GPU machines' CuPy for CUDA 13).

CI's CuPy loads NVRTC 12.x; the ``nvidia-cuda-nvrtc`` 13 wheel of the test extra puts
``libnvrtc.so.13`` in ``nvidia/cu13/lib``.  A subprocess selects it with
``CUPYCONV_NVRTC`` (one NVRTC library per process) and builds every family's rank-3
kernels, every dtype, for sm_90, into a fresh cache; every kernel must compile without
spills in the hot families.
"""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import textwrap

import pytest


def _nvrtc13() -> str:
    try:
        import nvidia
    except ImportError:
        return ""
    found = [f for base in nvidia.__path__ for f in glob.glob(os.path.join(base, "cu13", "lib", "libnvrtc.so.13*"))
             if ".alt." not in f]
    return sorted(found)[0] if found else ""


_SCRIPT = textwrap.dedent("""
    import json
    from pathlib import Path
    from cupyconv._compile import nvrtc_version
    from cupyconv._compile._nvrtc import library_path
    from cupyconv._compile.build import build
    reports = build(archs=("sm_90",), ranks=(3,), progress=False, root=Path({root!r}))
    print(json.dumps({{"version": list(nvrtc_version()), "library": library_path(),
                      "kernels": [[r.family, r.name, r.spills, r.registers] for r in reports]}}))
""")


def test_every_family_compiles_with_nvrtc13(tmp_path):
    lib = _nvrtc13()
    if not lib:
        pytest.skip("the nvidia-cuda-nvrtc 13 wheel is not installed (pip install -e '.[test]')")
    env = dict(os.environ, CUPYCONV_NVRTC=lib)
    proc = subprocess.run([sys.executable, "-c", _SCRIPT.format(root=str(tmp_path))], env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["version"][0] == 13 and out["library"] == lib, out
    from cupyconv._kernels import registry
    expected = {i.name for i in registry.instantiations(ranks=(3,))}
    assert {k[1] for k in out["kernels"]} == expected
    hot = {name: spills for family, name, spills, _ in out["kernels"]
           if registry.FAMILIES[family].hot and spills}
    assert hot == {}
    assert all(regs > 0 for *_, regs in out["kernels"])
