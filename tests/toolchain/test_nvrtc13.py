"""The kernel sources compile with NVRTC 13.x too (the GPU machines' CuPy for CUDA 13).

CI's CuPy loads NVRTC 12.x; ``scripts/test.sh`` installs the ``nvidia-cuda-nvrtc`` 13 wheel
into its own folder, ``.nvrtc13/`` at the repository root (installed into the environment
it would become the NVRTC that CuPy loads), or ``CUPYCONV_NVRTC13_DIR`` names one.  A
subprocess selects ``libnvrtc.so.13`` from it with
``CUPYCONV_NVRTC`` (one NVRTC library per process) and builds every family's rank-3
kernels, every dtype, for sm_90, into a fresh cache; every kernel must compile without
spills in the hot families.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from limits import child_limit
from toolchain_support import nvrtc13_library as _nvrtc13


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
        pytest.skip("NVRTC 13 is not in .nvrtc13/ (bash scripts/test.sh installs it there)")
    env = dict(os.environ, CUPYCONV_NVRTC=lib)
    from cupyconv._kernels import registry
    kernels = len(registry.instantiations(ranks=(3,)))     # ~0.15 s of NVRTC each, idle
    proc = subprocess.run([sys.executable, "-c", _SCRIPT.format(root=str(tmp_path))], env=env,
                          capture_output=True, text=True, timeout=child_limit(kernels, 0.15))
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["version"][0] == 13 and out["library"] == lib, out
    from cupyconv._kernels import registry
    expected = {i.name for i in registry.instantiations(ranks=(3,))
                if not registry.FAMILIES[i.family].arch_specific}       # sm_80/sm_90 builds
    assert {k[1] for k in out["kernels"]} == expected
    hot = {name: spills for family, name, spills, _ in out["kernels"]
           if registry.FAMILIES[family].hot and spills}
    assert hot == {}
    assert all(regs > 0 for *_, regs in out["kernels"])


_K16_SCRIPT = textwrap.dedent("""
    import json
    from pathlib import Path
    from cupyconv._compile import _nvrtc, nvrtc_version
    from cupyconv._compile.build import compile_options, parse_ptxas_log
    from cupyconv._paths import cuda_src_dir
    source = Path({source!r})
    out = {{"version": list(nvrtc_version())}}
    for arch, names in {names!r}.items():
        _, log, lowered = _nvrtc.compile_program(source.read_text(), str(source),
                                                 compile_options(arch) + ("-I" + str(cuda_src_dir()),),
                                                 names)
        usage = parse_ptxas_log(log)
        out[arch] = {{n: usage[lowered[n]]["spill_stores"] for n in names}}
    print(json.dumps(out))
""")


def test_mma_atoms_and_swizzle_compile_with_nvrtc13():
    """The bf16 / f64 m16n8k16 atoms, the swizzle and the swizzled pipeline
    (tests/emulation/kernels/mma_k16.cu) build under NVRTC 13 for sm_80 and sm_90, no spills."""
    lib = _nvrtc13()
    if not lib:
        pytest.skip("NVRTC 13 is not in .nvrtc13/ (bash scripts/test.sh installs it there)")
    from test_mma_nvrtc import KERNEL_K16, k16_names
    names = {arch: k16_names(arch) for arch in ("sm_80", "sm_90")}
    proc = subprocess.run([sys.executable, "-c", _K16_SCRIPT.format(source=str(KERNEL_K16),
                                                                    names=names)],
                          env=dict(os.environ, CUPYCONV_NVRTC=lib), capture_output=True,
                          text=True, timeout=child_limit(sum(map(len, names.values())), 10.0))
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["version"][0] == 13
    assert {arch: sorted(out[arch]) for arch in names} == {a: sorted(n) for a, n in names.items()}
    assert all(s == 0 for arch in names for s in out[arch].values())
